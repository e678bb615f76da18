package backup

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/hygiene/pathless"
	"github.com/riffdb/riffdb/primary"
)

// check runs every verification, changing nothing.
func (r *restore) check(ctx context.Context) error {
	req := r.req
	if req.BackupRoot == "" {
		return ErrNoRoot
	}
	if err := checkName(req.Name); err != nil {
		return err
	}
	if req.DatabasePath == "" {
		return errors.New("backup: the database path is required")
	}
	r.path = filepath.Clean(req.DatabasePath)
	r.parent, r.base = filepath.Dir(r.path), filepath.Base(r.path)
	r.root = filepath.Clean(req.BackupRoot)
	if err := checkRoot(r.root); err != nil {
		return err
	}
	if err := r.lockDatabase(); err != nil {
		return err
	}
	if err := r.verifyBackup(ctx); err != nil {
		return err
	}
	if err := r.readOld(ctx); err != nil {
		return err
	}
	if err := r.findLeftovers(ctx); err != nil {
		return err
	}
	archMax, err := r.archiveMax(ctx)
	if err != nil {
		return err
	}
	rootMax, err := maxRecorded(ctx, r.root, r.id, r.log)
	if err != nil {
		return err
	}
	if err := r.checkDevices(); err != nil {
		return err
	}
	r.newInc = max(r.m.HistoryIncarnation, r.old.Incarnation, archMax, rootMax)
	for _, l := range r.leftovers {
		if l.info != nil && l.info.ID == r.id {
			r.newInc = max(r.newInc, l.info.Incarnation)
		}
	}
	if r.newInc == math.MaxUint64 {
		return fmt.Errorf("%w: the highest is %d (the backup's %d, the replaced data's %d, the archive's %d, backup_root's %d)",
			ErrIncarnationExhausted, r.newInc, r.m.HistoryIncarnation, r.old.Incarnation, archMax, rootMax)
	}
	r.newInc++
	r.log.Info("restore verified", zap.String("backup", req.Name), zap.String("database_id", r.id.String()),
		zap.Uint64("backup_incarnation", r.m.HistoryIncarnation), zap.Uint64("previous_incarnation", r.old.Incarnation),
		zap.Uint64("archive_incarnation", archMax), zap.Uint64("recorded_incarnation", rootMax),
		zap.Uint64("new_incarnation", r.newInc))
	return nil
}

// lockDatabase takes the database directory's lock when the directory
// exists.
func (r *restore) lockDatabase() error {
	fi, err := os.Lstat(r.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		r.kind = noDirectory
		if _, err := os.Stat(r.parent); err != nil {
			return fmt.Errorf("backup: the database path's parent directory: %w", pathless.Error(err))
		}
		return nil
	case err != nil:
		return fmt.Errorf("backup: the database path: %w", pathless.Error(err))
	case !fi.IsDir():
		return errors.New("backup: the database path is not a directory")
	}
	r.kind = storeData // until readOld finds it empty
	lock, err := primary.LockDirectory(r.path)
	if errors.Is(err, primary.ErrBusy) {
		return fmt.Errorf("%w: %w", ErrDatabaseBusy, err)
	}
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	r.locks = append(r.locks, lock)
	return nil
}

