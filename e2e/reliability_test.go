package e2e_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/testsupport/reliability"
	"github.com/riffdb/riffdb/primary"
	"github.com/riffdb/riffdb/primary/contract"
)

// The SIGKILL campaign. A mixed load (place_order with one event, ship_order
// with two, from several concurrent clients, each retrying a command with
// its idempotency key until it is acknowledged) runs against the real
// binary, which is SIGKILLed again and again at random moments of four
// kinds:
//
//   - commit: while the clients commit;
//   - delivery: right after the load paused, while the worker drains what
//     is pending;
//   - startup: at a random delay after the process started, before or
//     just after it was ready;
//   - validation: just after it was ready, while the worker opens and
//     validates the archive and delivers the backlog left by the last kill.
//
// After every kill the server is restarted, every command in flight is
// retried until acknowledged, a few acknowledged commands are sent again
// (each must replay its original commit), delivery must drain to 0 pending
// with healthy outbox health, and then, with the server stopped, the
// campaign checks offline that every acknowledged event is in the
// primary's history and in the archive with its exact bytes, that the
// history holds nothing else, that no archive key ever held two values, and
// that `riffdb outbox archive inspect` verifies the accounting with
// record_count equal to the events acknowledged.

const (
	relDefaultKills = 25
	relClients      = 6
)

var relKinds = []string{"commit", "delivery", "startup", "validation"}

// relCommand is one command of the load and what acknowledged it.
type relCommand struct {
	name  string
	input map[string]any
	key   string
	seq   uint64   // 0 until acknowledged
	ids   []string // event ids of the acknowledgement
}

// eventTypes are the events each command emits, in order.
var relEventTypes = map[string][]string{
	"place_order": {"order_placed"},
	"ship_order":  {"order_shipped", "customer_notified"},
}

// expected returns the exact stored bytes of the command's events.
func (c *relCommand) expected(t *testing.T) map[event.ID][]byte {
	t.Helper()
	payload, err := json.Marshal(c.input)
	must(t, err)
	out := map[event.ID][]byte{}
	for pos, typ := range relEventTypes[c.name] {
		s, err := event.NewStored(event.ID{Seq: c.seq, Pos: uint32(pos)}, typ, payload)
		must(t, err)
		out[s.ID] = s.Encode()
	}
	return out
}

// relLoad is the mixed load: clients commit new commands while it is not
// paused and always retry the ones in flight until acknowledged.
type relLoad struct {
	t     *testing.T
	token string
	seed  uint64

	procMu sync.Mutex
	proc   *proc

	mu       sync.Mutex
	cmds     []*relCommand
	paused   bool
	burst    bool // no pause between commands: outpace delivery to build a backlog
	inflight int
	stopped  bool
	failures []string // answers that are neither success nor retryable

	retries  atomic.Int64 // sends of a command after its first
	replayed atomic.Int64 // acknowledgements that were replays
	wg       sync.WaitGroup
}

func (l *relLoad) current() *proc {
	l.procMu.Lock()
	defer l.procMu.Unlock()
	return l.proc
}

func (l *relLoad) setProc(p *proc) {
	l.procMu.Lock()
	l.proc = p
	l.procMu.Unlock()
}

func (l *relLoad) start() {
	for c := range relClients {
		l.wg.Add(1)
		go l.client(rand.New(rand.NewPCG(l.seed, uint64(c)+1)))
	}
}

