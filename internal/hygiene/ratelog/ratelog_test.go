package ratelog_test

import (
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/riffdb/riffdb/internal/hygiene/ratelog"
	"github.com/riffdb/riffdb/internal/process/clock"
)

type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time                         { return c.now }
func (c *fakeClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

var _ clock.Clock = (*fakeClock)(nil)

func setup(t *testing.T) (*ratelog.Logger, *observer.ObservedLogs, *fakeClock) {
	t.Helper()
	core, logs := observer.New(zap.DebugLevel)
	c := &fakeClock{now: time.Unix(1000, 0)}
	return ratelog.New(zap.New(core), c, "store background error", ratelog.Options{}), logs, c
}

func TestRepeatsBackOffAndCountSuppressed(t *testing.T) {
	t.Parallel()
	l, logs, c := setup(t)
	emfile := func(n int) error {
		return fmt.Errorf("flush: %w", &fs.PathError{Op: "open", Path: fmt.Sprintf("/data/db/%06d.sst", n), Err: syscall.EMFILE})
	}
	// 100 reports every 10 ms for 100 s: one class, 10,000 reports.
	total := 0
	for i := range 10000 {
		l.Error(emfile(i))
		total++
		c.now = c.now.Add(10 * time.Millisecond)
	}
	entries := logs.All()
	// Lines at 0, 1, 3, 7, 15, 31, 61, 91 s: 8.
	if len(entries) != 8 {
		t.Fatalf("%d lines for 100 s of one error, want 8", len(entries))
	}
	logged := 0
	for _, e := range entries {
		logged += 1 + int(e.ContextMap()["suppressed"].(int64))
		if e.Level != zapcore.WarnLevel || e.Message != "store background error" {
			t.Errorf("line %v %q", e.Level, e.Message)
		}
		if got := e.ContextMap()["error"]; got != "flush: open: too many open files" {
			t.Errorf("error field %q", got)
		}
		if e.Stack != "" {
			t.Errorf("line with a stack: %s", e.Stack)
		}
	}
	l.Clear()
	cleared := logs.All()[len(entries):]
	if len(cleared) != 1 || cleared[0].Message != "store background error cleared" || cleared[0].Level != zapcore.InfoLevel {
		t.Fatalf("clear lines %v", cleared)
	}
	logged += int(cleared[0].ContextMap()["suppressed"].(int64))
	if logged != total {
		t.Fatalf("lines account for %d reports, want %d", logged, total)
	}
	// A second Clear with nothing new says nothing.
	l.Clear()
	if logs.Len() != len(entries)+1 {
		t.Fatal("a second Clear logged")
	}
}

func TestDistinctClassesAreLoggedSeparately(t *testing.T) {
	t.Parallel()
	l, logs, _ := setup(t)
	for range 100 {
		l.Error(syscall.EMFILE)
		l.Error(syscall.ENOSPC)
	}
	if logs.Len() != 2 {
		t.Fatalf("%d lines for two classes, want 2", logs.Len())
	}
	// Classes are bounded.
	for i := range 10 * ratelog.MaxClasses {
		l.Error(fmt.Errorf("error %c%c", 'a'+i%26, 'a'+i/26))
	}
	if logs.Len() > 2+ratelog.MaxClasses {
		t.Fatalf("%d lines for many classes, want at most %d", logs.Len(), 2+ratelog.MaxClasses)
	}
}

func TestAlternatingFailureAndSuccessStaysBounded(t *testing.T) {
	t.Parallel()
	l, logs, c := setup(t)
	for range 10000 {
		l.Error(syscall.EMFILE)
		l.Clear()
		c.now = c.now.Add(time.Millisecond)
	}
	// 10 s: error lines at 0, 1, 3, 7 s, each followed by one clear line.
	if logs.Len() != 8 {
		t.Fatalf("%d lines, want 8", logs.Len())
	}
}

func TestQuietClassStartsAgain(t *testing.T) {
	t.Parallel()
	l, logs, c := setup(t)
	for range 100 {
		l.Error(syscall.EMFILE)
		c.now = c.now.Add(time.Second)
	}
	n := logs.Len()
	c.now = c.now.Add(ratelog.DefaultMaxInterval)
	l.Error(syscall.EMFILE)
	if logs.Len() != n+1 {
		t.Fatal("a recurrence after a quiet maximum interval was not logged at once")
	}
	l.Error(syscall.EMFILE)
	c.now = c.now.Add(ratelog.DefaultInterval)
	l.Error(syscall.EMFILE)
	if logs.Len() != n+2 {
		t.Fatal("the backoff did not restart at the first interval")
	}
}

func TestCleanRemovesPaths(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"open /var/lib/riffdb/db/000123.sst: too many open files": "open 000123.sst: too many open files",
		`pebble: database "/var/lib/riffdb/db" does not exist`:    `pebble: database "db" does not exist`,
		"rename /a/b/x.tmp /a/b/x: no such file":                  "rename x.tmp x: no such file",
		"(/a/b/c) [/d/e] =/f/g":                                   "(c) [e] =g",
		"no paths here, only a/relative and a ratio 1/2":          "no paths here, only a/relative and a ratio 1/2",
		"root /": "root ",
	} {
		if got := ratelog.CleanText(in); got != want {
			t.Errorf("CleanText(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestCleanRealPebbleError cleans an error that Pebble itself formats with
// the store's path inside its text (no *fs.PathError to strip).
func TestCleanRealPebbleError(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := root + "/missing-store"
	_, err := pebble.Open(dir, &pebble.Options{FS: vfs.Default, ErrorIfNotExists: true})
	if err == nil {
		t.Fatal("pebble opened a missing store")
	}
	if !strings.Contains(err.Error(), dir) {
		t.Fatalf("the test needs an error with the path in its text: %q", err)
	}
	got := ratelog.Clean(err)
	if strings.Contains(got, root) || !strings.Contains(got, "does not exist") {
		t.Fatalf("Clean = %q", got)
	}
	// zap.Error would log this error's verbose form, stack included;
	// the Logger logs the clean text only.
	core, logs := observer.New(zap.DebugLevel)
	zap.New(core).Warn("x", zap.Error(err))
	if v, _ := logs.All()[0].ContextMap()["errorVerbose"].(string); !strings.Contains(v, ".go:") {
		t.Fatalf("expected zap.Error to add a verbose stack, got %q", v)
	}
	l := ratelog.New(zap.New(core), nil, "y", ratelog.Options{})
	l.Error(err)
	line := logs.All()[1].ContextMap()
	if _, ok := line["errorVerbose"]; ok || strings.Contains(fmt.Sprint(line), ".go:") || strings.Contains(fmt.Sprint(line), root) {
		t.Fatalf("line %v", line)
	}
	if ratelog.Clean(nil) != "" {
		t.Fatal("Clean(nil)")
	}
}

func TestReportFieldsOnTheLineAndItsClear(t *testing.T) {
	t.Parallel()
	l, logs, c := setup(t)
	for range 3 {
		l.Report("k", "the archive is unavailable", zap.String("reason", "destination_unavailable"))
		c.now = c.now.Add(100 * time.Millisecond)
	}
	l.Clear()
	entries := logs.All()
	if len(entries) != 2 {
		t.Fatalf("%d lines, want the first report and the clear", len(entries))
	}
	for _, e := range entries {
		m := e.ContextMap()
		if m["reason"] != "destination_unavailable" || m["error"] != "the archive is unavailable" {
			t.Fatalf("line %q: fields %v", e.Message, m)
		}
	}
	if n := entries[1].ContextMap()["suppressed"]; n != int64(2) {
		t.Fatalf("the clear line stands for %v reports, want 2", n)
	}
}
