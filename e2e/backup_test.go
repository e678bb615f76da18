package e2e_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The backup and restore tests: issue #15's acceptance on the real binary.
// Commands run from 16 concurrent clients (burst) with small inputs, so that
// each scenario stays within seconds.

// newBackupEnv is an installation with an outbox and a backup_root (a
// private directory beside the database).
func newBackupEnv(t *testing.T) (*env, string) {
	t.Helper()
	e := newEnv(t, envOpts{outbox: true})
	root := filepath.Join(e.root, "backups")
	must(t, os.Mkdir(root, 0o700))
	b, err := os.ReadFile(e.config)
	must(t, err)
	// These scenarios take backups back to back: no rate limit.
	s := strings.Replace(string(b), "[database]\n", fmt.Sprintf("[database]\nbackup_root = %q\nbackup_min_interval = \"0s\"\n", root), 1)
	must(t, os.WriteFile(e.config, []byte(s), 0o600))
	return e, root
}

// tokenFile writes token into a private file for the CLI's --token-file.
func (e *env) tokenFile(name, token string) string {
	e.t.Helper()
	f := filepath.Join(e.root, name+".token")
	must(e.t, os.WriteFile(f, []byte(token+"\n"), 0o600))
	return f
}

// backupInfo is one backup as the CLI and the API report it.
type backupInfo struct {
	Name               string `json:"name"`
	DatabaseID         string `json:"database_id"`
	HistoryIncarnation uint64 `json:"history_incarnation"`
	LastCommitSequence uint64 `json:"last_commit_sequence"`
	FileCount          int    `json:"file_count"`
	Bytes              int64  `json:"bytes"`
}

// backupCLI runs `riffdb database backup` against p.
func backupCLI(t *testing.T, p *proc, tokenFile string, args ...string) cliResult {
	t.Helper()
	return cli(t, append([]string{"database", "backup", "--database", "default", "--address", "http://" + p.api,
		"--token-file", tokenFile}, args...)...)
}

// takeBackup backs the database up through the CLI and returns the backup.
func takeBackup(t *testing.T, p *proc, tokenFile string) backupInfo {
	t.Helper()
	r := backupCLI(t, p, tokenFile)
	if !r.OK || r.Exit != 0 {
		t.Fatalf("database backup: exit %d %+v %s", r.Exit, r.Error, r.Stderr)
	}
	var res struct {
		Database string     `json:"database"`
		Backup   backupInfo `json:"backup"`
	}
	must(t, json.Unmarshal(r.Result, &res))
	if res.Database != "default" || res.Backup.Name == "" || res.Backup.FileCount == 0 || res.Backup.Bytes <= 0 {
		t.Fatalf("database backup result: %s", r.Result)
	}
	return res.Backup
}

// listBackups lists the database's backups through the CLI.
func listBackups(t *testing.T, p *proc, tokenFile string) []backupInfo {
	t.Helper()
	r := cli(t, "database", "backup", "list", "--database", "default", "--address", "http://"+p.api, "--token-file", tokenFile)
	if !r.OK {
		t.Fatalf("database backup list: exit %d %+v %s", r.Exit, r.Error, r.Stderr)
	}
	var res struct {
		Backups []backupInfo `json:"backups"`
	}
	must(t, json.Unmarshal(r.Result, &res))
	return res.Backups
}

// restoreResult is the result of `riffdb database restore`.
type restoreResult struct {
	DatabaseID          string `json:"database_id"`
	Backup              string `json:"backup"`
	PreviousIncarnation uint64 `json:"previous_incarnation"`
	HistoryIncarnation  uint64 `json:"history_incarnation"`
	LastCommitSequence  uint64 `json:"last_commit_sequence"`
	ReplacedAs          string `json:"replaced_as"`
}

func (e *env) restoreCLI(name string) cliResult {
	e.t.Helper()
	return cli(e.t, "database", "restore", "--config", e.config, "--database", "default", "--backup", name)
}

