package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/clock"
	"github.com/riffdb/riffdb/internal/pathless"
	"github.com/riffdb/riffdb/primary"
)

// RestoreRequest names what Restore replaces with what.
type RestoreRequest struct {
	// DatabasePath is the database's directory (the configuration's path).
	DatabasePath string
	// BackupRoot is the database's backup_root.
	BackupRoot string
	// Name is the entry under BackupRoot to restore: a backup, or data an
	// earlier restore moved aside (replaced-…).
	Name string
	// ArchiveDirectory is the database's outbox directory, "" if none.
	ArchiveDirectory string
	// Logger receives the steps; nil → zap.NewNop().
	Logger *zap.Logger
	// Clock names the moved-aside data; nil → clock.Real.
	Clock clock.Clock

	// afterStep, when set (tests), is called after every step with its
	// name; an error stops the restore right there, as a crash would:
	// nothing after it runs, no cleanup included.
	afterStep func(step string) error
}

// RestoreResult reports a completed restore.
type RestoreResult struct {
	Name       string // the restored entry
	DatabaseID string // 32 lowercase hex
	// PreviousIncarnation is the history incarnation of the data replaced
	// (0 if there was none).
	PreviousIncarnation uint64
	NewIncarnation      uint64
	// LastCommitSequence is the restored history's last commit sequence.
	LastCommitSequence uint64
	// ReplacedAs is the entry under backup_root that holds the replaced
	// data ("" if there was none).
	ReplacedAs string
}

// The steps of a restore, in order, as afterStep names them. With data to
// replace: leftovers, staging, copied, stamped, complete, aside-manifest,
// swapped, moved-aside. With an empty database directory: …, complete,
// swapped, removed-empty. Without a database directory: …, complete,
// renamed. See doc.go for why a crash after any of them is safe.
const (
	StepLeftovers     = "leftovers"
	StepStaging       = "staging"
	StepCopied        = "copied"
	StepStamped       = "stamped"
	StepComplete      = "complete"
	StepAsideManifest = "aside-manifest"
	StepSwapped       = "swapped"
	StepMovedAside    = "moved-aside"
	StepRemovedEmpty  = "removed-empty"
	StepRenamed       = "renamed"
)

// incompleteMarker is the file that makes a staging directory provably an
// incomplete copy: written first, removed only once the copy is complete and
// stamped.
const incompleteMarker = "riffdb-restore-incomplete"

// stagingInfix joins the database directory's base name and a unique suffix
// into a staging directory's name: ".<base>.restore-<suffix>".
const stagingInfix = ".restore-"

// Restore (offline) replaces the database at req.DatabasePath with the
// entry req.Name under req.BackupRoot and stamps it with a new history
// incarnation: max(the backup's, the replaced data's, every incarnation
// recorded for the database under backup_root by an entry that verifies,
// the archive's highest for it) + 1. The replaced data is moved aside under backup_root
// (replaced-<time>-inc<N>, with a manifest), never deleted.
//
// Before it changes anything it takes the database directory's lock (the
// one a server holds), verifies the backup completely (manifest, every
// file's size and SHA-256, no missing or extra file, and the store's own
// identity, incarnation and last commit against the manifest), checks the
// identity against the data it replaces (or, without data, the archive's
// binding), reads every incarnation of the formula, and checks that the
// moves it will make stay on one filesystem. Refusals: ErrNoRoot,
// ErrRootUnusable, ErrInvalidName, ErrBackupNotFound, ErrDatabaseBusy,
// ErrBackupDamaged, ErrIdentityMismatch, ErrCrossDevice, ErrUnknownState,
// ErrIncarnationExhausted.
// A refused restore changes nothing in the database directory or under
// backup_root (the database directory gets a LOCK file if it had none).
//
// The restore then builds the restored database beside the database path
// and swaps it in with one atomic rename (renameat2 RENAME_EXCHANGE), so a
// crash at any point leaves either the old database or the restored one at
// the path, never a mix and never no database. Running Restore again after
// a crash completes it (see doc.go).
func Restore(ctx context.Context, req RestoreRequest) (RestoreResult, error) {
	r := &restore{req: req, log: req.Logger, clk: clock.Or(req.Clock)}
	if r.log == nil {
		r.log = zap.NewNop()
	}
	defer r.release()
	if err := r.check(ctx); err != nil {
		return RestoreResult{}, err
	}
	return r.apply(ctx)
}

