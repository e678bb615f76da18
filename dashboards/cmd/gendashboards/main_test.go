package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunWritesTheCheckedInDashboards runs the command into an empty
// directory and compares every file with the one checked in beside the
// generator.
func TestRunWritesTheCheckedInDashboards(t *testing.T) {
	dir := t.TempDir()
	if err := run(dir); err != nil {
		t.Fatal(err)
	}
	written, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(written) < 3 {
		t.Fatalf("run wrote %d dashboards, want at least 3", len(written))
	}
	for _, path := range written {
		name := filepath.Base(path)
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join("..", "..", name))
		if err != nil {
			t.Fatalf("%s is not checked in: %v", name, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the checked-in dashboards/%s", name, name)
		}
	}
}

// TestRunErrorNamesNoPath writes into a missing directory: the error names
// the file but not the directory's path.
func TestRunErrorNamesNoPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "absent")
	err := run(dir)
	if err == nil {
		t.Fatal("run into a missing directory succeeded")
	}
	if strings.Contains(err.Error(), dir) {
		t.Errorf("error names the path: %v", err)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error %v is not fs.ErrNotExist", err)
	}
}
