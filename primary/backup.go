package primary

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/hygiene/pathless"
	"github.com/riffdb/riffdb/internal/hygiene/regularfile"
	"github.com/riffdb/riffdb/internal/store/dirlock"
	"github.com/riffdb/riffdb/internal/store/dirsync"
	"github.com/riffdb/riffdb/internal/store/goexit"
	"github.com/riffdb/riffdb/internal/store/pace"
)

// Backups and restores (package backup) work on copies of a store through
// the functions of this file: Checkpoint makes a copy of a running store,
// ReadStoreInfo reads what a stopped store or a copy says about itself, and
// Stamp turns a copy into a restored database of a new history incarnation.
// They work on the real filesystem only.

// StoreInfo is what a primary store says about itself, read from its own
// records.
type StoreInfo struct {
	ID          event.DatabaseID
	Incarnation uint64
	// LastCommit is the highest commit sequence in the store's history (0
	// when it holds none).
	LastCommit uint64
}

// errNotRealFS is returned by Checkpoint for a database on another
// filesystem than the real one (tests' in-memory stores).
var errNotRealFS = errors.New("primary: a checkpoint needs a database on the real filesystem")

// Checkpoint writes a consistent copy of the open store into dir, which must
// not exist (its parent must). The copy holds every commit applied before
// the call (Pebble's checkpoint after a synced flush of the WAL), and none
// that is applied after it finishes; a commit applied concurrently is either
// wholly in it or not (a commit is one WAL record). The copy may hold a
// commit whose client has not been answered yet: the synced flush made it
// durable in the live store too, so the backup never holds a commit that a
// crash of the live store could lose. Commands keep being
// committed and acknowledged while it runs: Pebble holds its own mutex only
// to pin the current version, and the primary's commit lock is not taken.
//
// Pebble links the copy's tables to the live store's files where it can.
// A copy that shares inodes with the live store is not a backup (damage to
// one file would damage both), so every file that is the live store's own
// is then replaced by a real copy (written, synced, renamed over it). The directory
// gets mode 0700 and its files 0600, an empty LOCK file is added (so that a
// later read-only open creates nothing), and the directory is synced.
//
// limit paces the copying (nil: unpaced), so that a backup leaves the disk
// to the commits sharing it.
func (db *DB) Checkpoint(ctx context.Context, dir string, limit *pace.Limiter) error {
	if db.opts.FS != vfs.Default {
		return errNotRealFS
	}
	done, err := db.enter()
	if err != nil {
		return err
	}
	defer done()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	err = db.guard(func() error { return db.store.Checkpoint(dir, pebble.WithFlushedWAL()) })
	if err != nil {
		return fmt.Errorf("primary: checkpoint: %w", pathless.Error(err))
	}
	if err := finishCopy(ctx, dir, db.opts.Path, limit); err != nil {
		return fmt.Errorf("primary: checkpoint: %w", pathless.Error(err))
	}
	return nil
}

// DiskUsage returns the bytes the open store's files take: the larger of
// the sizes of the regular files in its directory and Pebble's own count
// (Metrics.DiskSpaceUsage: live and obsolete tables and blob files, the
// WALs, the manifest and the options file). Pebble's count alone missed
// most of the WAL being written (half of a store of 16 MB in
// e2e/TestBackupsStopAtTheReserve). A checkpoint holds no more than the
// live files, so a backup uses this as the size of its copy before it
// starts. It lists the directory and stats each file. Errors: ErrClosed;
// a file that vanishes while listed is skipped.
func (db *DB) DiskUsage() (int64, error) {
	done, err := db.enter()
	if err != nil {
		return 0, err
	}
	defer done()
	pebbleCount := int64(min(db.store.Metrics().DiskSpaceUsage(), math.MaxInt64))
	names, err := db.opts.FS.List(db.opts.Path)
	if err != nil {
		return pebbleCount, nil
	}
	var files int64
	for _, name := range names {
		fi, err := db.opts.FS.Stat(db.opts.FS.PathJoin(db.opts.Path, name))
		if err == nil && fi.Mode().IsRegular() {
			files += fi.Size()
		}
	}
	return max(files, pebbleCount), nil
}