func (l *relLoad) client(rng *rand.Rand) {
	defer l.wg.Done()
	for {
		l.mu.Lock()
		if l.stopped {
			l.mu.Unlock()
			return
		}
		if l.paused {
			l.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
			continue
		}
		i := len(l.cmds)
		c := &relCommand{key: fmt.Sprintf("rel-%d", i)}
		if rng.IntN(3) == 0 {
			c.name = "ship_order"
			c.input = map[string]any{"order_id": fmt.Sprintf("o-%d", i), "carrier": []string{"acme", "globex", "initech"}[rng.IntN(3)]}
		} else {
			c.name = "place_order"
			c.input = map[string]any{"order_id": fmt.Sprintf("o-%d", i), "amount_cents": rng.IntN(1_000_000)}
			if rng.IntN(4) == 0 {
				c.input["note"] = strings.Repeat("n", rng.IntN(400))
			}
		}
		l.cmds = append(l.cmds, c)
		l.inflight++
		l.mu.Unlock()
		l.send(c)
		l.mu.Lock()
		l.inflight--
		burst := l.burst
		l.mu.Unlock()
		if !burst {
			time.Sleep(time.Duration(15+rng.IntN(15)) * time.Millisecond) // about 250 commands/s in all
		}
	}
}

// send sends c until it is acknowledged (the server may be down or
// restarting: those attempts are retried with the same key).
func (l *relLoad) send(c *relCommand) {
	for sent := false; ; {
		p := l.current()
		if p == nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if sent {
			l.retries.Add(1)
		}
		sent = true
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		code, r, body, err := p.command(ctx, l.token, c.name, c.input, c.key)
		cancel()
		if err != nil || code == http.StatusServiceUnavailable || code == http.StatusInternalServerError {
			time.Sleep(10 * time.Millisecond)
			continue // not acknowledged: the outcome is unknown, retry with the key
		}
		l.mu.Lock()
		if code != http.StatusOK {
			l.failures = append(l.failures, fmt.Sprintf("%s %s: %d %s", c.name, c.key, code, body))
			l.mu.Unlock()
			return
		}
		if len(r.Events) != len(relEventTypes[c.name]) {
			l.failures = append(l.failures, fmt.Sprintf("%s %s: %d events acknowledged, want %d", c.name, c.key, len(r.Events), len(relEventTypes[c.name])))
		}
		c.seq, c.ids = r.CommitSequence, r.Events
		l.mu.Unlock()
		if r.Replayed {
			l.replayed.Add(1)
		}
		return
	}
}

func (l *relLoad) resume(burst bool) {
	l.mu.Lock()
	l.paused, l.burst = false, burst
	l.mu.Unlock()
}

// pause stops new commands and waits until every command in flight is
// acknowledged (the server must be up for that).
func (l *relLoad) pause(d time.Duration) {
	l.t.Helper()
	l.mu.Lock()
	l.paused = true
	l.mu.Unlock()
	waitFor(l.t, d, "the commands in flight to be acknowledged", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.inflight == 0
	})
}

func (l *relLoad) stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
	l.wg.Wait()
}

// acknowledged returns the acknowledged commands (the load must be paused).
func (l *relLoad) acknowledged() []*relCommand {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*relCommand, 0, len(l.cmds))
	for _, c := range l.cmds {
		if c.seq != 0 {
			out = append(out, c)
		}
	}
	return out
}

// relCampaign holds what the campaign measured.
type relCampaign struct {
	kills           map[string]int
	readyTimes      []time.Duration // of every start that waited for the ready line
	startupWindow   time.Duration   // the longest delay of a startup kill
	startupBefore   int             // startup kills that landed before the ready line
	validating      int             // validation kills that landed while health was still "starting"
	deliveryBacklog int             // delivery kills that landed while a backlog drained
	restarts        int
	verifications   int
	replaysChecked  int
	reasons         map[string]int // outbox health reasons seen after restarts, before draining
	everSeen        map[event.Key][]byte
	lost            int
	conflicts       int
	records         int64
	maxPending      uint64
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number", name, s)
	}
	return n
}

