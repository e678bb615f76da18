package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The outbox deliveries tests: issue #50's listing and look-up on the real
// binary, through the CLI and the HTTP API.

// deliveryItem is one undelivered event as the CLI and the API report it.
type deliveryItem struct {
	EventID          string     `json:"event_id"`
	CommitSequence   uint64     `json:"commit_sequence"`
	State            string     `json:"state"`
	Attempts         uint32     `json:"attempts"`
	NextAttemptAt    *time.Time `json:"next_attempt_at"`
	LeaseDeadline    *time.Time `json:"lease_deadline"`
	CommittedAt      time.Time  `json:"committed_at"`
	DeadLetterReason string     `json:"dead_letter_reason"`
	Redrives         int        `json:"redrives"`
	LastFailure      *struct {
		At     time.Time `json:"at"`
		Class  string    `json:"class"`
		Reason string    `json:"reason"`
	} `json:"last_failure"`
}

type deliveriesPage struct {
	Database   string         `json:"database"`
	Deliveries []deliveryItem `json:"deliveries"`
	NextCursor string         `json:"next_cursor"`
}

type deliveryShow struct {
	EventID  string        `json:"event_id"`
	State    string        `json:"state"`
	Delivery *deliveryItem `json:"delivery"`
}

// deliveriesCLI runs `riffdb outbox deliveries ARGS` against p.
func deliveriesCLI(t *testing.T, p *proc, tokenFile string, args ...string) cliResult {
	t.Helper()
	return cli(t, append(append([]string{"outbox", "deliveries"}, args...),
		"--database", "default", "--address", "http://"+p.api, "--token-file", tokenFile)...)
}

func listPage(t *testing.T, p *proc, tokenFile string, args ...string) deliveriesPage {
	t.Helper()
	r := deliveriesCLI(t, p, tokenFile, append([]string{"list"}, args...)...)
	if !r.OK || r.Exit != 0 {
		t.Fatalf("outbox deliveries list %v: exit %d %+v %s", args, r.Exit, r.Error, r.Stderr)
	}
	var page deliveriesPage
	must(t, json.Unmarshal(r.Result, &page))
	return page
}

func showEvent(t *testing.T, p *proc, tokenFile, id string) deliveryShow {
	t.Helper()
	r := deliveriesCLI(t, p, tokenFile, "show", id)
	if !r.OK || r.Exit != 0 {
		t.Fatalf("outbox deliveries show %s: exit %d %+v %s", id, r.Exit, r.Error, r.Stderr)
	}
	var s deliveryShow
	must(t, json.Unmarshal(r.Result, &s))
	return s
}

