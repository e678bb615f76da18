//go:build unix

package cli_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/riffdb/riffdb/cli"
)

const testToken = "riffdb_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"

// tokenServer is a stand-in server that records the bearer token of each
// request to /v1/health.
func tokenServer(t *testing.T) (addr string, got chan string) {
	t.Helper()
	got = make(chan string, 64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "):
		default: // the test failed already; do not block Close
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ready":true,"databases":[]}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL, got
}

// runTokenCommand runs a command in JSON mode and returns its exit code and
// error (nil on success), failing the test if it takes more than 10 s (a
// FIFO or a device used to block it).
func runTokenCommand(t *testing.T, args ...string) (int, *capEnvelope) {
	t.Helper()
	type outcome struct {
		code int
		out  []byte
	}
	done := make(chan outcome, 1)
	go func() {
		var stdout bytes.Buffer
		code := cli.Main(append([]string{"--output", "json"}, args...), strings.NewReader(""), &stdout, &bytes.Buffer{})
		done <- outcome{code, stdout.Bytes()}
	}()
	select {
	case o := <-done:
		var env capEnvelope
		if err := json.Unmarshal(o.out, &env); err != nil {
			t.Fatalf("stdout is not one JSON object: %v\n%s", err, o.out)
		}
		return o.code, &env
	case <-time.After(10 * time.Second):
		t.Fatalf("%v blocked", args)
		return 0, nil
	}
}

// TestTokenFile checks the --token-file rules shared by server stats,
// server health and loadtest: a private regular file of at most 4 KiB
// holding one token; no path and no content in any message.
func TestTokenFile(t *testing.T) {
	t.Setenv("RIFFDB_TOKEN", "")
	addr, got := tokenServer(t)
	dir := filepath.Join(t.TempDir(), "secret-dir")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", testToken+"\n", 0o600)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}

	// Accepted: the token without its newline, through a symbolic link too.
	for _, f := range []string{good, link, write("crlf", testToken+"\r\n", 0o400)} {
		if code, env := runTokenCommand(t, "server", "health", "--address", addr, "--token-file", f); code != cli.ExitOK {
			t.Fatalf("exit %d: %+v", code, env.Error)
		}
		if tok := <-got; tok != testToken {
			t.Fatalf("sent token %q", tok)
		}
	}

	for _, tc := range []struct {
		name, file, code, want string
	}{
		{"group-readable", write("group", testToken+"\n", 0o640), "token_file_unprotected", "chmod 600"},
		{"world-readable", write("world", testToken+"\n", 0o644), "token_file_unprotected", "mode 0644"},
		{"group-writable", write("gw", testToken+"\n", 0o620), "token_file_unprotected", "chmod 600"},
		{"device", "/dev/zero", "token_unreadable", "not a regular file"},
		{"FIFO", fifo, "token_unreadable", "not a regular file"},
		{"directory", dir, "token_unreadable", "not a regular file"},
		{"missing", filepath.Join(dir, "missing"), "token_unreadable", "no such file"},
		{"too large", write("large", testToken+strings.Repeat(" ", 5000), 0o600), "token_file_invalid", "larger than 4096 bytes"},
		{"two lines", write("lines", testToken+"\n"+testToken+"\n", 0o600), "token_file_invalid", "one token on one line"},
		{"empty", write("empty", "\n", 0o600), "no_token", "empty"},
	} {
		for _, cmd := range [][]string{
			{"server", "health", "--address", addr},
			{"server", "stats", "--address", addr},
			{"loadtest", "--address", addr, "-n", "1"},
		} {
			code, env := runTokenCommand(t, append(cmd, "--token-file", tc.file)...)
			if code != cli.ExitLocal || env.Error == nil || env.Error.Code != tc.code || !strings.Contains(env.Error.Message, tc.want) {
				t.Errorf("%s, %s: exit %d, %+v; want %s containing %q", tc.name, strings.Join(cmd[:2], " "), code, env.Error, tc.code, tc.want)
				continue
			}
			if strings.Contains(env.Error.Message, dir) || strings.Contains(env.Error.Message, "riffdb_") {
				t.Errorf("%s: message %q names the path or the token", tc.name, env.Error.Message)
			}
		}
	}
	select {
	case tok := <-got:
		t.Errorf("a refused token file still sent %q", tok)
	default:
	}
}
