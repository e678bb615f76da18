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
)

// MaxInspectPages is the largest page bound Inspect accepts.
const MaxInspectPages = 256

// Integrity verdicts of Inspect.
const (
	// IntegrityVerified: the complete scan verified every record and matched
	// the durable accounting, and the storage engine's level check passed.
	IntegrityVerified = "verified"
	// IntegrityIncomplete: the page bound ended before the scan did.
	IntegrityIncomplete = "incomplete"
	// IntegrityMismatch: the complete scan disagrees with the accounting.
	IntegrityMismatch = "mismatch"
	// IntegrityCorrupt: a checksum, decode or storage-engine corruption.
	IntegrityCorrupt = "corrupt"
)

// InspectReport is the result of an offline inspection.
type InspectReport struct {
	// Format names the archive format and the storage-engine format.
	Format string
	// DatabaseBinding is the bound database identity (32 hex characters).
	DatabaseBinding string
	// RecordCount and EncodedBytes are the durable accounting.
	RecordCount, EncodedBytes int64
	// ScannedRecords and ScannedBytes are what the bounded scan verified.
	ScannedRecords, ScannedBytes int64
	// AllocatedBytes is the physical space of the store's files (-1 when it
	// could not be measured).
	AllocatedBytes int64
	// PagesExamined counts the pages read, including a failing one.
	PagesExamined int
	// Integrity is one of the Integrity* constants.
	Integrity string
	// MissingRecords, with Integrity "mismatch", is how many records at
	// least the archive lost: its accounting is below the floor written at
	// its last clean shutdown (floor.go).
	MissingRecords int64
}

// InspectOptions configure Inspect.
type InspectOptions struct {
	// MaxPages bounds the scan to at most MaxPages pages of at most
	// MaxPageRecords records and MaxPageBytes. It must be in
	// 1..MaxInspectPages (ErrInvalidArgument otherwise).
	MaxPages int
	// Progress, when set, is called after every page Inspect examines (for a
	// progress line on long inspections). It runs on the calling goroutine
	// and must not block.
	Progress func(pages int, records int64)
}

// Inspect verifies the archive in dir offline, in at most opts.MaxPages
// pages (1..MaxInspectPages) of at most MaxPageRecords records and
// MaxPageBytes.
//
// It refuses a missing archive (ErrNotFound) and never creates anything: it
// audits custody, checks existence without opening, then takes the store's
// exclusive lock (ErrBusy while a server holds it) and opens it read-only
// with that lock. It refuses another binding (ErrBindingChanged) and an
// incompatible format. Integrity is "verified" only when the complete scan
// verified every record, matched the durable accounting and the level check
// passed; "incomplete" when the bound ended first; "mismatch" when the
// complete scan disagrees with the accounting; "corrupt" on checksum, decode
// or storage-engine corruption (the report is returned with a nil error in
// the last three cases). Errors contain no paths and no payloads.
func Inspect(ctx context.Context, dir string, db event.DatabaseID, opts InspectOptions) (InspectReport, error) {
	return inspect(ctx, dir, db, nil, opts)
}