// TestDeliveriesListPagesWhileCommandsCommit: with no archive configured
// every event stays pending. While commands keep committing, a listing
// paged through the CLI names every event present at its first page
// exactly once (and no event twice); cursors that are damaged or from
// before a restart are refused with their code; tokens without
// read_outbox are refused.
func TestDeliveriesListPagesWhileCommandsCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	token := e.token([]string{"execute_commands"}, "")
	reader := e.tokenFile("reader", e.token([]string{"read_outbox"}, ""))
	scoped := e.tokenFile("scoped", e.token([]string{"read_outbox"}, "default"))
	stats := e.token([]string{"read_statistics", "read_health", "manage_backups"}, "")
	p := e.start()
	ctx := context.Background()
	var before []string
	for i := range 40 {
		code, r, body, err := p.command(ctx, token, "place_order", orderInput(i), "")
		if err != nil || code != http.StatusOK {
			t.Fatalf("command: %d %v %s", code, err, body)
		}
		before = append(before, r.Events...)
	}

	// A writer commits 30 more commands (60 events) while the listing runs.
	var wg sync.WaitGroup
	wg.Add(1)
	var during int
	go func() {
		defer wg.Done()
		for i := range 30 {
			if code, _, body, err := p.command(ctx, token, "ship_order", map[string]any{"order_id": fmt.Sprint(i), "carrier": "c"}, ""); err != nil || code != http.StatusOK {
				t.Errorf("command during the listing: %d %v %s", code, err, body)
				return
			}
			during++
			time.Sleep(20 * time.Millisecond)
		}
	}()
	seen := map[string]int{}
	var args []string
	pages := 0
	for ; ; pages++ {
		page := listPage(t, p, scoped, append([]string{"--limit", "7"}, args...)...)
		for _, it := range page.Deliveries {
			seen[it.EventID]++
			if it.State != "pending" || it.Attempts != 0 || it.CommittedAt.IsZero() || it.LeaseDeadline != nil {
				t.Errorf("item %+v", it)
			}
		}
		if page.NextCursor == "" {
			break
		}
		args = []string{"--after", page.NextCursor}
		if pages > 100 {
			t.Fatalf("the listing did not end after %d pages", pages)
		}
	}
	wg.Wait()
	for _, id := range before {
		if seen[id] != 1 {
			t.Errorf("event %s listed %d times", id, seen[id])
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("event %s listed %d times", id, n)
		}
	}
	t.Logf("%d pages, %d events listed; %d commands committed during the listing", pages+1, len(seen), during)
	if during == 0 || len(seen) <= len(before) {
		t.Errorf("no command committed during the listing was listed (%d committed)", during)
	}

	// A state filter and a look-up.
	if page := listPage(t, p, reader, "--state", "dead_letter,delivering"); len(page.Deliveries) != 0 {
		t.Errorf("dead letters or delivering: %+v", page.Deliveries)
	}
	if s := showEvent(t, p, reader, before[3]); s.State != "pending" || s.Delivery == nil || s.Delivery.EventID != before[3] {
		t.Errorf("show %s: %+v", before[3], s)
	}
	if s := showEvent(t, p, reader, "999999.0"); s.State != "unknown" || s.Delivery != nil {
		t.Errorf("show 999999.0: %+v", s)
	}

	// Refusals through the CLI: a damaged cursor, and one issued by the
	// server process before a restart.
	first := listPage(t, p, reader, "--limit", "5")
	damaged := first.NextCursor[:10] + strings.Repeat("A", len(first.NextCursor)-10)
	for _, c := range []struct{ cursor, code string }{{damaged, "invalid_cursor"}, {"zz", "invalid_cursor"}} {
		r := deliveriesCLI(t, p, reader, "list", "--after", c.cursor)
		if r.OK || r.Exit == 0 || r.Error == nil || r.Error.Code != c.code || strings.Contains(r.Error.Message, c.cursor) {
			t.Errorf("cursor %q: exit %d %+v", c.cursor, r.Exit, r.Error)
		}
	}
	p.stop()
	p = e.start()
	if r := deliveriesCLI(t, p, reader, "list", "--after", first.NextCursor); r.OK || r.Error == nil || r.Error.Code != "invalid_cursor" {
		t.Errorf("a cursor from before the restart: exit %d %+v", r.Exit, r.Error)
	}

	// Permissions on the HTTP API: 401 without a token, 403 without
	// read_outbox (read_statistics alone does not list; another database's
	// scope: outboxapi/TestAuthorization, one database configured here).
	readerToken, err := os.ReadFile(reader)
	must(t, err)
	for _, path := range []string{"/v1/databases/default/outbox/deliveries", "/v1/databases/default/outbox/deliveries/1.0"} {
		for _, c := range []struct {
			token string
			want  int
		}{{"", 401}, {"garbage", 401}, {stats, 403}, {token, 403}, {strings.TrimSpace(string(readerToken)), 200}} {
			code, body, err := p.do(ctx, http.MethodGet, path, c.token, nil)
			if err != nil || code != c.want {
				t.Errorf("GET %s: %d %v %s, want %d", path, code, err, body, c.want)
			}
			if strings.Contains(string(body), e.root) || strings.Contains(string(body), "order_id") {
				t.Errorf("GET %s answered with a path or a payload: %s", path, body)
			}
		}
	}
	if strings.Contains(p.stderr.String(), strings.TrimSpace(string(readerToken))) {
		t.Error("the server's log holds a token")
	}
}

