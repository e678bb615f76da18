package e2e_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riffdb/riffdb/primary"
)

// Issue #50's redrive on the real binary: dead letters returned to pending
// through the CLI and the HTTP API, delivered once each, and identity
// conflicts dead letters again.

// redriveResult is the CLI's and the API's answer to a redrive.
type redriveResult struct {
	Database    string   `json:"database"`
	Redriven    []string `json:"redriven"`
	NotRedriven []struct {
		EventID string `json:"event_id"`
		Why     string `json:"why"`
		State   string `json:"state"`
	} `json:"not_redriven"`
	NextAfter string `json:"next_after"`
	Conflicts int    `json:"conflicts"`
	Note      string `json:"note"`
}

// redriveCLI runs `riffdb outbox dead-letters retry ARGS` against p.
func redriveCLI(t *testing.T, p *proc, tokenFile string, args ...string) (cliResult, redriveResult) {
	t.Helper()
	r := cli(t, append(append([]string{"outbox", "dead-letters", "retry"}, args...),
		"--database", "default", "--address", "http://"+p.api, "--token-file", tokenFile)...)
	var res redriveResult
	if r.OK {
		must(t, json.Unmarshal(r.Result, &res))
	}
	return r, res
}

// commitWithoutOutbox commits n place_order commands (orders from first on)
// with the outbox section out of the configuration, so that their events
// stay pending, and returns their event ids. The server is stopped after.
func commitWithoutOutbox(t *testing.T, e *env, token string, first, n int) []string {
	t.Helper()
	withOutbox, err := os.ReadFile(e.config)
	must(t, err)
	must(t, os.WriteFile(e.config, withoutOutbox(t, withOutbox), 0o600))
	p := e.start()
	var ids []string
	for i := range n {
		code, r, body, err := p.command(context.Background(), token, "place_order", orderInput(first+i), "")
		if err != nil || code != http.StatusOK {
			t.Fatalf("command: %d %v %s", code, err, body)
		}
		ids = append(ids, r.Events...)
	}
	p.stop()
	must(t, os.WriteFile(e.config, withOutbox, 0o600))
	return ids
}

// exhaustByHand spends every attempt of each pending intent of the stopped
// database and dead-letters it attempts_exhausted: the primary transitions
// the worker makes when 32 deliveries in a row failed after a successful
// probe (claim after claim, then the dead letter), applied offline. An
// outage exhausts at most the runs in flight (exhaustByOutage); this makes
// hundreds of dead letters at once.
func exhaustByHand(t *testing.T, e *env) int {
	t.Helper()
	ctx := context.Background()
	db := e.openPrimary(t)
	defer func() { must(t, db.Close()) }()
	all, err := db.ScanIntents(ctx, nil, 100000)
	must(t, err)
	var ins []primary.Intent
	for _, in := range all {
		if in.State == primary.IntentPending {
			ins = append(ins, in)
		}
	}
	for range 32 {
		ins, err = db.Claim(ctx, ins, time.Now().Add(time.Minute))
		must(t, err)
	}
	for _, in := range ins {
		_, err := db.DeadLetter(ctx, in, "attempts_exhausted", primary.Failure{At: time.Now(), Class: "unavailable", Reason: "destination_unavailable"})
		must(t, err)
	}
	return len(ins)
}

// exhaustByOutage commits bursts of 1,000 place_order commands (orders
// from first on) and moves the archive away while a backlog is delivered
// (archiveAwayDuringBurst), until events were dead-lettered
// attempts_exhausted. It needs a server configured with
// max_delivery_attempts = 1: the members in flight when the archive goes
// away use their only attempt. A removal that lands between runs fails the
// group check first (no attempt is spent), so it tries a few times. It
// waits each time until only dead letters are left, and returns how many
// events it committed.
func exhaustByOutage(t *testing.T, e *env, p *proc, token, reader string, first int) int {
	t.Helper()
	exhausted := map[string]string{"riffdb_database": "default", "riffdb_reason": "attempts_exhausted"}
	events := 0
	for try := 0; sample(scrape(t, p, false), "riffdb_outbox_dead_letters_total", exhausted) <= 0; try++ {
		if try == 12 {
			t.Fatalf("no exhausted event after %d archive removals during delivery", try)
		}
		_, n := archiveAwayDuringBurst(t, e, p, token, first+events)
		events += n
		waitFor(t, 60*time.Second, "delivery to catch up (only dead letters left)", func() bool {
			_, _, pending := p.outboxState(token)
			return int(pending) == len(listPage(t, p, reader, "--state", "dead_letter", "--limit", "1000").Deliveries)
		})
	}
	return events
}

