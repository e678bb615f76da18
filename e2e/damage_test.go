package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/riffdb/riffdb/internal/testsupport/treestate"
)

// The damage matrix ("Fail closed"): one real installation is built once;
// then, for every store (primary, archive, credentials), every kind of file
// the store holds and every damage, a fresh copy of the installation is
// damaged, inspected offline and started. Each row must end "intact" (the
// server and inspect both prove that nothing acknowledged is missing) or
// "refused" (the server refused to start with a code naming the damage, or
// started and stopped delivery with a reason naming it, still serving
// commands). Anything else is a VIOLATION and fails the test.
//
// The verdict of a row, strictly:
//   - intact: the server started; its database_id and last_commit_sequence
//     are those acknowledged; replaying idempotency keys from the beginning,
//     middle and end returns their commit sequences with replayed:true;
//     delivery is healthy with nothing pending; it stops cleanly on SIGTERM;
//     and inspect verified every acknowledged event, before and after (or,
//     before, refused custody of an archive without its LOCK file, which a
//     read-only inspection never creates, and verified after).
//   - refused: `server run` exited non-zero before serving with a JSON
//     envelope whose code is one of dmRefusalCodes (database_* for the
//     primary, credentials_refused for the credentials), or the server
//     started with the outbox stopped, or paused/degraded for one of
//     dmStopReasons, while the first acknowledged command still replays;
//     and the store that refused (the damaged one when the server refused
//     to start, the archive when delivery stopped) is left exactly as the
//     damage left it, every file's name, size, mode and contents (LOCK's
//     timestamps, like every timestamp, are not compared), after inspect
//     and the server both ran. A store that was accepted and opened for
//     writing first (the primary served; the archive logged "archive
//     opened for writing") and stopped only when a later read reached the
//     damage (the scrub, a table read) was live and wrote legitimately
//     since; for it, the damaged file must be as the damage left it. Such
//     an archive case is run again with full_validation_interval due
//     (dmRun): that start must refuse the archive before opening it for
//     writing, with every file of the store as the damage left it.
//   - VIOLATION: anything else, notably a new database_id or an empty
//     history, a rolled-back history reported healthy, a lost command, a
//     token no longer accepted, a server that serves and then dies (except
//     with database_corrupt: table damage is found when a read reaches it,
//     and the store then stops the server), inspect
//     "verified" with a record count other than the acknowledged events (a
//     violation whatever the server does), a server reporting healthy while
//     inspect does not verify, a panic or stack trace, or a filesystem path
//     in an envelope message.
//
// A damage that cannot apply (a 0-byte file cannot be flipped; an older
// copy that is byte-identical changes nothing) is reported n/a with why.
// RIFFDB_DAMAGE_REPORT names a file that receives the table as markdown.

const (
	dmCommands    = 300 // committed in three parts, with clean restarts between
	dmParallel    = 3   // cases run at once
	dmReadyWait   = 30 * time.Second
	dmSteadyWait  = 15 * time.Second
	dmRequestWait = 5 * time.Second
)

// dmRefusalCodes are the error codes with which `server run` may refuse a
// damaged installation.
var dmRefusalCodes = []string{"database_corrupt", "database_incompatible", "database_busy",
	"database_unavailable", "credentials_refused", "contract_invalid"}

// dmStopReasons are the outbox health reasons that name a damage, for a
// paused or degraded outbox (a stopped outbox counts whatever its reason).
var dmStopReasons = []string{"corrupt_content", "incompatible_format", "binding_changed",
	"startup_validation_failed", "archive_lost_records", "history_behind_archive", "destination_refused"}

// dmCommand is one acknowledged command.
type dmCommand struct {
	name   string
	input  map[string]any
	key    string
	seq    uint64
	events int
}

// dmInstallation is the pristine installation and what it acknowledged.
type dmInstallation struct {
	root, older string // pristine root, and an older copy of the whole installation
	token       string
	dbID        string
	lastSeq     uint64
	events      int64 // acknowledged events: records the archive must hold
	commands    []dmCommand
}

func dmCommandFor(i int) dmCommand {
	key := fmt.Sprintf("dm-%d", i)
	if i%3 == 0 {
		return dmCommand{name: "ship_order", input: map[string]any{"order_id": fmt.Sprintf("o-%d", i), "carrier": "acme"}, key: key}
	}
	return dmCommand{name: "place_order", input: orderInput(i), key: key}
}