// finishCopy makes the checkpoint in dir independent of the live store in
// live, and private: see Checkpoint. A file of the checkpoint that is the
// same file (device and inode) as the live store's file of that name is
// replaced by a copy; Pebble links nothing else, and a live file removed
// meanwhile left the checkpoint's link the only one.
func finishCopy(ctx context.Context, dir, live string, limit *pace.Limiter) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := context.Cause(ctx); err != nil {
			return err
		}
		name := filepath.Join(dir, e.Name())
		fi, err := os.Lstat(name)
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("the checkpoint holds an entry that is not a regular file (%v)", fi.Mode().Type())
		}
		if lfi, err := os.Lstat(filepath.Join(live, e.Name())); err == nil && os.SameFile(fi, lfi) {
			if err := replaceWithCopy(ctx, name, limit); err != nil {
				return err
			}
		}
		// Only after the copy: a mode change on a shared inode would change
		// the live store's file too.
		if err := os.Chmod(name, 0o600); err != nil {
			return err
		}
	}
	lock, err := os.OpenFile(filepath.Join(dir, lockFileName), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := errors.Join(lock.Sync(), lock.Close()); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	return dirsync.Sync(vfs.Default, dir)
}

// replaceWithCopy replaces the file name by a copy of its content with an
// inode of its own: the copy is written beside it, synced, and renamed over
// it (rename replaces only this directory's link).
func replaceWithCopy(ctx context.Context, name string, limit *pace.Limiter) error {
	tmp := name + ".copy"
	if err := copyFile(ctx, name, tmp, limit); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, name)
}

// copyFile copies src into a new file dst (0600), synced, paced by limit.
// src must be a regular file; it is opened without blocking.
func copyFile(ctx context.Context, src, dst string, limit *pace.Limiter) error {
	in, _, err := regularfile.Open(src, regularfile.NoFollow)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = pace.Copy(ctx, out, in, limit)
	return errors.Join(err, out.Sync(), out.Close())
}

// LockDirectory takes the lock of the database directory dir, the one Open
// takes, so that no server opens the database until it is released. It
// creates LOCK when it is missing and never truncates it. ErrBusy: another
// process (or this one) holds it. The directory must exist.
func LockDirectory(dir string) (*pebble.Lock, error) {
	return lockDir(dir, dirlock.FS(vfs.Default), "lock the database directory")
}

// lockDir takes the lock of dir through fs: ErrBusy when another process
// (or this one) holds it; other failures are "primary: "+what, without a
// path.
func lockDir(dir string, fs vfs.FS, what string) (*pebble.Lock, error) {
	lock, err := pebble.LockDirectory(dir, fs)
	if err != nil {
		if pathless.IsPathError(err) {
			return nil, fmt.Errorf("primary: %s: %w", what, pathless.Error(err))
		}
		return nil, fmt.Errorf("%w: %w", ErrBusy, pathless.Error(err))
	}
	return lock, nil
}

// ReadStoreInfo reads the identity, history incarnation and last commit
// sequence of the store in dir (a stopped database, or a copy of one)
// without writing anything: the store is opened read-only (Pebble replays
// its WAL in memory), under lock when it is non-nil (a lock of dir from
// LockDirectory), else under the lock of its existing LOCK file, which is
// neither created nor touched (ErrBusy when it is held). A directory
// without a store is ErrCorrupt; a store this build cannot read is
// ErrIncompatible.
func ReadStoreInfo(ctx context.Context, dir string, lock *pebble.Lock) (StoreInfo, error) {
	if err := context.Cause(ctx); err != nil {
		return StoreInfo{}, err
	}
	if lock == nil {
		l, err := lockExisting(dir)
		if err != nil {
			return StoreInfo{}, err
		}
		defer l.Close()
		lock = l
	}
	var info StoreInfo
	err := withStore(dir, lock, true, func(s *pebble.DB) error {
		var err error
		info, err = readInfo(s)
		return err
	})
	return info, err
}

