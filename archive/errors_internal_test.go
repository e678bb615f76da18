package archive

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// sentinels pins every exported sentinel and its message. It is used only
// here: mapError recognises the sentinels by their type, and
// TestSentinelsAreBuiltByNewSentinel proves from the source that this table
// is complete.
var sentinels = []struct {
	name string
	err  error
	msg  string
}{
	{"ErrConflict", ErrConflict, "archive: different event bytes already archived under this key"},
	{"ErrInvalidRecord", ErrInvalidRecord, "archive: record is not a valid stored event for its key"},
	{"ErrCapacity", ErrCapacity, "archive: capacity exhausted"},
	{"ErrUnavailable", ErrUnavailable, "archive: unavailable"},
	{"ErrRefused", ErrRefused, "archive: access refused"},
	{"ErrBindingChanged", ErrBindingChanged, "archive: bound to a different database"},
	{"ErrIncompatibleFormat", ErrIncompatibleFormat, "archive: incompatible format"},
	{"ErrCorrupt", ErrCorrupt, "archive: corrupt content"},
	{"ErrLostRecords", ErrLostRecords, "archive: records lost"},
	{"ErrHistoryBehind", ErrHistoryBehind, "archive: holds events beyond the primary's history"},
	{"ErrClosed", ErrClosed, "archive: closed"},
	{"ErrNotFound", ErrNotFound, "archive: no archive found"},
	{"ErrBusy", ErrBusy, "archive: held by another process"},
	{"ErrInvalidCursor", ErrInvalidCursor, "archive: invalid cursor"},
	{"ErrInvalidArgument", ErrInvalidArgument, "archive: invalid argument"},
}

// markers are the exported errors that are not sentinels: they mark a
// refusal's reason and mapError wraps them in ErrRefused.
var markers = []string{"ErrCustody", "ErrUnsupportedPlatform"}

func TestSentinelsAreRecognised(t *testing.T) {
	t.Parallel()
	for i, s := range sentinels {
		if got := s.err.Error(); got != s.msg {
			t.Errorf("%s.Error() = %q, want %q", s.name, got, s.msg)
		}
		wrapped := fmt.Errorf("context: %w", s.err)
		if got := mapError("op", wrapped); got != wrapped {
			t.Errorf("mapError(%s) = %v, want it passed through", s.name, got)
		}
		for j, other := range sentinels {
			if got := errors.Is(wrapped, other.err); got != (i == j) {
				t.Errorf("errors.Is(%s, %s) = %v", s.name, other.name, got)
			}
		}
	}
	for _, err := range []error{newError(ErrCorrupt, "op", nil), &LostRecordsError{Missing: 1, Anchor: anchorPrimary}} {
		if got := mapError("op", err); got != err {
			t.Errorf("mapError(%T) = %v, want it passed through", err, got)
		}
	}
	for _, err := range []error{ErrCustody, ErrUnsupportedPlatform} {
		got := mapError("op", fmt.Errorf("reason: %w", err))
		if !errors.Is(got, ErrRefused) || !errors.Is(got, err) {
			t.Errorf("mapError(%v) = %v, want ErrRefused wrapping it", err, got)
		}
	}
}

// TestSentinelsAreBuiltByNewSentinel reads the package's source: every
// exported Err* variable except the markers must be built by newSentinel
// (so mapError recognises it) and be pinned in sentinels.
func TestSentinelsAreBuiltByNewSentinel(t *testing.T) {
	t.Parallel()
	var found []string
	for _, spec := range packageVars(t) {
		for i, name := range spec.Names {
			if !strings.HasPrefix(name.Name, "Err") || slices.Contains(markers, name.Name) {
				continue
			}
			found = append(found, name.Name)
			if call, _ := valueAt(spec, i).(*ast.CallExpr); !isCallTo(call, "newSentinel") {
				t.Errorf("%s is not built by newSentinel: mapError would not recognise it", name.Name)
			}
		}
	}
	var listed []string
	for _, s := range sentinels {
		listed = append(listed, s.name)
	}
	slices.Sort(found)
	slices.Sort(listed)
	if !slices.Equal(found, listed) {
		t.Errorf("exported sentinels in the source %v, in the test table %v", found, listed)
	}
}

// packageVars returns the package-level var specs of the package's
// non-test files (of every platform).
func packageVars(t *testing.T) []*ast.ValueSpec {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var specs []*ast.ValueSpec
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.VAR {
				for _, s := range g.Specs {
					specs = append(specs, s.(*ast.ValueSpec))
				}
			}
		}
	}
	return specs
}

func valueAt(spec *ast.ValueSpec, i int) ast.Expr {
	if i < len(spec.Values) {
		return spec.Values[i]
	}
	return nil
}

func isCallTo(call *ast.CallExpr, fn string) bool {
	if call == nil {
		return false
	}
	id, ok := call.Fun.(*ast.Ident)
	return ok && id.Name == fn
}
