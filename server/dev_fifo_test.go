package server

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/riffdb/riffdb/config"
)

// TestDevSetupRefusesAFIFOToken: a FIFO as the dev token file is refused at
// once, without the path, instead of blocking the read (or the write of a
// new token) for ever.
func TestDevSetupRefusesAFIFOToken(t *testing.T) {
	root := filepath.Join(t.TempDir(), "dev")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(root, "dev-token")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // releases a reader blocked on the FIFO
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	done := make(chan error, 1)
	go func() {
		_, _, err := DevSetup(root, nil, config.Overrides{Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0"})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") || strings.Contains(err.Error(), root) {
			t.Fatalf("DevSetup = %v, want a path-free refusal of the FIFO", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("DevSetup blocked on a FIFO dev-token")
	}
}