// inspect is Inspect with a filesystem seam: fs == nil is the real
// filesystem with the custody audit.
func inspect(ctx context.Context, dir string, database event.DatabaseID, fs vfs.FS, opts InspectOptions) (InspectReport, error) {
	maxPages := opts.MaxPages
	rep := InspectReport{AllocatedBytes: -1}
	if maxPages < 1 || maxPages > MaxInspectPages {
		return rep, fmt.Errorf("%w: max pages must be 1..%d", ErrInvalidArgument, MaxInspectPages)
	}
	real := fs == nil
	var exists bool
	var err error
	if real {
		exists, err = Audit(dir)
		if errors.Is(err, os.ErrNotExist) {
			return rep, ErrNotFound
		}
		if err != nil {
			return rep, mapError("custody audit", err)
		}
		fs = newCustodyFS(vfs.Default)
	} else {
		exists, err = dirHoldsStore(fs, dir)
		if errors.Is(err, ErrUnavailable) {
			return rep, ErrNotFound
		}
		if err != nil {
			return rep, err
		}
	}
	if !exists {
		return rep, ErrNotFound
	}
	storeDir := fs.PathJoin(dir, StoreDirName)
	desc, err := pebble.Peek(storeDir, fs)
	if err != nil {
		return rep, mapError("reading the storage engine format", err)
	}
	if !desc.Exists {
		// An empty store directory is an archive whose creation never
		// started. Anything else without Pebble's manifest marker is a
		// created archive that lost the marker: damage, not absence.
		names, err := fs.List(storeDir)
		if err != nil {
			return rep, mapError("reading the store directory", err)
		}
		if len(names) == 0 || (len(names) == 1 && names[0] == "LOCK") {
			return rep, ErrNotFound
		}
		rep.Integrity = IntegrityCorrupt
		return rep, nil
	}
	if err := checkEngineFormat(desc.FormatMajorVersion); err != nil {
		return rep, err
	}
	lock, err := pebble.LockDirectory(storeDir, fs)
	if err != nil {
		return rep, mapError("locking the store", err)
	}
	defer lock.Close() // after the database below is closed

	st := &engineState{log: zap.NewNop(), clock: time.Now}
	c := &core{st: st, timeout: DefaultTxnTimeout, progress: opts.Progress}
	o := pebbleOptions(st, fs, real)
	o.ReadOnly, o.Lock, o.ErrorIfNotExists = true, lock, true
	err = guarded(ctx, st, c.timeout, "opening the store read-only", false, func() error {
		d, err := pebble.Open(storeDir, o)
		c.db = d
		return err
	})
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			rep.Integrity = IntegrityCorrupt
			return rep, nil
		}
		return rep, err
	}
	defer func() {
		_ = guarded(context.Background(), &engineState{log: zap.NewNop(), clock: time.Now}, c.timeout,
			"closing the store", false, func() error { return c.db.Close() })
	}()
	if n, err := storeAllocated(fs, real, storeDir); err == nil {
		rep.AllocatedBytes = n
	}

	m, err := c.readMeta(ctx)
	switch {
	case errors.Is(err, errNoMarker):
		return rep, newError(ErrIncompatibleFormat, "the store has no archive format marker", nil)
	case errors.Is(err, ErrCorrupt):
		rep.Integrity = IntegrityCorrupt
		return rep, nil
	case err != nil:
		return rep, err
	}
	rep.Format = fmt.Sprintf("riffarch/%d pebble/%d", m.version, desc.FormatMajorVersion)
	rep.DatabaseBinding = m.binding.String()
	rep.RecordCount, rep.EncodedBytes = m.acct.Records, m.acct.EncodedBytes
	if m.binding != database {
		return rep, fmt.Errorf("%w: archive is bound to database %s", ErrBindingChanged, m.binding)
	}
	c.binding = m.binding

	// The floor file is a lower bound of the accounting kept outside the
	// log (floor.go): an archive below it lost records to a truncated or
	// replaced log, however consistent it is with itself.
	var lost *LostRecordsError
	fid, floor, haveFloor, floorErr := readFloor(fs, storeDir)
	if floorErr == nil && haveFloor {
		if fid != m.binding {
			floorErr = newError(ErrCorrupt, "the archive's floor file names another database", nil)
		} else if ferr := checkFloor(m.acct, floor.Records, anchorFloorFile); ferr != nil {
			lost = ferr.(*LostRecordsError)
		}
	}
	if floorErr != nil && !errors.Is(floorErr, ErrCorrupt) {
		return rep, floorErr
	}

	t, err := c.scan(ctx, maxPages)
	rep.PagesExamined, rep.ScannedRecords, rep.ScannedBytes = t.pages, t.records, t.bytes
	if err == nil && t.complete {
		err = c.checkMetaKeys(ctx)
		if err == nil {
			err = guarded(ctx, st, c.timeout, "checking levels", false, func() error {
				return c.db.CheckLevels(&pebble.CheckLevelsStats{})
			})
		}
	}
	switch {
	case errors.Is(err, ErrCorrupt):
		rep.Integrity = IntegrityCorrupt
		return rep, nil
	case err != nil:
		return rep, err
	case !t.complete:
		rep.Integrity = IntegrityIncomplete
	case t.records != m.acct.Records || t.bytes != m.acct.EncodedBytes:
		rep.Integrity = IntegrityMismatch
	case floorErr != nil:
		rep.Integrity = IntegrityCorrupt
	case lost != nil:
		rep.Integrity, rep.MissingRecords = IntegrityMismatch, lost.Missing
	default:
		rep.Integrity = IntegrityVerified
	}
	return rep, nil
}