// TestRedriveDeadLetters is #50's end-to-end scenario on the real binary,
// configured with max_delivery_attempts = 1. An identity conflict is a dead
// letter; then the archive goes away while a backlog is delivered, and the
// events in flight use their only attempt (attempts_exhausted). The
// operator lists the dead letters (reason, attempts, last failure), looks
// one up, puts the archive back, and redrives the exhausted ones by
// reason: they are delivered and archived once each (inspect verifies
// every event), and the pending count returns to the conflict alone. The
// conflict redriven by id is a dead letter again (identity_conflict), with
// its redrive counted. Tokens without manage_outbox are refused; the
// redrives are counted and logged once each with the capability's id,
// never the token.
func TestRedriveDeadLetters(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: bursts with the archive moved away until events are exhausted")
	}
	t.Parallel()
	e := newEnv(t, envOpts{outbox: true, extra: "max_delivery_attempts = 1\n"})
	token := e.token([]string{"execute_commands", "read_statistics"}, "")
	reader := e.tokenFile("reader", e.token([]string{"read_outbox"}, "default"))
	managerToken := e.token([]string{"manage_outbox"}, "default")
	manager := e.tokenFile("manager", managerToken)
	p, events := conflictDeadLetter(t, e, token)
	waitFor(t, 60*time.Second, "only the dead letter left", func() bool { _, _, pending := p.outboxState(token); return pending == 1 })
	dbID := p.stats(token).Databases[0].DatabaseID
	committed := 2 + exhaustByOutage(t, e, p, token, reader, 100)

	dead := listPage(t, p, reader, "--state", "dead_letter", "--limit", "1000")
	var exhausted []string
	for _, it := range dead.Deliveries {
		switch {
		case it.LastFailure == nil || it.LastFailure.At.IsZero():
			t.Fatalf("dead letter without its last failure: %+v", it)
		case it.EventID == events[0]:
			if it.DeadLetterReason != "identity_conflict" || it.LastFailure.Class != "conflict" || it.Attempts < 1 {
				t.Fatalf("the conflict: %+v", it)
			}
		case it.DeadLetterReason != "attempts_exhausted" || it.Attempts != 1 ||
			it.LastFailure.Class != "unavailable" || it.LastFailure.Reason != "destination_unavailable":
			t.Fatalf("dead letter %+v, want attempts_exhausted after its one attempt, the outage its last failure", it)
		default:
			exhausted = append(exhausted, it.EventID)
		}
	}
	if len(exhausted) == 0 || len(exhausted) != len(dead.Deliveries)-1 {
		t.Fatalf("dead letters: %+v", dead.Deliveries)
	}
	if s := showEvent(t, p, reader, exhausted[0]); s.State != "dead_letter" || s.Delivery == nil || s.Delivery.DeadLetterReason != "attempts_exhausted" {
		t.Fatalf("show %s: %+v", exhausted[0], s)
	}
	t.Logf("%d events committed, %d exhausted by the outage, 1 conflict", committed, len(exhausted))

	// Refused without manage_outbox.
	if r, _ := redriveCLI(t, p, reader, "--reason", "exhausted"); r.OK || r.Error == nil || r.Error.Code != "forbidden" {
		t.Fatalf("redrive with read_outbox only: %+v", r)
	}
	if code, _, err := p.do(context.Background(), http.MethodPost, "/v1/databases/default/outbox/dead-letters/retry", "",
		[]byte(`{"reason":"exhausted"}`)); err != nil || code != http.StatusUnauthorized {
		t.Fatalf("redrive without a token: %d %v", code, err)
	}

	r, res := redriveCLI(t, p, manager, "--reason", "exhausted")
	if !r.OK || r.Exit != 0 || !slices.Equal(res.Redriven, exhausted) || res.Conflicts != 0 {
		t.Fatalf("redrive of the exhausted: %+v %+v %s", r, res, r.Stderr)
	}
	waitFor(t, 60*time.Second, "the redriven events delivered", func() bool { _, _, pending := p.outboxState(token); return pending == 1 })
	for _, id := range exhausted {
		if s := showEvent(t, p, reader, id); s.State != "delivered" {
			t.Fatalf("redriven %s: %+v", id, s)
		}
	}

	r, res = redriveCLI(t, p, manager, "--event", events[0], "--event", exhausted[0])
	if !r.OK || !slices.Equal(res.Redriven, events[:1]) || res.Conflicts != 1 || !strings.Contains(res.Note, "dead letter again") ||
		len(res.NotRedriven) != 1 || res.NotRedriven[0].EventID != exhausted[0] || res.NotRedriven[0].Why != "not_undelivered" {
		t.Fatalf("redrive of the conflict: %+v %+v", r, res)
	}
	waitFor(t, 30*time.Second, "the conflict a dead letter again", func() bool {
		return showEvent(t, p, reader, events[0]).State == "dead_letter"
	})
	if s := showEvent(t, p, reader, events[0]); s.Delivery.DeadLetterReason != "identity_conflict" || s.Delivery.Redrives != 1 {
		t.Fatalf("the conflict after its redrive: %+v", s.Delivery)
	}
	if _, _, pending := p.outboxState(token); pending != 1 {
		t.Fatalf("pending %d, want the conflict only", pending)
	}

	text := scrape(t, p, false)
	for reason, want := range map[string]float64{"attempts_exhausted": float64(len(exhausted)), "identity_conflict": 1} {
		if got := sample(text, "riffdb_outbox_dead_letters_redriven_total", map[string]string{"riffdb_database": "default", "riffdb_reason": reason}); got != want {
			t.Errorf("riffdb_outbox_dead_letters_redriven_total{%s} = %v, want %v", reason, got, want)
		}
	}
	p.stop()
	logs := p.stderr.String()
	if n := strings.Count(logs, `"msg":"dead letters redriven"`); n != 2 || !strings.Contains(logs, `"capability_id"`) {
		t.Fatalf("%d redrive log lines, want 2 with the capability's id", n)
	}
	if strings.Contains(logs, managerToken) {
		t.Fatal("the log holds the manager's token")
	}
	// The conflict was never stored: the archive holds every other event.
	if r, ins := e.inspect(dbID, 256); ins.Integrity != "verified" || ins.RecordCount != int64(committed) {
		t.Fatalf("inspect after the redrives: %+v %+v, want %d records verified", r, ins, committed)
	}
}

