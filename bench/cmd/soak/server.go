package main

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
	"time"
)

// process is the riffdb server under test: `riffdb server run --dev` on
// ephemeral loopback ports, its data in a private folder.
type process struct {
	cmd     *exec.Cmd
	api     string // http://host:port
	metrics string // http://host:port/metrics
	token   string
	dir     string // the server's data
	exited  chan struct{}
	waitErr error
	client  *http.Client
}

// startServer starts bin as a development server with its data under dir
// (created by the server with private modes) and its output appended to
// logPath. It returns once the server printed its addresses.
func startServer(ctx context.Context, bin, dir, logPath string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "server", "run", "--dev", "--dev-dir", dir,
		"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--log-level", "warn")
	cmd.Stdout = logf
	stderr, err := cmd.StderrPipe()
	if err != nil {
		_ = logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("soak: starting the server: %w", err)
	}
	p := &process{cmd: cmd, dir: dir, exited: make(chan struct{}), client: &http.Client{Timeout: 10 * time.Second}}
	addrs := make(chan [2]string, 1)
	go func() {
		// The banner's "API:" and "metrics:" lines give the addresses; every
		// line also goes to the log.
		var api, metrics string
		sent := false
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			l := sc.Text()
			fmt.Fprintln(logf, l)
			f := strings.Fields(l)
			switch {
			case len(f) >= 2 && f[0] == "API:":
				api = f[1]
			case len(f) >= 2 && f[0] == "metrics:":
				metrics = f[1]
			}
			if !sent && api != "" && metrics != "" {
				addrs <- [2]string{api, metrics}
				sent = true
			}
		}
		_, _ = io.Copy(logf, stderr)
		p.waitErr = cmd.Wait()
		_ = logf.Close()
		close(p.exited)
	}()
	select {
	case a := <-addrs:
		p.api, p.metrics = a[0], a[1]
	case <-p.exited:
		return nil, fmt.Errorf("soak: the server exited before it was ready (%v); see its log", p.waitErr)
	case <-time.After(2 * time.Minute):
		p.kill()
		return nil, errors.New("soak: the server did not print its addresses within 2 minutes")
	case <-ctx.Done():
		p.kill()
		return nil, context.Cause(ctx)
	}
	tok, err := os.ReadFile(filepath.Join(dir, "dev-token"))
	if err != nil {
		p.kill()
		return nil, fmt.Errorf("soak: reading the development token: %w", err)
	}
	p.token = strings.TrimSpace(string(tok))
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// kill ends the server at once and waits for it.
func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// stop asks the server to stop (SIGTERM) and waits for its graceful stop,
// at most grace; then it kills it.
func (p *process) stop(grace time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.waitErr
	case <-time.After(grace):
		p.kill()
		return fmt.Errorf("soak: the server did not stop within %s after SIGTERM and was killed", grace)
	}
}

// alive reports whether the server is still running.
func (p *process) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// dbStats is what the soak reads of the database's GET /v1/stats entry.
type dbStats struct {
	Pending   float64 // NaN when null
	Completed float64
}

func (p *process) stats(ctx context.Context) (dbStats, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.api+"/v1/stats", nil)
	if err != nil {
		return dbStats{}, err
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	resp, err := p.client.Do(req)
	if err != nil {
		return dbStats{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return dbStats{}, fmt.Errorf("soak: GET /v1/stats: %s", resp.Status)
	}
	var doc struct {
		Databases []struct {
			Pending *float64 `json:"pending_outbox_deliveries"`
			Outbox  struct {
				Completed float64 `json:"completed_deliveries"`
			} `json:"outbox"`
		} `json:"databases"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return dbStats{}, fmt.Errorf("soak: GET /v1/stats: %w", err)
	}
	if len(doc.Databases) != 1 {
		return dbStats{}, fmt.Errorf("soak: GET /v1/stats: %d databases, want 1", len(doc.Databases))
	}
	d := doc.Databases[0]
	st := dbStats{Pending: nanIfNil(d.Pending), Completed: d.Outbox.Completed}
	return st, nil
}

func nanIfNil(v *float64) float64 {
	if v == nil {
		return nanValue
	}
	return *v
}

// scrape reads the server's /metrics.
func (p *process) scrape(ctx context.Context) ([]series, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.metrics, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("soak: GET /metrics: %s", resp.Status)
	}
	return parseExposition(resp.Body)
}

// rssBytes reads VmRSS and RssFile from /proc/<pid>/status.
func rssBytes(pid int) (rss, file float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nanValue, nanValue, err
	}
	rss, err = statusKB(string(b), "VmRSS")
	file, ferr := statusKB(string(b), "RssFile")
	return rss, file, errors.Join(err, ferr)
}

// parseVmRSS returns the VmRSS line of a /proc/<pid>/status text in bytes.
func parseVmRSS(status string) (float64, error) { return statusKB(status, "VmRSS") }

// statusKB returns the value of a "Name:  N kB" line of a /proc/<pid>/status
// (or smaps) text in bytes.
func statusKB(status, name string) (float64, error) {
	for l := range strings.Lines(status) {
		rest, ok := strings.CutPrefix(l, name+":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return nanValue, fmt.Errorf("soak: unexpected %s line %q", name, strings.TrimSpace(l))
		}
		kb, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nanValue, fmt.Errorf("soak: unexpected %s line %q", name, strings.TrimSpace(l))
		}
		return kb * 1024, nil
	}
	return nanValue, fmt.Errorf("soak: no %s in the process status", name)
}

// cHeapRSS reads the resident size of the [heap] mapping from
// /proc/<pid>/smaps (Sample.CHeapRSS).
func cHeapRSS(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return nanValue, err
	}
	return parseHeapRSS(string(b))
}

// parseHeapRSS returns the Rss of the [heap] mapping of a smaps text in
// bytes, or 0 when the process has no [heap] mapping (nothing was ever
// allocated from the program break).
func parseHeapRSS(smaps string) (float64, error) {
	in := false
	for l := range strings.Lines(smaps) {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if !strings.HasSuffix(f[0], ":") { // a mapping's header line
			in = len(f) >= 6 && f[len(f)-1] == "[heap]"
			continue
		}
		if in && f[0] == "Rss:" {
			return statusKB(l, "Rss")
		}
	}
	return 0, nil
}

// openFDs counts the entries of /proc/<pid>/fd and, among them, the
// sockets (a link "socket:[inode]") and the table files (*.sst).
func openFDs(pid int) (fds, sockets, tables float64, err error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	es, err := os.ReadDir(dir)
	if err != nil {
		return nanValue, nanValue, nanValue, err
	}
	for _, e := range es {
		l, err := os.Readlink(filepath.Join(dir, e.Name()))
		switch {
		case err != nil:
		case strings.HasPrefix(l, "socket:"):
			sockets++
		case strings.HasSuffix(l, ".sst"):
			tables++
		}
	}
	return float64(len(es)), sockets, tables, nil
}
