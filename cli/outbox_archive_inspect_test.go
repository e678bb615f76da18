//go:build linux

package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/sys/unix"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
)

var updateInspectGolden = flag.Bool("update-inspect-golden", false, "rewrite cli/testdata/inspect/*.golden")

// inspectDB is the database identity the test archives are bound to.
var inspectDB = event.DatabaseID{0x01, 0x93, 0x2a, 0x71, 0x01, 0x81, 0x70, 0x01, 0x81, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01}

type inspectEnvelope struct {
	Schema  string `json:"schema"`
	Command string `json:"command"`
	OK      bool   `json:"ok"`
	Result  *struct {
		Format          string `json:"format"`
		DatabaseBinding string `json:"database_binding"`
		RecordCount     *int64 `json:"record_count"`
		EncodedBytes    *int64 `json:"encoded_bytes"`
		AllocatedBytes  *int64 `json:"allocated_bytes"`
		PagesExamined   *int   `json:"pages_examined"`
		Integrity       string `json:"integrity"`
		Steps           int    `json:"steps"`
		TotalRecords    *int64 `json:"total_records"`
		TotalBytes      *int64 `json:"total_bytes"`
		NextCursor      string `json:"next_cursor"`
		Incarnations    []struct {
			Incarnation uint64 `json:"incarnation"`
			Records     int64  `json:"records"`
		} `json:"incarnations"`
	} `json:"result"`
	Error *struct {
		Kind    string `json:"kind"`
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// testArchive is an archive directory built with the archive package.
type testArchive struct {
	dir     string
	records int
	encoded int64
}

// newTestArchive returns an empty, compliant outbox directory.
func newTestArchive(t *testing.T) *testArchive {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "outbox")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return &testArchive{dir: dir}
}

// grow opens the archive, accepts records until it holds n, each with a
// payload of payloadLen bytes, and closes it.
func (a *testArchive) grow(t *testing.T, n, payloadLen int) {
	t.Helper()
	ctx := context.Background()
	s, err := archive.Open(ctx, a.dir, archive.Options{Database: inspectDB, QuotaEncodedBytes: 1 << 30, MinFreeBytes: -1})
	if err != nil {
		t.Fatalf("open archive: %v", err)
	}
	for ; a.records < n; a.records++ {
		key := event.Key{Database: inspectDB, Incarnation: 1, Event: event.ID{Seq: uint64(a.records/2 + 1), Pos: uint32(a.records % 2)}}
		payload := bytes.Repeat([]byte{byte('a' + a.records%26)}, payloadLen)
		st, err := event.NewStored(key.Event, "order_placed", payload)
		if err != nil {
			t.Fatal(err)
		}
		rec := st.Encode()
		if out, err := s.Accept(ctx, key, rec); err != nil || out != deliverytype.Stored {
			t.Fatalf("accept %d: %v, %v", a.records, out, err)
		}
		a.encoded += archive.Charge(key, rec)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// snapshotDir records the type, mode and content hash of every entry below
// dir. Modification times are deliberately left out: taking the store's lock
// (os.Create on LOCK, an empty file) updates LOCK's mtime and cannot be
// avoided by a command that must hold the lock.
func snapshotDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	snap := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		desc := info.Mode().String()
		if info.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			desc += " " + hex.EncodeToString(sum[:])
		}
		snap[p] = desc
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return snap
}

// waitQuiet waits until an archive held open by a live owner stops
// changing: Pebble deletes the files its Open made obsolete (old OPTIONS,
// manifest and format markers) on a background goroutine after Open
// returns, and those deletions are the owner's, not inspect's.
func waitQuiet(t *testing.T, dir string) {
	t.Helper()
	prev := snapshotDir(t, dir)
	for stable, deadline := 0, time.Now().Add(10*time.Second); stable < 3; {
		if time.Now().After(deadline) {
			t.Fatal("the owner kept changing the archive directory for 10s")
		}
		time.Sleep(20 * time.Millisecond)
		cur := snapshotDir(t, dir)
		if maps.Equal(prev, cur) {
			stable++
		} else {
			stable = 0
		}
		prev = cur
	}
}

func requireSameSnapshot(t *testing.T, before, after map[string]string) {
	t.Helper()
	for p, d := range before {
		if after[p] != d {
			t.Errorf("inspect changed %s: %q -> %q", filepath.Base(p), d, after[p])
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("inspect created %s", filepath.Base(p))
		}
	}
}

// runInspect runs `riffdb --output json outbox archive inspect ARGS` through
// Main, checks that the archive directory is unchanged and that no output
// names the directory, and decodes the envelope.
func runInspect(t *testing.T, dir string, args ...string) (int, inspectEnvelope, string) {
	t.Helper()
	before := snapshotDir(t, dir)
	var stdout, stderr bytes.Buffer
	code := Main(append([]string{"--output", "json", "outbox", "archive", "inspect"}, args...), strings.NewReader(""), &stdout, &stderr)
	requireSameSnapshot(t, before, snapshotDir(t, dir))
	out := stdout.String() + stderr.String()
	if strings.Contains(out, filepath.Dir(dir)) {
		t.Errorf("output reveals the directory path: %s", out)
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr is not empty when it is not a terminal: %q", stderr.String())
	}
	var env inspectEnvelope
	if err := json.Unmarshal(stdout.Bytes(), &env); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout.String())
	}
	requireSchemaValid(t, stdout.Bytes())
	if strings.Count(stdout.String(), "\n") != 1 || env.Schema != Schema || env.Command != "outbox.archive.inspect" {
		t.Errorf("bad envelope: %q", stdout.String())
	}
	return code, env, stdout.String()
}

func inspectArgs(dir string, maxPages int) []string {
	return []string{"--directory", dir, "--database-id", inspectDB.String(), "--max-pages", fmt.Sprint(maxPages)}
}

