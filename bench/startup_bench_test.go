package bench_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/primary"
	"github.com/riffdb/riffdb/primary/contract"
	"github.com/riffdb/riffdb/server"
	"github.com/riffdb/riffdb/statsapi"
)

// BenchmarkStartup measures, with the real binary, the time from process
// start to the first delivery after a clean shutdown, with an archive of
// 10,000 records (the baseline) and of 1,000,000 records of about 1 KiB
// (RIFFDB_STARTUP_RECORDS, a comma-separated list of sizes, replaces the
// large one, e.g. 10000000; RIFFDB_STARTUP_PAYLOAD_BYTES, default 900, sets
// the payload of every archive's records).
//
// Each size gets its own development installation: a fresh primary, and an
// archive bulk-built by bench/cmd/mkarchive bound to the primary's
// identity, holding records of history incarnation 0 (before the primary's
// first one, so that the history anchors accept it), whose build validated
// and checkpointed every record and waited for the engine's compactions
// (the tables of records delivered one by one, about one per 32 MiB, not a
// fresh load's compaction debt; tables@N reports how many). A first start
// and a clean SIGTERM stop follow. Each start then commits one event while no server runs, starts
// `riffdb server run --config` (the development configuration with a 1 TiB
// quota), measures until GET /v1/stats reports nothing pending (polled
// every 2 ms once the "riffdb ready" log line gave the API address), and
// stops the server with SIGTERM.
//
// Every iteration starts each size in turn, a different one first each
// time (interleaved, so that the machine's noise falls on all alike). ms/start@N is the median over the
// iterations for the archive of N records, ratio@N that median over the
// 10,000-record archive's (targets: ≤ 1 s and ≤ 1.2×), min_ms/start@N and
// min_ratio@N the same for the fastest start (the 10,000-record starts are
// bimodal on this machine; see the log line of every start's time), and
// first_start_ms@N the first start after the build. RIFFDB_STARTUP_LOGS
// names a directory that receives the server's log of each installation's
// last start.
func BenchmarkStartup(b *testing.B) {
	sizes := []int{1_000_000}
	if v := os.Getenv("RIFFDB_STARTUP_RECORDS"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				b.Fatalf("RIFFDB_STARTUP_RECORDS: %q is not a record count", f)
			}
			sizes = append(sizes, n)
		}
	}
	sizes = append([]int{10_000}, slices.DeleteFunc(sizes, func(n int) bool { return n == 10_000 })...)
	bins := b.TempDir()
	build := exec.Command("go", "build", "-o", bins, "github.com/riffdb/riffdb/cmd/riffdb", "github.com/riffdb/riffdb/bench/cmd/mkarchive")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	bin, mkarchive := filepath.Join(bins, "riffdb"), filepath.Join(bins, "mkarchive")
	installs := make([]*startupInstall, len(sizes))
	first := make([]float64, len(sizes))
	for i, n := range sizes {
		installs[i] = newStartupInstall(b, n, mkarchive)
		first[i] = installs[i].startToDelivery(b, bin)
	}
	// Interleaved: every iteration starts each installation once, a
	// different one first each time, so that the machine's noise (and
	// whatever the first start of an iteration pays) falls on every size
	// alike.
	times := make([][]float64, len(sizes))
	for iter := 0; b.Loop(); iter++ {
		for j := range installs {
			i := (iter + j) % len(installs)
			times[i] = append(times[i], installs[i].startToDelivery(b, bin))
		}
	}
	var baseline, fastest float64
	for i, n := range sizes {
		b.Logf("records=%d: starts (ms, in order) %.1f", n, times[i])
		slices.Sort(times[i])
		median := times[i][len(times[i])/2]
		if i == 0 {
			baseline = median
		}
		if i == 0 {
			fastest = times[i][0]
		}
		b.ReportMetric(float64(installs[i].tables(b)), fmt.Sprintf("tables@%d", n))
		b.ReportMetric(first[i], fmt.Sprintf("first_start_ms@%d", n))
		b.ReportMetric(median, fmt.Sprintf("ms/start@%d", n))
		b.ReportMetric(times[i][0], fmt.Sprintf("min_ms/start@%d", n))
		if i > 0 {
			b.ReportMetric(median/baseline, fmt.Sprintf("ratio@%d", n))
			b.ReportMetric(times[i][0]/fastest, fmt.Sprintf("min_ratio@%d", n))
		}
	}
}

// startupInstall is a development installation whose archive holds n
// records.
type startupInstall struct {
	dir      string
	cfg      *config.Config
	contract *contract.Contract
	commits  int
}

