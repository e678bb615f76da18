package backup

import (
	"errors"
	"fmt"
	"syscall"
)

// DefaultReserveBytes is the free space a backup leaves on backup_root's
// filesystem when Options.ReserveBytes is 0: 1 GiB, so that a filesystem
// the database shares with its backups keeps room for its WAL, flushes and
// compactions.
const DefaultReserveBytes = 1 << 30

// SpaceError is the error of a backup refused because it would leave less
// than the reserve free on backup_root's filesystem. It wraps
// ErrInsufficientSpace and names no path.
type SpaceError struct {
	// Needed is the backup's size in bytes: the live store's size when the
	// backup was refused before it started, the copy's when it was refused
	// after the copy was written (AfterCopy).
	Needed int64
	// Free is what the filesystem had free for the server's user when the
	// check ran: before the copy, or with the copy on it (AfterCopy).
	Free int64
	// Reserve is the free space the backup had to leave (0: none).
	Reserve int64
	// AfterCopy reports a refusal after the copy was written: the free
	// space shrank while copying. The copy was removed.
	AfterCopy bool
}

func (e *SpaceError) Error() string {
	if e.AfterCopy {
		return fmt.Sprintf("%v: with the backup's copy of %d bytes written, %d bytes are free, less than the reserve of %d bytes; the copy was removed",
			ErrInsufficientSpace, e.Needed, e.Free, e.Reserve)
	}
	return fmt.Sprintf("%v: the backup needs about %d bytes and %d bytes are free, which would leave less than the reserve of %d bytes",
		ErrInsufficientSpace, e.Needed, e.Free, e.Reserve)
}

// Unwrap returns ErrInsufficientSpace.
func (e *SpaceError) Unwrap() error { return ErrInsufficientSpace }

// reserveOf returns the reserve that opts ask for: 0 selects
// DefaultReserveBytes, a negative value none.
func reserveOf(opts Options) int64 {
	switch {
	case opts.ReserveBytes == 0:
		return DefaultReserveBytes
	case opts.ReserveBytes < 0:
		return 0
	}
	return opts.ReserveBytes
}

// checkSpace refuses a backup of needed bytes that would leave less than
// reserve bytes free on root's filesystem. After the copy (afterCopy),
// needed is already on the filesystem and is not subtracted again.
func checkSpace(free func(string) (int64, error), root string, needed, reserve int64, afterCopy bool) error {
	avail, err := free(root)
	if err != nil {
		return fmt.Errorf("backup: read backup_root's free space: %w", err)
	}
	left := avail
	if !afterCopy {
		left = avail - needed
	}
	if left < reserve {
		return &SpaceError{Needed: needed, Free: avail, Reserve: reserve, AfterCopy: afterCopy}
	}
	return nil
}

// noSpace wraps err, a failure of the backup's writing, with
// ErrInsufficientSpace when the filesystem was full (ENOSPC) or the user's
// quota exhausted (EDQUOT).
func noSpace(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("%w: the filesystem filled up while the backup was written: %w", ErrInsufficientSpace, err)
	}
	return err
}
