package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riffdb/riffdb/backup"
	"github.com/riffdb/riffdb/backupapi"
	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/primary"
	"github.com/riffdb/riffdb/statsapi"
)

// fakeNow is a clock for backupAPI.now that tests move.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeNow) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeNow) set(t time.Time) {
	f.mu.Lock()
	f.t = t
	f.mu.Unlock()
}

// serveBackup sends POST /v1/databases/alias/backups with the named token
// ("" for none) straight to api.
func (b *backupServer) serveBackup(api *backupapi.API, alias, token string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/v1/databases/"+alias+"/backups", nil)
	req.SetPathValue("alias", alias)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+b.tokens[token])
	}
	rec := httptest.NewRecorder()
	api.HandleCreate(rec, req)
	return rec
}

// TestBackupRateLimit: within backup_min_interval of the last backup's
// start, a backup request gets 429 backup_rate_limited with Retry-After in
// whole seconds, rounded up. Requests refused before a backup starts (no
// token, wrong scope, 409 while one runs, 429) do not restart the
// interval; a failed backup does.
func TestBackupRateLimit(t *testing.T) {
	b := newBackupServer(t, 0o700, `backup_min_interval = "1m"`)
	api := b.Server.newBackupAPI(statsapi.NewFailureLog(b.log, nil, 0))
	t0 := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
	clk := &fakeNow{t: t0}
	api.Now = clk.now
	code := func(rec *httptest.ResponseRecorder) string {
		var eb statsapi.ErrorBody
		_ = json.Unmarshal(rec.Body.Bytes(), &eb)
		return eb.Error.Code
	}

	// Refused before starting: nothing is consumed.
	if rec := b.serveBackup(api, "a", ""); rec.Code != http.StatusUnauthorized {
		t.Fatalf("no token: %d %s", rec.Code, rec.Body)
	}
	if rec := b.serveBackup(api, "a", "scoped-b"); rec.Code != http.StatusForbidden {
		t.Fatalf("other scope: %d %s", rec.Code, rec.Body)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	api.Create = func(ctx context.Context, db *primary.DB, root string, opts backup.Options) (backup.Manifest, error) {
		close(entered)
		<-release
		return backup.Create(ctx, db, root, opts)
	}
	first := make(chan *httptest.ResponseRecorder)
	go func() { first <- b.serveBackup(api, "a", "scoped-a") }()
	<-entered
	clk.set(t0.Add(30 * time.Second))
	if rec := b.serveBackup(api, "a", "global"); rec.Code != http.StatusConflict || code(rec) != "backup_in_progress" {
		t.Fatalf("while one runs: %d %s", rec.Code, rec.Body)
	}
	close(release)
	if rec := <-first; rec.Code != http.StatusOK {
		t.Fatalf("first backup: %d %s", rec.Code, rec.Body)
	}
	api.Create = backup.Create

	clk.set(t0.Add(58*time.Second + 500*time.Millisecond))
	rec := b.serveBackup(api, "a", "global")
	if rec.Code != http.StatusTooManyRequests || code(rec) != "backup_rate_limited" || rec.Header().Get("Retry-After") != "2" {
		t.Fatalf("1.5 s before the interval ends: %d Retry-After %q %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	if !strings.Contains(rec.Body.String(), "backup_min_interval") || strings.Contains(rec.Body.String(), b.root) {
		t.Fatalf("429 message: %s", rec.Body)
	}
	// The 409 at 30 s and the 429 did not restart the interval.
	clk.set(t0.Add(time.Minute))
	if rec := b.serveBackup(api, "a", "global"); rec.Code != http.StatusOK {
		t.Fatalf("once the interval passed: %d %s", rec.Code, rec.Body)
	}

	// A backup that fails counts.
	clk.set(t0.Add(3 * time.Minute))
	api.Create = func(context.Context, *primary.DB, string, backup.Options) (backup.Manifest, error) {
		return backup.Manifest{}, errors.New("injected failure")
	}
	if rec := b.serveBackup(api, "a", "global"); rec.Code != http.StatusInternalServerError {
		t.Fatalf("failing backup: %d %s", rec.Code, rec.Body)
	}
	clk.set(t0.Add(3*time.Minute + time.Second))
	if rec := b.serveBackup(api, "a", "global"); rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "59" {
		t.Fatalf("1 s after a failed backup: %d Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
	}
	metrics := scrapeMetrics(t, b.Server)
	if strings.Contains(metrics, `result="rate_limited"`) || !strings.Contains(metrics, `riffdb_backup_duration_seconds_count{result="ok",riffdb_database="a"} 2`) {
		t.Errorf("refusals were measured as backups:\n%s", backupLines(metrics, "riffdb_backup"))
	}
}

// TestBackupInsufficientSpace: a backup refused for want of space is 507
// backup_insufficient_space, with the numbers and no path, measured with
// result insufficient_space; the server gets backup_reserve_bytes (0 →
// no reserve) and backup_keep.
func TestBackupInsufficientSpace(t *testing.T) {
	b := newBackupServer(t, 0o700, "backup_reserve_bytes = 0\nbackup_keep = 3")
	api := b.Server.newBackupAPI(statsapi.NewFailureLog(b.log, nil, 0))
	var got backup.Options
	api.Create = func(_ context.Context, _ *primary.DB, root string, opts backup.Options) (backup.Manifest, error) {
		got = opts
		return backup.Manifest{}, &backup.SpaceError{Needed: 123456, Free: 234567, Reserve: 200000}
	}
	rec := b.serveBackup(api, "a", "global")
	body := rec.Body.String()
	if rec.Code != http.StatusInsufficientStorage || !strings.Contains(body, `"backup_insufficient_space"`) {
		t.Fatalf("refused for space: %d %s", rec.Code, body)
	}
	for _, n := range []string{"123456", "234567", "200000"} {
		if !strings.Contains(body, n) {
			t.Errorf("the message lacks %s: %s", n, body)
		}
	}
	if strings.Contains(body, b.root) {
		t.Errorf("the message names a path: %s", body)
	}
	if got.ReserveBytes >= 0 || got.Keep != 3 {
		t.Errorf("backup options %+v: want no reserve (negative) and Keep 3", got)
	}
	metrics := scrapeMetrics(t, b.Server)
	if want := `riffdb_backup_duration_seconds_count{result="insufficient_space",riffdb_database="a"} 1`; !strings.Contains(metrics, want) {
		t.Errorf("the scrape lacks %s:\n%s", want, backupLines(metrics, "riffdb_backup"))
	}
}

// TestBackupAPIKeepsTheNewest: with backup_keep = 2, the third backup
// removes the first and says so in "removed"; GET lists the newest two.
func TestBackupAPIKeepsTheNewest(t *testing.T) {
	b := newBackupServer(t, 0o700, "backup_keep = 2\nbackup_min_interval = \"0s\"")
	var names []string
	for i := range 3 {
		b.commit(t, 1)
		code, errCode, body := b.call(t, http.MethodPost, "a", "global")
		if code != http.StatusOK {
			t.Fatalf("backup %d: %d %s %s", i, code, errCode, body)
		}
		var resp backupapi.Response
		if err := json.Unmarshal(body, &resp); err != nil {
			t.Fatal(err)
		}
		var want []string
		if i == 2 {
			want = names[:1]
		}
		if !strings.Contains(string(body), `"removed":[`) || !slices.Equal(resp.Removed, want) && len(want)+len(resp.Removed) > 0 {
			t.Fatalf("backup %d answered %s, want removed %v", i, body, want)
		}
		names = append(names, resp.Backup.Name)
	}
	_, _, body := b.call(t, http.MethodGet, "a", "global")
	var list backupapi.ListResponse
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Backups) != 2 || list.Backups[0].Name != names[1] || list.Backups[1].Name != names[2] {
		t.Fatalf("GET backups = %s, want %v", body, names[1:])
	}
}

// TestBackupDefaultsAgree: config's defaults for the backup limits are
// backup's own (config cannot import backup, which pulls in Pebble).
func TestBackupDefaultsAgree(t *testing.T) {
	if config.DefaultBackupKeep != backup.DefaultKeep || config.DefaultBackupReserveBytes != backup.DefaultReserveBytes {
		t.Fatalf("config keeps %d and reserves %d, backup %d and %d", config.DefaultBackupKeep,
			int64(config.DefaultBackupReserveBytes), backup.DefaultKeep, int64(backup.DefaultReserveBytes))
	}
}
