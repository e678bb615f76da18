// Package reliability writes the report of the reliability campaign
// (docs/reliability.md, `make reliability`).
//
// The campaign is several tests in several packages (SIGKILLs of the real
// binary in e2e, crash points and archive faults in server, the damage
// matrix in e2e). Each owns one section of the report, between markers,
// and rewrites only that section; each section carries its figures as a
// JSON comment, from which the summary at the top is recomputed on every
// write. A test writes its section only when ReportEnv names the report, so
// the ordinary test suite never rewrites the checked-in document.
package reliability

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Environment variables of the campaign.
const (
	// ReportEnv names the report file to update; unset, nothing is written.
	ReportEnv = "RIFFDB_RELIABILITY_REPORT"
	// KillsEnv is the number of SIGKILLs of the e2e campaign.
	KillsEnv = "RIFFDB_RELIABILITY_KILLS"
	// SeedEnv fixes the campaign's random schedule.
	SeedEnv = "RIFFDB_RELIABILITY_SEED"
	// CommitEnv names the commit under test (the Makefile sets it; else git
	// is asked).
	CommitEnv = "RIFFDB_RELIABILITY_COMMIT"
)

// Totals are the figures a section contributes to the summary.
type Totals struct {
	Kills        int64  `json:"kills"`        // SIGKILLs survived
	CrashPoints  int64  `json:"crash_points"` // in-process crash clones exercised
	Faults       int64  `json:"faults"`       // fault episodes injected
	Acknowledged int64  `json:"acknowledged"` // events acknowledged to a client (or committed in process)
	Lost         int64  `json:"lost"`         // acknowledged events missing or changed afterwards
	Conflicts    int64  `json:"conflicts"`    // archive keys seen with two values
	Failed       int64  `json:"failed"`       // other checks that failed (the section says which)
	DurationSec  int64  `json:"duration_sec"` // wall time of the section's test
	Seed         uint64 `json:"seed,omitempty"`
}

// Section is one test's part of the report.
type Section struct {
	// Name is the marker name (letters, digits, dashes).
	Name string
	// Title is the section's heading.
	Title string
	// Body is the section's markdown, without heading.
	Body   string
	Totals Totals
}

// Enabled reports whether the campaign report is to be written.
func Enabled() bool { return os.Getenv(ReportEnv) != "" }

