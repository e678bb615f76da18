package primary

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/internal/hygiene/pathless"
	"github.com/riffdb/riffdb/internal/store/existence"
)

// ErrUnprotected is returned by Open when the database directory (the
// database path) can be reached by other users: it has a group or other
// permission bit. The store holds every committed event and the history;
// like the credential store and the outbox, it must be private. Open
// creates a missing directory 0700; an operator-made one must be chmod 0700.
var ErrUnprotected = errors.New("primary: the database directory is accessible to other users")

// openStore locks the database directory and opens its Pebble store,
// deciding from riffdb's own evidence, never Pebble's, whether the store may
// be created:
//
//   - A directory that provably never held a committed write (no creation
//     marker, no table, no non-zero WAL byte; see internal/store/existence) is a
//     new database or an interrupted first start: its leftovers are removed
//     and the store is created (fresh is true).
//   - Any other directory holds a store that riffdb created. It is opened
//     with ErrorIfNotExists, and refused with ErrCorrupt, before Pebble
//     touches anything, when Pebble's own markers are missing: without
//     marker.manifest.* Pebble would create a new store and delete the old
//     tables and logs as obsolete.
//
// The lock is taken first and held across the whole decision, so a second
// process can neither race the creation nor be wiped by it. The caller
// closes the lock after the store.
//
// An existing store is judged on a read-only view first (decide, with the
// creation marker's floor): Pebble's read-only open replays the WAL into
// memory and writes nothing, so a store refused there (a rolled-back
// history, a damaged identity or history record) is left exactly as it was
// found. Only a store that passed is opened read-write, under the same lock:
// the read-write open flushes the replayed WAL and writes a new MANIFEST,
// markers and OPTIONS before the checks could run on it.
func openStore(vfsys vfs.FS, dir string, po *pebble.Options, log *zap.Logger, decide func(*pebble.DB, floorRecord) error) (_ *pebble.DB, _ *pebble.Lock, fresh bool, floor floorRecord, err error) {
	if vfsys == vfs.Default { // in-memory test filesystems have no real modes
		if err := checkPrivate(dir); err != nil {
			return nil, nil, false, floor, err
		}
	}
	lock, err := pebble.LockDirectory(dir, po.FS) // dirlock: LOCK is not touched
	if err != nil {
		if pathless.IsPathError(err) {
			return nil, nil, false, floor, fmt.Errorf("primary: lock the database directory: %w", pathless.Error(err))
		}
		// The lock file exists and another holder has it (fcntl EAGAIN or
		// EACCES, or Pebble's in-process lock table).
		return nil, nil, false, floor, fmt.Errorf("%w: %w", ErrBusy, pathless.Error(err))
	}
	defer func() {
		if err != nil {
			_ = lock.Close()
		}
	}()
	floor, marked, err := readFloor(vfsys, dir)
	if err != nil {
		return nil, nil, false, floor, err
	}
	if !marked {
		if fresh, err = existence.NeverCommitted(vfsys, dir); err != nil {
			return nil, nil, false, floor, fmt.Errorf("primary: read the database directory: %w", pathless.Error(err))
		}
		if !fresh {
			// The store held commits, so riffdb wrote its marker once: the
			// file was lost. The store opens as it is (Pebble's own markers
			// still decide whether it exists), without the marker's checks
			// of the manifest and of the last commit, and Open writes the
			// marker again; an operator should know that a file went missing.
			log.Warn("the database's creation marker was missing; opening the existing store without its checks and writing it again",
				zap.String("file", createdMarkerName))
		}
	}
	if fresh {
		names, err := vfsys.List(dir)
		if err != nil {
			return nil, nil, false, floor, fmt.Errorf("primary: read the database directory: %w", pathless.Error(err))
		}
		if len(names) > 1 { // more than the LOCK just taken
			log.Warn("the database's first start was interrupted; creating it again")
			if err := existence.Reset(vfsys, dir, lockFileName); err != nil {
				return nil, nil, false, floor, fmt.Errorf("primary: restart the interrupted creation: %w", pathless.Error(err))
			}
		}
	} else {
		desc, err := pebble.Peek(dir, vfsys)
		if err != nil {
			return nil, nil, false, floor, fmt.Errorf("%w: reading the storage engine's markers: %w", ErrIncompatible, pathless.Error(err))
		}
		if !desc.Exists {
			return nil, nil, false, floor, fmt.Errorf("%w: the storage engine's manifest marker is missing from a database that was created before; "+
				"it is refused rather than created again (restore the missing file or the data directory from a backup)", ErrCorrupt)
		}
		if err := floor.checkManifest(vfsys, desc); err != nil {
			return nil, nil, false, floor, err
		}
		// Pebble never appends to the manifest it loads: its first version
		// edit after Open (the WAL replay's flush) rotates to a new manifest
		// file (versionSet.logAndApply, vs.manifest == nil after load). So
		// the recorded manifest stays comparable until an Open succeeds far
		// enough to write one, which then has a higher number.
	}
	if !fresh && decide != nil {
		if err := decideOnView(dir, po, lock, floor, decide); err != nil {
			return nil, nil, false, floor, err
		}
	}
	o := *po
	o.Lock = lock
	o.ErrorIfNotExists = !fresh
	store, err := pebble.Open(dir, &o)
	if err != nil {
		return nil, nil, false, floor, classifyOpen(err, dir)
	}
	return store, lock, fresh, floor, nil
}

