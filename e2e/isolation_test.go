package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// burst runs n commands from 16 clients and returns the acknowledged rate.
func burst(t *testing.T, p *proc, token string, from, n int) float64 {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < 16; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				code, _, body, err := p.command(context.Background(), token, "place_order", orderInput(from+i), "")
				if err != nil || code != http.StatusOK {
					t.Errorf("command during an archive fault: %d %v %s", code, err, body)
					return
				}
			}
		}()
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}

func (p *proc) outboxState(token string) (string, string, uint64) {
	s := p.stats(token).Databases[0]
	var pending uint64
	if s.PendingOutboxDeliveries != nil {
		pending = *s.PendingOutboxDeliveries
	}
	return s.Outbox.Health, s.Outbox.Reason, pending
}

// outboxHealth is the first database's outbox entry of /v1/health.
type outboxHealth struct {
	State          string `json:"state"`
	Reason         string `json:"reason"`
	MissingRecords int64  `json:"missing_records"`
}

func (p *proc) health(token string) outboxHealth {
	p.t.Helper()
	code, b, err := p.do(context.Background(), http.MethodGet, "/v1/health", token, nil)
	if err != nil || code != http.StatusOK {
		p.t.Fatalf("health: %d %v %s", code, err, b)
	}
	var h struct {
		Databases []struct {
			Outbox outboxHealth `json:"outbox"`
		} `json:"databases"`
	}
	if err := json.Unmarshal(b, &h); err != nil || len(h.Databases) == 0 {
		p.t.Fatalf("health: %v %s", err, b)
	}
	return h.Databases[0].Outbox
}

func (p *proc) waitHealth(t *testing.T, token, state, reason string) {
	t.Helper()
	waitFor(t, 30*time.Second, "outbox health "+state+"/"+reason, func() bool {
		s, r, _ := p.outboxState(token)
		return s == state && r == reason
	})
}

func (p *proc) waitDrained(t *testing.T, token string) {
	t.Helper()
	waitFor(t, 2*time.Minute, "delivery to catch up", func() bool {
		s, _, pending := p.outboxState(token)
		return s == "healthy" && pending == 0
	})
}

// TestPrimaryIsolation makes the archive unwritable, removes it, and fills
// its filesystem, each while commands run: commands keep being acknowledged
// (the rate is reported against the healthy rate measured in the same run),
// health shows the fault, and delivery catches up after repair.
func TestPrimaryIsolation(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the archive fault campaign (unwritable, removed, full), rates against the healthy rate")
	}
	const n = 3000
	e := newEnv(t, envOpts{})
	// Put the outbox directory on its own small filesystem so that it can
	// be filled without touching the primary's disk.
	mnt := filepath.Join(e.root, "outboxfs")
	must(t, os.Mkdir(mnt, 0o700))
	tmpfs := exec.Command("mount", "-t", "tmpfs", "-o", "size=160m,mode=0700", "tmpfs", mnt).Run() == nil
	if tmpfs {
		t.Cleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })
	} else {
		t.Log("cannot mount a tmpfs (needs root): the full-filesystem phase will be skipped; the other phases run on the test disk")
	}
	e.outbox = filepath.Join(mnt, "outbox")
	must(t, os.Mkdir(e.outbox, 0o700))
	e.appendConfig(fmt.Sprintf("\n[maintenance.outbox]\nkind = \"durable_local\"\ndirectory = %q\nquota_encoded_bytes = 1073741824\n", e.outbox))
	token := e.token([]string{"execute_commands", "read_statistics", "read_health"}, "")
	p := e.start()
	next := 0
	run := func() float64 { r := burst(t, p, token, next, n); next += n; return r }

	healthy := run()
	p.waitDrained(t, token)
	t.Logf("healthy: %.0f commands/s", healthy)
	report := func(phase string, rate float64) {
		t.Logf("%s: %.0f commands/s = %.2fx the healthy rate", phase, rate, rate/healthy)
		// A collapse would mean commands wait on the archive. The target
		// (0.8x) is reported, not asserted: this machine is noisy.
		if rate < 0.4*healthy {
			t.Errorf("%s: commands slowed to %.2fx the healthy rate", phase, rate/healthy)
		}
	}

	t.Run("unwritable", func(t *testing.T) {
		must(t, os.Chmod(e.outbox, 0o500))
		burst(t, p, token, next, 16) // gives the worker a run to notice
		next += 16
		p.waitHealth(t, token, "paused", "destination_refused")
		report("unwritable", run())
		must(t, os.Chmod(e.outbox, 0o700)) // repair in place: no restart
		p.waitDrained(t, token)
	})
	t.Run("removed", func(t *testing.T) {
		// The archive disappears (an operator moves it away); repairing
		// availability in place means putting the same archive back.
		away := filepath.Join(mnt, "outbox.away")
		must(t, os.Rename(e.outbox, away))
		burst(t, p, token, next, 16)
		next += 16
		p.waitHealth(t, token, "degraded", "destination_unavailable")
		report("removed", run())
		must(t, os.Rename(away, e.outbox))
		p.waitDrained(t, token)
	})
	t.Run("filesystem full", func(t *testing.T) {
		if !tmpfs {
			t.Skip("needs a tmpfs mount (root) for the archive's filesystem")
		}
		ballast := filepath.Join(mnt, "ballast")
		fill := exec.Command("fallocate", "-l", "120m", ballast)
		if out, err := fill.CombinedOutput(); err != nil {
			t.Fatalf("fallocate: %v %s", err, out)
		}
		// The archive's free-space guard sees space taken by anything else
		// within 100 ms (archive/fit.go): a burst sooner than that after the
		// drain may still be admitted against the last measurement.
		time.Sleep(250 * time.Millisecond)
		burst(t, p, token, next, 16)
		next += 16
		p.waitHealth(t, token, "degraded", "capacity_exhausted")
		report("filesystem full", run())
		must(t, os.Remove(ballast))
		p.waitDrained(t, token)
	})
	s := p.stats(token).Databases[0]
	if s.LastCommitSequence != uint64(next) || *s.PendingOutboxDeliveries != 0 {
		t.Fatalf("last %d, want %d; pending %d", s.LastCommitSequence, next, *s.PendingOutboxDeliveries)
	}
	// Replacing the archive by an empty directory is no repair: the events
	// completed into the old archive would be gone without a trace. Delivery
	// stops, says how many completed events are missing, and creates
	// nothing; commands are still acknowledged.
	t.Run("replaced by an empty directory", func(t *testing.T) {
		delivered := s.Outbox.CompletedDeliveries
		if delivered == 0 || s.Outbox.ArchiveRecordCount == nil || uint64(*s.Outbox.ArchiveRecordCount) < delivered {
			t.Fatalf("completed %d, archive records %v", delivered, s.Outbox.ArchiveRecordCount)
		}
		removeLiveDir(t, e.outbox)
		must(t, os.Mkdir(e.outbox, 0o700))
		burst(t, p, token, next, 16)
		next += 16
		p.waitHealth(t, token, "stopped", "archive_lost_records")
		h := p.health(token)
		if h.MissingRecords < int64(delivered) {
			t.Fatalf("missing_records %d, want at least %d", h.MissingRecords, delivered)
		}
		if names, _ := os.ReadDir(e.outbox); len(names) != 0 {
			t.Fatalf("an archive was created in the empty directory")
		}
		if st := p.stats(token).Databases[0]; st.LastCommitSequence != uint64(next) {
			t.Fatalf("commands were not acknowledged: last %d, want %d", st.LastCommitSequence, next)
		}
	})
	p.stop()
}