// buildDamageInstallation commits dmCommands commands in three parts with a
// clean stop after each (Pebble flushes the replayed WAL at the next open, so
// both stores get tables, and the newest WAL holds the last part), copying
// the whole installation after the second part as the older copy. The first
// part's events take a failed attempt and a redrive on their way
// (dmExtendIntents), so the primary is at the extended key layout.
func buildDamageInstallation(t *testing.T) *dmInstallation {
	e := newEnv(t, envOpts{outbox: true})
	inst := &dmInstallation{root: e.root, token: e.token([]string{"execute_commands", "read_statistics"}, "")}
	manager := e.token([]string{"manage_outbox"}, "")
	withOutbox, err := os.ReadFile(e.config)
	must(t, err)
	inst.commands = make([]dmCommand, dmCommands)
	parts := []int{0, dmCommands / 3, 2 * dmCommands / 3, dmCommands}
	for part := 0; part < 3; part++ {
		if part == 0 {
			must(t, os.WriteFile(e.config, withoutOutbox(t, withOutbox), 0o600))
		}
		p := e.start()
		var wg sync.WaitGroup
		errs := make(chan error, dmCommands)
		next := make(chan int)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					c := dmCommandFor(i)
					code, r, body, err := p.command(context.Background(), inst.token, c.name, c.input, c.key)
					if err != nil || code != http.StatusOK || r.Replayed {
						errs <- fmt.Errorf("command %d: %d %v %s", i, code, err, body)
						continue
					}
					c.seq, c.events = r.CommitSequence, len(r.Events)
					inst.commands[i] = c
					errs <- nil
				}
			}()
		}
		for i := parts[part]; i < parts[part+1]; i++ {
			next <- i
		}
		close(next)
		wg.Wait()
		close(errs)
		for err := range errs {
			must(t, err)
		}
		if part == 0 {
			p.stop()
			must(t, os.WriteFile(e.config, withOutbox, 0o600))
			dmExtendIntents(t, e)
			p = e.start()
			dmRedrive(t, p, manager)
		}
		waitFor(t, 2*time.Minute, "the outbox to drain", func() bool {
			d := p.stats(inst.token).Databases[0]
			return d.PendingOutboxDeliveries != nil && *d.PendingOutboxDeliveries == 0 && d.Outbox.Health == "healthy"
		})
		d := p.stats(inst.token).Databases[0]
		inst.dbID, inst.lastSeq = d.DatabaseID, d.LastCommitSequence
		p.stop()
		if part == 1 {
			older, err := os.MkdirTemp("", "riffdb-damage-older-")
			must(t, err)
			t.Cleanup(func() { os.RemoveAll(older) })
			must(t, dmCopyTree(e.root, older))
			inst.older = older
		}
	}
	for _, c := range inst.commands {
		inst.events += int64(c.events)
	}
	if maxSeq := slices.MaxFunc(inst.commands, func(a, b dmCommand) int { return int(a.seq) - int(b.seq) }).seq; maxSeq != inst.lastSeq {
		t.Fatalf("stats last_commit_sequence %d, highest acknowledged %d", inst.lastSeq, maxSeq)
	}
	r, res := e.inspect(inst.dbID, 256)
	if !r.OK || res.Integrity != "verified" || res.RecordCount != inst.events {
		t.Fatalf("pristine inspect: %+v %+v, want %d records verified", r.Error, res, inst.events)
	}
	return inst
}

// dmStore is one store of the installation: its directory relative to the
// root and how its files are grouped into kinds.
type dmStore struct {
	name string
	dir  string
	kind func(name string) string // "" for a file that is not examined
}

var dmWALName = regexp.MustCompile(`^\d+\.log$`)

func dmPebbleKind(name string) string {
	switch {
	case strings.HasSuffix(name, ".sst"):
		return "table"
	case dmWALName.MatchString(name):
		return "wal"
	case strings.HasPrefix(name, "MANIFEST-"):
		return "manifest"
	case strings.HasPrefix(name, "OPTIONS-"):
		return "options"
	case strings.HasPrefix(name, "marker.manifest."):
		return "marker-manifest"
	case strings.HasPrefix(name, "marker.format-version."):
		return "marker-format"
	case name == "LOCK":
		return "lock"
	case strings.HasPrefix(name, "temporary.") || strings.HasSuffix(name, ".dbtmp"):
		return ""
	}
	return "riffdb-own:" + name
}

func dmCredentialKind(name string) string {
	switch name {
	case "key":
		return "key"
	case "capabilities.json":
		return "capabilities"
	case "lock":
		return "lock"
	}
	if strings.HasPrefix(name, ".") {
		return "" // a writer's temporary file
	}
	return "other:" + name
}

var dmStores = []dmStore{
	{name: "primary", dir: "db", kind: dmPebbleKind},
	{name: "archive", dir: filepath.Join("outbox", "archive.pebble"), kind: dmPebbleKind},
	{name: "archive", dir: "outbox", kind: func(name string) string {
		if name == "archive.pebble" {
			return ""
		}
		return "outbox-own:" + name
	}},
	{name: "credentials", dir: "credentials", kind: dmCredentialKind},
}

// dmFileNumber orders Pebble's numbered files; other names sort by name.
func dmFileNumber(name string) string {
	digits := regexp.MustCompile(`\d+`).FindString(name)
	return fmt.Sprintf("%020s%s", digits, name)
}

// dmKinds lists a store directory grouped by kind, each group newest first.
func dmKinds(t *testing.T, root string, s dmStore) map[string][]string {
	entries, err := os.ReadDir(filepath.Join(root, s.dir))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	must(t, err)
	kinds := map[string][]string{}
	for _, ent := range entries {
		k := s.kind(ent.Name())
		if k == "" {
			continue
		}
		if ent.IsDir() {
			t.Fatalf("%s: unexpected directory %s", s.dir, ent.Name())
		}
		kinds[k] = append(kinds[k], ent.Name())
	}
	for _, names := range kinds {
		sort.Slice(names, func(i, j int) bool { return dmFileNumber(names[i]) > dmFileNumber(names[j]) })
	}
	return kinds
}

// dmCase is one row of the matrix.
type dmCase struct {
	store, kind, file, damage string
	rel                       string // file relative to the installation root
	note                      string // which older file was used, etc.
	na                        string // why the damage cannot apply
	apply                     func(root string) error
}

type dmResult struct {
	dmCase
	inspect, server, verdict string
	// compared names the store that refused, compared file by file with
	// how the damage left it ("" when none refused); afterOpen, that it
	// refused only after it was accepted and opened for writing, so only
	// the damaged file was compared.
	compared  string
	afterOpen bool
	// fullValidation is the server's outcome when the case was run again
	// with dmFullValidation (dmRun); wholeAfterOpen, that this run refused
	// the archive before opening it and left every file of it as found.
	fullValidation string
	wholeAfterOpen bool
	violations     []string
}

// dmStoreDirs are the directories of each store, relative to the
// installation's root, that a refusal must leave exactly as found.
var dmStoreDirs = map[string]string{"primary": "db", "archive": "outbox", "credentials": "credentials"}

