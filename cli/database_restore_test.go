package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/backup"
	"github.com/riffdb/riffdb/cli"
	"github.com/riffdb/riffdb/primary"
	"github.com/riffdb/riffdb/primary/contract"
)

const restoreContract = `
[commands.put]
input = { x = "int" }
emits = ["put"]
`

// restoreFixture is a configuration with database "orders" (a
// backup_root) and "billing" (none), both under a directory whose name
// the tests look for in every output.
type restoreFixture struct {
	base, config, dbPath, root string
	opts                       primary.Options
}

func newRestoreFixture(t *testing.T) restoreFixture {
	t.Helper()
	base := filepath.Join(t.TempDir(), "riff-secret")
	f := restoreFixture{base: base, config: filepath.Join(base, "riffdb.toml"), dbPath: filepath.Join(base, "orders"),
		root: filepath.Join(base, "backups")}
	for _, d := range []string{base, f.root} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "contract.toml"), []byte(restoreContract), 0o600); err != nil {
		t.Fatal(err)
	}
	doc := fmt.Sprintf(`[server]
credential_path = %q

[databases.orders]
path = %q
contract = %q
backup_root = %q

[databases.billing]
path = %q
contract = %q
`, base+"/credentials", f.dbPath, base+"/contract.toml", f.root, base+"/billing", base+"/contract.toml")
	if err := os.WriteFile(f.config, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := contract.Compile([]byte(restoreContract))
	if err != nil {
		t.Fatal(err)
	}
	f.opts = primary.Options{Alias: "orders", Path: f.dbPath, Contract: c}
	return f
}

func (f restoreFixture) open(t *testing.T) *primary.DB {
	t.Helper()
	db, err := primary.Open(context.Background(), f.opts)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func put(t *testing.T, db *primary.DB, n int) {
	t.Helper()
	for i := range n {
		if _, err := db.Execute(context.Background(), "put", json.RawMessage(fmt.Sprintf(`{"x":%d}`, i)), ""); err != nil {
			t.Fatal(err)
		}
	}
}

// backupOf commits 3 commands, backs the database up, commits 2 more and
// closes it; it returns the backup's name.
func (f restoreFixture) backupOf(t *testing.T) string {
	t.Helper()
	db := f.open(t)
	put(t, db, 3)
	m, err := backup.Create(context.Background(), db, f.root, backup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	put(t, db, 2)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return m.Name
}

// restoreRun runs `riffdb --output json database restore` and checks that
// nothing of the fixture's paths appears in the output.
func (f restoreFixture) restoreRun(t *testing.T, args ...string) (int, capEnvelope) {
	t.Helper()
	code, env, stderr := runJSON(t, append([]string{"database", "restore", "--config", f.config}, args...)...)
	if out, _ := json.Marshal(env); strings.Contains(string(out)+stderr, "riff-secret") {
		t.Fatalf("the output names a path: %s %s", out, stderr)
	}
	return code, env
}

func TestDatabaseRestore(t *testing.T) {
	f := newRestoreFixture(t)
	name := f.backupOf(t)
	code, env := f.restoreRun(t, "--database", "orders", "--backup", name)
	if code != cli.ExitOK || !env.OK || env.Command != "database.restore" {
		t.Fatalf("restore: exit %d %+v", code, env)
	}
	var res struct {
		Database            string `json:"database"`
		Backup              string `json:"backup"`
		PreviousIncarnation uint64 `json:"previous_incarnation"`
		HistoryIncarnation  uint64 `json:"history_incarnation"`
		LastCommitSequence  uint64 `json:"last_commit_sequence"`
		ReplacedAs          string `json:"replaced_as"`
	}
	if err := json.Unmarshal(env.Result, &res); err != nil {
		t.Fatal(err)
	}
	if res.Database != "orders" || res.Backup != name || res.PreviousIncarnation != 1 || res.HistoryIncarnation != 2 ||
		res.LastCommitSequence != 3 || res.ReplacedAs == "" {
		t.Fatalf("restore result %s", env.Result)
	}
	if _, err := os.Stat(filepath.Join(f.root, res.ReplacedAs)); err != nil {
		t.Fatalf("the replaced data is not under backup_root as %s: %v", res.ReplacedAs, err)
	}
	db := f.open(t)
	if db.Incarnation() != 2 || db.LastCommitSequence() != 3 {
		t.Fatalf("the restored database has incarnation %d and last commit %d, want 2 and 3", db.Incarnation(), db.LastCommitSequence())
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// Text mode: the second restore gives incarnation 3.
	var stdout, stderr bytes.Buffer
	if code := cli.Main([]string{"database", "restore", "--config", f.config, "--database", "orders", "--backup", name},
		strings.NewReader(""), &stdout, &stderr); code != cli.ExitOK {
		t.Fatalf("text restore: exit %d %s", code, stderr.String())
	}
	if out := stdout.String(); !strings.Contains(out, "history incarnation 3 (was 2)") || !strings.Contains(out, "moved aside") {
		t.Fatalf("text restore printed:\n%s", out)
	}
}

// TestDatabaseRestoreRefusals: every refusal has its own code and kind.
func TestDatabaseRestoreRefusals(t *testing.T) {
	f := newRestoreFixture(t)
	name := f.backupOf(t)
	check := func(what string, wantExit int, wantCode string, args ...string) {
		t.Helper()
		code, env := f.restoreRun(t, args...)
		if code != wantExit || env.OK || env.Error == nil || env.Error.Code != wantCode {
			t.Errorf("%s: exit %d %+v, want exit %d code %s", what, code, env.Error, wantExit, wantCode)
		}
	}
	db := f.open(t)
	check("database held", cli.ExitLocal, "database_busy", "--database", "orders", "--backup", name)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	check("unknown database", cli.ExitLocal, "unknown_database", "--database", "shipping", "--backup", name)
	check("no backup_root", cli.ExitLocal, "backup_root_not_configured", "--database", "billing", "--backup", name)
	check("unknown backup", cli.ExitLocal, "backup_not_found", "--database", "orders", "--backup", "backup-none")
	check("invalid name", cli.ExitLocal, "backup_name_invalid", "--database", "orders", "--backup", "../"+name)
	check("no --backup", cli.ExitLocal, "usage", "--database", "orders")

	manifest := filepath.Join(f.root, name, "manifest.json")
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(manifest, bytes.Replace(data, []byte(`"format": 1`), []byte(`"format": 9`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	check("damaged manifest", cli.ExitPublic, "backup_damaged", "--database", "orders", "--backup", name)
	if err := os.WriteFile(manifest, data, 0o600); err != nil {
		t.Fatal(err)
	}

	if err := os.Chmod(f.root, 0o750); err != nil {
		t.Fatal(err)
	}
	check("backup_root not private", cli.ExitLocal, "backup_root_unusable", "--database", "orders", "--backup", name)
	if err := os.Chmod(f.root, 0o700); err != nil {
		t.Fatal(err)
	}
	if code, env := f.restoreRun(t, "--database", "orders", "--backup", name); code != cli.ExitOK {
		t.Fatalf("the backup no longer restores after the refusals: %+v", env.Error)
	}
}
