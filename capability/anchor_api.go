package capability

import "errors"

// ErrRolledBack is returned when the store file is older than its anchor:
// its generation is below the highest generation recorded outside the
// credential directory, or below one this process already read. The file
// is authentic (its integrity tag matches) but an older copy, in which
// capabilities revoked since may still be live. Its message says which
// generations were compared and what the operator can do; it names no path.
var ErrRolledBack = errors.New("capability: credential store was rolled back")

// ErrNotAnchored is returned by Create and Revoke when the change was saved
// but its generation could not be recorded in the anchor. The store file
// holds the change; until the anchor records it, a copy of the store taken
// before it would not be noticed. Running the same Revoke again records it.
var ErrNotAnchored = errors.New("capability: the change is saved, but its generation could not be recorded outside the credential directory")

// Anchor records the credential store's generation outside its directory,
// where putting an older copy of the directory back does not put back an
// older anchor too (riffdb keeps it in each database's directory). Every
// write of the store raises it; Open refuses a store below it. Its methods
// are called with the store's lock held, so writers of one store never
// raise it concurrently. Errors must not contain paths.
type Anchor interface {
	// Load returns the highest generation recorded (0 when none is), and
	// the acceptance recorded with it (AcceptedFrom 0 when there is none).
	Load() (Acceptance, error)
	// Raise records generation where the recorded generation is lower. It
	// leaves an equal record, and its acceptance, as they are.
	Raise(generation uint64) error
	// Accept records a, lowering records above a.Generation: the operator
	// accepted a store at a.Generation although a.AcceptedFrom was recorded.
	Accept(a Acceptance) error
}

// Acceptance is an operator's acceptance of a restored credential store:
// the anchor was lowered from AcceptedFrom to Generation. The zero value is
// no acceptance.
type Acceptance struct {
	// Generation is the accepted store's generation.
	Generation uint64
	// AcceptedFrom is the generation that was recorded before; 0 when
	// nothing was accepted.
	AcceptedFrom uint64
}
