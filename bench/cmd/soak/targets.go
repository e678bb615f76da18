package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// fullSoak is the duration the windows are stated for.
const fullSoak = time.Hour

// Windows are the parts of a soak the targets compare, stated for the
// 60-minute soak and scaled proportionally for any other duration: the
// warm-up (the first 5 minutes), the baseline window (minutes 5 to 15) and
// the last window (the last 10 minutes). A 5-minute soak has a 25 s warm-up,
// a baseline window from 25 s to 75 s and a last window from 250 s to 300 s.
type Windows struct {
	Total              time.Duration
	Warmup             time.Duration
	BaseStart, BaseEnd time.Duration
	LastStart          time.Duration
	Scale              float64 // Total / 60 minutes
}

// windowsFor returns the windows of a soak of total duration.
func windowsFor(total time.Duration) Windows {
	scale := float64(total) / float64(fullSoak)
	at := func(minutes float64) time.Duration {
		return time.Duration(math.Round(minutes * scale * float64(time.Minute)))
	}
	return Windows{Total: total, Warmup: at(5), BaseStart: at(5), BaseEnd: at(15), LastStart: total - at(10), Scale: scale}
}

// in reports whether a sample taken at elapsed belongs to the window
// (from, to]: a sample describes the interval that ends at it.
func in(elapsed, from, to time.Duration) bool { return elapsed > from && elapsed <= to }

// Tolerances of the "no steady growth" targets: the least-squares trend
// over the samples after the warm-up, projected over their span, may not
// exceed the larger of an absolute allowance and a fraction of the mean.
const (
	growthRelTolerance     = 0.05
	goroutineAbsTolerance  = 10.0
	descriptorAbsTolerance = 5.0
	// socketAbsTolerance allows the client's pool to grow to its cap (64
	// connections per command, closed after 30 s idle) while the load's
	// latency varies: the server's sockets follow the load generator's
	// connections, not a leak.
	socketAbsTolerance = 3 * 64.0
	rssGrowthLimit     = 0.10
	p99Limit           = 1.2
)

// Target is one checked figure: its value against its same-run baseline
// and the limit the ratio (or the growth) is held to.
type Target struct {
	Name     string
	Value    float64
	Baseline float64
	Unit     string
	// Ratio is the compared quantity: Value/Baseline, or for the growth
	// targets the projected growth.
	Ratio float64
	Limit string
	Met   bool
	// Note says what the value and baseline are.
	Note string
}

// evaluate computes every target of samples taken over a soak of total
// duration.
func evaluate(samples []Sample, total time.Duration) []Target {
	w := windowsFor(total)
	return []Target{rssTarget(samples, w), outsideEnginesTarget(samples, w), p99Target(samples, w),
		trendTarget("goroutines not serving a connection (no steady growth)", samples, w,
			func(s Sample) float64 { return s.Goroutines - s.Sockets }, goroutineAbsTolerance),
		trendTarget("descriptors other than sockets and tables (no steady growth)", samples, w,
			func(s Sample) float64 { return s.OpenFDs - s.Sockets - s.Tables }, descriptorAbsTolerance),
		trendTarget("sockets (no steady growth; follows the load's concurrency)", samples, w,
			func(s Sample) float64 { return s.Sockets }, socketAbsTolerance),
		tablesTarget(samples, w)}
}

// tableCacheCapacity is the server's shared table cache for the soak's one
// database (server/listen.go, tableFilesPerDatabase): the open table files
// the stores may keep together. Pebble closes evicted tables in the
// background and lets a cache run over while tables are being read, so a
// sample may exceed it for a moment.
const tableCacheCapacity = 96

// tablesTarget: the open table files, which grow with the stores until the
// shared table cache is full, stay within it: the mean of the last window
// ≤ tableCacheCapacity.
func tablesTarget(samples []Sample, w Windows) Target {
	tables := func(s Sample) float64 { return s.Tables }
	last, n := mean(samples, w.LastStart, w.Total, tables)
	peak := math.NaN()
	for _, s := range samples {
		if !(s.Tables <= peak) {
			peak = s.Tables
		}
	}
	return Target{Name: "open table files (within the shared table cache)", Value: last, Baseline: tableCacheCapacity,
		Ratio: last / tableCacheCapacity, Limit: fmt.Sprintf("mean of the last window ≤ %d", tableCacheCapacity), Met: last <= tableCacheCapacity,
		Note: fmt.Sprintf("mean of the last window (%d samples); largest sample of the run %.0f", n, peak)}
}

