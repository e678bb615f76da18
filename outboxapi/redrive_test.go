package outboxapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/outboxapi"
	"github.com/riffdb/riffdb/primary"
	"github.com/riffdb/riffdb/statsapi"
)

// redriveServer serves the listing and the redrive over dbs, with a
// metric reader and an observed log.
type redriveServer struct {
	*httptest.Server
	reader *sdkmetric.ManualReader
	logs   *observer.ObservedLogs
	spans  *tracetest.SpanRecorder
}

func serveRedrive(t *testing.T, dbs map[string]*primary.DB) *redriveServer {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	core, logs := observer.New(zap.InfoLevel)
	spans := tracetest.NewSpanRecorder()
	a := outboxapi.New(outboxapi.Options{Auth: auth, Logger: zap.New(core),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		Database: func(alias string) (*primary.DB, bool) {
			db, ok := dbs[alias]
			return db, ok
		}})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/databases/{alias}/outbox/deliveries/{event_id}", a.HandleShow)
	mux.HandleFunc("POST /v1/databases/{alias}/outbox/dead-letters/retry", a.HandleRedrive)
	s := &redriveServer{Server: httptest.NewServer(mux), reader: reader, logs: logs, spans: spans}
	t.Cleanup(s.Close)
	return s
}

// post sends body as a redrive of alias's dead letters.
func (s *redriveServer) post(t *testing.T, token, alias, body string) (int, outboxapi.RedriveResponse, statsapi.ErrorBody, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL+"/v1/databases/"+alias+"/outbox/dead-letters/retry", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw bytes.Buffer
	_, _ = raw.ReadFrom(resp.Body)
	var out outboxapi.RedriveResponse
	var eb statsapi.ErrorBody
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
	} else if err := json.Unmarshal(raw.Bytes(), &eb); err != nil {
		t.Fatalf("%d %s: %v", resp.StatusCode, raw.String(), err)
	}
	return resp.StatusCode, out, eb, raw.String()
}

// redriven returns the counter riffdb.outbox.dead_letters.redriven by
// reason.
func (s *redriveServer) redriven(t *testing.T) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := s.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "riffdb.outbox.dead_letters.redriven" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				r, _ := dp.Attributes.Value("riffdb.reason")
				out[r.AsString()] += dp.Value
			}
		}
	}
	return out
}

