package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/riffdb/riffdb/primary"
)

// dmExtendIntents gives two pending events of the stopped database the
// states that move the primary to the extended key layout: the first a
// failed attempt (retry_scheduled, its failure recorded), the second its
// attempts used up (a dead letter), as the worker would have left them.
// The damage matrix then damages a store of that layout.
func dmExtendIntents(t *testing.T, e *env) {
	t.Helper()
	ctx := context.Background()
	db := e.openPrimary(t)
	defer func() { must(t, db.Close()) }()
	ins, err := db.ScanIntents(ctx, nil, 2)
	must(t, err)
	if len(ins) != 2 {
		t.Fatalf("%d pending intents, want 2", len(ins))
	}
	claimed, err := db.Claim(ctx, ins, time.Now().Add(time.Minute))
	must(t, err)
	failure := primary.Failure{At: time.Now(), Class: "unavailable", Reason: "destination_unavailable"}
	_, err = db.Retry(ctx, claimed[0], time.Now(), failure)
	must(t, err)
	_, err = db.DeadLetter(ctx, claimed[1], "attempts_exhausted", failure)
	must(t, err)
}

// dmRedrive redrives the installation's one exhausted dead letter through
// the API.
func dmRedrive(t *testing.T, p *proc, token string) {
	t.Helper()
	code, body, err := p.do(context.Background(), http.MethodPost, "/v1/databases/default/outbox/dead-letters/retry", token,
		[]byte(`{"reason":"exhausted"}`))
	var res redriveResult
	if err != nil || code != http.StatusOK || json.Unmarshal(body, &res) != nil || len(res.Redriven) != 1 {
		t.Fatalf("redrive: %d %v %s, want one event redriven", code, err, body)
	}
}
