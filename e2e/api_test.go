package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestCommandAPIRefusesBadRequests checks authentication, authorization and
// input validation over HTTP against the real binary, and that nothing is
// committed by any refused request.
func TestCommandAPIRefusesBadRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{extra: ""})
	exec := e.token([]string{"execute_commands"}, "default")
	statsOnly := e.token([]string{"read_statistics"}, "")
	stats := e.token([]string{"read_statistics"}, "")
	p := e.start()
	ctx := context.Background()
	post := func(token, path string, body []byte, header map[string]string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+p.api+path, bytes.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	good := []byte(`{"input":{"order_id":"o-1","amount_cents":5},"idempotency_key":"k"}`)
	const path = "/v1/databases/default/commands/place_order"
	cases := []struct {
		name   string
		token  string
		path   string
		body   []byte
		header map[string]string
		status int
		msg    string
	}{
		{"no token", "", path, good, nil, 401, "bearer token"},
		{"unknown token", "riffdb_notarealtoken", path, good, nil, 401, "not valid"},
		{"without permission", statsOnly, path, good, nil, 403, "may not execute"},
		{"other database", exec, "/v1/databases/other/commands/place_order", good, nil, 403, "may not execute"},
		{"malformed json", exec, path, []byte(`{"input":`), nil, 400, "JSON object"},
		{"unknown top-level field", exec, path, []byte(`{"input":{"order_id":"o","amount_cents":1},"destination":"/tmp/x"}`), nil, 400, "no other fields"},
		{"missing input", exec, path, []byte(`{"idempotency_key":"k"}`), nil, 400, "input"},
		{"unknown command", exec, "/v1/databases/default/commands/drop_tables", good, nil, 404, "no command"},
		{"wrong type", exec, path, []byte(`{"input":{"order_id":"o","amount_cents":"five"}}`), nil, 400, "amount_cents"},
		{"missing field", exec, path, []byte(`{"input":{"order_id":"o"}}`), nil, 400, "amount_cents"},
		{"unknown field", exec, path, []byte(`{"input":{"order_id":"o","amount_cents":1,"archive":"x"}}`), nil, 400, "archive"},
		{"oversized body", exec, path, []byte(`{"input":{"order_id":"` + strings.Repeat("x", 2<<20) + `","amount_cents":1}}`), nil, 413, "exceeds"},
		{"wrong content type", exec, path, good, map[string]string{"Content-Type": "text/plain"}, 415, "application/json"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, body := post(tc.token, tc.path, tc.body, tc.header)
			if status != tc.status || !strings.Contains(body, tc.msg) {
				t.Fatalf("%d %s, want %d containing %q", status, body, tc.status, tc.msg)
			}
			var eb struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if err := json.Unmarshal([]byte(body), &eb); err != nil || eb.Error.Code == "" {
				t.Fatalf("error body is not the JSON error shape: %s", body)
			}
		})
	}
	// No endpoint writes archive records or names a destination.
	for _, path := range []string{"/v1/archive", "/v1/databases/default/archive/records", "/v1/databases/default/outbox/destination", "/v1/inspect"} {
		if status, _ := post(exec, path, good, nil); status != 404 && status != 405 {
			t.Fatalf("POST %s = %d", path, status)
		}
	}
	s := p.stats(stats)
	if got := s.Databases[0].LastCommitSequence; got != 0 {
		t.Fatalf("refused requests committed %d commands", got)
	}
	status, body := post(exec, path, good, nil)
	if status != 200 {
		t.Fatalf("valid command: %d %s", status, body)
	}
	if got := p.stats(stats).Databases[0].LastCommitSequence; got != 1 {
		t.Fatalf("last sequence %d after one good command", got)
	}
}

// TestFollowerRefusesCommands starts a follower and checks that it serves
// stats but refuses commands with a clear error.
func TestFollowerRefusesCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{extra: ""})
	// Turn the config into a follower config.
	e.setMode("follower")
	exec := e.token([]string{"execute_commands", "read_statistics"}, "")
	p := e.start()
	code, _, body, err := p.command(context.Background(), exec, "place_order", orderInput(1), "")
	if err != nil || code != http.StatusConflict || !strings.Contains(string(body), "follower") {
		t.Fatalf("follower command: %d %v %s", code, err, body)
	}
	if got := p.stats(exec).Databases[0].LastCommitSequence; got != 0 {
		t.Fatalf("follower committed: %d", got)
	}
}
