// Command soak runs the real riffdb binary under steady traced load for a
// long time and records whether it stays flat: memory, goroutines, file
// descriptors, compaction debt and commit→archived latency.
//
//	soak -riffdb bin/riffdb [-duration 60m] [-out bench/results]
//	soak -from-csv bench/results/soak-latest.csv   (targets and plot again from a record)
//
// The default duration is $SOAK when set (e.g. SOAK=5m), else 60 minutes.
// scripts/soak.sh builds both binaries and runs it.
//
// # What it does
//
//  1. Starts `riffdb server run --dev` (outbox enabled, the development
//     contract) with its data in a private temporary folder, on ephemeral
//     loopback ports.
//  2. Calibrates, in two steps. Alone: a closed-loop burst of ship_order
//     commands (two events each, 64 clients) builds a backlog; the drain
//     rate alone is the events delivered per second from the burst's end
//     until the backlog is 0 (completed_deliveries of GET /v1/stats). Under
//     load: the soak's command mix is offered at that rate for 30 s; the
//     worker falls behind, because it now shares the machine with the
//     commands, and the events delivered per second over the last two
//     thirds are the drain rate under load. The smaller of the two is the
//     measured drain rate. (A soak at half the rate alone was tried first:
//     on 2 cores the backlog grew without bound, since commands and
//     deliveries compete for the same CPU.)
//  3. Soaks: the traced load generator (package loadtest, open loop) sends
//     the development contract's three commands, place_order, cancel_order
//     (one event each) and ship_order (two), at equal request rates adding
//     up to half the measured drain rate in events per second, for the
//     duration; a fraction of the requests (-retry-ratio) is sent twice with
//     the same idempotency key, and every retry must come back as a replay
//     of the same commit.
//  4. Every interval (10 s) it records the server's VmRSS
//     (/proc/<pid>/status), go_goroutines, riffdb_pebble_compaction_debt_bytes
//     of both stores, their memtable allocation, the block cache and the Go
//     heap in use (/metrics, to tell where RSS goes), its open
//     descriptors and sockets (/proc/<pid>/fd), the
//     pending backlog (GET /v1/stats) and the commit→archived lag of the
//     interval: the change of the server's riffdb_outbox_delivery_lag_seconds
//     histogram since the previous sample (the load generator has no
//     commit→archived measure of its own), whose p50 and p99 are
//     interpolated within the buckets as histogram_quantile does. With them
//     the server's CPU time (process_cpu_seconds_total), the machine's busy
//     and total CPU time (/proc/stat) and the counters of the disk that
//     holds the server's data (writes, bytes written, flushes and their
//     time; /sys/dev/block/<device>/stat), and how long the server's
//     goroutines waited, runnable, for a CPU (go_sched_latencies_seconds:
//     its sum, its count and the waits over about 1 ms), how long each
//     store's compactions ran and what they wrote, and how many archive
//     transactions took over 5 ms (riffdb_archive_txn_duration_seconds),
//     so that a p99 that moved between two windows can be set against the
//     server's CPU per event, the machine's load, the waits for a CPU, the
//     compactions, the stalled syncs and the disk's flush time in the same
//     windows.
//  5. Writes soak-<time>.csv (one row per sample, flushed as it goes, the
//     lag buckets included so that the figures can be recomputed),
//     soak-<time>.svg (one panel per series, drawn by this tool),
//     soak-<time>.txt (the summary printed) and the server's log under -out,
//     and copies the first three to soak-<duration>-latest.* (soak-60m-latest,
//     soak-5m-latest), so that the full and the short form keep their own.
//
// # Targets
//
// Stated for 60 minutes and scaled proportionally for other durations (see
// Windows): RSS growth after the warm-up ≤ 10 % (mean RSS of the last 10
// minutes against minutes 5–15); the p99 of the last 10 minutes ≤ 1.2× the
// p99 of minutes 5–15; no steady growth of goroutines or descriptors: the
// least-squares slope over the samples after the warm-up, projected over
// their span, within max(10 goroutines or 5 descriptors, 5 % of the mean).
// Each client connection holds one server goroutine and one socket, and the
// load generator opens connections as its in-flight requests require (at
// most 64 per command) and closes them after 30 s idle, so raw counts follow
// the load's latency: the goroutine target is held on goroutines minus open
// sockets, the descriptor target on descriptors other than sockets, and the
// sockets get a target of their own whose allowance is the pool's cap (192).
// The raw counts are recorded and plotted too. Targets are reported, never
// enforced: the exit status is 0 when the soak ran, whatever the figures,
// and 1 when it could not run (the server failed, the load failed entirely).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

