package bench_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/loadtest"
	"github.com/riffdb/riffdb/server"
)

// commandSlice is how long one target takes the load in
// BenchmarkFastCommands, and commandConcurrency the generator's clients.
const (
	commandSlice       = 3 * time.Second
	commandConcurrency = 32
)

// BenchmarkFastCommands measures the command path over HTTP against a
// do-nothing Go server driven by the same load generator, both as separate
// processes: the real binary on the embedded development configuration
// (tracing at sampling 1, the scrub on, delivery running) with its stores
// under TMPDIR (set TMPDIR=/dev/shm for fast storage), and
// bench/cmd/nullserver, which checks the bearer token, reads the body and
// answers a fixed response. The generator is loadtest.Run in this process,
// closed loop, commandConcurrency clients, for commandSlice per target;
// the targets alternate, a different one first in every iteration.
//
// It reports commands/s and null_requests/s and their ratio
// (commands_vs_null); server_cpu_us/command, the riffdb process's CPU
// time per command from the slice's start until everything it committed
// was delivered (its delivery included); null_cpu_us/request, the
// do-nothing server's; and generator_cpu_us/request, this process's CPU
// per request (the load generator's own cost: where it is near the
// server's, the generator is the limit).
//
// A third target is the floor: nullserver -store, the do-nothing server
// that also commits each request's body in a synced batch and delivers it
// through the spec's chain, on bare Pebble under TMPDIR with no riffdb
// code (bench/cmd/nullserver/store.go). It reports floor_commands/s,
// commands_vs_floor, and floor_cpu_us/command (until everything committed
// was delivered, as riffdb's): what a command's HTTP round trip and its
// storage work cost with nothing else.
//
// A fourth target is riffdb exporting its spans: the same configuration
// with an OTLP endpoint, an in-process receiver that discards what it
// gets (otlpReceiver). Without an endpoint riffdb's spans are not recorded
// (internal/observe/unrecorded); with one every sampled span is recorded,
// batched and sent. It reports otlp_commands/s, otlp_vs_default (its rate
// over the default's) and otlp_server_cpu_us/command: what exporting every
// span costs. Its slices are left out of generator_cpu_us/request, since
// the receiver's CPU is this process's.
func BenchmarkFastCommands(b *testing.B) {
	bins := b.TempDir()
	build := exec.Command("go", "build", "-o", bins, "github.com/riffdb/riffdb/cmd/riffdb", "github.com/riffdb/riffdb/bench/cmd/nullserver")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	riff, tokenPath := startDevTarget(b, filepath.Join(bins, "riffdb"), "")
	defer riff.stop(b)
	null := startTarget(b, "nullserver ready", filepath.Join(bins, "nullserver"), "-token-file", tokenPath)
	null.token = riff.token
	defer null.stop(b)
	floor := startTarget(b, "nullserver ready", filepath.Join(bins, "nullserver"), "-token-file", tokenPath,
		"-store", filepath.Join(b.TempDir(), "floor"))
	floor.token = riff.token
	defer floor.stop(b)
	otlp, _ := startDevTarget(b, filepath.Join(bins, "riffdb"), otlpReceiver(b))
	defer otlp.stop(b)

	type tally struct {
		requests      int64
		elapsed       time.Duration
		server, local time.Duration
	}
	var t [4]tally // riffdb, null, floor, riffdb exporting its spans
	targets := []*target{riff, null, floor, otlp}
	round := 0
	for b.Loop() {
		for k := range targets {
			i := (round + k) % len(targets)
			tg := targets[i]
			server0, local0 := tg.cpu(b), cpuTime(b)
			rep, err := loadtest.Run(context.Background(), loadtest.Config{Address: tg.addr, Token: tg.token,
				Concurrency: commandConcurrency, Duration: commandSlice, Requests: 1 << 30})
			if err != nil {
				b.Fatal(err)
			}
			if rep.Errors > 0 {
				b.Fatalf("%d of %d requests failed: %v", rep.Errors, rep.Requests, rep.ErrorsByStatus)
			}
			local := cpuTime(b) - local0
			switch i {
			case 0, 3:
				tg.drained(b)
			case 2:
				floor.floorDrained(b)
			}
			t[i].requests += rep.Succeeded
			t[i].elapsed += time.Duration(rep.ElapsedSeconds * float64(time.Second))
			t[i].server += tg.cpu(b) - server0
			t[i].local += local
		}
		round++
	}
	rate := func(x tally) float64 { return float64(x.requests) / x.elapsed.Seconds() }
	per := func(d time.Duration, n int64) float64 { return float64(d.Microseconds()) / float64(n) }
	b.ReportMetric(rate(t[0]), "commands/s")
	b.ReportMetric(rate(t[1]), "null_requests/s")
	b.ReportMetric(rate(t[0])/rate(t[1]), "commands_vs_null")
	b.ReportMetric(per(t[0].server, t[0].requests), "server_cpu_us/command")
	b.ReportMetric(per(t[1].server, t[1].requests), "null_cpu_us/request")
	b.ReportMetric(rate(t[2]), "floor_commands/s")
	b.ReportMetric(rate(t[0])/rate(t[2]), "commands_vs_floor")
	b.ReportMetric(per(t[2].server, t[2].requests), "floor_cpu_us/command")
	b.ReportMetric(rate(t[3]), "otlp_commands/s")
	b.ReportMetric(rate(t[3])/rate(t[0]), "otlp_vs_default")
	b.ReportMetric(per(t[3].server, t[3].requests), "otlp_server_cpu_us/command")
	// The OTLP target's receiver runs in this process: its slices are
	// left out of the generator's own cost.
	b.ReportMetric(per(t[0].local+t[1].local+t[2].local, t[0].requests+t[1].requests+t[2].requests), "generator_cpu_us/request")
}

