package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/riffdb/riffdb/internal/store/dirlock/dirlocktest"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
	"github.com/riffdb/riffdb/primary"
	"github.com/riffdb/riffdb/primary/contract"
)

var binary string

func TestMain(m *testing.M) {
	dirlocktest.Main() // a lock probe of TestRestoreKeepsServersOut exits here
	dir, err := os.MkdirTemp("", "riffdb-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "riffdb")
	build := exec.Command("go", "build", "-o", binary, "github.com/riffdb/riffdb/cmd/riffdb")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building riffdb:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const testContract = `
[commands.place_order]
input = { order_id = "string", amount_cents = "int", note = "string?" }
emits = ["order_placed"]

[commands.ship_order]
input = { order_id = "string", carrier = "string" }
emits = ["order_shipped", "customer_notified"]
`

// env is one test installation: a private root with a config file.
type env struct {
	t      *testing.T
	root   string
	config string
	dbPath string
	outbox string
	quota  int64
	wrap   []string // see envOpts.wrap
}

type envOpts struct {
	outbox bool
	quota  int64
	extra  string // appended to the config
	// wrap, when set, is a command and its arguments that the server runs
	// under, e.g. {"prlimit", "--nofile=256:256", "--"}; it must exec the
	// server in its own process, so that signals reach the server.
	wrap []string
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	root, err := os.MkdirTemp("", "riffdb-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o700); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, root: root, config: filepath.Join(root, "riffdb.toml"), dbPath: filepath.Join(root, "db"),
		outbox: filepath.Join(root, "outbox"), quota: o.quota, wrap: o.wrap}
	if e.quota == 0 {
		e.quota = 1 << 30
	}
	must(t, os.WriteFile(filepath.Join(root, "contract.toml"), []byte(testContract), 0o600))
	cfg := fmt.Sprintf(`
[server]
listen = "127.0.0.1:0"
metrics_listen = "127.0.0.1:0"
credential_path = %q

[database]
path = %q
contract = %q
`, filepath.Join(root, "credentials"), e.dbPath, filepath.Join(root, "contract.toml"))
	if o.outbox {
		must(t, os.Mkdir(e.outbox, 0o700))
		cfg += fmt.Sprintf(`
[maintenance.outbox]
kind = "durable_local"
directory = %q
quota_encoded_bytes = %d
`, e.outbox, e.quota)
	}
	cfg += o.extra
	must(t, os.WriteFile(e.config, []byte(cfg), 0o600))
	return e
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// removeLiveDir removes a directory tree that a running server may still be
// writing into, as an operator's repeated rm -rf would: the storage engine
// can create a file (a flushed table, a new WAL) between the removal of the
// directory's entries and of the directory itself (ENOTEMPTY), so it
// retries for a while.
func removeLiveDir(t *testing.T, dir string) {
	t.Helper()
	var err error
	for range 100 {
		if err = os.RemoveAll(dir); err == nil || !errors.Is(err, syscall.ENOTEMPTY) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	must(t, err)
}

// cliResult is the JSON envelope of one CLI run.
type cliResult struct {
	Schema  string          `json:"schema"`
	Command string          `json:"command"`
	OK      bool            `json:"ok"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Kind    string `json:"kind"`
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Exit   int
	Stderr string
}

// cli runs the binary with --output json and decodes its envelope.
func cli(t *testing.T, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"--output", "json"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var r cliResult
	if ee, ok := err.(*exec.ExitError); ok {
		r.Exit = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	r.Stderr = stderr.String()
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("riffdb %v printed no envelope: %v\nstdout: %s\nstderr: %s", args, err, stdout.String(), stderr.String())
	}
	return r
}

// token creates a capability with the CLI and returns its token.
func (e *env) token(perms []string, database string) string {
	e.t.Helper()
	args := []string{"capability", "create", "--config", e.config, "--name", "test"}
	for _, p := range perms {
		args = append(args, "--permission", p)
	}
	if database != "" {
		args = append(args, "--database", database)
	}
	r := cli(e.t, args...)
	if !r.OK {
		e.t.Fatalf("capability create: %+v %s", r.Error, r.Stderr)
	}
	var res struct {
		Token string `json:"token"`
	}
	must(e.t, json.Unmarshal(r.Result, &res))
	return res.Token
}

// proc is a running server.
type proc struct {
	t       *testing.T
	cmd     *exec.Cmd
	api     string
	metrics string
	stderr  *syncBuffer
	exited  chan struct{}
	exitErr error
	// readyAPI and readyMetrics are the ready line's addresses, written
	// before spawn's ready channel closes.
	readyAPI, readyMetrics string
}

// syncBuffer collects a child process's output for the test to read.
type syncBuffer = testutil.SyncBuffer

// start runs `riffdb server run --config` and waits for its ready log line.
func (e *env) start() *proc {
	e.t.Helper()
	p, ready := e.spawn()
	select {
	case <-ready:
		p.api, p.metrics = p.readyAPI, p.readyMetrics
	case <-p.exited:
		e.t.Fatalf("server exited before ready: %v\n%s", p.exitErr, p.stderr.String())
	case <-time.After(60 * time.Second):
		p.kill()
		e.t.Fatalf("server not ready after 60s\n%s", p.stderr.String())
	}
	return p
}

// spawn starts the server without waiting for it to be ready; the channel
// is closed once its ready log line arrived, with the addresses it names in
// p.readyAPI and p.readyMetrics (start copies them into p.api and p.metrics:
// a spawned process's clients may read those concurrently). The process is
// killed when the test ends.
func (e *env) spawn() (*proc, chan struct{}) {
	e.t.Helper()
	args := []string{binary, "server", "run", "--config", e.config}
	if len(e.wrap) > 0 {
		args = append(append([]string(nil), e.wrap...), args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	pr, pw := io.Pipe()
	p := &proc{t: e.t, cmd: cmd, stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = io.MultiWriter(pw, p.stderr)
	cmd.Stdout = p.stderr
	must(e.t, cmd.Start())
	go func() {
		p.exitErr = cmd.Wait()
		pw.Close()
		close(p.exited)
	}()
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var line struct {
				Msg           string `json:"msg"`
				Listen        string `json:"listen"`
				MetricsListen string `json:"metrics_listen"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "riffdb ready" {
				p.readyAPI, p.readyMetrics = line.Listen, line.MetricsListen
				close(ready)
				break
			}
		}
		io.Copy(io.Discard, pr)
	}()
	e.t.Cleanup(p.kill)
	return p, ready
}

// kill sends SIGKILL and waits for the process to end.
func (p *proc) kill() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.exited
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop() {
	p.t.Helper()
	must(p.t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.exited:
	case <-time.After(60 * time.Second):
		p.kill()
		p.t.Fatalf("server did not stop after SIGTERM\n%s", p.stderr.String())
	}
	if p.exitErr != nil {
		p.t.Fatalf("server exited with %v\n%s", p.exitErr, p.stderr.String())
	}
}

var httpClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// commandResp is the body of a successful command.
type commandResp struct {
	CommitSequence uint64   `json:"commit_sequence"`
	Events         []string `json:"events"`
	Replayed       bool     `json:"replayed"`
}

// do sends a request and returns status and body.
func (p *proc) do(ctx context.Context, method, path, token string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+p.api+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// command runs one command; an empty key sends none (an empty key is
// refused: invalid_idempotency_key).
func (p *proc) command(ctx context.Context, token, name string, input any, key string) (int, commandResp, []byte, error) {
	req := map[string]any{"input": input}
	if key != "" {
		req["idempotency_key"] = key
	}
	body, _ := json.Marshal(req)
	code, b, err := p.do(ctx, http.MethodPost, "/v1/databases/default/commands/"+name, token, body)
	var r commandResp
	if err == nil && code == http.StatusOK {
		err = json.Unmarshal(b, &r)
	}
	return code, r, b, err
}

type stats struct {
	Databases []struct {
		Alias                   string  `json:"alias"`
		DatabaseID              string  `json:"database_id"`
		LastCommitSequence      uint64  `json:"last_commit_sequence"`
		PublicationFrontier     uint64  `json:"publication_frontier"`
		PendingOutboxDeliveries *uint64 `json:"pending_outbox_deliveries"`
		Outbox                  struct {
			Health              string `json:"health"`
			Reason              string `json:"reason"`
			CompletedDeliveries uint64 `json:"completed_deliveries"`
			ArchiveRecordCount  *int64 `json:"archive_record_count"`
		} `json:"outbox"`
	} `json:"databases"`
}

func (p *proc) stats(token string) stats {
	p.t.Helper()
	code, b, err := p.do(context.Background(), http.MethodGet, "/v1/stats", token, nil)
	if err != nil || code != http.StatusOK {
		p.t.Fatalf("stats: %d %v %s", code, err, b)
	}
	var s stats
	must(p.t, json.Unmarshal(b, &s))
	return s
}

// waitFor polls cond every 50 ms until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, d, 50*time.Millisecond, what, cond)
}

// setMode rewrites the [server] table's mode.
func (e *env) setMode(mode string) {
	e.t.Helper()
	b, err := os.ReadFile(e.config)
	must(e.t, err)
	s := strings.Replace(string(b), "[server]\n", "[server]\nmode = \""+mode+"\"\n", 1)
	must(e.t, os.WriteFile(e.config, []byte(s), 0o600))
}

// appendConfig appends TOML to the configuration file.
func (e *env) appendConfig(s string) {
	e.t.Helper()
	f, err := os.OpenFile(e.config, os.O_APPEND|os.O_WRONLY, 0)
	must(e.t, err)
	_, err = f.WriteString(s)
	must(e.t, errors.Join(err, f.Close()))
}

// openPrimary opens the stopped installation's primary store in the test's
// process, with the installation's contract. The caller closes it.
func (e *env) openPrimary(t *testing.T) *primary.DB {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e.root, "contract.toml"))
	must(t, err)
	c, err := contract.Compile(data)
	must(t, err)
	db, err := primary.Open(context.Background(), primary.Options{Path: e.dbPath, Contract: c})
	must(t, err)
	return db
}
