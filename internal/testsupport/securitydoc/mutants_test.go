package securitydoc

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// mutants are counter-examples of SECURITY.md claims, built into the code
// only under their build tag: each breaks the mechanism one claim rests on,
// and the claim's cited test must then fail. A claim whose test still
// passes against its counter-example is not evidence of anything.
var mutants = []struct {
	tag   string // the build tag that builds the counter-example
	claim string // words of the claim's row in SECURITY.md
	pkg   string // the cited test's package
	test  string // the cited test
}{
	{"riffdb_mutant_recordlock", "open file description lock (`F_OFD_SETLK`",
		"internal/store/dirlock", "TestLockSurvivesTheCloseOfAnotherDescriptor"},
	{"riffdb_mutant_keeppaths", "A primary store's failure carries no path and no stack trace",
		"internal/hygiene/pathless", "TestTextDropsStacksAndPaths"},
	{"riffdb_mutant_keeppaths", "A primary store's failure carries no path and no stack trace",
		"primary", "TestFailureIsPathFreeAndStackFree"},
	{"riffdb_mutant_duplicatekeys", "JSON nesting at most 1000 levels",
		"internal/hygiene/strictjson", "TestValidateRefuses"},
}

// TestCitedTestsFailAgainstTheirCounterExamples builds each mutant and runs
// the test SECURITY.md cites for its claim: it must fail. The same test
// passes in the ordinary build (the suite runs it), so the claim's evidence
// depends on the mechanism the claim names.
func TestCitedTestsFailAgainstTheirCounterExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds and runs each counter-example of a SECURITY.md claim")
	}
	root := filepath.Join("..", "..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "SECURITY.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mutants {
		t.Run(m.tag+"/"+m.test, func(t *testing.T) {
			row := rowWith(string(doc), m.claim)
			if row == "" {
				t.Fatalf("SECURITY.md has no claim with %q", m.claim)
			}
			if !strings.Contains(row, "`"+m.pkg+"/"+m.test+"`") {
				t.Fatalf("the claim with %q does not cite %s/%s", m.claim, m.pkg, m.test)
			}
			cmd := exec.Command("go", "test", "-count=1", "-vet=off", "-ldflags=-w", "-tags", m.tag, "-run", "^"+m.test+"$", "./"+m.pkg)
			cmd.Dir = root
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("%s/%s passes against the counter-example %s: it is no evidence for the claim\n%s", m.pkg, m.test, m.tag, out)
			}
			if !strings.Contains(string(out), "--- FAIL: "+m.test) {
				t.Fatalf("%s/%s did not run to a failure against %s (a build error?):\n%s", m.pkg, m.test, m.tag, out)
			}
		})
	}
}

// rowWith returns the line of doc that holds s, or "".
func rowWith(doc, s string) string {
	for _, line := range strings.Split(doc, "\n") {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}