// TestDeliveriesListDeadLetters: an event dead-lettered by an identity
// conflict (the primary restored by hand from a copy taken before the
// event was delivered, as in TestMetricsEndpointServesTheReference) is
// listed with its reason and attempts, looked up as a dead letter, while
// the event delivered beside it is looked up as delivered.
func TestDeliveriesListDeadLetters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{outbox: true})
	token := e.token([]string{"execute_commands", "read_statistics"}, "")
	reader := e.tokenFile("reader", e.token([]string{"read_outbox"}, "default"))
	p, events := conflictDeadLetter(t, e, token)
	waitFor(t, 60*time.Second, "only the dead letter left", func() bool { _, _, pending := p.outboxState(token); return pending == 1 })

	page := listPage(t, p, reader)
	if len(page.Deliveries) != 1 || page.NextCursor != "" {
		t.Fatalf("listing: %+v", page)
	}
	dead := page.Deliveries[0]
	if dead.EventID != events[0] || dead.State != "dead_letter" || dead.DeadLetterReason != "identity_conflict" || dead.Attempts < 1 {
		t.Fatalf("dead letter: %+v", dead)
	}
	if dl := listPage(t, p, reader, "--state", "dead_letter"); len(dl.Deliveries) != 1 || dl.Deliveries[0].EventID != events[0] {
		t.Fatalf("dead letters: %+v", dl)
	}
	if s := showEvent(t, p, reader, events[0]); s.State != "dead_letter" || s.Delivery == nil || s.Delivery.DeadLetterReason != "identity_conflict" {
		t.Fatalf("show %s: %+v", events[0], s)
	}
	if s := showEvent(t, p, reader, events[1]); s.State != "delivered" || s.Delivery != nil {
		t.Fatalf("show %s: %+v", events[1], s)
	}
	// The text form names the event, its state and its reason.
	out, err := runText(p, reader, "list")
	if err != nil || !strings.Contains(out, events[0]) || !strings.Contains(out, "dead_letter") || !strings.Contains(out, "identity_conflict") {
		t.Fatalf("text listing: %v\n%s", err, out)
	}
}

// runText runs `riffdb outbox deliveries ARGS` with text output.
func runText(p *proc, tokenFile string, args ...string) (string, error) {
	cmd := exec.Command(binary, append(append([]string{"outbox", "deliveries"}, args...),
		"--database", "default", "--address", "http://"+p.api, "--token-file", tokenFile)...)
	b, err := cmd.CombinedOutput()
	return string(b), err
}

// conflictDeadLetter makes event 1.0 a dead letter by an identity
// conflict: event 1.0 is delivered from a primary whose pre-commit copy is
// kept; the copy is then restored by hand and, with no outbox configured
// (started with one, the server would see the archive ahead of the restored
// history and stop delivery before any conflict), commits events 1.0 and
// 2.0 with other bytes. It returns the server started again with the
// outbox, degraded by the conflict, and the two events.
func conflictDeadLetter(t *testing.T, e *env, token string) (*proc, []string) {
	t.Helper()
	ctx := context.Background()
	p := e.start()
	p.stop()
	snapshot := filepath.Join(e.root, "db-snapshot")
	copyTree(t, e.dbPath, snapshot)
	p = e.start()
	if code, _, body, err := p.command(ctx, token, "place_order", orderInput(1), ""); err != nil || code != http.StatusOK {
		t.Fatalf("command: %d %v %s", code, err, body)
	}
	p.waitDrained(t, token)
	p.stop()
	must(t, os.RemoveAll(e.dbPath))
	copyTree(t, snapshot, e.dbPath)
	withOutbox, err := os.ReadFile(e.config)
	must(t, err)
	must(t, os.WriteFile(e.config, withoutOutbox(t, withOutbox), 0o600))
	p = e.start()
	var events []string
	for _, order := range []string{"other", "another"} {
		code, r, body, err := p.command(ctx, token, "place_order", map[string]any{"order_id": order, "amount_cents": 7}, "")
		if err != nil || code != http.StatusOK {
			t.Fatalf("command: %d %v %s", code, err, body)
		}
		events = append(events, r.Events...)
	}
	p.stop()
	must(t, os.WriteFile(e.config, withOutbox, 0o600))
	p = e.start()
	p.waitHealth(t, token, "degraded", "identity_conflict")
	return p, events
}

// withoutOutbox returns the configuration cfg without its
// [maintenance.outbox] section: the tables before and after it stay.
func withoutOutbox(t *testing.T, cfg []byte) []byte {
	t.Helper()
	const header = "[maintenance.outbox]"
	s := string(cfg)
	start := strings.Index(s, header)
	if start < 0 {
		t.Fatal("no outbox section in the configuration")
	}
	end := len(s)
	for i := start + len(header); ; {
		next := strings.Index(s[i:], "\n[")
		if next < 0 {
			break
		}
		i += next + 1
		if !strings.HasPrefix(s[i:], "[maintenance.outbox.") {
			end = i
			break
		}
	}
	return []byte(s[:start] + s[end:])
}
