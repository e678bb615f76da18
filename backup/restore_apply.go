package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"go.uber.org/zap"

	"github.com/riffdb/riffdb/internal/hygiene/pathless"
	"github.com/riffdb/riffdb/internal/hygiene/regularfile"
	"github.com/riffdb/riffdb/primary"
)

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
	in, _, err := regularfile.Open(src, regularfile.NoFollow)
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
