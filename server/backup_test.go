package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/backup"
	"github.com/riffdb/riffdb/backupapi"
	"github.com/riffdb/riffdb/capability"
	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/primary"
	"github.com/riffdb/riffdb/statsapi"
)

// backupServer is a running server with database "a" (backup_root set) and
// database "b" (none), and tokens by name.
type backupServer struct {
	*Server
	root   string
	tokens map[string]string
	logs   *lockedBuffer
}

// extra lines go into [databases.a] (backup limits).
func newBackupServer(t *testing.T, rootMode os.FileMode, extra ...string) *backupServer {
	t.Helper()
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(root, 0o700))
	must(os.WriteFile(filepath.Join(root, "contract.toml"), []byte(apiContract), 0o600))
	must(os.Mkdir(filepath.Join(root, "backups"), rootMode))
	must(os.Chmod(filepath.Join(root, "backups"), rootMode))
	doc := fmt.Sprintf(`
[server]
listen = "127.0.0.1:0"
metrics_listen = "127.0.0.1:0"
credential_path = %q
[databases.a]
path = %q
contract = %q
backup_root = %q
%s
[databases.b]
path = %q
contract = %q
`, root+"/creds", root+"/a", root+"/contract.toml", root+"/backups", strings.Join(extra, "\n"), root+"/b", root+"/contract.toml")
	cfg, err := config.Parse([]byte(doc), nil, config.Overrides{})
	must(err)
	creds, err := capability.Open(cfg.Server.CredentialPath)
	must(err)
	tokens := map[string]string{}
	for _, c := range []struct {
		name  string
		perms []capability.Permission
		db    string
	}{
		{"global", []capability.Permission{capability.ManageBackups}, ""},
		{"scoped-a", []capability.Permission{capability.ManageBackups}, "a"},
		{"scoped-b", []capability.Permission{capability.ManageBackups}, "b"},
		{"commands", []capability.Permission{capability.ExecuteCommands, capability.ReadStatistics, capability.ReadHealth}, ""},
	} {
		tok, _, err := creds.Create(c.name, c.perms, c.db)
		must(err)
		tokens[c.name] = tok
	}
	logs := &lockedBuffer{}
	s, err := New(context.Background(), Options{Config: cfg, LogOutput: logs})
	must(err)
	must(s.Start(context.Background()))
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return &backupServer{Server: s, root: root, tokens: tokens, logs: logs}
}

// call sends method to /v1/databases/{alias}/backups with the named token
// ("" for none) and returns the status, the error code (if any) and the
// body.
func (b *backupServer) call(t *testing.T, method, alias, token string) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+b.APIAddr()+"/v1/databases/"+alias+"/backups", nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+b.tokens[token])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var eb struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.Unmarshal(body, &eb)
	return resp.StatusCode, eb.Error.Code, body
}

