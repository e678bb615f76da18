package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/hygiene/ratelog"
	"github.com/riffdb/riffdb/internal/process/clock"
	"github.com/riffdb/riffdb/internal/store/goexit"
	"github.com/riffdb/riffdb/internal/testsupport/testsignal"
	"github.com/riffdb/riffdb/primary"
)

// Retry policy. It is server-owned; only the attempt budget may be
// lowered (Options.MaxAttempts, max_delivery_attempts).
const (
	MaxAttempts     = 32
	RetryDelay      = time.Second
	Lease           = 10 * time.Second
	DeliveryTimeout = 5 * time.Second // bounds each acceptance: its context ends 4.9-5 s after it starts (acceptContext)
	PageSize        = 500
	MaxRun          = 16
	MaxGroup        = 16
	// DefaultProbeInterval is how often an unhealthy worker probes its
	// destination, and the longest a healthy worker sleeps between passes.
	DefaultProbeInterval = time.Second
)

// Source is what the worker needs from the primary: the undelivered index
// and its compare-and-set transitions. *primary.DB implements it.
type Source interface {
	Identity() event.DatabaseID
	Incarnation() uint64
	Notify() <-chan struct{}
	ScanIntents(ctx context.Context, after *event.ID, limit int) ([]primary.Intent, error)
	// LoadEvents returns the stored bytes of each event, in order.
	LoadEvents(ctx context.Context, ids []event.ID) ([][]byte, error)
	Claim(ctx context.Context, members []primary.Intent, lease time.Time) ([]primary.Intent, error)
	Renew(ctx context.Context, in primary.Intent, lease time.Time) (primary.Intent, error)
	// Release returns claimed members that were never attempted to
	// pending with the attempt their claim counted taken back, durably.
	Release(ctx context.Context, members []primary.Intent) ([]primary.Intent, error)
	// CompleteDeferred removes delivered members without waiting for the
	// fsync; the next synced write to the source (the next claim, retry or
	// dead letter) or Sync makes the removal durable. Once it returned
	// nil, the worker reuses members' array: it must not keep it.
	CompleteDeferred(ctx context.Context, members []primary.Intent) error
	// Sync makes every write applied so far durable.
	Sync(ctx context.Context) error
	// Retry and DeadLetter record the failure as the intent's last one.
	Retry(ctx context.Context, in primary.Intent, at time.Time, failure primary.Failure) (primary.Intent, error)
	DeadLetter(ctx context.Context, in primary.Intent, reason string, failure primary.Failure) (primary.Intent, error)
	// Revivals changes whenever an operator's redrive returned dead
	// letters to pending (primary.DB.Redrive); the worker then scans the
	// leading dead letters again.
	Revivals() uint64
}

// Destination is what the worker needs from the archive. Every error it
// returns carries its delivery class and reason (deliverytype.Mark); an
// error without one is taken for an unavailability.
type Destination interface {
	// Probe checks that the destination is usable (custody, availability,
	// startup validation) without writing anything.
	Probe(ctx context.Context) error
	// Fit reports how many leading members fit the quota together. It
	// writes nothing. Members already archived with equal bytes charge 0.
	Fit(ctx context.Context, keys []event.Key, records [][]byte) (int, error)
	// Accept stores the exact record and its quota charge in one synced
	// transaction (deliverytype.Stored), or reports deliverytype.Duplicate,
	// or fails with an error of class deliverytype.Conflict. It may return
	// before the transaction is durable: Confirm makes it durable, or fails.
	Accept(ctx context.Context, key event.Key, record []byte) (deliverytype.Outcome, error)
	// Confirm reports whether every acceptance since the previous Confirm
	// is durable in the destination; its error is of class
	// deliverytype.Unavailable or deliverytype.Refused. The worker calls it
	// once per group of accepted members, before completing them, and
	// completes nothing it did not confirm: a group that is not confirmed
	// is not completed, the pass halts on the failure and each of its
	// members is retried (its attempt counted), as a member whose
	// acceptance failed is. The archive waits there for the transactions
	// it applied since the last Confirm (it does not wait in Accept, so
	// that one sync covers several of them), then checks that its store
	// directory is still the one it wrote into, since a store whose
	// directory was removed or replaced keeps accepting writes into
	// unlinked files. It is part of the interface, not an option that a
	// wrapper could hide: an acceptance is not durable without it.
	Confirm(ctx context.Context) error
}

// Watched is implemented by a Destination that can fail between the
// worker's calls, as the archive does when its background scrub finds
// corrupt content. The channel Failed returns is closed once that
// happened; from then on every call of the destination returns the
// failure. The worker then runs a pass that probes the destination, idle or
// not, so that health reports the failure at once.
type Watched interface {
	Failed() <-chan struct{}
}

// destinationFailed reports whether a Watched destination failed.
func (w *Worker) destinationFailed() bool {
	wd, ok := w.dst.(Watched)
	if !ok {
		return false
	}
	select {
	case <-wd.Failed():
		return true
	default:
		return false
	}
}

// Clock is the worker's time source (riffdb's one clock shape). Tests
// inject a fake one.
type Clock = clock.Clock

// Options configure a Worker. Zero values mean defaults.
type Options struct {
	Alias          string // database alias, used as a metric label
	Source         Source
	Destination    Destination
	Clock          Clock
	Logger         *zap.Logger
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	PageSize       int           // scan page; 0 → PageSize
	ProbeInterval  time.Duration // 0 → DefaultProbeInterval
	// MaxAttempts is the attempt budget of an event, 1 to MaxAttempts;
	// 0 → MaxAttempts.
	MaxAttempts int
}

