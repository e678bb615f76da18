//go:build linux

package backup_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/riffdb/riffdb/backup"
	"github.com/riffdb/riffdb/internal/store/dirlock/dirlocktest"
)

func TestMain(m *testing.M) {
	dirlocktest.Main()
	os.Exit(m.Run())
}

// TestRestoreHoldsTheDatabaseLockAtEveryStep asks another process, after
// every step of a restore, to lock the database path's LOCK as a server
// starting beside it would, and expects a refusal every time. The replaced
// database holds a large file that sorts after LOCK, so a restore that
// opened and closed LOCK while checksumming the directory it replaces (and
// so dropped its record lock) would leave the lock free for as long as that
// file takes to hash; the step hook makes the window certain: the step after
// the checksum (aside-manifest) sees it.
//
// It does not run in parallel with the package's other tests: a probe is a
// child process, which holds copies of this process's descriptors between
// its fork and its exec, and so, for that moment, the open file description
// locks another test is releasing (internal/store/dirlock/dirlocktest).
func TestRestoreHoldsTheDatabaseLockAtEveryStep(t *testing.T) {
	e, m := backedUp(t, 10, 10)
	large := make([]byte, 8<<20)
	if err := os.WriteFile(filepath.Join(e.opts.Path, "zz-operator-notes"), large, 0o600); err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(e.opts.Path, "LOCK")
	req := e.request(m.Name)
	var steps []string
	backup.SetAfterStep(&req, func(step string) error {
		steps = append(steps, step)
		if dirlocktest.Free(t, lock) {
			return errors.New("another process took the database's lock after step " + step)
		}
		return nil
	})
	if _, err := backup.Restore(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if len(steps) != 8 {
		t.Fatalf("steps %v: the probe did not run after every step of a restore over data", steps)
	}
	if !dirlocktest.Free(t, lock) {
		t.Fatal("the restored database's lock is still held after Restore returned")
	}
}