// Stamp makes the store copy in dir (held under lock, a lock of dir from
// LockDirectory) a restored database of history incarnation incarnation,
// which must be above the copy's own: it writes the incarnation with a
// synced write, closes the store cleanly, and writes the creation marker
// with the store's identity, its last commit sequence and the MANIFEST the
// clean close left (the floor that Open checks). Open then opens the copy
// as the database it is, with Incarnation() == incarnation and a delivery
// count that starts afresh. Running it again with the same incarnation is
// harmless. Every file of the stamped store is 0600 and dir is 0700,
// whatever the process's umask. It returns the stamped store's information.
func Stamp(ctx context.Context, dir string, lock *pebble.Lock, incarnation uint64) (StoreInfo, error) {
	if err := context.Cause(ctx); err != nil {
		return StoreInfo{}, err
	}
	var info StoreInfo
	err := withStore(dir, lock, false, func(s *pebble.DB) error {
		var err error
		if info, err = readInfo(s); err != nil {
			return err
		}
		if incarnation < info.Incarnation {
			return fmt.Errorf("primary: the new history incarnation %d is below the store's %d", incarnation, info.Incarnation)
		}
		if err := s.Set(keyIncarnation, encodeU64(incarnation), pebble.Sync); err != nil {
			return fmt.Errorf("primary: write the history incarnation: %w", err)
		}
		info.Incarnation = incarnation
		return nil
	})
	if err != nil {
		return StoreInfo{}, err
	}
	f := cleanFloor(vfs.Default, dir, floorRecord{ID: info.ID, Last: info.LastCommit})
	if err := writeFloor(vfs.Default, dir, f); err != nil {
		return StoreInfo{}, fmt.Errorf("primary: write the creation marker: %w", pathless.Error(err))
	}
	if err := makePrivate(dir); err != nil {
		return StoreInfo{}, fmt.Errorf("primary: make the stamped store private: %w", pathless.Error(err))
	}
	return info, nil
}

// makePrivate sets every regular file of dir to 0600 and dir to 0700, and
// syncs dir. The storage engine creates its files (OPTIONS, MANIFEST, WAL,
// tables) with the process's umask: a server runs with 077, but a restore
// run from a shell (umask 022) would otherwise leave files others can
// read.
func makePrivate(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if err := os.Chmod(filepath.Join(dir, e.Name()), 0o600); err != nil {
			return err
		}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	return dirsync.Sync(vfs.Default, dir)
}

// withStore opens the store in dir (it must exist: ErrorIfNotExists) with
// lock, runs fn and closes the store. Every call into Pebble runs through
// goexit, with a logger whose Fatalf ends that goroutine, so that a fatal
// storage-engine error is an error here and not the end of the process.
func withStore(dir string, lock *pebble.Lock, readOnly bool, fn func(*pebble.DB) error) error {
	desc, err := pebble.Peek(dir, vfs.Default)
	if err != nil {
		return fmt.Errorf("%w: reading the storage engine's markers: %w", ErrIncompatible, pathless.Error(err))
	}
	if !desc.Exists {
		return fmt.Errorf("%w: the directory holds no store (the storage engine's manifest marker is missing)", ErrCorrupt)
	}
	if desc.FormatMajorVersion > pebble.FormatNewest || desc.FormatMajorVersion < pebble.FormatMinSupported {
		return fmt.Errorf("%w: the store's storage engine format %d is not supported", ErrIncompatible, desc.FormatMajorVersion)
	}
	var corrupt atomic.Pointer[error]
	po := &pebble.Options{
		FS:                 dirlock.FS(vfs.Default),
		FormatMajorVersion: FormatMajorVersion,
		ReadOnly:           readOnly,
		ErrorIfNotExists:   true,
		Lock:               lock,
		Logger:             quietLogger{},
		EventListener: &pebble.EventListener{
			DataCorruption: func(info pebble.DataCorruptionInfo) {
				err := fmt.Errorf("%w: data corruption detected: %w", ErrCorrupt, pathless.Error(info.Details))
				corrupt.CompareAndSwap(nil, &err)
			},
		},
	}
	if readOnly {
		// A read-only open never ratchets the format.
		po.FormatMajorVersion = desc.FormatMajorVersion
	}
	var s *pebble.DB
	o := goexit.Run(func() error {
		var err error
		s, err = pebble.Open(dir, po)
		return err
	})
	if err := outcomeErr(o); err != nil {
		return classifyOpen(err, dir)
	}
	o = goexit.Run(func() error { return fn(s) })
	ferr := outcomeErr(o)
	o = goexit.Run(s.Close)
	cerr := outcomeErr(o)
	switch {
	case corrupt.Load() != nil:
		return *corrupt.Load()
	case ferr != nil:
		return ferr
	case cerr != nil:
		return fmt.Errorf("primary: close the store: %w", pathless.Error(cerr))
	}
	return nil
}

