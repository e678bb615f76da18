package backup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/hygiene/pathless"
	"github.com/riffdb/riffdb/internal/hygiene/regularfile"
	"github.com/riffdb/riffdb/internal/process/clock"
	"github.com/riffdb/riffdb/internal/store/pace"
	"github.com/riffdb/riffdb/primary"
)

// Options configures Create. The zero value selects the defaults.
type Options struct {
	Logger *zap.Logger // nil → zap.NewNop()
	Clock  clock.Clock // nil → clock.Real; names the backup and dates it
	// BytesPerSecond paces the backup's copying and its checksumming, each
	// on its own, so that commands sharing the disk and the CPU keep their
	// throughput: 0 means DefaultBytesPerSecond, a negative value unpaced.
	BytesPerSecond int64
	// Keep is how many backups of the database Create keeps: once a new
	// backup is complete and durable, the oldest beyond Keep are removed
	// (see prune). 0 means DefaultKeep, a negative value keeps every
	// backup.
	Keep int
	// ReserveBytes is the free space, in bytes, that a backup must leave on
	// backup_root's filesystem: 0 means DefaultReserveBytes, a negative
	// value no reserve (a backup that would not fit is still refused).
	ReserveBytes int64

	// freeSpace is freeBytes; tests replace it.
	freeSpace func(dir string) (int64, error)
}

// DefaultBytesPerSecond is the pace of a backup's copying and of its
// checksumming when Options.BytesPerSecond is 0 (see docs/benchmarks.md for
// the commit throughput it leaves).
const DefaultBytesPerSecond = 64 << 20

