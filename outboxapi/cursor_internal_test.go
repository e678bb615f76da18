package outboxapi

import (
	"testing"

	"github.com/riffdb/riffdb/event"
)

// TestCursorBindsTheIncarnation: a cursor issued for another history
// incarnation of the same database (one before a restore) verifies, and is
// refused as cursor_other_incarnation; the same position under the current
// incarnation is accepted.
func TestCursorBindsTheIncarnation(t *testing.T) {
	a := New(Options{})
	db := event.DatabaseID{1, 2, 3}
	at := event.ID{Seq: 9, Pos: 2}
	old := a.encodeCursor(position{db: db, incarnation: 1, last: at})
	if _, err := a.decodeCursor(old, db, 2); err == nil || err.(*cursorError).code != "cursor_other_incarnation" {
		t.Fatalf("a cursor of incarnation 1 on incarnation 2: %v", err)
	}
	if got, err := a.decodeCursor(a.encodeCursor(position{db: db, incarnation: 2, last: at}), db, 2); err != nil || got != at {
		t.Fatalf("a cursor of incarnation 2: %v, %v", got, err)
	}
	// Another API (another server process) has another key.
	if _, err := New(Options{}).decodeCursor(old, db, 1); err == nil || err.(*cursorError).code != "invalid_cursor" {
		t.Fatalf("a cursor of another process: %v", err)
	}
}
