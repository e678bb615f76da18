package capability_test

import (
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riffdb/riffdb/capability"
)

// memAnchor is an Anchor in memory, as a database directory would keep it.
type memAnchor struct {
	mu       sync.Mutex
	rec      capability.Acceptance
	err      error // of every method
	raiseErr error // of Raise
}

func (a *memAnchor) Load() (capability.Acceptance, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rec, a.err
}

func (a *memAnchor) Raise(g uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := errors.Join(a.err, a.raiseErr); err != nil {
		return err
	}
	if a.rec.Generation < g {
		a.rec = capability.Acceptance{Generation: g}
	}
	return nil
}

func (a *memAnchor) Accept(acc capability.Acceptance) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rec = acc
	return a.err
}

func (a *memAnchor) generation() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rec.Generation
}

// anchored opens b's store with anchor a.
func (b bundle) anchored(t *testing.T, a capability.Anchor) (*capability.Store, error) {
	t.Helper()
	return capability.OpenWith(b.dir, capability.Options{Clock: b.clock, Anchor: a})
}

// requireRolledBack checks that err is ErrRolledBack, says so, and names
// the generations.
func requireRolledBack(t *testing.T, err error, b bundle) {
	t.Helper()
	if !errors.Is(err, capability.ErrRolledBack) {
		t.Fatalf("err = %v, want ErrRolledBack", err)
	}
	for _, says := range []string{"rolled back", "generation", "accept-restored"} {
		if !strings.Contains(err.Error(), says) {
			t.Errorf("message %q does not say %q", err, says)
		}
	}
	if strings.Contains(err.Error(), b.dir) {
		t.Errorf("message %q names the path", err)
	}
}

// TestGenerationCountsWrites checks that every write raises the store's
// generation by one and records it in the anchor.
func TestGenerationCountsWrites(t *testing.T) {
	_, b := setup(t)
	a := &memAnchor{}
	s, err := b.anchored(t, a)
	if err != nil {
		t.Fatal(err)
	}
	if g := s.Generation(); g != 1 || a.generation() != 1 {
		t.Fatalf("a new store: generation %d, anchor %d; want 1, 1", g, a.generation())
	}
	_, c, err := s.Create("x", []capability.Permission{capability.ReadHealth}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Revoke(c.ID); err != nil {
		t.Fatal(err)
	}
	if g := s.Generation(); g != 3 || a.generation() != 3 {
		t.Fatalf("after two writes: generation %d, anchor %d; want 3, 3", g, a.generation())
	}
}

// TestRolledBackStoreIsRefusedAtOpen puts an older copy of the store file
// back after a revocation: Open with the anchor refuses it with
// ErrRolledBack, where before generations and anchors it opened and the
// revoked token authenticated again (TestOlderStoreFileOpens, without an
// anchor). AcceptRestored then accepts it, on purpose: the revoked token is
// live again, and Accepted reports the generations.
func TestRolledBackStoreIsRefusedAtOpen(t *testing.T) {
	_, b := setup(t)
	a := &memAnchor{}
	s, err := b.anchored(t, a)
	if err != nil {
		t.Fatal(err)
	}
	tok, c, err := s.Create("revoked later", []capability.Permission{capability.ReadHealth}, "")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(b.dir, "capabilities.json")
	older := readFile(t, path)
	if err := s.Revoke(c.ID); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, older)

	_, err = b.anchored(t, a)
	requireRolledBack(t, err, b)

	s, err = capability.AcceptRestored(b.dir, capability.Options{Clock: b.clock, Anchor: a})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Accepted(), (capability.Acceptance{Generation: 2, AcceptedFrom: 3}); got != want {
		t.Fatalf("Accepted = %+v, want %+v", got, want)
	}
	if _, err := s.Authenticate(tok); err != nil {
		t.Fatalf("the accepted copy's token: %v", err)
	}
	// The acceptance is recorded: the next Open reports it too.
	s, err = b.anchored(t, a)
	if err != nil || s.Accepted().AcceptedFrom != 3 {
		t.Fatalf("Open after the acceptance: %+v, %v", s.Accepted(), err)
	}
	// The next write raises the anchor past it, and clears it.
	if err := s.Revoke(c.ID); err != nil {
		t.Fatal(err)
	}
	if s, err = b.anchored(t, a); err != nil || s.Accepted() != (capability.Acceptance{}) || a.generation() != 3 {
		t.Fatalf("Open after a write: %+v, %v, anchor %d", s.Accepted(), err, a.generation())
	}
}

// TestRolledBackStoreFailsClosedWhileOpen puts an older copy of the store
// file back under an open store: Authenticate fails every token with
// ErrRolledBack (the server's 500) instead of reading the copy, in which the
// revoked token is live. It does so by the process's own floor even without
// an anchor, and by the anchor when another process wrote the newer file.
func TestRolledBackStoreFailsClosedWhileOpen(t *testing.T) {
	for _, withAnchor := range []bool{false, true} {
		t.Run(map[bool]string{false: "no anchor", true: "anchor"}[withAnchor], func(t *testing.T) {
			_, b := setup(t)
			var a capability.Anchor
			if withAnchor {
				a = &memAnchor{}
			}
			server, err := b.anchored(t, a)
			if err != nil {
				t.Fatal(err)
			}
			writer, err := b.anchored(t, a) // the CLI
			if err != nil {
				t.Fatal(err)
			}
			tok, c, err := writer.Create("revoked later", []capability.Permission{capability.ReadHealth}, "")
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(b.dir, "capabilities.json")
			older := readFile(t, path)
			b.clock.Advance(time.Second)
			if _, err := server.Authenticate(tok); err != nil {
				t.Fatal(err)
			}
			if err := writer.Revoke(c.ID); err != nil {
				t.Fatal(err)
			}
			if withAnchor {
				// The server has not read the revocation; only the anchor knows it.
				writeFile(t, path, older)
			} else {
				b.clock.Advance(time.Second)
				if _, err := server.Authenticate(tok); !errors.Is(err, capability.ErrUnauthenticated) {
					t.Fatalf("the revoked token: %v", err)
				}
				writeFile(t, path, older)
			}
			b.clock.Advance(time.Second)
			_, err = server.Authenticate(tok)
			requireRolledBack(t, err, b)
			// And it keeps failing, rather than serving the copy after one refusal.
			b.clock.Advance(time.Second)
			_, err = server.Authenticate(tok)
			requireRolledBack(t, err, b)
		})
	}
}

// TestAnchorFailures: an anchor that cannot be read refuses Open; one that
// cannot be raised after a write reports ErrNotAnchored, with the change
// saved.
func TestAnchorFailures(t *testing.T) {
	_, b := setup(t)
	a := &memAnchor{err: errors.New("anchor unreadable")}
	if _, err := b.anchored(t, a); err == nil || !strings.Contains(err.Error(), "anchor unreadable") {
		t.Fatalf("Open with an unreadable anchor: %v", err)
	}
	a = &memAnchor{}
	s, err := b.anchored(t, a)
	if err != nil {
		t.Fatal(err)
	}
	_, c, err := s.Create("x", []capability.Permission{capability.ReadHealth}, "")
	if err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	a.raiseErr = errors.New("anchor unwritable")
	a.mu.Unlock()
	if err := s.Revoke(c.ID); !errors.Is(err, capability.ErrNotAnchored) {
		t.Fatalf("Revoke with an unwritable anchor: %v, want ErrNotAnchored", err)
	}
	list, err := b.open(t).List()
	if err != nil || len(list) != 1 || !list[0].Revoked {
		t.Fatalf("the revocation was not saved: %+v, %v", list, err)
	}
}
