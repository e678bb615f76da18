package primary

import (
	"errors"
	"fmt"

	"github.com/riffdb/riffdb/primary/contract"
)

// Errors returned by the primary.
var (
	// ErrUnknownCommand is returned by Execute for a command the contract does not define.
	ErrUnknownCommand = errors.New("primary: unknown command")
	// ErrInvalidInput is matched by the *InputError Execute returns when the
	// input or the idempotency key is refused; it wraps
	// contract.ErrInvalidInput.
	ErrInvalidInput = fmt.Errorf("primary: %w", contract.ErrInvalidInput)
	// ErrIdempotencyConflict is returned by Execute when an idempotency key
	// was already used with a different command or input.
	ErrIdempotencyConflict = errors.New("primary: idempotency key reused with different input")
	// ErrClosed is returned by every operation after Close.
	ErrClosed = errors.New("primary: closed")
	// ErrFailed is returned once the store has failed (a WAL write or sync
	// error, or detected corruption): durability can no longer be promised
	// and the server must stop.
	ErrFailed = errors.New("primary: store failed")
	// ErrConflict is returned by an intent transition when the stored state
	// differs from the given prior state (or the intent no longer exists).
	ErrConflict = errors.New("primary: intent state conflict")
	// ErrIncompatible is returned by Open for a store this build cannot read.
	ErrIncompatible = errors.New("primary: incompatible store")
	// ErrNotFound is returned by LoadEvent for an event that is not stored.
	ErrNotFound = errors.New("primary: event not found")
	// ErrCorrupt is returned when a record read back from the store is not a
	// well-formed encoding. The store cannot be trusted past it.
	ErrCorrupt = errors.New("primary: corrupt record")
	// ErrBusy is returned by Open when another process holds the store's
	// lock (a second server on the same data directory).
	ErrBusy = errors.New("primary: database is held by another process")
	// ErrStorageFull is returned by Open when the filesystem holding the
	// store (or the user's quota on it) is full: the storage engine could
	// not write what opening the store needs (the flush of the replayed
	// log, a new manifest or log, the identity of a new database) within
	// Options.StorageFullWait. Nothing acknowledged is lost; the next
	// start, with space freed, opens the store.
	ErrStorageFull = errors.New("primary: the database's filesystem is full")
)

// InputError is the error Execute returns for a request it refuses before
// committing anything: input the command's plan refuses, an idempotency key
// that is too long or not valid UTF-8, or events over the size limits. It
// matches ErrInvalidInput (and so contract.ErrInvalidInput) with errors.Is.
type InputError struct {
	// Detail is one sentence for the client that names the field at fault
	// and never quotes its value, such as
	// `input field "amount_cents" must be an integer`.
	Detail string
	err    error // the contract's *InputError, when it found the fault
}

// Error returns the detail under one prefix.
func (e *InputError) Error() string { return "primary: invalid input: " + e.Detail }

// Is reports whether target is ErrInvalidInput or contract.ErrInvalidInput.
func (e *InputError) Is(target error) bool {
	return target == ErrInvalidInput || target == contract.ErrInvalidInput
}

// Unwrap returns the contract's error, or nil.
func (e *InputError) Unwrap() error { return e.err }

// inputError wraps an error of the contract's Plan.Events.
func inputError(err error) *InputError {
	var ce *contract.InputError
	if errors.As(err, &ce) {
		return &InputError{Detail: ce.Detail(), err: ce}
	}
	return &InputError{Detail: "input is not acceptable", err: err}
}
