package cli_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/riffdb/riffdb/backupapi"
	"github.com/riffdb/riffdb/cli"
	"github.com/riffdb/riffdb/statsapi"
)

// backupAPI is a stand-in for the server's backup routes: it records the
// requests and answers with handler.
type backupAPI struct {
	*httptest.Server
	requests []string
}

func newFakeBackupAPI(t *testing.T, handler http.HandlerFunc) *backupAPI {
	t.Helper()
	a := &backupAPI{}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.requests = append(a.requests, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		handler(w, r)
	}))
	t.Cleanup(a.Close)
	return a
}

func writeTokenFile(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(f, []byte("riffdb_secret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// runJSON runs riffdb with --output json and decodes its one envelope.
func runJSON(t *testing.T, args ...string) (int, capEnvelope, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := cli.Main(append([]string{"--output", "json"}, args...), strings.NewReader(""), &stdout, &stderr)
	var env capEnvelope
	if err := json.Unmarshal(stdout.Bytes(), &env); err != nil || strings.Count(stdout.String(), "\n") != 1 {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout.String())
	}
	if env.Schema != cli.Schema || !strings.HasPrefix(env.Command, "database.") {
		t.Fatalf("envelope %+v", env)
	}
	return code, env, stderr.String()
}

func TestDatabaseBackupCallsTheAPI(t *testing.T) {
	created := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	info := backupapi.Info{Name: "20300102T030405.000000000Z", DatabaseID: strings.Repeat("ab", 16), HistoryIncarnation: 2,
		LastCommitSequence: 42, CreatedAt: created, FileCount: 7, Bytes: 4096}
	api := newFakeBackupAPI(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPost:
			_ = json.NewEncoder(w).Encode(backupapi.Response{Database: "orders", Backup: info})
		default:
			_ = json.NewEncoder(w).Encode(backupapi.ListResponse{Database: "orders", Backups: []backupapi.Info{info}})
		}
	})
	tok := writeTokenFile(t)

	code, env, _ := runJSON(t, "database", "backup", "--database", "orders", "--address", api.URL, "--token-file", tok)
	if code != cli.ExitOK || !env.OK || env.Command != "database.backup" {
		t.Fatalf("backup: %d %+v", code, env)
	}
	var got backupapi.Response
	if err := json.Unmarshal(env.Result, &got); err != nil || got.Backup != info || got.Database != "orders" {
		t.Fatalf("backup result %s (%v), want %+v", env.Result, err, info)
	}
	code, env, _ = runJSON(t, "database", "backup", "list", "--database", "orders", "--address", api.URL, "--token-file", tok)
	if code != cli.ExitOK || !env.OK || env.Command != "database.backup.list" {
		t.Fatalf("backup list: %d %+v", code, env)
	}
	var list backupapi.ListResponse
	if err := json.Unmarshal(env.Result, &list); err != nil || len(list.Backups) != 1 || list.Backups[0] != info {
		t.Fatalf("backup list result %s (%v)", env.Result, err)
	}
	want := []string{"POST /v1/databases/orders/backups Bearer riffdb_secret-token", "GET /v1/databases/orders/backups Bearer riffdb_secret-token"}
	if strings.Join(api.requests, "\n") != strings.Join(want, "\n") {
		t.Fatalf("requests:\n%s\nwant:\n%s", strings.Join(api.requests, "\n"), strings.Join(want, "\n"))
	}

	// Text output.
	var stdout, stderr bytes.Buffer
	if code := cli.Main([]string{"database", "backup", "list", "--database", "orders", "--address", api.URL, "--token-file", tok},
		strings.NewReader(""), &stdout, &stderr); code != cli.ExitOK {
		t.Fatalf("text list: %d %s", code, stderr.String())
	}
	if out := stdout.String(); !strings.Contains(out, "NAME") || !strings.Contains(out, info.Name) || !strings.Contains(out, "2030-01-02T03:04:05Z") {
		t.Fatalf("text list:\n%s", out)
	}
}

// TestDatabaseBackupRefusals: the server's refusal codes reach the
// envelope as they are (401 and 403 as unauthenticated and forbidden);
// a timed-out backup has an unknown outcome (exit 3).
func TestDatabaseBackupRefusals(t *testing.T) {
	tok := writeTokenFile(t)
	for _, c := range []struct {
		status         int
		code, wantCode string
	}{
		{http.StatusConflict, "backup_root_not_configured", "backup_root_not_configured"},
		{http.StatusConflict, "backup_in_progress", "backup_in_progress"},
		{http.StatusNotFound, "unknown_database", "unknown_database"},
		{http.StatusForbidden, "forbidden", "forbidden"},
		{http.StatusUnauthorized, "unauthenticated", "unauthenticated"},
		{http.StatusInternalServerError, "Not A Code!", "http_500"},
	} {
		api := newFakeBackupAPI(t, func(w http.ResponseWriter, _ *http.Request) {
			statsapi.WriteError(w, c.status, c.code, "the message of "+c.code)
		})
		for _, args := range [][]string{{"database", "backup"}, {"database", "backup", "list"}} {
			code, env, _ := runJSON(t, append(args, "--database", "orders", "--address", api.URL, "--token-file", tok)...)
			if code != cli.ExitPublic || env.OK || env.Error == nil || env.Error.Code != c.wantCode || env.Error.Kind != "public" ||
				!strings.Contains(env.Error.Message, "the message of") {
				t.Errorf("%v answered %d %s: exit %d %+v, want code %s", args, c.status, c.code, code, env.Error, c.wantCode)
			}
		}
	}

	release := make(chan struct{})
	slow := newFakeBackupAPI(t, func(http.ResponseWriter, *http.Request) { <-release })
	t.Cleanup(func() { close(release) }) // before slow.Close, which waits for its handlers
	code, env, _ := runJSON(t, "database", "backup", "--database", "orders", "--address", slow.URL, "--token-file", tok, "--timeout", "100ms")
	if code != cli.ExitUncertain || env.Error == nil || env.Error.Code != "outcome_unknown" || !strings.Contains(env.Error.Message, "backup list") {
		t.Fatalf("timed-out backup: exit %d %+v", code, env.Error)
	}

	if code, env, _ := runJSON(t, "database", "backup", "--address", slow.URL, "--token-file", tok); code != cli.ExitLocal || env.Error.Code != "usage" {
		t.Fatalf("backup without --database: exit %d %+v", code, env.Error)
	}
	if code, env, _ := runJSON(t, "database", "backup", "--database", "orders", "--address", "127.0.0.1:1", "--token-file", tok); code != cli.ExitPublic || env.Error.Code != "unreachable" {
		t.Fatalf("backup of an unreachable server: exit %d %+v", code, env.Error)
	}
}
