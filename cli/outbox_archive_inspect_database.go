package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"syscall"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/primary"
)

// databaseAnchor reads, from the stopped database in dir, the anchor that
// `inspect --database-path` checks the archive against: the archive record
// count the database's delivery mark recorded (the one the server's archive
// Open checks). It takes the database's lock without creating or touching
// LOCK and opens the store read-only, so nothing is written in the
// database; release lets the lock go, after the inspection. Errors are
// composed here and contain no paths.
func databaseAnchor(ctx context.Context, dir string, id event.DatabaseID) (release func(), floor int64, err error) {
	lock, err := primary.LockExisting(dir)
	if err != nil {
		return nil, 0, databaseError(err)
	}
	a, err := primary.ReadArchiveAnchors(ctx, dir, lock)
	if err != nil {
		_ = lock.Close()
		return nil, 0, databaseError(err)
	}
	if a.ID != id {
		_ = lock.Close()
		return nil, 0, Public("database_binding_mismatch",
			"the database in --database-path is database %s, not --database-id; it requires operator investigation", a.ID)
	}
	return func() { _ = lock.Close() }, int64(a.Delivered.ArchiveFloor), nil
}

// databaseError classifies a failure to read the database's anchor.
func databaseError(err error) *Error {
	switch {
	case errors.Is(err, primary.ErrBusy):
		return Local("database_busy", "the database in --database-path is held by another process; stop the owning server before inspection")
	case errors.Is(err, primary.ErrUnprotected):
		return Local("database_unprotected", "the directory given by --database-path is accessible to other users; it must be 0700")
	case errors.Is(err, fs.ErrNotExist):
		return Local("database_not_found", "no stopped database (with its lock file) exists in the directory given by --database-path; "+
			"inspection creates nothing")
	case errors.Is(err, primary.ErrCorrupt):
		return Public("database_corrupt", "the database in --database-path is damaged, so its record of completed deliveries "+
			"cannot be read; it requires operator investigation")
	case errors.Is(err, primary.ErrIncompatible):
		return Public("database_incompatible", "the database in --database-path has a format this riffdb cannot read")
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return Local("database_refused", "access to the database was refused%s; run inspection as the database's owner", errnoSuffix(err))
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return Local("interrupted", "archive inspection was interrupted")
	}
	return Local("database_unavailable", "the database in --database-path could not be read%s", errnoSuffix(err))
}

// missingMessage is the message of a "mismatch" that proved records
// missing, naming the anchor that proved it.
func missingMessage(rep archive.InspectReport) string {
	if rep.MissingAnchor == archive.AnchorDatabase {
		return fmt.Sprintf("the archive holds at least %d records fewer than the database recorded as delivered into it: "+
			"records were lost (a crash that lost the archive's log tail, or a truncated or replaced log); "+
			"stop delivery and investigate", rep.MissingRecords)
	}
	return fmt.Sprintf("the archive holds %d records fewer than at its last clean shutdown: records were lost "+
		"(a truncated or replaced log); stop delivery and investigate", rep.MissingRecords)
}
