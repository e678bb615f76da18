package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
)

// TestNoSecretsInLogsOrErrorBodies drives a debug-level server through
// accepted, replayed and refused commands whose values, keys and tokens
// carry marker strings, then stops it: no log line and no HTTP error body
// contains a token (valid or not), a payload value, an idempotency key or
// a filesystem path of the installation.
func TestNoSecretsInLogsOrErrorBodies(t *testing.T) {
	root := filepath.Join(t.TempDir(), "dev")
	cfg, token, err := DevSetup(root, nil, config.Overrides{Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", LogLevel: "debug"})
	if err != nil {
		t.Fatal(err)
	}
	var logs testutil.SyncBuffer
	s, err := New(context.Background(), Options{Config: cfg, LogOutput: &logs})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())

	const (
		value   = "VALUE-MARKER-7f3a"
		key     = "KEY-MARKER-91c2"
		badTok  = "riffdb_BADTOKENMARKERBADTOKENMARKERBADTOKENMAR"
		longKey = "LONGKEY-MARKER-"
	)
	var bodies []string
	post := func(tok, body string) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+s.APIAddr()+"/v1/databases/default/commands/place_order", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			bodies = append(bodies, string(b))
		}
		return resp.StatusCode
	}
	good := `{"input":{"order_id":"` + value + `","amount_cents":5,"note":"` + value + `"},"idempotency_key":"` + key + `"}`
	for _, tc := range []struct {
		tok, body string
		want      int
	}{
		{token, good, 200},
		{token, good, 200}, // replayed
		{token, strings.Replace(good, `"amount_cents":5`, `"amount_cents":6`, 1), 409},
		{badTok, good, 401},
		{token, `{"input":{"order_id":5,"amount_cents":"` + value + `"}}`, 400},
		{token, `{"input":{"order_id":"` + value + "\xff" + `","amount_cents":1}}`, 400},
		{token, `{"input":{"order_id":"a","amount_cents":1,"` + longKey + strings.Repeat("x", 4096) + `":1}}`, 400},
		{token, `{"input":{"order_id":"a","amount_cents":1},"idempotency_key":"` + key + strings.Repeat("k", 300) + `"}`, 400},
		{token, `{"input":{"order_id":"` + value + `","amount_cents":1}, "extra":"` + value + `"}`, 400},
	} {
		if got := post(tc.tok, tc.body); got != tc.want {
			t.Fatalf("%.60s…: %d, want %d", tc.body, got, tc.want)
		}
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if !strings.Contains(out, "riffdb stopped") {
		t.Fatalf("no log captured:\n%s", out)
	}
	for _, secret := range []string{token, badTok, value, key, root} {
		if strings.Contains(out, secret) {
			t.Errorf("the log contains %q:\n%s", secret, grepLine(out, secret))
		}
		for _, b := range bodies {
			if strings.Contains(b, secret) {
				t.Errorf("an error body contains %q: %s", secret, b)
			}
		}
	}
	t.Logf("error bodies:\n%s", strings.Join(bodies, ""))
	// An unknown key is named, but never at any length a client chooses.
	for _, b := range bodies {
		if len(b) > 1024 {
			t.Errorf("an error body of %d bytes: %.200s…", len(b), b)
		}
	}
}

func grepLine(s, sub string) string {
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			return string(bytes.TrimSpace([]byte(line)))
		}
	}
	return ""
}
