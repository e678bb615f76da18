package pathless

import (
	"errors"
	"io/fs"
	"os"
)

// IsPathError reports whether err's chain holds an *fs.PathError
// (*os.PathError is the same type): the error came from an operation on a
// named file, rather than, say, from a lock another process holds. It is the
// one place outside this package's Error where riffdb looks for the type.
func IsPathError(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe)
}

// PathCause returns the operation and the cause of the first *fs.PathError
// in err's chain (the one errors.As finds) and true, or "", nil and false
// when there is none. The path is what it leaves out.
func PathCause(err error) (op string, cause error, ok bool) {
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		return "", nil, false
	}
	return pe.Op, pe.Err, true
}

// LinkCause returns the operation and the cause of the first *os.LinkError
// in err's chain and true, or "", nil and false when there is none. Both
// paths are what it leaves out.
func LinkCause(err error) (op string, cause error, ok bool) {
	var le *os.LinkError
	if !errors.As(err, &le) {
		return "", nil, false
	}
	return le.Op, le.Err, true
}
