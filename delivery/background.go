package delivery

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/deliverytype"
)

// checkpointPoll is how often the background goroutine asks the open store
// whether a checkpoint is due when no scrub paces it.
const checkpointPoll = time.Second

// checkpointRetry is how long the background goroutine waits after a
// Checkpoint failed for a reason that does not stop delivery.
const checkpointRetry = time.Minute

// startBackground starts the goroutine that advances the store's
// checkpoint while it delivers and, with a scrub rate, scrubs it: one page
// per 1/rate seconds, a pass after another, each over its own snapshot. It
// never takes d.mu, so it never holds up a delivery; pages are read
// concurrently with Accept, which the archive allows. A stop-class error
// (corrupt content) stops delivery exactly as Open's validation would: the
// store is unusable, every later call returns the failure, and the worker
// is woken to report it. Callers hold d.mu.
func (d *Destination) startBackground(s *archive.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go d.background(ctx, s, done)
	d.bgStop = func() {
		cancel()
		<-done
	}
}

// stopBackground ends the background goroutine. Callers hold d.mu.
func (d *Destination) stopBackground() {
	if d.bgStop != nil {
		d.bgStop()
		d.bgStop = nil
	}
}

func (d *Destination) background(ctx context.Context, s *archive.Store, done chan struct{}) {
	defer close(done)
	interval := checkpointPoll
	if d.scrubRate > 0 {
		interval = time.Second / time.Duration(d.scrubRate)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var sc *archive.Scrub
	defer func() {
		if sc != nil {
			_ = sc.Close()
		}
	}()
	stopped := func(err error) bool {
		if ctx.Err() != nil || archive.ClassOf(err) != deliverytype.Stop {
			return false
		}
		d.fail(err)
		return true
	}
	var retryCheckpoint time.Time // after a failed Checkpoint, not before
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.CheckpointDue() && !time.Now().Before(retryCheckpoint) {
			if err := s.Checkpoint(ctx); err != nil {
				if stopped(err) {
					return
				}
				// An I/O error, say: the worker's own calls meet it too.
				// Validating up to CheckpointRecords again at every
				// tick would only burn CPU; try again in a minute.
				retryCheckpoint = time.Now().Add(checkpointRetry)
				if d.opts.Logger != nil && ctx.Err() == nil {
					d.opts.Logger.Warn("archive checkpoint not advanced; retrying in a minute", zap.Error(err))
				}
			}
		}
		if d.scrubRate == 0 {
			continue
		}
		if sc == nil {
			var err error
			if sc, err = s.NewScrub(); err != nil {
				sc = nil
				if stopped(err) {
					return
				}
				continue
			}
		}
		p, err := sc.Step(ctx)
		if err != nil {
			// Anything but corrupt content (the store closing, an I/O
			// error the worker's own calls will meet) ends the pass; the
			// next tick starts another.
			_ = sc.Close()
			sc = nil
			if stopped(err) {
				return
			}
			continue
		}
		if d.onScrubStep != nil {
			d.onScrubStep(p)
		}
		if p.Complete {
			_ = sc.Close()
			sc = nil
		}
	}
}
