package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/outbox"
	"github.com/riffdb/riffdb/primary"
)

// stoppingArchive is the in-memory archive, except that the chosen method
// cancels the pass's context (the worker being stopped) and then fails the
// way the real destination does when its context ends: an unavailable
// destination wrapping the cancellation.
type stoppingArchive struct {
	*memArchive
	method string
	cancel context.CancelFunc
}

func (a *stoppingArchive) stop(ctx context.Context, method string) error {
	if a.method != method {
		return nil
	}
	a.cancel()
	return fmt.Errorf("%w: %w", outbox.ErrUnavailable, context.Cause(ctx))
}

func (a *stoppingArchive) Probe(ctx context.Context) error {
	if err := a.stop(ctx, "Probe"); err != nil {
		return err
	}
	return a.memArchive.Probe(ctx)
}

func (a *stoppingArchive) Fit(ctx context.Context, keys []event.Key, records [][]byte) (int, error) {
	if err := a.stop(ctx, "Fit"); err != nil {
		return 0, err
	}
	return a.memArchive.Fit(ctx, keys, records)
}

func (a *stoppingArchive) Accept(ctx context.Context, key event.Key, record []byte) (outbox.Outcome, error) {
	if err := a.stop(ctx, "Accept"); err != nil {
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
		want    string // the health reason after the stopped pass
	}{
		{"Probe", false, outbox.ReasonStarting},
		{"Fit", true, outbox.ReasonNone},
		{"Accept", true, outbox.ReasonNone},
		{"Accept", false, outbox.ReasonStarting},
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

// TestStopDuringDeliveryLogsNothing runs the worker's loop and stops it
// while a member is being delivered: Stop returns, and nothing was logged at
// warn or above.
func TestStopDuringDeliveryLogsNothing(t *testing.T) {
	b := setup(t, 1<<30, 0)
	core, logs := observer.New(zapcore.WarnLevel)
	entered := make(chan struct{})
	dst := &ctxArchive{memArchive: b.dst, entered: entered}
	w, err := outbox.New(outbox.Options{Alias: "default", Source: b.src, Destination: dst, Clock: b.clock,
		Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.commit(t, 2)
	w.Wake()
	<-entered
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, e := range logs.All() {
		t.Errorf("logged at %s: %q %v", e.Level, e.Message, e.ContextMap())
	}
	if h := w.Health(); h.Reason == outbox.ReasonDestinationUnavailable {
		t.Errorf("health %+v after Stop", h)
	}
}

// ctxArchive blocks the first Accept until its context ends (Stop cancels
// the pass's context), then fails it with the context's cause, as the real
// destination does.
type ctxArchive struct {
	*memArchive
	entered chan struct{}
	once    bool
}

func (a *ctxArchive) Accept(ctx context.Context, key event.Key, record []byte) (outbox.Outcome, error) {
	if !a.once {
		a.once = true
		close(a.entered)
		<-ctx.Done()
		return 0, fmt.Errorf("%w: %w", outbox.ErrUnavailable, context.Cause(ctx))
	}
	return a.memArchive.Accept(ctx, key, record)
}