// dataKind is what the database path holds.
type dataKind int

const (
	noDirectory    dataKind = iota // the path does not exist
	emptyDirectory                 // a directory with nothing but LOCK
	storeData                      // a store
)

type leftover struct {
	dir string
	// incomplete: provably nothing to keep (the incomplete marker, or an
	// empty directory); removed.
	incomplete bool
	info       *primary.StoreInfo // nil: unreadable
}

type restore struct {
	req RestoreRequest
	log *zap.Logger
	clk clock.Clock

	path, parent, base, root string
	backupStore              string
	m                        Manifest
	id                       event.DatabaseID
	kind                     dataKind
	old                      primary.StoreInfo
	leftovers                []leftover
	newInc                   uint64

	locks []*pebble.Lock
}

func (r *restore) release() {
	for i := len(r.locks) - 1; i >= 0; i-- {
		_ = r.locks[i].Close()
	}
	r.locks = nil
}

// step ends a step: the test hook, then, before the swap, the context
// (a canceled restore stops before the database changes; once it has
// changed, the restore finishes).
func (r *restore) step(ctx context.Context, name string) error {
	r.log.Info("restore step done", zap.String("step", name))
	if r.req.afterStep != nil {
		if err := r.req.afterStep(name); err != nil {
			return stopped{err}
		}
	}
	switch name {
	case StepSwapped, StepMovedAside, StepRemovedEmpty, StepRenamed:
		return nil
	}
	return context.Cause(ctx)
}

// stopped is an error of the test hook: the restore stops as a crash would.
type stopped struct{ error }

func (s stopped) Unwrap() error { return s.error }

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

// apply makes the changes, step by step.
func (r *restore) apply(ctx context.Context) (RestoreResult, error) {
	res := RestoreResult{Name: r.req.Name, DatabaseID: r.id.String(), NewIncarnation: r.newInc,
		LastCommitSequence: r.m.LastCommitSequence}
	if r.kind == storeData {
		res.PreviousIncarnation = r.old.Incarnation
	}
	staging, err := r.prepare(ctx)
	if err != nil {
		return res, err
	}
	switch r.kind {
	case noDirectory:
		if err := renameNoReplace(staging, r.path); err != nil {
			r.discard(staging, "")
			return res, fmt.Errorf("backup: put the restored database in place: %w", pathless.Error(err))
		}
		if err := syncDir(r.parent); err != nil {
			return res, fmt.Errorf("backup: %w", pathless.Error(err))
		}
		if err := r.step(ctx, StepRenamed); err != nil {
			return res, err
		}
	case emptyDirectory:
		if err := r.swap(ctx, staging, ""); err != nil {
			return res, err
		}
		// staging now names the old, empty directory: nothing to keep.
		if err := os.Remove(filepath.Join(staging, "LOCK")); err != nil && !errors.Is(err, os.ErrNotExist) {
			return res, fmt.Errorf("backup: remove the empty database directory: %w", pathless.Error(err))
		}
		if err := os.Remove(staging); err != nil {
			return res, fmt.Errorf("backup: remove the empty database directory: %w", pathless.Error(err))
		}
		if err := syncDir(r.parent); err != nil {
			return res, fmt.Errorf("backup: %w", pathless.Error(err))
		}
		if err := r.step(ctx, StepRemovedEmpty); err != nil {
			return res, err
		}
	case storeData:
		aside, err := r.asideEntry(ctx, r.path, &r.old, StepAsideManifest)
		if err != nil {
			return res, err
		}
		if err := r.swap(ctx, staging, aside); err != nil {
			return res, err
		}
		if err := r.moveAside(staging, aside); err != nil {
			return res, err
		}
		if err := r.step(ctx, StepMovedAside); err != nil {
			return res, err
		}
		res.ReplacedAs = filepath.Base(aside)
	}
	r.log.Info("restore complete", zap.String("backup", r.req.Name), zap.Uint64("new_incarnation", r.newInc),
		zap.Uint64("last_commit_sequence", res.LastCommitSequence), zap.String("replaced_as", res.ReplacedAs))
	return res, nil
}