// verifyBackup reads the manifest and checks every file and the store's
// own information against it.
func (r *restore) verifyBackup(ctx context.Context) error {
	dir := filepath.Join(r.root, r.req.Name)
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return ErrBackupNotFound
	}
	if err != nil {
		return fmt.Errorf("backup: read the backup: %w", pathless.Error(err))
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: the entry is not a directory", ErrBackupNotFound)
	}
	m, err := readManifest(dir)
	if err != nil {
		return err
	}
	r.m = m
	if r.id, err = event.ParseDatabaseID(m.DatabaseID); err != nil {
		return fmt.Errorf("%w: its manifest has an invalid database identity", ErrBackupDamaged)
	}
	r.backupStore = filepath.Join(dir, storeDirName)
	sfi, err := os.Lstat(r.backupStore)
	if err != nil || !sfi.IsDir() {
		return fmt.Errorf("%w: its store directory is missing", ErrBackupDamaged)
	}
	entries, err := os.ReadDir(r.backupStore)
	if err != nil {
		return fmt.Errorf("%w: its store cannot be read: %w", ErrBackupDamaged, pathless.Error(err))
	}
	want := make(map[string]File, len(m.Files))
	for _, f := range m.Files {
		want[f.Name] = f
	}
	for _, e := range entries {
		if _, ok := want[e.Name()]; !ok {
			return fmt.Errorf("%w: its store holds %s, which the manifest does not list", ErrBackupDamaged, e.Name())
		}
	}
	for _, f := range m.Files {
		if err := context.Cause(ctx); err != nil {
			return err
		}
		name := filepath.Join(r.backupStore, f.Name)
		fi, err := os.Lstat(name)
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: its file %s is missing", ErrBackupDamaged, f.Name)
		}
		if err != nil {
			return fmt.Errorf("%w: its file %s cannot be read: %w", ErrBackupDamaged, f.Name, pathless.Error(err))
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%w: its entry %s is not a regular file", ErrBackupDamaged, f.Name)
		}
		got, err := hashFile(ctx, name, nil)
		if err != nil {
			return fmt.Errorf("%w: its file %s cannot be read: %w", ErrBackupDamaged, f.Name, pathless.Error(err))
		}
		if got.Size != f.Size || got.SHA256 != f.SHA256 {
			return fmt.Errorf("%w: its file %s differs from its checksum", ErrBackupDamaged, f.Name)
		}
	}
	if _, ok := want["LOCK"]; !ok {
		// Without it the store cannot be read without creating a file.
		return fmt.Errorf("%w: its store has no LOCK file", ErrBackupDamaged)
	}
	info, err := primary.ReadStoreInfo(ctx, r.backupStore, nil)
	if errors.Is(err, primary.ErrBusy) {
		return fmt.Errorf("%w: the backup's store is held by another process", ErrDatabaseBusy)
	}
	if err != nil {
		return fmt.Errorf("%w: its store cannot be read: %w", ErrBackupDamaged, err)
	}
	if info.ID != r.id || info.Incarnation != m.HistoryIncarnation || info.LastCommit != m.LastCommitSequence {
		return fmt.Errorf("%w: its store holds database %s, incarnation %d, last commit %d; the manifest says %s, %d, %d",
			ErrBackupDamaged, info.ID, info.Incarnation, info.LastCommit, m.DatabaseID, m.HistoryIncarnation, m.LastCommitSequence)
	}
	return nil
}

// readOld reads what the database directory holds.
func (r *restore) readOld(ctx context.Context) error {
	if r.kind == noDirectory {
		return nil
	}
	entries, err := os.ReadDir(r.path)
	if err != nil {
		return fmt.Errorf("backup: read the database directory: %w", pathless.Error(err))
	}
	if len(entries) == 0 || (len(entries) == 1 && entries[0].Name() == "LOCK") {
		r.kind = emptyDirectory
		return nil
	}
	r.kind = storeData
	info, err := primary.ReadStoreInfo(ctx, r.path, r.locks[0])
	if err != nil {
		return fmt.Errorf("%w: the database to replace cannot be read (%w); "+
			"to restore over it, move its directory aside by hand first", ErrUnknownState, err)
	}
	if info.ID != r.id {
		return fmt.Errorf("%w: the backup is of database %s, the database to replace is %s", ErrIdentityMismatch, r.id, info.ID)
	}
	r.old = info
	return nil
}

