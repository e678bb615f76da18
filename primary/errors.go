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
	// ErrInvalidInput is returned by Execute when the input does not match the
	// command's declared input; it wraps contract.ErrInvalidInput.
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
)
