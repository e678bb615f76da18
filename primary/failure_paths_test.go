package primary_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/riffdb/riffdb/primary"
)

// logFailFS fails every write and sync of a WAL (*.log) file while failing
// is set, with an *fs.PathError naming the file's full path, as a full
// filesystem under a real directory does.
type logFailFS struct {
	vfs.FS
	failing atomic.Bool
}

func (f *logFailFS) wrap(name string, file vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return file, err
	}
	return &logFailFile{File: file, fs: f, name: name}, nil
}

func (f *logFailFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	file, err := f.FS.Create(name, c)
	return f.wrap(name, file, err)
}

func (f *logFailFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	file, err := f.FS.ReuseForWrite(old, name, c)
	return f.wrap(name, file, err)
}

func (f *logFailFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	file, err := f.FS.OpenReadWrite(name, c, opts...)
	return f.wrap(name, file, err)
}

type logFailFile struct {
	vfs.File
	fs   *logFailFS
	name string
}

func (f *logFailFile) fail(op string) error {
	if f.fs.failing.Load() {
		return &fs.PathError{Op: op, Path: f.name, Err: syscall.ENOSPC}
	}
	return nil
}

func (f *logFailFile) Write(p []byte) (int, error) {
	if err := f.fail("write"); err != nil {
		return 0, err
	}
	return f.File.Write(p)
}

func (f *logFailFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fail("write"); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f *logFailFile) Sync() error {
	if err := f.fail("sync"); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *logFailFile) SyncData() error {
	if err := f.fail("fdatasync"); err != nil {
		return err
	}
	return f.File.SyncData()
}

// leaks returns what in s is a path under dir or part of a stack trace.
func leaks(s, dir string) []string {
	var found []string
	for _, bad := range []string{dir, "goroutine ", ".go:", "errorVerbose", "\n"} {
		if strings.Contains(s, bad) {
			found = append(found, fmt.Sprintf("%q", bad))
		}
	}
	return found
}

// TestFailureIsPathFreeAndStackFree fails the primary's WAL write with an
// error naming the WAL's full path: Pebble's fatal commit error fails the
// store. The failure's log line and the store's error name neither the
// database directory nor a stack frame; errors.Is still sees the cause.
// Before, the log line quoted the WAL's absolute path.
func TestFailureIsPathFreeAndStackFree(t *testing.T) {
	const dir = "/srv/riffdb-private-dir/db"
	core, logs := observer.New(zap.DebugLevel)
	lfs := &logFailFS{FS: vfs.NewMem()}
	db, _ := setup(t, func(o *primary.Options) {
		o.FS = lfs
		o.Path = dir
		o.Logger = zap.New(core)
	})
	exec(t, db, "place_order", `{"order_id":"A-1","amount_cents":1}`, "A-1")
	lfs.failing.Store(true)
	in, _ := json.Marshal(map[string]any{"order_id": "A-2", "amount_cents": 2})
	if _, err := db.Execute(context.Background(), "place_order", in, "A-2"); !errors.Is(err, primary.ErrFailed) {
		t.Fatalf("execute with the WAL failing: %v, want ErrFailed", err)
	}
	<-db.Failed()
	err := db.Err()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("the store's error %q does not match ENOSPC", err)
	}
	if l := leaks(err.Error(), dir); len(l) > 0 {
		t.Errorf("the store's error %q holds %s", err, strings.Join(l, ", "))
	}
	lines := logs.FilterMessageSnippet("primary store failed").All()
	if len(lines) != 1 {
		t.Fatalf("%d failure lines, want 1", len(lines))
	}
	for _, e := range logs.All() {
		for k, v := range e.ContextMap() {
			text := k + "=" + fmt.Sprint(v)
			if l := leaks(text, dir); len(l) > 0 {
				t.Errorf("log line %q: field %s holds %s", e.Message, text, strings.Join(l, ", "))
			}
		}
	}
}
