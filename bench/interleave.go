package bench

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// ErrNoWorkload is returned by Interleave when it is given nothing to run.
var ErrNoWorkload = errors.New("bench: no workload to interleave")

// Workload performs operations for about d and returns how many it
// completed. It stops at the first error.
type Workload struct {
	Name string
	Run  func(d time.Duration) (int, error)
	// Before, when set, runs untimed before each of the workload's slices,
	// e.g. to wait until the background work the previous slice left (a
	// storage engine's compactions) is done, so that it slows no slice.
	Before func()
}

// Rate is the measured throughput of one workload over every round.
type Rate struct {
	Name    string
	Ops     int
	Elapsed time.Duration
}

// PerSecond is Ops / Elapsed in operations per second (0 when nothing ran).
func (r Rate) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// Interleave runs every workload for about d in each of rounds rounds and
// returns their rates in the order given. Each round starts with the next
// workload (round r runs workloads r, r+1, … modulo their number), so that
// the slow drifts of a noisy machine (a disk whose fdatasync rate changes
// from one minute to the next) fall on every workload alike: ratios between
// the rates are then meaningful even when absolute rates are not. Elapsed is
// measured around each Run call. It returns the first error, naming the
// workload.
func Interleave(rounds int, d time.Duration, ws []Workload) ([]Rate, error) {
	if len(ws) == 0 || rounds < 1 {
		return nil, ErrNoWorkload
	}
	rates := make([]Rate, len(ws))
	for i, w := range ws {
		rates[i].Name = w.Name
	}
	for r := range rounds {
		for k := range ws {
			i := (r + k) % len(ws)
			if ws[i].Before != nil {
				ws[i].Before()
			}
			start := time.Now()
			n, err := ws[i].Run(d)
			rates[i].Elapsed += time.Since(start)
			rates[i].Ops += n
			if err != nil {
				return rates, fmt.Errorf("bench: workload %s: %w", ws[i].Name, err)
			}
		}
	}
	return rates, nil
}

// Parallel returns a Run function that calls op from clients goroutines
// until d has passed and counts the calls that returned nil. It stops every
// goroutine at the first error and returns it.
func Parallel(clients int, op func() error) func(d time.Duration) (int, error) {
	return func(d time.Duration) (int, error) {
		deadline := time.Now().Add(d)
		var ops atomic.Int64
		var stop atomic.Bool
		var once sync.Once
		var first error
		var wg sync.WaitGroup
		for range clients {
			wg.Go(func() {
				for !stop.Load() && time.Now().Before(deadline) {
					if err := op(); err != nil {
						once.Do(func() { first = err })
						stop.Store(true)
						return
					}
					ops.Add(1)
				}
			})
		}
		wg.Wait()
		return int(ops.Load()), first
	}
}

// EnginesIdle returns a Workload.Before hook that waits (at most 30 s) until
// no storage engine reports a flush or compaction in progress, so that the
// background work one slice leaves does not run during the next. A nil
// metrics result (an engine busy with a transaction) counts as not idle.
func EnginesIdle(metrics ...func() *pebble.Metrics) func() {
	idle := func() bool {
		for _, m := range metrics {
			if pm := m(); pm == nil || pm.Compact.NumInProgress != 0 || pm.Flush.NumInProgress != 0 {
				return false
			}
		}
		return true
	}
	return func() {
		for deadline := time.Now().Add(30 * time.Second); !idle() && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
	}
}
