package outbox

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// sentinels pins every failure class and its message. It is used only here:
// isClassified recognises the classes by their type, and
// TestSentinelsAreBuiltByNewSentinel proves from the source that this table
// is complete.
var sentinels = []struct {
	name string
	err  error
	msg  string
}{
	{"ErrUnavailable", ErrUnavailable, "outbox: destination unavailable"},
	{"ErrRefused", ErrRefused, "outbox: destination refused"},
	{"ErrCapacity", ErrCapacity, "outbox: destination capacity exhausted"},
	{"ErrConflict", ErrConflict, "outbox: archive identity conflict"},
	{"ErrBindingChanged", ErrBindingChanged, "outbox: archive binding changed"},
	{"ErrIncompatibleFormat", ErrIncompatibleFormat, "outbox: archive format incompatible"},
	{"ErrCorrupt", ErrCorrupt, "outbox: archive content corrupt"},
	{"ErrArchiveLost", ErrArchiveLost, "outbox: archive lost completed records"},
	{"ErrHistoryBehind", ErrHistoryBehind, "outbox: primary history is behind the archive"},
	{"ErrStartupValidation", ErrStartupValidation, "outbox: archive startup validation failed"},
}

func TestSentinelsAreClassified(t *testing.T) {
	t.Parallel()
	for i, s := range sentinels {
		if got := s.err.Error(); got != s.msg {
			t.Errorf("%s.Error() = %q, want %q", s.name, got, s.msg)
		}
		wrapped := fmt.Errorf("context: %w", s.err)
		if !isClassified(wrapped) {
			t.Errorf("isClassified(%s) = false", s.name)
		}
		for j, other := range sentinels {
			if got := errors.Is(wrapped, other.err); got != (i == j) {
				t.Errorf("errors.Is(%s, %s) = %v", s.name, other.name, got)
			}
		}
	}
	for _, err := range []error{errors.New("outbox: destination unavailable"), fmt.Errorf("x: %w", errors.ErrUnsupported), nil} {
		if isClassified(err) {
			t.Errorf("isClassified(%v) = true", err)
		}
	}
}

// TestSentinelsAreBuiltByNewSentinel reads the package's source: every
// exported Err* variable must be built by newSentinel (so isClassified
// recognises it) and be pinned in sentinels.
func TestSentinelsAreBuiltByNewSentinel(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if !strings.HasPrefix(id.Name, "Err") {
						continue
					}
					found = append(found, id.Name)
					var call *ast.CallExpr
					if i < len(vs.Values) {
						call, _ = vs.Values[i].(*ast.CallExpr)
					}
					if !isCallTo(call, "newSentinel") {
						t.Errorf("%s is not built by newSentinel: isClassified would not recognise it", id.Name)
					}
				}
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

func isCallTo(call *ast.CallExpr, fn string) bool {
	if call == nil {
		return false
	}
	id, ok := call.Fun.(*ast.Ident)
	return ok && id.Name == fn
}