// dmAsFound compares the store that refused with how the damage left it:
// every file's name, type, size, mode and contents (timestamps are not
// compared: taking a store's lock may touch LOCK's); only the file rel
// (relative to the installation's root) when rel is set.
func dmAsFound(root, store string, before treestate.State, rel string) []string {
	after, err := treestate.Take(filepath.Join(root, dmStoreDirs[store]))
	if err != nil {
		return []string{"recording the store after the server: " + err.Error()}
	}
	if rel != "" {
		name, err := filepath.Rel(dmStoreDirs[store], rel)
		if err != nil {
			return []string{"naming the damaged file: " + err.Error()}
		}
		name = filepath.ToSlash(name)
		before, after = treestate.State{name: before[name]}, treestate.State{name: after[name]}
	}
	if d := treestate.Diff(before, after); d != nil {
		return []string{fmt.Sprintf("the %s store refused the damage but was changed: %s", store, strings.Join(d, ", "))}
	}
	return nil
}

var dmDamages = []string{"delete", "truncate-0", "truncate-half", "zero-fill", "flip-byte", "older-copy"}

// dmWALDamages are extra damages for a WAL. Pebble recycles WAL files, so a
// WAL is about 1 MiB of which only the first part holds the log's own
// records (the rest is stale content of the file it was recycled from):
// "half" and "middle" of the file land in stale bytes. These two damages cut
// and flip within the records the log itself holds.
var dmWALDamages = []string{"truncate-half-live", "flip-byte-live"}

// dmWALLiveEnd returns the offset just past the last chunk that belongs to
// the log numbered logNum, walking Pebble's record format (32 KiB blocks of
// chunks; legacy, recyclable and WAL-sync headers). Checksums are not
// verified: the walk only finds where the log's own chunks end.
func dmWALLiveEnd(data []byte, logNum uint32) int64 {
	const block = 32 << 10
	end := 0
	for pos := 0; pos < len(data); {
		blockEnd := min(len(data), (pos/block+1)*block)
		if blockEnd-pos < 7 {
			pos = blockEnd
			continue
		}
		h := data[pos:]
		length := int(h[4]) | int(h[5])<<8
		var size int
		switch enc := h[6]; {
		case enc >= 1 && enc <= 4:
			size = 7
		case enc >= 5 && enc <= 8:
			size = 11
		case enc >= 9 && enc <= 12:
			size = 19
		case enc == 0 && length == 0 && blockEnd-pos < 19:
			pos = blockEnd // the zeroed tail of a block
			continue
		default:
			return int64(end)
		}
		if pos+size > blockEnd || pos+size+length > blockEnd {
			return int64(end)
		}
		if size > 7 {
			if n := uint32(h[7]) | uint32(h[8])<<8 | uint32(h[9])<<16 | uint32(h[10])<<24; n != logNum {
				return int64(end)
			}
		}
		pos += size + length
		end = pos
	}
	return int64(end)
}

// dmCases builds every case; representative files are the newest of each kind.
func dmCases(t *testing.T, inst *dmInstallation) []dmCase {
	var cases []dmCase
	required := map[string][]string{
		"db":                    {"table", "wal", "manifest", "options", "marker-manifest", "marker-format", "lock", "riffdb-own:riffdb-created"},
		"outbox/archive.pebble": {"table", "wal", "manifest", "options", "marker-manifest", "marker-format", "lock", "riffdb-own:riffdb-cursor-key"},
		"credentials":           {"key", "capabilities", "lock"},
	}
	for _, s := range dmStores {
		kinds := dmKinds(t, inst.root, s)
		olderKinds := dmKinds(t, inst.older, s)
		var listing []string
		for k, names := range kinds {
			listing = append(listing, k+"="+strings.Join(names, ","))
		}
		sort.Strings(listing)
		t.Logf("%s (%s): %s", s.name, s.dir, strings.Join(listing, " "))
		for _, k := range required[filepath.ToSlash(s.dir)] {
			if len(kinds[k]) == 0 {
				t.Errorf("%s: the installation holds no %s file; the matrix would miss it", s.dir, k)
			}
		}
		keys := make([]string, 0, len(kinds))
		for k := range kinds {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			file := kinds[k][0]
			rel := filepath.Join(s.dir, file)
			data, err := os.ReadFile(filepath.Join(inst.root, rel))
			must(t, err)
			damages := dmDamages
			if k == "wal" {
				damages = append(slices.Clone(dmDamages), dmWALDamages...)
			}
			for _, d := range damages {
				c := dmCase{store: s.name, kind: k, file: filepath.ToSlash(rel), damage: d, rel: rel}
				dmPrepare(&c, data, inst, kinds, olderKinds, s)
				cases = append(cases, c)
			}
		}
	}
	return cases
}