// TestReliability is the SIGKILL campaign described at the top of this
// file: RIFFDB_RELIABILITY_KILLS kills (default 25; `make reliability`
// runs 200), with the schedule drawn from RIFFDB_RELIABILITY_SEED (printed;
// random when unset).
func TestReliability(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the SIGKILL campaign (make reliability runs it at 200 kills)")
	}
	began := time.Now()
	kills := envInt(t, reliability.KillsEnv, relDefaultKills)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(reliability.SeedEnv); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		must(t, err)
		seed = n
	}
	t.Logf("seed %d (%s=%d repeats the schedule), %d kills", seed, reliability.SeedEnv, seed, kills)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))

	e := newEnv(t, envOpts{outbox: true})
	token := e.token([]string{"execute_commands", "read_statistics"}, "")
	cdata, err := os.ReadFile(filepath.Join(e.root, "contract.toml"))
	must(t, err)
	compiled, err := contract.Compile(cdata)
	must(t, err)

	l := &relLoad{t: t, token: token, seed: seed}
	l.start()
	defer l.stop()
	cam := &relCampaign{kills: map[string]int{}, reasons: map[string]int{}, everSeen: map[event.Key][]byte{}}

	// The server is down at the start of every cycle.
	var kinds []string
	for k := range kills {
		if k%len(relKinds) == 0 {
			kinds = slices.Clone(relKinds)
			rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
		}
		kind := kinds[k%len(relKinds)]
		l.resume(kind == "delivery")
		switch kind {
		case "startup":
			// A random moment of the start-up, from the exec to a little
			// after the ready line (the last starts tell how long it takes).
			delay := time.Duration(rng.Int64N(int64(cam.readyTime()) * 3 / 2))
			p, ready := e.spawn()
			l.setProc(p)
			time.Sleep(delay)
			select {
			case <-ready:
			default:
				cam.startupBefore++
			}
			p.kill()
			cam.startupWindow = max(cam.startupWindow, delay)
		case "validation":
			p := cam.start(e)
			l.setProc(p)
			if rng.IntN(2) == 0 { // else right at the ready line
				time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
			}
			// Health is "starting" until the worker's first pass has
			// opened and validated the archive.
			if p.stats(token).Databases[0].Outbox.Reason == "starting" {
				cam.validating++
			}
			p.kill()
		case "commit":
			p := cam.start(e)
			l.setProc(p)
			time.Sleep(time.Duration(50+rng.IntN(700)) * time.Millisecond)
			p.kill()
		case "delivery":
			// Delivery keeps up with the load (its archive transactions
			// share fsyncs), so the backlog is made: the archive is moved
			// away while a burst commits, then put back, and the kill
			// lands while the worker (probing once a second) drains it.
			away := e.outbox + ".away"
			must(t, os.Rename(e.outbox, away))
			p := cam.start(e)
			l.setProc(p)
			time.Sleep(time.Duration(50+rng.IntN(150)) * time.Millisecond)
			l.pause(time.Minute)
			must(t, os.Rename(away, e.outbox))
			if n0 := pendingOf(p, token); n0 > 0 {
				// Wait for the drain to start, then kill at a random
				// moment of it (some tens of microseconds an event).
				n := n0
				for deadline := time.Now().Add(5 * time.Second); n == n0 && time.Now().Before(deadline); {
					time.Sleep(500 * time.Microsecond)
					n = pendingOf(p, token)
				}
				if n < n0 {
					cam.deliveryBacklog++
					cam.maxPending = max(cam.maxPending, n0)
				}
				time.Sleep(time.Duration(rng.Int64N(int64(n)*int64(60*time.Microsecond) + 1)))
			}
			p.kill()
		}
		cam.kills[kind]++
		cam.verify(t, e, l, compiled, token, rng, fmt.Sprintf("kill %d (%s)", k+1, kind))
		if k%10 == 9 || k == kills-1 {
			t.Logf("%d/%d kills, %d commands acknowledged, %d archive records", k+1, kills, len(l.acknowledged()), cam.records)
		}
	}

	// A last clean start: everything delivered, healthy, and a clean stop.
	p := cam.start(e)
	l.setProc(p)
	d := p.stats(token).Databases[0]
	if d.PendingOutboxDeliveries == nil || *d.PendingOutboxDeliveries != 0 {
		t.Fatalf("after the campaign: pending %v", d.PendingOutboxDeliveries)
	}
	l.pause(time.Minute)
	p.stop()

	acked := l.acknowledged()
	var events, ships int
	for _, c := range acked {
		events += len(c.ids)
		if c.name == "ship_order" {
			ships++
		}
	}
	l.mu.Lock()
	failures := slices.Clone(l.failures)
	l.mu.Unlock()
	if len(failures) > 0 {
		t.Errorf("%d commands were refused: %v", len(failures), failures[:min(5, len(failures))])
	}
	dur := time.Since(began)
	t.Logf("%d kills %v survived; %d commands (%d ship_order) and %d events acknowledged; %d retries after kills, %d replays; "+
		"%d offline verifications; lost %d, conflicting values %d; %v",
		kills, cam.kills, len(acked), ships, events, l.retries.Load(), l.replayed.Load(), cam.verifications, cam.lost, cam.conflicts, dur.Round(time.Second))
	cam.report(t, seed, kills, len(acked), ships, events, l, dur)
}

