package outboxapi_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/riffdb/riffdb/capability"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/outboxapi"
	"github.com/riffdb/riffdb/primary"
	"github.com/riffdb/riffdb/primary/contract"
	"github.com/riffdb/riffdb/statsapi"
)

const testContract = `
[commands.one]
input = { x = "int" }
emits = ["a"]
`

// tokens is an Authenticator: token → capability.
type tokens map[string]capability.Capability

func (t tokens) Authenticate(token string) (capability.Capability, error) {
	if c, ok := t[token]; ok {
		return c, nil
	}
	return capability.Capability{}, capability.ErrUnauthenticated
}

var auth = tokens{
	"all":      {Permissions: []capability.Permission{capability.ReadOutbox}},
	"orders":   {Permissions: []capability.Permission{capability.ReadOutbox}, Database: "orders"},
	"billing":  {Permissions: []capability.Permission{capability.ReadOutbox}, Database: "billing"},
	"stats":    {Permissions: []capability.Permission{capability.ReadStatistics, capability.ReadHealth, capability.ManageBackups}},
	"revoked":  {Permissions: []capability.Permission{capability.ReadOutbox}, Revoked: true},
	"commands": {Permissions: []capability.Permission{capability.ExecuteCommands}, Database: "orders"},
	"manage":   {ID: "c0ffee", Permissions: []capability.Permission{capability.ManageOutbox}},
	"manage-o": {Permissions: []capability.Permission{capability.ManageOutbox}, Database: "orders"},
	"manage-b": {Permissions: []capability.Permission{capability.ManageOutbox}, Database: "billing"},
	"manage-r": {Permissions: []capability.Permission{capability.ManageOutbox}, Revoked: true},
}

// openDB opens a primary named name in a private directory of its own.
func openDB(t *testing.T, name string) *primary.DB {
	t.Helper()
	root := t.TempDir()
	if err := os.Chmod(root, 0o700); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, name)
	c, err := contract.Compile([]byte(testContract))
	if err != nil {
		t.Fatal(err)
	}
	db, err := primary.Open(context.Background(), primary.Options{Path: dir, Contract: c, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func commit(t *testing.T, db *primary.DB, n int) {
	t.Helper()
	for i := range n {
		if _, err := db.Execute(context.Background(), "one", json.RawMessage(`{"x":`+strings.Repeat("1", 1+i%3)+`}`), ""); err != nil {
			t.Fatal(err)
		}
	}
}

// serve returns a test server over the API for databases orders and
// billing (each its own store on disk).
func serve(t *testing.T, dbs map[string]*primary.DB) (*httptest.Server, *outboxapi.API) {
	t.Helper()
	a := outboxapi.New(outboxapi.Options{Auth: auth, Database: func(alias string) (*primary.DB, bool) {
		db, ok := dbs[alias]
		return db, ok
	}})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/databases/{alias}/outbox/deliveries", a.HandleList)
	mux.HandleFunc("GET /v1/databases/{alias}/outbox/deliveries/{event_id}", a.HandleShow)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, a
}

func get(t *testing.T, srv *httptest.Server, token, path string, out any) (int, statsapi.ErrorBody) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb statsapi.ErrorBody
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	} else if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, eb
}

// listAll pages through the listing and returns every item and the number
// of pages.
func listAll(t *testing.T, srv *httptest.Server, alias, query string) ([]outboxapi.Item, int) {
	t.Helper()
	var items []outboxapi.Item
	after := ""
	for pages := 1; ; pages++ {
		q := query
		if after != "" {
			q += "&after=" + url.QueryEscape(after)
		}
		var resp outboxapi.ListResponse
		if code, eb := get(t, srv, "all", "/v1/databases/"+alias+"/outbox/deliveries?"+q, &resp); code != http.StatusOK {
			t.Fatalf("list page %d: %d %+v", pages, code, eb)
		}
		items = append(items, resp.Deliveries...)
		if resp.NextCursor == "" {
			return items, pages
		}
		after = resp.NextCursor
	}
}