// findLeftovers finds the staging directories of earlier restores of this
// path that did not finish.
func (r *restore) findLeftovers(ctx context.Context) error {
	entries, err := os.ReadDir(r.parent)
	if err != nil {
		return fmt.Errorf("backup: read the database's parent directory: %w", pathless.Error(err))
	}
	prefix := "." + r.base + stagingInfix
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		l := leftover{dir: filepath.Join(r.parent, e.Name())}
		names, err := os.ReadDir(l.dir)
		if err != nil {
			return fmt.Errorf("backup: read a staging directory of an earlier restore: %w", pathless.Error(err))
		}
		if _, err := os.Lstat(filepath.Join(l.dir, incompleteMarker)); err == nil {
			l.incomplete = true
		} else if len(names) == 0 || (len(names) == 1 && names[0].Name() == "LOCK") {
			// The empty database directory an interrupted restore swapped
			// out: nothing to keep.
			l.incomplete = true
		} else if info, err := primary.ReadStoreInfo(ctx, l.dir, nil); err == nil {
			l.info = &info
		} else if errors.Is(err, primary.ErrBusy) {
			return fmt.Errorf("%w: a staging directory of another restore is held", ErrDatabaseBusy)
		}
		r.leftovers = append(r.leftovers, l)
	}
	return nil
}

// archiveMax returns the highest history incarnation the archive holds
// records of (0: no archive, or no records). The archive is read with its
// read-only reader, under its lock, changing nothing, with one reverse seek
// (records of one database sort by incarnation, so the last is the
// highest): a restore costs the same whatever the archive's size.
func (r *restore) archiveMax(ctx context.Context) (uint64, error) {
	if r.req.ArchiveDirectory == "" {
		return 0, nil
	}
	rd, err := archive.OpenReader(ctx, r.req.ArchiveDirectory, r.id)
	switch {
	case errors.Is(err, archive.ErrNotFound):
		return 0, nil
	case errors.Is(err, archive.ErrBindingChanged):
		return 0, fmt.Errorf("%w: the archive is bound to another database than the backup's %s", ErrIdentityMismatch, r.id)
	case errors.Is(err, archive.ErrBusy):
		return 0, fmt.Errorf("%w: %w", ErrDatabaseBusy, err)
	case err != nil:
		return 0, fmt.Errorf("%w: the archive cannot be read: %w", ErrUnknownState, err)
	}
	defer rd.Close()
	highest, _, err := rd.HighestIncarnation(ctx)
	if err != nil {
		return 0, fmt.Errorf("%w: the archive cannot be read: %w", ErrUnknownState, err)
	}
	return highest, nil
}

// maxRecorded returns the highest incarnation that an entry under root
// (backups, moved-aside data, partial entries) records for database id and
// that verifies (recordedIncarnation says how, and why that strength). An
// entry that does not verify is logged and left out: it cannot raise the
// incarnation.
func maxRecorded(ctx context.Context, root string, id event.DatabaseID, log *zap.Logger) (uint64, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return 0, fmt.Errorf("backup: read backup_root: %w", pathless.Error(err))
	}
	var highest uint64
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if err := context.Cause(ctx); err != nil {
			return 0, err
		}
		inc, err := recordedIncarnation(ctx, filepath.Join(root, e.Name()), id)
		switch {
		case err == nil:
			highest = max(highest, inc)
		case errors.Is(err, errNotRecorded):
		case errors.Is(err, ErrDatabaseBusy):
			return 0, err
		default:
			log.Warn("an entry under backup_root does not verify; its incarnation is not counted",
				zap.String("entry", e.Name()), zap.Error(err))
		}
	}
	return highest, nil
}

// checkDevices refuses when a rename the restore will make would cross
// filesystems: data to move aside (the database's, or a leftover's) must be
// on backup_root's filesystem, and the database path on its parent's.
func (r *restore) checkDevices() error {
	parent, err := device(r.parent)
	if err != nil {
		return fmt.Errorf("backup: %w", pathless.Error(err))
	}
	if r.kind != noDirectory {
		d, err := device(r.path)
		if err != nil {
			return fmt.Errorf("backup: %w", pathless.Error(err))
		}
		if d != parent {
			return fmt.Errorf("%w: the database directory is a mount point, so it cannot be replaced by a rename", ErrCrossDevice)
		}
	}
	aside := r.kind == storeData
	for _, l := range r.leftovers {
		aside = aside || !l.incomplete
	}
	if !aside {
		return nil
	}
	root, err := device(r.root)
	if err != nil {
		return fmt.Errorf("backup: %w", pathless.Error(err))
	}
	if root != parent {
		return fmt.Errorf("%w: the replaced data could not be moved aside under backup_root by a rename", ErrCrossDevice)
	}
	return nil
}