// mean returns the mean of f over the samples in (from, to], ignoring NaN,
// and how many there were.
func mean(samples []Sample, from, to time.Duration, f func(Sample) float64) (float64, int) {
	total, n := 0.0, 0
	for _, s := range samples {
		if v := f(s); in(s.Elapsed, from, to) && !math.IsNaN(v) {
			total += v
			n++
		}
	}
	if n == 0 {
		return math.NaN(), 0
	}
	return total / float64(n), n
}

// rssTarget: RSS growth after the warm-up ≤ 10 %: the mean RSS of the last
// window against the mean RSS of the baseline window.
func rssTarget(samples []Sample, w Windows) Target {
	rss := func(s Sample) float64 { return s.RSSBytes }
	base, nb := mean(samples, w.BaseStart, w.BaseEnd, rss)
	last, nl := mean(samples, w.LastStart, w.Total, rss)
	peak := math.NaN()
	for _, s := range samples {
		if s.Elapsed > w.Warmup && !(s.RSSBytes <= peak) {
			peak = s.RSSBytes
		}
	}
	change := func(f func(Sample) float64) float64 {
		b, _ := mean(samples, w.BaseStart, w.BaseEnd, f)
		l, _ := mean(samples, w.LastStart, w.Total, f)
		return (l - b) / (1 << 20)
	}
	t := Target{Name: "RSS growth after the warm-up", Value: last / (1 << 20), Baseline: base / (1 << 20), Unit: "MiB",
		Limit: fmt.Sprintf("≤ +%.0f%%", rssGrowthLimit*100),
		Note: fmt.Sprintf("mean RSS of the last window (%d samples) against the baseline window (%d samples); peak after the warm-up %.1f MiB; "+
			"change of the Go heap in use %+.1f MiB, of the block cache %+.1f MiB",
			nl, nb, peak/(1<<20), change(func(s Sample) float64 { return s.HeapInUse }), change(func(s Sample) float64 { return s.BlockCache }))}
	t.Ratio = last/base - 1
	t.Met = nb > 0 && nl > 0 && t.Ratio <= rssGrowthLimit
	return t
}

// outsideEnginesTarget: the growth of RSS less the storage engines' own
// memory (the block cache and the memtables, both bounded by
// server.memory_budget_bytes) ≤ 10 %, over the same windows as rssTarget.
// The block cache fills towards its share of the budget for as long as new
// blocks are read, which on a long soak is most of it: RSS then grows
// without a leak. What is left once the engines' memory is taken out (the
// Go heap, stacks, the runtime, the binary) is where a leak would show.
func outsideEnginesTarget(samples []Sample, w Windows) Target {
	outside := func(s Sample) float64 { return s.RSSBytes - s.BlockCache - s.Memtables }
	base, nb := mean(samples, w.BaseStart, w.BaseEnd, outside)
	last, nl := mean(samples, w.LastStart, w.Total, outside)
	note := fmt.Sprintf("means of the last window (%d samples) and the baseline window (%d samples); the block cache and the memtables are bounded by server.memory_budget_bytes", nl, nb)
	change := func(f func(Sample) float64) (float64, float64, bool) {
		b, n1 := mean(samples, w.BaseStart, w.BaseEnd, f)
		l, n2 := mean(samples, w.LastStart, w.Total, f)
		return b / (1 << 20), l / (1 << 20), n1 > 0 && n2 > 0
	}
	// Where it went, from the parts a record since 2026-12-02 holds.
	if b, l, ok := change(func(s Sample) float64 { return s.CHeapRSS - s.BlockCache }); ok {
		note += fmt.Sprintf("; of it, the C heap beyond the block caches ([heap] less the caches) %.1f → %.1f MiB", b, l)
		if b, l, ok := change(func(s Sample) float64 { return s.CHeapFree }); ok {
			note += fmt.Sprintf(" (free in it %.1f → %.1f MiB, the rest in use by the caches' entries, maps and block headers)", b, l)
		}
	}
	if b, l, ok := change(func(s Sample) float64 { return s.GoRetained }); ok {
		note += fmt.Sprintf(", the Go runtime's retained memory %.1f → %.1f MiB", b, l)
	}
	if b, l, ok := change(func(s Sample) float64 { return s.FileRSS }); ok {
		note += fmt.Sprintf(", the binary's and libraries' pages %.1f → %.1f MiB", b, l)
	}
	t := Target{Name: "memory outside the engines' budget (RSS less block cache and memtables)", Value: last / (1 << 20),
		Baseline: base / (1 << 20), Unit: "MiB", Limit: fmt.Sprintf("≤ +%.0f%%", rssGrowthLimit*100), Note: note}
	t.Ratio = last/base - 1
	t.Met = nb > 0 && nl > 0 && t.Ratio <= rssGrowthLimit
	return t
}