// Commit returns the commit under test, or "unknown".
func Commit() string {
	if c := os.Getenv(CommitEnv); c != "" {
		return c
	}
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// Update rewrites section s of the report named by ReportEnv (creating the
// report from its skeleton when missing) and recomputes the summary. It does
// nothing when ReportEnv is unset. Concurrent writers (tests of several
// packages) are serialized by a lock on the file.
func Update(s Section) error {
	path := os.Getenv(ReportEnv)
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := lockFile(f); err != nil {
		return err
	}
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	doc := string(old)
	if strings.TrimSpace(doc) == "" {
		doc = Skeleton
	}
	data, err := json.Marshal(s.Totals)
	if err != nil {
		return err
	}
	body := fmt.Sprintf("<!-- data: %s -->\n%s\n", data, strings.TrimSpace(s.Body))
	doc = replaceSection(doc, s.Name, "## "+s.Title, body)
	doc = replaceSection(doc, "summary", "## Summary", summary(doc))
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt([]byte(doc), 0); err != nil {
		return err
	}
	return f.Sync()
}

func begin(name string) string { return "<!-- reliability:" + name + ":begin -->" }
func end(name string) string   { return "<!-- reliability:" + name + ":end -->" }

// replaceSection replaces the text between name's markers, or appends the
// section (with its heading) when the markers are missing.
func replaceSection(doc, name, heading, body string) string {
	b, e := begin(name), end(name)
	i := strings.Index(doc, b)
	j := strings.Index(doc, e)
	if i < 0 || j < i {
		return strings.TrimRight(doc, "\n") + "\n\n" + heading + "\n\n" + b + "\n" + body + e + "\n"
	}
	return doc[:i+len(b)] + "\n" + body + doc[j:]
}

var dataRE = regexp.MustCompile(`<!-- reliability:([a-z0-9-]+):begin -->\n<!-- data: (\{[^\n]*\}) -->`)

// summary adds up the figures of every section in doc.
func summary(doc string) string {
	var sum Totals
	var names []string
	for _, m := range dataRE.FindAllStringSubmatch(doc, -1) {
		var t Totals
		if json.Unmarshal([]byte(m[2]), &t) != nil {
			continue
		}
		names = append(names, m[1])
		sum.Kills += t.Kills
		sum.CrashPoints += t.CrashPoints
		sum.Faults += t.Faults
		sum.Acknowledged += t.Acknowledged
		sum.Lost += t.Lost
		sum.Conflicts += t.Conflicts
		sum.Failed += t.Failed
		sum.DurationSec += t.DurationSec
	}
	sort.Strings(names)
	var b bytes.Buffer
	fmt.Fprintf(&b, "Last written %s UTC, commit `%s`; sections: %s.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04"), Commit(), strings.Join(names, ", "))
	b.WriteString("| measure | value |\n|---|---|\n")
	fmt.Fprintf(&b, "| SIGKILLs survived | %d |\n", sum.Kills)
	fmt.Fprintf(&b, "| in-process crash points exercised | %d |\n", sum.CrashPoints)
	fmt.Fprintf(&b, "| archive fault episodes injected | %d |\n", sum.Faults)
	fmt.Fprintf(&b, "| events acknowledged | %d |\n", sum.Acknowledged)
	fmt.Fprintf(&b, "| events lost or changed (must be 0) | %d |\n", sum.Lost)
	fmt.Fprintf(&b, "| archive keys with two values (must be 0) | %d |\n", sum.Conflicts)
	fmt.Fprintf(&b, "| other failed checks (must be 0; the sections say which) | %d |\n", sum.Failed)
	fmt.Fprintf(&b, "| wall time of the sections | %s |\n", time.Duration(sum.DurationSec)*time.Second)
	return b.String()
}

// DamageMatrix is the name of the damage matrix's section; its table is
// spliced in by scripts/reliability-report.sh from TestDamageMatrix's
// RIFFDB_DAMAGE_REPORT file.
const DamageMatrix = "damage-matrix"

// Skeleton is the report before any section was written: every section in
// its place, empty.
const Skeleton = `# Reliability campaign

This file is written by ` + "`make reliability`" + `; do not edit it by hand. Each section below
is rewritten by the test named in its heading, between its markers, and the summary is
recomputed from the figures of every section. The ordinary test suite (` + "`make unit`" + `)
runs the same tests (the SIGKILL campaign with 25 kills instead of 200) and never rewrites
this file.

What the campaign proves: nothing acknowledged is ever lost or changed. After every SIGKILL,
crash point and archive fault it checks that every acknowledged event is in the primary's
history and in the archive with its exact bytes, that no archive key ever held two values,
that ` + "`riffdb outbox archive inspect`" + ` verifies the archive's accounting (the SIGKILL
campaign, on the real binary), that the archive validates when reopened, and that the number
of pending deliveries returns to 0.

## Summary

<!-- reliability:summary:begin -->
Not run yet.
<!-- reliability:summary:end -->

## SIGKILL campaign (e2e TestReliability)

<!-- reliability:sigkill:begin -->
Not run yet.
<!-- reliability:sigkill:end -->

## Crash points inside the worker (delivery TestReliabilityCrashPoints)

<!-- reliability:crash-points:begin -->
Not run yet.
<!-- reliability:crash-points:end -->

## Archive faults (delivery TestReliabilityArchiveFaults)

<!-- reliability:archive-faults:begin -->
Not run yet.
<!-- reliability:archive-faults:end -->

## Damage matrix

<!-- reliability:damage-matrix:begin -->
Produced by ` + "`make reliability`" + ` from TestDamageMatrix (e2e/damage_test.go), which writes its
table to $RIFFDB_DAMAGE_REPORT; scripts/reliability-report.sh puts it here. Not run yet.
<!-- reliability:damage-matrix:end -->
`
