package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tests in this file drive `riffdb server run` with signals, as an
// operator or a service manager would (issue 12, finding 7).

// setServerOption adds one option line to the configuration's [server]
// table (appendConfig would add it to the last table).
func (e *env) setServerOption(line string) {
	e.t.Helper()
	b, err := os.ReadFile(e.config)
	must(e.t, err)
	s := strings.Replace(string(b), "[server]\n", "[server]\n"+line+"\n", 1)
	must(e.t, os.WriteFile(e.config, []byte(s), 0o600))
}

// logEntry is one JSON log line of the server.
type logEntry struct {
	Level string `json:"level"`
	Msg   string `json:"msg"`
	Grace string `json:"grace"`
}

// logEntries decodes the JSON log lines the server wrote so far (the CLI's
// own text lines are skipped).
func (p *proc) logEntries() []logEntry {
	var out []logEntry
	for _, s := range strings.Split(p.stderr.String(), "\n") {
		var l logEntry
		if json.Unmarshal([]byte(s), &l) == nil && l.Level != "" {
			out = append(out, l)
		}
	}
	return out
}

// countLog counts the log lines whose msg is msg.
func (p *proc) countLog(msg string) int {
	n := 0
	for _, l := range p.logEntries() {
		if l.Msg == msg {
			n++
		}
	}
	return n
}

// waitLog waits for a log line whose msg is msg, failing at once if the
// server exits first.
func (p *proc) waitLog(msg string) {
	p.t.Helper()
	waitFor(p.t, 30*time.Second, fmt.Sprintf("a %q log line", msg), func() bool {
		select {
		case <-p.exited:
			return true
		default:
			return p.countLog(msg) > 0
		}
	})
	if p.countLog(msg) == 0 {
		p.t.Fatalf("the server exited (%v) without logging %q\n%s", p.exitErr, msg, p.stderr.String())
	}
}

// stallRequest opens a connection to the API and sends the headers of an
// authorized command with Content-Length 1000 and Expect: 100-continue. The
// server's 100 Continue says its handler is reading the body; the request
// then sends the body's first bytes and stalls, so the handler keeps
// reading. The connection is closed when the test ends.
func (p *proc) stallRequest(token string) net.Conn {
	p.t.Helper()
	conn, err := net.Dial("tcp", p.api)
	must(p.t, err)
	p.t.Cleanup(func() { conn.Close() })
	_, err = fmt.Fprintf(conn, "POST /v1/databases/default/commands/place_order HTTP/1.1\r\nHost: riffdb\r\n"+
		"Authorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n"+
		"Expect: 100-continue\r\n\r\n", token)
	must(p.t, err)
	must(p.t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
	status, err := bufio.NewReader(conn).ReadString('\n')
	must(p.t, err)
	if !strings.HasPrefix(status, "HTTP/1.1 100 ") {
		p.t.Fatalf("the stalled request got %q, want 100 Continue", status)
	}
	_, err = conn.Write([]byte(`{"input":{`))
	must(p.t, err)
	return conn
}

// placeOrders sends n acknowledged commands and returns how many were
// acknowledged (all of them, or the test fails).
func (p *proc) placeOrders(token string, n int) uint64 {
	p.t.Helper()
	for i := range n {
		code, _, b, err := p.command(context.Background(), token, "place_order",
			map[string]any{"order_id": fmt.Sprintf("O-%d", i), "amount_cents": 100 + i}, fmt.Sprintf("O-%d", i))
		if err != nil || code != http.StatusOK {
			p.t.Fatalf("command %d: %d %v %s", i, code, err, b)
		}
	}
	return uint64(n)
}

// waitExit waits at most bound for the process to exit and returns its
// exit code and how long it took.
func (p *proc) waitExit(since time.Time, bound time.Duration) (int, time.Duration) {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(bound):
		p.kill()
		p.t.Fatalf("the server was still running %s after the signal\n%s", bound, p.stderr.String())
	}
	took := time.Since(since)
	var ee *exec.ExitError
	switch {
	case p.exitErr == nil:
		return 0, took
	case errors.As(p.exitErr, &ee) && ee.Exited():
		return ee.ExitCode(), took
	default:
		p.t.Fatalf("the server did not exit by itself: %v\n%s", p.exitErr, p.stderr.String())
		return -1, took
	}
}

