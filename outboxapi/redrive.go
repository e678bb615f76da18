package outboxapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/capability"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/hygiene/strictjson"
	"github.com/riffdb/riffdb/internal/observe/attrkey"
	"github.com/riffdb/riffdb/primary"
	"github.com/riffdb/riffdb/statsapi"
	"github.com/riffdb/riffdb/telemetry"
)

// Redrive bounds.
const (
	// MaxRedriveIDs bounds the event_ids of one request (one primary
	// transaction).
	MaxRedriveIDs = primary.MaxRedrive
	// maxRedriveBody bounds a request body: 1,000 of the longest event ids
	// fit with room to spare.
	maxRedriveBody = 64 << 10
)

// A redrive by reason reads the index in pages of redrivePage intents,
// each page's dead letters redriven in one primary transaction, and at most
// redriveScan intents per request; a request that stops there returns
// next_after. (Variables so that a test can make them small.)
var (
	redrivePage = MaxRedriveIDs
	redriveScan = 16 * MaxRedriveIDs
)

// Dead-letter reasons a redrive may select, by the names the request may
// use: the stored codes and the short names of DESIGN's contract.
var redriveReasons = map[string]string{
	"attempts_exhausted": "attempts_exhausted", "exhausted": "attempts_exhausted",
	"identity_conflict": "identity_conflict", "conflict": "identity_conflict",
}

// RedriveRequest is the body of POST
// /v1/databases/{alias}/outbox/dead-letters/retry: either EventIDs (1 to
// MaxRedriveIDs event ids, SEQ.POS) or Reason (exhausted or conflict, or
// their stored codes attempts_exhausted and identity_conflict), with After
// to continue a redrive by reason where an earlier response's next_after
// left it.
type RedriveRequest struct {
	EventIDs []string `json:"event_ids"`
	Reason   string   `json:"reason"`
	After    string   `json:"after"`
}

// RedriveResponse is the body of a redrive's answer.
type RedriveResponse struct {
	Database           string `json:"database"`
	DatabaseID         string `json:"database_id"`
	HistoryIncarnation uint64 `json:"history_incarnation"`
	// Redriven are the events returned to pending, with a fresh attempt
	// budget; the worker delivers them like any other event.
	Redriven []string `json:"redriven"`
	// NotRedriven are the events asked for by id that were left as they
	// were, and why: not_undelivered (delivered, or no such event),
	// not_dead_letter (its state says what it is now: a concurrent redrive
	// or the worker changed it first), other_reason.
	NotRedriven []NotRedriven `json:"not_redriven"`
	// NextAfter is set when a redrive by reason stopped before the end of
	// the index (it reads at most 16,000 intents): send it as after to
	// continue.
	NextAfter string `json:"next_after,omitempty"`
	// Conflicts counts the redriven events that had been dead letters for
	// identity_conflict; Note then says what becomes of them.
	Conflicts int    `json:"conflicts,omitempty"`
	Note      string `json:"note,omitempty"`
}

// NotRedriven is an event a redrive left as it was.
type NotRedriven struct {
	EventID string `json:"event_id"`
	Why     string `json:"why"`
	State   string `json:"state,omitempty"`
}

// conflictNote is RedriveResponse.Note when identity conflicts were
// redriven.
const conflictNote = "identity_conflict dead letters were redriven: the archive holds different bytes under their identity, " +
	"so each becomes a dead letter again (identity_conflict) on its next attempt"

