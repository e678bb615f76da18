package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
)

// stepResult is the inspect result with the fields of a stepped scan.
type stepResult struct {
	inspectResult
	Steps        int    `json:"steps"`
	TotalRecords int64  `json:"total_records"`
	TotalBytes   int64  `json:"total_bytes"`
	NextCursor   string `json:"next_cursor"`
}

// inspectSchema compiles docs/envelope.schema.json (which refers to
// docs/inspect-result.schema.json).
var inspectSchema = sync.OnceValues(func() (*jsonschema.Schema, error) {
	const base = "https://github.com/riffdb/riffdb/docs/"
	c := jsonschema.NewCompiler()
	for _, name := range []string{"envelope.schema.json", "inspect-result.schema.json"} {
		f, err := os.Open(filepath.Join("..", "docs", name))
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(f)
		f.Close()
		if err != nil {
			return nil, err
		}
		if err := c.AddResource(base+name, doc); err != nil {
			return nil, err
		}
	}
	return c.Compile(base + "envelope.schema.json")
})

// inspectAt runs `riffdb --output json outbox archive inspect --directory
// dir --database-id id ARGS` on the real binary, checks its output against
// the documented schema and that it names no path of the installation, and
// decodes it.
func inspectAt(t *testing.T, dir, id string, args ...string) (cliResult, stepResult) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"--output", "json", "outbox", "archive", "inspect",
		"--directory", dir, "--database-id", id}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var r cliResult
	if ee, ok := err.(*exec.ExitError); ok {
		r.Exit = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	r.Stderr = stderr.String()
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("inspect printed no envelope: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	sch, err := inspectSchema()
	must(t, err)
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(stdout.Bytes()))
	must(t, err)
	if err := sch.Validate(v); err != nil {
		t.Errorf("inspect output does not follow docs/envelope.schema.json: %v\n%s", err, stdout.String())
	}
	if out := stdout.String() + r.Stderr; strings.Contains(out, filepath.Dir(dir)) || r.Stderr != "" {
		t.Errorf("inspect names a path or writes to stderr: %s", out)
	}
	var res stepResult
	if r.Result != nil {
		must(t, json.Unmarshal(r.Result, &res))
	}
	return r, res
}

// treeListing lists every entry below dir (dir included) with its size,
// mode, modification time in nanoseconds and inode number.
func treeListing(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(&b, "%s size=%d mode=%o mtime=%d.%09d ino=%d\n", rel, st.Size, st.Mode, st.Mtim.Sec, st.Mtim.Nsec, st.Ino)
		return nil
	})
	must(t, err)
	return b.String()
}

// noTrace runs one inspection of dir and requires the full listing of dir
// to be identical before and after it.
func noTrace(t *testing.T, what, dir, id string, args ...string) (cliResult, stepResult) {
	t.Helper()
	before := treeListing(t, dir)
	r, res := inspectAt(t, dir, id, args...)
	if after := treeListing(t, dir); after != before {
		t.Errorf("%s: inspect changed the outbox directory:\nbefore:\n%s\nafter:\n%s", what, before, after)
	}
	return r, res
}

// waitQuietTree waits until a running server stops changing dir (Pebble
// removes obsolete files in the background after it opens).
func waitQuietTree(t *testing.T, dir string) {
	t.Helper()
	prev := treeListing(t, dir)
	for stable, deadline := 0, time.Now().Add(30*time.Second); stable < 5; {
		if time.Now().After(deadline) {
			t.Fatal("the server kept changing the outbox directory for 30s")
		}
		time.Sleep(50 * time.Millisecond)
		cur := treeListing(t, dir)
		if cur == prev {
			stable++
		} else {
			stable = 0
		}
		prev = cur
	}
}

// inspectNote is the note of command i: incompressible text, so that its
// bytes appear as they are in the archive's tables.
func inspectNote(i int) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	r := rand.New(rand.NewPCG(uint64(i), 13))
	b := make([]byte, 8<<10)
	for j := range b {
		b[j] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}

