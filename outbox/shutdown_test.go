package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/outbox"
	"github.com/riffdb/riffdb/primary"
)

// stoppingArchive is the in-memory archive, except that the chosen method
// cancels the pass's context (the worker being stopped) and then fails as if
// the stop had made it fail: an unavailable destination wrapping the
// cancellation.
type stoppingArchive struct {
	*memArchive
	method string
	cancel context.CancelFunc
}

func (a *stoppingArchive) stop(method string) error {
	if a.method != method {
		return nil
	}
	a.cancel()
	return fmt.Errorf("%w: %w", errUnavailable, context.Canceled)
}

func (a *stoppingArchive) Probe(ctx context.Context) error {
	if err := a.stop("Probe"); err != nil {
		return err
	}
	return a.memArchive.Probe(ctx)
}

func (a *stoppingArchive) Fit(ctx context.Context, keys []event.Key, records [][]byte) (int, error) {
	if err := a.stop("Fit"); err != nil {
		return 0, err
	}
	return a.memArchive.Fit(ctx, keys, records)
}

func (a *stoppingArchive) Accept(ctx context.Context, key event.Key, record []byte) (deliverytype.Outcome, error) {
	if err := a.stop("Accept"); err != nil {
		return 0, err
	}
	return a.memArchive.Accept(ctx, key, record)
}

// TestStoppingMidPassIsNotADestinationFailure stops the worker (cancels the
// pass's context) while the pass probes, fits or delivers: the destination
// then fails because of the cancellation, which is the worker stopping, not
// the destination failing. Nothing is logged at warn or above, health keeps
// its state and has no failure reason, the pass reports no halt and no
// retry, and no intent is scheduled for retry or dead-lettered.
func TestStoppingMidPassIsNotADestinationFailure(t *testing.T) {
	for _, tc := range []struct {
		method string
		// healthy runs a first pass, so that health is healthy (otherwise
		// it is still starting and the stopped pass probes first).
		healthy bool
		want    deliverytype.Reason // the health reason after the stopped pass
	}{
		{"Probe", false, deliverytype.ReasonStarting},
		{"Fit", true, deliverytype.ReasonNone},
		{"Accept", true, deliverytype.ReasonNone},
		{"Accept", false, deliverytype.ReasonStarting},
	} {
		t.Run(fmt.Sprintf("%s healthy=%v", tc.method, tc.healthy), func(t *testing.T) {
			b := setup(t, 1<<30, 0)
			core, logs := observer.New(zapcore.WarnLevel)
			dst := &stoppingArchive{memArchive: b.dst}
			w, err := outbox.New(outbox.Options{Alias: "default", Source: b.src, Destination: dst, Clock: b.clock,
				Logger: zap.New(core)})
			if err != nil {
				t.Fatal(err)
			}
			b.w = w
			if tc.healthy {
				b.commit(t, 1)
				b.run(t)
			}
			before := b.w.Health()
			b.commit(t, 3)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			dst.method, dst.cancel = tc.method, cancel
			res, err := b.w.RunOnce(ctx)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("pass error %v, want the cancellation", err)
			}
			if res.Halted != "" || res.Retried != 0 || res.DeadLettered != 0 {
				t.Errorf("pass %+v: a stopped pass must not halt, retry or dead-letter", res)
			}
			if h := b.w.Health(); h.State != before.State || h.Reason != tc.want {
				t.Errorf("health %+v after the stopped pass, want %s/%q", h, before.State, tc.want)
			}
			for _, e := range logs.All() {
				t.Errorf("logged at %s: %q %v", e.Level, e.Message, e.ContextMap())
			}
			for _, in := range b.intents(t) {
				if in.State == primary.IntentRetryScheduled || in.State == primary.IntentDeadLetter {
					t.Errorf("intent %s is %v after the stopped pass", in.Event, in.State)
				}
			}
		})
	}
}

// finishingArchive is the in-memory archive, except that the chosen method
// cancels the pass's context (the worker being stopped) and then goes on,
// recording whether its own context ended meanwhile.
type finishingArchive struct {
	*memArchive
	method    string
	cancel    context.CancelFunc
	cancelled bool // the chosen method's context had ended after the stop
}

func (a *finishingArchive) stop(ctx context.Context, method string) {
	if a.method == method {
		a.cancel()
		a.cancelled = ctx.Err() != nil
	}
}

func (a *finishingArchive) Probe(ctx context.Context) error {
	a.stop(ctx, "Probe")
	return a.memArchive.Probe(ctx)
}

func (a *finishingArchive) Fit(ctx context.Context, keys []event.Key, records [][]byte) (int, error) {
	a.stop(ctx, "Fit")
	return a.memArchive.Fit(ctx, keys, records)
}

func (a *finishingArchive) Accept(ctx context.Context, key event.Key, record []byte) (deliverytype.Outcome, error) {
	a.stop(ctx, "Accept")
	return a.memArchive.Accept(ctx, key, record)
}

// TestStopLetsTheDestinationCallInFlightFinish stops the worker while the
// destination probes (the real archive is created then), fits or accepts:
// that call's context is not cancelled, since an archive transaction
// abandoned midway has an unknown outcome and the archive fences its engine
// off (logging it). The pass then stops before its next step, having
// completed what it accepted, without a warning or a health change.
func TestStopLetsTheDestinationCallInFlightFinish(t *testing.T) {
	for _, method := range []string{"Probe", "Fit", "Accept"} {
		t.Run(method, func(t *testing.T) {
			b := setup(t, 1<<30, 0)
			core, logs := observer.New(zapcore.WarnLevel)
			dst := &finishingArchive{memArchive: b.dst}
			w, err := outbox.New(outbox.Options{Alias: "default", Source: b.src, Destination: dst, Clock: b.clock,
				Logger: zap.New(core)})
			if err != nil {
				t.Fatal(err)
			}
			b.w = w
			b.commit(t, 3)
			before := b.w.Health()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			dst.method, dst.cancel = method, cancel
			res, err := b.w.RunOnce(ctx)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("pass error %v, want the cancellation", err)
			}
			if dst.cancelled {
				t.Errorf("%s's context was cancelled by the stop: the call in flight must finish", method)
			}
			if h := b.w.Health(); h != before {
				t.Errorf("health %+v after the stopped pass, want %+v", h, before)
			}
			for _, e := range logs.All() {
				t.Errorf("logged at %s: %q %v", e.Level, e.Message, e.ContextMap())
			}
			if method == "Accept" {
				// The member being accepted was stored and completed; the
				// rest of the run stays delivering (claimed), as after a
				// crash.
				if res.Stored != 1 || res.Completed != 1 || b.dst.len() != 1 {
					t.Errorf("pass %+v, %d archived: want the member in flight stored and completed", res, b.dst.len())
				}
			}
		})
	}
}