var nanValue = math.NaN()

// options are the command's flags.
type options struct {
	riffdb       string
	duration     time.Duration
	interval     time.Duration
	out          string
	retryRatio   float64
	calibration  int
	calibrateFor time.Duration
	rate         float64
	keep         bool
}

// commandMix is the load: the development contract's commands, each sent at
// the same request rate, with the events each commits.
var commandMix = []struct {
	name, template string
	events         int
}{
	{"place_order", `{"order_id":"soak-{{run}}-{{n}}","amount_cents":{{n}}}`, 1},
	{"cancel_order", `{"order_id":"soak-{{run}}-{{n}}","reason":"soak"}`, 1},
	{"ship_order", `{"order_id":"soak-{{run}}-{{n}}","carrier":"soak"}`, 2},
}

func main() {
	def := 60 * time.Minute
	if v := os.Getenv("SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			fmt.Fprintf(os.Stderr, "soak: SOAK=%q is not a positive duration (e.g. 5m)\n", v)
			os.Exit(2)
		}
		def = d
	}
	var o options
	var fromCSV string
	flag.StringVar(&o.riffdb, "riffdb", "bin/riffdb", "the riffdb binary to soak")
	flag.DurationVar(&o.duration, "duration", def, "soak duration (default $SOAK, else 60m)")
	flag.DurationVar(&o.interval, "interval", 10*time.Second, "sampling interval")
	flag.StringVar(&o.out, "out", "bench/results", "folder for the CSV, the SVG, the summary and the server's log")
	flag.Float64Var(&o.retryRatio, "retry-ratio", 0.05, "fraction of requests sent twice with the same idempotency key")
	flag.IntVar(&o.calibration, "calibration", 8192, "ship_order commands of the calibration burst")
	flag.DurationVar(&o.calibrateFor, "calibrate-under-load", 30*time.Second, "duration of the calibration under the command load")
	flag.Float64Var(&o.rate, "rate", 0, "offer this many events/s instead of half the calibrated drain rate, without calibrating (to compare builds or settings at the same load)")
	flag.BoolVar(&o.keep, "keep", false, "keep the server's data folder")
	flag.StringVar(&fromCSV, "from-csv", "", "evaluate the targets and draw the plot again from a soak CSV (with -duration of its soak)")
	flag.Parse()
	if o.duration < time.Minute || o.interval <= 0 || o.retryRatio < 0 || o.retryRatio > 1 || o.calibration <= 0 || o.calibrateFor < 6*time.Second || o.rate < 0 {
		fmt.Fprintln(os.Stderr, "soak: -duration must be at least 1m, -calibrate-under-load at least 6s; -interval and -calibration positive; -retry-ratio in [0, 1]; -rate not negative")
		os.Exit(2)
	}
	var err error
	if fromCSV != "" {
		err = replay(fromCSV, o.duration, os.Stdout)
	} else {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = run(ctx, o, os.Stdout)
		stop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// replay re-evaluates a recorded soak: targets printed, plot drawn next to
// the CSV.
func replay(path string, total time.Duration, out io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	samples, err := readCSV(f)
	_ = f.Close()
	if err != nil {
		return err
	}
	w := windowsFor(total)
	writeTargets(out, evaluate(samples, total), w)
	name := strings.TrimSuffix(path, ".csv") + ".svg"
	title := "riffdb soak, " + total.String()
	if old, err := os.ReadFile(name); err == nil {
		// Keep the title of the plot this one replaces: it names the load
		// and the time of the run, which the CSV does not hold.
		if t, ok := svgTitle(old); ok {
			title = t
		}
	}
	svg, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := writeSVG(svg, title, samples, w); err != nil {
		_ = svg.Close()
		return err
	}
	return svg.Close()
}

func run(ctx context.Context, o options, stdout io.Writer) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	stamp := time.Now().UTC().Format("20060102-150405")
	base := filepath.Join(o.out, "soak-"+stamp)
	tmp, err := os.MkdirTemp("", "riffdb-soak-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintf(stdout, "soak: server data kept in %s\n", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	var summary strings.Builder
	out := io.MultiWriter(stdout, &summary)

	srv, err := startServer(ctx, o.riffdb, filepath.Join(tmp, "dev"), base+".log")
	if err != nil {
		return err
	}
	defer func() {
		if srv.alive() {
			srv.kill()
		}
	}()
	fmt.Fprintf(out, "soak: riffdb server pid %d, API %s, %s for %s\n", srv.pid(), srv.api, srv.metrics, o.duration)

	offered := o.rate
	if o.rate == 0 {
		cal, err := calibrate(ctx, srv, o.calibration, o.calibrateFor)
		if err != nil {
			return err
		}
		offered = cal.Rate / 2
		fmt.Fprintf(out, "calibration: drain rate %.0f events/s\n", cal.Rate)
		for _, n := range cal.Notes {
			fmt.Fprintf(out, "  %s\n", n)
		}
	}
	perCommand := offered / float64(mixEvents()) // requests/s of each command
	how := fmt.Sprintf("half the drain rate of %.0f/s", 2*offered)
	if o.rate > 0 {
		how = "-rate, not calibrated"
	}
	fmt.Fprintf(out, "load: %.0f events/s (%s): %.1f requests/s of each of %s, %.0f%% retried with the same idempotency key\n",
		offered, how, perCommand, commandNames(), o.retryRatio*100)

	csvf, err := os.Create(base + ".csv")
	if err != nil {
		return err
	}
	defer csvf.Close()
	samples, reports, err := soak(ctx, srv, o, perCommand, csvf, stdout)
	if err != nil {
		return err
	}
	for i, rep := range reports {
		fmt.Fprintf(out, "load %-12s requests=%d errors=%d retries=%d retry errors=%v throughput=%.1f/s latency p50 %.3f ms p99 %.3f ms\n",
			commandMix[i].name, rep.Requests, rep.Errors, rep.Retries, rep.RetryErrors, rep.Throughput,
			rep.LatencyMillis.P50, rep.LatencyMillis.P99)
	}
	if err := waitDrained(ctx, srv, 2*time.Minute); err != nil {
		fmt.Fprintf(out, "drain after the load: %v\n", err)
	} else {
		fmt.Fprintln(out, "drain after the load: backlog 0")
	}
	if err := srv.stop(30 * time.Second); err != nil {
		fmt.Fprintf(out, "server stop: %v\n", err)
	} else {
		fmt.Fprintln(out, "server stop: graceful, exit 0")
	}

	w := windowsFor(o.duration)
	fmt.Fprintln(out)
	writeTargets(out, evaluate(samples, o.duration), w)
	fmt.Fprintln(out, "(one shared 2-core machine: absolute figures are noisy; each target compares two windows of the same run)")

	svg, err := os.Create(base + ".svg")
	if err != nil {
		return err
	}
	title := fmt.Sprintf("riffdb soak, %s at %.0f events/s (%s), %s UTC", o.duration, offered, how, stamp)
	if err := writeSVG(svg, title, samples, w); err != nil {
		_ = svg.Close()
		return err
	}
	if err := svg.Close(); err != nil {
		return err
	}
	if err := os.WriteFile(base+".txt", []byte(summary.String()), 0o644); err != nil {
		return err
	}
	latest := filepath.Join(o.out, "soak-"+durationLabel(o.duration)+"-latest")
	for _, ext := range []string{".csv", ".svg", ".txt"} {
		b, err := os.ReadFile(base + ext)
		if err != nil {
			return err
		}
		if err := os.WriteFile(latest+ext, b, 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "soak: wrote %s.{csv,svg,txt,log} and %s.{csv,svg,txt}\n", base, latest)
	return nil
}

// durationLabel names a soak's duration in the stable file names: "60m",
// "5m", or Go's form when not a whole number of minutes.
func durationLabel(d time.Duration) string {
	if d%time.Minute == 0 {
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}

func commandNames() string {
	var names []string
	for _, c := range commandMix {
		names = append(names, c.name)
	}
	return strings.Join(names, ", ")
}
