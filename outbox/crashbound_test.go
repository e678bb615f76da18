package outbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/outbox"
	"github.com/riffdb/riffdb/primary"
)

// walModel wraps a source and a destination and tracks what a crash at any
// moment would cost, on a model of the primary's write-ahead log: a
// completion (applied without its fsync) is durable once a synced write
// (claim, renewal, retry, dead letter, release, sync) that started after it
// was applied has returned; a claim is durable when it returns. It records
// the most accepted members that were not durably completed (a restart
// delivers them again) and the most members durably claimed and not yet
// accepted (a restart charges each an attempt).
type walModel struct {
	*recordingSource
	dst *memArchive

	mu       sync.Mutex
	applied  map[event.ID]int // completion → its position among completions
	applies  int
	durableN int // completions at positions below it are durable
	accepted map[event.ID]bool
	claimed  map[event.ID]bool // durably claimed, not accepted yet
	// checks counts the quota checks that let a run be claimed; started
	// and finished, the claims that took their place in the log and that
	// returned.
	checks, started, finished int
	maxReplay                 int
	maxCharge                 int
	// slow, when set, holds each claim whose run starts after event 1
	// until every event before that run was accepted: the slowest fsync
	// that does not yet hold up delivery, so that the completions applied
	// meanwhile wait longest for their durability. Otherwise each
	// acceptance waits for the claims in flight: the quickest fsync, so
	// that the most members are claimed and not yet delivered.
	slow bool
}

func newWALModel(src *recordingSource, dst *memArchive, slow bool) *walModel {
	return &walModel{recordingSource: src, dst: dst, slow: slow, applied: map[event.ID]int{},
		accepted: map[event.ID]bool{}, claimed: map[event.ID]bool{}}
}

// replayLocked is how many accepted members a crash now would deliver again.
func (m *walModel) replayLocked() int {
	n := 0
	for id := range m.accepted {
		if pos, ok := m.applied[id]; !ok || pos >= m.durableN {
			n++
		}
	}
	return n
}

// synced runs a synced write: the completions applied before it started are
// durable once it returned. A crash just before that is the worst moment,
// measured first.
func (m *walModel) synced(write func() error) error {
	m.mu.Lock()
	before := m.applies
	m.mu.Unlock()
	err := write()
	m.returned(before, err)
	return err
}

// returned records that a synced write that started when before completions
// were applied returned with err.
func (m *walModel) returned(before int, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.maxReplay = max(m.maxReplay, m.replayLocked())
	if err == nil {
		m.durableN = max(m.durableN, before)
	}
}

func (m *walModel) Claim(ctx context.Context, run []primary.Intent, lease time.Time) ([]primary.Intent, error) {
	m.mu.Lock()
	before := m.applies
	m.started++
	m.mu.Unlock()
	if m.slow { // its fsync takes long: what is applied meanwhile is not covered
		seen := int(run[0].Event.Seq) - 1
		waitFor(func() bool { m.mu.Lock(); defer m.mu.Unlock(); return len(m.accepted) >= seen })
	}
	out, err := m.recordingSource.Claim(ctx, run, lease)
	m.returned(before, err)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.finished++
	for _, in := range out {
		m.claimed[in.Event] = true
	}
	return out, err
}

func (m *walModel) Renew(ctx context.Context, in primary.Intent, lease time.Time) (out primary.Intent, err error) {
	err = m.synced(func() (err error) { out, err = m.recordingSource.Renew(ctx, in, lease); return err })
	return out, err
}

func (m *walModel) Retry(ctx context.Context, in primary.Intent, at time.Time, f primary.Failure) (out primary.Intent, err error) {
	err = m.synced(func() (err error) { out, err = m.recordingSource.Retry(ctx, in, at, f); return err })
	return out, err
}

func (m *walModel) DeadLetter(ctx context.Context, in primary.Intent, reason string, f primary.Failure) (out primary.Intent, err error) {
	err = m.synced(func() (err error) { out, err = m.recordingSource.DeadLetter(ctx, in, reason, f); return err })
	return out, err
}

func (m *walModel) Release(ctx context.Context, in []primary.Intent) (out []primary.Intent, err error) {
	err = m.synced(func() (err error) { out, err = m.recordingSource.Release(ctx, in); return err })
	return out, err
}