// windowLag merges the lag observations of the samples in (from, to].
func windowLag(samples []Sample, from, to time.Duration) histogram {
	h := histogram{}
	for _, s := range samples {
		if in(s.Elapsed, from, to) && s.Lag != nil {
			h.add(s.Lag)
		}
	}
	return h
}

// p99Target: the commit→archived p99 of the last window ≤ 1.2× the p99 of
// the baseline window, each computed from the window's merged histogram.
func p99Target(samples []Sample, w Windows) Target {
	base := windowLag(samples, w.BaseStart, w.BaseEnd)
	last := windowLag(samples, w.LastStart, w.Total)
	t := Target{Name: "commit→archived p99, last window vs baseline window", Unit: "ms",
		Value: last.quantile(0.99) * 1000, Baseline: base.quantile(0.99) * 1000,
		Limit: fmt.Sprintf("≤ %.1f×", p99Limit),
		Note: fmt.Sprintf("riffdb_outbox_delivery_lag_seconds bucket deltas merged per window (%.0f and %.0f deliveries), interpolated within buckets",
			last.count(), base.count())}
	stalls := func(from, to time.Duration) (float64, bool) {
		p, ok1 := change(samples, from, to, func(s Sample) float64 { return s.StallSecondsPrimary })
		a, ok2 := change(samples, from, to, func(s Sample) float64 { return s.StallSecondsArchive })
		return p + a, ok1 && ok2
	}
	if b, ok1 := stalls(w.BaseStart, w.BaseEnd); ok1 {
		if l, ok2 := stalls(w.LastStart, w.Total); ok2 {
			t.Note += fmt.Sprintf("; Pebble held writes back (write stalls of both stores) %.1f s in the baseline window and %.1f s in the last", b, l)
		}
	}
	if b, l := archiveSyncs(samples, w.BaseStart, w.BaseEnd), archiveSyncs(samples, w.LastStart, w.Total); b.intervals > 0 && l.intervals > 0 {
		t.Note += fmt.Sprintf("; the archive's WAL syncs, baseline and last window: %.2f and %.2f ms each, %.0f%% and %.0f%% of the time, "+
			"%d of %d and %d of %d intervals at least %.0f%% (every event is one synced archive transaction: "+
			"from about half the time in syncs, the worker has little left for the rest of each delivery, and the p99 follows the disk)",
			b.meanMs, l.meanMs, b.share*100, l.share*100, b.busy, b.intervals, l.busy, l.intervals, busyShare*100)
	}
	for _, st := range []struct {
		name         string
		secs, copied func(Sample) float64
	}{
		{"primary", func(s Sample) float64 { return s.CompactionSecondsPrimary }, func(s Sample) float64 { return s.CompactedBytesPrimary }},
		{"archive", func(s Sample) float64 { return s.CompactionSecondsArchive }, func(s Sample) float64 { return s.CompactedBytesArchive }},
	} {
		bs, ok1 := perSecond(samples, w.BaseStart, w.BaseEnd, st.secs)
		ls, ok2 := perSecond(samples, w.LastStart, w.Total, st.secs)
		bb, ok3 := perSecond(samples, w.BaseStart, w.BaseEnd, st.copied)
		lb, ok4 := perSecond(samples, w.LastStart, w.Total, st.copied)
		if ok1 && ok2 && ok3 && ok4 {
			t.Note += fmt.Sprintf("; the %s's compactions, baseline and last window: running %.1f%% and %.1f%% of the time, writing %.2f and %.2f MB/s",
				st.name, bs*100, ls*100, bb/1e6, lb/1e6)
		}
	}
	bt, ok1 := change(samples, w.BaseStart, w.BaseEnd, func(s Sample) float64 { return s.ArchiveTxns })
	bs, ok2 := change(samples, w.BaseStart, w.BaseEnd, func(s Sample) float64 { return s.ArchiveTxnsSlow })
	lt, ok3 := change(samples, w.LastStart, w.Total, func(s Sample) float64 { return s.ArchiveTxns })
	ls, ok4 := change(samples, w.LastStart, w.Total, func(s Sample) float64 { return s.ArchiveTxnsSlow })
	if ok1 && ok2 && ok3 && ok4 && bt > 0 && lt > 0 {
		t.Note += fmt.Sprintf("; archive transactions over 5 ms (a stalled sync), baseline and last window: %.0f and %.0f, %.3f%% and %.3f%% of them",
			bs, ls, bs/bt*100, ls/lt*100)
	}
	b, l := hostCost(samples, w.BaseStart, w.BaseEnd), hostCost(samples, w.LastStart, w.Total)
	if b.cpuOK && l.cpuOK {
		t.Note += fmt.Sprintf("; per event delivered, the server's CPU (commands included), baseline and last window: %.0f and %.0f µs; "+
			"the machine's CPUs busy %.0f%% and %.0f%%", b.cpuPerEvent*1e6, l.cpuPerEvent*1e6, b.machineBusy*100, l.machineBusy*100)
	}
	if b.schedOK && l.schedOK {
		t.Note += fmt.Sprintf("; the server's goroutines waiting for a CPU (go_sched_latencies_seconds), baseline and last window: "+
			"%.2f and %.2f on average, %.2f%% and %.2f%% of the waits over about 1 ms", b.waiting, l.waiting, b.slowWaitsPct, l.slowWaitsPct)
	}
	if b.diskOK && l.diskOK {
		t.Note += fmt.Sprintf("; the data's disk: flushes %.3f and %.3f ms each (%.0f and %.0f a second), %.1f and %.1f MB/s written",
			b.flushMs, l.flushMs, b.flushesPerSec, l.flushesPerSec, b.writtenMBps, l.writtenMBps)
	}
	t.Ratio = t.Value / t.Baseline
	t.Met = last.count() > 0 && base.count() > 0 && t.Ratio <= p99Limit
	return t
}

