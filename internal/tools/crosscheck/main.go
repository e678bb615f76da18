// Command crosscheck type-checks the module's packages for other operating
// systems (`go run ./internal/tools/crosscheck darwin windows`), as the lint
// step's cross-platform check.
//
// It asks `go list -deps` which files each package builds from under that
// GOOS (build tags, _os.go suffixes, cgo off as in a cross build) and runs
// go/types over them in dependency order, the standard library included.
// That finds what a cross build finds in riffdb's own code — an undefined
// name in a _other.go file, a signature that differs between platforms, an
// unused import — for a tenth of the CPU of `GOOS=… go build ./...`, which
// compiles every dependency again for each system. Function bodies are
// checked everywhere but in the standard library, which the toolchain
// already builds for every port.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

func main() {
	goos := os.Args[1:]
	if len(goos) == 0 {
		fmt.Fprintln(os.Stderr, "usage: crosscheck GOOS... (type-checks ./... for each)")
		os.Exit(2)
	}
	wd, _ := os.Getwd()
	failed := false
	for _, g := range goos {
		errs, err := check(".", g, runtime.GOARCH, "./...")
		if err != nil {
			fmt.Fprintf(os.Stderr, "crosscheck %s: %v\n", g, err)
			os.Exit(2)
		}
		for _, e := range errs {
			fmt.Fprintf(os.Stderr, "GOOS=%s: %s\n", g, strings.TrimPrefix(e, wd+string(filepath.Separator)))
		}
		failed = failed || len(errs) > 0
	}
	if failed {
		os.Exit(1)
	}
}

// listed is the part of `go list -json` output the check reads.
type listed struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	ImportMap  map[string]string
	Standard   bool
	Module     *struct{ GoVersion string }
	Error      *struct{ Err string }
}

// check type-checks the packages matched by patterns, and everything they
// import, as they build for goos/goarch, from the module in dir. It returns
// the type errors found (each with its file and line) and an error when the
// packages could not be listed at all.
func check(dir, goos, goarch string, patterns ...string) ([]string, error) {
	cmd := exec.Command("go", append([]string{"list", "-e", "-deps", "-json=ImportPath,Dir,GoFiles,ImportMap,Standard,Module,Error"}, patterns...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0", "GOFLAGS=-mod=readonly")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	var pkgs []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}

	fset := token.NewFileSet()
	checked := map[string]*types.Package{"unsafe": types.Unsafe}
	var found []string
	// go list -deps prints every package after the packages it imports.
	for _, p := range pkgs {
		if p.ImportPath == "unsafe" {
			continue
		}
		if p.Error != nil {
			found = append(found, fmt.Sprintf("%s: %s", p.ImportPath, p.Error.Err))
			continue
		}
		var files []*ast.File
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				found = append(found, err.Error())
				continue
			}
			files = append(files, f)
		}
		conf := types.Config{
			Importer:         importer{checked: checked, importMap: p.ImportMap},
			Sizes:            types.SizesFor("gc", goarch),
			IgnoreFuncBodies: p.Standard,
			Error:            func(err error) { found = append(found, err.Error()) },
		}
		if p.Module != nil && p.Module.GoVersion != "" {
			conf.GoVersion = "go" + p.Module.GoVersion
		}
		pkg, _ := conf.Check(p.ImportPath, fset, files, nil)
		checked[p.ImportPath] = pkg
	}
	return found, nil
}

// importer resolves an import of one package through its ImportMap (vendored
// standard-library packages) to a package checked before it.
type importer struct {
	checked   map[string]*types.Package
	importMap map[string]string
}

func (im importer) Import(path string) (*types.Package, error) {
	if mapped, ok := im.importMap[path]; ok {
		path = mapped
	}
	if p := im.checked[path]; p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("package %s was not listed before its importer", path)
}