func (m *walModel) Sync(ctx context.Context) error {
	return m.synced(func() error { return m.recordingSource.Sync(ctx) })
}

func (m *walModel) CompleteDeferred(ctx context.Context, group []primary.Intent) error {
	if err := m.recordingSource.CompleteDeferred(ctx, group); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, in := range group {
		m.applied[in.Event] = m.applies
		m.applies++
	}
	return nil
}

// Probe, Fit and Accept make the model the worker's destination too.
func (m *walModel) Probe(ctx context.Context) error { return m.dst.Probe(ctx) }
func (m *walModel) Fit(ctx context.Context, keys []event.Key, records [][]byte) (int, error) {
	n, err := m.dst.Fit(ctx, keys, records)
	if err == nil && n > 0 {
		// In this test's passes every quota check is followed by the
		// claim of its run.
		m.mu.Lock()
		m.checks++
		m.mu.Unlock()
	}
	return n, err
}

// Confirm is the archive's: its acceptances are durable once Accept
// returned.
func (m *walModel) Confirm(ctx context.Context) error { return m.dst.Confirm(ctx) }

func (m *walModel) Accept(ctx context.Context, key event.Key, record []byte) (deliverytype.Outcome, error) {
	// Each claim is applied before the next acceptance (the earliest a
	// claim made ahead can be); with a quick fsync it also returns before
	// it.
	waitFor(func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.started == m.checks && (m.slow || m.finished == m.checks)
	})
	m.mu.Lock()
	m.maxCharge = max(m.maxCharge, len(m.claimed))
	m.mu.Unlock()
	out, err := m.dst.Accept(ctx, key, record)
	if err == nil {
		m.mu.Lock()
		m.accepted[key.Event] = true
		delete(m.claimed, key.Event)
		m.mu.Unlock()
	}
	return out, err
}

// TestCrashReplayBound: whatever the alignment of claim runs and completion
// groups (the first run cut to each length from 1 to 16), a crash at any
// moment of a pass with claim-ahead would deliver at most
// outbox.MaxCrashReplay accepted events again, and charge at most
// outbox.MaxCrashCharged claimed, undelivered members an attempt; both
// bounds are reached, so they are the largest.
func TestCrashReplayBound(t *testing.T) {
	if outbox.MaxCrashReplay != 46 || outbox.MaxCrashCharged != 31 {
		t.Fatalf("bounds %d and %d: CONTRIBUTING documents 46 and 31", outbox.MaxCrashReplay, outbox.MaxCrashCharged)
	}
	maxReplay, maxCharge := 0, 0
	for cut := 1; cut <= outbox.MaxRun; cut++ {
		for _, slow := range []bool{true, false} {
			t.Run(fmt.Sprintf("first run %d, slow claims %v", cut, slow), func(t *testing.T) {
				b := setup(t, 1<<30, 0)
				fits := 0
				b.dst.fitHook = func(n int) int {
					if fits++; fits == 1 {
						return min(n, cut)
					}
					return n
				}
				m := newWALModel(b.src, b.dst, slow)
				w, err := outbox.New(outbox.Options{Alias: "default", Source: m, Destination: m, Clock: b.clock,
					Logger: zaptest.NewLogger(t)})
				if err != nil {
					t.Fatal(err)
				}
				b.w = w
				const events = 8*outbox.MaxRun + 5
				b.commit(t, events)
				if res := b.run(t); res.Completed != events || b.pending(t) != 0 {
					t.Fatalf("pass %+v, pending %d", res, b.pending(t))
				}
				if m.maxReplay > outbox.MaxCrashReplay || m.maxCharge > outbox.MaxCrashCharged {
					t.Fatalf("a crash could replay %d accepted events and charge %d members; the bounds are %d and %d",
						m.maxReplay, m.maxCharge, outbox.MaxCrashReplay, outbox.MaxCrashCharged)
				}
				t.Logf("replay %d, charge %d", m.maxReplay, m.maxCharge)
				maxReplay, maxCharge = max(maxReplay, m.maxReplay), max(maxCharge, m.maxCharge)
			})
		}
	}
	if maxReplay != outbox.MaxCrashReplay || maxCharge != outbox.MaxCrashCharged {
		t.Fatalf("the worst crash replays %d and charges %d, the bounds say %d and %d: not the largest",
			maxReplay, maxCharge, outbox.MaxCrashReplay, outbox.MaxCrashCharged)
	}
}
