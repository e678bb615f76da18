package e2e_test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/archive"
)

// storeBytes lists every entry below dir with its size, mode, modification
// time, inode and the SHA-256 of its contents: two listings are equal only
// when nothing in the tree was created, removed, written or touched.
func storeBytes(t *testing.T, dir string) string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(treeListing(t, dir)), "\n")
	for i, l := range lines {
		rel := strings.Fields(l)[0]
		p := filepath.Join(dir, rel)
		if st, err := os.Lstat(p); err == nil && st.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			must(t, err)
			lines[i] = fmt.Sprintf("%s sha256=%x", l, sha256.Sum256(b))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// walName is the name of a Pebble WAL.
var walName = regexp.MustCompile(`^\d+\.log$`)

// newestWAL returns the path and number of the newest WAL of the store in
// dir.
func newestWAL(t *testing.T, dir string) (string, uint32) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	must(t, err)
	var name string
	var num uint32
	for _, e := range entries {
		var n uint32
		if !walName.MatchString(e.Name()) {
			continue
		}
		fmt.Sscanf(e.Name(), "%d.log", &n)
		if name == "" || n > num {
			name, num = e.Name(), n
		}
	}
	if name == "" {
		t.Fatal("the archive store holds no WAL")
	}
	return filepath.Join(dir, name), num
}

// TestInspectWithTheDatabaseAfterACrash: the server is SIGKILLed after
// delivering, and the archive's WAL loses its tail (its records were never
// flushed: a crash of the machine, or damage). The archive's own floor file
// is as of its creation, so only the database's record of completed
// deliveries can tell. `inspect --database-path` says "mismatch" with the
// missing records, exits 1, and changes nothing in either store; the server
// then stops delivery with archive_lost_records for as many records.
func TestInspectWithTheDatabaseAfterACrash(t *testing.T) {
	const commands = 400
	e := newEnv(t, envOpts{outbox: true})
	token := e.token([]string{"execute_commands", "read_statistics", "read_health"}, "")
	p := e.start()
	runOrders(t, p, token, 0, commands, false)
	id := p.stats(token).Databases[0].DatabaseID
	p.kill()

	storeDir := filepath.Join(e.outbox, archive.StoreDirName)
	wal, num := newestWAL(t, storeDir)
	data, err := os.ReadFile(wal)
	must(t, err)
	live := dmWALLiveEnd(data, num)
	if live < 2 {
		t.Fatalf("the archive's WAL holds %d bytes of its own records", live)
	}
	must(t, os.Truncate(wal, live/2))

	// Without the database, the archive is consistent with itself and with
	// its floor file (written at its creation): the crash is invisible.
	r, res := inspectAt(t, e.outbox, id, "--max-pages", "256")
	t.Logf("inspect without --database-path: exit %d, integrity %s, %d records", r.Exit, res.Integrity, res.RecordCount)

	dbBefore, obBefore := storeBytes(t, e.dbPath), storeBytes(t, e.outbox)
	r, res = inspectAt(t, e.outbox, id, "--max-pages", "256", "--database-path", e.dbPath)
	var missing struct {
		MissingRecords int64 `json:"missing_records"`
	}
	if r.Result != nil {
		must(t, json.Unmarshal(r.Result, &missing))
	}
	if r.Exit != 1 || r.Error == nil || r.Error.Code != "archive_integrity_mismatch" || res.Integrity != "mismatch" ||
		missing.MissingRecords < 1 || res.RecordCount+missing.MissingRecords > commands {
		t.Fatalf("inspect --database-path after the crash: exit %d, error %+v, integrity %q, %d records, %d missing; "+
			"want mismatch, exit 1, with the missing records", r.Exit, r.Error, res.Integrity, res.RecordCount, missing.MissingRecords)
	}
	if !strings.Contains(r.Error.Message, "recorded as delivered") {
		t.Errorf("the message does not say which anchor proved the loss: %q", r.Error.Message)
	}
	if after := storeBytes(t, e.dbPath); after != dbBefore {
		t.Errorf("inspect changed the database:\nbefore:\n%s\nafter:\n%s", dbBefore, after)
	}
	if after := storeBytes(t, e.outbox); after != obBefore {
		t.Errorf("inspect changed the archive:\nbefore:\n%s\nafter:\n%s", obBefore, after)
	}
	t.Logf("inspect --database-path: %d records, %d missing", res.RecordCount, missing.MissingRecords)

	// The server finds the same loss through the same anchor.
	p = e.start()
	p.waitHealth(t, token, "stopped", "archive_lost_records")
	if h := p.health(token); h.MissingRecords != missing.MissingRecords {
		t.Errorf("the server says %d records are missing, inspect %d", h.MissingRecords, missing.MissingRecords)
	}
	p.stop()
}

// TestInspectDatabasePathRefusals: --database-path follows the path rule
// of --directory, names the database's identity when it is another
// database's, and refuses while a server holds the database; no message
// names a path, and nothing is created.
func TestInspectDatabasePathRefusals(t *testing.T) {
	e := newEnv(t, envOpts{outbox: true})
	token := e.token([]string{"execute_commands", "read_statistics"}, "")
	p := e.start()
	runOrders(t, p, token, 0, 3, false)
	id := p.stats(token).Databases[0].DatabaseID

	r, _ := inspectAt(t, e.outbox, id, "--database-path", e.dbPath)
	if r.Exit != 2 || r.Error == nil || r.Error.Code != "database_busy" {
		t.Fatalf("while the server runs: exit %d %+v; want database_busy", r.Exit, r.Error)
	}
	p.stop()

	other := "0123456789abcdef0123456789abcdef"
	dbBefore := storeBytes(t, e.dbPath)
	for _, c := range []struct {
		args []string
		code string
	}{
		{[]string{"--database-path", "db"}, "usage"},
		{[]string{"--database-path", e.dbPath + "/"}, "usage"},
		{[]string{"--database-path", filepath.Join(e.root, "nothing")}, "database_not_found"},
		{[]string{"--database-path", e.outbox}, "database_not_found"},
	} {
		r, _ := inspectAt(t, e.outbox, id, c.args...)
		if r.Exit == 0 || r.Error == nil || r.Error.Code != c.code {
			t.Errorf("%v: exit %d %+v; want %s", c.args, r.Exit, r.Error, c.code)
		}
	}
	r, _ = inspectAt(t, e.outbox, other, "--database-path", e.dbPath)
	if r.Exit != 1 || r.Error == nil || r.Error.Code != "database_binding_mismatch" || !strings.Contains(r.Error.Message, id) {
		t.Errorf("another --database-id: exit %d %+v; want database_binding_mismatch naming %s", r.Exit, r.Error, id)
	}
	r, res := inspectAt(t, e.outbox, id, "--database-path", e.dbPath, "--max-pages", "256")
	if r.Exit != 0 || res.Integrity != "verified" {
		t.Errorf("a clean stop: exit %d %+v, integrity %q; want verified", r.Exit, r.Error, res.Integrity)
	}
	if after := storeBytes(t, e.dbPath); after != dbBefore {
		t.Errorf("inspect changed the database:\nbefore:\n%s\nafter:\n%s", dbBefore, after)
	}
	if _, err := os.Stat(filepath.Join(e.root, "nothing")); !os.IsNotExist(err) {
		t.Errorf("inspect created the missing database directory: %v", err)
	}
}
