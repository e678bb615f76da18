package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeModule writes a one-package module whose Windows file is files[…].
func writeModule(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files["go.mod"] = "module example.com/m\n\ngo 1.24\n"
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestCheckFindsWhatOnlyOneSystemBuilds(t *testing.T) {
	dir := writeModule(t, map[string]string{
		"m.go":         "package m\n\nfunc Lock() error { return lock() }\n",
		"m_unix.go":    "//go:build unix\n\npackage m\n\nimport \"syscall\"\n\nfunc lock() error { return syscall.Flock(0, syscall.LOCK_EX) }\n",
		"m_windows.go": "package m\n\nimport \"os\"\n\nfunc lock() error { return errNotSupported }\n",
	})
	for _, tc := range []struct {
		goos string
		want []string // a substring of each error, in any order; none when clean
	}{
		{"linux", nil},
		{"darwin", nil},
		{"windows", []string{`"os" imported and not used`, "undefined: errNotSupported"}},
	} {
		errs, err := check(dir, tc.goos, "amd64", "./...")
		if err != nil {
			t.Fatalf("%s: %v", tc.goos, err)
		}
		if len(errs) != len(tc.want) {
			t.Fatalf("GOOS=%s: errors %q, want %d matching %q", tc.goos, errs, len(tc.want), tc.want)
		}
		for _, w := range tc.want {
			found := false
			for _, e := range errs {
				found = found || strings.Contains(e, w) && strings.Contains(e, "m_windows.go:")
			}
			if !found {
				t.Errorf("GOOS=%s: errors %q, want one naming m_windows.go that says %q", tc.goos, errs, w)
			}
		}
	}
}

func TestCheckChecksFunctionBodiesOfTheModule(t *testing.T) {
	dir := writeModule(t, map[string]string{
		"m.go": "package m\n\nfunc F() int {\n\tvar unused int\n\treturn 1\n}\n",
	})
	errs, err := check(dir, "darwin", "amd64", "./...")
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) != 1 || !strings.Contains(errs[0], "declared and not used: unused") {
		t.Fatalf("errors %q, want the unused variable in F's body", errs)
	}
}

func TestCheckReportsAPackageThatCannotBeListed(t *testing.T) {
	dir := writeModule(t, map[string]string{
		"m.go": "package m\n\nimport _ \"example.com/m/missing\"\n",
	})
	errs, err := check(dir, "windows", "amd64", "./...")
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) == 0 {
		t.Fatal("no error for an import of a package that does not exist")
	}
}
