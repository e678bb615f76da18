package pathless_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/riffdb/riffdb/internal/hygiene/pathless"
)

func TestCauses(t *testing.T) {
	const secret = "/very/secret/place"
	pe := fmt.Errorf("ctx: %w", &fs.PathError{Op: "open", Path: secret, Err: syscall.ENOENT})
	le := fmt.Errorf("ctx: %w", &os.LinkError{Op: "rename", Old: secret, New: secret + "2", Err: syscall.EXDEV})
	if !pathless.IsPathError(pe) || pathless.IsPathError(le) || pathless.IsPathError(syscall.EAGAIN) {
		t.Error("IsPathError does not tell a *fs.PathError in the chain from other errors")
	}
	if op, cause, ok := pathless.PathCause(pe); !ok || op != "open" || cause != syscall.ENOENT {
		t.Errorf("PathCause = %q, %v, %v; want open, ENOENT, true", op, cause, ok)
	}
	if _, _, ok := pathless.PathCause(le); ok {
		t.Error("PathCause found a *fs.PathError in a link error")
	}
	if op, cause, ok := pathless.LinkCause(le); !ok || op != "rename" || cause != syscall.EXDEV {
		t.Errorf("LinkCause = %q, %v, %v; want rename, EXDEV, true", op, cause, ok)
	}
	if _, _, ok := pathless.LinkCause(pe); ok {
		t.Error("LinkCause found a *os.LinkError in a path error")
	}
}

func TestErrorText(t *testing.T) {
	const secret = "/very/secret/place"
	pe := &fs.PathError{Op: "open", Path: secret, Err: syscall.ENOSPC}
	le := &os.LinkError{Op: "rename", Old: secret, New: secret + "2", Err: syscall.EXDEV}
	for err, want := range map[error]string{
		pe:                                       "open: no space left on device",
		fmt.Errorf("opening the store: %w", pe):  "opening the store: open: no space left on device",
		errors.Join(pe, fmt.Errorf("a: %w", le)): "open: no space left on device\na: rename: invalid cross-device link",
		os.NewSyscallError("fsync", pe):          "fsync: open: no space left on device",
		nil:                                      "",
	} {
		got := pathless.ErrorText(err)
		if got != want || strings.Contains(got, secret) {
			t.Errorf("Text(%v) = %q, want %q", err, got, want)
		}
	}
}