// requireReport asserts a successful inspection with the given numbers.
func requireReport(t *testing.T, a *testArchive, maxPages, wantPages int, wantIntegrity string) {
	t.Helper()
	code, env, raw := runInspect(t, a.dir, inspectArgs(a.dir, maxPages)...)
	if code != ExitOK || !env.OK || env.Result == nil {
		t.Fatalf("inspect of %d records: exit %d: %s", a.records, code, raw)
	}
	r := env.Result
	if r.RecordCount == nil || *r.RecordCount != int64(a.records) || r.EncodedBytes == nil || *r.EncodedBytes != a.encoded {
		t.Errorf("%d records, %d bytes: got %s", a.records, a.encoded, raw)
	}
	if r.PagesExamined == nil || *r.PagesExamined != wantPages || r.Integrity != wantIntegrity {
		t.Errorf("%d records, --max-pages %d: want %d pages %s, got %s", a.records, maxPages, wantPages, wantIntegrity, raw)
	}
	if r.AllocatedBytes == nil || *r.AllocatedBytes <= 0 {
		t.Errorf("allocated_bytes missing: %s", raw)
	}
	if r.DatabaseBinding != inspectDB.String() || !strings.Contains(r.Format, "pebble/24") {
		t.Errorf("format or binding: %s", raw)
	}
}

func TestInspectCountsPagesAndIntegrity(t *testing.T) {
	t.Parallel()
	a := newTestArchive(t)
	for _, tc := range []struct {
		records   int
		needPages int // pages for a complete scan of 256-record pages
	}{{0, 1}, {1, 1}, {255, 1}, {256, 1}, {257, 2}} {
		a.grow(t, tc.records, 40)
		if tc.needPages == 1 {
			requireReport(t, a, 1, 1, archive.IntegrityVerified)
		} else {
			requireReport(t, a, 1, 1, archive.IntegrityIncomplete)
			requireReport(t, a, tc.needPages, tc.needPages, archive.IntegrityVerified)
		}
		requireReport(t, a, archive.MaxInspectPages, tc.needPages, archive.IntegrityVerified)
	}
}

func TestInspectPagesAreBoundedByBytes(t *testing.T) {
	t.Parallel()
	a := newTestArchive(t)
	const payload = 64 << 10
	a.grow(t, 80, payload)
	charge := a.encoded / 80
	perPage := int(archive.MaxPageBytes / charge) // 63 records of 64 KiB fit in 4 MiB
	if a.encoded <= archive.MaxPageBytes || perPage >= 80 {
		t.Fatalf("test archive too small: %d bytes", a.encoded)
	}
	want := (80 + perPage - 1) / perPage
	requireReport(t, a, 1, 1, archive.IntegrityIncomplete)
	requireReport(t, a, want-1, want-1, archive.IntegrityIncomplete)
	requireReport(t, a, want, want, archive.IntegrityVerified)
	requireReport(t, a, 16, want, archive.IntegrityVerified)
}

// storeFiles returns the store's files whose names end with suffix.
func storeFiles(t *testing.T, dir, suffix string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, archive.StoreDirName, "*"+suffix))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestInspectCorruptSSTable(t *testing.T) {
	t.Parallel()
	a := newTestArchive(t)
	a.grow(t, 300, 20<<10) // > MemTableSize, so records reach sstables
	ssts := storeFiles(t, a.dir, ".sst")
	if len(ssts) == 0 {
		t.Fatal("no sstable to corrupt")
	}
	// Flip one byte inside the first data block of every table of records
	// (each holds at least one 20 KiB record; the metadata keys have a
	// small table of their own, whose damage inspect reports before it
	// reads a page).
	flipped := 0
	for _, p := range ssts {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) < 16<<10 {
			continue
		}
		flipped++
		b[len(b)/8] ^= 0x5a
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if flipped == 0 {
		t.Fatal("no table of records to corrupt")
	}
	code, env, raw := runInspect(t, a.dir, inspectArgs(a.dir, 16)...)
	if code != ExitPublic || env.OK || env.Error == nil || env.Error.Code != "archive_integrity_corrupt" || env.Error.Kind != "public" {
		t.Fatalf("corrupt archive: exit %d: %s", code, raw)
	}
	if env.Result == nil || env.Result.Integrity != archive.IntegrityCorrupt {
		t.Fatalf("corrupt archive: the verdict is not reported: %s", raw)
	}
	inspectJSONGolden(t, "corrupt", raw)
}

// accountingKey is the archive's metadata key of the durable accounting (an
// internal detail of package archive, needed to tamper with it).
var accountingKey = []byte("maccounting")

