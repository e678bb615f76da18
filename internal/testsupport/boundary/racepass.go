package boundary

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
)

// RaceSkipFile checks one Go file (tests included) of a package that the
// Makefile's race pass leaves out (RACE_SKIP). The race pass runs the fast
// tier (-short) under the race detector, which can only report memory that
// two goroutines share; a package whose fast tier starts none has nothing
// to show it, and costs a race build and link. So such a file may:
//   - start a goroutine only in a function that calls testing.Short (a
//     test the race pass skips);
//   - import no package that runs goroutines of its own on the code's
//     behalf (net/http and its test server, Pebble), and from the module
//     only packages that are in skip too.
//
// rel is the file's path from the module root, with slashes; skip holds
// the RACE_SKIP directories. It returns one line per violation, each
// saying what to do. An error means the file does not parse.
func RaceSkipFile(rel string, src []byte, skip map[string]bool) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rel, src, 0)
	if err != nil {
		return nil, err
	}
	fix := "remove its package from RACE_SKIP in the Makefile, so the race pass covers it"
	var out []string
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if d, ok := strings.CutPrefix(p, Module+"/"); ok && !skip[d] {
			out = append(out, fmt.Sprintf("%s imports %s, which the race pass covers: %s", rel, p, fix))
		}
		if p == "net/http" || p == "net/http/httptest" || strings.HasPrefix(p, "github.com/cockroachdb/pebble") {
			out = append(out, fmt.Sprintf("%s imports %s, which runs goroutines of its own: %s", rel, p, fix))
		}
	}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		var goStmts []*ast.GoStmt
		short := false
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				goStmts = append(goStmts, n)
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Short" {
					if id, ok := sel.X.(*ast.Ident); ok && id.Name == "testing" {
						short = true
					}
				}
			}
			return true
		})
		if short {
			continue
		}
		for _, g := range goStmts {
			out = append(out, fmt.Sprintf("%s: starts a goroutine in %s, which the fast tier runs: %s", position(fset, g), fn.Name.Name, fix))
		}
	}
	return out, nil
}

// RaceSkip reads the RACE_SKIP directories from the Makefile's text: the
// words after "RACE_SKIP ?=", over continuation lines.
func RaceSkip(makefile string) ([]string, bool) {
	lines := strings.Split(makefile, "\n")
	for i, l := range lines {
		rest, ok := strings.CutPrefix(l, "RACE_SKIP ?=")
		if !ok {
			continue
		}
		var words []string
		for {
			cont := strings.HasSuffix(strings.TrimSpace(rest), "\\")
			words = append(words, strings.Fields(strings.TrimSuffix(strings.TrimSpace(rest), "\\"))...)
			if !cont || i+1 >= len(lines) {
				return words, true
			}
			i++
			rest = lines[i]
		}
	}
	return nil, false
}
