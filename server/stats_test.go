package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/riffdb/riffdb/capability"
	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
	"github.com/riffdb/riffdb/primary"
)

const statsContract = `
[commands.put]
input = { k = "string" }
emits = ["put"]
`

type testServer struct {
	*Server
	root   string
	tokens map[string]string
}

// newTestServer starts an in-process server with two databases, "a" (with
// an outbox section when withOutbox is set) and "b" (never), and tokens for
// each authorization case.
func newTestServer(t *testing.T, gate <-chan struct{}, withOutbox bool) *testServer {
	t.Helper()
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(root, 0o700))
	must(os.WriteFile(filepath.Join(root, "contract.toml"), []byte(statsContract), 0o600))
	doc := fmt.Sprintf(`
[server]
listen = "127.0.0.1:0"
metrics_listen = "127.0.0.1:0"
credential_path = %q
[databases.a]
path = %q
contract = %q
[databases.b]
path = %q
contract = %q
`, root+"/creds", root+"/a", root+"/contract.toml", root+"/b", root+"/contract.toml")
	if withOutbox {
		must(os.Mkdir(root+"/outbox", 0o700))
		doc += fmt.Sprintf("[databases.a.outbox]\nkind = \"durable_local\"\ndirectory = %q\nquota_encoded_bytes = 1000000\n", root+"/outbox")
	}
	cfg, err := config.Parse([]byte(doc), nil, config.Overrides{})
	must(err)
	creds, err := capability.Open(cfg.Server.CredentialPath)
	must(err)
	ts := &testServer{root: root, tokens: map[string]string{}}
	for name, spec := range map[string]struct {
		perms []capability.Permission
		db    string
	}{
		"stats":        {[]capability.Permission{capability.ReadStatistics}, ""},
		"stats-scoped": {[]capability.Permission{capability.ReadStatistics}, "a"},
		"exec":         {[]capability.Permission{capability.ExecuteCommands}, ""},
		"health-a":     {[]capability.Permission{capability.ReadHealth}, "a"},
	} {
		tok, _, err := creds.Create(name, spec.perms, spec.db)
		must(err)
		ts.tokens[name] = tok
	}
	s, err := New(context.Background(), Options{Config: cfg, LogOutput: io.Discard, indexGate: gate})
	must(err)
	must(s.Start(context.Background()))
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	ts.Server = s
	return ts
}