// decideOnView opens the store in dir read-only with the held lock, runs
// decide on it, and closes it again (the lock stays held).
func decideOnView(dir string, po *pebble.Options, lock *pebble.Lock, floor floorRecord, decide func(*pebble.DB, floorRecord) error) error {
	o := *po
	o.Lock, o.ReadOnly, o.ErrorIfNotExists = lock, true, true
	view, err := pebble.Open(dir, &o)
	if err != nil {
		return classifyOpen(err, dir)
	}
	err = decide(view, floor)
	if cerr := view.Close(); err == nil && cerr != nil {
		err = classifyOpen(cerr, dir)
	}
	return err
}

// checkPrivate refuses a database directory with any group or other
// permission bit (see ErrUnprotected), before anything is written into it.
func checkPrivate(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("primary: read the database directory: %w", pathless.Error(err))
	}
	if perm := fi.Mode().Perm(); fi.IsDir() && perm&0o077 != 0 {
		return fmt.Errorf("%w: the database path's directory has mode %04o; it must be 0700 (only its owner may reach it)", ErrUnprotected, perm)
	}
	return nil
}

// lockFileName is the name of Pebble's lock file in a store directory.
const lockFileName = "LOCK"

// classifyOpen maps a failed pebble.Open of dir to the primary's sentinels.
// Pebble writes paths into its messages; they are cut out (the directory
// becomes "<database>"), while errors.Is still sees Pebble's own error.
func classifyOpen(err error, dir string) error {
	msg := strings.ReplaceAll(pathless.Error(err).Error(), dir, "<database>")
	switch {
	case errors.Is(err, pebble.ErrDBDoesNotExist):
		return fmt.Errorf("%w: the storage engine found no store in a database that was created before", ErrCorrupt)
	case errors.Is(err, pebble.ErrDBNotPristine):
		return fmt.Errorf("%w: the storage engine's format marker is missing from a database that was created before", ErrCorrupt)
	case errors.Is(err, pebble.ErrCorruption), errors.Is(err, fs.ErrNotExist),
		// Pebble's consistency check at open has no sentinel of its own:
		// a table whose size differs from the manifest's is damage.
		strings.Contains(msg, "object size mismatch"):
		return scrubbed{fmt.Errorf("%w: the storage engine refused the store", ErrCorrupt), msg, err}
	}
	return scrubbed{errors.New("primary: open store"), msg, err}
}

// scrubbed is an error whose message is head's followed by msg (a cause's
// text without paths), and that matches both head's and the cause's chains.
type scrubbed struct {
	head  error
	msg   string
	cause error
}

func (e scrubbed) Error() string   { return e.head.Error() + ": " + e.msg }
func (e scrubbed) Unwrap() []error { return []error{e.head, e.cause} }
