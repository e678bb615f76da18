package outbox

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/observe/traceparent"
	"github.com/riffdb/riffdb/primary"
)

// links returns span links to the commit spans of the members.
func links(members []primary.Intent) []trace.Link {
	out := make([]trace.Link, 0, len(members))
	for _, m := range members {
		if m.TraceParent == "" {
			continue
		}
		if sc := traceparent.SpanContext(m.TraceParent); sc.IsValid() {
			out = append(out, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{AttrEvent.String(m.Event.String())}})
		}
	}
	return out
}

// claim runs the claim transaction under a riffdb.outbox.claim span linked
// to the members' commit spans. It returns a context carrying that span, so
// that the members' lease renewals and archive transactions are its children.
func (w *Worker) claim(ctx context.Context, run []primary.Intent, lease time.Time) (context.Context, []primary.Intent, error) {
	in := w.inst
	// The links and attributes are given once the span is known to record
	// (riffdb's sampler reads neither): a span that does not (not sampled,
	// or no exporter) would only format ids for nothing.
	ctx, span := in.tracer.Start(ctx, "riffdb.outbox.claim")
	if span.IsRecording() {
		for _, l := range links(run) {
			span.AddLink(l)
		}
		span.SetAttributes(in.db, attrBatch.Int(len(run)),
			AttrFirst.String(run[0].Event.String()), AttrLast.String(run[len(run)-1].Event.String()))
	}
	start := time.Now()
	claimed, err := w.src.Claim(ctx, run, lease)
	set := in.dbRecord
	if err != nil {
		set = in.claimFailed
	}
	in.claimDur.Record(ctx, time.Since(start).Seconds(), set...)
	if err == nil {
		in.claimSize.Record(ctx, int64(len(claimed)), set...)
	}
	endSpan(span, err, "claim_failed")
	return ctx, claimed, err
}

func (w *Worker) renew(ctx context.Context, m primary.Intent, lease time.Time) (primary.Intent, error) {
	in := w.inst
	ctx, span := in.tracer.Start(ctx, "riffdb.outbox.lease.renew",
		trace.WithAttributes(in.db, AttrEvent.String(m.Event.String()), AttrAttempt.Int(int(m.Attempts))))
	start := time.Now()
	out, err := w.src.Renew(ctx, m, lease)
	in.renewDur.Record(ctx, time.Since(start).Seconds(), in.dbRecord...)
	endSpan(span, err, "renew_failed")
	return out, err
}

// accept runs one archive transaction for member m under ctx, a run's
// acceptance context (acceptContext: the delivery timeout, and not the
// pass's cancellation). The archive records its own riffdb.archive.txn span
// as a child.
func (w *Worker) accept(ctx context.Context, key event.Key, record []byte) (deliverytype.Outcome, error) {
	outcome, err := w.dst.Accept(ctx, key, record)
	return outcome, marked(err)
}

// archived records the delivery lag of the members of a confirmed group:
// from each one's commit until now, when its acceptance is known durable,
// under its run's context (ctxs[i]: the claim span, for the exemplars).
func (w *Worker) archived(ctxs []context.Context, group []primary.Intent) {
	now := w.clock.Now()
	for i, m := range group {
		if !m.CommittedAt.IsZero() {
			w.inst.lag.Record(ctxs[i], now.Sub(m.CommittedAt).Seconds(), w.inst.dbRecord...)
		}
	}
}

func (w *Worker) complete(ctx context.Context, group []primary.Intent, reason string) error {
	in := w.inst
	ctx, span := in.tracer.Start(ctx, "riffdb.outbox.completion.flush")
	if span.IsRecording() { // as in claim
		span.SetAttributes(in.db, AttrReason.String(reason), attrBatch.Int(len(group)),
			AttrFirst.String(group[0].Event.String()), AttrLast.String(group[len(group)-1].Event.String()))
	}
	start := time.Now()
	err := w.src.CompleteDeferred(ctx, group)
	set, ok := in.flushRecord[reason]
	if !ok {
		set = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(in.db, AttrReason.String(reason)))}
	}
	in.flushDur.Record(ctx, time.Since(start).Seconds(), set...)
	if err == nil {
		in.flushSize.Record(ctx, int64(len(group)), set...)
	}
	endSpan(span, err, "complete_failed")
	return err
}
