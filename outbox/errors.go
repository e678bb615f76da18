package outbox

import "errors"

// Destination failure classes. A Destination wraps every error it returns in
// exactly one of these, and the worker acts on the class alone.
var (
	// ErrUnavailable: the destination cannot be reached right now (missing
	// directory, I/O error, timeout). Health degrades; delivery is retried.
	ErrUnavailable = errors.New("outbox: destination unavailable")
	// ErrRefused: the destination refuses writes for a known reason
	// (permission denied, read-only filesystem, custody violation). Delivery
	// pauses before the next claim until a probe succeeds.
	ErrRefused = errors.New("outbox: destination refused")
	// ErrCapacity: the quota or the disk is full. Delivery pauses.
	ErrCapacity = errors.New("outbox: destination capacity exhausted")
	// ErrConflict: the archive holds different bytes under the event's
	// identity. The event is dead-lettered.
	ErrConflict = errors.New("outbox: archive identity conflict")
	// ErrBindingChanged, ErrIncompatibleFormat and ErrCorrupt stop delivery
	// until an operator investigates and restarts the server.
	ErrBindingChanged     = errors.New("outbox: archive binding changed")
	ErrIncompatibleFormat = errors.New("outbox: archive format incompatible")
	ErrCorrupt            = errors.New("outbox: archive content corrupt")
	// ErrArchiveLost: the archive holds fewer records than the primary's
	// record of completed deliveries (or its own floor) proves it held:
	// completed events are gone. Delivery stops; the error should carry the
	// count (see MissingRecords).
	ErrArchiveLost = errors.New("outbox: archive lost completed records")
	// ErrHistoryBehind: the archive holds events of the primary's history
	// incarnation beyond its last commit: the primary lost its tail or was
	// copied back by hand. Delivery stops before reusing those identities.
	ErrHistoryBehind = errors.New("outbox: primary history is behind the archive")
	// ErrStartupValidation: the archive could not be opened and validated
	// for a reason that is not one of the stop classes. Health degrades and
	// validation is retried.
	ErrStartupValidation = errors.New("outbox: archive startup validation failed")
)

var classes = []error{ErrUnavailable, ErrRefused, ErrCapacity, ErrConflict, ErrBindingChanged,
	ErrIncompatibleFormat, ErrCorrupt, ErrArchiveLost, ErrHistoryBehind, ErrStartupValidation}

// MissingRecords returns how many records err says the archive lost at
// least: the MissingRecords() of the first error in its chain that has one.
func MissingRecords(err error) (int64, bool) {
	var m interface{ MissingRecords() int64 }
	if errors.As(err, &m) {
		return m.MissingRecords(), true
	}
	return 0, false
}

func isClassified(err error) bool {
	for _, c := range classes {
		if errors.Is(err, c) {
			return true
		}
	}
	return false
}

// errorsJoinUnavailable classifies an unclassified error (a timeout that the
// destination did not wrap) as unavailability.
func errorsJoinUnavailable(err error) error { return errors.Join(ErrUnavailable, err) }
