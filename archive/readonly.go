package archive

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/store/dirlock"
)

// readOnly is an archive opened read-only under its exclusive lock, the
// common ground of Inspect and OpenReader.
type readOnly struct {
	core
	fs       vfs.FS
	real     bool
	storeDir string
	engine   pebble.FormatMajorVersion
	lock     *pebble.Lock
}

// errNoStoreMarker is openReadOnly's error for a store directory that holds
// files but not Pebble's manifest marker: a created archive that lost it.
var errNoStoreMarker = newError(ErrCorrupt, "the storage engine's markers are missing from the store", nil)

// openReadOnly audits custody (fs == nil: the real filesystem), checks
// existence without opening anything, takes the store's exclusive lock
// without creating or touching LOCK (internal/store/dirlock.LockExisting; a
// missing LOCK is refused, never created) and opens the store read-only
// with that lock: Pebble then writes nothing (no OPTIONS, no marker, no WAL,
// no flush; the WAL is replayed into memory). Errors: ErrNotFound (no
// archive), errNoStoreMarker, ErrIncompatibleFormat, ErrBusy, ErrCorrupt,
// custody and filesystem errors.
func openReadOnly(ctx context.Context, dir string, fs vfs.FS) (*readOnly, error) {
	ro := &readOnly{real: fs == nil}
	var exists bool
	var err error
	if ro.real {
		exists, err = Audit(dir)
		if errors.Is(err, os.ErrNotExist) {
			return nil, ErrNotFound
		}
		if err != nil {
			return nil, mapError("custody audit", err)
		}
		fs = newCustodyFS(dirlock.ReadOnlyFS(vfs.Default))
	} else {
		exists, err = dirHoldsStore(fs, dir)
		if errors.Is(err, ErrUnavailable) {
			return nil, ErrNotFound
		}
		if err != nil {
			return nil, err
		}
	}
	if !exists {
		return nil, ErrNotFound
	}
	ro.fs, ro.storeDir = fs, fs.PathJoin(dir, StoreDirName)
	desc, err := pebble.Peek(ro.storeDir, fs)
	if err != nil {
		return nil, mapError("reading the storage engine format", err)
	}
	if !desc.Exists {
		// An empty store directory is an archive whose creation never
		// started. Anything else without Pebble's manifest marker is a
		// created archive that lost the marker: damage, not absence.
		names, err := fs.List(ro.storeDir)
		if err != nil {
			return nil, mapError("reading the store directory", err)
		}
		if len(names) == 0 || (len(names) == 1 && names[0] == "LOCK") {
			return nil, ErrNotFound
		}
		return nil, errNoStoreMarker
	}
	if err := checkEngineFormat(desc.FormatMajorVersion); err != nil {
		return nil, err
	}
	ro.engine = desc.FormatMajorVersion
	lock, err := pebble.LockDirectory(ro.storeDir, fs)
	if errors.Is(err, os.ErrNotExist) {
		return nil, newError(ErrRefused, "the store has no lock file, and a read-only open never creates one "+
			"(restore it from the archive's copy, or let the server open the archive once)", nil)
	}
	if err != nil {
		return nil, mapError("locking the store", err)
	}
	ro.lock = lock
	ro.st = &engineState{log: zap.NewNop(), clock: time.Now}
	ro.timeout = DefaultTxnTimeout
	o := pebbleOptions(ro.st, fs, ro.real, engineTuning{})
	o.ReadOnly, o.Lock, o.ErrorIfNotExists = true, lock, true
	err = guarded(ctx, ro.st, ro.timeout, "opening the store read-only", false, func() error {
		d, err := pebble.Open(ro.storeDir, o)
		ro.db = d
		return err
	})
	if err != nil {
		ro.close()
		return nil, err
	}
	return ro, nil
}

// close closes the store, then releases the lock.
func (ro *readOnly) close() {
	if ro.db != nil {
		db := ro.db
		_ = guarded(context.Background(), &engineState{log: zap.NewNop(), clock: time.Now}, ro.timeout,
			"closing the store", false, func() error { return db.Close() })
		ro.db = nil
	}
	if ro.lock != nil {
		_ = ro.lock.Close()
		ro.lock = nil
	}
}

// bind reads the metadata, records the binding and computes the archive's
// identity. It returns the metadata even when the store is bound to
// another database; the caller compares.
func (ro *readOnly) bind(ctx context.Context) (meta, error) {
	m, err := ro.readMeta(ctx)
	if errors.Is(err, errNoMarker) {
		return m, newError(ErrIncompatibleFormat, "the store has no archive format marker", nil)
	}
	if err != nil {
		return m, err
	}
	var instance []byte
	if ro.real {
		if instance, err = storeInstance(ro.storeDir); err != nil {
			return m, mapError("identifying the store", err)
		}
	}
	ro.binding, ro.id = m.binding, makeArchiveID(m.binding, instance)
	return m, nil
}

// OpenReader opens the archive in dir for reading only: a resumable,
// validated, paged Reader for reconciliation campaigns over archives of any
// size.
//
// It takes the same exclusive custody as Inspect (custody audit, then the
// store's lock, ErrBusy while a server or another reader holds it), needs no
// quota and never creates or changes anything: a missing archive is
// ErrNotFound, a store without its lock file is refused (ErrRefused) rather
// than given one. It checks the archive's format (ErrIncompatibleFormat)
// and binding (ErrBindingChanged) but does not validate the whole archive
// upfront: each ReadPage validates the records it returns (ErrCorrupt), and
// the caller compares what it read with its own expectations. Cursors it
// returns are bound to this archive; a cursor of another archive, including
// a copy of this one, is ErrInvalidCursor.
//
// Close the Reader to release the snapshot, the store and the lock.
func OpenReader(ctx context.Context, dir string, db event.DatabaseID) (*Reader, error) {
	return openReader(ctx, dir, db, nil)
}

func openReader(ctx context.Context, dir string, database event.DatabaseID, fs vfs.FS) (*Reader, error) {
	ro, err := openReadOnly(ctx, dir, fs)
	if err != nil {
		return nil, err
	}
	m, err := ro.bind(ctx)
	if err == nil && m.binding != database {
		err = fmt.Errorf("%w: archive is bound to database %s", ErrBindingChanged, m.binding)
	}
	if err != nil {
		ro.close()
		return nil, err
	}
	r := ro.newReader()
	if r.err != nil {
		ro.close()
		return nil, r.err
	}
	r.ro = ro
	return r, nil
}
