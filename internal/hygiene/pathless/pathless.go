// Package pathless removes filesystem paths from errors while keeping their
// cause, so that messages meant for operators and API clients never name a
// path (the spec forbids it for inspect and configuration errors, and
// riffdb's logs follow the same rule).
package pathless

import (
	"errors"
	"io/fs"
	"os"
	"strings"
)

// Error returns err with every *fs.PathError, *os.LinkError and
// *os.SyscallError replaced by an error that keeps the operation and the
// cause but not the path. It walks %w chains and errors.Join (or several
// %w) trees, and keeps the words that wrappers added around a cleaned error
// when their message ends with it (fmt.Errorf("ctx: %w", err)); a wrapper
// whose text is built otherwise is replaced by its cleaned cause. The
// result still matches the original chain with errors.Is and errors.As
// (for example fs.ErrNotExist, syscall.ENOSPC). A nil err gives nil; an
// error without paths is returned as it is.
func Error(err error) error {
	if err == nil || keepPaths || !hasPath(err) {
		return err
	}
	switch e := err.(type) {
	case *fs.PathError:
		return stripped{op: e.Op, cause: Error(e.Err), orig: err}
	case *os.LinkError:
		return stripped{op: e.Op, cause: Error(e.Err), orig: err}
	case *os.SyscallError:
		return stripped{op: e.Syscall, cause: Error(e.Err), orig: err}
	case interface{ Unwrap() []error }:
		parts := e.Unwrap()
		out := make([]error, len(parts))
		for i, p := range parts {
			out[i] = Error(p)
		}
		return rewrapped{msg: errors.Join(out...).Error(), orig: err}
	case interface{ Unwrap() error }:
		inner := e.Unwrap()
		cleaned := Error(inner)
		msg, im := err.Error(), inner.Error()
		if strings.HasSuffix(msg, im) && !strings.Contains(msg[:len(msg)-len(im)], string(os.PathSeparator)) {
			return rewrapped{msg: msg[:len(msg)-len(im)] + cleaned.Error(), orig: err}
		}
		return rewrapped{msg: cleaned.Error(), orig: err}
	}
	return err
}

// hasPath reports whether err's tree holds a path-carrying error.
func hasPath(err error) bool {
	var pe *fs.PathError
	var le *os.LinkError
	var se *os.SyscallError
	return errors.As(err, &pe) || errors.As(err, &le) || errors.As(err, &se)
}

// rewrapped is a cleaned message over the original error's chain.
type rewrapped struct {
	msg  string
	orig error
}

func (r rewrapped) Error() string { return r.msg }
func (r rewrapped) Unwrap() error { return r.orig }

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
