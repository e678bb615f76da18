package archive

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/cockroachdb/pebble/v2"

	"github.com/riffdb/riffdb/deliverytype"
)

// Errors returned by the archive. Every error from this package wraps exactly
// one of these sentinels (custody errors additionally wrap ErrCustody), so
// callers decide with errors.Is, or with ClassOf for what delivery does.
// Each sentinel is marked with its delivery class and health reason
// (deliverytype.Mark): the worker reads the marks without knowing the
// archive. Messages never contain a filesystem path or event payload bytes.
// Each is a *sentinel, so that mapError recognises all of them without a
// list to keep.
var (
	// ErrConflict is returned by Accept when the key is already archived with
	// different bytes. It is permanent for that event.
	ErrConflict = newSentinel("archive: different event bytes already archived under this key",
		deliverytype.Conflict, deliverytype.ReasonIdentityConflict)
	// ErrInvalidRecord is returned by Accept and Fit when the record is not a
	// verifiable stored event for the key (a caller error, permanent for that
	// event).
	ErrInvalidRecord = newSentinel("archive: record is not a valid stored event for its key",
		deliverytype.Conflict, deliverytype.ReasonIdentityConflict)
	// ErrCapacity is returned when a record does not fit the remaining quota or
	// the free-space guard of the filesystem refuses the write.
	ErrCapacity = newSentinel("archive: capacity exhausted", deliverytype.Capacity, deliverytype.ReasonCapacityExhausted)
	// ErrUnavailable is returned when the archive cannot be used right now:
	// missing directory, I/O error, timeout, or a store made unusable by a
	// fatal storage-engine error (Close and Open it again after repair).
	ErrUnavailable = newSentinel("archive: unavailable", deliverytype.Unavailable, deliverytype.ReasonDestinationUnavailable)
	// ErrRefused is returned when the filesystem refuses access (permission
	// denied, operation not permitted, read-only file system).
	ErrRefused = newSentinel("archive: access refused", deliverytype.Refused, deliverytype.ReasonDestinationRefused)
	// ErrBindingChanged is returned when the archive is bound to another
	// database identity than the one supplied.
	ErrBindingChanged = newSentinel("archive: bound to a different database", deliverytype.Stop, deliverytype.ReasonBindingChanged)
	// ErrIncompatibleFormat is returned when the archive's format marker or
	// the storage engine's format version is absent, unknown, too old or too
	// new.
	ErrIncompatibleFormat = newSentinel("archive: incompatible format", deliverytype.Stop, deliverytype.ReasonIncompatibleFormat)
	// ErrCorrupt is returned when stored content fails verification: a
	// checksum, a decode, a key outside the binding, accounting that disagrees
	// with the records, or storage-engine corruption.
	ErrCorrupt = newSentinel("archive: corrupt content", deliverytype.Stop, deliverytype.ReasonCorruptContent)
	// ErrLostRecords is returned when the archive holds fewer records than
	// a durable lower bound kept outside its log says it held (see the
	// anchors in floor.go); the error is a *LostRecordsError.
	ErrLostRecords = newSentinel("archive: records lost", deliverytype.Stop, deliverytype.ReasonArchiveLostRecords)
	// ErrHistoryBehind is returned by Open when the archive holds an event
	// of the primary's history incarnation beyond the primary's last
	// commit: the primary lost its tail or was restored by hand.
	ErrHistoryBehind = newSentinel("archive: holds events beyond the primary's history",
		deliverytype.Stop, deliverytype.ReasonHistoryBehindArchive)
	// ErrClosed is returned by every method of a closed Store or Reader.
	ErrClosed = newSentinel("archive: closed", deliverytype.Unavailable, deliverytype.ReasonNone)
	// ErrNotFound is returned by Inspect when there is no archive.
	ErrNotFound = newSentinel("archive: no archive found", deliverytype.Unavailable, deliverytype.ReasonNone)
	// ErrBusy is returned when another process (or another open in this
	// process) holds the archive.
	ErrBusy = newSentinel("archive: held by another process", deliverytype.Unavailable, deliverytype.ReasonNone)
	// ErrInvalidCursor is returned when a cursor (a Reader's Cursor or
	// Inspect's After) is damaged or truncated, has another cursor version,
	// or was issued by another archive (see archiveID).
	ErrInvalidCursor = newSentinel("archive: invalid cursor", deliverytype.Unavailable, deliverytype.ReasonNone)
	// ErrInvalidArgument is returned for out-of-range arguments such as a
	// page bound outside 1..MaxInspectPages or a non-positive quota.
	ErrInvalidArgument = newSentinel("archive: invalid argument", deliverytype.Unavailable, deliverytype.ReasonNone)
)

// sentinel is the type of the sentinels above. Being a type of this package
// (not errors.New's) makes each an archiveError, so mapError recognises it
// with one errors.As and a sentinel added to the block cannot be left out.
// Identity is still by pointer: errors.Is behaves as with errors.New.
type sentinel struct{ msg string }

