package cli_test

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/cli"
	"github.com/riffdb/riffdb/loadtest"
	"github.com/riffdb/riffdb/server/servertest"
)

// startDevServer starts an in-process server with the embedded development
// configuration on ephemeral loopback ports and returns its address and a
// file holding its token.
func startDevServer(t *testing.T) (addr, tokenFile string) {
	t.Helper()
	root := t.TempDir()
	s, token := servertest.StartDev(t, filepath.Join(root, "dev"))
	tokenFile = filepath.Join(root, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return s.APIAddr(), tokenFile
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