// runOrders runs place_order commands first..last-1 one after another (so
// command i is commit sequence i+1 on a fresh database) and waits until the
// outbox drained.
func runOrders(t *testing.T, p *proc, token string, first, last int, note bool) {
	t.Helper()
	for i := first; i < last; i++ {
		in := orderInput(i)
		if note {
			in["note"] = inspectNote(i)
		}
		code, r, body, err := p.command(context.Background(), token, "place_order", in, fmt.Sprintf("inspect-%d", i))
		if err != nil || code != http.StatusOK || r.Replayed || r.CommitSequence != uint64(i+1) {
			t.Fatalf("command %d: %d %v %+v %s", i, code, err, r, body)
		}
	}
	waitFor(t, 2*time.Minute, "the outbox to drain", func() bool {
		d := p.stats(token).Databases[0]
		return d.PendingOutboxDeliveries != nil && *d.PendingOutboxDeliveries == 0 && d.Outbox.Health == "healthy"
	})
}

// rawArchive opens an archive's store directly with Pebble (the server
// stopped), for tampering; fn runs on it, then the store's files get the
// private modes back.
func rawArchive(t *testing.T, outbox string, fn func(db *pebble.DB)) {
	t.Helper()
	dir := filepath.Join(outbox, archive.StoreDirName)
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: archive.FormatMajorVersion, ErrorIfNotExists: true,
		Logger: testutil.QuietPebbleLogger{}})
	must(t, err)
	fn(db)
	must(t, db.Close())
	names, err := os.ReadDir(dir)
	must(t, err)
	for _, n := range names {
		must(t, os.Chmod(filepath.Join(dir, n.Name()), 0o600))
	}
}

