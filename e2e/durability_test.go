package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/primary"
)

type ack struct {
	seq    uint64
	events []string
}

func orderInput(i int) map[string]any {
	return map[string]any{"order_id": fmt.Sprintf("o-%d", i), "amount_cents": i}
}

// TestCommitsSurviveSIGKILL runs 1,000 commands from 16 concurrent clients,
// SIGKILLs the server mid-run, restarts it, lets the clients retry what was
// not acknowledged with the same idempotency keys, and then checks the store
// offline: every acknowledged command's event and intent is present with
// identical bytes, sequences have no gaps, the stored undelivered count equals
// the number of intents, and idempotent retries returned the original commit.
func TestCommitsSurviveSIGKILL(t *testing.T) {
	t.Parallel()
	const commands, clients = 1000, 16
	e := newEnv(t, envOpts{})
	token := e.token([]string{"execute_commands", "read_statistics"}, "")
	p := e.start()

	acks := make([]*ack, commands)
	var acked atomic.Int64
	killAt := int64(500 + rand.IntN(300))
	t.Logf("SIGKILL after %d acknowledgements", killAt)
	var killOnce sync.Once
	run := func(p *proc, kill bool) {
		var wg sync.WaitGroup
		next := atomic.Int64{}
		for c := 0; c < clients; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1) - 1)
					if i >= commands {
						return
					}
					if acks[i] != nil {
						continue
					}
					code, r, body, err := p.command(context.Background(), token, "place_order", orderInput(i), fmt.Sprintf("key-%d", i))
					if err != nil {
						continue // not acknowledged: retried after the restart
					}
					if code != http.StatusOK {
						t.Errorf("command %d: %d %s", i, code, body)
						return
					}
					acks[i] = &ack{seq: r.CommitSequence, events: r.Events}
					if acked.Add(1) == killAt && kill {
						killOnce.Do(p.kill)
					}
				}
			}()
		}
		wg.Wait()
	}
	run(p, true)
	p.kill()
	before := acked.Load()
	if before >= commands {
		t.Fatalf("the server was not killed during the run")
	}
	firstRound := make([]*ack, commands)
	copy(firstRound, acks)

	p = e.start()
	run(p, false)
	if acked.Load() != commands {
		t.Fatalf("acknowledged %d of %d after the restart", acked.Load(), commands)
	}
	// Idempotent retries of acknowledged commands return the original commit.
	for _, i := range rand.Perm(commands)[:50] {
		code, r, body, err := p.command(context.Background(), token, "place_order", orderInput(i), fmt.Sprintf("key-%d", i))
		if err != nil || code != http.StatusOK || !r.Replayed || r.CommitSequence != acks[i].seq || fmt.Sprint(r.Events) != fmt.Sprint(acks[i].events) {
			t.Fatalf("retry of %d: %d %v %s, want seq %d replayed", i, code, err, body, acks[i].seq)
		}
	}
	code, _, body, _ := p.command(context.Background(), token, "place_order", orderInput(1_000_000), "key-1")
	if code != http.StatusConflict {
		t.Fatalf("same key, different input: %d %s", code, body)
	}
	p.stop()

	// Offline check of the store.
	db := e.openPrimary(t)
	defer db.Close()
	last := db.LastCommitSequence()
	seen := map[uint64]bool{}
	for i, a := range acks {
		if seen[a.seq] {
			t.Fatalf("two commands share sequence %d", a.seq)
		}
		seen[a.seq] = true
		payload, _ := json.Marshal(orderInput(i))
		want, err := event.NewStored(event.ID{Seq: a.seq}, "order_placed", payload)
		must(t, err)
		got, err := db.LoadEvent(context.Background(), event.ID{Seq: a.seq})
		if err != nil {
			t.Fatalf("acknowledged command %d (seq %d) lost: %v", i, a.seq, err)
		}
		if string(got) != string(want.Encode()) {
			t.Fatalf("event of command %d differs from its exact bytes", i)
		}
	}
	// No gaps: every sequence up to the last holds an event.
	for s := uint64(1); s <= last; s++ {
		if _, err := db.LoadEvent(context.Background(), event.ID{Seq: s}); err != nil {
			t.Fatalf("gap at sequence %d of %d: %v", s, last, err)
		}
	}
	if last < commands {
		t.Fatalf("last sequence %d < %d commands", last, commands)
	}
	intents, err := db.ScanIntents(context.Background(), nil, 1_000_000)
	must(t, err)
	n, state := db.UndeliveredCount()
	if state != primary.IndexReady || n != uint64(len(intents)) || uint64(len(intents)) != last {
		t.Fatalf("undelivered count %d (%v), intents %d, commits %d", n, state, len(intents), last)
	}
	t.Logf("acknowledged before SIGKILL: %d; commits after restart: %d; last sequence %d", before, commands-before, last)
}
