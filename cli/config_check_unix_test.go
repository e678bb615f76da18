//go:build unix

package cli_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/riffdb/riffdb/cli"
)

// TestConfigCheckRefusesNonRegularFiles checks that --config must name a
// regular file: a FIFO used to block config check forever and /dev/zero to
// be read until the size limit. Both are config_unreadable, quickly.
func TestConfigCheckRefusesNonRegularFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "riffdb.toml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Unblocks a reader still waiting on the FIFO, so a failing test ends.
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	for _, file := range []string{fifo, "/dev/zero"} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			code, out, env := runConfigCheckFile(t, file)
			if code != cli.ExitLocal || env.Error == nil || env.Error.Code != "config_unreadable" ||
				env.Error.Message != "cannot read the configuration file: not a regular file" {
				t.Errorf("%s: exit %d: %s", filepath.Base(file), code, out)
			}
			if strings.Contains(out, dir) {
				t.Errorf("output %q contains the path", out)
			}
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("config check blocked on %s", filepath.Base(file))
		}
	}
}

// TestConfigCheckManyUnknownOptions checks that a file just under the size
// limit, made of unknown options, is refused at once with a short message
// (it took about an hour: go-toml's strict mode is quadratic).
func TestConfigCheckManyUnknownOptions(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("[server]\ncredential_path = \"/srv/secret-cred\"\n")
	for i := 0; b.Len() < 4<<20-64; i++ {
		fmt.Fprintf(&b, "option_%07d = 1\n", i)
	}
	code, out, env, _ := runConfigCheck(t, b.String())
	if code != cli.ExitLocal || env.Error == nil || env.Error.Code != "invalid_config" {
		t.Fatalf("exit %d: %.300s", code, out)
	}
	if msg := env.Error.Message; len(msg) > 4096 || !strings.Contains(msg, `"server.option_0000019"`) ||
		strings.Contains(msg, "option_0000020") || !strings.Contains(msg, " more") {
		t.Errorf("message (%d bytes): %.600s", len(msg), msg)
	}
}
