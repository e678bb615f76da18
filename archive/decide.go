package archive

import (
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/internal/store/existence"
)

// Deciding on a read-only view: why a refused archive is left as found.
//
// Pebble's read-write open changes a store before riffdb has looked at it:
// it replays the WAL and flushes what it read into new tables, deletes the
// replayed logs, writes a new MANIFEST, new markers and a new OPTIONS file.
// An archive refused after that (a cut WAL found by the primary's delivery
// mark, a record that fails validation) would no longer hold what was
// damaged: the operator would investigate a rewritten store, and the bytes
// after a tear that a recovery tool could have read would be gone.
//
// So Open judges an existing store on a read-only view first: under the
// store's lock, Pebble's read-only open replays the WAL into memory and
// writes nothing. Every check that could refuse the store runs there: the
// metadata, format and binding (initMeta), the validation beyond the
// checkpoint or of everything (validate), and the anchors (checkAnchors:
// the floor file, the primary's delivery mark, the primary's history). Only
// a store that passed is opened read-write, with the same lock, which was
// never released in between: nothing can change the store between the two
// views, so the validation is not repeated (the read-write view's
// accounting is compared with the validated one, a few reads). What the
// checks decided to write, the checkpoint and a missing floor file, is
// written then (openPlan).
//
// The cost: one more WAL replay (at most a memtable's worth of records) and
// a second reading of the metadata; the validation itself runs once.

// lockFileName is Pebble's lock file in the store directory.
const lockFileName = "LOCK"

// openPlan is what decide found and the read-write open records.
type openPlan struct {
	// acct is the accounting the read-only view validated.
	acct accounting
	ckpt ckptPlan
	// writeFloor: the floor file is missing and is written.
	writeFloor bool
}

// lockStore takes the store directory's lock through the instance
// filesystem (so that abandoning the instance releases it, fence.go); it
// is ErrBusy while another process or another open of this process holds
// it.
func (s *Store) lockStore() error {
	s.inst = newInstanceFS(s.fs)
	l, err := pebble.LockDirectory(s.storeDir, s.inst)
	if err != nil {
		return mapError("locking the store", err)
	}
	s.lock = l
	return nil
}

// unlock releases the store's lock once no Pebble instance uses it (closed,
// or abandoned and fenced: the lock file was released then, and this is a
// no-op).
func (s *Store) unlock() {
	if s.lock == nil {
		return
	}
	_ = s.lock.Close()
	s.lock = nil
}

// openEngine opens Pebble with o (which carries s.lock) as the store's
// engine. A failed open is fenced and its lock released (a fatal error may
// have ended it midway, fence.go).
func (s *Store) openEngine(ctx context.Context, o *pebble.Options, what string) error {
	err := guarded(ctx, s.st, s.timeout, what, false, func() error {
		db, err := pebble.Open(s.storeDir, o)
		s.db = db
		return err
	})
	if err != nil {
		s.inst.abandon()
		s.db = nil
	}
	return err
}

// decide opens the existing store read-only under the held lock and runs
// every check of Open that could refuse it, writing nothing. It returns
// what the read-write open records, or the refusal.
func (s *Store) decide(ctx context.Context, opts Options) (plan openPlan, err error) {
	rw := s.st
	s.st = &engineState{log: s.log, clock: s.clock}
	o := pebbleOptions(s.st, s.inst, s.realFS, engineTuning{cache: opts.Cache, fileCache: opts.FileCache, memTableSize: opts.MemTableSize})
	o.ReadOnly, o.ErrorIfNotExists, o.Lock = true, true, s.lock
	defer func() { s.st = rw }()
	if err := s.openEngine(ctx, o, "opening the store read-only"); err != nil {
		return plan, err
	}
	defer func() {
		if cerr := s.closeDB(); err == nil && cerr != nil {
			err = cerr
		}
		s.db = nil
	}()
	m, err := s.initMeta(ctx, opts.Database, false)
	if err != nil {
		return plan, err
	}
	if plan.ckpt, err = s.validate(ctx, m); err != nil {
		return plan, err
	}
	if plan.writeFloor, err = s.checkAnchors(ctx, opts); err != nil {
		return plan, err
	}
	plan.acct = m.acct
	return plan, nil
}

// fresh reports whether the existing store directory has no floor file
// (intact or damaged) and provably never held a committed write. It reads
// only.
func (s *Store) fresh() (bool, error) {
	_, _, marked, err := readFloor(s.fs, s.storeDir)
	if err != nil && !errors.Is(err, ErrCorrupt) {
		return false, err
	}
	if marked || err != nil { // a damaged floor file still marks a created store
		return false, nil
	}
	fresh, err := existence.NeverCommitted(s.fs, s.storeDir)
	return fresh, mapError("reading the store directory", err)
}

// neverCommitted reports whether the existing store directory is to be
// created again (fresh). For a store that is not, it checks Pebble's
// markers and format before Pebble opens anything.
func (s *Store) neverCommitted() (bool, error) {
	if fresh, err := s.fresh(); err != nil || fresh {
		return fresh, err
	}
	desc, err := pebble.Peek(s.storeDir, s.fs)
	if err != nil {
		return false, mapError("reading the storage engine format", err)
	}
	if !desc.Exists || desc.FormatMajorVersion == pebble.FormatDefault {
		return false, newError(ErrCorrupt, "the storage engine's markers are missing from an archive that was created before; "+
			"it is refused rather than created again (restore the missing file or the archive from a backup)", nil)
	}
	if err := checkEngineFormat(desc.FormatMajorVersion); err != nil {
		return false, err
	}
	// A damaged cursor key is refused before the engine opens the store
	// (cursorkey.go).
	_, _, err = readCursorKey(s.fs, s.storeDir)
	return false, err
}

// settle completes the read-write open: on a new store it writes the
// metadata, validates (nothing) and writes the floor file; on an existing
// one, which decide accepted, it reads the metadata again, checks that the
// read-write view holds the accounting the read-only view validated, and
// records what decide planned (the checkpoint, a missing floor file).
// Finally it reads the greatest record key.
func (s *Store) settle(ctx context.Context, opts Options, create bool, plan openPlan) error {
	m, err := s.initMeta(ctx, opts.Database, create)
	if err != nil {
		return err
	}
	if create {
		if plan.ckpt, err = s.validate(ctx, m); err != nil {
			return err
		}
		if plan.writeFloor, err = s.checkAnchors(ctx, opts); err != nil {
			return err
		}
	} else if m.acct != plan.acct {
		// Under the held lock nothing changes the store between the two
		// views; a difference means the engine read it differently.
		return fmt.Errorf("%w: the read-write open holds %d records / %d bytes, the read-only view validated %d / %d",
			ErrCorrupt, m.acct.Records, m.acct.EncodedBytes, plan.acct.Records, plan.acct.EncodedBytes)
	}
	if err := plan.ckpt.apply(ctx, s); err != nil {
		return err
	}
	if plan.writeFloor {
		if !create {
			s.log.Warn("the archive's floor file was missing; writing it again from the validated accounting",
				zap.String("file", FloorFileName), zap.Int64("records", s.acct.Records))
		}
		if err := writeFloor(s.fs, s.storeDir, s.binding, s.acct); err != nil {
			return err
		}
	}
	if err := s.ensureCursorKey(create); err != nil {
		return err
	}
	s.last, err = s.lastKey(ctx, "reading the last archive key", recordLower, recordUpper)
	return err
}
