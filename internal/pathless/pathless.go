// Package pathless removes filesystem paths from errors while keeping their
// cause, so that messages meant for operators and API clients never name a
// path (the spec forbids it for inspect and configuration errors, and
// riffdb's logs follow the same rule).
package pathless

import (
	"errors"
	"io/fs"
	"os"
)

// Error returns err with every *fs.PathError, *os.LinkError and
// *os.SyscallError replaced by an error that keeps the operation and the
// cause but not the path. It looks through errors.Join and through %w
// wrapping chains of a single error; the result still matches the original
// causes with errors.Is (for example fs.ErrNotExist, syscall.ENOSPC). A nil
// err gives nil.
func Error(err error) error {
	if err == nil {
		return nil
	}
	var pe *fs.PathError
	var le *os.LinkError
	var se *os.SyscallError
	switch {
	case errors.As(err, &pe):
		return stripped{op: pe.Op, cause: Error(pe.Err), orig: err}
	case errors.As(err, &le):
		return stripped{op: le.Op, cause: Error(le.Err), orig: err}
	case errors.As(err, &se):
		return stripped{op: se.Syscall, cause: Error(se.Err), orig: err}
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		parts := j.Unwrap()
		out := make([]error, len(parts))
		for i, p := range parts {
			out[i] = Error(p)
		}
		return errors.Join(out...)
	}
	return err
}

// stripped prints "op: cause" for the innermost path-carrying error. The
// context that wrapped it above is dropped from the message (it was built
// around the path), but errors.Is still sees the original chain.
type stripped struct {
	op    string
	cause error
	orig  error
}

func (s stripped) Error() string {
	if s.cause == nil {
		return s.op
	}
	return s.op + ": " + s.cause.Error()
}

func (s stripped) Unwrap() []error { return []error{s.cause, s.orig} }
