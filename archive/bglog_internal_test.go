package archive

import (
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestBackgroundErrorsArePathFreeAndDeduplicated feeds the archive's
// background-error handler a flush failure that names a table by path and
// a real Pebble error (cockroachdb/errors, whose verbose form is a stack):
// the lines carry neither, repeats back off, and a successful flush logs
// that the condition cleared.
func TestBackgroundErrorsArePathFreeAndDeduplicated(t *testing.T) {
	t.Parallel()
	st, logs, now := newTestState()
	root := t.TempDir()
	_, perr := pebble.Open(root+"/missing", &pebble.Options{FS: vfs.Default, ErrorIfNotExists: true})
	if perr == nil || !strings.Contains(perr.Error(), root) {
		t.Fatalf("the test needs a Pebble error naming its path: %v", perr)
	}
	o := pebbleOptions(st, vfs.NewMem(), false, engineTuning{})
	for i := range 6000 {
		o.EventListener.BackgroundError(fmt.Errorf("creating object %06d: %w", i, &fs.PathError{Op: "open", Path: fmt.Sprintf("%s/archive.pebble/%06d.sst", root, i), Err: syscall.EMFILE}))
		o.EventListener.BackgroundError(perr)
		*now = now.Add(10 * time.Millisecond)
	}
	// 60 s of two classes: each logged at 0, 1, 3, 7, 15, 31 s.
	if n := logs.Len(); n > 14 {
		t.Fatalf("%d lines for 60 s of two repeating errors, want at most 14", n)
	}
	o.EventListener.FlushEnd(pebble.FlushInfo{Done: true})
	if logs.FilterMessageSnippet("cleared").Len() != 2 {
		t.Fatalf("no cleared lines: %v", logs.All())
	}
	for _, e := range logs.All() {
		line := fmt.Sprint(e.Message, e.ContextMap())
		if strings.Contains(line, root) || strings.Contains(line, ".go:") || e.Stack != "" {
			t.Fatalf("a line with a path or a stack: %s", line)
		}
	}
	pebbleLogger{st: st}.Errorf("ingest failed to remove original file: %s", root+"/archive.pebble/000001.sst")
	pebbleLogger{st: st}.Infof("WAL %s stopped reading", root+"/archive.pebble/000002.log")
	for _, e := range logs.All() {
		if line := fmt.Sprint(e.Message, e.ContextMap()); strings.Contains(line, root) {
			t.Fatalf("Pebble's logger wrote a path: %s", line)
		}
	}
}
