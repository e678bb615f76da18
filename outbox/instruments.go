package outbox

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/internal/observe/attrkey"
)

// ScopeName is the instrumentation scope of the worker's spans and metrics.
const ScopeName = "github.com/riffdb/riffdb/outbox"

// Attribute keys used on spans and metrics. Ids go on spans only.
const (
	AttrDatabase = attrkey.Database
	AttrReason   = attrkey.Reason
	AttrResult   = attribute.Key("riffdb.result")
	AttrState    = attribute.Key("riffdb.outbox.state")
	AttrEvent    = attrkey.EventID
	AttrAttempt  = attribute.Key("riffdb.outbox.attempt")
	AttrFirst    = attribute.Key("riffdb.outbox.first_event")
	AttrLast     = attribute.Key("riffdb.outbox.last_event")
	attrBatch    = attribute.Key("messaging.batch.message_count")
	attrErrType  = attribute.Key("error.type")
)

// LagBuckets are the delivery-lag histogram boundaries, in seconds. From
// 0.5 ms to 100 ms, where a healthy worker's lag lies, each boundary is at
// most 1.5 times the one before, so that a p99 interpolated within a bucket
// (histogram_quantile, the soak's targets) is off by less than half of it;
// above, the buckets only need to tell a slow delivery from a stalled one.
// Every boundary of the earlier layout (1, 2.5, 5, 10, 25, 50 ms, …) is
// kept, so that queries on one of them go on working.
var LagBuckets = []float64{
	0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.0025, 0.003, 0.004, 0.005, 0.0075,
	0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1,
	0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600,
}

type instruments struct {
	tracer        trace.Tracer
	claimDur      metric.Float64Histogram
	claimSize     metric.Int64Histogram
	flushDur      metric.Float64Histogram
	flushSize     metric.Int64Histogram
	renewDur      metric.Float64Histogram
	deadLetters   metric.Int64Counter
	retries       metric.Int64Counter
	lag           metric.Float64Histogram
	registrations []metric.Registration
	db            attribute.KeyValue
	dbSet         metric.MeasurementOption // {db}, built once
	// dbRecord is dbSet as the option slice Record takes: passing dbSet
	// alone would make a one-element slice of it per call (per event for
	// the delivery lag).
	dbRecord []metric.RecordOption
	// claimFailed and flushRecord are the attribute sets of the claim's
	// failures and of each completion flush reason, as the slices Record
	// takes, built once instead of per claim and per flush.
	claimFailed []metric.RecordOption
	flushRecord map[string][]metric.RecordOption
}

