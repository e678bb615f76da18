package outbox

import "errors"

// Destination failure classes. A Destination wraps every error it returns in
// exactly one of these, and the worker acts on the class alone. Each is a
// *sentinel, so that an error is recognised as classified by its type,
// without a list of the classes to keep.
var (
	// ErrUnavailable: the destination cannot be reached right now (missing
	// directory, I/O error, timeout). Health degrades; delivery is retried.
	ErrUnavailable = newSentinel("outbox: destination unavailable")
	// ErrRefused: the destination refuses writes for a known reason
	// (permission denied, read-only filesystem, custody violation). Delivery
	// pauses before the next claim until a probe succeeds.
	ErrRefused = newSentinel("outbox: destination refused")
	// ErrCapacity: the quota or the disk is full. Delivery pauses.
	ErrCapacity = newSentinel("outbox: destination capacity exhausted")
	// ErrConflict: the archive holds different bytes under the event's
	// identity. The event is dead-lettered.
	ErrConflict = newSentinel("outbox: archive identity conflict")
	// ErrBindingChanged, ErrIncompatibleFormat and ErrCorrupt stop delivery
	// until an operator investigates and restarts the server.
	ErrBindingChanged     = newSentinel("outbox: archive binding changed")
	ErrIncompatibleFormat = newSentinel("outbox: archive format incompatible")
	ErrCorrupt            = newSentinel("outbox: archive content corrupt")
	// ErrArchiveLost: the archive holds fewer records than the primary's
	// record of completed deliveries (or its own floor) proves it held:
	// completed events are gone. Delivery stops; the error should carry the
	// count (see MissingRecords).
	ErrArchiveLost = newSentinel("outbox: archive lost completed records")
	// ErrHistoryBehind: the archive holds events of the primary's history
	// incarnation beyond its last commit: the primary lost its tail or was
	// copied back by hand. Delivery stops before reusing those identities.
	ErrHistoryBehind = newSentinel("outbox: primary history is behind the archive")
	// ErrStartupValidation: the archive could not be opened and validated
	// for a reason that is not one of the stop classes. Health degrades and
	// validation is retried.
	ErrStartupValidation = newSentinel("outbox: archive startup validation failed")
)

// sentinel is the type of the failure classes above. Identity is by
// pointer, so errors.Is behaves as with errors.New.
type sentinel struct{ msg string }

func newSentinel(msg string) error { return &sentinel{msg: msg} }

func (s *sentinel) Error() string { return s.msg }

// MissingRecords returns how many records err says the archive lost at
// least: the MissingRecords() of the first error in its chain that has one.
func MissingRecords(err error) (int64, bool) {
	var m interface{ MissingRecords() int64 }
	if errors.As(err, &m) {
		return m.MissingRecords(), true
	}
	return 0, false
}

// isClassified reports whether err wraps one of the failure classes.
func isClassified(err error) bool { return errors.As(err, new(*sentinel)) }

// errorsJoinUnavailable classifies an unclassified error (a timeout that the
// destination did not wrap) as unavailability.
func errorsJoinUnavailable(err error) error { return errors.Join(ErrUnavailable, err) }