// outcomeErr is the error of a goexit outcome: what fn returned, or an
// error saying it did not return.
func outcomeErr(o goexit.Outcome) error {
	switch {
	case o.Returned:
		return o.Err
	case o.Panic != nil:
		return fmt.Errorf("primary: the storage engine panicked: %v", o.Panic)
	}
	return errors.New("primary: the storage engine met a fatal error")
}

// readInfo reads a store's identity, incarnation and last commit, checking
// its key layout like Open does.
func readInfo(s *pebble.DB) (StoreInfo, error) {
	var info StoreInfo
	get := func(k []byte) ([]byte, error) {
		v, closer, err := s.Get(k)
		if err != nil {
			return nil, err
		}
		out := append([]byte(nil), v...)
		return out, closer.Close()
	}
	v, err := get(keyIdentity)
	if errors.Is(err, pebble.ErrNotFound) {
		return info, fmt.Errorf("%w: the store holds no database identity", ErrCorrupt)
	}
	if err != nil {
		return info, fmt.Errorf("primary: read identity: %w", err)
	}
	if len(v) != 16 {
		return info, fmt.Errorf("%w: database identity", ErrCorrupt)
	}
	copy(info.ID[:], v)
	if v, err = get(keyLayout); err != nil && !errors.Is(err, pebble.ErrNotFound) {
		return info, fmt.Errorf("primary: read key layout: %w", err)
	}
	if l, _ := decodeU64(v); !knownLayout(l) {
		return info, fmt.Errorf("%w: the store's key layout is not version %d or %d", ErrIncompatible, layoutVersion, layoutExtendedIntents)
	}
	if v, err = get(keyIncarnation); err != nil {
		return info, fmt.Errorf("primary: read incarnation: %w", err)
	}
	if info.Incarnation, err = decodeU64(v); err != nil {
		return info, err
	}
	if v, err = get(keyPruned); err != nil {
		return info, fmt.Errorf("primary: read pruned mark: %w", err)
	}
	pm, err := decodePruned(v)
	if err != nil {
		return info, err
	}
	info.LastCommit = pm.First - 1
	it, err := s.NewIter(&pebble.IterOptions{LowerBound: []byte{nsCommit}, UpperBound: prefixEnd(nsCommit)})
	if err != nil {
		return info, err
	}
	if it.Last() {
		if !isHistoryKey(it.Key()) {
			_ = it.Close()
			return info, fmt.Errorf("%w: the last commit has no history record", ErrCorrupt)
		}
		h, err := decodeHistory(it.Value())
		if err != nil {
			_ = it.Close()
			return info, err
		}
		info.LastCommit = h.Seq
	}
	if err := it.Close(); err != nil {
		return info, fmt.Errorf("primary: read history: %w", pathless.Error(err))
	}
	return info, nil
}

// quietLogger is the Pebble logger of the stores withStore opens: nothing
// is printed, and Fatalf ends the calling goroutine (see goexit) instead of
// the process.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(string, ...any) { runtime.Goexit() }
