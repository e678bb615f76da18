package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
	"github.com/riffdb/riffdb/primary"
)

// TestCommandResponseBytes: the hand-written command response is the bytes
// json.Encoder writes for the same CommandResponse, for plain and for
// escaped names (quotes, HTML characters, control and non-ASCII
// characters), no events and several, replayed or not.
func TestCommandResponseBytes(t *testing.T) {
	names := []string{"default", "place_order", "", `a"b\c`, "<script>&", "tab\there\x00\x1f", "é\u2028ü", "\xff"}
	commits := []primary.Commit{
		{Seq: 1, Events: []event.ID{{Seq: 1, Pos: 0}}},
		{Seq: 18446744073709551615, Events: []event.ID{{Seq: 18446744073709551615, Pos: 4294967295}, {Seq: 7, Pos: 1}}, Replayed: true},
		{Seq: 3},
	}
	for _, alias := range names {
		for _, command := range names {
			for _, c := range commits {
				resp := CommandResponse{Database: alias, Command: command, CommitSequence: c.Seq,
					Events: make([]string, len(c.Events)), Replayed: c.Replayed}
				for i, id := range c.Events {
					resp.Events[i] = id.String()
				}
				var want bytes.Buffer
				if err := json.NewEncoder(&want).Encode(resp); err != nil {
					t.Fatal(err)
				}
				if got := appendCommandResponse(nil, alias, command, c); !bytes.Equal(got, want.Bytes()) {
					t.Errorf("appendCommandResponse(%q, %q, %+v)\n got %s\nwant %s", alias, command, c, got, want.Bytes())
				}
			}
		}
	}
}

// TestWriteCommandResponse checks what writeCommandResponse writes: the
// content type and appendCommandResponse's bytes, also for a response too
// large for its buffer to be kept, and again after it.
func TestWriteCommandResponse(t *testing.T) {
	many := primary.Commit{Seq: 9, Events: make([]event.ID, 10000)}
	for i := range many.Events {
		many.Events[i] = event.ID{Seq: 9, Pos: uint32(i)}
	}
	for _, c := range []primary.Commit{{Seq: 1, Events: []event.ID{{Seq: 1}}}, many, {Seq: 10, Events: []event.ID{{Seq: 10}}, Replayed: true}} {
		w := httptest.NewRecorder()
		writeCommandResponse(w, "default", "place_order", c)
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("Content-Type %q", ct)
		}
		if want := appendCommandResponse(nil, "default", "place_order", c); !bytes.Equal(w.Body.Bytes(), want) {
			t.Fatalf("commit %d: wrote %d bytes, not appendCommandResponse's %d", c.Seq, w.Body.Len(), len(want))
		}
	}
	if n := len(appendCommandResponse(nil, "default", "place_order", many)); n <= maxPooledResponse {
		t.Fatalf("the large response has %d bytes, not more than the %d kept", n, maxPooledResponse)
	}
}

// TestWriteCommandResponseAllocations holds a command's response to the one
// allocation of its Content-Type value: the response is encoded into a
// pooled buffer (a new one per response was the second).
func TestWriteCommandResponseAllocations(t *testing.T) {
	testutil.SkipUnderRace(t)
	w := discardWriter{h: http.Header{}}
	c := primary.Commit{Seq: 7, Events: []event.ID{{Seq: 7}}}
	writeCommandResponse(w, "default", "place_order", c)
	if allocs := testing.AllocsPerRun(200, func() { writeCommandResponse(w, "default", "place_order", c) }); allocs > 1 {
		t.Fatalf("writing a command's response allocates %.0f times, want at most 1", allocs)
	}
}
