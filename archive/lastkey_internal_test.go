package archive

import (
	"context"
	"errors"
	"testing"

	"github.com/riffdb/riffdb/deliverytype"
)

// TestAcceptLooksUpKeysAtOrBelowTheLast: Accept skips the lookup only for a
// key beyond the greatest in the store. A replay of the greatest key, a new
// key below it and a replay of that one are each decided by the lookup, in
// the same session and after a reopen (where the greatest key is read from
// the store), so no record is stored twice and a replay with other bytes
// is refused.
func TestAcceptLooksUpKeysAtOrBelowTheLast(t *testing.T) {
	fs := newMemFS(t, false)
	opts := testOptions(t, fs)
	s := mustOpen(t, opts)
	k5, r5 := rec(t, testDatabase, 5, 0, `{"n":5}`)
	k3, r3 := rec(t, testDatabase, 3, 0, `{"n":3}`)
	k9, r9 := rec(t, testDatabase, 9, 0, `{"n":9}`)
	_, other := rec(t, testDatabase, 5, 0, `{"n":"other"}`)

	mustAccept(t, s, k5, r5, deliverytype.Stored)
	mustAccept(t, s, k5, r5, deliverytype.Duplicate) // the greatest key itself
	mustAccept(t, s, k3, r3, deliverytype.Stored)    // new, below the greatest
	mustAccept(t, s, k3, r3, deliverytype.Duplicate)
	if _, err := s.Accept(context.Background(), k5, other); !errors.Is(err, ErrConflict) {
		t.Fatalf("other bytes under the greatest key: %v, want ErrConflict", err)
	}
	if got := s.Usage().Records; got != 2 {
		t.Fatalf("records %d, want 2", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = mustOpen(t, opts)
	mustAccept(t, s, k5, r5, deliverytype.Duplicate)
	mustAccept(t, s, k3, r3, deliverytype.Duplicate)
	if _, err := s.Accept(context.Background(), k5, other); !errors.Is(err, ErrConflict) {
		t.Fatalf("after a reopen, other bytes under the greatest key: %v, want ErrConflict", err)
	}
	mustAccept(t, s, k9, r9, deliverytype.Stored)
	mustAccept(t, s, k9, r9, deliverytype.Duplicate)
	if got := s.Usage().Records; got != 3 {
		t.Fatalf("records %d, want 3", got)
	}
}
