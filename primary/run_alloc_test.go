package primary_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
	"github.com/riffdb/riffdb/primary"
	"github.com/riffdb/riffdb/telemetry"
)

// runAllocs bounds the allocations of the primary's share of one claim run
// of 16 (TestRunAllocations). The code before docs/benchmarks.md's
// "Allocations a delivered event no longer makes" made 110 per run in this
// test (commands without a trace context); 28 since. With each command's
// traceparent kept in its intent, as a client's trace makes it, the
// compare-and-set reads of the claim and the completion copied it into a
// new string per event: 60 per run, until they took the string of the state
// they were given (decodeIntentLike): 28 again; 25 since each entry of a
// storage call returns the same func to leave by (enter made the method
// value db.ops.Done anew each time); 21 since guard reuses its result
// channels (a new one per storage write before).
const runAllocs = 24

// TestRunAllocations: what the outbox worker asks of the primary for one
// run of 16 events (load their bytes, claim them, complete them) allocates
// at most runAllocs times, Pebble's allocations included.
func TestRunAllocations(t *testing.T) {
	testutil.SkipUnderRace(t)
	db, bu := setup(t)
	ctx := context.Background()
	const run, runs = 16, 20
	// Each command joins a trace, as a client's does, so that its intent
	// keeps a traceparent.
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	traced := trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	for i := range (runs + 2) * run { // the warm-up, and AllocsPerRun runs once more than runs
		in := fmt.Sprintf(`{"order_id":"o-%06d","amount_cents":125}`, i)
		if _, err := db.Execute(traced, "place_order", json.RawMessage(in), ""); err != nil {
			t.Fatal(err)
		}
	}
	if in := allIntents(t, db); in[0].TraceParent == "" {
		t.Fatal("the commands' intents keep no traceparent")
	}
	in := allIntents(t, db)
	lease := bu.clock.Now().Add(time.Minute)
	n := 0
	oneRun := func() {
		members := in[n : n+run]
		n += run
		ids := make([]event.ID, len(members))
		for i, m := range members {
			ids[i] = m.Event
		}
		if _, err := db.LoadEvents(ctx, ids); err != nil {
			t.Fatal(err)
		}
		claimed, err := db.Claim(ctx, members, lease)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.CompleteDeferred(ctx, claimed); err != nil {
			t.Fatal(err)
		}
	}
	oneRun()
	allocs := testing.AllocsPerRun(runs, oneRun)
	if allocs > runAllocs {
		t.Fatalf("a run of %d allocates %.0f times, want at most %d", run, allocs, runAllocs)
	}
	t.Logf("%.1f allocations per run of %d", allocs, run)
}

// executeAllocs bounds the allocations of one command
// (TestExecuteAllocations). The code before docs/benchmarks.md's "Fewer
// allocations on every command's path" made 27 per command in this test:
// the duration's record through context.WithoutCancel (each value looked
// up through it boxes the context: 2), the idempotency record's key made
// twice and the group's map of keys made for a group of one (2), the
// traceparent through the propagator's Inject (1), and the event, intent
// and history values encoded each into a new slice, which the batch then
// copies (3), and the duration's and the group size's attribute options
// passed as new one-element slices (2), the method value enter returned
// (1) and a copy of the canonical payload for a command that emits one
// event (1), the Done channel of the caller's context, made by a select
// that waited on it though the database was ready (1), and the
// idempotency record's key, now encoded into a buffer of the committer's
// (1); 12 then, and 10 since the commit requests and their channels are
// kept in a pool between commits.
const executeAllocs = 10

// TestExecuteAllocations: one command, with the server's default telemetry
// (every span sampled, none recorded, the duration histogram keeping
// exemplars), allocates at most executeAllocs times, the committer's and
// Pebble's allocations included.
func TestExecuteAllocations(t *testing.T) {
	testutil.SkipUnderRace(t)
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{SampleRatio: 1, LogOutput: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	db, _ := setup(t, func(o *primary.Options) { o.TracerProvider, o.MeterProvider = tel.TracerProvider, tel.MeterProvider })
	const runs = 200
	inputs, keys := make([]json.RawMessage, runs+2), make([]string, runs+2)
	for i := range inputs {
		inputs[i] = json.RawMessage(fmt.Sprintf(`{"order_id":"o-%06d","amount_cents":125}`, i))
		keys[i] = fmt.Sprintf("key-%06d", i)
	}
	ctx := context.Background()
	n := 0
	one := func() {
		if _, err := db.Execute(ctx, "place_order", inputs[n], keys[n]); err != nil {
			t.Fatal(err)
		}
		n++
	}
	one()
	allocs := testing.AllocsPerRun(runs, one)
	t.Logf("%.1f allocations per command", allocs)
	if allocs > executeAllocs {
		t.Fatalf("a command allocates %.0f times, want at most %d", allocs, executeAllocs)
	}
}
