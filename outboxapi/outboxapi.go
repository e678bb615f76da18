// Package outboxapi serves a database's undelivered events over HTTP: GET
// /v1/databases/{alias}/outbox/deliveries lists them, page by page, from
// the primary's undelivered index, GET
// /v1/databases/{alias}/outbox/deliveries/{event_id} looks one event up
// (both gated on read_outbox), and POST
// /v1/databases/{alias}/outbox/dead-letters/retry redrives dead letters
// (manage_outbox, redrive.go). It answers without payloads, paths or
// stacks. The server mounts it (server/api.go).
package outboxapi

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/capability"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/hygiene/pathless"
	"github.com/riffdb/riffdb/internal/hygiene/ratelog"
	"github.com/riffdb/riffdb/internal/observe/attrkey"
	"github.com/riffdb/riffdb/primary"
	"github.com/riffdb/riffdb/statsapi"
	"github.com/riffdb/riffdb/telemetry"
)

const scope = "github.com/riffdb/riffdb/outboxapi"

// Page sizes of the listing.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
	// scanChunks bounds the work of one page with a state filter: at most
	// this many times limit intents are read, so a page costs O(limit)
	// whatever the backlog holds. A page may then hold fewer items than
	// limit, or none, and still have a next_cursor.
	scanChunks = 4
)

// States are the undelivered states an item may have and the listing may
// be filtered by, in the order of the state machine.
var States = []string{"pending", "retry_scheduled", "delivering", "dead_letter"}

// Item is one undelivered event: where its delivery stands. It never holds
// the event's payload.
type Item struct {
	EventID        string `json:"event_id"`
	CommitSequence uint64 `json:"commit_sequence"`
	State          string `json:"state"`
	// Attempts counts the claims the event has spent (of the outbox's
	// max_delivery_attempts, 32 by default).
	Attempts uint32 `json:"attempts"`
	// NextAttemptAt is when a retry_scheduled event is due; null otherwise.
	NextAttemptAt *time.Time `json:"next_attempt_at"`
	// LeaseDeadline is when a delivering event's claim lapses; null
	// otherwise.
	LeaseDeadline *time.Time `json:"lease_deadline"`
	CommittedAt   time.Time  `json:"committed_at"`
	// DeadLetterReason says why a dead letter was given up on
	// (attempts_exhausted, identity_conflict, …); empty otherwise.
	DeadLetterReason string `json:"dead_letter_reason,omitempty"`
	// Redrives counts how often an operator redrove the event from
	// dead_letter (POST …/outbox/dead-letters/retry); omitted when never.
	Redrives uint32 `json:"redrives,omitempty"`
	// LastFailure is the failure that ended the event's last unsuccessful
	// attempt; omitted when none did.
	LastFailure *Failure `json:"last_failure,omitempty"`
	// TraceID is the trace of the command that committed the event, when
	// that command was traced.
	TraceID string `json:"trace_id,omitempty"`
}

// Failure is why a delivery attempt failed, in codes: its class
// (unavailable, refused, capacity, conflict, stop) and its reason (the
// outbox health reason it caused: destination_unavailable,
// capacity_exhausted, identity_conflict, …). Never a message, a path or a
// payload: the server's log has the error itself.
type Failure struct {
	At     time.Time `json:"at"`
	Class  string    `json:"class"`
	Reason string    `json:"reason"`
}

// ListResponse is the body of GET /v1/databases/{alias}/outbox/deliveries.
type ListResponse struct {
	Database           string `json:"database"`
	DatabaseID         string `json:"database_id"`
	HistoryIncarnation uint64 `json:"history_incarnation"`
	Deliveries         []Item `json:"deliveries"`
	// NextCursor continues the listing (pass it as after); empty when the
	// listing reached the end of the index.
	NextCursor string `json:"next_cursor"`
}

// ShowResponse is the body of GET
// /v1/databases/{alias}/outbox/deliveries/{event_id}. State is one of
// States, delivered (the archive holds the event under this database, its
// incarnation and its id) or unknown (no such event, or its history was
// reclaimed); Delivery is set for an undelivered event only.
type ShowResponse struct {
	Database           string `json:"database"`
	DatabaseID         string `json:"database_id"`
	HistoryIncarnation uint64 `json:"history_incarnation"`
	EventID            string `json:"event_id"`
	State              string `json:"state"`
	Delivery           *Item  `json:"delivery"`
}