// TestRedrivesRaceTheWorkerAndSIGKILL: 300 exhausted dead letters are
// redriven by four concurrent clients in overlapping batches while the
// worker delivers what they redrove; the server is SIGKILLed between
// batches. No event is redriven by two requests, and after a restart and a
// redrive of what is left every event is archived exactly once: nothing
// pending, inspect verifies 300 records.
func TestRedrivesRaceTheWorkerAndSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 300 dead letters redriven concurrently through a SIGKILL")
	}
	t.Parallel()
	const n = 300
	e := newEnv(t, envOpts{outbox: true})
	token := e.token([]string{"execute_commands", "read_statistics"}, "")
	manager := e.token([]string{"manage_outbox"}, "")
	p := e.start()
	dbID := p.stats(token).Databases[0].DatabaseID
	p.stop()
	ids := commitWithoutOutbox(t, e, token, 0, n)
	if got := exhaustByHand(t, e); got != n {
		t.Fatalf("%d exhausted, want %d", got, n)
	}
	p = e.start()

	var (
		mu       sync.Mutex
		redriven = map[string]int{}
		answered int
		wg       sync.WaitGroup
	)
	killAt := 3 + rand.IntN(6)
	killed := make(chan struct{})
	var killOnce sync.Once
	for c := range 4 {
		wg.Go(func() {
			order := slices.Clone(ids)
			rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			for len(order) > 0 {
				batch := order[:min(40+c, len(order))]
				order = order[len(batch):]
				body, _ := json.Marshal(map[string]any{"event_ids": batch})
				code, b, err := p.do(context.Background(), http.MethodPost, "/v1/databases/default/outbox/dead-letters/retry", manager, body)
				if err != nil {
					return // the SIGKILL
				}
				if code != http.StatusOK {
					t.Errorf("redrive: %d %s", code, b)
					return
				}
				var res redriveResult
				if err := json.Unmarshal(b, &res); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, id := range res.Redriven {
					redriven[id]++
				}
				answered++
				if answered == killAt {
					killOnce.Do(func() { p.kill(); close(killed) })
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	killOnce.Do(func() { p.kill(); close(killed) })
	<-killed
	for id, times := range redriven {
		if times != 1 {
			t.Fatalf("event %s redriven by %d requests", id, times)
		}
	}
	t.Logf("SIGKILL after %d answered redrive requests, %d events redriven", answered, len(redriven))

	p = e.start()
	mf := e.tokenFile("manager", manager)
	r, res := redriveCLI(t, p, mf, "--reason", "exhausted")
	if !r.OK {
		t.Fatalf("redrive of what is left: %+v %s", r, r.Stderr)
	}
	for _, id := range res.Redriven {
		if redriven[id] > 0 {
			t.Fatalf("event %s redriven before the SIGKILL was a dead letter again after it", id)
		}
	}
	// A request the SIGKILL cut off may have redriven its batch without
	// its answer arriving: those events are pending after the restart,
	// not dead letters, and are delivered without another redrive.
	if got := len(redriven) + len(res.Redriven); got > n {
		t.Fatalf("%d events redriven in all, of %d", got, n)
	}
	p.waitDrained(t, token)
	p.stop()
	if _, ins := e.inspect(dbID, 256); ins.Integrity != "verified" || ins.RecordCount != n {
		t.Fatalf("inspect: %+v, want %d records verified", ins, n)
	}
}

// archiveAwayDuringBurst sends a burst of 1,000 place_order commands
// (orders from `from` on) and, once a delivery backlog is present, moves the
// archive directory away until the worker reports it unavailable, then puts
// the same archive back (an empty directory instead would stop delivery:
// archive_lost_records). The backlog may be delivered before the archive is
// gone, leaving the worker nothing to fail on: then it commits one more
// command at each poll until the worker notices. It reports whether a
// backlog was present (without one nothing was moved) and how many events
// it committed.
func archiveAwayDuringBurst(t *testing.T, e *env, p *proc, token string, from int) (busy bool, events int) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); burst(t, p, token, from, 1000) }()
	events = 1000
	waitFor(t, 30*time.Second, "a delivery backlog or the end of the burst", func() bool {
		_, _, pending := p.outboxState(token)
		if pending > 32 {
			busy = true
			return true
		}
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
	away := e.outbox + ".away"
	if busy {
		must(t, os.Rename(e.outbox, away))
	}
	<-done
	if busy {
		waitFor(t, 30*time.Second, "the removal to be noticed", func() bool {
			if s, r, _ := p.outboxState(token); s == "degraded" && r == "destination_unavailable" {
				return true
			}
			code, _, body, err := p.command(context.Background(), token, "place_order", orderInput(from+events), "")
			if err != nil || code != http.StatusOK {
				t.Fatalf("command: %d %v %s", code, err, body)
			}
			events++
			return false
		})
		must(t, os.Rename(away, e.outbox))
	}
	return busy, events
}
