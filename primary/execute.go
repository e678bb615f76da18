package primary

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/observe/attrkey"
)

// Commit is the result of a command commit.
type Commit struct {
	Seq      uint64
	Events   []event.ID
	Replayed bool // an idempotent retry returned the original commit
}

// Execute runs a compiled command: it validates the input, and commits in
// one synced batch the history record, each event's exact stored bytes, one
// pending outbox intent per event and the undelivered count. It returns once
// the commit is durable; concurrent calls share fsyncs (group commit).
//
// A non-empty idempotencyKey makes retries safe: the same key with the same
// command and input returns the original commit (Replayed, after it is
// durable); with a different command or input it returns
// ErrIdempotencyConflict. The key must be valid UTF-8 of at most
// MaxIdempotencyKeyLen bytes. Unknown commands (ErrUnknownCommand) and
// invalid input or keys (an *InputError matching ErrInvalidInput) commit
// nothing. ErrFailed means the store failed and
// the server must stop.
func (db *DB) Execute(ctx context.Context, command string, input json.RawMessage, idempotencyKey string) (Commit, error) {
	start := db.clock()
	// The span's attributes are given in one call when it ends (the SDK
	// copies those given at the start twice and grows the slice again for
	// later ones); riffdb's sampler does not read attributes.
	ctx, span := db.tel.tracer.Start(ctx, "riffdb.command")
	c, err := db.execute(ctx, command, input, idempotencyKey)
	result := resultOf(c, err)
	if span.IsRecording() { // not sampled, or no exporter: nothing to give
		attrs := append(make([]attribute.KeyValue, 0, 6),
			attrkey.Database.String(db.alias),
			attrkey.DatabaseID.String(db.idString),
			attrkey.Command.String(command))
		if err != nil {
			span.SetStatus(codes.Error, result)
			attrs = append(attrs, attribute.String("error.type", result))
			span.RecordError(err)
		} else {
			attrs = append(attrs,
				attribute.Int64("riffdb.commit.seq", int64(c.Seq)),
				attribute.Int("riffdb.command.events", len(c.Events)),
				attribute.Bool("riffdb.command.replayed", c.Replayed))
		}
		span.SetAttributes(attrs...)
	}
	span.End()
	label := command
	if errors.Is(err, ErrUnknownCommand) {
		label = "_unknown" // a caller's typo must not mint a new series
	}
	// ctx itself, not context.WithoutCancel's copy: the SDK reads no
	// context's end, and every value looked up through that copy (the
	// exemplar filter's span) boxes it anew, an allocation each.
	db.tel.duration.Record(ctx, db.clock().Sub(start).Seconds(), db.durationOptions(label, result)...)
	return c, err
}

func resultOf(c Commit, err error) string {
	switch {
	case err == nil && c.Replayed:
		return "replayed"
	case err == nil:
		return "committed"
	case errors.Is(err, ErrUnknownCommand):
		return "unknown_command"
	case errors.Is(err, ErrInvalidInput):
		return "invalid_input"
	case errors.Is(err, ErrIdempotencyConflict):
		return "idempotency_conflict"
	case errors.Is(err, ErrFailed):
		return "failed"
	case errors.Is(err, ErrClosed):
		return "closed"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	}
	return "error"
}

func (db *DB) execute(ctx context.Context, command string, input json.RawMessage, key string) (Commit, error) {
	plan, ok := db.opts.Contract.Command(command)
	if !ok {
		return Commit{}, fmt.Errorf("%w: %q", ErrUnknownCommand, command)
	}
	if len(key) > MaxIdempotencyKeyLen {
		return Commit{}, &InputError{Detail: fmt.Sprintf("idempotency_key exceeds %d bytes", MaxIdempotencyKeyLen)}
	}
	if !utf8.ValidString(key) {
		// Keys are compared as bytes; one that is not UTF-8 is refused so
		// that a JSON reader's U+FFFD never makes two keys one.
		return Commit{}, &InputError{Detail: "idempotency_key is not valid UTF-8"}
	}
	drafts, err := plan.Events(input)
	if err != nil {
		return Commit{}, inputError(err)
	}
	size, err := checkDrafts(drafts)
	if err != nil {
		// event.CheckLimits: "event: payload exceeds … bytes".
		return Commit{}, &InputError{Detail: "input " + strings.TrimPrefix(err.Error(), "event: "), err: err}
	}
	hash := inputHash(plan.ID, drafts[0].Payload)
	done, err := db.enterReady(ctx)
	if err != nil {
		return Commit{}, err
	}
	defer done()
	r := commitReqs.Get().(*commitReq)
	*r = commitReq{plan: plan, drafts: drafts, hash: hash, key: key, tp: traceParent(ctx), size: size, done: r.done}
	c, err := db.submit(r)
	if err != nil {
		return Commit{}, err
	}
	if c.Replayed {
		// Wait until the original commit is durable before acknowledging it.
		if err := db.frontier.wait(ctx, c.Seq, db.failCh); err != nil {
			return Commit{}, err
		}
		return c, nil
	}
	trace.SpanFromContext(ctx).AddEvent("durable")
	db.refreshUsage()
	return c, nil
}

func eventIDs(seq uint64, n uint32) []event.ID {
	ids := make([]event.ID, n)
	for i := range ids {
		ids[i] = event.ID{Seq: seq, Pos: uint32(i)}
	}
	return ids
}

// inputHash identifies a command invocation for idempotency: SHA-256 over
// the plan id and the canonical JSON of the input (which every draft's
// payload is; a compiled plan emits at least one event), so logically equal
// inputs hash equally whatever their formatting.
func inputHash(planID string, canonical []byte) [32]byte {
	h := sha256.New()
	h.Write([]byte(planID))
	h.Write([]byte{0})
	h.Write(canonical)
	var out [32]byte
	h.Sum(out[:0])
	return out
}
