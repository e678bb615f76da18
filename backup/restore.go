package backup

import (
	"context"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/process/clock"
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