// verify restarts the server after a kill, completes the commands in
// flight, checks idempotent replays, waits for delivery to drain, stops the
// server and checks both stores offline.
func (cam *relCampaign) verify(t *testing.T, e *env, l *relLoad, c *contract.Contract, token string, rng *rand.Rand, when string) {
	t.Helper()
	p := cam.start(e)
	cam.restarts++
	l.setProc(p)
	d := p.stats(token).Databases[0]
	cam.reasons[d.Outbox.Health+"/"+cmp.Or(d.Outbox.Reason, "-")]++
	checkReason(t, d.Outbox.Reason, when, p)
	l.pause(2 * time.Minute)
	acked := l.acknowledged()

	// Idempotent retries: acknowledged commands replay their commit.
	for range min(4, len(acked)) {
		c := acked[rng.IntN(len(acked))]
		code, r, body, err := p.command(context.Background(), token, c.name, c.input, c.key)
		if err != nil || code != http.StatusOK || !r.Replayed || r.CommitSequence != c.seq || !slices.Equal(r.Events, c.ids) {
			t.Fatalf("%s: retry of acknowledged %s %s: %d %v %s; want a replay of seq %d %v", when, c.name, c.key, code, err, body, c.seq, c.ids)
		}
		cam.replaysChecked++
	}

	var maxSeq uint64
	for _, c := range acked {
		maxSeq = max(maxSeq, c.seq)
	}
	var dbID string
	waitFor(t, 2*time.Minute, when+": delivery to drain", func() bool {
		d := p.stats(token).Databases[0]
		dbID = d.DatabaseID
		checkReason(t, d.Outbox.Reason, when, p)
		return d.PendingOutboxDeliveries != nil && *d.PendingOutboxDeliveries == 0 &&
			d.LastCommitSequence >= maxSeq && d.Outbox.Health == "healthy"
	})
	// Stop: SIGTERM on odd cycles, SIGKILL of the idle server otherwise
	// (not counted as a campaign kill).
	if rng.IntN(2) == 0 {
		p.stop()
	} else {
		p.kill()
	}
	l.setProc(nil)
	cam.verifications++
	cam.offline(t, e, c, dbID, acked, when)
}

// start starts the server and remembers how long it took to be ready.
func (cam *relCampaign) start(e *env) *proc {
	began := time.Now()
	p := e.start()
	cam.readyTimes = append(cam.readyTimes, time.Since(began))
	return p
}

// pendingOf returns the server's pending outbox deliveries (0 when the
// count is unavailable).
func pendingOf(p *proc, token string) uint64 {
	if n := p.stats(token).Databases[0].PendingOutboxDeliveries; n != nil {
		return *n
	}
	return 0
}