func TestListPagesThroughTheIndexInEventOrder(t *testing.T) {
	db := openDB(t, "db")
	commit(t, db, 25)
	// Two events move on: one dead letter, one delivered.
	ins, err := db.ScanIntents(context.Background(), nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := db.Claim(context.Background(), ins[:2], time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.DeadLetter(context.Background(), claimed[0], "attempts_exhausted", primary.Failure{}); err != nil {
		t.Fatal(err)
	}
	if err := db.Complete(context.Background(), claimed[1:2]); err != nil {
		t.Fatal(err)
	}
	srv, _ := serve(t, map[string]*primary.DB{"orders": db})

	items, pages := listAll(t, srv, "orders", "limit=7")
	if len(items) != 24 || pages != 4 {
		t.Fatalf("listed %d items in %d pages, want 24 in 4", len(items), pages)
	}
	for i, it := range items {
		if i > 0 && it.CommitSequence <= items[i-1].CommitSequence {
			t.Fatalf("not in event order: %s after %s", it.EventID, items[i-1].EventID)
		}
	}
	dead := items[0]
	if dead.EventID != ins[0].Event.String() || dead.State != "dead_letter" || dead.Attempts != 1 ||
		dead.DeadLetterReason != "attempts_exhausted" || dead.LeaseDeadline != nil || dead.CommittedAt.IsZero() {
		t.Fatalf("dead letter item = %+v", dead)
	}
	if items[1].State != "pending" || items[1].DeadLetterReason != "" || items[1].EventID != ins[2].Event.String() {
		t.Fatalf("pending item = %+v", items[1])
	}

	// A state filter: only the dead letter, then the pending ones.
	if items, _ := listAll(t, srv, "orders", "state=dead_letter"); len(items) != 1 || items[0].EventID != dead.EventID {
		t.Fatalf("dead letters = %+v", items)
	}
	if items, _ := listAll(t, srv, "orders", "state=pending&state=delivering&limit=5"); len(items) != 23 {
		t.Fatalf("pending or delivering: %d items, want 23", len(items))
	}
	if items, _ := listAll(t, srv, "orders", "state=retry_scheduled,delivering"); len(items) != 0 {
		t.Fatalf("retry_scheduled or delivering: %+v", items)
	}
	var resp outboxapi.ListResponse
	if code, _ := get(t, srv, "all", "/v1/databases/orders/outbox/deliveries", &resp); code != http.StatusOK ||
		len(resp.Deliveries) != 24 || resp.NextCursor != "" || resp.DatabaseID != db.Identity().String() {
		t.Fatalf("default page: %d %d items, cursor %q", code, len(resp.Deliveries), resp.NextCursor)
	}
}

func TestShowTellsWhereAnEventIs(t *testing.T) {
	db := openDB(t, "db")
	commit(t, db, 2)
	ins, err := db.ScanIntents(context.Background(), nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	lease := time.Now().Add(time.Minute).UTC().Truncate(time.Millisecond)
	claimed, err := db.Claim(context.Background(), ins[:1], lease)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Complete(context.Background(), claimed); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Claim(context.Background(), ins[1:], lease); err != nil {
		t.Fatal(err)
	}
	srv, _ := serve(t, map[string]*primary.DB{"orders": db})
	for _, c := range []struct{ id, state string }{
		{ins[0].Event.String(), "delivered"},
		{ins[1].Event.String(), "delivering"},
		{"999.0", "unknown"},
		{ins[1].Event.String()[:len(ins[1].Event.String())-1] + "9", "unknown"},
	} {
		var resp outboxapi.ShowResponse
		if code, eb := get(t, srv, "orders", "/v1/databases/orders/outbox/deliveries/"+c.id, &resp); code != http.StatusOK || resp.State != c.state {
			t.Fatalf("show %s: %d %+v %+v, want %s", c.id, code, resp, eb, c.state)
		}
		if (resp.Delivery != nil) != (c.state == "delivering") {
			t.Fatalf("show %s: delivery %+v", c.id, resp.Delivery)
		}
		if resp.Delivery != nil && (resp.Delivery.Attempts != 1 || resp.Delivery.LeaseDeadline == nil || !resp.Delivery.LeaseDeadline.Equal(lease)) {
			t.Fatalf("show %s: delivery %+v, lease %v", c.id, resp.Delivery, lease)
		}
	}
	for _, bad := range []string{"1", "0.0", "x.1", "1.-1", "1.4294967296", "+1.0"} {
		var resp outboxapi.ShowResponse
		if code, eb := get(t, srv, "all", "/v1/databases/orders/outbox/deliveries/"+bad, &resp); code != http.StatusBadRequest || eb.Error.Code != "invalid_event_id" {
			t.Fatalf("show %s: %d %+v", bad, code, eb)
		}
	}
}

// TestAuthorization: 401 without a valid token, 403 without read_outbox
// (read_statistics is not enough) or on another database's scope.
func TestAuthorization(t *testing.T) {
	orders, billing := openDB(t, "o"), openDB(t, "b")
	commit(t, orders, 1)
	srv, _ := serve(t, map[string]*primary.DB{"orders": orders, "billing": billing})
	for _, path := range []string{"/v1/databases/orders/outbox/deliveries", "/v1/databases/orders/outbox/deliveries/1.0"} {
		for _, c := range []struct {
			token string
			want  int
		}{
			{"", http.StatusUnauthorized},
			{"nonsense", http.StatusUnauthorized},
			{"stats", http.StatusForbidden},
			{"commands", http.StatusForbidden},
			{"billing", http.StatusForbidden},
			{"revoked", http.StatusForbidden},
			{"orders", http.StatusOK},
			{"all", http.StatusOK},
		} {
			var out map[string]any
			if code, eb := get(t, srv, c.token, path, &out); code != c.want {
				t.Errorf("%s with %q: %d %+v, want %d", path, c.token, code, eb, c.want)
			}
		}
	}
	var out map[string]any
	if code, eb := get(t, srv, "all", "/v1/databases/nope/outbox/deliveries", &out); code != http.StatusNotFound || eb.Error.Code != "unknown_database" {
		t.Fatalf("unknown database: %d %+v", code, eb)
	}
}

// TestCursorRefusals: a cursor from another database, from another server
// process (another key), edited (its checksum recomputed would not help:
// it is an HMAC) or damaged is refused with its own code.
func TestCursorRefusals(t *testing.T) {
	orders, billing := openDB(t, "o"), openDB(t, "b")
	commit(t, orders, 5)
	commit(t, billing, 5)
	dbs := map[string]*primary.DB{"orders": orders, "billing": billing}
	srv, _ := serve(t, dbs)
	other, _ := serve(t, dbs)
	page := func(s *httptest.Server, alias string) string {
		var resp outboxapi.ListResponse
		if code, eb := get(t, s, "all", "/v1/databases/"+alias+"/outbox/deliveries?limit=2", &resp); code != http.StatusOK || resp.NextCursor == "" {
			t.Fatalf("first page: %d %+v %+v", code, resp, eb)
		}
		return resp.NextCursor
	}
	cur := page(srv, "orders")
	raw, err := base64.RawURLEncoding.DecodeString(cur)
	if err != nil {
		t.Fatal(err)
	}
	edited := append([]byte(nil), raw...)
	edited[len(edited)-33] ^= 1 // the position's last byte
	for _, c := range []struct{ name, alias, cursor, code string }{
		{"another database", "billing", cur, "cursor_other_database"},
		{"another server process", "orders", page(other, "orders"), "invalid_cursor"},
		{"edited", "orders", base64.RawURLEncoding.EncodeToString(edited), "invalid_cursor"},
		{"truncated", "orders", cur[:len(cur)-4], "invalid_cursor"},
		{"not base64", "orders", "!!" + cur, "invalid_cursor"},
		{"empty body", "orders", "RA", "invalid_cursor"},
	} {
		var resp outboxapi.ListResponse
		code, eb := get(t, srv, "all", "/v1/databases/"+c.alias+"/outbox/deliveries?after="+url.QueryEscape(c.cursor), &resp)
		if code != http.StatusBadRequest || eb.Error.Code != c.code || strings.Contains(eb.Error.Message, c.cursor) {
			t.Errorf("%s: %d %+v, want 400 %s", c.name, code, eb, c.code)
		}
	}
	// The cursor itself still works.
	var resp outboxapi.ListResponse
	if code, eb := get(t, srv, "all", "/v1/databases/orders/outbox/deliveries?limit=2&after="+url.QueryEscape(cur), &resp); code != http.StatusOK ||
		len(resp.Deliveries) != 2 || resp.Deliveries[0].EventID != (event.ID{Seq: 3}).String() {
		t.Fatalf("second page: %d %+v %+v", code, resp, eb)
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "state=delivered", "state=pending,"} {
		code, eb := get(t, srv, "all", "/v1/databases/orders/outbox/deliveries?"+q, &resp)
		if code != http.StatusBadRequest || (eb.Error.Code != "invalid_limit" && eb.Error.Code != "invalid_state") {
			t.Errorf("%s: %d %+v", q, code, eb)
		}
	}
}

func TestIsPath(t *testing.T) {
	for path, want := range map[string]bool{
		"/v1/databases/a/outbox/deliveries":       true,
		"/v1/databases/a/outbox/deliveries/1.0":   true,
		"/v1/databases/a/outbox/deliveries/1.0/x": false,
		"/v1/databases/a/outbox/deliveries/":      false,
		"/v1/databases/../outbox/deliveries":      false,
		"/v1/databases/a/backups":                 false,
	} {
		if got := outboxapi.IsPath(path); got != want {
			t.Errorf("IsPath(%q) = %v", path, got)
		}
	}
}