// Options configure an API. Every field but Auth and Database may be zero.
type Options struct {
	Auth statsapi.Authenticator
	// Database finds a database's primary by alias.
	Database func(alias string) (*primary.DB, bool)
	// Aliases are the databases whose redrive counters start at 0, so that
	// they are served from the first scrape on.
	Aliases []string
	// Failures logs credential store failures (statsapi.NewFailureLog);
	// nil: one of its own.
	Failures       *ratelog.Logger
	TracerProvider trace.TracerProvider // nil: no-op
	MeterProvider  metric.MeterProvider // nil: no-op
	Logger         *zap.Logger          // nil: no-op
}

// API serves the listing, the look-up and the redrive.
type API struct {
	opts     Options
	tracer   trace.Tracer
	key      [32]byte            // authenticates cursors (cursor.go)
	redriven metric.Int64Counter // redrive.go
}

// New returns the handlers, with a new random cursor key (crypto/rand.Read
// never fails: it crashes the program instead).
func New(opts Options) *API {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Failures == nil {
		opts.Failures = statsapi.NewFailureLog(opts.Logger, nil, 0)
	}
	if opts.TracerProvider == nil {
		opts.TracerProvider = tracenoop.NewTracerProvider()
	}
	if opts.MeterProvider == nil {
		opts.MeterProvider = metricnoop.NewMeterProvider()
	}
	a := &API{opts: opts, tracer: opts.TracerProvider.Tracer(scope)}
	_, _ = rand.Read(a.key[:])
	// The SDK returns a working instrument with its error; the names are
	// constants, so an error here is a programming mistake a test catches.
	a.redriven, _ = opts.MeterProvider.Meter(scope).Int64Counter("riffdb.outbox.dead_letters.redriven", metric.WithUnit("{event}"),
		metric.WithDescription("Dead letters an operator redrove back to pending, by the reason they had been dead letters for."))
	for _, alias := range opts.Aliases {
		for _, reason := range []string{"attempts_exhausted", "identity_conflict"} {
			a.redriven.Add(context.Background(), 0, metric.WithAttributes(attrkey.Database.String(alias), attrkey.Reason.String(reason)))
		}
	}
	return a
}

// authorize authenticates the request and checks read_outbox for the
// path's database. It writes the refusal itself.
func (a *API) authorize(w http.ResponseWriter, r *http.Request) (string, *primary.DB, bool) {
	alias, db, _, ok := a.authorizeFor(w, r, capability.ReadOutbox, "read this database's outbox deliveries")
	return alias, db, ok
}

// authorizeFor authenticates the request and checks perm (to do what) for
// the path's database. It writes the refusal itself and returns the
// capability's id.
func (a *API) authorizeFor(w http.ResponseWriter, r *http.Request, perm capability.Permission, what string) (string, *primary.DB, string, bool) {
	alias := r.PathValue("alias")
	c, ok := statsapi.Authenticate(w, r, a.opts.Auth, a.opts.Failures)
	if !ok {
		return "", nil, "", false
	}
	if !c.Allows(perm, alias) {
		statsapi.WriteError(w, http.StatusForbidden, "forbidden", fmt.Sprintf("this capability may not %s (it needs %s)", what, perm))
		return "", nil, "", false
	}
	db, ok := a.opts.Database(alias)
	if !ok {
		statsapi.WriteError(w, http.StatusNotFound, "unknown_database", "no database has this alias")
		return "", nil, "", false
	}
	return alias, db, c.ID, true
}

// listQuery is a listing request's parameters.
type listQuery struct {
	states []primary.IntentState // empty: every state
	after  string
	limit  int
}