func newInstruments(opts Options, health func() Health) (*instruments, error) {
	tp, mp := opts.TracerProvider, opts.MeterProvider
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	m := mp.Meter(ScopeName)
	in := &instruments{tracer: tp.Tracer(ScopeName), db: AttrDatabase.String(opts.Alias)}
	in.dbSet = metric.WithAttributeSet(attribute.NewSet(in.db))
	in.dbRecord = []metric.RecordOption{in.dbSet}
	in.claimFailed = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(in.db, attrErrType.String("claim_failed")))}
	in.flushRecord = make(map[string][]metric.RecordOption, 3)
	for _, r := range []string{flushBound, flushPageEnd, flushFailure} {
		in.flushRecord[r] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(in.db, AttrReason.String(r)))}
	}
	var err error
	if in.claimDur, err = m.Float64Histogram("riffdb.outbox.claim.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of one claim transaction on the primary.")); err != nil {
		return nil, err
	}
	if in.claimSize, err = m.Int64Histogram("riffdb.outbox.claim.batch.size", metric.WithUnit("{event}"),
		metric.WithDescription("Members per claim run (1..16)."),
		metric.WithExplicitBucketBoundaries(1, 2, 4, 8, 12, 16)); err != nil {
		return nil, err
	}
	if in.flushDur, err = m.Float64Histogram("riffdb.outbox.completion.flush.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of one completion transaction on the primary.")); err != nil {
		return nil, err
	}
	if in.flushSize, err = m.Int64Histogram("riffdb.outbox.completion.flush.batch.size", metric.WithUnit("{event}"),
		metric.WithDescription("Intents completed per completion transaction, by flush reason (bound, page_end, failure)."),
		metric.WithExplicitBucketBoundaries(1, 2, 4, 8, 12, 16)); err != nil {
		return nil, err
	}
	if in.renewDur, err = m.Float64Histogram("riffdb.outbox.lease.renew.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of one lease renewal transaction.")); err != nil {
		return nil, err
	}
	if in.deadLetters, err = m.Int64Counter("riffdb.outbox.dead_letters", metric.WithUnit("{event}"),
		metric.WithDescription("Events dead-lettered, by reason. Dead letters stay undelivered and fence retention.")); err != nil {
		return nil, err
	}
	if in.retries, err = m.Int64Counter("riffdb.outbox.retries", metric.WithUnit("{event}"),
		metric.WithDescription("Delivery attempts that failed and were scheduled for retry.")); err != nil {
		return nil, err
	}
	if in.lag, err = m.Float64Histogram("riffdb.outbox.delivery.lag", metric.WithUnit("s"),
		metric.WithDescription("Time from an event's commit to its archive acceptance."),
		metric.WithExplicitBucketBoundaries(LagBuckets...)); err != nil {
		return nil, err
	}
	// Start the counters at 0 for their known label sets, so that rates and
	// increases are defined from the first scrape on.
	in.retries.Add(context.Background(), 0, metric.WithAttributes(in.db))
	for _, reason := range []string{"attempts_exhausted", "identity_conflict"} {
		in.deadLetters.Add(context.Background(), 0, metric.WithAttributes(in.db, AttrReason.String(reason)))
	}
	healthGauge, err := m.Int64ObservableGauge("riffdb.outbox.health",
		metric.WithDescription("Outbox health: 1 for the current state, 0 for the others, one series per state."))
	if err != nil {
		return nil, err
	}
	reasonGauge, err := m.Int64ObservableGauge("riffdb.outbox.health.reason",
		metric.WithDescription("Outbox health reason: 1 for the current reason, 0 for the others, one series per reason (all 0 while healthy)."))
	if err != nil {
		return nil, err
	}
	missingGauge, err := m.Int64ObservableGauge("riffdb.outbox.archive.missing_records", metric.WithUnit("{event}"),
		metric.WithDescription("Completed events the archive lost at least (health reason archive_lost_records); 0 otherwise."))
	if err != nil {
		return nil, err
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		h := health()
		o.ObserveInt64(missingGauge, h.MissingRecords, in.dbSet)
		cur := h.State
		for _, s := range States {
			v := int64(0)
			if s == cur {
				v = 1
			}
			o.ObserveInt64(healthGauge, v, metric.WithAttributes(in.db, AttrState.String(s)))
		}
		for _, r := range deliverytype.Reasons {
			v := int64(0)
			if r == h.Reason {
				v = 1
			}
			o.ObserveInt64(reasonGauge, v, metric.WithAttributes(in.db, AttrReason.String(string(r))))
		}
		return nil
	}, healthGauge, reasonGauge, missingGauge)
	if err != nil {
		return nil, err
	}
	in.registrations = append(in.registrations, reg)
	return in, nil
}

func (in *instruments) close() error {
	var first error
	for _, r := range in.registrations {
		if err := r.Unregister(); err != nil && first == nil {
			first = err
		}
	}
	in.registrations = nil
	return first
}

func endSpan(span trace.Span, err error, errType string) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(attrErrType.String(errType))
	}
	span.End()
}

func (in *instruments) retry(ctx context.Context, _ string) {
	in.retries.Add(ctx, 1, metric.WithAttributes(in.db))
}

func (in *instruments) deadLetter(ctx context.Context, _ string, reason string) {
	in.deadLetters.Add(ctx, 1, metric.WithAttributes(in.db, AttrReason.String(reason)))
}