// TestSignalSlowClientShutdownIsBounded: with a client stalled in the middle
// of its request body, SIGTERM stops the server within the grace
// (server.shutdown_grace = "2s") plus a few seconds, and cleanly (exit 0),
// where main waited for the 30 s read timeout. A bound, not a benchmark.
func TestSignalSlowClientShutdownIsBounded(t *testing.T) {
	e := newEnv(t, envOpts{outbox: true})
	e.setServerOption(`shutdown_grace = "2s"`)
	token := e.token([]string{"execute_commands"}, "default")
	p := e.start()
	p.placeOrders(token, 3)
	p.stallRequest(token)
	sent := time.Now()
	must(t, p.cmd.Process.Signal(syscall.SIGTERM))
	code, took := p.waitExit(sent, 10*time.Second)
	if code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0\n%s", code, p.stderr.String())
	}
	t.Logf("stopped %s after SIGTERM with a stalled client (grace 2s)", took.Round(time.Millisecond))
	var downs []logEntry
	for _, l := range p.logEntries() {
		if l.Msg == "shutting down" {
			downs = append(downs, l)
		}
	}
	if len(downs) != 1 || downs[0].Grace != "2s" {
		t.Errorf("shutting down lines %+v: want one, with grace 2s\n%s", downs, p.stderr.String())
	}
}

// TestSignalSecondForcesExit: during a long grace held open by a stalled
// client, a second SIGTERM forces the exit within a couple of seconds, with
// exit code 1 (error code forced_exit) and one log line. On restart every
// acknowledged command is there, and the outbox delivers all of them.
func TestSignalSecondForcesExit(t *testing.T) {
	e := newEnv(t, envOpts{outbox: true})
	e.setServerOption(`shutdown_grace = "60s"`)
	token := e.token([]string{"execute_commands", "read_statistics"}, "")
	p := e.start()
	acked := p.placeOrders(token, 25)
	p.stallRequest(token)
	must(t, p.cmd.Process.Signal(syscall.SIGTERM))
	// A second signal sent before the first was handled could merge with
	// it (standard signals are not queued).
	p.waitLog("shutting down")
	sent := time.Now()
	must(t, p.cmd.Process.Signal(syscall.SIGTERM))
	code, took := p.waitExit(sent, 5*time.Second)
	if code != 1 {
		t.Fatalf("exit %d after the second SIGTERM, want 1 (forced_exit)\n%s", code, p.stderr.String())
	}
	t.Logf("forced exit %s after the second SIGTERM", took.Round(time.Millisecond))
	if n := p.countLog("forced exit"); n != 1 {
		t.Errorf("%d forced exit log lines, want 1\n%s", n, p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "riffdb: a second signal forced the exit") {
		t.Errorf("no forced-exit error message\n%s", p.stderr.String())
	}

	q := e.start()
	s := q.stats(token)
	if got := s.Databases[0].LastCommitSequence; got != acked {
		t.Fatalf("last_commit_sequence %d after the forced exit, want %d (every acknowledged command)", got, acked)
	}
	waitFor(t, 30*time.Second, "every acknowledged event delivered after the restart", func() bool {
		d := q.stats(token).Databases[0]
		return d.PendingOutboxDeliveries != nil && *d.PendingOutboxDeliveries == 0 && d.Outbox.Health == "healthy"
	})
	q.stop()
}

// TestSignalHUPKeepsServing: SIGHUP is ignored with one info line (the
// configuration applies at restart); the server keeps serving and then
// stops cleanly. On main, SIGHUP killed the process.
func TestSignalHUPKeepsServing(t *testing.T) {
	e := newEnv(t, envOpts{outbox: true})
	token := e.token([]string{"execute_commands"}, "default")
	p := e.start()
	must(t, p.cmd.Process.Signal(syscall.SIGHUP))
	p.waitLog("SIGHUP ignored: configuration changes apply at restart")
	select {
	case <-p.exited:
		t.Fatalf("the server exited after SIGHUP: %v\n%s", p.exitErr, p.stderr.String())
	default:
	}
	p.placeOrders(token, 2)
	p.stop()
	if n := p.countLog("SIGHUP ignored: configuration changes apply at restart"); n != 1 {
		t.Errorf("%d SIGHUP lines, want 1\n%s", n, p.stderr.String())
	}
}

// TestShutdownCleanLogsNoWarnings: a clean stop, whether the worker is idle
// or still delivering, logs nothing at warn or above (on main it logged
// `outbox delivery halted … destination_unavailable … context canceled`).
func TestShutdownCleanLogsNoWarnings(t *testing.T) {
	for _, tc := range []struct {
		name string
		idle bool // wait for every delivery before SIGTERM
	}{{"idle", true}, {"delivering", false}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{outbox: true})
			token := e.token([]string{"execute_commands", "read_statistics"}, "")
			p := e.start()
			p.placeOrders(token, 40)
			if tc.idle {
				waitFor(t, 30*time.Second, "every event delivered", func() bool {
					d := p.stats(token).Databases[0]
					return d.PendingOutboxDeliveries != nil && *d.PendingOutboxDeliveries == 0
				})
			}
			p.stop()
			for _, l := range p.logEntries() {
				if l.Level != "info" && l.Level != "debug" {
					t.Errorf("a clean run logged at %s: %q", l.Level, l.Msg)
				}
			}
			if n := p.countLog("shutting down"); n != 1 {
				t.Errorf("%d shutting down lines, want 1", n)
			}
			if t.Failed() {
				t.Logf("server log:\n%s", p.stderr.String())
			}
		})
	}
}