// TestInspectReconcilesInStepsAndLeavesNoTrace builds an archive through
// the real server and drives the real CLI: a reconciliation one page a
// step, each step fed the previous next_cursor, ends "verified" with the
// totals of one scan; a cursor replayed against another installation's
// archive is refused; records archived between steps make the next step
// say "changed"; a record damaged in the middle of the archive is found by
// the step that reaches it; and every outcome (verified, incomplete,
// changed, corrupt, mismatch, busy, not found, bad flags, invalid cursor)
// leaves the outbox directory's full listing (names, sizes, modes,
// mtimes, inodes) exactly as it was.
func TestInspectReconcilesInStepsAndLeavesNoTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 600 commands reconciled in steps through every outcome")
	}
	t.Parallel()
	const n, target = 600, 384 // target is on the second page of 256 records
	e := newEnv(t, envOpts{outbox: true})
	token := e.token([]string{"execute_commands", "read_statistics"}, "")
	p := e.start()
	runOrders(t, p, token, 0, 400, true)
	p.stop()
	p = e.start() // the restart flushes the first part into tables
	runOrders(t, p, token, 400, n, true)
	id := p.stats(token).Databases[0].DatabaseID
	p.stop()

	r, one := noTrace(t, "verified", e.outbox, id, "--max-pages", "256")
	if r.Exit != 0 || one.Integrity != "verified" || one.TotalRecords != n || one.RecordCount != n || one.Steps != 1 {
		t.Fatalf("one scan: %+v %+v", r.Error, one)
	}
	var cursor, first string
	for i := 1; ; i++ {
		args := []string{"--max-pages", "1"}
		if cursor != "" {
			args = append(args, "--after", cursor)
		}
		r, res := noTrace(t, fmt.Sprintf("step %d", i), e.outbox, id, args...)
		if r.Exit != 0 || res.Steps != i || res.TotalRecords != min(int64(i*archive.MaxPageRecords), n) {
			t.Fatalf("step %d: exit %d %+v %+v", i, r.Exit, r.Error, res)
		}
		if res.Integrity == "incomplete" {
			cursor = res.NextCursor
			first = cmpOr(first, cursor)
			continue
		}
		if i != 3 || res.Integrity != "verified" || res.TotalRecords != one.TotalRecords || res.TotalBytes != one.TotalBytes {
			t.Fatalf("last step %d: %+v, one scan: %+v", i, res, one)
		}
		break
	}

	if r, _ := noTrace(t, "bad flags", e.outbox, id, "--max-pages", "/etc/passwd"); r.Exit != 2 || r.Error.Code != "usage" ||
		strings.Contains(r.Error.Message, "passwd") {
		t.Errorf("bad flags: exit %d %+v", r.Exit, r.Error)
	}
	damaged := []byte(first)
	damaged[len(damaged)/2] ^= 1
	if r, _ := noTrace(t, "damaged cursor", e.outbox, id, "--after", string(damaged)); r.Exit != 2 || r.Error.Code != "invalid_cursor" {
		t.Errorf("damaged cursor: exit %d %+v", r.Exit, r.Error)
	}
	empty := filepath.Join(e.root, "empty-outbox")
	must(t, os.Mkdir(empty, 0o700))
	if r, _ := noTrace(t, "not found", empty, id); r.Exit != 2 || r.Error.Code != "archive_not_found" {
		t.Errorf("not found: exit %d %+v", r.Exit, r.Error)
	}

	// Another installation: a cursor of this one is refused there, under
	// either database id. Its archive is then given a stale accounting:
	// mismatch.
	o := newEnv(t, envOpts{outbox: true})
	otoken := o.token([]string{"execute_commands", "read_statistics"}, "")
	op := o.start()
	runOrders(t, op, otoken, 0, 300, false)
	oid := op.stats(otoken).Databases[0].DatabaseID
	op.stop()
	for _, dbID := range []string{oid, id} {
		if r, _ := noTrace(t, "foreign cursor", o.outbox, dbID, "--after", first); r.Exit != 2 || r.Error.Code != "invalid_cursor" ||
			strings.Contains(r.Error.Message, first[:12]) {
			t.Errorf("a cursor of another installation: exit %d %+v", r.Exit, r.Error)
		}
	}
	var stale []byte
	rawArchive(t, o.outbox, func(db *pebble.DB) {
		v, closer, err := db.Get([]byte("maccounting"))
		must(t, err)
		stale = bytes.Clone(v)
		must(t, closer.Close())
	})
	op = o.start()
	runOrders(t, op, otoken, 300, 301, false)
	op.stop()
	rawArchive(t, o.outbox, func(db *pebble.DB) { must(t, db.Set([]byte("maccounting"), stale, pebble.Sync)) })
	if r, res := noTrace(t, "mismatch", o.outbox, oid, "--max-pages", "256"); r.Exit != 1 || r.Error.Code != "archive_integrity_mismatch" ||
		res.Integrity != "mismatch" {
		t.Errorf("stale accounting: exit %d %+v %+v", r.Exit, r.Error, res)
	}

	// Busy while the server runs; a command archived then makes the next
	// step of the earlier scan say "changed".
	p = e.start()
	waitQuietTree(t, e.outbox)
	if r, _ := noTrace(t, "busy", e.outbox, id); r.Exit != 2 || r.Error.Code != "archive_busy" {
		t.Errorf("server running: exit %d %+v", r.Exit, r.Error)
	}
	runOrders(t, p, token, n, n+1, true)
	p.stop()
	if r, res := noTrace(t, "changed", e.outbox, id, "--after", first); r.Exit != 1 || r.Error.Code != "archive_integrity_changed" ||
		res.Integrity != "changed" || res.NextCursor != "" {
		t.Errorf("archive changed between steps: exit %d %+v %+v", r.Exit, r.Error, res)
	}

	// Damage one record in the middle (command target's note, in a table).
	note := []byte(inspectNote(target))[4000:4032]
	tables, err := filepath.Glob(filepath.Join(e.outbox, archive.StoreDirName, "*.sst"))
	must(t, err)
	var flipped int
	for _, f := range tables {
		b, err := os.ReadFile(f)
		must(t, err)
		if i := bytes.Index(b, note); i >= 0 {
			b[i+16] ^= 0x01
			must(t, os.WriteFile(f, b, 0o600))
			flipped++
		}
	}
	if flipped == 0 {
		t.Fatalf("the note of command %d is in none of %d tables", target, len(tables))
	}
	r, res := noTrace(t, "incomplete before the damage", e.outbox, id, "--max-pages", "1")
	if r.Exit != 0 || res.Integrity != "incomplete" {
		t.Fatalf("the first step does not reach the damage: exit %d %+v %+v", r.Exit, r.Error, res)
	}
	r, res = noTrace(t, "corrupt", e.outbox, id, "--max-pages", "1", "--after", res.NextCursor)
	if r.Exit != 1 || r.Error.Code != "archive_integrity_corrupt" || res.Integrity != "corrupt" || res.Steps != 2 {
		t.Fatalf("the step that reaches the damaged record: exit %d %+v %+v", r.Exit, r.Error, res)
	}
	if r, res := inspectAt(t, e.outbox, id, "--max-pages", "256"); r.Exit != 1 || res.Integrity != "corrupt" {
		t.Errorf("one scan of the damaged archive: exit %d %+v %+v", r.Exit, r.Error, res)
	}
}