// restore restores backup name with the CLI and returns its result.
func (e *env) restore(name string) restoreResult {
	e.t.Helper()
	r := e.restoreCLI(name)
	if !r.OK || r.Exit != 0 {
		e.t.Fatalf("database restore: exit %d %+v %s", r.Exit, r.Error, r.Stderr)
	}
	var res restoreResult
	must(e.t, json.Unmarshal(r.Result, &res))
	return res
}

// dbState is what stats and health say of the database.
type dbState struct {
	incarnation, lastSeq, completed uint64
	pending                         *uint64
	health, reason                  string
	records                         *int64
	conflicts                       uint64
}

func (p *proc) dbState(token string) dbState {
	p.t.Helper()
	code, b, err := p.do(context.Background(), http.MethodGet, "/v1/stats", token, nil)
	if err != nil || code != http.StatusOK {
		p.t.Fatalf("stats: %d %v %s", code, err, b)
	}
	var s struct {
		Databases []struct {
			HistoryIncarnation      uint64  `json:"history_incarnation"`
			LastCommitSequence      uint64  `json:"last_commit_sequence"`
			PendingOutboxDeliveries *uint64 `json:"pending_outbox_deliveries"`
			Outbox                  struct {
				Health              string `json:"health"`
				Reason              string `json:"reason"`
				CompletedDeliveries uint64 `json:"completed_deliveries"`
				ArchiveRecordCount  *int64 `json:"archive_record_count"`
			} `json:"outbox"`
		} `json:"databases"`
	}
	must(p.t, json.Unmarshal(b, &s))
	code, b, err = p.do(context.Background(), http.MethodGet, "/v1/health", token, nil)
	if err != nil || code != http.StatusOK {
		p.t.Fatalf("health: %d %v %s", code, err, b)
	}
	var h struct {
		Databases []struct {
			Outbox struct {
				State     string `json:"state"`
				Reason    string `json:"reason"`
				Conflicts uint64 `json:"conflicts"`
			} `json:"outbox"`
		} `json:"databases"`
	}
	must(p.t, json.Unmarshal(b, &h))
	d, o := s.Databases[0], h.Databases[0].Outbox
	return dbState{incarnation: d.HistoryIncarnation, lastSeq: d.LastCommitSequence, completed: d.Outbox.CompletedDeliveries,
		pending: d.PendingOutboxDeliveries, health: o.State, reason: o.Reason, records: d.Outbox.ArchiveRecordCount,
		conflicts: o.Conflicts}
}

// noDeadLetters fails the test when the server's metrics count a dead
// letter or an archive refusal (different bytes under an archived identity).
func noDeadLetters(t *testing.T, p *proc) {
	t.Helper()
	for _, line := range strings.Split(scrape(t, p, false), "\n") {
		counted := strings.HasPrefix(line, "riffdb_outbox_dead_letters_total{") ||
			(strings.HasPrefix(line, "riffdb_archive_accepted_events_total{") && strings.Contains(line, `result="refused"`))
		if counted && !strings.HasSuffix(line, " 0") {
			t.Errorf("the server dead-lettered or conflicted: %s", line)
		}
	}
}

// countIncarnations inspects the archive offline (the server stopped),
// requires the verdict verified and returns the records per incarnation.
func (e *env) countIncarnations(dbID string) (map[uint64]int64, int64) {
	e.t.Helper()
	r, res := inspectAt(e.t, e.outbox, dbID, "--count-incarnations", "--max-pages", "256")
	if !r.OK || res.Integrity != "verified" {
		e.t.Fatalf("inspect: exit %d %+v %s", r.Exit, r.Error, r.Result)
	}
	var counts struct {
		Incarnations []struct {
			Incarnation uint64 `json:"incarnation"`
			Records     int64  `json:"records"`
		} `json:"incarnations"`
	}
	must(e.t, json.Unmarshal(r.Result, &counts))
	out := make(map[uint64]int64)
	for _, c := range counts.Incarnations {
		out[c.Incarnation] = c.Records
	}
	return out, res.RecordCount
}

