//go:build unix

package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/riffdb/riffdb/config"
)

// TestLoadRefusesNonRegularFiles checks that --config must name a regular
// file: a FIFO used to block Load forever, and a device is read without end.
// The refusal wraps ErrUnreadable (the CLI's config_unreadable) and names no
// path. Symbolic links to a regular file are followed.
func TestLoadRefusesNonRegularFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "secret-fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := config.Load(fifo, noEnv, config.Overrides{})
		done <- err
	}()
	select {
	case err := <-done:
		checkNotRegular(t, "FIFO", err)
	case <-time.After(10 * time.Second):
		// Unblock the reader so the test ends either way.
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
		t.Fatal("Load blocked on a FIFO")
	}

	_, err := config.Load("/dev/zero", noEnv, config.Overrides{})
	checkNotRegular(t, "/dev/zero", err)
	_, err = config.Load(dir, noEnv, config.Overrides{})
	checkNotRegular(t, "directory", err)

	good := filepath.Join(dir, "good.toml")
	if err := os.WriteFile(good, []byte(singleTOML), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.toml")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(link, noEnv, config.Overrides{}); err != nil {
		t.Fatalf("symbolic link to a regular file: %v", err)
	}
}

func checkNotRegular(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, config.ErrUnreadable) || errors.Is(err, config.ErrInvalid) {
		t.Fatalf("%s: err = %v, want ErrUnreadable", what, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "not a regular file") || strings.Contains(msg, "secret-") || strings.Contains(msg, "/") {
		t.Errorf("%s: message %q", what, msg)
	}
}
