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
	"time"
)

type inspectResult struct {
	Format          string `json:"format"`
	DatabaseBinding string `json:"database_binding"`
	RecordCount     int64  `json:"record_count"`
	EncodedBytes    int64  `json:"encoded_bytes"`
	AllocatedBytes  int64  `json:"allocated_bytes"`
	PagesExamined   int    `json:"pages_examined"`
	Integrity       string `json:"integrity"`
}

func (e *env) inspect(dbID string, maxPages int) (cliResult, inspectResult) {
	e.t.Helper()
	r := cli(e.t, "outbox", "archive", "inspect", "--directory", e.outbox, "--database-id", dbID, "--max-pages", fmt.Sprint(maxPages))
	var res inspectResult
	if r.Result != nil {
		must(e.t, json.Unmarshal(r.Result, &res))
	}
	return r, res
}

// TestDeliveryUnderSIGKILL runs 20,000 commands while the server is
// SIGKILLed ten times at random moments during delivery and restarted; at the
// end the offline inspection verifies exactly one record per committed event
// and stats show nothing pending.
func TestDeliveryUnderSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 20,000 commands through ten SIGKILLs during delivery")
	}
	const commands, clients, kills = 20000, 16, 10
	e := newEnv(t, envOpts{outbox: true})
	token := e.token([]string{"execute_commands", "read_statistics"}, "")
	var mu sync.Mutex
	p := e.start()
	current := func() *proc { mu.Lock(); defer mu.Unlock(); return p }

	events := make([]int, commands) // events per acknowledged command; 0 = not yet acknowledged
	var acked atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	var next atomic.Int64
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= commands {
					return
				}
				for events[i] == 0 { // retry with the same key until acknowledged
					var code int
					var r commandResp
					var err error
					if i%5 == 0 {
						code, r, _, err = current().command(context.Background(), token, "ship_order",
							map[string]any{"order_id": fmt.Sprint(i), "carrier": "acme"}, fmt.Sprint("k", i))
					} else {
						code, r, _, err = current().command(context.Background(), token, "place_order", orderInput(i), fmt.Sprint("k", i))
					}
					if err != nil || code != http.StatusOK {
						time.Sleep(20 * time.Millisecond) // the server is restarting
						continue
					}
					events[i] = len(r.Events)
					acked.Add(1)
				}
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	for k := 0; k < kills; k++ {
		select {
		case <-done:
		case <-time.After(time.Duration(200+rand.IntN(1200)) * time.Millisecond):
		}
		old := current()
		old.kill()
		np := e.start()
		mu.Lock()
		p = np
		mu.Unlock()
		t.Logf("kill %d at %d acknowledged commands", k+1, acked.Load())
	}
	<-done
	total := 0
	for _, n := range events {
		total += n
	}
	var dbID string
	// Healthy too: a last kill after everything was delivered leaves
	// nothing pending at once, while the restarted server still opens and
	// validates its archive ("starting").
	waitFor(t, 5*time.Minute, "the outbox to drain and turn healthy", func() bool {
		s := current().stats(token)
		d := s.Databases[0]
		dbID = d.DatabaseID
		return d.PendingOutboxDeliveries != nil && *d.PendingOutboxDeliveries == 0 && d.LastCommitSequence == uint64(commands) &&
			d.Outbox.Health == "healthy"
	})
	current().stop()
	r, res := e.inspect(dbID, 256)
	if !r.OK || res.Integrity != "verified" || res.RecordCount != int64(total) || res.DatabaseBinding != dbID {
		t.Fatalf("inspect: %+v %+v (want %d records verified)", r.Error, res, total)
	}
	t.Logf("%d commands, %d events, %d SIGKILLs: inspect %+v", commands, total, kills, res)
}