// dmPrepare sets the case's apply function, or its n/a reason.
func dmPrepare(c *dmCase, data []byte, inst *dmInstallation, kinds, olderKinds map[string][]string, s dmStore) {
	size := int64(len(data))
	write := func(b []byte) func(string) error {
		return func(root string) error {
			p := filepath.Join(root, c.rel)
			st, err := os.Stat(p)
			if err != nil {
				return err
			}
			return os.WriteFile(p, b, st.Mode().Perm())
		}
	}
	switch c.damage {
	case "delete":
		c.apply = func(root string) error { return os.Remove(filepath.Join(root, c.rel)) }
	case "truncate-0":
		if size == 0 {
			c.na = "the file is already 0 bytes"
			return
		}
		c.apply = func(root string) error { return os.Truncate(filepath.Join(root, c.rel), 0) }
	case "truncate-half":
		if size < 2 {
			c.na = fmt.Sprintf("the file is %d bytes", size)
			return
		}
		c.apply = func(root string) error { return os.Truncate(filepath.Join(root, c.rel), size/2) }
	case "zero-fill":
		if size == 0 {
			c.na = "the file is 0 bytes"
			return
		}
		if bytes.Count(data, []byte{0}) == len(data) {
			c.na = "the file is already all zeros"
			return
		}
		c.apply = write(make([]byte, size))
	case "flip-byte":
		if size == 0 {
			c.na = "the file is 0 bytes"
			return
		}
		b := slices.Clone(data)
		b[size/2] ^= 0xff
		c.note = fmt.Sprintf("byte %d of %d", size/2, size)
		c.apply = write(b)
	case "truncate-half-live", "flip-byte-live":
		var num uint32
		fmt.Sscanf(filepath.Base(c.rel), "%d.log", &num)
		live := dmWALLiveEnd(data, num)
		if live < 2 {
			c.na = fmt.Sprintf("the WAL holds %d bytes of its own records", live)
			return
		}
		if c.damage == "truncate-half-live" {
			c.note = fmt.Sprintf("to byte %d; its records end at byte %d of %d", live/2, live, size)
			c.apply = func(root string) error { return os.Truncate(filepath.Join(root, c.rel), live/2) }
			return
		}
		b := slices.Clone(data)
		b[live/2] ^= 0xff
		c.note = fmt.Sprintf("byte %d; its records end at byte %d of %d", live/2, live, size)
		c.apply = write(b)
	case "older-copy":
		name := filepath.Base(c.rel)
		olderName := ""
		if slices.Contains(olderKinds[c.kind], name) {
			olderName = name
		} else if len(olderKinds[c.kind]) > 0 {
			olderName = olderKinds[c.kind][0]
			c.note = "no older " + name + "; used the older " + olderName
		} else {
			c.na = "the older installation has no " + c.kind + " file"
			return
		}
		old, err := os.ReadFile(filepath.Join(inst.older, s.dir, olderName))
		if err != nil {
			c.na = "reading the older copy: " + err.Error()
			return
		}
		// A marker's name is its content: the older marker replaces the
		// current one under its own name.
		if strings.HasPrefix(c.kind, "marker-") && olderName != name {
			c.note = "replaced " + name + " by the older " + olderName
			c.apply = func(root string) error {
				if err := os.Remove(filepath.Join(root, c.rel)); err != nil {
					return err
				}
				return os.WriteFile(filepath.Join(root, s.dir, olderName), old, 0o644)
			}
			return
		}
		if bytes.Equal(old, data) {
			c.na = "the older " + olderName + " is byte-identical to the pristine file"
			return
		}
		if c.note == "" {
			c.note = fmt.Sprintf("older %s: %d bytes, pristine %d", olderName, len(old), size)
		} else {
			c.note += fmt.Sprintf(" (%d bytes, pristine %d)", len(old), size)
		}
		c.apply = write(old)
	}
}

// dmCopyTree copies a directory tree with its modes. Unlike copyTree it
// returns its error, for use off the test goroutine; copyTree wraps it.
func dmCopyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			if err := os.MkdirAll(target, 0o700); err != nil {
				return err
			}
			return os.Chmod(target, info.Mode().Perm())
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := os.WriteFile(target, b, info.Mode().Perm()); err != nil {
			return err
		}
		return os.Chmod(target, info.Mode().Perm())
	})
}

// dmRelocate copies the pristine installation into a new root, rewriting the
// configuration's paths.
func dmRelocate(src string) (string, error) {
	root, err := os.MkdirTemp("", "riffdb-damage-")
	if err != nil {
		return "", err
	}
	if err := dmCopyTree(src, root); err != nil {
		return root, err
	}
	cfgPath := filepath.Join(root, "riffdb.toml")
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		return root, err
	}
	return root, os.WriteFile(cfgPath, bytes.ReplaceAll(b, []byte(src), []byte(root)), 0o600)
}

// dmConfigure adds extra to the [maintenance.outbox] section of the
// relocated installation's configuration.
func dmConfigure(root, extra string) error {
	const header = "[maintenance.outbox]\n"
	cfgPath := filepath.Join(root, "riffdb.toml")
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		return err
	}
	if bytes.Count(b, []byte(header)) != 1 {
		return fmt.Errorf("the configuration has no single %q section", strings.TrimSpace(header))
	}
	return os.WriteFile(cfgPath, bytes.Replace(b, []byte(header), []byte(header+extra), 1), 0o600)
}

var (
	dmPathPattern  = regexp.MustCompile(`(^|[\s"'(=:,\[])/[^\s/]+/`)
	dmPanicPattern = regexp.MustCompile(`panic:|fatal error:|goroutine \d+ \[`)
)

// dmLeaks names what an envelope message or an output must never contain.
func dmLeaks(root, message, output string) []string {
	var v []string
	if strings.Contains(message, root) || dmPathPattern.MatchString(message) {
		v = append(v, fmt.Sprintf("a filesystem path in the envelope message %q", message))
	}
	if loc := dmPanicPattern.FindStringIndex(output); loc != nil {
		end := min(len(output), loc[0]+300)
		v = append(v, fmt.Sprintf("a panic or stack trace in the output: %q", output[loc[0]:end]))
	}
	return v
}