// host is what the server and the machine around it spent over a window
// (Sample.ServerCPUSeconds, MachineBusySeconds, Disk*).
type host struct {
	cpuOK       bool    // the CPU figures are known
	cpuPerEvent float64 // the server's CPU seconds per event delivered
	machineBusy float64 // the share of the machine's CPU time that was busy

	schedOK      bool    // the scheduling figures are known
	waiting      float64 // the mean number of the server's goroutines waiting for a CPU
	slowWaitsPct float64 // the share of those waits longer than about 1 ms, in percent

	diskOK        bool // the disk figures are known
	flushMs       float64
	flushesPerSec float64
	writtenMBps   float64
}

// hostCost sums the CPU and disk counters over the intervals that end in
// (from, to]. An interval with a counter unknown at either end is left out
// of that counter's figures, and so are its deliveries and its time.
func hostCost(samples []Sample, from, to time.Duration) host {
	var out host
	var cpu, events, busy, all float64
	var flushes, flushSecs, written, span float64
	var waited, waits, slow, waitSpan float64
	for i := 1; i < len(samples); i++ {
		p, s := samples[i-1], samples[i]
		if !in(s.Elapsed, from, to) {
			continue
		}
		if c, mb, mt := s.ServerCPUSeconds-p.ServerCPUSeconds, s.MachineBusySeconds-p.MachineBusySeconds, s.MachineSeconds-p.MachineSeconds; s.Lag != nil &&
			!math.IsNaN(c) && !math.IsNaN(mb) && !math.IsNaN(mt) {
			cpu, events, busy, all = cpu+c, events+s.Lag.count(), busy+mb, all+mt
		}
		if f, fs, wb := s.DiskFlushes-p.DiskFlushes, s.DiskFlushSeconds-p.DiskFlushSeconds, s.DiskWrittenBytes-p.DiskWrittenBytes; !math.IsNaN(f) && !math.IsNaN(fs) && !math.IsNaN(wb) {
			flushes, flushSecs, written, span = flushes+f, flushSecs+fs, written+wb, span+(s.Elapsed-p.Elapsed).Seconds()
		}
		if ws, n, sl := s.SchedWaitSeconds-p.SchedWaitSeconds, s.SchedWaits-p.SchedWaits, s.SchedWaitsSlow-p.SchedWaitsSlow; !math.IsNaN(ws) && !math.IsNaN(n) && !math.IsNaN(sl) {
			waited, waits, slow, waitSpan = waited+ws, waits+n, slow+sl, waitSpan+(s.Elapsed-p.Elapsed).Seconds()
		}
	}
	if events > 0 && all > 0 {
		out.cpuOK, out.cpuPerEvent, out.machineBusy = true, cpu/events, busy/all
	}
	if waits > 0 && waitSpan > 0 {
		out.schedOK, out.waiting, out.slowWaitsPct = true, waited/waitSpan, slow/waits*100
	}
	if flushes > 0 && span > 0 {
		out.diskOK, out.flushMs, out.flushesPerSec, out.writtenMBps = true, flushSecs/flushes*1000, flushes/span, written/span/1e6
	}
	return out
}

