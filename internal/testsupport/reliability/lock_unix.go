//go:build unix

package reliability

import (
	"os"

	"golang.org/x/sys/unix"
)

// lockFile takes an exclusive lock on f, released when f is closed.
func lockFile(f *os.File) error { return unix.Flock(int(f.Fd()), unix.LOCK_EX) }