type dmEnvelope struct {
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Kind    string `json:"kind"`
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// dmInspect runs the offline inspection and judges it on its own.
func dmInspect(root string, inst *dmInstallation) (summary string, verified bool, violations []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "--output", "json", "outbox", "archive", "inspect",
		"--directory", filepath.Join(root, "outbox"), "--database-id", inst.dbID, "--max-pages", "256")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	exit := 0
	if ee, ok := err.(*exec.ExitError); ok {
		exit = ee.ExitCode()
	} else if err != nil {
		return "run failed: " + err.Error(), false, []string{"inspect could not run: " + err.Error()}
	}
	var env dmEnvelope
	if err := json.Unmarshal(stdout.Bytes(), &env); err != nil {
		return fmt.Sprintf("no envelope (exit %d)", exit), false,
			append(dmLeaks(root, "", stdout.String()+stderr.String()),
				fmt.Sprintf("inspect printed no JSON envelope (exit %d): stdout %q stderr %q", exit, dmClip(stdout.String()), dmClip(stderr.String())))
	}
	msg := ""
	if env.Error != nil {
		msg = env.Error.Message
	}
	violations = dmLeaks(root, msg, stdout.String()+stderr.String())
	var res inspectResult
	if env.Result != nil {
		_ = json.Unmarshal(env.Result, &res)
	}
	switch {
	case env.OK && res.Integrity == "verified":
		summary = fmt.Sprintf("verified %d", res.RecordCount)
		if res.RecordCount != inst.events {
			violations = append(violations, fmt.Sprintf("inspect said verified with %d records; %d events were acknowledged",
				res.RecordCount, inst.events))
		} else {
			verified = true
		}
		if res.DatabaseBinding != inst.dbID {
			violations = append(violations, fmt.Sprintf("inspect verified an archive bound to %s, not %s", res.DatabaseBinding, inst.dbID))
			verified = false
		}
	case env.OK:
		summary = fmt.Sprintf("%s %d", res.Integrity, res.RecordCount)
	case env.Error != nil:
		summary = env.Error.Code
		if res.Integrity != "" {
			summary += fmt.Sprintf(" (%s %d)", res.Integrity, res.RecordCount)
		}
		if exit == 0 {
			violations = append(violations, "inspect failed with exit status 0")
		}
	default:
		summary = "malformed envelope"
		violations = append(violations, fmt.Sprintf("inspect printed a malformed envelope: %q", dmClip(stdout.String())))
	}
	return summary, verified, violations
}

func dmClip(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 600 {
		return s[:600] + "…"
	}
	return s
}

// dmServer is a server started on a damaged installation.
type dmServer struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	api, metrics   string
	exited         chan struct{}
	exitErr        error
}