// startDevTarget sets up a riffdb data directory with server.DevSetup and
// starts the real binary bin on the development configuration, on
// loopback ports of its own, and with otlp as its OTLP endpoint when not
// empty. It returns the target, whose token is the directory's development
// token, and that token's file.
func startDevTarget(b *testing.B, bin, otlp string) (*target, string) {
	b.Helper()
	dir := filepath.Join(b.TempDir(), "riffdb")
	if _, _, err := server.DevSetup(dir, func(string) string { return "" }, config.Overrides{}); err != nil {
		b.Fatal(err)
	}
	r := strings.NewReplacer(`listen = "127.0.0.1:7420"`, `listen = "127.0.0.1:0"`,
		`metrics_listen = "127.0.0.1:9464"`, `metrics_listen = "127.0.0.1:0"`,
		`otlp_endpoint = ""`, `otlp_endpoint = "`+otlp+`"`)
	toml := r.Replace(string(config.DevTOML(dir)))
	if strings.Contains(toml, "7420") || strings.Contains(toml, "9464") || !strings.Contains(toml, `otlp_endpoint = "`+otlp+`"`) {
		b.Fatal("the development configuration changed; update BenchmarkFastCommands' replacements")
	}
	cfgPath := filepath.Join(dir, "riffdb.toml")
	if err := os.WriteFile(cfgPath, []byte(toml), 0o600); err != nil {
		b.Fatal(err)
	}
	tokenPath := filepath.Join(dir, "dev-token")
	tok, err := os.ReadFile(tokenPath)
	if err != nil {
		b.Fatal(err)
	}
	t := startTarget(b, "riffdb ready", bin, "server", "run", "--config", cfgPath)
	t.token = strings.TrimSpace(string(tok))
	return t, tokenPath
}

// target is a server process under load.
type target struct {
	cmd    *exec.Cmd
	addr   string
	token  string // the bearer token its requests carry
	exited chan error
	log    *strings.Builder
}

// startTarget starts bin with args and waits for the JSON log line whose
// msg is ready, which names the listen address.
func startTarget(b *testing.B, ready, bin string, args ...string) *target {
	b.Helper()
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	t := &target{cmd: cmd, exited: make(chan error, 1), log: &strings.Builder{}}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct {
				Msg    string `json:"msg"`
				Listen string `json:"listen"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == ready {
				addr <- line.Listen
			} else if t.log.Len() < 64<<10 {
				t.log.WriteString(sc.Text() + "\n")
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		t.exited <- cmd.Wait()
	}()
	select {
	case t.addr = <-addr:
	case err := <-t.exited:
		b.Fatalf("%s exited before it was ready: %v\n%s", filepath.Base(bin), err, t.log.String())
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		b.Fatalf("%s printed no address within 2 minutes", filepath.Base(bin))
	}
	return t
}

// cpu returns the process's CPU time so far (user and system, from
// /proc/PID/stat, in clock ticks of 10 ms).
func (t *target) cpu(b *testing.B) time.Duration {
	b.Helper()
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(t.cmd.Process.Pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command name, which is in parentheses.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		b.Fatal(err)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// drained waits until the riffdb target reports nothing pending.
func (t *target) drained(b *testing.B) {
	b.Helper()
	waitNonePending(b, "riffdb", func() (int64, string, error) { return startupPending(t.addr, t.token) })
}

// floorDrained waits until the floor target (nullserver -store) has
// delivered every event it committed.
func (t *target) floorDrained(b *testing.B) {
	b.Helper()
	waitNonePending(b, "the floor server", func() (int64, string, error) {
		n, err := floorPending(t.addr)
		return int64(n), "n/a", err
	})
}

// waitNonePending polls pending (the count, a health word, an error) until
// it answers 0 without an error, for up to 5 minutes.
func waitNonePending(b *testing.B, name string, pending func() (int64, string, error)) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		n, health, err := pending()
		if err == nil && n == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s still has %d pending after 5 minutes (health %s, %v)", name, n, health, err)
		}
		time.Sleep(pollEvery)
	}
}

func floorPending(addr string) (uint64, error) {
	resp, err := http.Get("http://" + addr + "/pending")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /pending: %s", resp.Status)
	}
	return strconv.ParseUint(string(body), 10, 64)
}

// stop stops the process with SIGTERM and waits for it.
func (t *target) stop(b *testing.B) {
	b.Helper()
	_ = t.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-t.exited:
	case <-time.After(time.Minute):
		_ = t.cmd.Process.Kill()
		b.Errorf("%s did not stop within a minute of SIGTERM", t.cmd.Path)
	}
}