func newStartupInstall(b *testing.B, n int, mkarchive string) *startupInstall {
	b.Helper()
	dir := filepath.Join(b.TempDir(), "riffdb")
	cfg, _, err := server.DevSetup(dir, func(string) string { return "" }, config.Overrides{})
	if err != nil {
		b.Fatal(err)
	}
	c, err := contract.Compile(server.DevContract)
	if err != nil {
		b.Fatal(err)
	}
	// The development configuration on loopback ports of the system's
	// choice, with a quota that holds the largest archive.
	toml := strings.NewReplacer(`listen = "127.0.0.1:7420"`, `listen = "127.0.0.1:0"`,
		`metrics_listen = "127.0.0.1:9464"`, `metrics_listen = "127.0.0.1:0"`,
		`quota_encoded_bytes = 1073741824`, `quota_encoded_bytes = 1099511627776`).Replace(string(config.DevTOML(dir)))
	if !strings.Contains(toml, `quota_encoded_bytes = 1099511627776`) || strings.Contains(toml, "7420") {
		b.Fatal("the development configuration changed; update BenchmarkStartup's replacements")
	}
	if err := os.WriteFile(filepath.Join(dir, "riffdb.toml"), []byte(toml), 0o600); err != nil {
		b.Fatal(err)
	}
	in := &startupInstall{dir: dir, cfg: cfg, contract: c}
	db, err := primary.Open(context.Background(), primary.Options{Path: cfg.Databases[0].Path, Contract: c})
	if err != nil {
		b.Fatal(err)
	}
	id := db.Identity()
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	payload := cmp.Or(os.Getenv("RIFFDB_STARTUP_PAYLOAD_BYTES"), "900")
	cmd := exec.Command(mkarchive, "-records", strconv.Itoa(n), "-dir", cfg.Databases[0].Outbox.Directory,
		"-database", id.String(), "-incarnation", "0", "-payload-bytes", payload)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("mkarchive: %v\n%s", err, out)
	}
	b.Logf("archive of %d records built (and validated) in %.1f s", n, time.Since(start).Seconds())
	return in
}

// tables counts the table files of the installation's archive.
func (in *startupInstall) tables(b *testing.B) int {
	b.Helper()
	names, err := os.ReadDir(filepath.Join(in.cfg.Databases[0].Outbox.Directory, archive.StoreDirName))
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, e := range names {
		if strings.HasSuffix(e.Name(), ".sst") {
			n++
		}
	}
	return n
}

// commit commits one place_order command while no server runs: the next
// start has exactly one event to deliver.
func (in *startupInstall) commit(b *testing.B) {
	b.Helper()
	db, err := primary.Open(context.Background(), primary.Options{Path: in.cfg.Databases[0].Path, Contract: in.contract})
	if err != nil {
		b.Fatal(err)
	}
	in.commits++
	input := fmt.Sprintf(`{"order_id":"s-%d","amount_cents":1}`, in.commits)
	if _, err := db.Execute(context.Background(), "place_order", json.RawMessage(input), ""); err != nil {
		b.Fatal(err)
	}
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
}

// startToDelivery commits one event, starts the server and returns the
// milliseconds from process start until the event is delivered; then it
// stops the server cleanly.
func (in *startupInstall) startToDelivery(b *testing.B, bin string) float64 {
	b.Helper()
	in.commit(b)
	// Write back every dirty page first (the previous server's, the
	// commit's): otherwise a start that follows a large archive's stop
	// waits on that writeback in its first fsync, and the order of the
	// starts, not the archive, decides the times.
	unix.Sync()
	cmd := exec.Command(bin, "server", "run", "--config", filepath.Join(in.dir, "riffdb.toml"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan error, 1)
	api := make(chan string, 1)
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			l := sc.Text()
			log.WriteString(l + "\n")
			var line struct {
				Msg    string `json:"msg"`
				Listen string `json:"listen"`
			}
			if json.Unmarshal([]byte(l), &line) == nil && line.Msg == "riffdb ready" {
				api <- line.Listen
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		exited <- cmd.Wait()
	}()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				b.Fatalf("the server's clean stop failed: %v\n%s", err, log.String())
			}
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			b.Fatal("the server did not stop within a minute of SIGTERM")
		}
	}
	var addr string
	select {
	case addr = <-api:
	case err := <-exited:
		b.Fatalf("the server exited before it was ready: %v\n%s", err, log.String())
	case <-time.After(5 * time.Minute):
		_ = cmd.Process.Kill()
		b.Fatal("the server printed no API address within 5 minutes")
	}
	token, err := os.ReadFile(filepath.Join(in.dir, "dev-token"))
	if err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		pending, health, err := startupPending(addr, strings.TrimSpace(string(token)))
		if err == nil && pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			stop()
			b.Fatalf("nothing delivered within 5 minutes (last: pending %d, health %s, %v)", pending, health, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	elapsed := time.Since(start)
	stop()
	if dir := os.Getenv("RIFFDB_STARTUP_LOGS"); dir != "" {
		// The server's log of the last start of each size, to see where
		// the time goes (the log's timestamps against start).
		name := filepath.Join(dir, filepath.Base(filepath.Dir(in.dir))+".log")
		text := fmt.Sprintf("process started %s, delivered after %v\n%s", start.UTC().Format(time.RFC3339Nano), elapsed, log.String())
		if err := os.WriteFile(name, []byte(text), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	return float64(elapsed.Microseconds()) / 1000
}

var errNotReady = errors.New("the pending count is not known yet")

// startupPending returns the pending count and the outbox health.
func startupPending(addr, token string) (int64, string, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/stats", nil)
	if err != nil {
		return -1, "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return -1, "", err
	}
	defer resp.Body.Close()
	var st statsapi.Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || len(st.Databases) != 1 {
		return -1, "", fmt.Errorf("GET /v1/stats: %s (%v)", resp.Status, err)
	}
	d := st.Databases[0]
	if d.PendingOutboxDeliveries == nil {
		return -1, d.Outbox.Health, errNotReady
	}
	return int64(*d.PendingOutboxDeliveries), d.Outbox.Health, nil
}
