//go:build unix

package capability

import (
	"errors"
	"fmt"
)

// rolledBack returns the ErrRolledBack error for a store file at generation
// below recorded.
func rolledBack(generation, recorded uint64) error {
	return fmt.Errorf("%w: the store file is at generation %d, below generation %d already recorded "+
		"(in the databases, or read earlier by this process): it is an older copy, in which capabilities revoked since would work again; "+
		"put the newest copy of the credential directory back, or accept this copy with `riffdb capability accept-restored` "+
		"(capabilities revoked after it was taken then work again)", ErrRolledBack, generation, recorded)
}

// admit refuses a store file at generation that is older than the store may
// be read at: below a generation this process already read or wrote (the
// floor), or below the anchor. It runs whenever the store file is read
// again, so a file put back while a server runs fails every request instead
// of reviving what it had; the anchor is read only then, when the file
// changed. It raises the floor to generation. The caller holds s.mu or has
// exclusive access.
func (s *Store) admit(generation uint64) error {
	floor := s.floor
	if s.anchor != nil {
		a, err := s.anchor.Load()
		if err != nil {
			return fmt.Errorf("capability: reading the credential store's anchor: %w", err)
		}
		floor = max(floor, a.Generation)
	}
	if generation < floor {
		return rolledBack(generation, floor)
	}
	s.floor = max(s.floor, generation)
	return nil
}

// checkAnchor compares the store as Open read it with anchor (nil: none).
// A store below the anchor is refused, or with accept, accepted: the anchor
// is lowered to it and the acceptance recorded. A store above the anchor
// raises it. It runs under the lock, at Open only.
func (s *Store) checkAnchor(anchor Anchor, accept bool) error {
	if anchor == nil {
		return nil
	}
	a, err := anchor.Load()
	if err != nil {
		return fmt.Errorf("capability: reading the credential store's anchor: %w", err)
	}
	switch {
	case s.generation < a.Generation && !accept:
		return rolledBack(s.generation, a.Generation)
	case s.generation < a.Generation:
		acc := Acceptance{Generation: s.generation, AcceptedFrom: a.Generation}
		if err := anchor.Accept(acc); err != nil {
			return fmt.Errorf("capability: recording the acceptance of the restored credential store: %w", err)
		}
		s.accepted = acc
	case s.generation > a.Generation:
		if err := anchor.Raise(s.generation); err != nil {
			return fmt.Errorf("capability: recording the credential store's generation: %w", err)
		}
	default:
		if a.AcceptedFrom != 0 {
			s.accepted = a
		}
	}
	s.anchor, s.floor = anchor, s.generation
	return nil
}

// raiseAnchor records generation, just written, in the anchor. The caller
// holds the lock.
func (s *Store) raiseAnchor(generation uint64) error {
	if s.anchor == nil {
		return nil
	}
	if err := s.anchor.Raise(generation); err != nil {
		return fmt.Errorf("%w (generation %d): %w", ErrNotAnchored, generation, err)
	}
	return nil
}

// Generation returns the generation of the store file as last read or
// written: the number of writes that led to it (0 for a file written before
// generations existed).
func (s *Store) Generation() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.generation
}

// Accepted returns the acceptance of a restored store that Open found: one
// AcceptRestored made, or one recorded in the anchor at the store's current
// generation (until the next write raises the anchor above it). Servers log
// it. The zero value means none.
func (s *Store) Accepted() Acceptance {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted
}

// AcceptRestored opens the store in dir like OpenWith, but a store older than
// o.Anchor is accepted rather than refused: the anchor is lowered to the
// store's generation, and the returned store's Accepted reports from which
// generation. Capabilities revoked after the restored copy was taken are
// then live again; the operator accepts that by calling it. A store that was
// not rolled back opens as with OpenWith (Accepted is then zero, unless an
// earlier acceptance is still recorded). A running server keeps refusing the
// restored store until it restarts: its own floor is not lowered.
func AcceptRestored(dir string, o Options) (*Store, error) {
	if o.Anchor == nil {
		return nil, errors.New("capability: accepting a restored store needs an anchor")
	}
	return open(dir, o, true)
}

// RecordGeneration records the store's generation in its anchor again, under
// the store's lock: for places the anchor gained since Open (a database
// created after the store was opened). Without an anchor it does nothing.
func (s *Store) RecordGeneration() error {
	return s.locked(func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.anchor == nil {
			return nil
		}
		if err := s.anchor.Raise(s.generation); err != nil {
			return fmt.Errorf("capability: recording the credential store's generation: %w", err)
		}
		return nil
	})
}
