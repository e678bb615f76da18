package e2e_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestMonitoringSeesTheBacklogRiseAndDrain polls /v1/stats every 100 ms
// during a load run, as monitoring does, and checks that the pending count
// rises and returns to 0; then `riffdb --output json server stats` prints the
// same numbers as the endpoint.
func TestMonitoringSeesTheBacklogRiseAndDrain(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a load run polled every 100 ms until its backlog drains")
	}
	t.Parallel()
	e := newEnv(t, envOpts{outbox: true})
	token := e.token([]string{"execute_commands", "read_statistics"}, "")
	p := e.start()

	var mu sync.Mutex
	var samples []uint64
	var nulls int
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			s := p.stats(token).Databases[0]
			mu.Lock()
			if s.PendingOutboxDeliveries == nil {
				nulls++
			} else {
				samples = append(samples, *s.PendingOutboxDeliveries)
			}
			mu.Unlock()
		}
	}()
	burst(t, p, token, 0, 6000)
	p.waitDrained(t, token)
	time.Sleep(250 * time.Millisecond) // two more polls at rest
	close(stop)
	<-polled
	var peak uint64
	for _, v := range samples {
		peak = max(peak, v)
	}
	if len(samples) < 5 || peak == 0 || samples[len(samples)-1] != 0 || nulls != 0 {
		t.Fatalf("samples %v (nulls %d): the count must rise above 0 and return to 0", samples, nulls)
	}
	t.Logf("%d polls, peak pending %d", len(samples), peak)

	// The CLI prints the same numbers as the endpoint.
	tokenFile := filepath.Join(e.root, "token")
	must(t, os.WriteFile(tokenFile, []byte(token+"\n"), 0o600))
	r := cli(t, "server", "stats", "--address", p.api, "--token-file", tokenFile)
	if !r.OK || r.Command != "server.stats" {
		t.Fatalf("server stats: %+v", r.Error)
	}
	var viaCLI stats
	must(t, json.Unmarshal(r.Result, &viaCLI))
	direct := p.stats(token)
	a, _ := json.Marshal(viaCLI)
	b, _ := json.Marshal(direct)
	if string(a) != string(b) {
		t.Fatalf("CLI %s\nHTTP %s", a, b)
	}
	if viaCLI.Databases[0].LastCommitSequence != 6000 || *viaCLI.Databases[0].PendingOutboxDeliveries != 0 {
		t.Fatalf("CLI stats %s", a)
	}
}
