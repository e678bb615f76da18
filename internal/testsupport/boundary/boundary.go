package boundary

import (
	"fmt"
	"strings"
)

// Module is the import path of the riffdb module.
const Module = "github.com/riffdb/riffdb"

// Core lists the packages that must stay free of the Forbidden imports.
var Core = []string{
	Module + "/primary",
	Module + "/archive",
	Module + "/outbox",
}

// Forbidden lists the import paths that no riffdb package below a Core
// package may import. An entry ending in "/..." forbids that path and every
// path below it.
var Forbidden = []string{
	Module + "/telemetry/...",
	Module + "/cli/...",
	"github.com/prometheus/client_golang/...",
	"go.opentelemetry.io/otel/sdk/...",
	"go.opentelemetry.io/otel/exporters/...",
}

// Package is one node of a dependency graph: a package and its direct
// imports, as `go list -deps` reports them.
type Package struct {
	ImportPath string
	Imports    []string
}

// Violations returns one line for each forbidden import made by a riffdb
// package that core reaches through riffdb packages, core included, in the
// order of a breadth-first walk. Each line names the import chain from core.
// It returns nil when there is none. graph must hold core and its
// dependencies.
func Violations(core string, graph []Package) []string {
	byPath := make(map[string]Package, len(graph))
	for _, p := range graph {
		byPath[p.ImportPath] = p
	}
	parent := map[string]string{core: ""}
	queue := []string{core}
	var out []string
	for len(queue) > 0 {
		path := queue[0]
		queue = queue[1:]
		for _, imp := range byPath[path].Imports {
			if pattern, ok := forbidden(imp); ok {
				out = append(out, fmt.Sprintf("%s imports %s (forbidden: %s)", chain(parent, path), imp, pattern))
				continue
			}
			if _, seen := parent[imp]; seen || !inModule(imp) {
				continue
			}
			parent[imp] = path
			queue = append(queue, imp)
		}
	}
	return out
}

// chain returns the import chain from the walk's root to path.
func chain(parent map[string]string, path string) string {
	links := []string{path}
	for p := parent[path]; p != ""; p = parent[p] {
		links = append(links, p)
	}
	var b strings.Builder
	for i := len(links) - 1; i >= 0; i-- {
		b.WriteString(links[i])
		if i > 0 {
			b.WriteString(" -> ")
		}
	}
	return b.String()
}

func forbidden(path string) (pattern string, ok bool) {
	for _, pattern := range Forbidden {
		if matches(pattern, path) {
			return pattern, true
		}
	}
	return "", false
}

func inModule(path string) bool { return matches(Module+"/...", path) }

func matches(pattern, path string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == prefix || strings.HasPrefix(path, prefix+"/")
	}
	return path == pattern
}
