package backup

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/hygiene/pathless"
)

// DefaultKeep is how many backups of a database Create keeps when
// Options.Keep is 0.
const DefaultKeep = 7

// keepOf returns how many backups opts keep: 0 selects DefaultKeep, a
// negative value every backup (0 returned).
func keepOf(opts Options) int {
	switch {
	case opts.Keep == 0:
		return DefaultKeep
	case opts.Keep < 0:
		return 0
	}
	return opts.Keep
}

// prune removes the oldest complete backups of database id under root so
// that keep remain, counting newest, the backup Create has just completed
// (which is never removed, whatever its creation time). It considers only
// entries named backup-… (not ….partial) whose manifest names id: moved-
// aside data (replaced-…), partial copies, other databases' backups and
// entries whose manifest cannot be read (they cannot be attributed; each is
// logged) are left alone. Each removal is logged; a removal that fails is
// logged and skipped, since the new backup is complete either way. It
// returns the names removed, oldest first.
func prune(root string, id event.DatabaseID, keep int, newest string, log *zap.Logger) []string {
	if keep <= 0 {
		return nil
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		log.Warn("backup retention skipped: backup_root cannot be read", zap.Error(pathless.Error(err)))
		return nil
	}
	var older []Manifest
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || name == newest || !strings.HasPrefix(name, backupPrefix) || strings.HasSuffix(name, partialSuffix) {
			continue
		}
		m, err := readManifest(filepath.Join(root, name))
		if err != nil {
			log.Warn("backup retention leaves a backup entry alone: its manifest cannot be read, so its database is unknown",
				zap.String("entry", name), zap.Error(err))
			continue
		}
		if m.DatabaseID == id.String() && m.Name == name {
			older = append(older, m)
		}
	}
	excess := len(older) - (keep - 1)
	if excess <= 0 {
		return nil
	}
	slices.SortFunc(older, func(a, b Manifest) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	var removed []string
	for _, m := range older[:excess] {
		if err := removeBackup(root, m.Name, id); err != nil {
			log.Warn("backup retention could not remove an old backup", zap.String("backup", m.Name), zap.Error(pathless.Error(err)))
			continue
		}
		log.Info("backup removed by retention", zap.String("backup", m.Name), zap.Int("keep", keep),
			zap.Time("created_at", m.CreatedAt), zap.Uint64("last_commit_sequence", m.LastCommitSequence))
		removed = append(removed, m.Name)
	}
	return removed
}

// removeBackup removes the backup entry name of database id. It first
// turns the entry into a partial copy of id (the marker, then a rename to
// name.partial, synced), so that a crash while the files are being removed
// leaves nothing that looks like a backup, and the next Create of id
// removes the rest.
func removeBackup(root, name string, id event.DatabaseID) error {
	dir := filepath.Join(root, name)
	marker := filepath.Join(dir, partialMarker)
	if err := os.Remove(marker); err != nil && !os.IsNotExist(err) {
		return err
	}
	if err := writeFileSync(marker, []byte(id.String()+"\n")); err != nil {
		return err
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	doomed := dir + partialSuffix
	if err := renameNoReplace(dir, doomed); err != nil {
		return err
	}
	if err := syncDir(root); err != nil {
		return err
	}
	if err := os.RemoveAll(doomed); err != nil {
		return err
	}
	return syncDir(root)
}