// change sums f's change over the sampling intervals that end in (from,
// to], leaving out those with f unknown at either end; ok is false when
// none is left (a record written before f was).
func change(samples []Sample, from, to time.Duration, f func(Sample) float64) (sum float64, ok bool) {
	sum, _, n := changeOver(samples, from, to, f)
	return sum, n > 0
}

// perSecond is f's change per second over the same intervals as change,
// divided by their time alone.
func perSecond(samples []Sample, from, to time.Duration, f func(Sample) float64) (rate float64, ok bool) {
	sum, span, _ := changeOver(samples, from, to, f)
	if span == 0 {
		return 0, false
	}
	return sum / span, true
}

// changeOver returns f's change summed over the sampling intervals that end
// in (from, to] with f known at both ends, those intervals' time in
// seconds, and how many they are.
func changeOver(samples []Sample, from, to time.Duration, f func(Sample) float64) (sum, span float64, n int) {
	for i := 1; i < len(samples); i++ {
		d := f(samples[i]) - f(samples[i-1])
		if in(samples[i].Elapsed, from, to) && !math.IsNaN(d) {
			sum, span, n = sum+d, span+(samples[i].Elapsed-samples[i-1].Elapsed).Seconds(), n+1
		}
	}
	return sum, span, n
}

// busyShare is the share of an interval's time in the archive's WAL syncs
// from which p99Target counts the interval as one where the disk paced
// delivery. In the 60-minute soak of 2026-12-03
// (docs/benchmarks/2026-12-01-soak.md), 155 of the 168 10-s intervals after the warm-up whose archive
// syncs took at least half the time had a commit→archived p99 of 200 ms or
// more, and 13 of the 162 others had.
const busyShare = 0.5

// syncShare is what the archive's WAL syncs took over a window.
type syncShare struct {
	meanMs    float64 // mean duration of one sync
	share     float64 // the window's time spent in syncs
	intervals int     // sampling intervals in the window with both samples
	busy      int     // of them, those with a share of at least busyShare
}

// archiveSyncs sums the archive's WAL syncs over the intervals that end in
// (from, to]: each interval's change of the cumulative counters between two
// consecutive samples. Intervals with a counter missing are left out.
func archiveSyncs(samples []Sample, from, to time.Duration) syncShare {
	var out syncShare
	var n, secs, span float64
	for i := 1; i < len(samples); i++ {
		p, s := samples[i-1], samples[i]
		dn, ds, dt := s.FsyncsArchive-p.FsyncsArchive, s.FsyncSecondsArchive-p.FsyncSecondsArchive, (s.Elapsed - p.Elapsed).Seconds()
		if !in(s.Elapsed, from, to) || math.IsNaN(dn) || math.IsNaN(ds) || dt <= 0 {
			continue
		}
		out.intervals++
		n, secs, span = n+dn, secs+ds, span+dt
		if ds/dt >= busyShare {
			out.busy++
		}
	}
	if n > 0 {
		out.meanMs = secs / n * 1000
	}
	if span > 0 {
		out.share = secs / span
	}
	return out
}

