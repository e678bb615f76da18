// Command tracesplit splits the wall time of the goroutines that ran a
// given function, read from a Go execution trace, by state: running,
// runnable (waiting for a thread), in a system call, or blocked, and for
// the last two by where (the first riffdb or Pebble frame of the stack at
// the transition). It answers "where does the worker's time go between one
// event and the next", which a CPU profile cannot: a drain on fast storage
// is bound by a chain of hand-offs, not by the CPU (docs/benchmarks.md).
//
// Usage, from this directory:
//
//	go run . -func 'outbox.(*pass).deliver' /path/to/drain-n1.trace
//
// The trace comes from BenchmarkMultiDB with RIFFDB_DRAIN_TRACE=dir. A
// goroutine is counted when it ran the function itself (a transition out of
// running with the function on its stack); the times of all such
// goroutines are summed.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"golang.org/x/exp/trace"
)

func main() {
	fn := flag.String("func", "outbox.(*pass).deliver", "a substring of the function whose goroutines are split")
	top := flag.Int("top", 15, "rows to print")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: tracesplit [-func F] [-top N] TRACE")
		os.Exit(2)
	}
	rows, total, err := split(flag.Arg(0), *fn)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracesplit:", err)
		os.Exit(1)
	}
	fmt.Printf("goroutines running %s: %.1f ms in all\n", *fn, total)
	for i, r := range rows {
		if i == *top {
			break
		}
		fmt.Printf("%9.1f ms %5.1f %%  %s\n", r.ms, 100*r.ms/total, r.what)
	}
}

type row struct {
	what string
	ms   float64
}

// split reads the trace at path and returns the time of the goroutines
// that ran fn, by state and site, largest first, and their total.
func split(path, fn string) ([]row, float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	r, err := trace.NewReader(f)
	if err != nil {
		return nil, 0, err
	}
	type state struct {
		since trace.Time
		st    trace.GoState
		where string
	}
	cur := map[trace.GoID]state{}
	matched := map[trace.GoID]bool{}
	times := map[trace.GoID]map[string]float64{}
	for {
		ev, err := r.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, 0, err
		}
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		tr := ev.StateTransition()
		if tr.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		g := tr.Resource.Goroutine()
		from, to := tr.Goroutine()
		// Only a goroutine's own transitions out of running carry its own
		// stack; another's (an unblock, a creation) carry the other's.
		own := from == trace.GoRunning
		var where string
		for fr := range ev.Stack().Frames() {
			if own && strings.Contains(fr.Func, fn) {
				matched[g] = true
			}
			if where == "" && (strings.Contains(fr.Func, "riffdb") || strings.Contains(fr.Func, "pebble")) {
				where = fr.Func
			}
		}
		if c, ok := cur[g]; ok && c.st == from {
			if times[g] == nil {
				times[g] = map[string]float64{}
			}
			times[g][label(c.st, c.where)] += float64(ev.Time()-c.since) / 1e6
		}
		if to != trace.GoWaiting && to != trace.GoSyscall {
			where = ""
		} else if to == trace.GoWaiting {
			where = tr.Reason + " @ " + where
		}
		cur[g] = state{since: ev.Time(), st: to, where: where}
	}
	sum := map[string]float64{}
	var total float64
	for g := range matched {
		for k, v := range times[g] {
			sum[k] += v
			total += v
		}
	}
	rows := make([]row, 0, len(sum))
	for k, v := range sum {
		rows = append(rows, row{k, v})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].ms > rows[j].ms })
	return rows, total, nil
}

func label(st trace.GoState, where string) string {
	if where == "" {
		return st.String()
	}
	return st.String() + " " + where
}
