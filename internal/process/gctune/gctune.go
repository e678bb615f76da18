// Package gctune gives the Go heap a floor of headroom between garbage
// collections, so that a server with a small live heap does not collect
// several times a second.
//
// GOGC (100 by default) lets the heap grow by as much as was live after the
// previous collection before the next one starts. A riffdb server's live Go
// heap is small: the engines' block caches and memtables are C memory,
// outside it. Four databases delivering 1 KiB events allocate about
// 290 MB a second against a live heap of 6–7 MiB, and with GOGC=100 the
// heap was collected several dozen times a second. With GOGC at 400 the
// same drains used about 10 of 95 µs of CPU per event less and delivered
// 1.08–1.11× as many events a second (docs/benchmarks/2026-12-01-multidb.md:
// on 2 cores, every microsecond of CPU per event costs each
// database's chain about three, wherever it runs).
//
// A fixed higher GOGC would multiply a large live heap too: 32 busy
// databases of 32 KiB events keep over 100 MiB live and peak near 300 MiB
// of heap with GOGC=100, and the process's 1 GiB target leaves no room for
// a multiple of that. So Start sets GOGC after every collection from the
// live heap it left, so that the heap may grow by Headroom or by the live
// heap, whichever is more, before the next collection:
//
//	GOGC = clamp(Headroom / live × 100, 100, MaxPercent)
//
// A live heap of Headroom or more keeps the default (100), as before. A
// smaller one lets the heap reach live + Headroom (at most 11 × live)
// instead of 2 × live: less than Headroom (64 MiB) more than GOGC=100
// would allow.
//
// GOGC is a multiplier, applied to whatever the next collection leaves
// live until it is set again, and it scales the runtime's minimum heap goal
// too (4 MiB × GOGC / 100). So MaxPercent is 1000 (a goal of at least
// 40 MiB, at most 11 × the live heap), and the setting follows each
// collection within PollEvery (a goroutine reads the runtime's collection
// count): a value set for a small live heap applies to a larger one for at
// most that long. A first form, which allowed up to 10,000 and set it from
// a cleanup re-armed after each collection, gave a collection soon after a
// start a goal of 400 MiB with 32 busy databases (docs/benchmarks/2026-12-01-multidb.md). A
// soft memory limit (GOMEMLIMIT) still applies on top. An operator who sets
// GOGC keeps that choice.
package gctune

import (
	"fmt"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

const (
	// Headroom is the least the heap may grow by between two
	// collections.
	Headroom = 64 << 20
	// MinPercent is the lowest GOGC Start sets: Go's default.
	MinPercent = 100
	// MaxPercent is the highest, for a live heap under Headroom / 10.
	MaxPercent = 1000
	// PollEvery is how soon after a collection GOGC is set again.
	PollEvery = 10 * time.Millisecond
)

// Percent returns the GOGC that lets a heap of live bytes grow by headroom
// or by live, whichever is more, before the next collection, within
// [MinPercent, MaxPercent].
func Percent(live, headroom uint64) int {
	if live == 0 {
		return MaxPercent
	}
	p := (headroom*100 + live - 1) / live // rounded up
	return int(max(MinPercent, min(MaxPercent, p)))
}

var (
	once    sync.Once
	setting string
)

// Start starts the tuning for the rest of the process, unless the GOGC
// environment variable is set, and returns what decides GOGC, for the
// startup log. Calling it again (a test that opens several servers) only
// returns that.
func Start() string {
	once.Do(func() {
		if v, ok := os.LookupEnv("GOGC"); ok {
			setting = fmt.Sprintf("left to GOGC=%s", v)
			return
		}
		t := newTuner()
		t.tune()
		go t.run()
		setting = fmt.Sprintf("after each collection: the heap may grow by %d MiB or by the live heap, whichever is more",
			Headroom>>20)
	})
	return setting
}

// tuner sets GOGC from the live heap after each collection.
type tuner struct {
	sample []metrics.Sample // the collection count, the live heap
	cycles uint64
	last   int
}

func newTuner() *tuner {
	return &tuner{sample: []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/gc/heap/live:bytes"}}}
}

func (t *tuner) run() {
	tick := time.NewTicker(PollEvery)
	defer tick.Stop()
	for range tick.C {
		t.tune()
	}
}

// tune sets GOGC if a collection ended since the last call.
func (t *tuner) tune() {
	metrics.Read(t.sample)
	if t.sample[0].Value.Kind() != metrics.KindUint64 || t.sample[1].Value.Kind() != metrics.KindUint64 {
		return // not on this runtime: GOGC stays as it is
	}
	cycles := t.sample[0].Value.Uint64()
	if cycles == t.cycles {
		return
	}
	t.cycles = cycles
	if p := Percent(t.sample[1].Value.Uint64(), Headroom); p != t.last {
		debug.SetGCPercent(p)
		t.last = p
	}
}