// readyTime is the median time the recent starts took to be ready.
func (cam *relCampaign) readyTime() time.Duration {
	if len(cam.readyTimes) == 0 {
		return 300 * time.Millisecond
	}
	recent := slices.Clone(cam.readyTimes[max(0, len(cam.readyTimes)-9):])
	slices.Sort(recent)
	return max(recent[len(recent)/2], time.Millisecond)
}

// checkReason fails on the health reasons that would mean the archive and
// the history disagree: after a plain SIGKILL that is a bug.
func checkReason(t *testing.T, reason, when string, p *proc) {
	t.Helper()
	switch reason {
	case "archive_lost_records", "history_behind_archive":
		t.Fatalf("%s: outbox health reason %s after a plain SIGKILL: the archive and the history disagree\n%s",
			when, reason, tail(p.stderr.String(), 4000))
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// offline checks both stores of the stopped server.
func (cam *relCampaign) offline(t *testing.T, e *env, c *contract.Contract, dbID string, acked []*relCommand, when string) {
	t.Helper()
	ctx := context.Background()
	want := map[event.ID][]byte{}
	seqs := map[uint64]bool{}
	for _, cmd := range acked {
		if seqs[cmd.seq] {
			t.Fatalf("%s: two acknowledged commands share sequence %d", when, cmd.seq)
		}
		seqs[cmd.seq] = true
		for id, b := range cmd.expected(t) {
			want[id] = b
		}
	}
	var problems []string
	problem := func(format string, args ...any) {
		if len(problems) < 10 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}

	// The history: every acknowledged event with its exact bytes, every
	// commit sequence acknowledged (retries acknowledge every commit that
	// survived), nothing undelivered.
	db, err := primary.Open(ctx, primary.Options{Path: e.dbPath, Contract: c})
	if err != nil {
		t.Fatalf("%s: open the primary offline: %v", when, err)
	}
	for id, b := range want {
		got, err := db.LoadEvent(ctx, id)
		if err != nil || string(got) != string(b) {
			cam.lost++
			problem("history: acknowledged event %s %s", id, describe(got, err))
		}
	}
	last := db.LastCommitSequence()
	for s := uint64(1); s <= last; s++ {
		if !seqs[s] {
			problem("history: commit %d was never acknowledged (of %d)", s, last)
		}
	}
	if n, st := db.UndeliveredCount(); st != primary.IndexReady || n != 0 {
		problem("history: %d undelivered (%s) after the drain", n, st)
	}
	must(t, db.Close())

	if len(want) > 0 {
		// The inspect command verifies the accounting.
		r, res := e.inspect(dbID, 256)
		if !r.OK || res.Integrity != "verified" || res.RecordCount != int64(len(want)) || res.DatabaseBinding != dbID {
			problem("inspect: %+v %+v; want %d records verified", r.Error, res, len(want))
		}
		cam.records = res.RecordCount
		// The archive's content: exactly the acknowledged events, with
		// their exact bytes, and no key ever with two values.
		id, err := event.ParseDatabaseID(dbID)
		must(t, err)
		st, err := archive.Open(ctx, e.outbox, archive.Options{Database: id, QuotaEncodedBytes: e.quota, MinFreeBytes: -1})
		if err != nil {
			t.Fatalf("%s: open the archive offline: %v", when, err)
		}
		rd := st.NewReader()
		seen := 0
		var cur archive.Cursor
		for {
			page, err := rd.ReadPage(ctx, cur)
			if err != nil {
				t.Fatalf("%s: read the archive: %v", when, err)
			}
			for _, rec := range page.Records {
				seen++
				b := rec.Event.Encode()
				if old, ok := cam.everSeen[rec.Key]; ok && string(old) != string(b) {
					cam.conflicts++
					problem("archive: key %s held two values", rec.Key.Event)
				}
				cam.everSeen[rec.Key] = b
				if w, ok := want[rec.Key.Event]; !ok || rec.Key.Database != id {
					problem("archive: record %s/%d/%s was never acknowledged", rec.Key.Database, rec.Key.Incarnation, rec.Key.Event)
				} else if string(w) != string(b) {
					cam.lost++
					problem("archive: event %s differs from its acknowledged bytes", rec.Key.Event)
				}
			}
			if page.Next == nil {
				break
			}
			cur = page.Next
		}
		must(t, rd.Close())
		must(t, st.Close())
		if seen != len(want) {
			cam.lost += max(0, len(want)-seen)
			problem("archive: %d records, %d events acknowledged", seen, len(want))
		}
	}
	if len(problems) > 0 {
		t.Fatalf("%s:\n  %s", when, strings.Join(problems, "\n  "))
	}
}

func describe(got []byte, err error) string {
	if err != nil {
		return "missing: " + err.Error()
	}
	return fmt.Sprintf("differs (%d bytes)", len(got))
}

func (cam *relCampaign) report(t *testing.T, seed uint64, kills, commands, ships, events int, l *relLoad, dur time.Duration) {
	t.Helper()
	if !reliability.Enabled() {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "`go test ./e2e -run TestReliability` with %s=%d, seed %d (%s=%d repeats the schedule; "+
		"the moments the kills land depend on the machine). Run %s UTC on commit `%s`, %v.\n\n",
		reliability.KillsEnv, kills, seed, reliability.SeedEnv, seed, time.Now().UTC().Format("2006-01-02 15:04"),
		reliability.Commit(), dur.Round(time.Second))
	b.WriteString("| measure | value |\n|---|---|\n")
	fmt.Fprintf(&b, "| SIGKILLs survived | %d |\n", kills)
	for _, k := range relKinds {
		extra := ""
		switch k {
		case "startup":
			extra = fmt.Sprintf(" (%d before the ready line; delays up to %v, median start %v)",
				cam.startupBefore, cam.startupWindow.Round(time.Millisecond), cam.readyTime().Round(time.Millisecond))
		case "validation":
			extra = fmt.Sprintf(" (%d while outbox health was still \"starting\": archive open and startup validation not finished)", cam.validating)
		case "delivery":
			extra = fmt.Sprintf(" (%d killed while draining a backlog, the archive moved away during the burst; backlogs up to %d)", cam.deliveryBacklog, cam.maxPending)
		}
		fmt.Fprintf(&b, "| — during %s | %d%s |\n", k, cam.kills[k], extra)
	}
	fmt.Fprintf(&b, "| restarts, each followed by an offline verification | %d |\n", cam.verifications)
	fmt.Fprintf(&b, "| commands acknowledged (ship_order: 2 events) | %d (%d) |\n", commands, ships)
	fmt.Fprintf(&b, "| events acknowledged | %d |\n", events)
	fmt.Fprintf(&b, "| archive records at the end (inspect: verified) | %d |\n", cam.records)
	fmt.Fprintf(&b, "| sends retried with the same key after a failure | %d |\n", l.retries.Load())
	fmt.Fprintf(&b, "| acknowledgements that were replays | %d |\n", l.replayed.Load())
	fmt.Fprintf(&b, "| acknowledged commands re-sent and replayed identically | %d |\n", cam.replaysChecked)
	fmt.Fprintf(&b, "| events lost or changed | %d |\n", cam.lost)
	fmt.Fprintf(&b, "| archive keys with two values | %d |\n", cam.conflicts)
	var reasons []string
	for r, n := range cam.reasons {
		reasons = append(reasons, fmt.Sprintf("%s ×%d", r, n))
	}
	sort.Strings(reasons)
	fmt.Fprintf(&b, "| outbox health right after each restart | %s |\n", strings.Join(reasons, ", "))
	err := reliability.Update(reliability.Section{Name: "sigkill", Title: "SIGKILL campaign (e2e TestReliability)",
		Body: b.String(), Totals: reliability.Totals{Kills: int64(kills), Acknowledged: int64(events),
			Lost: int64(cam.lost), Conflicts: int64(cam.conflicts), DurationSec: int64(dur.Seconds()), Seed: seed}})
	must(t, err)
}
