package pathless_test

import (
	"errors"
	"io/fs"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"

	"github.com/riffdb/riffdb/internal/hygiene/pathless"
)

// TestTextDropsStacksAndPaths: a message with an embedded goroutine dump
// (as some of Pebble's fatal messages have) and an absolute path keeps its
// words, one line, without the dump or the path's directories.
func TestTextDropsStacksAndPaths(t *testing.T) {
	s := "levelIter: bound violation in /srv/private/db/000123.sst\n" + string(debug.Stack())
	got := pathless.Text(s)
	if want := "levelIter: bound violation in 000123.sst"; got != want {
		t.Errorf("Text = %q, want %q", got, want)
	}
	got = pathless.Text("first: /a/b/c.log\nsecond\n\tat /x/y/z.go:12 +0x1\n")
	if want := "first: c.log; second"; got != want {
		t.Errorf("Text = %q, want %q", got, want)
	}
}

// TestCleanKeepsTheChain: Clean's message is Message's, and errors.Is still
// sees the cause.
func TestCleanKeepsTheChain(t *testing.T) {
	err := errors.Join(errors.New("flush"), &fs.PathError{Op: "write", Path: "/srv/private/db/000002.log", Err: syscall.ENOSPC})
	c := pathless.Clean(err)
	if strings.Contains(c.Error(), "/srv") || strings.Contains(c.Error(), "\n") {
		t.Errorf("Clean = %q", c)
	}
	if !errors.Is(c, syscall.ENOSPC) {
		t.Errorf("Clean(%q) lost ENOSPC", err)
	}
	if pathless.Clean(nil) != nil || pathless.Message(nil) != "" {
		t.Error("nil is not kept")
	}
}
