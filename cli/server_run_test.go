package cli_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/riffdb/riffdb/cli"
)

// TestServerRunStartupFailures runs `server run` in process on installations
// that cannot start and checks the envelope: kind local, exit 2, the class's
// code, no path, no panic.
func TestServerRunStartupFailures(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, root string) []string // returns extra flags
		code   string
		says   string
	}{
		{"listen busy", func(t *testing.T, _ string) []string {
			return []string{"--listen", busyAddr(t)}
		}, "listen_unavailable", "server.listen"},
		{"metrics busy", func(t *testing.T, _ string) []string {
			return []string{"--metrics-listen", busyAddr(t)}
		}, "listen_unavailable", "server.metrics_listen"},
		{"contract missing", func(t *testing.T, root string) []string {
			mustDo(t, os.Remove(filepath.Join(root, "contract.toml")))
			return nil
		}, "contract_invalid", `database "default": the contract`},
		{"credentials not private", func(t *testing.T, root string) []string {
			mustDo(t, os.Mkdir(filepath.Join(root, "creds"), 0o755))
			mustDo(t, os.Chmod(filepath.Join(root, "creds"), 0o755))
			return nil
		}, "credentials_refused", "server.credential_path"},
		{"database unopenable", func(t *testing.T, root string) []string {
			mustDo(t, os.WriteFile(filepath.Join(root, "db"), nil, 0o600))
			return nil
		}, "database_unavailable", `database "default": the primary store cannot be opened`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			mustDo(t, os.Chmod(root, 0o700))
			mustDo(t, os.WriteFile(filepath.Join(root, "contract.toml"),
				[]byte("[commands.put]\ninput = { k = \"string\" }\nemits = [\"put\"]\n"), 0o600))
			config := filepath.Join(root, "riffdb.toml")
			mustDo(t, os.WriteFile(config, []byte(fmt.Sprintf(`
[server]
listen = "127.0.0.1:0"
metrics_listen = "127.0.0.1:0"
credential_path = %q
[database]
path = %q
contract = %q
`, filepath.Join(root, "creds"), filepath.Join(root, "db"), filepath.Join(root, "contract.toml"))), 0o600))
			args := append([]string{"--output", "json", "server", "run", "--config", config}, tc.damage(t, root)...)
			var stdout, stderr bytes.Buffer
			code := cli.Main(args, strings.NewReader(""), &stdout, &stderr)
			if code != cli.ExitLocal {
				t.Errorf("exit %d, want %d", code, cli.ExitLocal)
			}
			var env struct {
				OK    bool `json:"ok"`
				Error struct {
					Kind, Code, Message string
				} `json:"error"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &env); err != nil {
				t.Fatalf("no envelope: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
			}
			if env.OK || env.Error.Kind != "local" || env.Error.Code != tc.code {
				t.Errorf("got %+v, want kind local, code %s", env, tc.code)
			}
			if !strings.Contains(env.Error.Message, tc.says) || strings.Contains(env.Error.Message, root) {
				t.Errorf("message %q: want it to say %q and name no path", env.Error.Message, tc.says)
			}
			if s := stderr.String(); strings.Contains(s, "panic") || strings.Contains(s, "goroutine ") {
				t.Errorf("stderr shows a panic:\n%s", s)
			}
		})
	}
}

// busyAddr returns an address that is taken until the test ends.
func busyAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	mustDo(t, err)
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// serverFixture is an installation for running `server run` in process: a
// private root, a configuration file, and a token that may execute commands.
type serverFixture struct {
	root, config, token string
}

// newServerFixture writes a configuration (extra is added to [server]) and
// creates a capability with the CLI.
func newServerFixture(t *testing.T, extra string) serverFixture {
	t.Helper()
	root := t.TempDir()
	mustDo(t, os.Chmod(root, 0o700))
	mustDo(t, os.WriteFile(filepath.Join(root, "contract.toml"),
		[]byte("[commands.put]\ninput = { k = \"string\" }\nemits = [\"put\"]\n"), 0o600))
	config := filepath.Join(root, "riffdb.toml")
	mustDo(t, os.WriteFile(config, []byte(fmt.Sprintf(`
[server]
listen = "127.0.0.1:0"
metrics_listen = "127.0.0.1:0"
credential_path = %q
%s
[database]
path = %q
contract = %q
[maintenance.outbox]
kind = "durable_local"
directory = %q
quota_encoded_bytes = 1048576
`, filepath.Join(root, "creds"), extra, filepath.Join(root, "db"), filepath.Join(root, "contract.toml"),
		filepath.Join(root, "outbox"))), 0o600))
	mustDo(t, os.Mkdir(filepath.Join(root, "outbox"), 0o700))
	var stdout, stderr bytes.Buffer
	if code := cli.Main([]string{"--output", "json", "capability", "create", "--config", config,
		"--permission", "execute_commands"}, strings.NewReader(""), &stdout, &stderr); code != cli.ExitOK {
		t.Fatalf("capability create: exit %d\n%s\n%s", code, stdout.String(), stderr.String())
	}
	var env struct {
		Result struct{ Token string } `json:"result"`
	}
	mustDo(t, json.Unmarshal(stdout.Bytes(), &env))
	return serverFixture{root: root, config: config, token: env.Result.Token}
}

// logLines is the standard error of an in-process server: it collects the
// JSON log lines and wakes the test waiting for one.
type logLines struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced at every write
}

func newLogLines() *logLines { return &logLines{changed: make(chan struct{})} }

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	close(l.changed)
	l.changed = make(chan struct{})
	return l.buf.Write(p)
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// logLine is one decoded log line.
type logLine map[string]any

func (l logLine) str(k string) string { s, _ := l[k].(string); return s }

// lines decodes every complete line so far (non-JSON lines are skipped).
func (l *logLines) lines() ([]logLine, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []logLine
	for _, s := range strings.Split(l.buf.String(), "\n") {
		var line logLine
		if json.Unmarshal([]byte(s), &line) == nil {
			out = append(out, line)
		}
	}
	return out, l.changed
}

// wait returns the first line whose msg is msg, waiting for it until done
// is closed (the command returned) or a minute has passed.
func (l *logLines) wait(t *testing.T, msg string, done <-chan struct{}) logLine {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		lines, changed := l.lines()
		for _, line := range lines {
			if line.str("msg") == msg {
				return line
			}
		}
		select {
		case <-changed:
		case <-done:
			if lines, _ := l.lines(); len(lines) > 0 && lines[len(lines)-1].str("msg") == msg {
				return lines[len(lines)-1]
			}
			t.Fatalf("the command returned before logging %q:\n%s", msg, l.String())
		case <-timeout:
			t.Fatalf("no %q log line after a minute:\n%s", msg, l.String())
		}
	}
}

// running is `server run` executing in process.
type running struct {
	stdout bytes.Buffer
	stderr *logLines
	done   chan struct{} // closed when Main returned
	code   int
	api    string
}

// runServer runs `server run` in process and waits for it to be ready. The
// test's own signal.Notify keeps a signal that the command does not handle
// from killing the test binary, so a missing handler fails the test instead.
func runServer(t *testing.T, f serverFixture) *running {
	t.Helper()
	guard := make(chan os.Signal, 8)
	signal.Notify(guard, syscall.SIGHUP, syscall.SIGTERM, os.Interrupt)
	t.Cleanup(func() { signal.Stop(guard) })
	r := &running{stderr: newLogLines(), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.code = cli.Main([]string{"--output", "json", "server", "run", "--config", f.config},
			strings.NewReader(""), &r.stdout, r.stderr)
	}()
	r.api = r.stderr.wait(t, "riffdb ready", r.done).str("listen")
	return r
}

// exit waits for the command to return and returns its exit code.
func (r *running) exit(t *testing.T) int {
	t.Helper()
	select {
	case <-r.done:
		return r.code
	case <-time.After(time.Minute):
		t.Fatalf("server run still running a minute after the signal:\n%s", r.stderr.String())
		return 0
	}
}

func (r *running) command(t *testing.T, token, key string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+r.api+"/v1/databases/default/commands/put",
		strings.NewReader(`{"input":{"k":"`+key+`"},"idempotency_key":"`+key+`"}`))
	mustDo(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	mustDo(t, err)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("command: %d %s", resp.StatusCode, b)
	}
}

func signalSelf(t *testing.T, sig syscall.Signal) {
	t.Helper()
	mustDo(t, syscall.Kill(os.Getpid(), sig))
}

// TestServerRunSignals: SIGHUP is ignored with one info line and the server
// keeps serving; SIGTERM then stops it gracefully, logging "shutting down"
// with the grace once, exiting 0 with no line at warn or above.
func TestServerRunSignals(t *testing.T) {
	f := newServerFixture(t, "")
	r := runServer(t, f)
	r.command(t, f.token, "a")
	signalSelf(t, syscall.SIGHUP)
	r.stderr.wait(t, "SIGHUP ignored: configuration changes apply at restart", r.done)
	r.command(t, f.token, "b") // still serving
	signalSelf(t, syscall.SIGTERM)
	if code := r.exit(t); code != cli.ExitOK {
		t.Fatalf("exit %d after SIGTERM, want 0\nstdout: %s\nstderr: %s", code, r.stdout.String(), r.stderr.String())
	}
	lines, _ := r.stderr.lines()
	var hups, downs int
	for _, line := range lines {
		switch line.str("msg") {
		case "SIGHUP ignored: configuration changes apply at restart":
			hups++
			if line.str("level") != "info" {
				t.Errorf("SIGHUP line at level %q, want info", line.str("level"))
			}
		case "shutting down":
			downs++
			if line.str("grace") != "10s" || line.str("signal") != "terminated" {
				t.Errorf("shutting down line %v: want grace 10s and signal terminated", line)
			}
		}
		if lvl := line.str("level"); lvl != "info" && lvl != "debug" {
			t.Errorf("a clean run logged at %s: %v", lvl, line)
		}
	}
	if hups != 1 || downs != 1 {
		t.Errorf("%d SIGHUP lines and %d shutting down lines, want one each:\n%s", hups, downs, r.stderr.String())
	}
	if !strings.Contains(r.stdout.String(), `"stopped":true`) {
		t.Errorf("stdout %q: want the stopped envelope", r.stdout.String())
	}
}

// TestServerRunSecondSignalForcesExit holds a request in flight (headers
// sent, body stalled) so that the graceful stop waits for it, and sends a
// second SIGINT: the command returns at once with exit 1 and error code
// forced_exit, having logged one line saying so.
func TestServerRunSecondSignalForcesExit(t *testing.T) {
	f := newServerFixture(t, `shutdown_grace = "60s"`)
	r := runServer(t, f)
	r.command(t, f.token, "a")
	conn, err := net.Dial("tcp", r.api)
	mustDo(t, err)
	// Once the command has returned, the server is still stopping in this
	// process: release the stalled request and let it finish before the
	// test's directory is removed.
	t.Cleanup(func() {
		conn.Close()
		r.stderr.wait(t, "riffdb stopped", nil)
	})
	// The server's 100 Continue says the handler is reading the body: the
	// request is in flight, and the graceful stop waits for it.
	_, err = fmt.Fprintf(conn, "POST /v1/databases/default/commands/put HTTP/1.1\r\nHost: riffdb\r\n"+
		"Authorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n"+
		"Expect: 100-continue\r\n\r\n", f.token)
	mustDo(t, err)
	mustDo(t, conn.SetReadDeadline(time.Now().Add(time.Minute)))
	status, err := bufio.NewReader(conn).ReadString('\n')
	mustDo(t, err)
	if !strings.HasPrefix(status, "HTTP/1.1 100 ") {
		t.Fatalf("the stalled request got %q, want 100 Continue", status)
	}
	_, err = conn.Write([]byte(`{"input":`))
	mustDo(t, err)
	signalSelf(t, syscall.SIGTERM)
	r.stderr.wait(t, "shutting down", r.done)
	signalSelf(t, syscall.SIGINT)
	if code := r.exit(t); code != cli.ExitPublic {
		t.Fatalf("exit %d after the second signal, want %d\nstdout: %s\nstderr: %s",
			code, cli.ExitPublic, r.stdout.String(), r.stderr.String())
	}
	var env struct {
		OK    bool `json:"ok"`
		Error struct{ Kind, Code, Message string }
	}
	mustDo(t, json.Unmarshal(r.stdout.Bytes(), &env))
	if env.OK || env.Error.Kind != "public" || env.Error.Code != "forced_exit" {
		t.Errorf("envelope %+v, want kind public, code forced_exit", env)
	}
	lines, _ := r.stderr.lines()
	forced := 0
	for _, line := range lines {
		if line.str("msg") == "forced exit" {
			forced++
		}
	}
	if forced != 1 {
		t.Errorf("%d forced exit lines, want one:\n%s", forced, r.stderr.String())
	}
}