// TestBackupRestoreStartsANewIncarnation is the main acceptance:
// 1,000 commands, part of them delivered, then a backup; 1,000 more, all
// delivered; the server stopped, the backup restored, 1,000 new commands
// with other inputs (the same commit sequences as the second thousand).
// Everything is delivered without an identity conflict or a dead letter;
// inspect finds incarnation 1 holding every event delivered before the
// restore and incarnation 2 the restored backlog and the new events. A
// second restore gives incarnation 3.
func TestBackupRestoreStartsANewIncarnation(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 3,000 commands through a backup and two restores")
	}
	t.Parallel()
	const n = 1000
	e, _ := newBackupEnv(t)
	token := e.token([]string{"execute_commands", "read_statistics", "read_health"}, "")
	backups := e.tokenFile("backups", e.token([]string{"manage_backups"}, "default"))
	p := e.start()

	// Part of the first thousand delivered: half of them, then the archive
	// directory is made group-writable (its custody check refuses it and
	// delivery pauses before the next claim) and the other half stay in
	// the backlog. The backup is taken with that backlog.
	burst(t, p, token, 0, n/2)
	p.waitDrained(t, token)
	must(t, os.Chmod(e.outbox, 0o770))
	burst(t, p, token, n/2, n/2)
	p.waitHealth(t, token, "paused", "destination_refused")
	before := p.dbState(token)
	if before.pending == nil || *before.pending == 0 || *before.pending == n || before.lastSeq != n {
		t.Fatalf("want part of %d commands delivered before the backup: %+v", n, before)
	}
	backlog := *before.pending
	b := takeBackup(t, p, backups)
	if b.HistoryIncarnation != 1 || b.LastCommitSequence != n {
		t.Fatalf("backup %+v, want incarnation 1 and last commit sequence %d", b, n)
	}
	if list := listBackups(t, p, backups); len(list) != 1 || list[0].Name != b.Name || list[0].LastCommitSequence != n {
		t.Fatalf("backup list = %+v, want the one backup %s", list, b.Name)
	}
	t.Logf("backup %s taken with %d of %d events undelivered", b.Name, backlog, n)

	must(t, os.Chmod(e.outbox, 0o700)) // repaired in place: delivery resumes
	burst(t, p, token, n, n)
	p.waitDrained(t, token)
	delivered := p.dbState(token)
	if delivered.completed != 2*n || delivered.incarnation != 1 {
		t.Fatalf("before the restore: %+v, want %d completed deliveries in incarnation 1", delivered, 2*n)
	}
	dbID := p.stats(token).Databases[0].DatabaseID
	p.stop()

	res := e.restore(b.Name)
	if res.HistoryIncarnation != 2 || res.PreviousIncarnation != 1 || res.LastCommitSequence != n ||
		res.DatabaseID != dbID || res.Backup != b.Name || res.ReplacedAs == "" {
		t.Fatalf("restore result %+v, want incarnation 2 replacing 1 at sequence %d", res, n)
	}

	p = e.start()
	if st := p.dbState(token); st.incarnation != 2 || st.lastSeq != n {
		t.Fatalf("after the restore stats say %+v, want incarnation 2 and last commit sequence %d", st, n)
	}
	burst(t, p, token, 100_000, n) // other inputs, reusing commit sequences n+1..2n
	p.waitDrained(t, token)
	after := p.dbState(token)
	if after.health != "healthy" || after.conflicts != 0 || after.lastSeq != 2*n || after.incarnation != 2 {
		t.Fatalf("after the new commands: %+v, want healthy with no conflict at sequence %d", after, 2*n)
	}
	noDeadLetters(t, p)
	p.stop()

	counts, total := e.countIncarnations(dbID)
	want := map[uint64]int64{1: 2 * n, 2: int64(backlog) + n}
	if len(counts) != len(want) || counts[1] != want[1] || counts[2] != want[2] || total != want[1]+want[2] {
		t.Fatalf("records per incarnation %v (total %d), want %v", counts, total, want)
	}

	// A second restore of the same backup: incarnation 3, which delivers
	// the backlog once more under its own key; nothing earlier changes.
	res = e.restore(b.Name)
	if res.HistoryIncarnation != 3 || res.PreviousIncarnation != 2 {
		t.Fatalf("second restore %+v, want incarnation 3 replacing 2", res)
	}
	p = e.start()
	p.waitDrained(t, token)
	if st := p.dbState(token); st.incarnation != 3 || st.conflicts != 0 {
		t.Fatalf("after the second restore: %+v, want incarnation 3 without conflicts", st)
	}
	noDeadLetters(t, p)
	p.stop()
	counts, _ = e.countIncarnations(dbID)
	want[3] = int64(backlog)
	if len(counts) != 3 || counts[1] != want[1] || counts[2] != want[2] || counts[3] != want[3] {
		t.Fatalf("records per incarnation %v, want %v", counts, want)
	}
}