// rawStore opens the store directly with Pebble, for tampering.
func rawStore(t *testing.T, dir string) *pebble.DB {
	t.Helper()
	db, err := pebble.Open(filepath.Join(dir, archive.StoreDirName), &pebble.Options{
		FormatMajorVersion: archive.FormatMajorVersion, ErrorIfNotExists: true, Logger: testutil.QuietPebbleLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// privatize restores the custody modes after a raw Pebble open created files
// under the test's umask.
func privatize(t *testing.T, dir string) {
	t.Helper()
	for _, p := range storeFiles(t, dir, "") {
		if err := os.Chmod(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func TestInspectAccountingMismatch(t *testing.T) {
	t.Parallel()
	a := newTestArchive(t)
	a.grow(t, 3, 100)
	db := rawStore(t, a.dir)
	old, closer, err := db.Get(accountingKey)
	if err != nil {
		t.Fatalf("the accounting key is not where this test expects it: %v", err)
	}
	old = bytes.Clone(old)
	closer.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	privatize(t, a.dir)
	requireReport(t, a, 1, 1, archive.IntegrityVerified)

	a.grow(t, 4, 100)
	db = rawStore(t, a.dir)
	if err := db.Set(accountingKey, old, pebble.Sync); err != nil { // a valid but stale accounting value
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	privatize(t, a.dir)
	code, env, raw := runInspect(t, a.dir, inspectArgs(a.dir, 1)...)
	if code != ExitPublic || env.Error == nil || env.Error.Code != "archive_integrity_mismatch" {
		t.Fatalf("edited accounting: exit %d: %s", code, raw)
	}
	if env.Result == nil || env.Result.Integrity != archive.IntegrityMismatch || *env.Result.RecordCount != 3 {
		t.Fatalf("edited accounting: want mismatch with the accounting's 3 records: %s", raw)
	}
	inspectJSONGolden(t, "mismatch", raw)
}

func requireRefusal(t *testing.T, dir string, wantCode int, wantErr string, args ...string) inspectEnvelope {
	t.Helper()
	code, env, raw := runInspect(t, dir, args...)
	if code != wantCode || env.OK || env.Error == nil || env.Error.Code != wantErr {
		t.Fatalf("want exit %d %s, got exit %d: %s", wantCode, wantErr, code, raw)
	}
	return env
}

func TestInspectRefusesWrongDatabase(t *testing.T) {
	t.Parallel()
	a := newTestArchive(t)
	a.grow(t, 1, 10)
	other := inspectDB
	other[15] ^= 0xff
	env := requireRefusal(t, a.dir, ExitPublic, "archive_binding_mismatch",
		"--directory", a.dir, "--database-id", other.String())
	if env.Result == nil || env.Result.DatabaseBinding != inspectDB.String() {
		t.Errorf("the actual binding is not reported")
	}
	_, _, raw := runInspect(t, a.dir, "--directory", a.dir, "--database-id", other.String())
	inspectJSONGolden(t, "binding_mismatch", raw)
}

func TestInspectRefusesHeldArchive(t *testing.T) {
	t.Parallel()
	a := newTestArchive(t)
	a.grow(t, 1, 10)
	s, err := archive.Open(context.Background(), a.dir, archive.Options{Database: inspectDB, QuotaEncodedBytes: 1 << 20, MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, a.dir)
	env := requireRefusal(t, a.dir, ExitLocal, "archive_busy", inspectArgs(a.dir, 1)...)
	if !strings.Contains(env.Error.Message, "stop the owning server") {
		t.Errorf("message does not tell the operator what to do: %q", env.Error.Message)
	}
	_, _, raw := runInspect(t, a.dir, inspectArgs(a.dir, 1)...)
	inspectJSONGolden(t, "busy", raw)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	requireReport(t, a, 1, 1, archive.IntegrityVerified)
}

func TestInspectRefusesArchiveHeldByAnotherProcess(t *testing.T) {
	t.Parallel()
	a := newTestArchive(t)
	a.grow(t, 1, 10)
	cmd := exec.Command(os.Args[0], "-test.run=^TestInspectHelperHoldArchive$")
	cmd.Env = append(os.Environ(), "RIFFDB_INSPECT_HOLD="+a.dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := false
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if sc.Text() == "HOLDING" {
			ready = true
			break
		}
	}
	if !ready {
		stdin.Close()
		_ = cmd.Wait()
		t.Fatal("the helper process did not open the archive")
	}
	waitQuiet(t, a.dir)
	requireRefusal(t, a.dir, ExitLocal, "archive_busy", inspectArgs(a.dir, 1)...)
	stdin.Close()
	go io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	requireReport(t, a, 1, 1, archive.IntegrityVerified)
}

// TestInspectHelperHoldArchive runs in a child process: it holds the archive
// open until its stdin closes.
func TestInspectHelperHoldArchive(t *testing.T) {
	dir := os.Getenv("RIFFDB_INSPECT_HOLD")
	if dir == "" {
		t.Skip("helper process only")
	}
	// Like the server: without umask 077 Pebble's new files are 0644 for an
	// instant before the custody wrapper narrows them, and a concurrent
	// audit (the parent's inspect) could see that.
	unix.Umask(0o077)
	s, err := archive.Open(context.Background(), dir, archive.Options{Database: inspectDB, QuotaEncodedBytes: 1 << 20, MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("HOLDING")
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestInspectRefusesMissingArchive(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	absent := filepath.Join(base, "absent")
	requireRefusal(t, absent, ExitLocal, "archive_not_found", inspectArgs(absent, 1)...)
	_, _, raw := runInspect(t, absent, inspectArgs(absent, 1)...)
	inspectJSONGolden(t, "not_found", raw)
	if _, err := os.Lstat(absent); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("inspect created the directory: %v", err)
	}
	empty := filepath.Join(base, "empty")
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	requireRefusal(t, empty, ExitLocal, "archive_not_found", inspectArgs(empty, 1)...)
	if names, _ := os.ReadDir(empty); len(names) != 0 {
		t.Fatalf("inspect created %v", names)
	}
}

func TestInspectRefusesCustodyViolation(t *testing.T) {
	t.Parallel()
	a := newTestArchive(t)
	a.grow(t, 1, 10)
	if err := os.Chmod(a.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	env := requireRefusal(t, a.dir, ExitLocal, "archive_custody", inspectArgs(a.dir, 1)...)
	if !strings.Contains(env.Error.Message, "mode is 0755") {
		t.Errorf("custody message does not say what is wrong: %q", env.Error.Message)
	}
}

func TestInspectUsageErrors(t *testing.T) {
	t.Parallel()
	a := newTestArchive(t)
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--directory", a.dir, "--database-id", "xyz"}, "--database-id"},
		{[]string{"--directory", a.dir, "--database-id", strings.Repeat("g", 32)}, "--database-id"},
		{[]string{"--directory", a.dir, "--database-id", inspectDB.String()[:31]}, "--database-id"},
		{[]string{"--directory", a.dir}, "--database-id"},
		{[]string{"--directory", a.dir, "--database-id", inspectDB.String(), "--max-pages", "0"}, "--max-pages"},
		{[]string{"--directory", a.dir, "--database-id", inspectDB.String(), "--max-pages", "257"}, "--max-pages"},
		{[]string{"--directory", a.dir, "--database-id", inspectDB.String(), "--max-pages", "abc"}, "--max-pages"},
		{[]string{"--database-id", inspectDB.String()}, "--directory"},
		{[]string{"--directory", "outbox", "--database-id", inspectDB.String()}, "--directory"},
	} {
		env := requireRefusal(t, a.dir, ExitLocal, "usage", tc.args...)
		if !strings.Contains(env.Error.Message, tc.flag) {
			t.Errorf("%v: message %q does not name %s", tc.args, env.Error.Message, tc.flag)
		}
	}
	_, _, raw := runInspect(t, a.dir, "--directory", a.dir, "--database-id", inspectDB.String(), "--max-pages", "/etc/passwd")
	inspectJSONGolden(t, "usage", raw)
	if names, _ := os.ReadDir(a.dir); len(names) != 0 {
		t.Fatalf("a refused inspect created %v", names)
	}
}

func TestInspectErrorClassification(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		code string
		exit int
	}{
		{archive.ErrUnsupportedPlatform, "unsupported_platform", ExitLocal},
		{fmt.Errorf("x: %w", archive.ErrNotFound), "archive_not_found", ExitLocal},
		{archive.ErrBusy, "archive_busy", ExitLocal},
		{archive.ErrIncompatibleFormat, "archive_incompatible_format", ExitPublic},
		{archive.ErrCorrupt, "archive_integrity_corrupt", ExitPublic},
		{fmt.Errorf("pebble: file 000010: block 1/2: %w", pebble.ErrCorruption), "archive_integrity_corrupt", ExitPublic},
		{fmt.Errorf("%w: x", archive.ErrRefused), "archive_refused", ExitLocal},
		{&os.PathError{Op: "open", Path: "/secret/dir", Err: syscall.EACCES}, "archive_refused", ExitLocal},
		{&os.PathError{Op: "open", Path: "/secret/dir", Err: syscall.EIO}, "archive_unavailable", ExitLocal},
		{fmt.Errorf("pebble: file /secret/dir/000008.sst: %w", fmt.Errorf("%w: a store file has 2 hard links", archive.ErrCustody)),
			"archive_custody", ExitLocal},
	} {
		e := inspectError(tc.err, "/secret/dir", archive.InspectReport{}, archive.InspectOptions{})
		if e.Code != tc.code || e.Kind.ExitCode() != tc.exit {
			t.Errorf("%v: got %s (exit %d), want %s (exit %d)", tc.err, e.Code, e.Kind.ExitCode(), tc.code, tc.exit)
		}
		if strings.Contains(e.Message, "/secret") || strings.Contains(e.Message, "000008") {
			t.Errorf("%v: message %q reveals a path", tc.err, e.Message)
		}
	}
	if e := inspectError(errors.New("mentions /secret/dir"), "/secret/dir", archive.InspectReport{}, archive.InspectOptions{}); strings.Contains(e.Message, "secret") {
		t.Errorf("a message naming the directory was not replaced: %q", e.Message)
	}
}

func TestInspectTextGolden(t *testing.T) {
	t.Parallel()
	a := newTestArchive(t)
	a.grow(t, 2, 16)
	var stdout, stderr bytes.Buffer
	code := Main([]string{"outbox", "archive", "inspect", "--directory", a.dir, "--database-id", inspectDB.String()},
		strings.NewReader(""), &stdout, &stderr)
	if code != ExitOK || stderr.Len() != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	got := regexp.MustCompile(`(?m)^(allocated bytes: +)\d+$`).ReplaceAllString(stdout.String(), "${1}<allocated>")
	golden := filepath.Join("testdata", "inspect", "verified.golden")
	if *updateInspectGolden {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("text output differs from %s:\n%s\nwant:\n%s", golden, got, want)
	}
}

func TestInspectProgressOnlyOnTerminal(t *testing.T) {
	t.Parallel()
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) || isTerminal(&bytes.Buffer{}) {
		t.Fatal("a regular file or a buffer is not a terminal")
	}
	master, slave, err := testutil.OpenPTY()
	if err != nil {
		t.Skipf("no pseudo-terminal available: %v", err)
	}
	defer master.Close()
	defer slave.Close()
	if !isTerminal(slave) {
		t.Fatal("a pseudo-terminal is a terminal")
	}
}

// TestInspectProgressLineOnTerminal runs a text-mode inspection with stderr
// on a pseudo-terminal and a clock that makes every page late enough for an
// update: the line shows the numbers and is erased before the command ends.
// The same run in JSON mode prints nothing.
// Not parallel: it replaces inspectClock.
func TestInspectProgressLineOnTerminal(t *testing.T) {
	master, slave, err := testutil.OpenPTY()
	if err != nil {
		t.Skipf("no pseudo-terminal available: %v", err)
	}
	defer master.Close()
	defer slave.Close()
	a := newTestArchive(t)
	a.grow(t, 300, 10)
	clock := time.Unix(1e9, 0)
	inspectClock = func() time.Time { clock = clock.Add(time.Second); return clock }
	defer func() { inspectClock = time.Now }()
	// JSON mode prints no progress even when stderr is a terminal.
	var stdout bytes.Buffer
	code := Main(append([]string{"--output", "json", "outbox", "archive", "inspect"}, inspectArgs(a.dir, 2)...),
		strings.NewReader(""), &stdout, slave)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stdout.String())
	}
	if got := readPTYUntilMark(t, master, slave); got != "" {
		t.Fatalf("JSON mode printed progress on the terminal: %q", got)
	}
	stdout.Reset()
	code = Main(append([]string{"outbox", "archive", "inspect"}, inspectArgs(a.dir, 2)...), strings.NewReader(""), &stdout, slave)
	if code != ExitOK || !strings.Contains(stdout.String(), "integrity:        verified") {
		t.Fatalf("exit %d: %s", code, stdout.String())
	}
	got := readPTYUntilMark(t, master, slave)
	if !strings.Contains(got, "\r\x1b[Kinspect: 256 of 300 records") || !strings.Contains(got, "inspect: 300 of 300 records") {
		t.Errorf("progress line %q lacks the page updates", got)
	}
	if !strings.HasSuffix(got, "\r\x1b[K") {
		t.Errorf("progress line %q is not erased at the end", got)
	}
}

// readPTYUntilMark writes a mark to the terminal's slave side and returns
// everything the master side read before it.
func readPTYUntilMark(t *testing.T, master, slave *os.File) string {
	t.Helper()
	if _, err := slave.WriteString(testutil.PTYMark); err != nil {
		t.Fatal(err)
	}
	return testutil.ReadUntilMark(master)
}

// fakeWriter records each Write separately.
type fakeWriter struct{ writes []string }

func (w *fakeWriter) Write(p []byte) (int, error) {
	w.writes = append(w.writes, string(p))
	return len(p), nil
}

func TestInspectProgressThrottle(t *testing.T) {
	t.Parallel()
	base := time.Unix(1e9, 0)
	now := base
	w := &fakeWriter{}
	p := newProgressLine(w, func() time.Time { return now }, 10)
	p.clear()
	page := 5 // a later step: the pages and records are cumulative
	at := func(d time.Duration) {
		now = base.Add(d)
		page++
		p.update(page, int64(page)*100, int64(page)*1000, 100000)
	}
	at(0)                       // too early: short inspections stay silent
	at(progressInterval - 1)    // still too early
	at(progressInterval)        // shown
	at(progressInterval + 100)  // throttled
	at(2*progressInterval - 1)  // throttled
	at(2 * progressInterval)    // shown
	at(10 * progressInterval)   // shown
	at(10*progressInterval + 1) // throttled
	if len(w.writes) != 3 {
		t.Fatalf("want 3 updates, got %q", w.writes)
	}
	for i, want := range []string{
		// 2 pages (200 records) in 250ms since the step's first page; 10-3
		// pages left; 99,200 of the 100,000 accounted records at 800/s.
		"inspect: 800 of 100000 records, 7.8 KiB, 800 records/s, about 2m4s left in all, this step ends within 1s",
		// 5 pages in 500ms; 10-6 pages left.
		"inspect: 1100 of 100000 records, 10.7 KiB, 1000 records/s, about 1m39s left in all, this step ends within 0s",
		// 6 pages in 2.5s; 10-7 pages left.
		"inspect: 1200 of 100000 records, 11.7 KiB, 240 records/s, about 6m52s left in all, this step ends within 1s",
	} {
		if w.writes[i] != "\r\x1b[K"+want {
			t.Errorf("update %d is %q, want the line started again with %q", i, w.writes[i], want)
		}
	}
	p.clear()
	p.clear()
	if len(w.writes) != 4 || w.writes[3] != "\r\x1b[K" {
		t.Errorf("clear: %q, want one erase of the shown line", w.writes)
	}
}

func TestInspectProgressFormat(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		records, bytes, accounted int64
		rate                      float64
		left, eta                 time.Duration
		want                      string
	}{
		{0, 0, 10, -1, -1, -1, "inspect: 0 of 10 records, 0 B"},
		{1000, 2048, 3000, 500, -1, 4 * time.Second, "inspect: 1000 of 3000 records, 2.0 KiB, 500 records/s, about 4s left in all"},
		{1000, 5 << 20, 3000, 500, 4 * time.Second, 4 * time.Second, "inspect: 1000 of 3000 records, 5.0 MiB, 500 records/s, about 4s left in all, this step ends within 4s"},
		{3000, 3 << 30, 3000, 1500.4, 0, 0, "inspect: 3000 of 3000 records, 3.0 GiB, 1500 records/s, about 0s left in all, this step ends within 0s"},
		{65536, 1536 << 20, 1000000, 2184.5, 427700 * time.Millisecond, 7*time.Minute + 7*time.Second, "inspect: 65536 of 1000000 records, 1.5 GiB, 2184 records/s, about 7m7s left in all, this step ends within 7m8s"},
		{1, 5 << 40, 1, 0, time.Hour, -1, "inspect: 1 of 1 records, 5.0 TiB, 0 records/s, this step ends within 1h0m0s"},
	} {
		if got := formatProgress(tc.records, tc.bytes, tc.accounted, tc.rate, tc.left, tc.eta); got != tc.want {
			t.Errorf("formatProgress(%d, %d, %d, %v, %v, %v) = %q, want %q", tc.records, tc.bytes, tc.accounted, tc.rate, tc.left, tc.eta, got, tc.want)
		}
	}
}

// runText runs the CLI in text mode and returns the exit code, stdout and
// stderr.
func runText(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := Main(args, strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestFlagErrorsDoNotEchoValues covers every command: a flag value that
// does not parse, or an argument a command does not take, is refused
// without repeating it (it may be a path or a secret), naming the flag
// instead.
func TestFlagErrorsDoNotEchoValues(t *testing.T) {
	t.Parallel()
	const secret = "/etc/passwd"
	for _, tc := range []struct {
		args []string
		name string // what the message must name
	}{
		{[]string{"outbox", "archive", "inspect", "--max-pages", secret}, "--max-pages"},
		{[]string{"outbox", "archive", "inspect", "--max-pages=" + secret}, "--max-pages"},
		{[]string{"outbox", "archive", "inspect", "--" + secret}, "unknown flag"},
		{[]string{"outbox", "archive", "inspect", "-x" + secret}, "unknown flag"},
		{[]string{"outbox", "archive", "inspect", "---" + secret}, "flag"},
		{[]string{"--output", secret, "outbox", "archive", "inspect"}, "--output"},
		{[]string{"loadtest", "-c", secret}, "-c"},
		{[]string{"loadtest", "--duration", secret}, "--duration"},
		{[]string{"outbox", "archive", "inspect", "--max-pages"}, "--max-pages"},
		{[]string{"outbox", "archive", "inspect", secret}, "argument"},
		{[]string{"outbox", secret}, "argument"},
		{[]string{secret}, "argument"},
		{[]string{"capability", "revoke", secret, secret}, "argument"},
	} {
		for _, mode := range []string{"text", "json"} {
			args := tc.args
			if mode == "json" {
				args = append([]string{"--output", "json"}, args...)
			}
			code, stdout, stderr := runText(args...)
			if code != ExitLocal {
				t.Errorf("%v: exit %d, want %d", args, code, ExitLocal)
			}
			out := stdout + stderr
			if strings.Contains(out, "passwd") {
				t.Errorf("%v: the output echoes the value given: %q", args, out)
			}
			if !strings.Contains(out, tc.name) {
				t.Errorf("%v: the output does not name %s: %q", args, tc.name, out)
			}
		}
	}
}

// TestInspectDirectoryMustBeNormalized refuses the forms the
// configuration refuses, without echoing them.
func TestInspectDirectoryMustBeNormalized(t *testing.T) {
	t.Parallel()
	a := newTestArchive(t)
	a.grow(t, 1, 10)
	for _, d := range []string{a.dir + "/", a.dir + "/.", filepath.Dir(a.dir) + "/../" + filepath.Base(filepath.Dir(a.dir)) + "/outbox",
		"/" + a.dir, strings.Replace(a.dir, "/outbox", "//outbox", 1), "outbox", "./outbox", a.dir + "\x00"} {
		env := requireRefusal(t, a.dir, ExitLocal, "usage", inspectArgs(d, 1)...)
		if !strings.Contains(env.Error.Message, "--directory") {
			t.Errorf("%q: message %q does not name --directory", d, env.Error.Message)
		}
	}
	requireReport(t, a, 1, 1, archive.IntegrityVerified)
}

// TestInspectDirectoryRuleAgreesWithConfig checks the --directory rule
// against the configuration's own rule for an outbox directory: one path
// form is accepted by both or refused by both.
func TestInspectDirectoryRuleAgreesWithConfig(t *testing.T) {
	t.Parallel()
	for _, p := range []string{
		"/srv/ob", "/srv/ob/", "/srv//ob", "//srv/ob", "/srv/./ob", "/srv/../srv/ob", "/srv/ob/..", "/srv/ob/.",
		"srv/ob", "./srv/ob", "", ".", "/srv/ob\x00x", "/srv/o b", "/srv/ob.d", "/srv/..ob", "/srv/ob...",
	} {
		cliErr := checkDirectoryFlag(p)
		toml := "[server]\ncredential_path = \"/cfgtest/cred\"\n[database]\npath = \"/cfgtest/db\"\ncontract = \"/cfgtest/c.toml\"\n" +
			"[maintenance.outbox]\nkind = \"durable_local\"\nquota_encoded_bytes = 1\ndirectory = \"" +
			strings.ReplaceAll(p, "\x00", `\u0000`) + "\"\n"
		_, cfgErr := config.Parse([]byte(toml), nil, config.Overrides{})
		cfgRefused := cfgErr != nil && strings.Contains(cfgErr.Error(), "maintenance.outbox.directory")
		if cfgErr != nil && !cfgRefused {
			t.Fatalf("%q: the configuration refused something else: %v", p, cfgErr)
		}
		if (cliErr != nil) != cfgRefused {
			t.Errorf("%q: --directory refused=%v (%v), configuration refused=%v (%v)", p, cliErr != nil, cliErr, cfgRefused, cfgErr)
		}
	}
}

// TestInspectTextFailureLayout: in text mode a failing inspection prints
// the result in the text layout (never JSON) and one error line on stderr.
func TestInspectTextFailureLayout(t *testing.T) {
	t.Parallel()
	a := newTestArchive(t)
	a.grow(t, 1, 10)
	other := inspectDB
	other[15] ^= 0xff
	code, stdout, stderr := runText("outbox", "archive", "inspect", "--directory", a.dir, "--database-id", other.String())
	if code != ExitPublic {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	if strings.Contains(stdout, "{") || !strings.Contains(stdout, "database binding: "+inspectDB.String()+"\n") {
		t.Errorf("stdout is not the text layout:\n%s", stdout)
	}
	if strings.Contains(stdout, "integrity:") {
		t.Errorf("a binding mismatch has no integrity verdict, but stdout shows one:\n%s", stdout)
	}
	if !strings.HasPrefix(stderr, "riffdb: ") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("stderr is not one error line: %q", stderr)
	}
}

// schemaBase is the $id prefix of the schemas under docs/.
const schemaBase = "https://github.com/riffdb/riffdb/docs/"

// envelopeSchema compiles docs/envelope.schema.json, which refers to
// docs/inspect-result.schema.json.
var envelopeSchema = sync.OnceValues(func() (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	for _, name := range []string{"envelope.schema.json", "inspect-result.schema.json"} {
		f, err := os.Open(filepath.Join("..", "docs", name))
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if err := c.AddResource(schemaBase+name, doc); err != nil {
			return nil, err
		}
	}
	return c.Compile(schemaBase + "envelope.schema.json")
})

// schemaErr validates one JSON output against the envelope schema.
func schemaErr(t *testing.T, out []byte) error {
	t.Helper()
	sch, err := envelopeSchema()
	if err != nil {
		t.Fatalf("compiling the schemas: %v", err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(out))
	if err != nil {
		return err
	}
	return sch.Validate(v)
}

func requireSchemaValid(t *testing.T, out []byte) {
	t.Helper()
	if err := schemaErr(t, out); err != nil {
		t.Errorf("output does not follow docs/envelope.schema.json: %v\n%s", err, out)
	}
}

// TestGoldenOutputsMatchSchemas checks every JSON golden output under
// testdata against the documented schemas, and that the schemas refuse
// what the contract forbids.
func TestGoldenOutputsMatchSchemas(t *testing.T) {
	t.Parallel()
	var n int
	err := filepath.WalkDir("testdata", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".json") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		n++
		if err := schemaErr(t, b); err != nil {
			t.Errorf("%s does not follow the schema: %v", p, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Fatalf("only %d JSON golden outputs found", n)
	}
	const ok = `{"schema":"riffdb.cli.output/v1","command":"outbox.archive.inspect","ok":true,"result":`
	const good = `"format":"riffarch/2 pebble/24","database_binding":"01932a71018170018101010101010101","record_count":2,` +
		`"encoded_bytes":238,"allocated_bytes":0,"pages_examined":1,"steps":1,"total_records":2,"total_bytes":238`
	if err := schemaErr(t, []byte(ok+`{`+good+`,"integrity":"verified"}}`)); err != nil {
		t.Fatalf("a verified result is refused: %v", err)
	}
	for _, bad := range []string{
		ok + `{` + good + `,"integrity":""}}`,
		ok + `{` + good + `,"integrity":"fine"}}`,
		ok + `{` + good + `,"integrity":"incomplete"}}`,
		ok + `{` + good + `,"integrity":"verified","next_cursor":"AAAA"}}`,
		ok + `{` + good + `,"integrity":"incomplete","next_cursor":""}}`,
		ok + `{` + good + `,"integrity":"verified","missing_records":3}}`,
		ok + `{` + good + `,"integrity":"verified","extra":1}}`,
		ok + `{"format":"","allocated_bytes":0,"pages_examined":0,"integrity":"corrupt"}}`,
		ok + `{"allocated_bytes":0,"pages_examined":0}}`,
		`{"schema":"riffdb.cli.output/v1","command":"outbox.archive.inspect","ok":false}`,
		`{"schema":"riffdb.cli.output/v1","command":"outbox.archive.inspect","ok":false,"error":{"kind":"odd","code":"x","message":"m"}}`,
		`{"schema":"riffdb.cli.output/v2","command":"config.check","ok":true,"result":{}}`,
	} {
		if schemaErr(t, []byte(bad)) == nil {
			t.Errorf("the schema accepts %s", bad)
		}
	}
}

// inspectJSONGolden compares one JSON inspect output with
// testdata/inspect/NAME.golden.json, after replacing what differs from run
// to run (the allocated bytes, a cursor bound to the archive's identity).
func inspectJSONGolden(t *testing.T, name, out string) {
	t.Helper()
	out = regexp.MustCompile(`"allocated_bytes":\d+`).ReplaceAllString(out, `"allocated_bytes":0`)
	out = regexp.MustCompile(`"next_cursor":"[A-Za-z0-9_-]+"`).ReplaceAllString(out, `"next_cursor":"CURSOR"`)
	golden := filepath.Join("testdata", "inspect", name+".golden.json")
	if *updateInspectGolden {
		if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if out != string(want) {
		t.Errorf("output differs from %s:\n got %s\nwant %s", golden, out, want)
	}
}

// step runs one inspect step in JSON mode.
func step(t *testing.T, dir string, maxPages int, after string, extra ...string) (int, inspectEnvelope, string) {
	t.Helper()
	args := inspectArgs(dir, maxPages)
	if after != "" {
		args = append(args, "--after", after)
	}
	return runInspect(t, dir, append(args, extra...)...)
}

// TestInspectStepsMatchOneScan reconciles an archive one page a step,
// each step resuming from the previous next_cursor: the totals grow step by
// step, and the last step's totals and verdict equal one scan's.
func TestInspectStepsMatchOneScan(t *testing.T) {
	t.Parallel()
	a := newTestArchive(t)
	a.grow(t, 700, 30)
	code, one, raw := step(t, a.dir, 256, "", "--count-incarnations")
	if code != ExitOK || one.Result.Integrity != archive.IntegrityVerified || one.Result.Steps != 1 {
		t.Fatalf("one scan: exit %d: %s", code, raw)
	}
	inspectJSONGolden(t, "counted", raw)
	var cursor string
	for i := 1; ; i++ {
		extra := []string{}
		if i == 1 {
			extra = append(extra, "--count-incarnations")
		}
		code, env, raw := step(t, a.dir, 1, cursor, extra...)
		if code != ExitOK || env.Result == nil {
			t.Fatalf("step %d: exit %d: %s", i, code, raw)
		}
		r := env.Result
		if r.Steps != i || *r.PagesExamined != 1 || *r.TotalRecords != min(int64(i*archive.MaxPageRecords), 700) {
			t.Fatalf("step %d: %s", i, raw)
		}
		if i == 1 {
			inspectJSONGolden(t, "incomplete", raw)
		}
		if r.Integrity == archive.IntegrityIncomplete {
			if r.NextCursor == "" || r.NextCursor == cursor {
				t.Fatalf("step %d: no new cursor: %s", i, raw)
			}
			cursor = r.NextCursor
			continue
		}
		inspectJSONGolden(t, "verified_steps", raw)
		if i != 3 || r.Integrity != archive.IntegrityVerified || *r.TotalRecords != *one.Result.TotalRecords ||
			*r.TotalBytes != *one.Result.TotalBytes || *r.TotalBytes != a.encoded || len(r.Incarnations) != 1 ||
			r.Incarnations[0] != one.Result.Incarnations[0] || r.Incarnations[0].Records != 700 {
			t.Fatalf("step %d: %s, one scan: %+v", i, raw, *one.Result)
		}
		break
	}
}

// TestInspectTextIncompleteHint: text mode prints the cursor and the exact
// command of the next step, which runs it.
func TestInspectTextIncompleteHint(t *testing.T) {
	t.Parallel()
	a := newTestArchive(t)
	a.grow(t, 300, 10)
	code, stdout, stderr := runText(append([]string{"outbox", "archive", "inspect"}, inspectArgs(a.dir, 1)...)...)
	if code != ExitOK || stderr != "" {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	m := regexp.MustCompile(`(?m)^next cursor: +([A-Za-z0-9_-]+)\nto continue, run:\n  (riffdb .*)\n\z`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no resume hint:\n%s", stdout)
	}
	want := "riffdb outbox archive inspect --directory " + a.dir + " --database-id " + inspectDB.String() +
		" --max-pages 1 --after " + m[1]
	if m[2] != want {
		t.Fatalf("hint %q, want %q", m[2], want)
	}
	code, stdout, stderr = runText(strings.Fields(m[2])[1:]...)
	if code != ExitOK || !strings.Contains(stdout, "integrity:        verified\n") || !strings.Contains(stdout, "steps:            2\n") {
		t.Fatalf("the hinted command: exit %d: %s %s", code, stdout, stderr)
	}
	if q := shellQuote("/a b/it's"); q != `'/a b/it'\''s'` {
		t.Errorf("shellQuote: %s", q)
	}
}

// TestInspectRefusesForeignAndDamagedCursors: a cursor resumes only the
// scan of the archive that issued it; the refusal never repeats it.
func TestInspectRefusesForeignAndDamagedCursors(t *testing.T) {
	t.Parallel()
	a, b := newTestArchive(t), newTestArchive(t)
	a.grow(t, 300, 10)
	b.grow(t, 300, 10) // the same database and the same records
	_, env, _ := step(t, a.dir, 1, "")
	cursor := env.Result.NextCursor
	flipped := []byte(cursor)
	flipped[len(flipped)/2] ^= 1
	for _, bad := range []string{cursor, string(flipped), cursor[:len(cursor)-1], "not-a-cursor!", "/etc/passwd"} {
		env := requireRefusal(t, b.dir, ExitLocal, "invalid_cursor", append(inspectArgs(b.dir, 1), "--after", bad)...)
		if strings.Contains(env.Error.Message, bad) || strings.Contains(env.Error.Message, cursor[:8]) || env.Result != nil {
			t.Errorf("%q: the refusal repeats the cursor or reports a result: %+v", bad, env)
		}
	}
	_, _, raw := runInspect(t, b.dir, append(inspectArgs(b.dir, 1), "--after", cursor)...)
	inspectJSONGolden(t, "invalid_cursor", raw)
	requireRefusal(t, b.dir, ExitLocal, "invalid_cursor", append(inspectArgs(b.dir, 1), "--after", "")...)
	// The cursor still works where it came from.
	if code, env, raw := step(t, a.dir, 1, cursor); code != ExitOK || env.Result.Integrity != archive.IntegrityVerified {
		t.Fatalf("own cursor: exit %d: %s", code, raw)
	}
	// Counting is decided at the first step.
	env = requireRefusal(t, a.dir, ExitLocal, "usage", append(inspectArgs(a.dir, 1), "--after", cursor, "--count-incarnations")...)
	if !strings.Contains(env.Error.Message, "--count-incarnations") {
		t.Errorf("message %q does not name --count-incarnations", env.Error.Message)
	}
}

// TestInspectChangedBetweenSteps: records archived between two steps make
// the next step say "changed" (exit 1), with no cursor.
func TestInspectChangedBetweenSteps(t *testing.T) {
	t.Parallel()
	a := newTestArchive(t)
	a.grow(t, 300, 10)
	_, env, _ := step(t, a.dir, 1, "")
	a.grow(t, 301, 10)
	code, env, raw := step(t, a.dir, 1, env.Result.NextCursor)
	if code != ExitPublic || env.Error == nil || env.Error.Code != "archive_integrity_changed" || env.Result == nil ||
		env.Result.Integrity != archive.IntegrityChanged || env.Result.NextCursor != "" {
		t.Fatalf("exit %d: %s", code, raw)
	}
	inspectJSONGolden(t, "changed", raw)
	code, stdout, stderr := runText(append([]string{"outbox", "archive", "inspect"}, inspectArgs(a.dir, 1)...)...)
	if code != ExitOK || !strings.Contains(stdout, "integrity:        incomplete") || stderr != "" {
		t.Fatalf("a new scan: exit %d: %s %s", code, stdout, stderr)
	}
}

// TestInspectRefusesStoreWithoutLock: a store whose LOCK file is missing is
// refused, and inspect does not create it.
func TestInspectRefusesStoreWithoutLock(t *testing.T) {
	t.Parallel()
	a := newTestArchive(t)
	a.grow(t, 1, 10)
	lock := filepath.Join(a.dir, archive.StoreDirName, "LOCK")
	if err := os.Remove(lock); err != nil {
		t.Fatal(err)
	}
	env := requireRefusal(t, a.dir, ExitLocal, "archive_refused", inspectArgs(a.dir, 1)...)
	if !strings.Contains(env.Error.Message, "lock file") || strings.HasPrefix(env.Error.Message, "archive:") {
		t.Errorf("message %q does not say the lock file is missing", env.Error.Message)
	}
	if _, err := os.Lstat(lock); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("inspect created LOCK: %v", err)
	}
}