// prepare clears the leftovers of earlier restores, then builds the
// restored database in a new staging directory and returns it, complete,
// stamped and locked.
func (r *restore) prepare(ctx context.Context) (_ string, err error) {
	for _, l := range r.leftovers {
		if l.incomplete {
			if err := os.RemoveAll(l.dir); err != nil {
				return "", fmt.Errorf("backup: remove an incomplete copy of an earlier restore: %w", pathless.Error(err))
			}
			r.log.Info("removed an incomplete copy of an interrupted restore", zap.String("entry", filepath.Base(l.dir)))
			continue
		}
		aside, err := r.asideEntry(ctx, l.dir, l.info, "")
		if err != nil {
			return "", err
		}
		if err := r.moveAside(l.dir, aside); err != nil {
			return "", err
		}
		r.log.Info("moved aside a complete copy left by an interrupted restore", zap.String("entry", filepath.Base(aside)))
	}
	if err := syncDir(r.parent); err != nil {
		return "", fmt.Errorf("backup: %w", pathless.Error(err))
	}
	if err := r.step(ctx, StepLeftovers); err != nil {
		return "", err
	}

	staging := filepath.Join(r.parent, "."+r.base+stagingInfix+strconv.FormatInt(r.clk.Now().UnixNano(), 36))
	if err := os.Mkdir(staging, 0o700); err != nil {
		return "", fmt.Errorf("backup: create the staging directory: %w", pathless.Error(err))
	}
	// Until the copy is complete the marker says so; a failed restore
	// removes the staging directory, a crashed one leaves it to the next.
	done := false
	defer func() {
		var stop stopped
		if !done && !errors.As(err, &stop) {
			r.abandon(staging)
		}
	}()
	err = errors.Join(writeFileSync(filepath.Join(staging, incompleteMarker), nil), syncDir(staging), syncDir(r.parent))
	if err != nil {
		return "", fmt.Errorf("backup: create the staging directory: %w", pathless.Error(err))
	}
	if err := r.step(ctx, StepStaging); err != nil {
		return "", err
	}
	for _, f := range r.m.Files {
		if err := context.Cause(ctx); err != nil {
			return "", err
		}
		if err := copyVerified(filepath.Join(r.backupStore, f.Name), filepath.Join(staging, f.Name), f); err != nil {
			return "", err
		}
	}
	if err := syncDir(staging); err != nil {
		return "", fmt.Errorf("backup: %w", pathless.Error(err))
	}
	if err := r.step(ctx, StepCopied); err != nil {
		return "", err
	}
	lock, err := primary.LockDirectory(staging)
	if err != nil {
		return "", fmt.Errorf("backup: lock the staging directory: %w", err)
	}
	r.locks = append(r.locks, lock)
	info, err := primary.Stamp(ctx, staging, lock, r.newInc)
	if err != nil {
		return "", fmt.Errorf("backup: stamp the restored database: %w", err)
	}
	if info.ID != r.id || info.LastCommit != r.m.LastCommitSequence || info.Incarnation != r.newInc {
		return "", fmt.Errorf("backup: the stamped copy holds database %s, incarnation %d, last commit %d", info.ID, info.Incarnation, info.LastCommit)
	}
	if err := r.step(ctx, StepStamped); err != nil {
		return "", err
	}
	if err := os.Remove(filepath.Join(staging, incompleteMarker)); err != nil {
		return "", fmt.Errorf("backup: %w", pathless.Error(err))
	}
	done = true
	if err := syncDir(staging); err != nil {
		return "", fmt.Errorf("backup: %w", pathless.Error(err))
	}
	if err := r.step(ctx, StepComplete); err != nil {
		return "", err
	}
	return staging, nil
}

// abandon removes a staging directory that still holds the incomplete
// marker (after a failure, not a stop of the test hook).
func (r *restore) abandon(staging string) {
	if _, err := os.Lstat(filepath.Join(staging, incompleteMarker)); err != nil {
		return
	}
	if err := os.RemoveAll(staging); err != nil {
		r.log.Warn("removing the staging directory of a failed restore failed; the next restore removes it", zap.Error(pathless.Error(err)))
	}
}

