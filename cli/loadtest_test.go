//go:build linux

package cli_test

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/capability"
	"github.com/riffdb/riffdb/cli"
	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
	"github.com/riffdb/riffdb/loadtest"
	"github.com/riffdb/riffdb/server"
	"github.com/riffdb/riffdb/server/servertest"
)

// The loadtest tests are Linux-only: they run a server with an outbox
// archive, which refuses to run elsewhere, and open pseudo-terminals.

// startDevServer starts an in-process server with the embedded development
// configuration on ephemeral loopback ports and returns its address and a
// file holding its token.
func startDevServer(t *testing.T) (addr, tokenFile string) {
	t.Helper()
	d := startDev(t)
	return d.addr, d.tokenFile
}

// devServer is a started development server: its API and metrics
// addresses, a file with a token holding every permission, and a file with
// a token that may only execute commands.
type devServer struct {
	addr, metrics, tokenFile, execOnlyFile string
}

func startDev(t *testing.T) devServer {
	t.Helper()
	root := t.TempDir()
	dev := filepath.Join(root, "dev")
	cfg, _, err := server.DevSetup(dev, nil, config.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	creds, err := capability.Open(cfg.Server.CredentialPath)
	if err != nil {
		t.Fatal(err)
	}
	execOnly, _, err := creds.Create("exec-only", []capability.Permission{capability.ExecuteCommands}, "")
	if err != nil {
		t.Fatal(err)
	}
	s, token := servertest.StartDev(t, dev)
	d := devServer{addr: s.APIAddr(), metrics: s.MetricsAddr(),
		tokenFile: filepath.Join(root, "token"), execOnlyFile: filepath.Join(root, "exec-only")}
	for f, tok := range map[string]string{d.tokenFile: token, d.execOnlyFile: execOnly} {
		if err := os.WriteFile(f, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

type loadEnvelope struct {
	Command string          `json:"command"`
	OK      bool            `json:"ok"`
	Result  loadtest.Report `json:"result"`
	Error   *struct {
		Kind, Code, Message string
	} `json:"error"`
}

func runLoad(t *testing.T, args ...string) (int, loadEnvelope, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := cli.Main(append([]string{"--output", "json", "loadtest"}, args...), nil, &out, &errb)
	var env loadEnvelope
	if err := json.Unmarshal(out.Bytes(), &env); err != nil || bytes.Count(out.Bytes(), []byte("\n")) != 1 {
		t.Fatalf("output is not one JSON envelope: %v\n%s", err, out.String())
	}
	return code, env, errb.String()
}

func TestLoadtestCommand(t *testing.T) {
	addr, tokenFile := startDevServer(t)

	code, env, _ := runLoad(t, "--address", addr, "--token-file", tokenFile, "-n", "60", "-c", "3")
	if code != cli.ExitOK || !env.OK || env.Command != "loadtest" {
		t.Fatalf("exit %d envelope %+v", code, env)
	}
	r := env.Result
	if r.Requests != 60 || r.Succeeded != 60 || r.Mode != "closed" || len(r.Slowest) != 5 || len(r.Slowest[0].TraceID) != 32 ||
		r.LatencyMillis.P50 <= 0 || r.LatencyMillis.Max < r.LatencyMillis.P99 {
		t.Fatalf("result %+v", r)
	}

	code, env, _ = runLoad(t, "--address", "http://"+addr, "--token-file", tokenFile, "-n", "20", "--rate", "1000",
		"--input-template", `{"order_id":"cli-{{run}}-{{n}}","amount_cents":5,"note":"n{{n}}"}`)
	if code != cli.ExitOK || env.Result.Mode != "open" || env.Result.Requests != 20 || env.Result.Succeeded != 20 {
		t.Fatalf("open loop: exit %d result %+v", code, env.Result)
	}

	// Retries with the same idempotency key come back as replays.
	code, env, _ = runLoad(t, "--address", addr, "--token-file", tokenFile, "-n", "20", "-c", "2", "--retry-ratio", "0.5")
	if code != cli.ExitOK || env.Result.Succeeded != 20 || env.Result.Retries != 10 || len(env.Result.RetryErrors) != 0 {
		t.Fatalf("--retry-ratio 0.5: exit %d retries %d retry errors %v", code, env.Result.Retries, env.Result.RetryErrors)
	}

	// Text output.
	var out bytes.Buffer
	if code := cli.Main([]string{"loadtest", "--address", addr, "--token-file", tokenFile, "-n", "10"}, nil, &out, io.Discard); code != 0 {
		t.Fatalf("text mode exit %d", code)
	}
	for _, want := range []string{"closed loop with 16 workers", "requests=10 errors=0", "p99.9", "slow #1", "trace="} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("text output lacks %q:\n%s", want, out.String())
		}
	}

	// Token and address from the environment.
	t.Setenv("RIFFDB_ADDRESS", addr)
	b, _ := os.ReadFile(tokenFile)
	t.Setenv("RIFFDB_TOKEN", strings.TrimSpace(string(b)))
	if code, env, _ := runLoad(t, "-n", "5"); code != 0 || env.Result.Succeeded != 5 {
		t.Fatalf("from the environment: exit %d %+v", code, env)
	}
}

func TestLoadtestCommandFailures(t *testing.T) {
	addr, tokenFile := startDevServer(t)
	bad := filepath.Join(t.TempDir(), "bad")
	if err := os.WriteFile(bad, []byte("riffdb_bogus\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("RIFFDB_TOKEN", "")
	t.Setenv("RIFFDB_ADDRESS", "")
	for _, tc := range []struct {
		name     string
		args     []string
		exit     int
		kind     string
		code     string
		noResult bool
	}{
		{"every request failed", []string{"--address", addr, "--token-file", bad, "-n", "8"}, cli.ExitPublic, "public", "all_requests_failed", false},
		{"non-loopback", []string{"--address", "http://10.1.2.3:7420", "--token-file", tokenFile}, cli.ExitLocal, "local", "not_loopback", true},
		{"non-loopback otlp", []string{"--address", addr, "--token-file", tokenFile, "--otlp-endpoint", "192.0.2.1:4317"}, cli.ExitLocal, "local", "not_loopback", true},
		{"no token", []string{"--address", addr}, cli.ExitLocal, "local", "no_token", true},
		{"unreadable token file", []string{"--address", addr, "--token-file", filepath.Join(t.TempDir(), "none")}, cli.ExitLocal, "local", "token_unreadable", true},
		{"template without {{n}}", []string{"--address", addr, "--token-file", tokenFile, "--input-template", `{"order_id":"x","amount_cents":1}`}, cli.ExitLocal, "local", "usage", true},
		{"zero rate", []string{"--address", addr, "--token-file", tokenFile, "--rate", "0"}, cli.ExitLocal, "local", "usage", true},
		{"zero requests", []string{"--address", addr, "--token-file", tokenFile, "-n", "0"}, cli.ExitLocal, "local", "usage", true},
		{"sample ratio", []string{"--address", addr, "--token-file", tokenFile, "--sample-ratio", "0"}, cli.ExitLocal, "local", "usage", true},
		{"retry ratio", []string{"--address", addr, "--token-file", tokenFile, "--retry-ratio", "1.5"}, cli.ExitLocal, "local", "usage", true},
		{"zero wait timeout", []string{"--address", addr, "--token-file", tokenFile, "--wait-delivered", "--wait-timeout", "0s"}, cli.ExitLocal, "local", "usage", true},
		{"metrics address without waiting", []string{"--address", addr, "--token-file", tokenFile, "--metrics-address", "127.0.0.1:9464"}, cli.ExitLocal, "local", "usage", true},
		{"non-loopback metrics", []string{"--address", addr, "--token-file", tokenFile, "--wait-delivered", "--metrics-address", "192.0.2.1:9464"}, cli.ExitLocal, "local", "not_loopback", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, env, _ := runLoad(t, tc.args...)
			if code != tc.exit || env.OK || env.Error == nil || env.Error.Kind != tc.kind || env.Error.Code != tc.code {
				t.Fatalf("exit %d envelope %+v, want exit %d %s/%s", code, env, tc.exit, tc.kind, tc.code)
			}
			if tc.noResult != (env.Result.Requests == 0) {
				t.Fatalf("result %+v", env.Result)
			}
			if strings.Contains(env.Error.Message, tokenFile) || strings.Contains(env.Error.Message, "/tmp") {
				t.Fatalf("message contains a path: %s", env.Error.Message)
			}
		})
	}
	// Every request refused by the contract: exit 1, the 400s counted in the result.
	code, env, _ := runLoad(t, "--address", addr, "--token-file", tokenFile, "-n", "6", "--command", "cancel_order",
		"--input-template", `{"order_id":"{{run}}-{{n}}","reason":{{n}}}`)
	if code != cli.ExitPublic || env.Result.ErrorsByStatus["400"] != 6 {
		t.Fatalf("invalid input: exit %d %+v", code, env)
	}
}

// TestLoadtestWaitDelivered: --wait-delivered waits until the archive holds
// every event of the run and reports the delivery and the commit→archived
// lag next to the command latency, in JSON and in text; without a terminal
// the text output has no progress line.
func TestLoadtestWaitDelivered(t *testing.T) {
	d := startDev(t)
	code, env, _ := runLoad(t, "--address", d.addr, "--token-file", d.tokenFile, "-n", "40", "-c", "4",
		"--wait-delivered", "--metrics-address", d.metrics)
	del := env.Result.Delivery
	if code != cli.ExitOK || del == nil || !del.Drained || del.DeliveredEvents != 40 || del.Throughput <= 0 ||
		del.LagMillis == nil || del.LagMillis.Count != 40 || del.LagMillis.P99 < del.LagMillis.P50 {
		t.Fatalf("exit %d result %+v delivery %+v", code, env.Result, del)
	}
	// Without a metrics address the lag is absent, not empty.
	var out bytes.Buffer
	code = cli.Main([]string{"--output", "json", "loadtest", "--address", d.addr, "--token-file", d.tokenFile, "-n", "5",
		"--wait-delivered"}, nil, &out, io.Discard)
	if code != cli.ExitOK || !strings.Contains(out.String(), `"delivery":{"drained":true`) || strings.Contains(out.String(), "lag_ms") {
		t.Fatalf("exit %d %s", code, out.String())
	}
	// Text mode with stdout on a regular file: 120 requests at 100/s last
	// over a second, long enough for a progress line on a terminal.
	f, err := os.CreateTemp(t.TempDir(), "stdout")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	code = cli.Main([]string{"loadtest", "--address", d.addr, "--token-file", d.tokenFile, "-n", "120", "--rate", "100",
		"--wait-delivered", "--metrics-address", d.metrics}, nil, f, io.Discard)
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for _, want := range []string{"delivery: drained after", "delivered=120 in", "commit→archived lag (ms, 120 deliveries", "(command latency p50"} {
		if code != cli.ExitOK || !strings.Contains(text, want) {
			t.Fatalf("exit %d, text lacks %q:\n%s", code, want, text)
		}
	}
	if strings.ContainsAny(text, "\r\x1b") {
		t.Fatalf("progress printed although stdout is not a terminal: %q", text)
	}
}

// TestLoadtestWaitDeliveredNeedsStatistics: a token without
// read_statistics is refused before any request, with a message naming the
// permission; without --wait-delivered the same token runs (without a
// backlog on the progress line).
func TestLoadtestWaitDeliveredNeedsStatistics(t *testing.T) {
	d := startDev(t)
	code, env, _ := runLoad(t, "--address", d.addr, "--token-file", d.execOnlyFile, "-n", "5", "--wait-delivered")
	if code != cli.ExitPublic || env.Error == nil || env.Error.Code != "read_statistics_required" ||
		!strings.Contains(env.Error.Message, "read_statistics") || env.Result.Requests != 0 {
		t.Fatalf("exit %d envelope %+v", code, env)
	}
	if code, env, _ := runLoad(t, "--address", d.addr, "--token-file", d.execOnlyFile, "-n", "5"); code != cli.ExitOK || env.Result.Succeeded != 5 {
		t.Fatalf("exit %d envelope %+v", code, env)
	}
}

// TestLoadtestProgressOnTerminal runs the command with stdout on a
// pseudo-terminal. An open-loop run of 150 requests at 100/s lasts at least
// 1.49 s by construction, so the once-a-second progress line appears: it
// shows the numbers so far and the server's backlog, and is erased before
// the report. In JSON mode the terminal gets the envelope only.
func TestLoadtestProgressOnTerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a loadtest of several seconds on a pseudo-terminal")
	}
	master, slave, err := testutil.OpenPTY()
	if err != nil {
		t.Skipf("no pseudo-terminal available: %v", err)
	}
	defer master.Close()
	defer slave.Close()
	d := startDev(t)
	args := []string{"loadtest", "--address", d.addr, "--token-file", d.tokenFile, "-n", "150", "--rate", "100", "-c", "4",
		"--wait-delivered", "--metrics-address", d.metrics}
	got := make(chan string, 1)
	go func() { got <- testutil.ReadUntilMark(master) }()
	code := cli.Main(args, nil, slave, io.Discard)
	if _, err := slave.WriteString(testutil.PTYMark); err != nil {
		t.Fatal(err)
	}
	out := <-got
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %q", code, out)
	}
	i := strings.Index(out, "\r\x1b[Kloadtest: 1s  requests=")
	if i < 0 || !strings.Contains(out[i:], "rate=") || !strings.Contains(out[i:], "errors=0  p99=") || !strings.Contains(out[i:], "pending=") {
		t.Fatalf("no progress line with the numbers and the backlog: %q", out)
	}
	if !strings.Contains(out, "\r\x1b[Kopen loop at 100/s") || !strings.Contains(out, "delivery: drained") {
		t.Fatalf("the progress line is not erased before the report: %q", out)
	}

	go func() { got <- testutil.ReadUntilMark(master) }()
	code = cli.Main(append([]string{"--output", "json"}, args...), nil, slave, io.Discard)
	if _, err := slave.WriteString(testutil.PTYMark); err != nil {
		t.Fatal(err)
	}
	out = <-got
	if code != cli.ExitOK || strings.Contains(out, "\x1b") || !strings.HasPrefix(out, "{") {
		t.Fatalf("JSON mode: exit %d, terminal got %q", code, out)
	}
}