// diskListing lists every entry below each dir: its name, size, mode and,
// with hashes, a hash of each regular file's content.
func diskListing(t *testing.T, hashes bool, dirs ...string) string {
	t.Helper()
	var b strings.Builder
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			var st syscall.Stat_t
			if err := syscall.Lstat(p, &st); err != nil {
				return err
			}
			sum := ""
			if hashes && st.Mode&syscall.S_IFMT == syscall.S_IFREG {
				data, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				h := sha256.Sum256(data)
				sum = " sha256=" + hex.EncodeToString(h[:8])
			}
			fmt.Fprintf(&b, "%s size=%d mode=%o%s\n", p, st.Size, st.Mode, sum)
			return nil
		})
		must(t, err)
	}
	return b.String()
}

// refusedWithoutTrace runs a restore that must be refused with code and
// exit, and requires the database directory and backup_root unchanged: the
// names, sizes and modes of their entries and, unless a server runs (its
// database's files change under it), their contents.
func refusedWithoutTrace(t *testing.T, e *env, root, what, name, code string, exit int, serverRuns bool) {
	t.Helper()
	before := diskListing(t, !serverRuns, e.dbPath, root)
	r := e.restoreCLI(name)
	after := diskListing(t, !serverRuns, e.dbPath, root)
	if r.OK || r.Error == nil || r.Error.Code != code || r.Exit != exit {
		t.Fatalf("%s: restore answered exit %d %+v, want code %s exit %d", what, r.Exit, r.Error, code, exit)
	}
	if leaks := dmLeaks(e.root, r.Error.Message, r.Stderr); len(leaks) > 0 {
		t.Errorf("%s: the refusal leaks %v: %s", what, leaks, r.Error.Message)
	}
	if after != before {
		t.Fatalf("%s: the refused restore changed the disk:\nbefore:\n%s\nafter:\n%s", what, before, after)
	}
	t.Logf("%s: %s: %s", what, r.Error.Code, r.Error.Message)
}

// TestRestoreRefusalsChangeNothing: a restore is refused, each time with its
// own error and without any change to the database directory or the
// backup_root, while a server holds the database, for a backup of another
// database identity, a backup with a flipped byte, a backup with a missing
// file, an unknown backup and a name that is not a plain entry name.
func TestRestoreRefusalsChangeNothing(t *testing.T) {
	t.Parallel()
	// Another database (its own identity) and a backup of it.
	other, _ := newBackupEnv(t)
	otherToken := other.tokenFile("backups", other.token([]string{"manage_backups"}, ""))
	op := other.start()
	foreign := takeBackup(t, op, otherToken)
	op.stop()

	e, root := newBackupEnv(t)
	token := e.token([]string{"execute_commands", "read_statistics"}, "")
	backups := e.tokenFile("backups", e.token([]string{"manage_backups"}, ""))
	p := e.start()
	burst(t, p, token, 0, 50)
	p.waitDrained(t, token)
	b := takeBackup(t, p, backups)
	if b.Name == foreign.Name {
		t.Fatalf("two backups taken apart share the name %s", b.Name)
	}

	p.waitDrained(t, token)
	refusedWithoutTrace(t, e, root, "server running", b.Name, "database_busy", 2, true)
	p.stop()

	copyTree(t, filepath.Join(other.root, "backups", foreign.Name), filepath.Join(root, foreign.Name))
	refusedWithoutTrace(t, e, root, "another database's backup", foreign.Name, "backup_identity_mismatch", 1, false)

	victim := largestFile(t, filepath.Join(root, b.Name))
	data, err := os.ReadFile(victim)
	must(t, err)
	flipped := append([]byte(nil), data...)
	flipped[len(flipped)/2] ^= 0x01
	must(t, os.WriteFile(victim, flipped, 0o600))
	refusedWithoutTrace(t, e, root, "a flipped byte", b.Name, "backup_damaged", 1, false)
	must(t, os.WriteFile(victim, data, 0o600))

	aside := filepath.Join(e.root, "aside")
	must(t, os.Rename(victim, aside))
	refusedWithoutTrace(t, e, root, "a missing file", b.Name, "backup_damaged", 1, false)
	must(t, os.Rename(aside, victim))

	refusedWithoutTrace(t, e, root, "an unknown backup", "no-such-backup", "backup_not_found", 2, false)
	refusedWithoutTrace(t, e, root, "a name with a slash", "../"+b.Name, "backup_name_invalid", 2, false)

	// The intact backup restores (the refusals left it usable).
	if res := e.restore(b.Name); res.HistoryIncarnation != 2 {
		t.Fatalf("restore after the refusals: %+v", res)
	}
}