// newSentinel returns a sentinel marked with its delivery class and reason.
func newSentinel(msg string, c deliverytype.Class, r deliverytype.Reason) error {
	return deliverytype.Mark(&sentinel{msg: msg}, c, r)
}

func (s *sentinel) Error() string { return s.msg }

func (*sentinel) archiveError() {}

// archiveError is implemented by every error type of this package (the
// sentinels, storeError and LostRecordsError): an error holding one in its
// chain was produced here and is already sanitized and classified.
type archiveError interface {
	error
	archiveError()
}

// ClassOf returns what delivery does about err, an error of this package or
// one from below it: its mark (deliverytype.ClassOf) where that decides, and
// otherwise the kind of failure it wraps. The order matters: a conflict or a
// stop wins over the errno that may accompany it; storage-engine corruption
// that reached the caller unwrapped (found while scanning) stops; and ENOSPC
// wins over the unavailability of a store that a full disk made unusable.
// An error of no known kind is Unavailable.
func ClassOf(err error) deliverytype.Class {
	c := deliverytype.ClassOf(err)
	switch {
	case c == deliverytype.Conflict, c == deliverytype.Stop:
		return c
	case isPebbleCorruption(err):
		return deliverytype.Stop
	case c == deliverytype.Capacity, errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return deliverytype.Capacity
	case c == deliverytype.Refused, errors.Is(err, ErrCustody), errors.Is(err, ErrUnsupportedPlatform),
		errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EROFS):
		return deliverytype.Refused
	}
	return deliverytype.Unavailable
}

// Marked returns err marked with ClassOf(err) when its own outermost mark
// says otherwise (an unavailability that wraps ENOSPC, a corruption that
// arrived unwrapped), so that a reader of marks alone acts as ClassOf says.
func Marked(err error) error {
	if err == nil {
		return nil
	}
	if c := ClassOf(err); deliverytype.ClassOf(err) != c {
		return deliverytype.Mark(err, c, deliverytype.ReasonNone)
	}
	return err
}

// storeError is a sanitized error: its message names the operation and, at
// most, an errno; it never carries the storage engine's message (which holds
// paths). It unwraps to its sentinel and its errno so errors.Is works.
type storeError struct {
	sentinel error
	op       string
	errno    syscall.Errno
	cause    error // for logs only; never part of Error() nor Unwrap()
}

func (e *storeError) Error() string {
	var b strings.Builder
	b.WriteString(e.sentinel.Error())
	if e.op != "" {
		b.WriteString(": ")
		b.WriteString(e.op)
	}
	if e.errno != 0 {
		b.WriteString(" (")
		b.WriteString(e.errno.Error())
		b.WriteString(")")
	}
	return b.String()
}

func (*storeError) archiveError() {}

func (e *storeError) Unwrap() []error {
	if e.errno != 0 {
		return []error{e.sentinel, e.errno}
	}
	return []error{e.sentinel}
}

// newError builds a sanitized error with an explicit sentinel.
func newError(sentinel error, op string, cause error) error {
	e := &storeError{sentinel: sentinel, op: op, cause: cause}
	var errno syscall.Errno
	if errors.As(cause, &errno) {
		e.errno = errno
	}
	return e
}

// isPebbleCorruption reports whether err is storage-engine corruption,
// including the two open-time failures Pebble does not mark as corruption
// (a table whose size disagrees with the MANIFEST, a missing table).
func isPebbleCorruption(err error) bool {
	if err == nil {
		return false
	}
	if pebble.IsCorruptionError(err) {
		return true
	}
	if _, ok := err.(*storeError); ok {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "object size mismatch") ||
		strings.Contains(msg, "unknown to the objstorage provider") ||
		strings.Contains(msg, "checksum mismatch") ||
		strings.Contains(msg, "invalid chunk")
}

// mapError turns an error from Pebble or the filesystem into a sanitized
// archive error. Errors already produced by this package pass through.
func mapError(op string, err error) error {
	if err == nil {
		return nil
	}
	var ours archiveError
	if errors.As(err, &ours) {
		return err
	}
	if errors.Is(err, ErrCustody) || errors.Is(err, ErrUnsupportedPlatform) {
		// Custody messages name roles, never paths; keep them for operators.
		return fmt.Errorf("%w: %w", ErrRefused, err)
	}
	switch {
	case isPebbleCorruption(err):
		return newError(ErrCorrupt, op, err)
	case errors.Is(err, syscall.EAGAIN), strings.Contains(err.Error(), "lock held by current process"):
		return newError(ErrBusy, op, err)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return newError(ErrCapacity, op, err)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EROFS):
		return newError(ErrRefused, op, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
	default:
		return newError(ErrUnavailable, op, err)
	}
}
