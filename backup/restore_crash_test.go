package backup_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/riffdb/riffdb/backup"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/primary"
)

var errCrash = errors.New("crash")

// TestRestoreCrashAtEveryStep stops a restore right after each of its steps,
// as a crash would (nothing after the step runs, no cleanup), and checks
// that the database path holds either the old database or the restored one
// (never a mix, never a fresh database, never nothing where there was a
// database), then that running Restore again completes and that the old
// data is still there, under backup_root, with a manifest that verifies.
func TestRestoreCrashAtEveryStep(t *testing.T) {
	t.Parallel()
	for _, scenario := range []string{"data", "empty", "missing"} {
		t.Run(scenario, func(t *testing.T) {
			t.Parallel()
			steps := stepsOf(t, scenario)
			want := map[string][]string{
				"data": {backup.StepLeftovers, backup.StepStaging, backup.StepCopied, backup.StepStamped, backup.StepComplete,
					backup.StepAsideManifest, backup.StepSwapped, backup.StepMovedAside},
				"empty":   {backup.StepLeftovers, backup.StepStaging, backup.StepCopied, backup.StepStamped, backup.StepComplete, backup.StepSwapped, backup.StepRemovedEmpty},
				"missing": {backup.StepLeftovers, backup.StepStaging, backup.StepCopied, backup.StepStamped, backup.StepComplete, backup.StepRenamed},
			}[scenario]
			if !slices.Equal(steps, want) {
				t.Fatalf("steps %v, want %v", steps, want)
			}
			for _, crashAt := range steps {
				t.Run(crashAt, func(t *testing.T) { crashAndRecover(t, scenario, crashAt) })
			}
		})
	}
}

// crashScene is a database of 20 commits with a backup taken at 10,
// stopped; for "empty" and "missing" its directory is then emptied or
// removed.
func crashScene(t *testing.T, scenario string) (*env, backup.Manifest, primary.StoreInfo) {
	e, m := backedUp(t, 10, 10)
	old := e.state(t)
	switch scenario {
	case "empty":
		if err := os.RemoveAll(e.opts.Path); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(e.opts.Path, 0o700); err != nil {
			t.Fatal(err)
		}
	case "missing":
		if err := os.RemoveAll(e.opts.Path); err != nil {
			t.Fatal(err)
		}
	}
	return e, m, old
}

func stepsOf(t *testing.T, scenario string) []string {
	e, m, _ := crashScene(t, scenario)
	var steps []string
	req := e.request(m.Name)
	backup.SetAfterStep(&req, func(s string) error { steps = append(steps, s); return nil })
	if _, err := backup.Restore(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	return steps
}

func crashAndRecover(t *testing.T, scenario, crashAt string) {
	ctx := context.Background()
	e, m, old := crashScene(t, scenario)
	id, _ := event.ParseDatabaseID(m.DatabaseID)
	req := e.request(m.Name)
	backup.SetAfterStep(&req, func(s string) error {
		if s == crashAt {
			return errCrash
		}
		return nil
	})
	if _, err := backup.Restore(ctx, req); !errors.Is(err, errCrash) {
		t.Fatalf("crashed restore: %v", err)
	}

	// What is at the path now: the state before the restore, or the
	// restored database.
	restored := false
	switch names := dirNames(t, e.opts.Path); {
	case names == nil && scenario == "missing":
	case len(names) == 0 || (len(names) == 1 && names[0] == "LOCK"):
		if scenario != "empty" {
			t.Fatalf("the database path holds an empty directory")
		}
	default:
		got := e.state(t)
		switch {
		case scenario == "data" && got == old:
		case got.ID == id && got.Incarnation >= 2 && got.LastCommit == m.LastCommitSequence:
			restored = true
		default:
			t.Fatalf("after a crash at %s the database is %+v: neither the old %+v nor the restored one", crashAt, got, old)
		}
	}
	if restored != slices.Contains([]string{backup.StepSwapped, backup.StepMovedAside, backup.StepRemovedEmpty, backup.StepRenamed}, crashAt) {
		t.Fatalf("after a crash at %s restored = %v", crashAt, restored)
	}

	// The operator runs the restore again.
	e.clock.Advance(time.Second)
	res, err := backup.Restore(ctx, e.request(m.Name))
	if err != nil {
		t.Fatalf("restore after a crash at %s: %v", crashAt, err)
	}
	got := e.state(t)
	if got.ID != id || got.Incarnation != res.NewIncarnation || res.NewIncarnation < 2 || got.LastCommit != m.LastCommitSequence {
		t.Fatalf("after the second restore: %+v (result %+v)", got, res)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(e.opts.Path), ".db.restore-*")); len(leftovers) != 0 {
		t.Fatalf("staging directories left: %v", leftovers)
	}
	// Nothing was deleted: every moved-aside entry with a store verifies,
	// and for "data" one of them is the old database.
	var oldFound bool
	for _, name := range dirNames(t, e.root) {
		if !strings.HasPrefix(name, "replaced-") {
			continue
		}
		if _, err := os.Stat(filepath.Join(e.root, name, "store")); err != nil {
			continue // the manifest of a move the crash cut short
		}
		rm := verifyEntry(t, e, name)
		if rm.LastCommitSequence == old.LastCommit && rm.HistoryIncarnation == old.Incarnation {
			oldFound = true
		}
	}
	if scenario == "data" && !oldFound {
		t.Fatalf("the old database is not under backup_root after a crash at %s: %v", crashAt, dirNames(t, e.root))
	}
}

// verifyEntry checks every file of a moved-aside entry against its manifest
// and the store's own information (a restore's verification, here of a
// restore into a scratch path), and returns its manifest.
func verifyEntry(t *testing.T, e *env, name string) backup.Manifest {
	t.Helper()
	scratch := filepath.Join(t.TempDir(), "scratch")
	if _, err := backup.Restore(context.Background(), backup.RestoreRequest{DatabasePath: scratch, BackupRoot: e.root, Name: name}); err != nil {
		t.Fatalf("the moved-aside entry %s does not verify: %v", name, err)
	}
	b, err := os.ReadFile(filepath.Join(e.root, name, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m backup.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// TestRestoreNeverOverwritesADirectoryThatAppears: a restore into a missing
// database path refuses to replace a directory that appeared there meanwhile
// (a server started and created a database), and discards its complete
// copy instead of leaving it beside the database.
func TestRestoreNeverOverwritesADirectoryThatAppears(t *testing.T) {
	t.Parallel()
	e, m, _ := crashScene(t, "missing")
	req := e.request(m.Name)
	backup.SetAfterStep(&req, func(s string) error {
		if s == backup.StepComplete {
			return os.Mkdir(e.opts.Path, 0o700)
		}
		return nil
	})
	rootBefore := tree(t, e.root)
	if _, err := backup.Restore(context.Background(), req); err == nil || !strings.Contains(err.Error(), "in place") {
		t.Fatalf("Restore = %v, want a refusal to put the database in place", err)
	}
	if names := dirNames(t, e.opts.Path); len(names) != 0 {
		t.Fatalf("the directory that appeared was changed: %v", names)
	}
	if names := dirNames(t, filepath.Dir(e.opts.Path)); len(names) != 1 {
		t.Fatalf("the parent holds %v: the staging copy was left", names)
	}
	if tree(t, e.root) != rootBefore {
		t.Fatal("backup_root changed")
	}
}