// largestFile returns the largest regular file of a backup directory
// other than its manifest: a file of the store copy.
func largestFile(t *testing.T, dir string) string {
	t.Helper()
	var largest string
	var size int64 = -1
	must(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || d.Name() == "manifest.json" {
			return err
		}
		info, err := d.Info()
		if err == nil && info.Size() > size {
			largest, size = p, info.Size()
		}
		return err
	}))
	if size <= 0 {
		t.Fatal("the backup holds no file with content")
	}
	return largest
}

// TestBackupRefusals: a database without backup_root refuses a backup (and
// a restore) clearly; a token without manage_backups is refused with 403;
// an unknown database with 404.
func TestBackupRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{outbox: true})
	commands := e.tokenFile("commands", e.token([]string{"execute_commands", "read_statistics", "read_health"}, ""))
	backups := e.tokenFile("backups", e.token([]string{"manage_backups"}, ""))
	p := e.start()

	for _, c := range []struct {
		what, token, code string
		args              []string
	}{
		{"no backup_root", backups, "backup_root_not_configured", nil},
		{"no backup_root, list", backups, "backup_root_not_configured", []string{"list"}},
		{"no manage_backups", commands, "forbidden", nil},
		{"no manage_backups, list", commands, "forbidden", []string{"list"}},
	} {
		r := backupCLI(t, p, c.token, c.args...)
		if r.OK || r.Error == nil || r.Error.Code != c.code || r.Exit != 1 {
			t.Errorf("%s: exit %d %+v, want code %s exit 1", c.what, r.Exit, r.Error, c.code)
		} else if leaks := dmLeaks(e.root, r.Error.Message, r.Stderr); len(leaks) > 0 {
			t.Errorf("%s: the refusal leaks %v", c.what, leaks)
		}
	}
	if code, body, err := p.do(context.Background(), http.MethodPost, "/v1/databases/default/backups",
		readToken(t, commands), nil); err != nil || code != http.StatusForbidden {
		t.Errorf("POST backups without manage_backups: %d %v %s, want 403", code, err, body)
	}
	if code, body, err := p.do(context.Background(), http.MethodPost, "/v1/databases/nosuch/backups",
		readToken(t, backups), nil); err != nil || code != http.StatusNotFound || !strings.Contains(string(body), "unknown_database") {
		t.Errorf("POST backups of an unknown database: %d %v %s, want 404 unknown_database", code, err, body)
	}
	p.stop()
	if r := e.restoreCLI("any"); r.OK || r.Error == nil || r.Error.Code != "backup_root_not_configured" || r.Exit != 2 {
		t.Errorf("restore without backup_root: exit %d %+v", r.Exit, r.Error)
	}
}

func readToken(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	must(t, err)
	return strings.TrimSpace(string(b))
}