// dmStartServer starts the server and waits for its ready line or its exit.
func dmStartServer(root string) (*dmServer, bool, error) {
	cmd := exec.Command(binary, "--output", "json", "server", "run", "--config", filepath.Join(root, "riffdb.toml"))
	s := &dmServer{cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, exited: make(chan struct{})}
	pr, pw := io.Pipe()
	cmd.Stdout = s.stdout
	cmd.Stderr = io.MultiWriter(pw, s.stderr)
	if err := cmd.Start(); err != nil {
		return nil, false, err
	}
	go func() {
		s.exitErr = cmd.Wait()
		pw.Close()
		close(s.exited)
	}()
	ready := make(chan [2]string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var line struct {
				Msg           string `json:"msg"`
				Listen        string `json:"listen"`
				MetricsListen string `json:"metrics_listen"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "riffdb ready" {
				select {
				case ready <- [2]string{line.Listen, line.MetricsListen}:
				default:
				}
			}
		}
		io.Copy(io.Discard, pr)
	}()
	select {
	case a := <-ready:
		s.api, s.metrics = a[0], a[1]
		return s, true, nil
	case <-s.exited:
		return s, false, nil
	case <-time.After(dmReadyWait):
		s.kill()
		return s, false, fmt.Errorf("neither ready nor exited after %v", dmReadyWait)
	}
}

func (s *dmServer) kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
}

func (s *dmServer) exitCode() int {
	var ee *exec.ExitError
	if errors.As(s.exitErr, &ee) {
		return ee.ExitCode()
	}
	if s.exitErr != nil {
		return -1
	}
	return 0
}

func (s *dmServer) request(method, path, token string, body []byte) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dmRequestWait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+s.api+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// scrubbed reports whether the archive's background scrub has completed a
// pass since the server started (riffdb_archive_scrub_passes_total ≥ 1).
// A start trusts the archive's checkpointed prefix (archive/doc.go): damage
// inside it that no read has reached yet is found by the scrub's first
// pass, so a healthy outbox is judged only after that pass.
func (s *dmServer) scrubbed() bool {
	ctx, cancel := context.WithTimeout(context.Background(), dmRequestWait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.metrics+"/metrics", nil)
	if err != nil {
		return false
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, `riffdb_archive_scrub_passes_total{riffdb_database="default"} `); ok {
			return v != "0"
		}
	}
	return false
}

type dmStats struct {
	DatabaseID         string
	LastCommitSequence uint64
	Pending            *uint64
	Health, Reason     string
}

func (d dmStats) String() string {
	pending := "null"
	if d.Pending != nil {
		pending = fmt.Sprint(*d.Pending)
	}
	return fmt.Sprintf("%s/%s pending %s seq %d", d.Health, cmpOr(d.Reason, "-"), pending, d.LastCommitSequence)
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (s *dmServer) stats(token string) (dmStats, error) {
	code, b, err := s.request(http.MethodGet, "/v1/stats", token, nil)
	if err != nil {
		return dmStats{}, err
	}
	if code != http.StatusOK {
		return dmStats{}, fmt.Errorf("GET /v1/stats: %d %s", code, dmClip(string(b)))
	}
	var st stats
	if err := json.Unmarshal(b, &st); err != nil || len(st.Databases) != 1 {
		return dmStats{}, fmt.Errorf("GET /v1/stats: unexpected body %s", dmClip(string(b)))
	}
	d := st.Databases[0]
	return dmStats{DatabaseID: d.DatabaseID, LastCommitSequence: d.LastCommitSequence,
		Pending: d.PendingOutboxDeliveries, Health: d.Outbox.Health, Reason: d.Outbox.Reason}, nil
}

// replay resends an acknowledged command with its idempotency key and says
// what is wrong with the answer, or "".
func (s *dmServer) replay(token string, c dmCommand) string {
	body, _ := json.Marshal(map[string]any{"input": c.input, "idempotency_key": c.key})
	code, b, err := s.request(http.MethodPost, "/v1/databases/default/commands/"+c.name, token, body)
	if err != nil {
		return fmt.Sprintf("replaying %s: %v", c.key, err)
	}
	var r commandResp
	if code != http.StatusOK || json.Unmarshal(b, &r) != nil {
		return fmt.Sprintf("replaying %s (seq %d): %d %s", c.key, c.seq, code, dmClip(string(b)))
	}
	if !r.Replayed || r.CommitSequence != c.seq {
		return fmt.Sprintf("replaying %s (seq %d) answered seq %d replayed:%v", c.key, c.seq, r.CommitSequence, r.Replayed)
	}
	return ""
}

// dmRunServer starts the server on a damaged installation and judges what
// it does: outcome is the table cell, intact and refused the server's side
// of the verdict (refused names the store that refused: the damaged store
// when the server refused to start, the archive when delivery stopped, the
// primary when it stopped the server after serving; "" when none did);
// opened says that the store which refused had been accepted and opened
// for writing first (the primary served; the archive logged "archive opened
// for writing"): the damage was found later, by a read that reached it;
// violations what must not happen.
func dmRunServer(root, store string, inst *dmInstallation) (outcome string, intact bool, refused string, opened bool, violations []string) {
	s, ready, err := dmStartServer(root)
	if err != nil && s == nil {
		return "could not start: " + err.Error(), false, "", false, []string{"the server could not be started: " + err.Error()}
	}
	if err != nil {
		return "hung", false, "", false, []string{fmt.Sprintf("the server %v; stderr %q", err, dmClip(s.stderr.String()))}
	}
	defer s.kill()
	output := func() string { return s.stdout.String() + s.stderr.String() }
	if !ready {
		exit := s.exitCode()
		var env dmEnvelope
		if json.Unmarshal([]byte(s.stdout.String()), &env) != nil || env.Error == nil {
			return fmt.Sprintf("exit %d, no envelope", exit), false, "", false,
				append(dmLeaks(root, "", output()), fmt.Sprintf("the server exited %d before serving without a JSON error envelope: stdout %q stderr %q",
					exit, dmClip(s.stdout.String()), dmClip(dmTail(s.stderr.String()))))
		}
		outcome = fmt.Sprintf("exit %d %s", exit, env.Error.Code)
		violations = dmLeaks(root, env.Error.Message, output())
		switch {
		case exit == 0:
			violations = append(violations, "the server exited 0 before serving")
		case !slices.Contains(dmRefusalCodes, env.Error.Code):
			violations = append(violations, fmt.Sprintf("the server refused with code %s, which names no damage: %q", env.Error.Code, env.Error.Message))
		case store == "credentials" && env.Error.Code != "credentials_refused",
			store == "primary" && !strings.HasPrefix(env.Error.Code, "database_"):
			violations = append(violations, fmt.Sprintf("the server refused damage to the %s store with code %s: %q", store, env.Error.Code, env.Error.Message))
		default:
			refused = store
		}
		return outcome, false, refused, false, violations
	}

	// Started: wait for a steady outbox state.
	var st dmStats
	deadline := time.Now().Add(dmSteadyWait)
	for {
		st, err = s.stats(inst.token)
		if err != nil {
			select { // did it die?
			case <-s.exited:
			case <-time.After(2 * time.Second):
			}
			select {
			case <-s.exited:
				return s.diedAfterReady(root, output())
			default:
			}
			return "started; stats refused", false, "", false, append(dmLeaks(root, "", output()),
				fmt.Sprintf("the server started but %v", err))
		}
		steady := (st.Health == "healthy" && st.Pending != nil && *st.Pending == 0 && (store != "archive" || s.scrubbed())) ||
			st.Health == "stopped" ||
			((st.Health == "paused" || st.Health == "degraded") && slices.Contains(dmStopReasons, st.Reason))
		if steady || time.Now().After(deadline) {
			break
		}
		select {
		case <-s.exited:
			return s.diedAfterReady(root, output())
		case <-time.After(100 * time.Millisecond):
		}
	}
	outcome = "started; " + st.String()
	violations = dmLeaks(root, "", output())
	if st.DatabaseID != inst.dbID {
		violations = append(violations, fmt.Sprintf("the primary was silently recreated: database_id %s, was %s (last_commit_sequence %d, was %d)",
			st.DatabaseID, inst.dbID, st.LastCommitSequence, inst.lastSeq))
		return outcome, false, "", false, violations
	}
	if st.LastCommitSequence == 0 {
		violations = append(violations, fmt.Sprintf("the primary's history is empty: last_commit_sequence 0, was %d", inst.lastSeq))
		return outcome, false, "", false, violations
	}
	stoppedForDamage := st.Health == "stopped" ||
		((st.Health == "paused" || st.Health == "degraded") && slices.Contains(dmStopReasons, st.Reason))
	if stoppedForDamage {
		// Refused by the outbox: commands must still be served (the first
		// command exists in every copy, older ones included).
		if msg := s.replay(inst.token, inst.commands[0]); msg != "" {
			violations = append(violations, fmt.Sprintf("the outbox went %s/%s but commands are not served: %s", st.Health, st.Reason, msg))
			return outcome, false, "", false, violations
		}
		if st.LastCommitSequence != inst.lastSeq {
			outcome += fmt.Sprintf(" (history at %d of %d)", st.LastCommitSequence, inst.lastSeq)
		}
		opened := strings.Contains(s.stderr.String(), `"msg":"archive opened for writing"`)
		if opened {
			outcome += " after the archive was opened"
		}
		return outcome, false, "archive", opened, violations
	}
	if st.Health != "healthy" || st.Pending == nil || *st.Pending != 0 {
		violations = append(violations, fmt.Sprintf("after %v the outbox is %s: neither healthy with nothing pending nor stopped for a named damage", dmSteadyWait, st))
		return outcome, false, "", false, violations
	}
	if st.LastCommitSequence != inst.lastSeq {
		violations = append(violations, fmt.Sprintf("a rolled-back history reported healthy: last_commit_sequence %d, was %d", st.LastCommitSequence, inst.lastSeq))
		return outcome, false, "", false, violations
	}
	n := len(inst.commands)
	for _, i := range []int{0, 1, n / 3, n/2 - 1, n / 2, 2 * n / 3, n - 2, n - 1} {
		if msg := s.replay(inst.token, inst.commands[i]); msg != "" {
			violations = append(violations, "an acknowledged command is lost: "+msg)
		}
	}
	if len(violations) > 0 {
		return outcome, false, "", false, violations
	}
	// Intact so far: it must also stop cleanly (the archive is inspected
	// again afterwards).
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(dmReadyWait):
		return outcome + "; no clean stop", false, "", false, []string{fmt.Sprintf("the server did not stop within %v of SIGTERM", dmReadyWait)}
	}
	if code := s.exitCode(); code != 0 {
		return outcome + fmt.Sprintf("; stop exit %d", code), false, "", false, append(dmLeaks(root, "", output()),
			fmt.Sprintf("the server exited %d on SIGTERM: stdout %q; last log lines %q", code, dmClip(s.stdout.String()), dmClip(dmTail(s.stderr.String()))))
	}
	return outcome, true, "", false, dmLeaks(root, "", output())
}

// diedAfterReady judges a server that exited after it had started serving.
func (s *dmServer) diedAfterReady(root, output string) (string, bool, string, bool, []string) {
	code := "no envelope"
	msg := ""
	var env dmEnvelope
	if json.Unmarshal([]byte(s.stdout.String()), &env) == nil && env.Error != nil {
		code, msg = env.Error.Code, env.Error.Message
	}
	outcome := fmt.Sprintf("started, then exit %d %s", s.exitCode(), code)
	if code == "database_corrupt" {
		// Pebble verifies a table block's checksum when it reads the
		// block, not at open (a full check would read every table at
		// every start): damage inside a table is found by the first read
		// that reaches it. The store then fails and the server stops with
		// the damage's code: a loud stop, not a loss.
		if leaks := dmLeaks(root, msg, output); len(leaks) > 0 {
			return outcome, false, "", false, leaks
		}
		return outcome, false, "primary", true, nil
	}
	return outcome, false, "", false, append(dmLeaks(root, msg, output),
		fmt.Sprintf("the server served, then exited %d (%s %q); last log lines %q", s.exitCode(), code, msg, dmClip(dmTail(s.stderr.String()))))
}

// dmTail returns the last error-level log lines of a server's stderr, or
// its last lines when it logged no error.
func dmTail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	var errs []string
	for _, l := range lines {
		if strings.Contains(l, `"level":"error"`) || strings.Contains(l, `"level":"fatal"`) {
			errs = append(errs, l)
		}
	}
	if len(errs) > 0 {
		lines = errs
	}
	return strings.Join(lines[max(0, len(lines)-3):], "\n")
}

// dmFullValidation is the configuration line that makes every start
// validate every record of the archive (a last full validation is always
// older than a millisecond): an operator's way to have each start decide on
// the whole archive, not on the records beyond its checkpoint.
const dmFullValidation = "full_validation_interval = \"1ms\"\n"

// dmRun runs one case on a fresh copy of the installation.
//
// An archive that the default configuration accepts at the start and that
// stops delivery only when the scrub later reaches the damage (a flipped
// byte in an old table, inside the validated prefix the start trusts for
// full_validation_interval) was opened for writing and written to by then.
// Such a case is run once more on a fresh copy with dmFullValidation: that
// start must refuse the archive on its read-only view, before opening it
// for writing, and leave every file of it exactly as the damage left it.
func dmRun(t *testing.T, inst *dmInstallation, c dmCase) dmResult {
	r := dmAttempt(inst, c, "")
	if !r.afterOpen || r.compared != "archive" || len(r.violations) > 0 {
		return r
	}
	full := dmAttempt(inst, c, dmFullValidation)
	r.fullValidation = "with full validation due: " + full.server
	switch {
	case len(full.violations) > 0:
		r.violations = full.violations
	case full.compared != "archive" || full.afterOpen:
		r.violations = []string{"with full validation due, the start did not refuse the archive before opening it for writing: " + full.server}
	default:
		r.wholeAfterOpen = true
	}
	if len(r.violations) > 0 {
		r.verdict = "VIOLATION"
	}
	return r
}

// dmAttempt runs one case on a fresh copy of the installation, with extra
// appended to its [maintenance.outbox] section.
func dmAttempt(inst *dmInstallation, c dmCase, extra string) dmResult {
	r := dmResult{dmCase: c}
	if c.na != "" {
		r.inspect, r.server, r.verdict = "-", "-", "n/a: "+c.na
		return r
	}
	root, err := dmRelocate(inst.root)
	if root != "" {
		defer os.RemoveAll(root)
	}
	if err == nil && extra != "" {
		err = dmConfigure(root, extra)
	}
	if err == nil {
		err = c.apply(root)
	}
	if err != nil {
		r.inspect, r.server, r.verdict = "-", "-", "ERROR"
		r.violations = []string{"preparing the case: " + err.Error()}
		return r
	}
	// Every store as the damage left it, before inspect and the server
	// touch anything: a store that refuses must be left exactly so.
	before := map[string]treestate.State{}
	for name, dir := range dmStoreDirs {
		if before[name], err = treestate.Take(filepath.Join(root, dir)); err != nil {
			r.inspect, r.server, r.verdict = "-", "-", "ERROR"
			r.violations = []string{"recording the store: " + err.Error()}
			return r
		}
	}
	var verified, intact, opened bool
	var refused string
	var iv, sv []string
	r.inspect, verified, iv = dmInspect(root, inst)
	r.server, intact, refused, opened, sv = dmRunServer(root, c.store, inst)
	r.violations = append(iv, sv...)
	switch {
	case refused != "" && !opened:
		r.compared = refused
		r.violations = append(r.violations, dmAsFound(root, refused, before[refused], "")...)
	case refused != "":
		// Accepted at open, then stopped by a read that reached the
		// damage (the scrub, a table read): the store was live and wrote
		// (its replayed WAL, deliveries); the damaged file must be as the
		// damage left it.
		r.compared, r.afterOpen = refused, true
		r.violations = append(r.violations, dmAsFound(root, refused, before[refused], c.rel)...)
	}
	switch {
	case len(r.violations) > 0:
		r.verdict = "VIOLATION"
	case refused != "":
		r.verdict = "refused"
	case intact && verified:
		// The server must not have made it worse: inspect once more.
		after, again, av := dmInspect(root, inst)
		if !again || len(av) > 0 {
			r.inspect += "; after the server: " + after
			r.verdict = "VIOLATION"
			r.violations = append(av, "inspect verified the archive before the server ran but says "+after+" after it stopped")
			break
		}
		r.verdict = "intact"
	case intact && r.inspect == "archive_refused":
		// Inspect refused to take custody (a store without its LOCK
		// file: a read-only inspection never creates one, and without
		// it cannot prove that no server holds the store). That is a
		// refusal, not a verdict; the server's open recreates LOCK, which
		// holds no data, so the archive must verify after the server.
		after, again, av := dmInspect(root, inst)
		r.inspect += "; after the server: " + after
		if !again || len(av) > 0 {
			r.verdict = "VIOLATION"
			r.violations = append(av, "inspect refused custody before the server ran and says "+after+" after it stopped")
			break
		}
		r.verdict = "intact"
	case intact:
		r.verdict = "VIOLATION"
		r.violations = []string{fmt.Sprintf("the server reports everything intact and delivery healthy, but inspect says %s", r.inspect)}
	default:
		r.verdict = "VIOLATION"
		r.violations = []string{"neither intact nor refused"}
	}
	return r
}

func dmTable(results []dmResult) string {
	var b strings.Builder
	b.WriteString("| store | file kind | file | damage | inspect | server outcome | verdict |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	for _, r := range results {
		damage := r.damage
		if r.note != "" {
			damage += " (" + r.note + ")"
		}
		verdict := r.verdict
		if len(r.violations) > 0 {
			verdict = "**" + verdict + "**: " + strings.Join(r.violations, "; ")
		}
		server := r.server
		if r.fullValidation != "" {
			server += "; " + r.fullValidation
		}
		fmt.Fprintf(&b, "| %s | %s | `%s` | %s | %s | %s | %s |\n", r.store, cell(r.kind), r.file, cell(damage),
			cell(r.inspect), cell(server), cell(verdict))
	}
	return b.String()
}

// TestDamageMatrix damages every kind of file of every store of a real
// installation in every way and requires each damage to end intact or
// refused; see the comment at the top of this file.
func TestDamageMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the damage campaign: every file of every store damaged, inspected and started")
	}
	began := time.Now()
	inst := buildDamageInstallation(t)
	cases := dmCases(t, inst)
	t.Logf("installation built in %v: %d commands, %d events, last_commit_sequence %d, database %s; %d cases",
		time.Since(began).Round(time.Millisecond), len(inst.commands), inst.events, inst.lastSeq, inst.dbID, len(cases))

	results := make([]dmResult, len(cases))
	sem := make(chan struct{}, dmParallel)
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i] = dmRun(t, inst, c)
		}()
	}
	wg.Wait()

	table := dmTable(results)
	t.Logf("damage matrix (%v):\n%s", time.Since(began).Round(time.Millisecond), table)
	counts := map[string]int{}
	var bad []string
	var compared, changed, afterOpen, whole int
	for _, r := range results {
		if r.afterOpen {
			afterOpen++
		}
		if r.wholeAfterOpen {
			whole++
		}
		if r.compared != "" {
			compared++
			if slices.ContainsFunc(r.violations, func(v string) bool { return strings.Contains(v, "refused the damage but was changed") }) {
				changed++
			}
		}
		v := r.verdict
		if strings.HasPrefix(v, "n/a") {
			v = "n/a"
		}
		counts[v]++
		if len(r.violations) > 0 {
			bad = append(bad, fmt.Sprintf("%s %s %s: %s", r.store, r.file, r.damage, strings.Join(r.violations, "; ")))
		}
	}
	summary := fmt.Sprintf("%d cases: %d intact, %d refused, %d n/a, %d VIOLATION.", len(results),
		counts["intact"], counts["refused"], counts["n/a"], counts["VIOLATION"])
	summary += fmt.Sprintf(" Every store that refused was compared file by file with how the damage left it "+
		"(names, sizes, modes, contents): %d compared, %d changed; of those, %d refused only after the store was "+
		"accepted and opened for writing (damage found later by a read that reached it), for which the damaged file was compared; "+
		"%d of those were run again with full validation due (%s) and refused before the store was opened for writing, "+
		"with the whole store as found.",
		compared, changed, afterOpen, whole, strings.TrimSpace(dmFullValidation))
	t.Log(summary)
	if path := os.Getenv("RIFFDB_DAMAGE_REPORT"); path != "" {
		must(t, os.WriteFile(path, []byte(table+"\n"+summary+"\n"), 0o644))
	}
	if len(bad) > 0 {
		t.Errorf("%d damage cases violate fail-closed:\n%s", len(bad), strings.Join(bad, "\n"))
	}
}
