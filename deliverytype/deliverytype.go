// Package deliverytype is the vocabulary that the delivery of events into
// the archive is spoken in: what a failure means for the worker (Class),
// the machine-readable reasons health and metrics report (Reason), what an
// accepted archive transaction did (Outcome), and a way to mark an error
// with its class and reason and read them back (Mark, ClassOf, ReasonOf).
//
// It imports the standard library only (internal/testsupport/boundary checks it), so
// that the archive, which marks its errors, and the worker, which reads the
// marks, share one vocabulary without importing each other: a failure kind
// is spelled here once, marked where it happens, and read where it is acted
// on. The model is River's rivertype, and Pebble's errors.Mark for the
// marks.
package deliverytype

import (
	"errors"
	"fmt"
)

// Class is what a delivery failure means for the worker: every error a
// destination returns carries one (Mark), and the worker acts on the class
// alone.
type Class uint8

// The failure classes, as in the design's failure rules.
const (
	// Unmarked is the class of an error that carries no mark. The worker
	// treats it as Unavailable.
	Unmarked Class = iota
	// Unavailable: the destination cannot be reached right now (missing
	// directory, I/O error, timeout, a store made unusable). Health
	// degrades; delivery is retried.
	Unavailable
	// Refused: the destination refuses writes for a known reason
	// (permission denied, read-only filesystem, a custody violation).
	// Delivery pauses before the next claim until a probe succeeds.
	Refused
	// Capacity: the quota or the disk is full. Delivery pauses without
	// spending attempts.
	Capacity
	// Conflict: permanent failure of one event (different bytes under its
	// archive identity, or an invalid record). The event is dead-lettered.
	Conflict
	// Stop: a changed binding, an incompatible format, corrupt content, lost
	// records or a history behind the archive. Delivery stops until an
	// operator investigates and restarts the server.
	Stop
)

// String returns the lowercase name of the class.
func (c Class) String() string {
	switch c {
	case Unavailable:
		return "unavailable"
	case Refused:
		return "refused"
	case Capacity:
		return "capacity"
	case Conflict:
		return "conflict"
	case Stop:
		return "stop"
	}
	return "unmarked"
}

// Reason is a machine-readable health reason: the `reason` of the outbox's
// health, and the reason label of riffdb.outbox.health.reason.
type Reason string

// The reasons. Each failure class has a default reason (Class.Reason); the
// stop class has one per kind of stop.
const (
	ReasonNone                    Reason = ""
	ReasonStarting                Reason = "starting"
	ReasonNoDestination           Reason = "no_destination"
	ReasonStartupValidationFailed Reason = "startup_validation_failed"
	ReasonDestinationUnavailable  Reason = "destination_unavailable"
	ReasonCapacityExhausted       Reason = "capacity_exhausted"
	ReasonIdentityConflict        Reason = "identity_conflict"
	ReasonDestinationRefused      Reason = "destination_refused"
	ReasonBindingChanged          Reason = "binding_changed"
	ReasonIncompatibleFormat      Reason = "incompatible_format"
	ReasonCorruptContent          Reason = "corrupt_content"
	// ReasonArchiveLostRecords: the archive lost events that were
	// completed (the error says how many at least).
	ReasonArchiveLostRecords Reason = "archive_lost_records"
	// ReasonHistoryBehindArchive: the archive holds events beyond the
	// primary's last commit; restore with `riffdb database restore`, never
	// by copying files back.
	ReasonHistoryBehindArchive Reason = "history_behind_archive"
)

// Reasons lists every reason but ReasonNone, in the order metrics report
// them.
var Reasons = []Reason{ReasonStarting, ReasonNoDestination, ReasonStartupValidationFailed,
	ReasonDestinationUnavailable, ReasonCapacityExhausted, ReasonIdentityConflict,
	ReasonDestinationRefused, ReasonBindingChanged, ReasonIncompatibleFormat, ReasonCorruptContent,
	ReasonArchiveLostRecords, ReasonHistoryBehindArchive}

// Reason returns the class's default reason: what health reports for an
// error of the class that names no reason of its own.
func (c Class) Reason() Reason {
	switch c {
	case Refused:
		return ReasonDestinationRefused
	case Capacity:
		return ReasonCapacityExhausted
	case Conflict:
		return ReasonIdentityConflict
	case Stop:
		return ReasonCorruptContent
	}
	return ReasonDestinationUnavailable
}

// Outcome is what one accepted archive transaction did.
type Outcome uint8

// The acceptance outcomes.
const (
	Stored    Outcome = iota + 1 // a new record and its quota charge were written
	Duplicate                    // equal bytes were already archived; nothing was written
)

// String returns the outcome's metric label.
func (o Outcome) String() string {
	switch o {
	case Stored:
		return "stored"
	case Duplicate:
		return "duplicate"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Mark returns err marked with class c and reason r (ReasonNone: the
// class's default reason). The marked error's message is err's, and it
// unwraps to err, so errors.Is and errors.As see through it. A mark made
// later (further out in an error's chain) wins over one made earlier: a
// caller that knows more re-marks. Mark(nil, …) is nil.
func Mark(err error, c Class, r Reason) error {
	if err == nil {
		return nil
	}
	if r == ReasonNone {
		r = c.Reason()
	}
	return &marked{err: err, class: c, reason: r}
}

// New returns a new error with the message msg, marked with c and r: the
// way to declare a sentinel of a class (errors.Is compares by identity).
func New(msg string, c Class, r Reason) error { return Mark(errors.New(msg), c, r) }

// ClassOf returns the class of the outermost mark in err's chain, or
// Unmarked.
func ClassOf(err error) Class {
	var m *marked
	if errors.As(err, &m) {
		return m.class
	}
	return Unmarked
}

// ReasonOf returns the reason of the outermost mark in err's chain, or
// ReasonNone when err carries no mark.
func ReasonOf(err error) Reason {
	var m *marked
	if errors.As(err, &m) {
		return m.reason
	}
	return ReasonNone
}

// marked is an error with its class and reason.
type marked struct {
	err    error
	class  Class
	reason Reason
}

func (m *marked) Error() string { return m.err.Error() }

func (m *marked) Unwrap() error { return m.err }