// HandleRedrive redrives dead letters back to pending.
func (a *API) HandleRedrive(w http.ResponseWriter, r *http.Request) {
	alias, db, capID, ok := a.authorizeFor(w, r, capability.ManageOutbox, "redrive this database's dead letters")
	if !ok {
		return
	}
	req, ids, after, err := parseRedrive(r)
	if err != nil {
		statsapi.WriteError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	reason := redriveReasons[req.Reason]
	ctx, span := a.tracer.Start(r.Context(), "riffdb.outbox.dead_letters.retry", trace.WithAttributes(
		attrkey.Database.String(alias), attribute.String("riffdb.outbox.redrive.reason", reason),
		attribute.Int("riffdb.outbox.redrive.requested", len(ids))))
	defer span.End()
	resp := RedriveResponse{Database: alias, DatabaseID: db.Identity().String(), HistoryIncarnation: db.Incarnation(),
		Redriven: []string{}, NotRedriven: []NotRedriven{}}
	if ids != nil {
		err = a.redriveBatch(ctx, db, alias, ids, "", &resp)
	} else {
		err = a.redriveReason(ctx, db, alias, reason, after, &resp)
	}
	span.SetAttributes(attribute.Int("riffdb.outbox.redrive.redriven", len(resp.Redriven)),
		attribute.Int("riffdb.outbox.redrive.not_redriven", len(resp.NotRedriven)))
	// Once per request, whatever happened: who redrove how many of what.
	log := telemetry.Logger(ctx, a.opts.Logger).With(zap.String("database", alias), zap.String("capability_id", capID),
		zap.String("reason", reason), zap.Int("requested", len(ids)), zap.Int("redriven", len(resp.Redriven)),
		zap.Int("not_redriven", len(resp.NotRedriven)), zap.Int("conflicts", resp.Conflicts))
	if err != nil {
		span.SetStatus(codes.Error, "redrive failed")
		log.Warn("dead-letter redrive failed part way; the events listed as redriven before it are pending again")
		a.readError(ctx, w, alias, err)
		return
	}
	log.Info("dead letters redriven")
	if resp.Conflicts > 0 {
		resp.Note = conflictNote
	}
	writeJSON(w, resp)
}

// redriveBatch redrives ids (at most MaxRedriveIDs: one primary
// transaction) and adds the outcome to resp.
func (a *API) redriveBatch(ctx context.Context, db *primary.DB, alias string, ids []event.ID, reason string, resp *RedriveResponse) error {
	redriven, refused, err := db.Redrive(ctx, ids, reason)
	if err != nil {
		return err
	}
	counts := map[string]int64{}
	for _, in := range redriven {
		resp.Redriven = append(resp.Redriven, in.Event.String())
		counts[in.Reason]++
		if in.Reason == "identity_conflict" {
			resp.Conflicts++
		}
	}
	for why, n := range counts {
		a.redriven.Add(context.WithoutCancel(ctx), n, metric.WithAttributes(attrkey.Database.String(alias), attrkey.Reason.String(primary.SafeCode(why))))
	}
	for _, f := range refused {
		nr := NotRedriven{EventID: f.Event.String(), Why: f.Why}
		if f.Why == primary.RedriveNotDeadLetter {
			nr.State = f.State.String()
		}
		resp.NotRedriven = append(resp.NotRedriven, nr)
	}
	return nil
}

// redriveReason redrives the dead letters of reason after `after`, page by
// page (each page's in one primary transaction), reading at most
// redriveScan intents.
func (a *API) redriveReason(ctx context.Context, db *primary.DB, alias, reason string, after *event.ID, resp *RedriveResponse) error {
	for scanned := 0; scanned < redriveScan; {
		page, err := db.ScanIntents(ctx, after, redrivePage)
		if err != nil {
			return err
		}
		var ids []event.ID
		for _, in := range page {
			if in.State == primary.IntentDeadLetter && in.DeadReason == reason {
				ids = append(ids, in.Event)
			}
		}
		if len(ids) > 0 {
			// A dead letter that changed since the scan is left alone and
			// named in not_redriven.
			if err := a.redriveBatch(ctx, db, alias, ids, reason, resp); err != nil {
				return err
			}
		}
		if len(page) < redrivePage {
			return nil
		}
		last := page[len(page)-1].Event
		after = &last
		scanned += len(page)
	}
	resp.NextAfter = after.String()
	return nil
}

// parseRedrive reads a redrive request: a strict JSON object
// (internal/hygiene/strictjson) of at most maxRedriveBody bytes with no
// unknown field and exactly one of event_ids and reason. It returns the ids (nil for a redrive by
// reason) and where a redrive by reason starts (nil: the beginning).
func parseRedrive(r *http.Request) (RedriveRequest, []event.ID, *event.ID, error) {
	var req RedriveRequest
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return req, nil, nil, errors.New("the request body must be application/json")
		}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRedriveBody+1))
	if err != nil {
		return req, nil, nil, errors.New("the request body could not be read")
	}
	if len(body) > maxRedriveBody {
		return req, nil, nil, fmt.Errorf("the request body is larger than %d bytes", maxRedriveBody)
	}
	// Strict JSON as for a command's body (duplicate keys, invalid UTF-8,
	// trailing data refused); the error names the problem, never the body.
	if err := strictjson.Validate(body); err != nil {
		var se *strictjson.Error
		if errors.As(err, &se) {
			return req, nil, nil, fmt.Errorf("the body %s", se.Problem)
		}
		return req, nil, nil, errors.New("the body is not valid JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, nil, nil, errors.New(`the body must be a JSON object {"event_ids":["SEQ.POS",…]} or {"reason":"exhausted"|"conflict"} with no other field`)
	}
	switch {
	case len(req.EventIDs) > 0 && req.Reason != "":
		return req, nil, nil, errors.New("give event_ids or reason, not both")
	case len(req.EventIDs) > MaxRedriveIDs:
		return req, nil, nil, fmt.Errorf("at most %d event_ids per request", MaxRedriveIDs)
	case len(req.EventIDs) > 0:
		if req.After != "" {
			return req, nil, nil, errors.New("after continues a redrive by reason; it cannot be given with event_ids")
		}
		ids := make([]event.ID, len(req.EventIDs))
		seen := make(map[event.ID]bool, len(ids))
		for i, s := range req.EventIDs {
			id, ok := ParseEventID(s)
			if !ok {
				return req, nil, nil, fmt.Errorf("event_ids[%d] is not an event id: an event id is SEQ.POS, e.g. 42.0", i)
			}
			if seen[id] {
				return req, nil, nil, fmt.Errorf("event_ids names %s twice", id)
			}
			seen[id], ids[i] = true, id
		}
		return req, ids, nil, nil
	case req.Reason == "":
		return req, nil, nil, errors.New("give event_ids (at most 1000) or reason (exhausted or conflict)")
	}
	if _, ok := redriveReasons[req.Reason]; !ok {
		return req, nil, nil, errors.New("unknown reason (known: exhausted, conflict, attempts_exhausted, identity_conflict)")
	}
	if req.After == "" {
		return req, nil, nil, nil
	}
	id, ok := ParseEventID(strings.TrimSpace(req.After))
	if !ok {
		return req, nil, nil, errors.New("after is not an event id: pass next_after from the previous response")
	}
	return req, nil, &id, nil
}