func parseListQuery(r *http.Request) (listQuery, *cursorError) {
	q := listQuery{limit: DefaultLimit}
	v := r.URL.Query()
	for _, s := range v["state"] {
		for _, name := range strings.Split(s, ",") {
			i := slices.Index(States, name)
			if i < 0 {
				return q, &cursorError{"invalid_state", fmt.Sprintf("unknown state %q (known: %s)", truncate(name, 32), strings.Join(States, ", "))}
			}
			if st := primary.IntentState(i); !slices.Contains(q.states, st) {
				q.states = append(q.states, st)
			}
		}
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > MaxLimit {
			return q, &cursorError{"invalid_limit", fmt.Sprintf("limit must be a whole number from 1 to %d", MaxLimit)}
		}
		q.limit = n
	}
	q.after = v.Get("after")
	return q, nil
}

// HandleList lists a page of undelivered events, in event order.
func (a *API) HandleList(w http.ResponseWriter, r *http.Request) {
	alias, db, ok := a.authorize(w, r)
	if !ok {
		return
	}
	q, qerr := parseListQuery(r)
	if qerr != nil {
		statsapi.WriteError(w, http.StatusBadRequest, qerr.code, qerr.msg)
		return
	}
	resp := ListResponse{Database: alias, DatabaseID: db.Identity().String(), HistoryIncarnation: db.Incarnation(), Deliveries: []Item{}}
	var after *event.ID
	if q.after != "" {
		id, err := a.decodeCursor(q.after, db.Identity(), db.Incarnation())
		if err != nil {
			var ce *cursorError
			errors.As(err, &ce)
			statsapi.WriteError(w, http.StatusBadRequest, ce.code, ce.msg)
			return
		}
		after = &id
	}
	ctx, span := a.tracer.Start(r.Context(), "riffdb.outbox.deliveries.list", trace.WithAttributes(attrkey.Database.String(alias)))
	defer span.End()
	items, last, more, err := scanPage(ctx, db, after, q)
	if err != nil {
		span.SetStatus(codes.Error, "read failed")
		a.readError(ctx, w, alias, err)
		return
	}
	resp.Deliveries = items
	if more {
		resp.NextCursor = a.encodeCursor(position{db: db.Identity(), incarnation: db.Incarnation(), last: last})
	}
	span.SetAttributes(attribute.Int("riffdb.outbox.deliveries", len(items)))
	writeJSON(w, resp)
}

// scanPage reads at most scanChunks × limit intents after `after` and
// returns the ones in the query's states, at most limit, with the last
// intent it read and whether the index may hold more after it.
func scanPage(ctx context.Context, db *primary.DB, after *event.ID, q listQuery) (items []Item, last event.ID, more bool, err error) {
	items = []Item{}
	for chunk := 0; chunk < scanChunks; chunk++ {
		ins, err := db.ScanIntents(ctx, after, q.limit)
		if err != nil {
			return nil, last, false, err
		}
		for _, in := range ins {
			last = in.Event
			if len(q.states) == 0 || slices.Contains(q.states, in.State) {
				items = append(items, itemOf(in))
				if len(items) == q.limit {
					return items, last, true, nil
				}
			}
		}
		if len(ins) < q.limit {
			return items, last, false, nil
		}
		after = &last
	}
	return items, last, true, nil
}

// HandleShow looks one event up.
func (a *API) HandleShow(w http.ResponseWriter, r *http.Request) {
	alias, db, ok := a.authorize(w, r)
	if !ok {
		return
	}
	id, ok := ParseEventID(r.PathValue("event_id"))
	if !ok {
		statsapi.WriteError(w, http.StatusBadRequest, "invalid_event_id", "an event id is SEQ.POS: its commit sequence (from 1) and its position in the commit (from 0), e.g. 42.0")
		return
	}
	ctx, span := a.tracer.Start(r.Context(), "riffdb.outbox.deliveries.show", trace.WithAttributes(
		attrkey.Database.String(alias), attribute.String("riffdb.event", id.String())))
	defer span.End()
	in, where, err := db.LookupDelivery(ctx, id)
	if err != nil {
		span.SetStatus(codes.Error, "read failed")
		a.readError(ctx, w, alias, err)
		return
	}
	resp := ShowResponse{Database: alias, DatabaseID: db.Identity().String(), HistoryIncarnation: db.Incarnation(), EventID: id.String()}
	switch where {
	case primary.EventUndelivered:
		it := itemOf(in)
		resp.State, resp.Delivery = it.State, &it
	case primary.EventDelivered:
		resp.State = "delivered"
	default:
		resp.State = "unknown"
	}
	writeJSON(w, resp)
}