// Create writes an online, consistent backup of db under root and returns
// its manifest. Commands keep being acknowledged while it runs: the store's
// checkpoint holds no primary lock, and the copying and hashing that follow
// work on the copy alone.
//
// The backup is written as root/<NAME>.partial (with a marker file written
// first, proving it is ours) and renamed to root/<NAME> only once its
// manifest is durable, so a crash never leaves a directory that looks like a
// backup; the next Create removes such leftovers of this database. One
// backup per database at a time is the caller's job. NAME is
// "backup-<UTC time, microseconds>Z", sortable; a suffix "-N" is added in
// the unlikely case that the name is taken.
//
// Free space: before it starts, Create refuses a backup that would leave
// less than the reserve (Options.ReserveBytes) free on root's filesystem,
// taking the live store's size (primary.DB.DiskUsage) as the copy's; once
// the copy is written it checks again, with the copy on the filesystem,
// since the free space may have shrunk meanwhile, and discards the copy if
// the reserve is no longer there.
//
// Retention: once the new backup is complete and durable, Create removes
// this database's oldest backups beyond Options.Keep (see prune) and
// reports their names in the returned Manifest's Removed. A backup that
// fails removes nothing.
//
// Errors: ErrNoRoot (root == ""), ErrRootUnusable (see checkRoot),
// ErrInsufficientSpace (a *SpaceError when refused by the reserve),
// primary.ErrClosed / ErrFailed from the database, others wrapped, without
// paths. A failed backup leaves nothing behind.
func Create(ctx context.Context, db *primary.DB, root string, opts Options) (Manifest, error) {
	if err := checkRoot(root); err != nil {
		return Manifest{}, err
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	clk := clock.Or(opts.Clock)
	free := opts.freeSpace
	if free == nil {
		free = freeBytes
	}
	reserveBytes := reserveOf(opts)
	id := db.Identity()
	removePartials(root, id, log)
	estimate, err := db.DiskUsage()
	if err != nil {
		return Manifest{}, fmt.Errorf("backup: %w", err)
	}
	if err := checkSpace(free, root, estimate, reserveBytes, false); err != nil {
		return Manifest{}, err
	}
	now := clk.Now().UTC()
	name, partial, err := reserve(root, backupPrefix+now.Format(nameTime))
	if err != nil {
		return Manifest{}, fmt.Errorf("backup: create the backup directory: %w", pathless.Error(err))
	}
	kept := false
	defer func() {
		if !kept {
			if err := os.RemoveAll(partial); err != nil {
				log.Warn("removing a failed backup's partial copy failed", zap.Error(pathless.Error(err)))
			}
			_ = syncDir(root)
		}
	}()
	if err := writeFileSync(filepath.Join(partial, partialMarker), []byte(id.String()+"\n")); err != nil {
		return Manifest{}, fmt.Errorf("backup: create the backup directory: %w", pathless.Error(err))
	}
	if err := errors.Join(syncDir(partial), syncDir(root)); err != nil {
		return Manifest{}, fmt.Errorf("backup: create the backup directory: %w", pathless.Error(err))
	}
	store := filepath.Join(partial, storeDirName)
	rate := cmp.Or(opts.BytesPerSecond, DefaultBytesPerSecond)
	if err := db.Checkpoint(ctx, store, pace.New(max(rate, 0))); err != nil {
		return Manifest{}, fmt.Errorf("backup: %w", noSpace(err))
	}
	info, err := primary.ReadStoreInfo(ctx, store, nil)
	if err != nil {
		return Manifest{}, fmt.Errorf("backup: read the copy: %w", err)
	}
	if info.ID != id {
		return Manifest{}, fmt.Errorf("backup: the copy holds database %s, not %s", info.ID, id)
	}
	files, err := hashDir(ctx, store, true, pace.New(max(rate, 0)))
	if err != nil {
		return Manifest{}, fmt.Errorf("backup: checksum the copy: %w", pathless.Error(err))
	}
	m := Manifest{
		Format: manifestFormat, Name: name, DatabaseID: id.String(),
		HistoryIncarnation: info.Incarnation, LastCommitSequence: info.LastCommit,
		CreatedAt: now, Files: files,
	}
	if err := writeManifest(partial, m); err != nil {
		return Manifest{}, fmt.Errorf("backup: write the manifest: %w", noSpace(pathless.Error(err)))
	}
	var size int64
	for _, f := range files {
		size += f.Size
	}
	if err := checkSpace(free, root, size, reserveBytes, true); err != nil {
		return Manifest{}, err
	}
	if err := renameNoReplace(partial, filepath.Join(root, name)); err != nil {
		return Manifest{}, fmt.Errorf("backup: complete the backup: %w", pathless.Error(err))
	}
	kept = true
	if err := syncDir(root); err != nil {
		return Manifest{}, fmt.Errorf("backup: complete the backup: %w", pathless.Error(err))
	}
	log.Info("backup written", zap.String("backup", name), zap.Uint64("history_incarnation", m.HistoryIncarnation),
		zap.Uint64("last_commit_sequence", m.LastCommitSequence), zap.Int("files", len(files)), zap.Int64("bytes", size))
	m.Removed = prune(root, id, keepOf(opts), name, log)
	return m, nil
}

// reserve creates root/<name>.partial (0700) for the first of name, name-2,
// name-3 … that is free both as a partial and as a final entry.
func reserve(root, base string) (name, partial string, err error) {
	for i := 1; ; i++ {
		name = base
		if i > 1 {
			name = fmt.Sprintf("%s-%d", base, i)
		}
		if _, err := os.Lstat(filepath.Join(root, name)); err == nil {
			continue
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", "", err
		}
		partial = filepath.Join(root, name+partialSuffix)
		err := os.Mkdir(partial, 0o700)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		return name, partial, err
	}
}

// removePartials removes the partial copies that earlier backups of
// database id left when they crashed: entries named *.partial whose marker
// names id. Anything else is left alone, a marker that is not a regular
// file of at most maxMarker bytes included (it is opened without blocking).
func removePartials(root string, id event.DatabaseID, log *zap.Logger) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasSuffix(e.Name(), partialSuffix) {
			continue
		}
		dir := filepath.Join(root, e.Name())
		b, _, err := regularfile.Read(filepath.Join(dir, partialMarker), maxMarker, regularfile.NoFollow)
		if err != nil || strings.TrimSpace(string(b)) != id.String() {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			log.Warn("removing an interrupted backup's partial copy failed", zap.String("entry", e.Name()), zap.Error(pathless.Error(err)))
			continue
		}
		log.Info("removed an interrupted backup's partial copy", zap.String("entry", e.Name()))
	}
	_ = syncDir(root)
}

// List returns the backups of database id found under root, oldest first
// (by creation time, then name). Only entries named backup-… are backups:
// partial backups (….partial) and moved-aside data (replaced-…) are not
// listed. A backup entry whose manifest cannot be read is listed with
// Damaged set and only its Name (it cannot be attributed to a database, and
// hiding it would hide the damage); entries of other databases are left
// out. List does not verify checksums: Restore does.
func List(root string, id event.DatabaseID) ([]Manifest, error) {
	if err := checkRoot(root); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("backup: read backup_root: %w", pathless.Error(err))
	}
	out := []Manifest{}
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, backupPrefix) || strings.HasSuffix(name, partialSuffix) {
			continue
		}
		m, err := readManifest(filepath.Join(root, name))
		if err != nil {
			out = append(out, Manifest{Name: name, Damaged: true})
			continue
		}
		if m.DatabaseID != id.String() {
			continue
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Manifest) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}