// swap exchanges staging and the database path atomically and makes the
// exchange durable. When the exchange fails (nothing was exchanged: a
// filesystem without RENAME_EXCHANGE, for one) the staging copy and the
// manifest-only entry aside (if not "") are discarded: neither holds
// anything the backup does not.
func (r *restore) swap(ctx context.Context, staging, aside string) error {
	if err := renameExchange(staging, r.path); err != nil {
		r.discard(staging, aside)
		return fmt.Errorf("backup: swap the restored database in: %w", pathless.Error(err))
	}
	if err := syncDir(r.parent); err != nil {
		return fmt.Errorf("backup: %w", pathless.Error(err))
	}
	return r.step(ctx, StepSwapped)
}

// discard removes a complete staging copy that was never put in place, and
// the entry prepared for the data it would have replaced (which holds only
// that data's manifest), after a failed swap.
func (r *restore) discard(staging, aside string) {
	if err := os.RemoveAll(staging); err != nil {
		r.log.Warn("removing the staging directory of a failed restore failed; the next restore moves it aside", zap.Error(pathless.Error(err)))
	}
	if aside != "" {
		if err := errors.Join(os.Remove(filepath.Join(aside, manifestName)), os.Remove(aside)); err != nil {
			r.log.Warn("removing the unused entry for the replaced data failed", zap.Error(pathless.Error(err)))
		}
	}
	_ = errors.Join(syncDir(r.parent), syncDir(r.root))
}

// asideEntry creates the entry under backup_root that will hold the data in
// dir (replaced-<time>-inc<N>, or -unreadable when its information could
// not be read) with its manifest, and returns its path. step, if not "",
// ends with the entry durable.
func (r *restore) asideEntry(ctx context.Context, dir string, info *primary.StoreInfo, step string) (string, error) {
	suffix := "unreadable"
	if info != nil {
		suffix = "inc" + strconv.FormatUint(info.Incarnation, 10)
	}
	base := replacedPrefix + r.clk.Now().UTC().Format(nameTime) + "-" + suffix
	var aside string
	for i := 1; ; i++ {
		aside = filepath.Join(r.root, base)
		if i > 1 {
			aside = filepath.Join(r.root, fmt.Sprintf("%s-%d", base, i))
		}
		err := os.Mkdir(aside, 0o700)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("backup: create the entry for the replaced data: %w", pathless.Error(err))
		}
		break
	}
	if info != nil {
		files, err := hashDir(ctx, dir, false, nil)
		if err != nil {
			return "", fmt.Errorf("backup: checksum the replaced data: %w", pathless.Error(err))
		}
		m := Manifest{Format: manifestFormat, Name: filepath.Base(aside), DatabaseID: info.ID.String(),
			HistoryIncarnation: info.Incarnation, LastCommitSequence: info.LastCommit,
			CreatedAt: r.clk.Now().UTC(), Files: files}
		if err := writeManifest(aside, m); err != nil {
			return "", fmt.Errorf("backup: write the replaced data's manifest: %w", pathless.Error(err))
		}
	}
	if err := syncDir(r.root); err != nil {
		return "", fmt.Errorf("backup: %w", pathless.Error(err))
	}
	if step != "" {
		if err := r.step(ctx, step); err != nil {
			return "", err
		}
	}
	return aside, nil
}

// moveAside renames dir to aside/store and makes it durable.
func (r *restore) moveAside(dir, aside string) error {
	if err := renameNoReplace(dir, filepath.Join(aside, storeDirName)); err != nil {
		return fmt.Errorf("backup: move the replaced data aside: %w", pathless.Error(err))
	}
	if err := errors.Join(syncDir(aside), syncDir(r.parent), syncDir(r.root)); err != nil {
		return fmt.Errorf("backup: %w", pathless.Error(err))
	}
	return nil
}

// copyVerified copies src to a new file dst (0600), synced, checking the
// bytes it copies against f (the backup could change between the
// verification and the copy).
func copyVerified(src, dst string, f File) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("%w: its file %s cannot be read: %w", ErrBackupDamaged, f.Name, pathless.Error(err))
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("backup: copy the backup: %w", pathless.Error(err))
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), in)
	if err = errors.Join(err, out.Sync(), out.Close()); err != nil {
		return fmt.Errorf("backup: copy the backup: %w", pathless.Error(err))
	}
	if n != f.Size || hex.EncodeToString(h.Sum(nil)) != f.SHA256 {
		return fmt.Errorf("%w: its file %s changed while it was copied", ErrBackupDamaged, f.Name)
	}
	return nil
}