// readError answers a failed read of the index. The client's message holds
// no path; the log has the error, paths removed.
func (a *API) readError(ctx context.Context, w http.ResponseWriter, alias string, err error) {
	switch {
	case errors.Is(err, primary.ErrClosed):
		statsapi.WriteError(w, http.StatusServiceUnavailable, "unavailable", "the server is shutting down")
	case ctx.Err() != nil:
		statsapi.WriteError(w, http.StatusServiceUnavailable, "unavailable", "the request ended before the deliveries were read")
	default:
		telemetry.Logger(ctx, a.opts.Logger).Error("reading the outbox deliveries failed",
			zap.String("database", alias), zap.String("error", pathless.Message(err)))
		statsapi.WriteError(w, http.StatusInternalServerError, "outbox_read_failed", "the deliveries could not be read; the server's log says why")
	}
}

func itemOf(in primary.Intent) Item {
	it := Item{EventID: in.Event.String(), CommitSequence: in.Event.Seq, State: in.State.String(), Attempts: in.Attempts,
		CommittedAt: in.CommittedAt.UTC(), TraceID: traceID(in.TraceParent), Redrives: in.Redrives}
	if !in.NextAttempt.IsZero() {
		t := in.NextAttempt.UTC()
		it.NextAttemptAt = &t
	}
	if !in.LeaseDeadline.IsZero() {
		t := in.LeaseDeadline.UTC()
		it.LeaseDeadline = &t
	}
	if in.State == primary.IntentDeadLetter {
		it.DeadLetterReason = primary.SafeCode(in.DeadReason)
	}
	if f := in.LastFailure; !f.At.IsZero() {
		it.LastFailure = &Failure{At: f.At.UTC(), Class: primary.SafeCode(f.Class), Reason: primary.SafeCode(f.Reason)}
	}
	return it
}

// traceID returns the trace id of a W3C traceparent, or "".
func traceID(tp string) string {
	parts := strings.Split(tp, "-")
	if len(parts) != 4 {
		return ""
	}
	id, err := trace.TraceIDFromHex(parts[1])
	if err != nil {
		return ""
	}
	return id.String()
}

// ParseEventID parses SEQ.POS (event.ID.String's form).
func ParseEventID(s string) (event.ID, bool) {
	seq, pos, ok := strings.Cut(s, ".")
	if !ok {
		return event.ID{}, false
	}
	n, err1 := strconv.ParseUint(seq, 10, 64)
	p, err2 := strconv.ParseUint(pos, 10, 32)
	if err1 != nil || err2 != nil || n == 0 || strings.HasPrefix(seq, "+") || strings.HasPrefix(pos, "+") {
		return event.ID{}, false
	}
	return event.ID{Seq: n, Pos: uint32(p)}, true
}

// IsPath reports whether path is /v1/databases/{alias}/outbox/deliveries
// or a look-up under it.
func IsPath(path string) bool {
	tail, ok := outboxTail(path)
	if !ok {
		return false
	}
	if tail == "outbox/deliveries" {
		return true
	}
	id, ok := strings.CutPrefix(tail, "outbox/deliveries/")
	return ok && id != "" && !strings.Contains(id, "/")
}

// IsRedrivePath reports whether path is
// /v1/databases/{alias}/outbox/dead-letters/retry.
func IsRedrivePath(path string) bool {
	tail, ok := outboxTail(path)
	return ok && tail == "outbox/dead-letters/retry"
}

// outboxTail returns what follows /v1/databases/{alias}/ in path.
func outboxTail(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "/v1/databases/")
	if !ok {
		return "", false
	}
	alias, tail, ok := strings.Cut(rest, "/")
	if !ok || alias == "" || alias == "." || alias == ".." {
		return "", false
	}
	return tail, true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}