func (b *backupServer) commit(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		if _, err := b.database("a").db.Execute(context.Background(), "put", json.RawMessage(fmt.Sprintf(`{"k":"%d"}`, i)), ""); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBackupAPI: POST takes a backup of the database and answers its
// summary; GET lists it; a scoped capability works for its own database.
func TestBackupAPI(t *testing.T) {
	b := newBackupServer(t, 0o700)
	b.commit(t, 5)
	code, errCode, body := b.call(t, http.MethodPost, "a", "global")
	if code != http.StatusOK {
		t.Fatalf("POST backups: %d %s %s", code, errCode, body)
	}
	var created backupapi.Response
	if err := json.Unmarshal(body, &created); err != nil {
		t.Fatal(err)
	}
	id := b.database("a").db.Identity().String()
	got := created.Backup
	if created.Database != "a" || got.Name == "" || got.DatabaseID != id || got.HistoryIncarnation != 1 ||
		got.LastCommitSequence != 5 || got.FileCount == 0 || got.Bytes <= 0 || got.CreatedAt.IsZero() {
		t.Fatalf("POST backups answered %s", body)
	}
	if strings.Contains(string(body), b.root) {
		t.Fatalf("the answer names a path: %s", body)
	}
	if _, err := os.Stat(filepath.Join(b.root, "backups", got.Name)); err != nil {
		t.Fatalf("the backup is not under backup_root as %s: %v", got.Name, err)
	}

	code, errCode, body = b.call(t, http.MethodGet, "a", "scoped-a")
	if code != http.StatusOK {
		t.Fatalf("GET backups: %d %s %s", code, errCode, body)
	}
	var list backupapi.ListResponse
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	if list.Database != "a" || len(list.Backups) != 1 || list.Backups[0] != got {
		t.Fatalf("GET backups = %s, want the one backup %+v", body, got)
	}

	metrics := scrapeMetrics(t, b.Server)
	if want := `riffdb_backup_duration_seconds_count{result="ok",riffdb_database="a"} 1`; !strings.Contains(metrics, want) {
		t.Errorf("the scrape lacks %s:\n%s", want, backupLines(metrics, "riffdb_backup"))
	}
}

// TestBackupAPIRefusals: authentication and permission before the
// database; manage_backups global or scoped to that database only; an
// unknown alias is 404 as for commands; a database without backup_root is
// 409 backup_root_not_configured.
func TestBackupAPIRefusals(t *testing.T) {
	b := newBackupServer(t, 0o700)
	for _, method := range []string{http.MethodPost, http.MethodGet} {
		for _, c := range []struct {
			what, alias, token string
			status             int
			code               string
		}{
			{"no token", "a", "", http.StatusUnauthorized, "unauthenticated"},
			{"no manage_backups", "a", "commands", http.StatusForbidden, "forbidden"},
			{"scoped to another database", "a", "scoped-b", http.StatusForbidden, "forbidden"},
			{"scoped, unknown database", "nosuch", "scoped-a", http.StatusForbidden, "forbidden"},
			{"unknown database", "nosuch", "global", http.StatusNotFound, "unknown_database"},
			{"no backup_root", "b", "global", http.StatusConflict, "backup_root_not_configured"},
			{"no backup_root, scoped", "b", "scoped-b", http.StatusConflict, "backup_root_not_configured"},
		} {
			status, code, body := b.call(t, method, c.alias, c.token)
			if status != c.status || code != c.code {
				t.Errorf("%s %s: %d %s %s, want %d %s", method, c.what, status, code, body, c.status, c.code)
			}
			if strings.Contains(string(body), b.root) {
				t.Errorf("%s %s: the answer names a path: %s", method, c.what, body)
			}
		}
	}
	if entries, err := os.ReadDir(filepath.Join(b.root, "backups")); err != nil || len(entries) != 0 {
		t.Fatalf("refused requests left %d entries under backup_root (%v)", len(entries), err)
	}
}

// TestBackupRootUnusable: a backup_root that is not private is refused
// (409 backup_root_unusable) without naming it, for POST and GET.
func TestBackupRootUnusable(t *testing.T) {
	b := newBackupServer(t, 0o755)
	for _, method := range []string{http.MethodPost, http.MethodGet} {
		status, code, body := b.call(t, method, "a", "global")
		if status != http.StatusConflict || code != "backup_root_unusable" || strings.Contains(string(body), b.root) {
			t.Errorf("%s with a 0755 backup_root: %d %s %s, want 409 backup_root_unusable without a path", method, status, code, body)
		}
	}
	metrics := scrapeMetrics(t, b.Server)
	if want := `riffdb_backup_duration_seconds_count{result="root_unusable",riffdb_database="a"} 1`; !strings.Contains(metrics, want) {
		t.Errorf("the scrape lacks %s:\n%s", want, backupLines(metrics, "riffdb_backup"))
	}
}

// TestOneBackupAtATime: while a backup of a database runs, a second request
// for it is refused with 409 backup_in_progress; commands keep being
// acknowledged; once it ends, the next backup runs.
func TestOneBackupAtATime(t *testing.T) {
	b := newBackupServer(t, 0o700, `backup_min_interval = "0s"`)
	api := b.Server.newBackupAPI(statsapi.NewFailureLog(b.log, nil, 0))
	entered, release := make(chan struct{}), make(chan struct{})
	api.Create = func(ctx context.Context, db *primary.DB, root string, opts backup.Options) (backup.Manifest, error) {
		close(entered)
		<-release
		return backup.Create(ctx, db, root, opts)
	}
	serve := func(alias string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/v1/databases/"+alias+"/backups", nil)
		req.SetPathValue("alias", alias)
		req.Header.Set("Authorization", "Bearer "+b.tokens["global"])
		rec := httptest.NewRecorder()
		api.HandleCreate(rec, req)
		return rec
	}
	first := make(chan *httptest.ResponseRecorder)
	go func() { first <- serve("a") }()
	<-entered
	if rec := serve("a"); rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), `"backup_in_progress"`) {
		t.Fatalf("second backup while one runs: %d %s", rec.Code, rec.Body.String())
	}
	b.commit(t, 3) // commands are acknowledged meanwhile
	close(release)
	if rec := <-first; rec.Code != http.StatusOK {
		t.Fatalf("the first backup: %d %s", rec.Code, rec.Body.String())
	}
	api.Create = backup.Create
	if rec := serve("a"); rec.Code != http.StatusOK {
		t.Fatalf("a backup after the first ended: %d %s", rec.Code, rec.Body.String())
	}
}

func TestBackupRouteName(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/databases/a/backups":          "POST /v1/databases/{alias}/backups",
		"/v1/databases/a/commands/backups": "POST /v1/databases/{alias}/commands/{command}",
		"/v1/databases/a/backups/x":        "POST /v1/databases/{alias}/commands/{command}",
	} {
		req := httptest.NewRequest(http.MethodPost, path, nil)
		if got := spanName(req); got != want {
			t.Errorf("spanName(POST %s) = %q, want %q", path, got, want)
		}
	}
}

func backupLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
