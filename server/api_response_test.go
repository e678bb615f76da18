package server

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/riffdb/riffdb/event"
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
