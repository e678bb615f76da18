package boundary_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"testing"

	"github.com/riffdb/riffdb/internal/testsupport/boundary"
)

// TestCoreImports fails when a core package, or a riffdb package it depends
// on, imports a forbidden package. It needs the go command, which is always
// present where the tests run; it never skips.
func TestCoreImports(t *testing.T) {
	for _, core := range boundary.Core {
		graph := listDeps(t, core)
		if !slices.ContainsFunc(graph, func(p boundary.Package) bool { return p.ImportPath == core }) {
			t.Fatalf("go list -deps %s did not list the package itself (%d packages)", core, len(graph))
		}
		for _, v := range boundary.Violations(core, graph) {
			t.Error(v)
		}
	}
}

// listDeps returns pkg and all its dependencies in the build of the current
// platform, without test files.
func listDeps(t *testing.T, pkg string) []boundary.Package {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports", pkg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr.String())
	}
	var graph []boundary.Package
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p boundary.Package
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return graph
		} else if err != nil {
			t.Fatalf("go list -deps %s: decoding its output: %v", pkg, err)
		}
		graph = append(graph, p)
	}
}

func TestViolations(t *testing.T) {
	const (
		m       = boundary.Module
		outbox  = m + "/outbox"
		helper  = m + "/internal/helper"
		pebble  = "github.com/cockroachdb/pebble/v2"
		promcli = "github.com/prometheus/client_golang/prometheus"
	)
	graph := []boundary.Package{
		{ImportPath: outbox, Imports: []string{"context", m + "/event", helper, m + "/telemetryx", pebble,
			"go.opentelemetry.io/otel/metric", "go.opentelemetry.io/otel/sdk/metric"}},
		{ImportPath: helper, Imports: []string{m + "/telemetry", m + "/cli", promcli, "go.opentelemetry.io/otel/exporters/prometheus"}},
		{ImportPath: m + "/event"},
		{ImportPath: m + "/telemetryx"},                  // not below telemetry
		{ImportPath: pebble, Imports: []string{promcli}}, // third party: outside the rule
		{ImportPath: "context"},
	}
	got := boundary.Violations(outbox, graph)
	want := []string{
		outbox + " imports go.opentelemetry.io/otel/sdk/metric (forbidden: go.opentelemetry.io/otel/sdk/...)",
		outbox + " -> " + helper + " imports " + m + "/telemetry (forbidden: " + m + "/telemetry/...)",
		outbox + " -> " + helper + " imports " + m + "/cli (forbidden: " + m + "/cli/...)",
		outbox + " -> " + helper + " imports " + promcli + " (forbidden: github.com/prometheus/client_golang/...)",
		outbox + " -> " + helper + " imports go.opentelemetry.io/otel/exporters/prometheus (forbidden: go.opentelemetry.io/otel/exporters/...)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Violations:\ngot  %q\nwant %q", got, want)
	}
	graph[0].Imports = graph[0].Imports[:6] // drop the SDK import
	graph[0].Imports = slices.DeleteFunc(graph[0].Imports, func(s string) bool { return s == helper })
	if got := boundary.Violations(outbox, graph); got != nil {
		t.Errorf("Violations of allowed imports = %q, want nil", got)
	}
}