// TestHandCopiedRestoreIsDetected is the main scenario with the files
// copied back by hand instead of restored: the database directory replaced
// by a copy of the backup's store. It keeps incarnation 1, so its next
// commands would reuse identities the archive holds with other bytes. The
// archive's startup check finds events of incarnation 1 beyond the
// primary's last commit before anything is delivered: outbox health is
// stopped (history_behind_archive) and the server's log points at
// `riffdb database restore`; commands are still acknowledged, nothing is
// dead-lettered and the archive gets no record. The remedy the log names
// then works: stopped, restored with the command, the database delivers
// under incarnation 2.
func TestHandCopiedRestoreIsDetected(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 1,000 commands, a hand-copied restore and the real one")
	}
	t.Parallel()
	const n = 1000
	e, root := newBackupEnv(t)
	token := e.token([]string{"execute_commands", "read_statistics", "read_health"}, "")
	backups := e.tokenFile("backups", e.token([]string{"manage_backups"}, ""))
	p := e.start()
	burst(t, p, token, 0, n/2)
	p.waitDrained(t, token)
	must(t, os.Chmod(e.outbox, 0o770))
	burst(t, p, token, n/2, n/2)
	p.waitHealth(t, token, "paused", "destination_refused")
	b := takeBackup(t, p, backups)
	backlog := *p.dbState(token).pending
	must(t, os.Chmod(e.outbox, 0o700))
	burst(t, p, token, n, n)
	p.waitDrained(t, token)
	dbID := p.stats(token).Databases[0].DatabaseID
	p.stop()
	counts, records := e.countIncarnations(dbID)
	if records != 2*n || counts[1] != 2*n {
		t.Fatalf("before the copy the archive holds %d records %v, want %d in incarnation 1", records, counts, 2*n)
	}

	// Copy the backup's store files back by hand over the database.
	must(t, os.Rename(e.dbPath, e.dbPath+".before-copy"))
	copyTree(t, filepath.Join(root, b.Name, "store"), e.dbPath)

	p = e.start()
	p.waitHealth(t, token, "stopped", "history_behind_archive")
	if log := p.stderr.String(); !strings.Contains(log, "riffdb database restore") {
		t.Errorf("the server's log does not point at riffdb database restore:\n%s", log)
	}
	burst(t, p, token, 100_000, n) // acknowledged, with sequences the archive holds under incarnation 1
	// The archive refused to open, so stats have no record count (null);
	// inspect counts the records below.
	st := p.dbState(token)
	if st.incarnation != 1 || st.lastSeq != 2*n || st.health != "stopped" || st.reason != "history_behind_archive" ||
		(st.records != nil && *st.records != 2*n) || st.pending == nil || *st.pending != backlog+n || st.conflicts != 0 {
		t.Fatalf("with the hand-copied files: %+v (pending %v, records %v), want stopped at sequence %d with %d records and %d pending",
			st, deref(st.pending), deref(st.records), 2*n, 2*n, backlog+n)
	}
	noDeadLetters(t, p)
	p.stop()
	counts, records = e.countIncarnations(dbID)
	if records != 2*n || len(counts) != 1 || counts[1] != 2*n {
		t.Fatalf("after the hand copy the archive holds %d records %v, want the same %d", records, counts, 2*n)
	}

	// The remedy: restore with the command. The hand-copied data (with the
	// commands acknowledged on it) is moved aside, not deleted.
	res := e.restore(b.Name)
	if res.HistoryIncarnation != 2 || res.PreviousIncarnation != 1 || res.ReplacedAs == "" {
		t.Fatalf("restore after the hand copy: %+v", res)
	}
	p = e.start()
	p.waitDrained(t, token)
	if st := p.dbState(token); st.incarnation != 2 || st.conflicts != 0 || st.completed != backlog {
		t.Fatalf("after the restore: %+v, want incarnation 2 with the backlog of %d delivered", st, backlog)
	}
	p.stop()
	counts, _ = e.countIncarnations(dbID)
	if counts[1] != 2*n || counts[2] != int64(backlog) {
		t.Fatalf("records per incarnation %v, want 1: %d, 2: %d", counts, 2*n, backlog)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
