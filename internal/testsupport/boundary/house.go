package boundary

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path"
	"slices"
	"strconv"
	"strings"
)

// MaxLines is the most lines a production (non-test) Go file may have.
const MaxLines = 500

// LongFiles lists the production files allowed over MaxLines, by their path
// from the module root, each with the reason. An entry is temporary: the
// house rules fail once its file is back under MaxLines, so that it is
// removed.
var LongFiles = map[string]string{}

// PathlessDir is the one package, by its directory from the module root,
// that may call errors.Unwrap or name *fs.PathError, *os.PathError or
// *os.LinkError: every other package takes paths out of errors, and asks
// whether an error came from a named file, through it.
const PathlessDir = "internal/hygiene/pathless"

// VocabularyDir is the package, by its directory from the module root, that
// holds the delivery vocabulary shared by the packages that deliver. It may
// import only the standard library, so that every package can use its
// words. The rule holds from the day the package exists.
const VocabularyDir = "deliverytype"

// Domain lists riffdb's domain packages, by their directory from the module
// root. No package under internal/ imports one of them, or a package below
// one: internal packages are helpers that the domain uses, never the other
// way round. event, the shared encodings, is not among them.
var Domain = []string{
	"primary", "archive", "outbox", "backup", "server", "capability",
	"config", "statsapi", "telemetry", "cli",
}

// InternalImports lists the imports of a Domain package by an internal
// package that are allowed for now, as "importer -> imported" (directories
// from the module root), each with the reason. An entry is temporary: the
// house rules fail once the import is gone, so that it is removed.
var InternalImports = map[string]string{}

// HouseFile checks one production Go file against the house rules: its
// length, errors.Unwrap, path-error types, and its imports. rel is its path
// from the module root, with slashes; src is its content. It returns one
// line per violation, each saying what to do, and the allowlist entries
// (of LongFiles and InternalImports) that the file used. An error means the
// file does not parse.
func HouseFile(rel string, src []byte) (violations, used []string, err error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rel, src, parser.ParseComments)
	if err != nil {
		return nil, nil, err
	}
	dir := path.Dir(rel)

	if lines := strings.Count(string(src), "\n"); lines > MaxLines && !ast.IsGenerated(f) {
		if _, ok := LongFiles[rel]; ok {
			used = append(used, rel)
		} else {
			violations = append(violations, fmt.Sprintf("%s: %d lines, over %d: split it by concept into files of the same package "+
				"(move whole functions with their doc comments; behaviour unchanged). A generated file needs its "+
				"\"// Code generated ... DO NOT EDIT.\" header", rel, lines, MaxLines))
		}
	}

	// The names under which the file imports the packages the rules watch.
	names := map[string]string{} // local name -> import path
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		name := path.Base(p)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		names[name] = p

		if dir == VocabularyDir || strings.HasPrefix(dir, VocabularyDir+"/") {
			if !standard(p) {
				violations = append(violations, fmt.Sprintf("%s imports %s: %s holds the delivery vocabulary and may import only "+
					"the standard library; move what needs %s into the package that uses the vocabulary", rel, p, VocabularyDir, p))
			}
		}
		if strings.HasPrefix(dir, "internal/") {
			if d, ok := domain(p); ok {
				key := dir + " -> " + d
				if _, ok := InternalImports[key]; ok {
					used = append(used, key)
				} else {
					violations = append(violations, fmt.Sprintf("%s imports %s: internal packages import no domain package (%s); "+
						"take what it needs as parameters or an interface, and let the domain package pass it in", rel, p, strings.Join(Domain, ", ")))
				}
			}
		}
	}

	if dir == PathlessDir {
		return violations, used, nil
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if pkg, ok := n.X.(*ast.Ident); ok && names[pkg.Name] == "errors" && n.Sel.Name == "Unwrap" {
				violations = append(violations, fmt.Sprintf("%s: errors.Unwrap: to take paths out of an error use "+
					"pathless.Error (or pathless.Text for a message); to reach a cause, errors.As its type and read its field", position(fset, n)))
			}
		case *ast.StarExpr:
			if sel, ok := n.X.(*ast.SelectorExpr); ok {
				if pkg, ok := sel.X.(*ast.Ident); ok && pathErrorType(names[pkg.Name], sel.Sel.Name) {
					violations = append(violations, fmt.Sprintf("%s: *%s.%s: look at path errors only through internal/hygiene/pathless "+
						"(pathless.IsPathError, PathCause, LinkCause, Error); add a predicate there if none fits", position(fset, n), pkg.Name, sel.Sel.Name))
				}
			}
		}
		return true
	})
	return violations, used, nil
}

// Stale returns one line for each entry of LongFiles and InternalImports
// that no file used, given the entries that HouseFile reported as used over
// the whole module.
func Stale(used []string) []string {
	var out []string
	for _, allow := range []map[string]string{LongFiles, InternalImports} {
		for key := range allow {
			if !slices.Contains(used, key) {
				out = append(out, fmt.Sprintf("%q is allowed by internal/testsupport/boundary's house rules but no longer needs it: remove the entry", key))
			}
		}
	}
	slices.Sort(out)
	return out
}

func position(fset *token.FileSet, n ast.Node) string {
	p := fset.Position(n.Pos())
	return fmt.Sprintf("%s:%d", p.Filename, p.Line)
}

func pathErrorType(pkg, name string) bool {
	switch pkg {
	case "io/fs":
		return name == "PathError"
	case "os":
		return name == "PathError" || name == "LinkError"
	}
	return false
}

// standard reports whether p is a standard library import path: its first
// element has no dot.
func standard(p string) bool {
	first, _, _ := strings.Cut(p, "/")
	return !strings.Contains(first, ".")
}

// domain returns the Domain directory that import path p is or is below.
func domain(p string) (string, bool) {
	rel, ok := strings.CutPrefix(p, Module+"/")
	if !ok {
		return "", false
	}
	for _, d := range Domain {
		if rel == d || strings.HasPrefix(rel, d+"/") {
			return d, true
		}
	}
	return "", false
}
