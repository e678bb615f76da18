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

func TestErrorRemovesPathsAndKeepsCauses(t *testing.T) {
	const secret = "/very/secret/place"
	pe := &fs.PathError{Op: "open", Path: secret, Err: syscall.ENOSPC}
	le := &os.LinkError{Op: "rename", Old: secret, New: secret + "2", Err: syscall.EXDEV}
	for name, err := range map[string]error{
		"path":    pe,
		"wrapped": fmt.Errorf("write %s: %w", secret, pe),
		"link":    le,
		"syscall": os.NewSyscallError("fsync", pe),
		"joined":  errors.Join(pe, le),
		"deep":    fmt.Errorf("ctx: %w", errors.Join(fmt.Errorf("a: %w", pe), le)),
	} {
		got := pathless.Error(err)
		if got == nil {
			t.Errorf("%s: nil", name)
			continue
		}
		if strings.Contains(got.Error(), secret) || strings.Contains(got.Error(), "%!") {
			t.Errorf("%s: %q", name, got)
		}
		if !errors.Is(got, syscall.ENOSPC) && !errors.Is(got, syscall.EXDEV) {
			t.Errorf("%s: lost the cause: %q", name, got)
		}
	}
	joined := pathless.Error(errors.Join(fmt.Errorf("first: %w", pe), fmt.Errorf("second: %w", le)))
	if !strings.Contains(joined.Error(), "first: open") || !strings.Contains(joined.Error(), "second: rename") {
		t.Errorf("a joined error lost a part: %q", joined)
	}
	if got := pathless.Error(fmt.Errorf("reading the store: %w", pe)).Error(); got != "reading the store: open: no space left on device" {
		t.Errorf("the wrapper's words were not kept: %q", got)
	}
	if pathless.Error(nil) != nil {
		t.Error("nil is not nil")
	}
	plain := errors.New("plain")
	if pathless.Error(plain) != plain {
		t.Error("a pathless error was rewritten")
	}
}