// Worker delivers one database's committed events to its archive. It is safe
// for concurrent use; Start and Stop are idempotent.
type Worker struct {
	opts   Options
	src    Source
	dst    Destination
	clock  Clock
	log    *zap.Logger
	inst   *instruments
	health healthState
	// halts logs "outbox delivery halted" at a bounded rate: a halted
	// worker probes once a ProbeInterval for as long as the outage lasts,
	// and a line per probe (86,400 a day per database) would bury the rest
	// of the log. Cleared once delivery works again.
	halts *ratelog.Logger
	// helpers runs the claims made ahead and the completion flushes on
	// kept goroutines (goexit.Runner): a new goroutine per run grows its
	// stack through Pebble's iterators and the span machinery every time
	// (docs/benchmarks.md).
	helpers *goexit.Runner

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
	passMu sync.Mutex // one pass at a time
	// groups, under passMu, are the arrays of a pass's completion groups
	// (group, spare) and of their run contexts, kept for the next pass: a
	// pass per commit of a few events would otherwise make them anew.
	groups    [2][]primary.Intent
	groupCtxs []context.Context
	// deadEnd, under passMu, is the last intent of the leading run of dead
	// letters the passes have seen: every intent at or before it is a dead
	// letter, and a pass starts scanning after it. Only an operator's
	// redrive takes an intent out of dead_letter, and new intents sort after
	// every existing one, so the run only grows between redrives; it is
	// kept in memory, rebuilt by the first pass after a restart, and
	// forgotten by the first pass that sees Source.Revivals change from
	// deadEndRevivals.
	deadEnd         *event.ID
	deadEndRevivals uint64
	wake            chan struct{}
	nextDue         time.Time // earliest scheduled retry seen by the last pass

	testSignals workerTestSignals
}

// workerTestSignals tell tests when the loop reached a step, so they wait
// for it instead of sleeping. They are inert unless a test initialises them
// (export_test.go) before Start.
type workerTestSignals struct {
	PassEnded testsignal.TestSignal[PassResult] // a pass of the loop returned
	Parked    testsignal.TestSignal[struct{}]   // the loop is about to wait for its next pass
}

// New returns a worker. It does nothing until Start (or RunOnce).
func New(opts Options) (*Worker, error) {
	if opts.Source == nil || opts.Destination == nil {
		return nil, errors.New("outbox: a worker needs a source and a destination")
	}
	opts.Clock = clock.Or(opts.Clock)
	opts.PageSize = cmp.Or(opts.PageSize, PageSize)
	opts.ProbeInterval = cmp.Or(opts.ProbeInterval, DefaultProbeInterval)
	if opts.MaxAttempts = cmp.Or(opts.MaxAttempts, MaxAttempts); opts.MaxAttempts < 1 || opts.MaxAttempts > MaxAttempts {
		return nil, fmt.Errorf("outbox: the attempt budget must be 1 to %d", MaxAttempts)
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	w := &Worker{opts: opts, src: opts.Source, dst: opts.Destination, clock: opts.Clock,
		log: opts.Logger.With(zap.String("database", opts.Alias)), wake: make(chan struct{}, 1),
		helpers: goexit.NewRunner()}
	w.halts = ratelog.New(w.log, opts.Clock, "outbox delivery halted", ratelog.Options{})
	w.health.h = Health{State: StateDegraded, Reason: deliverytype.ReasonStarting, Since: opts.Clock.Now()}
	inst, err := newInstruments(opts, w.Health)
	if err != nil {
		return nil, err
	}
	w.inst = inst
	return w, nil
}

// Health returns the current outbox health.
func (w *Worker) Health() Health { return w.health.get() }

// Wake asks the worker to run a pass soon (non-blocking).
func (w *Worker) Wake() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Start runs the worker loop in a goroutine until Stop.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancel != nil {
		return nil
	}
	ctx, w.cancel = context.WithCancel(context.WithoutCancel(ctx))
	w.done = make(chan struct{})
	go w.loop(ctx, w.done)
	return nil
}

// Stop ends the loop and waits for the pass in flight to finish its current
// step. A destination call in flight is not cancelled: it finishes (an
// archive transaction within the delivery timeout), so that its outcome is
// known and the archive stays usable; the pass stops before its next step.
// Stop returns context.Cause(ctx) if ctx ends first.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	cancel, done := w.cancel, w.done
	w.cancel = nil
	w.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Close unregisters the worker's observable instruments and ends its idle
// helper goroutines. Call after Stop.
func (w *Worker) Close() error {
	w.helpers.Close()
	return w.inst.close()
}

func (w *Worker) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	var failed <-chan struct{} // a Watched destination's; nil once it fired
	if wd, ok := w.dst.(Watched); ok {
		failed = wd.Failed()
	}
	for {
		res, err := w.RunOnce(ctx)
		if err != nil && ctx.Err() == nil {
			w.log.Warn("outbox pass failed", zap.Error(err))
		}
		w.testSignals.PassEnded.Signal(res)
		if w.Health().State == StateStopped {
			<-ctx.Done()
			return
		}
		wait := w.opts.ProbeInterval
		notify := w.src.Notify()
		if res.Halted != "" {
			// The destination is unavailable, refusing or full: new commits
			// cannot change that, and a pass per commit (a probe, a scan
			// page, a quota check) would take CPU from the commits
			// themselves. Probe again after the interval.
			notify = nil
		} else if due := w.nextDueSnapshot(); !due.IsZero() {
			if d := due.Sub(w.clock.Now()); d < wait {
				wait = max(d, 0)
			}
		}
		w.testSignals.Parked.Signal(struct{}{})
		select {
		case <-ctx.Done():
			return
		case <-notify:
		case <-w.wake:
		case <-failed:
			failed = nil // the next pass probes and stops on it
		case <-w.clock.After(wait):
		}
	}
}

func (w *Worker) nextDueSnapshot() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nextDue
}
