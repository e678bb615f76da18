package primary_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/riffdb/riffdb/internal/testsupport/testutil"
	"github.com/riffdb/riffdb/primary"
)

// tableFailFS fails the creation of every table and blob file with EMFILE
// while failing is set, as a process out of file descriptors does. WAL and
// manifest creation are left alone: only flushes and compactions fail.
type tableFailFS struct {
	vfs.FS
	failing  atomic.Bool
	injected atomic.Int64
}

func (f *tableFailFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if f.failing.Load() && (strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".blob")) {
		f.injected.Add(1)
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.EMFILE}
	}
	return f.FS.Create(name, category)
}

// TestFlushFailuresAreLoggedAtABoundedRate runs real Pebble with table
// creation failing with EMFILE: its flush then fails in a tight loop, and
// before the fix every failure was one warn line with a stack trace and
// the table's path. Now the lines are bounded over simulated time, carry
// no path and no stack, a line says when the condition cleared, and the
// store recovers by itself.
func TestFlushFailuresAreLoggedAtABoundedRate(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	ffs := &tableFailFS{FS: vfs.NewMem()}
	db, bu := setup(t, func(o *primary.Options) {
		o.FS = ffs
		o.Logger = zap.New(core)
	})
	ffs.failing.Store(true)

	// Writers fill memtables until Pebble flushes; with the flush failing,
	// the memtables pile up and the writers stall, as the server's did.
	note := strings.Repeat("n", 64<<10)
	var acked atomic.Uint64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				in, _ := json.Marshal(map[string]any{"order_id": fmt.Sprintf("w%d-%d", w, i), "amount_cents": i, "note": note})
				c, err := db.Execute(context.Background(), "place_order", in, fmt.Sprintf("w%d-%d", w, i))
				if errors.Is(err, primary.ErrClosed) {
					return // the test failed and ended
				}
				if err != nil {
					t.Errorf("execute: %v", err)
					return
				}
				for {
					old := acked.Load()
					if c.Seq <= old || acked.CompareAndSwap(old, c.Seq) {
						break
					}
				}
			}
		}()
	}

	// 60 simulated seconds, each with at least 50 failed flushes.
	testutil.WaitFor(t, time.Minute, time.Millisecond, "the first failed flush", func() bool { return ffs.injected.Load() > 0 })
	for range 60 {
		seen := ffs.injected.Load()
		testutil.WaitFor(t, time.Minute, time.Millisecond, "50 more failed flushes", func() bool { return ffs.injected.Load() >= seen+50 })
		bu.clock.Advance(time.Second)
	}
	failures := ffs.injected.Load()
	warns := logs.FilterMessageSnippet("background error").All()
	// One line at once, then after 1, 2, 4, 8, 16 and 30 s: 7 in 60 s, plus
	// one for a boundary the test's steps straddle.
	if len(warns) > 8 {
		t.Fatalf("%d background-error lines for %d failed flushes in 60 s, want at most 8", len(warns), failures)
	}
	if len(warns) == 0 {
		t.Fatal("no background-error line")
	}
	ffs.failing.Store(false)
	close(stop)
	wg.Wait()
	// Writes proceed: a new command is acknowledged and the condition is
	// reported cleared.
	exec(t, db, "place_order", `{"order_id":"after","amount_cents":1}`, "after")
	testutil.WaitFor(t, time.Minute, time.Millisecond, "the cleared line", func() bool {
		return logs.FilterMessageSnippet("background error cleared").Len() == 1
	})
	// Every failed flush is accounted for by a line, as the first of a
	// line's reports or as one of its suppressed ones.
	cleared := logs.FilterMessageSnippet("background error cleared").All()[0]
	reported := cleared.ContextMap()["suppressed"].(int64)
	for _, e := range warns {
		reported += 1 + e.ContextMap()["suppressed"].(int64)
	}
	if failures = ffs.injected.Load(); reported != failures {
		t.Fatalf("the lines account for %d failed flushes, want %d", reported, failures)
	}
	if err := db.Err(); err != nil {
		t.Fatalf("the store failed: %v", err)
	}
	for _, e := range logs.All() {
		line := fmt.Sprint(e.Message, e.ContextMap())
		if strings.Contains(line, "/db") || strings.Contains(line, ".go:") || e.Stack != "" {
			t.Fatalf("a line with a path or a stack: %s %s", line, e.Stack)
		}
	}
	last := db.LastCommitSequence()
	if last <= acked.Load() {
		t.Fatalf("last commit %d, acknowledged %d", last, acked.Load())
	}
	db2 := reopen(t, db, bu)
	if got := db2.LastCommitSequence(); got != last {
		t.Fatalf("after reopen: last commit %d, want %d", got, last)
	}
}