// deadLetter makes the intents of ids dead letters for reason.
func deadLetter(t *testing.T, db *primary.DB, reason string, ids ...event.ID) {
	t.Helper()
	all, err := db.ScanIntents(context.Background(), nil, 100000)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range all {
		if slices.Contains(ids, in.Event) {
			if _, err := db.DeadLetter(context.Background(), in, reason, primary.Failure{}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func intentOf(t *testing.T, db *primary.DB, id event.ID) primary.Intent {
	t.Helper()
	in, where, err := db.LookupDelivery(context.Background(), id)
	if err != nil || where != primary.EventUndelivered {
		t.Fatalf("event %s: %v, %v", id, where, err)
	}
	return in
}

// TestRedriveAuthorization: 401 without a valid token, 403 without
// manage_outbox (read_outbox is not enough), on another database's scope or
// revoked; and a refused request changes nothing.
func TestRedriveAuthorization(t *testing.T) {
	orders, billing := openDB(t, "o"), openDB(t, "b")
	commit(t, orders, 2)
	deadLetter(t, orders, "attempts_exhausted", event.ID{Seq: 1}, event.ID{Seq: 2})
	s := serveRedrive(t, map[string]*primary.DB{"orders": orders, "billing": billing})
	for _, c := range []struct {
		token string
		want  int
	}{
		{"", http.StatusUnauthorized},
		{"nonsense", http.StatusUnauthorized},
		{"all", http.StatusForbidden},
		{"orders", http.StatusForbidden},
		{"stats", http.StatusForbidden},
		{"commands", http.StatusForbidden},
		{"manage-b", http.StatusForbidden},
		{"manage-r", http.StatusForbidden},
	} {
		code, _, eb, _ := s.post(t, c.token, "orders", `{"event_ids":["1.0"]}`)
		if code != c.want {
			t.Errorf("token %q: %d %+v, want %d", c.token, code, eb, c.want)
		}
		if c.want == http.StatusForbidden && !strings.Contains(eb.Error.Message, "manage_outbox") {
			t.Errorf("token %q: the refusal does not name manage_outbox: %q", c.token, eb.Error.Message)
		}
	}
	if in := intentOf(t, orders, event.ID{Seq: 1}); in.State != primary.IntentDeadLetter {
		t.Fatalf("a refused redrive changed 1.0: %+v", in)
	}
	if code, out, eb, _ := s.post(t, "manage-o", "orders", `{"event_ids":["1.0"]}`); code != http.StatusOK || len(out.Redriven) != 1 {
		t.Fatalf("scoped manage_outbox: %d %+v %+v", code, out, eb)
	}
	if code, out, eb, _ := s.post(t, "manage", "orders", `{"event_ids":["2.0"]}`); code != http.StatusOK || len(out.Redriven) != 1 {
		t.Fatalf("global manage_outbox: %d %+v %+v", code, out, eb)
	}
	if code, _, eb, _ := s.post(t, "manage", "nope", `{"event_ids":["2.0"]}`); code != http.StatusNotFound || eb.Error.Code != "unknown_database" {
		t.Fatalf("unknown database: %d %+v", code, eb)
	}
}

// TestRedriveByIDsAndByReason: a redrive by ids returns the dead letters
// among them to pending and says why it left the others; a redrive by
// reason takes every dead letter of that reason and no other. Each
// redriven event is counted by its reason, the response says what becomes
// of a redriven identity conflict, and the request is logged once with the
// capability's id (never the token).
func TestRedriveByIDsAndByReason(t *testing.T) {
	db := openDB(t, "o")
	commit(t, db, 6)
	deadLetter(t, db, "attempts_exhausted", event.ID{Seq: 1}, event.ID{Seq: 2}, event.ID{Seq: 5})
	deadLetter(t, db, "identity_conflict", event.ID{Seq: 3})
	s := serveRedrive(t, map[string]*primary.DB{"orders": db})

	code, out, eb, raw := s.post(t, "manage", "orders", `{"event_ids":["1.0","3.0","4.0","99.0"]}`)
	if code != http.StatusOK {
		t.Fatalf("%d %+v", code, eb)
	}
	want := outboxapi.RedriveResponse{Database: "orders", DatabaseID: db.Identity().String(), HistoryIncarnation: 1,
		Redriven: []string{"1.0", "3.0"},
		NotRedriven: []outboxapi.NotRedriven{{EventID: "4.0", Why: "not_dead_letter", State: "pending"},
			{EventID: "99.0", Why: "not_undelivered"}},
		Conflicts: 1, Note: out.Note}
	if fmt.Sprint(out) != fmt.Sprint(want) || !strings.Contains(out.Note, "dead letter again") {
		t.Fatalf("redrive by ids:\n got %+v\nwant %+v", out, want)
	}
	for _, id := range []event.ID{{Seq: 1}, {Seq: 3}} {
		if in := intentOf(t, db, id); in.State != primary.IntentPending || in.Attempts != 0 || in.Redrives != 1 {
			t.Fatalf("%s after the redrive: %+v", id, in)
		}
	}
	if got := s.redriven(t); got["attempts_exhausted"] != 1 || got["identity_conflict"] != 1 {
		t.Fatalf("redriven counter %v", got)
	}
	entries := s.logs.FilterMessage("dead letters redriven").All()
	if len(entries) != 1 || entries[0].ContextMap()["capability_id"] != "c0ffee" || entries[0].ContextMap()["redriven"] != int64(2) {
		t.Fatalf("log entries %+v", entries)
	}
	if strings.Contains(raw, "manage") {
		t.Fatalf("the response holds the token: %s", raw)
	}
	var traced []int64
	for _, sp := range s.spans.Ended() {
		if sp.Name() == "riffdb.outbox.dead_letters.retry" {
			for _, kv := range sp.Attributes() {
				if kv.Key == "riffdb.outbox.redrive.redriven" {
					traced = append(traced, kv.Value.AsInt64())
				}
			}
		}
	}
	if !slices.Equal(traced, []int64{2}) {
		t.Fatalf("redrive spans with their redriven counts: %v, want one with 2", traced)
	}

	code, out, eb, _ = s.post(t, "manage", "orders", `{"reason":"exhausted"}`)
	if code != http.StatusOK || !slices.Equal(out.Redriven, []string{"2.0", "5.0"}) || len(out.NotRedriven) != 0 || out.NextAfter != "" || out.Note != "" {
		t.Fatalf("redrive by reason: %d %+v %+v", code, out, eb)
	}
	if code, out, _, _ = s.post(t, "manage", "orders", `{"reason":"identity_conflict"}`); code != http.StatusOK || len(out.Redriven) != 0 {
		t.Fatalf("no conflict left to redrive: %d %+v", code, out)
	}
	if got := s.redriven(t); got["attempts_exhausted"] != 3 || got["identity_conflict"] != 1 {
		t.Fatalf("redriven counter %v", got)
	}
	if n, _ := db.UndeliveredCount(); n != 6 {
		t.Fatalf("undelivered %d: a redrive changes no count", n)
	}
}

// TestRedriveByReasonIsBoundedPerRequest: a redrive by reason reads a
// bounded number of intents per request and returns next_after; requests
// continued from it redrive every dead letter of the reason exactly once.
func TestRedriveByReasonIsBoundedPerRequest(t *testing.T) {
	defer outboxapi.SetRedrivePaging(4, 8)()
	db := openDB(t, "o")
	commit(t, db, 30)
	var dead []event.ID
	for seq := uint64(1); seq <= 30; seq += 2 {
		dead = append(dead, event.ID{Seq: seq})
	}
	deadLetter(t, db, "attempts_exhausted", dead...)
	deadLetter(t, db, "identity_conflict", event.ID{Seq: 2})
	s := serveRedrive(t, map[string]*primary.DB{"orders": db})
	var got []string
	body := `{"reason":"exhausted"}`
	for requests := 1; ; requests++ {
		code, out, eb, _ := s.post(t, "manage", "orders", body)
		if code != http.StatusOK || len(out.Redriven) > 4 {
			t.Fatalf("request %d: %d %+v %+v", requests, code, out, eb)
		}
		got = append(got, out.Redriven...)
		if out.NextAfter == "" {
			if requests != 4 {
				t.Fatalf("%d requests for 30 intents read 8 per request, want 4", requests)
			}
			break
		}
		body = `{"reason":"exhausted","after":"` + out.NextAfter + `"}`
	}
	var want []string
	for _, id := range dead {
		want = append(want, id.String())
	}
	if !slices.Equal(got, want) {
		t.Fatalf("redriven %v, want %v", got, want)
	}
	if in := intentOf(t, db, event.ID{Seq: 2}); in.State != primary.IntentDeadLetter {
		t.Fatalf("the conflict was redriven by a redrive of exhausted ones: %+v", in)
	}
}

// TestRedriveRefusesBadRequests: every malformed request is 400
// invalid_request with a message that repeats none of the body, and
// changes nothing.
func TestRedriveRefusesBadRequests(t *testing.T) {
	db := openDB(t, "o")
	commit(t, db, 1)
	deadLetter(t, db, "attempts_exhausted", event.ID{Seq: 1})
	s := serveRedrive(t, map[string]*primary.DB{"orders": db})
	ids := make([]string, outboxapi.MaxRedriveIDs+1)
	for i := range ids {
		ids[i] = fmt.Sprintf("%d.0", i+1)
	}
	tooMany, _ := json.Marshal(map[string]any{"event_ids": ids})
	for name, body := range map[string]string{
		"not json":         `secret-payload`,
		"unknown field":    `{"event_ids":["1.0"],"secret_payload":1}`,
		"both":             `{"event_ids":["1.0"],"reason":"exhausted"}`,
		"neither":          `{}`,
		"empty ids":        `{"event_ids":[]}`,
		"too many":         string(tooMany),
		"twice":            `{"event_ids":["1.0","1.0"]}`,
		"not an id":        `{"event_ids":["secret-payload"]}`,
		"id of seq 0":      `{"event_ids":["0.0"]}`,
		"unknown reason":   `{"reason":"secret-payload"}`,
		"after with ids":   `{"event_ids":["1.0"],"after":"1.0"}`,
		"bad after":        `{"reason":"exhausted","after":"secret-payload"}`,
		"trailing data":    `{"event_ids":["1.0"]} {"event_ids":["1.0"]}`,
		"too big":          `{"event_ids":["1.0"],"reason":"` + strings.Repeat("x", 70<<10) + `"}`,
		"ids not an array": `{"event_ids":"1.0"}`,
		"duplicate key":    `{"event_ids":["1.0"],"event_ids":["2.0"]}`,
		"invalid UTF-8":    "{\"reason\":\"exhausted\xff\"}",
	} {
		code, _, eb, _ := s.post(t, "manage", "orders", body)
		if code != http.StatusBadRequest || eb.Error.Code != "invalid_request" || strings.Contains(eb.Error.Message, "secret") {
			t.Errorf("%s: %d %+v", name, code, eb)
		}
	}
	if in := intentOf(t, db, event.ID{Seq: 1}); in.State != primary.IntentDeadLetter {
		t.Fatalf("a refused request changed 1.0: %+v", in)
	}
}

// TestItemsCarryTheLastFailure: an event whose attempt failed is looked up
// with the failure's time, class and reason, in codes only (a reason that
// is not a code is "other"); one that never failed has none.
func TestItemsCarryTheLastFailure(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, "o")
	commit(t, db, 2)
	s := serveRedrive(t, map[string]*primary.DB{"orders": db})
	in := intentOf(t, db, event.ID{Seq: 1})
	claimed, err := db.Claim(ctx, []primary.Intent{in}, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_800_000_000, 0).UTC()
	if _, err := db.Retry(ctx, claimed[0], at, primary.Failure{At: at, Class: "unavailable", Reason: "destination_unavailable"}); err != nil {
		t.Fatal(err)
	}
	var show outboxapi.ShowResponse
	if code, eb := get(t, s.Server, "all", "/v1/databases/orders/outbox/deliveries/1.0", &show); code != http.StatusOK ||
		show.Delivery == nil || show.Delivery.LastFailure == nil ||
		*show.Delivery.LastFailure != (outboxapi.Failure{At: at, Class: "unavailable", Reason: "destination_unavailable"}) {
		t.Fatalf("show 1.0: %d %+v %+v", code, show.Delivery, eb)
	}
	var other outboxapi.ShowResponse
	if code, _ := get(t, s.Server, "all", "/v1/databases/orders/outbox/deliveries/2.0", &other); code != http.StatusOK || other.Delivery.LastFailure != nil {
		t.Fatalf("show 2.0: %d %+v", code, other.Delivery)
	}
}
