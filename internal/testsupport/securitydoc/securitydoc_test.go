package securitydoc

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestEveryCitedTestExists reads SECURITY.md and checks that each
// `package/TestName` (or FuzzName; a trailing * is a prefix) it cites is a
// function of a _test.go file in that package.
func TestEveryCitedTestExists(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "SECURITY.md"))
	if err != nil {
		t.Fatal(err)
	}
	refs := regexp.MustCompile("`([a-z][a-z/]*)/((?:Test|Fuzz)[A-Za-z0-9_]*)(\\*?)`").FindAllStringSubmatch(string(doc), -1)
	if len(refs) < 40 {
		t.Fatalf("only %d cited tests found: has the page's format changed?", len(refs))
	}
	for _, r := range refs {
		pkg, name, prefix := r[1], r[2], r[3] == "*"
		if pkg == "package" {
			continue // the page's explanation of the format
		}
		files, _ := filepath.Glob(filepath.Join(root, pkg, "*_test.go"))
		if len(files) == 0 {
			t.Errorf("%s/%s: no test files in %s", pkg, name, pkg)
			continue
		}
		found := false
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			want := "\nfunc " + name + "("
			if prefix {
				want = "\nfunc " + name
			}
			found = found || strings.Contains(string(b), want)
		}
		if !found {
			t.Errorf("SECURITY.md cites %s/%s%s, which does not exist", pkg, name, r[3])
		}
	}
}