// trend fits y = a + b·t by least squares over the points and returns the
// slope b per second (NaN with fewer than two distinct times).
func trend(ts, ys []float64) float64 {
	n := float64(len(ts))
	if n < 2 {
		return math.NaN()
	}
	var st, sy float64
	for i := range ts {
		st += ts[i]
		sy += ys[i]
	}
	mt, my := st/n, sy/n
	var num, den float64
	for i := range ts {
		num += (ts[i] - mt) * (ys[i] - my)
		den += (ts[i] - mt) * (ts[i] - mt)
	}
	if den == 0 {
		return math.NaN()
	}
	return num / den
}

// trendTarget: no steady growth of f after the warm-up. The least-squares
// slope over the samples after the warm-up, times their span, is the
// projected growth; it may not exceed max(abs, 5 % of the mean).
func trendTarget(name string, samples []Sample, w Windows, f func(Sample) float64, abs float64) Target {
	var ts, ys []float64
	for _, s := range samples {
		if v := f(s); s.Elapsed > w.Warmup && !math.IsNaN(v) {
			ts = append(ts, s.Elapsed.Seconds())
			ys = append(ys, v)
		}
	}
	t := Target{Name: name, Unit: "", Note: fmt.Sprintf("least-squares slope over %d samples after the warm-up, projected over their span", len(ts))}
	if len(ts) < 2 {
		t.Ratio, t.Value, t.Baseline = math.NaN(), math.NaN(), math.NaN()
		t.Limit = "no data"
		return t
	}
	m, _ := mean(samples, w.Warmup, w.Total, f)
	slope := trend(ts, ys)
	span := ts[len(ts)-1] - ts[0]
	tol := max(abs, growthRelTolerance*m)
	t.Value = ys[len(ys)-1]
	t.Baseline = ys[0]
	t.Ratio = slope * span
	t.Limit = fmt.Sprintf("projected growth ≤ %.1f (max(%.0f, 5%% of the mean %.1f))", tol, abs, m)
	t.Met = !math.IsNaN(slope) && t.Ratio <= tol
	return t
}

// writeTargets prints every target: value, baseline, the compared quantity,
// the limit and whether it was met.
func writeTargets(out io.Writer, targets []Target, w Windows) {
	fmt.Fprintf(out, "soak targets (%s; windows scaled ×%.3g from the 60-minute form: warm-up %s, baseline window %s–%s, last window %s–%s)\n",
		w.Total, w.Scale, w.Warmup, w.BaseStart, w.BaseEnd, w.LastStart, w.Total)
	for _, t := range targets {
		verdict := "MISSED"
		if t.Met {
			verdict = "met"
		}
		var line strings.Builder
		switch {
		case t.Unit == "MiB":
			fmt.Fprintf(&line, "  %-52s %8.1f %s vs baseline %8.1f %s: %+.1f%% (target %s) %s", t.Name, t.Value, t.Unit,
				t.Baseline, t.Unit, t.Ratio*100, t.Limit, verdict)
		case strings.HasPrefix(t.Name, "open table files"):
			fmt.Fprintf(&line, "  %-52s %8.1f vs the cache's capacity %.0f (target %s) %s", t.Name, t.Value, t.Baseline, t.Limit, verdict)
		case strings.HasPrefix(t.Name, "commit"):
			fmt.Fprintf(&line, "  %-52s %8.3f %s vs baseline %8.3f %s: %.2f× (target %s) %s", t.Name, t.Value, t.Unit,
				t.Baseline, t.Unit, t.Ratio, t.Limit, verdict)
		default:
			fmt.Fprintf(&line, "  %-52s first %.0f, last %.0f after the warm-up: %+.1f (target %s) %s", t.Name, t.Baseline,
				t.Value, t.Ratio, t.Limit, verdict)
		}
		fmt.Fprintln(out, line.String())
		fmt.Fprintf(out, "  %-52s (%s)\n", "", t.Note)
	}
}
