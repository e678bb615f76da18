package backup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/primary"
)

// errNotRecorded is recordedIncarnation's answer for an entry that records
// nothing of the database: no manifest, or another database's.
var errNotRecorded = errors.New("backup: the entry records no incarnation of the database")

// recordedIncarnation returns the history incarnation that the entry dir
// under backup_root records for database id, once the entry verifies: its
// manifest reads, its store holds exactly the manifest's files, each of the
// manifest's size, LOCK among them (so that reading the store creates
// nothing), and the store's own identity, incarnation and last commit are
// the manifest's.
//
// That is what Restore checks of a backup, without the SHA-256 of every
// file: a restore would otherwise read every backup under backup_root in
// full. It suffices because the formula needs only the incarnations that
// may live again: an entry that fails this check also fails Restore's full
// verification, so its history can never be restored, and what it claims
// (a manifest edited to 2⁶⁴ − 1, say) must not raise, or wrap, the next
// incarnation. An entry that passes it but fails the checksums only makes
// the formula conservative.
//
// errNotRecorded: no manifest of id. ErrDatabaseBusy: another process holds
// the entry's store, which cannot then be read. Any other error says why the
// entry does not verify; it names no path.
func recordedIncarnation(ctx context.Context, dir string, id event.DatabaseID) (uint64, error) {
	m, err := readManifest(dir)
	if err != nil {
		if _, serr := os.Lstat(filepath.Join(dir, manifestName)); errors.Is(serr, os.ErrNotExist) {
			return 0, errNotRecorded
		}
		return 0, err
	}
	if m.DatabaseID != id.String() {
		return 0, errNotRecorded
	}
	store := filepath.Join(dir, storeDirName)
	entries, err := os.ReadDir(store)
	if err != nil {
		return 0, fmt.Errorf("%w: its store cannot be read", ErrBackupDamaged)
	}
	if len(entries) != len(m.Files) {
		return 0, fmt.Errorf("%w: its store holds %d entries, its manifest lists %d", ErrBackupDamaged, len(entries), len(m.Files))
	}
	lock := false
	for _, f := range m.Files {
		fi, err := os.Lstat(filepath.Join(store, f.Name))
		if err != nil || !fi.Mode().IsRegular() || fi.Size() != f.Size {
			return 0, fmt.Errorf("%w: its file %s is missing, not a regular file, or of another size", ErrBackupDamaged, f.Name)
		}
		lock = lock || f.Name == "LOCK"
	}
	if !lock {
		return 0, fmt.Errorf("%w: its store has no LOCK file", ErrBackupDamaged)
	}
	info, err := primary.ReadStoreInfo(ctx, store, nil)
	if errors.Is(err, primary.ErrBusy) {
		return 0, fmt.Errorf("%w: the store of an entry under backup_root is held by another process", ErrDatabaseBusy)
	}
	if err != nil {
		return 0, fmt.Errorf("%w: its store cannot be read: %w", ErrBackupDamaged, err)
	}
	if info.ID != id || info.Incarnation != m.HistoryIncarnation || info.LastCommit != m.LastCommitSequence {
		return 0, fmt.Errorf("%w: its store holds incarnation %d, last commit %d; the manifest says %d, %d",
			ErrBackupDamaged, info.Incarnation, info.LastCommit, m.HistoryIncarnation, m.LastCommitSequence)
	}
	return m.HistoryIncarnation, nil
}
