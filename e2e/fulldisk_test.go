package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/riffdb/riffdb/internal/testsupport/testutil"
)

// fullDiskEnv is an installation whose database directory is on its own
// small tmpfs, with n acknowledged orders committed (and not yet flushed
// by the storage engine: a graceful stop leaves them in the write-ahead
// log, which the next start replays and must flush), the server stopped
// and the filesystem then filled to the last byte. It returns the filler
// file, whose removal frees the space again. Without the right to mount a
// tmpfs (root) the test is skipped.
func fullDiskEnv(t *testing.T, n int) (*env, string) {
	t.Helper()
	e := newEnv(t, envOpts{})
	mnt := filepath.Join(e.root, "dbfs")
	must(t, os.Mkdir(mnt, 0o700))
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("needs to mount a tmpfs (root, CAP_SYS_ADMIN) for a filesystem it can fill: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })
	db := filepath.Join(mnt, "db")
	startupRewrite(t, e, fmt.Sprintf("%q", e.dbPath), fmt.Sprintf("%q", db))
	e.dbPath = db
	token := e.token([]string{"execute_commands"}, "")
	p := e.start()
	p.placeOrders(token, n)
	p.stop()
	filler := filepath.Join(mnt, "filler")
	fillFilesystem(t, filler)
	return e, filler
}

// fillFilesystem writes zeros to path until the filesystem is full.
func fillFilesystem(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	must(t, err)
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	// Whatever is smaller than a chunk.
	for {
		if _, err := f.Write(buf[:512]); err != nil {
			break
		}
	}
}

// TestStartupStorageFull: a start on a full filesystem ends within a bound
// with exit 2 and storage_full — the storage engine used to retry the flush
// of the replayed log forever at 100 % CPU inside pebble.Open — for an
// existing store and for a new one. It leaves the store as it was: once
// space is freed the server starts, and every acknowledged order is still
// there (its idempotency key replays it).
func TestStartupStorageFull(t *testing.T) {
	const n = 20
	e, filler := fullDiskEnv(t, n)
	start := time.Now()
	startupRefusedWithin(t, e, 15*time.Second, "storage_full", "the filesystem of the database path is full")
	t.Logf("refused after %s", time.Since(start).Round(time.Millisecond))

	existing := e.dbPath
	fresh := filepath.Join(filepath.Dir(existing), "fresh")
	startupRewrite(t, e, fmt.Sprintf("%q", existing), fmt.Sprintf("%q", fresh))
	startupRefusedWithin(t, e, 15*time.Second, "storage_full", "the filesystem of the database path is full")
	startupRewrite(t, e, fmt.Sprintf("%q", fresh), fmt.Sprintf("%q", existing))

	must(t, os.Remove(filler))
	token := e.token([]string{"execute_commands"}, "")
	p := e.start()
	for i := range n {
		key := fmt.Sprintf("O-%d", i)
		code, r, b, err := p.command(context.Background(), token, "place_order",
			map[string]any{"order_id": key, "amount_cents": 100 + i}, key)
		if err != nil || code != http.StatusOK || !r.Replayed || r.CommitSequence != uint64(i+1) {
			t.Errorf("order %d after the full disk: %d %v %+v %s, want its replay at sequence %d", i, code, err, r, b, i+1)
		}
	}
	p.stop()
}

// TestStartupStorageFullStopsAtTheFirstSignal: SIGTERM while a start waits
// on a full filesystem ends the process at once, exit 2 with
// startup_interrupted; the first signal used to be ignored.
func TestStartupStorageFullStopsAtTheFirstSignal(t *testing.T) {
	e, _ := fullDiskEnv(t, 20)
	cmd := exec.Command(binary, "--output", "json", "server", "run", "--config", e.config)
	var stdout, stderr testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	must(t, cmd.Start())
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	// The storage engine's first failure to write says the start is
	// waiting on the full filesystem.
	waitFor(t, 15*time.Second, "a no-space error in the server's log", func() bool {
		return strings.Contains(stderr.String(), "no space left on device")
	})
	sent := time.Now()
	must(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-exited:
	case <-time.After(3 * time.Second):
		t.Fatalf("still running 3s after SIGTERM\nstderr: %s", stderr.String())
	}
	t.Logf("exited %s after SIGTERM", time.Since(sent).Round(time.Millisecond))
	var ee *exec.ExitError
	if !errors.As(waitErr, &ee) || ee.ExitCode() != 2 {
		t.Errorf("exit %v, want status 2", waitErr)
	}
	var r cliResult
	if err := json.Unmarshal([]byte(stdout.String()), &r); err != nil || r.Error == nil {
		t.Fatalf("no failure envelope (%v): %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	if r.Error.Kind != "local" || r.Error.Code != "startup_interrupted" {
		t.Errorf("error %+v, want kind local, code startup_interrupted", *r.Error)
	}
	if strings.Contains(stdout.String(), e.root) || strings.Contains(stderr.String(), e.root) {
		t.Errorf("output names the installation's paths:\n%s\n%s", stdout.String(), stderr.String())
	}
}