func (ts *testServer) get(t *testing.T, path, token string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+ts.APIAddr()+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// statsDoc fetches /v1/stats and checks that every contract key is present.
func (ts *testServer) statsDoc(t *testing.T) []map[string]any {
	t.Helper()
	code, b := ts.get(t, "/v1/stats", ts.tokens["stats"])
	if code != 200 {
		t.Fatalf("stats: %d %s", code, b)
	}
	var doc struct {
		Databases []map[string]any `json:"databases"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	want := []string{"alias", "database_id", "history", "history_incarnation", "last_commit_sequence",
		"outbox", "pending_outbox_deliveries", "publication_frontier"}
	for _, d := range doc.Databases {
		var keys []string
		for k := range d {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if strings.Join(keys, ",") != strings.Join(want, ",") {
			t.Fatalf("keys %v, want %v", keys, want)
		}
		for _, k := range []string{"retained_bytes", "reclaimable_bytes"} {
			if _, ok := d["history"].(map[string]any)[k]; !ok {
				t.Fatalf("history.%s missing", k)
			}
		}
		for _, k := range []string{"health", "reason", "archive_encoded_bytes", "archive_allocated_bytes", "quota_encoded_bytes"} {
			if _, ok := d["outbox"].(map[string]any)[k]; !ok {
				t.Fatalf("outbox.%s missing", k)
			}
		}
	}
	return doc.Databases
}

func pendingOf(t *testing.T, d map[string]any) any { return d["pending_outbox_deliveries"] }

func TestStatsAuthorization(t *testing.T) {
	ts := newTestServer(t, nil, false)
	for _, tc := range []struct {
		token string
		code  int
	}{
		{"", 401}, {"riffdb_bogus", 401}, {ts.tokens["exec"], 403}, {ts.tokens["stats-scoped"], 403}, {ts.tokens["stats"], 200},
	} {
		if code, b := ts.get(t, "/v1/stats", tc.token); code != tc.code {
			t.Fatalf("token %q: %d %s, want %d", tc.token, code, b, tc.code)
		}
	}
	// Health: a scoped read_health capability sees its own database only.
	code, b := ts.get(t, "/v1/health", ts.tokens["health-a"])
	if code != 200 || !bytes.Contains(b, []byte(`"alias":"a","history_incarnation":1,`)) || bytes.Contains(b, []byte(`"alias":"b"`)) {
		t.Fatalf("scoped health: %d %s", code, b)
	}
	if code, _ := ts.get(t, "/v1/health", ts.tokens["stats"]); code != 403 {
		t.Fatalf("health without read_health: %d", code)
	}
	if code, b := ts.get(t, "/healthz", ""); code != 200 || string(bytes.TrimSpace(b)) != `{"status":"up"}` {
		t.Fatalf("healthz: %d %s", code, b)
	}
}

func TestPendingIsNullWhileTheIndexIsUnbuilt(t *testing.T) {
	gate := make(chan struct{})
	ts := newTestServer(t, gate, false)
	for _, d := range ts.statsDoc(t) {
		if pendingOf(t, d) != nil {
			t.Fatalf("pending %v while the index is unbuilt, want null", pendingOf(t, d))
		}
	}
	code, b := ts.get(t, "/v1/health", ts.tokens["health-a"])
	if code != 200 || !bytes.Contains(b, []byte(`"ready":false`)) || !bytes.Contains(b, []byte(`"index":"unbuilt"`)) {
		t.Fatalf("health while unbuilt: %s", b)
	}
	close(gate)
	waitIndexReady(t, ts)
	for _, d := range ts.statsDoc(t) {
		if p, ok := pendingOf(t, d).(float64); !ok || p != 0 {
			t.Fatalf("pending %v once built, want 0", pendingOf(t, d))
		}
	}
}

func waitIndexReady(t *testing.T, ts *testServer) {
	t.Helper()
	for _, d := range ts.dbs {
		testutil.WaitFor(t, 10*time.Second, 5*time.Millisecond, "the index to be built", func() bool {
			_, st := d.db.UndeliveredCount()
			return st == primary.IndexReady
		})
	}
}

func TestPendingIsNullWhileTheIndexIsDegraded(t *testing.T) {
	ts := newTestServer(t, nil, false)
	for i := 0; i < 3; i++ {
		if _, err := ts.dbs[0].db.Execute(context.Background(), "put", json.RawMessage(`{"k":"x"}`), ""); err != nil {
			t.Fatal(err)
		}
	}
	root := ts.root
	if err := ts.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Damage the durable count: the index no longer matches it.
	p, err := pebble.Open(filepath.Join(root, "a"), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Set([]byte("m/undelivered"), binary.BigEndian.AppendUint64(nil, 99), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), Options{Config: ts.cfg, LogOutput: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	ts.Server = s
	docs := ts.statsDoc(t)
	if docs[0]["alias"] != "a" || pendingOf(t, docs[0]) != nil {
		t.Fatalf("degraded database a: pending %v, want null", pendingOf(t, docs[0]))
	}
	if p, ok := pendingOf(t, docs[1]).(float64); !ok || p != 0 {
		t.Fatalf("healthy database b: pending %v", pendingOf(t, docs[1]))
	}
}

// TestPendingFollowsTheIndex moves intents through claim, retry, dead letter
// and completion and reads the count after each step.
func TestPendingFollowsTheIndex(t *testing.T) {
	ts := newTestServer(t, nil, false)
	db := ts.dbs[0].db
	ctx := context.Background()
	pending := func() float64 {
		t.Helper()
		v, ok := pendingOf(t, ts.statsDoc(t)[0]).(float64)
		if !ok {
			t.Fatal("pending is null")
		}
		return v
	}
	for i := 0; i < 4; i++ {
		if _, err := db.Execute(ctx, "put", json.RawMessage(`{"k":"x"}`), ""); err != nil {
			t.Fatal(err)
		}
	}
	if got := pending(); got != 4 {
		t.Fatalf("after 4 commits: %v", got)
	}
	ins, err := db.ScanIntents(ctx, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := db.Claim(ctx, ins, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if got := pending(); got != 4 {
		t.Fatalf("active deliveries must count: %v", got)
	}
	if _, err := db.Retry(ctx, claimed[0], time.Now().Add(time.Hour), primary.Failure{}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.DeadLetter(ctx, claimed[1], "test", primary.Failure{}); err != nil {
		t.Fatal(err)
	}
	if got := pending(); got != 4 {
		t.Fatalf("retries and dead letters must count: %v", got)
	}
	if err := db.Complete(ctx, claimed[2:]); err != nil {
		t.Fatal(err)
	}
	if got := pending(); got != 2 {
		t.Fatalf("after completing 2: %v", got)
	}
	// Without a destination the archive fields are null and health says so.
	d := ts.statsDoc(t)[0]["outbox"].(map[string]any)
	if d["health"] != "degraded" || d["reason"] != "no_destination" || d["quota_encoded_bytes"] != nil || d["archive_encoded_bytes"] != nil {
		t.Fatalf("outbox without destination: %v", d)
	}
}

func TestStatsReportsTheArchiveApartFromHistory(t *testing.T) {
	ts := newTestServer(t, nil, true)
	for i := 0; i < 5; i++ {
		if _, err := ts.dbs[0].db.Execute(context.Background(), "put", json.RawMessage(`{"k":"x"}`), ""); err != nil {
			t.Fatal(err)
		}
	}
	var d map[string]any
	testutil.WaitFor(t, 20*time.Second, 20*time.Millisecond, "delivery (pending 0, healthy)", func() bool {
		d = ts.statsDoc(t)[0]
		p, _ := pendingOf(t, d).(float64)
		return p == 0 && d["outbox"].(map[string]any)["health"] == "healthy"
	})
	o := d["outbox"].(map[string]any)
	if o["quota_encoded_bytes"].(float64) != 1000000 || o["archive_encoded_bytes"].(float64) <= 0 || o["archive_allocated_bytes"].(float64) <= 0 {
		t.Fatalf("outbox %v", o)
	}
	h := d["history"].(map[string]any)
	if h["retained_bytes"].(float64) <= 0 {
		t.Fatalf("history %v", h)
	}
}

// TestStatsReadNoStore answers a stats request after every primary store
// has been closed underneath the server: a stats request that iterated
// history or the index, or read any key, would fail. The numbers must be
// the ones served while the stores were open.
func TestStatsReadNoStore(t *testing.T) {
	ts := newTestServer(t, nil, false)
	for i := 0; i < 5; i++ {
		if _, err := ts.dbs[0].db.Execute(context.Background(), "put", json.RawMessage(`{"k":"x"}`), ""); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := json.Marshal(ts.statsDoc(t))
	for _, d := range ts.dbs {
		if err := d.db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	after, _ := json.Marshal(ts.statsDoc(t))
	if string(before) != string(after) {
		t.Fatalf("stats changed once the stores were closed:\n%s\n%s", before, after)
	}
	var docs []map[string]any
	_ = json.Unmarshal(after, &docs)
	if p, ok := docs[0]["pending_outbox_deliveries"].(float64); !ok || p != 5 {
		t.Fatalf("pending %v, want 5", docs[0]["pending_outbox_deliveries"])
	}
}
