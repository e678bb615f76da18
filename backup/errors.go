package backup

import "errors"

// Errors of Create, List and Restore. Every error of the package wraps at
// most one of them, and none names a filesystem path.
var (
	// ErrNoRoot: the database has no backup_root.
	ErrNoRoot = errors.New("backup: the database has no backup_root")
	// ErrRootUnusable: backup_root is missing, is not a directory (a
	// symbolic link included), is not owned by the effective user, or has a
	// mode other than 0700.
	ErrRootUnusable = errors.New("backup: backup_root is not usable")
	// ErrDatabaseBusy: a server (or another restore) holds the database, or
	// its archive.
	ErrDatabaseBusy = errors.New("backup: the database is held by another process")
	// ErrInvalidName: the backup name is not a plain entry name.
	ErrInvalidName = errors.New("backup: invalid backup name")
	// ErrBackupNotFound: backup_root holds no directory of that name.
	ErrBackupNotFound = errors.New("backup: no such backup")
	// ErrBackupDamaged: the manifest is missing or unreadable, a file is
	// missing, extra, of another size or checksum, or the store's own
	// identity, incarnation or last commit differ from the manifest's.
	ErrBackupDamaged = errors.New("backup: the backup is damaged")
	// ErrIdentityMismatch: the backup is of another database identity than
	// the data it would replace, or than the archive's binding.
	ErrIdentityMismatch = errors.New("backup: the backup is of another database")
	// ErrCrossDevice: the data to move aside and backup_root are on
	// different filesystems, so it cannot be moved by a rename.
	ErrCrossDevice = errors.New("backup: the database and backup_root are on different filesystems")
	// ErrUnknownState: the data to replace, or the archive, exists but
	// cannot be read, so the identity check or the incarnation formula
	// cannot be completed.
	ErrUnknownState = errors.New("backup: the state to restore over cannot be read")
	// ErrIncarnationExhausted: the highest history incarnation the restore
	// formula found (a verified backup's, the replaced data's, the
	// archive's) is 2⁶⁴ − 1, so no new incarnation is above it. Nothing is
	// changed; remove or move away what holds that incarnation.
	ErrIncarnationExhausted = errors.New("backup: no history incarnation is left above the highest recorded one")
	// ErrInsufficientSpace: Create refused a backup that would leave less
	// than Options.ReserveBytes free on backup_root's filesystem, either
	// before it started (estimated from the live store's size) or after
	// its copy was written (measured); or the filesystem filled up while it
	// copied. Nothing of the backup is kept. A refusal before or after the
	// copy is a *SpaceError, which carries the numbers.
	ErrInsufficientSpace = errors.New("backup: not enough free space on backup_root")
)
