package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/riffdb/riffdb/backup"
	"github.com/riffdb/riffdb/config"
)

// restoreResult is the JSON result of `riffdb database restore`.
type restoreResult struct {
	Database            string `json:"database"`
	DatabaseID          string `json:"database_id"`
	Backup              string `json:"backup"`
	PreviousIncarnation uint64 `json:"previous_incarnation"`
	HistoryIncarnation  uint64 `json:"history_incarnation"`
	LastCommitSequence  uint64 `json:"last_commit_sequence"`
	// ReplacedAs is the entry under backup_root that holds the data the
	// restore replaced; "" when there was none.
	ReplacedAs string `json:"replaced_as"`
}

func newDatabaseRestoreCommand() *cobra.Command {
	var path, database, name string
	cmd := &cobra.Command{
		Use:   "restore",
		Short: "Restore a database from one of its backups (offline: the server stopped)",
		Long: `Replace a database's data with a backup taken by "riffdb database backup".
Run it with the server stopped: a database held by a server is refused
(database_busy). NAME is the backup's entry under the database's
backup_root, as "riffdb database backup list" prints it.

Before touching anything the restore checks the backup: its manifest, the
SHA-256 of every file, no file missing or added (backup_damaged), and that
it is a backup of this database's identity (backup_identity_mismatch). The
data it replaces is never deleted: it is moved aside under backup_root (the
result names it). The restore builds the new database beside the old one
and renames it into place, so a crash leaves either the old database or the
restored one.

The restored database keeps its identity and gets a new history
incarnation: one more than every incarnation known for it (the backup's,
the replaced data's, every backup's under backup_root, and the archive's
records in the outbox directory). Every event delivered from then on,
the restored backlog included, is archived under the new incarnation;
records of earlier incarnations stay in the archive untouched.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := loadCapabilityConfig(path)
			if err != nil {
				return err
			}
			dc, ok := c.Database(database)
			if !ok {
				known := make([]string, len(c.Databases))
				for i, d := range c.Databases {
					known[i] = d.Alias
				}
				return Local("unknown_database", "--database %q is not a database of the configuration (aliases: %s)",
					truncateFlag(database), strings.Join(known, ", "))
			}
			if dc.BackupRoot == "" {
				return Local("backup_root_not_configured",
					"database %q has no backup_root in the configuration: there are no backups to restore", dc.Alias)
			}
			req := backup.RestoreRequest{DatabasePath: dc.Path, BackupRoot: dc.BackupRoot, Name: name}
			if dc.Outbox != nil {
				req.ArchiveDirectory = dc.Outbox.Directory
			}
			res, err := backup.Restore(cmd.Context(), req)
			if err != nil {
				return restoreError(dc, err)
			}
			out := restoreResult{Database: dc.Alias, DatabaseID: res.DatabaseID, Backup: res.Name,
				PreviousIncarnation: res.PreviousIncarnation, HistoryIncarnation: res.NewIncarnation,
				LastCommitSequence: res.LastCommitSequence, ReplacedAs: res.ReplacedAs}
			return Emit(cmd, out, func(w io.Writer) error {
				fmt.Fprintf(w, "restored database %s from backup %s: history incarnation %d (was %d), last commit sequence %d\n",
					out.Database, out.Backup, out.HistoryIncarnation, out.PreviousIncarnation, out.LastCommitSequence)
				if out.ReplacedAs != "" {
					fmt.Fprintf(w, "the replaced data was moved aside under backup_root as %s\n", out.ReplacedAs)
				}
				_, err := fmt.Fprintln(w, "start the server to deliver the restored backlog under the new incarnation")
				return err
			})
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "the server's configuration file (required)")
	cmd.Flags().StringVar(&database, "database", "", "the database's alias (required)")
	cmd.Flags().StringVar(&name, "backup", "", "the backup's name, as \"database backup list\" prints it (required)")
	for _, f := range []string{"config", "database", "backup"} {
		_ = cmd.MarkFlagRequired(f)
	}
	return cmd
}

// restoreError classifies a refused or failed restore. Every refusal has
// its own code; the backup package's detail (written without paths) is
// kept, and any configured path that still appears in it is replaced by
// the name of its role.
func restoreError(dc *config.Database, err error) *Error {
	detail := restoreDetail(dc, err)
	switch {
	case errors.Is(err, backup.ErrDatabaseBusy):
		return Local("database_busy", "the database is held by a running server: stop the server, then restore")
	case errors.Is(err, backup.ErrInvalidName):
		return Local("backup_name_invalid", "--backup must be a backup's name as \"riffdb database backup list\" prints it (a plain entry name under backup_root)")
	case errors.Is(err, backup.ErrBackupNotFound):
		return Local("backup_not_found", "backup_root holds no backup named by --backup; \"riffdb database backup list\" lists the backups")
	case errors.Is(err, backup.ErrIdentityMismatch):
		return Public("backup_identity_mismatch", "the backup is of another database than the one it would replace (%s); nothing was changed", detail)
	case errors.Is(err, backup.ErrBackupDamaged):
		return Public("backup_damaged", "the backup is damaged (%s); nothing was changed: restore another backup", detail)
	case errors.Is(err, backup.ErrCrossDevice):
		return Local("backup_cross_device", "the database's data and backup_root are on different filesystems, so the replaced data "+
			"cannot be moved aside atomically; put backup_root on the database's filesystem")
	case errors.Is(err, backup.ErrRootUnusable):
		return Local("backup_root_unusable", "the database's backup_root is not usable (%s): it must be an existing directory, "+
			"not a symbolic link, owned by this user with mode 0700", detail)
	case errors.Is(err, backup.ErrUnknownState):
		return Local("restore_state_unreadable", "the data the restore would replace, or the archive, exists but cannot be read, "+
			"so the backup's identity or the new history incarnation cannot be checked (%s); nothing was changed", detail)
	case errors.Is(err, backup.ErrIncarnationExhausted):
		return Local("incarnation_exhausted", "no new history incarnation is left: the highest recorded one is the largest possible (%s); "+
			"nothing was changed: move away the backup_root entry (or archive) that holds it", detail)
	case errors.Is(err, backup.ErrNoRoot):
		return Local("backup_root_not_configured", "the database has no backup_root in the configuration")
	}
	return Local("restore_failed", "the restore failed: %s", detail)
}

// restoreDetail is err's text after the backup package's sentinel (what
// it adds: which file, which identities), with every path of dc replaced
// by its role.
func restoreDetail(dc *config.Database, err error) string {
	msg := err.Error()
	for _, sentinel := range []error{backup.ErrIdentityMismatch, backup.ErrBackupDamaged, backup.ErrRootUnusable, backup.ErrUnknownState,
		backup.ErrIncarnationExhausted} {
		if i := strings.Index(msg, sentinel.Error()+": "); i >= 0 && errors.Is(err, sentinel) {
			msg = msg[i+len(sentinel.Error())+2:]
			break
		}
	}
	roles := []struct{ path, name string }{{dc.BackupRoot, "<backup_root>"}, {dc.Path, "<database path>"}}
	if dc.Outbox != nil {
		roles = append(roles, struct{ path, name string }{dc.Outbox.Directory, "<outbox directory>"})
	}
	for _, r := range roles {
		if r.path != "" {
			msg = strings.ReplaceAll(msg, r.path, r.name)
		}
	}
	return strings.TrimPrefix(msg, "backup: ")
}
