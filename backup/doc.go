// Package backup takes online backups of a primary database and restores
// one offline, destructively, under a new history incarnation.
//
// # What a backup is
//
// A backup is a directory backup_root/backup-<UTC time>Z holding
//
//	store/          a complete, private copy of the primary's Pebble store
//	manifest.json   database identity, history incarnation, last commit
//	                sequence, creation time, and the size and SHA-256 of
//	                every file of store/ (Manifest, format 1)
//	riffdb-backup-partial   the marker that proved, while the backup was
//	                being written, that the directory was ours
//
// Create takes it from a running database (primary.DB.Checkpoint): Pebble's
// checkpoint after a synced flush of the WAL, so the copy is a prefix of the
// history in commit order, holding every commit applied before the call.
// Commands keep being committed and acknowledged while it runs: the
// checkpoint holds no primary lock, and everything after it (unsharing
// linked tables, reading the copy, checksumming) works on the copy alone.
// Pebble hard-links tables into a checkpoint; the backup replaces every file
// that is the live store's own inode by a real copy, so damage to a live
// file can never reach a backup. The identity, incarnation and last commit
// in the manifest are read from the copy itself (a read-only open that
// replays its WAL), not from the live database, so they are exactly the
// copy's. The directory is written as <name>.partial and renamed into
// place once its manifest is durable: a crash leaves no directory that
// looks like a backup, and the next Create removes partial copies whose
// marker names its database (and nothing else).
//
// The copying and the checksumming are paced (Options.BytesPerSecond,
// DefaultBytesPerSecond = 64 MiB/s each, internal/store/pace): unpaced, a backup
// of an 80 MiB store took the disk and the CPU from the commits sharing
// them, which ran at 0.35× of their rate without a backup; paced, at
// 0.96-1.19× (BenchmarkCommitDuringBackup, same run; docs/benchmarks.md). A
// paced backup takes about twice size/rate.
//
// # What the history incarnation means
//
// An archive record is keyed by database identity ‖ history incarnation ‖
// event identity. A restore keeps the identity but rewinds the commit
// sequences, so after it the same event identity names a different event.
// The incarnation tells the two histories apart: a restore stamps
// new = max(the backup's incarnation, the replaced data's, every
// incarnation recorded under backup_root for the database (backups and
// moved-aside data) by an entry that verifies, the highest incarnation the
// archive holds records of) + 1; when that maximum is 2⁶⁴ − 1 the restore
// is refused (ErrIncarnationExhausted) rather than wrap. Every event delivered afterwards, the restored backlog included, is
// archived under the new incarnation; the records of earlier incarnations
// stay, as evidence of the history that was replaced. Ordinary startup never
// changes the incarnation. Gaps are harmless: a restore interrupted after
// it stamped a copy, then run again, may skip a number.
//
// # Restore, step by step
//
// Restore runs offline. First it checks, changing nothing: it takes the
// database directory's lock (the lock a server's primary.Open takes, so a
// running server makes it ErrDatabaseBusy and no server can start until it
// is done), verifies the backup completely (manifest, every file's size and
// SHA-256, no missing or extra file, and the store's own identity,
// incarnation and last commit against the manifest), checks the identity
// against the data it replaces (or, when there is none, the archive's
// binding), reads every incarnation of the formula (the archive with its
// read-only reader under the archive's own lock; an archive that exists but
// cannot be read is ErrUnknownState: the formula cannot be completed), and
// refuses moves across filesystems. Then, with the step names that tests
// stop after (Step*):
//
//  1. leftovers: staging directories of earlier restores of this path
//     (.<base>.restore-*) are removed when provably incomplete (they hold
//     the incomplete marker, or are the empty directory a restore swapped
//     out) and otherwise moved aside under backup_root with a manifest,
//     never deleted.
//  2. staging: a new staging directory beside the database (same parent,
//     so the swap is one rename) is created, 0700, with the incomplete
//     marker, synced.
//  3. copied: the backup's files are copied into it, each checked again
//     against its checksum while copied, synced.
//  4. stamped: the copy is locked, opened, given the new incarnation with a
//     synced write and closed cleanly; its creation marker (the floor
//     primary.Open checks) is written with its identity, last commit and
//     the MANIFEST the clean close left (primary.Stamp).
//  5. complete: the incomplete marker is removed, synced.
//  6. aside-manifest: the entry replaced-<time>-inc<N> is created under
//     backup_root with the manifest of the data about to be replaced.
//  7. swapped: renameat2(RENAME_EXCHANGE) swaps the staging directory and
//     the database path in one atomic step; the parent is synced.
//  8. moved-aside: the staging name, now holding the old data, is renamed
//     to replaced-<time>-inc<N>/store; backup_root and the parent are
//     synced.
//
// The exchange needs a filesystem with RENAME_EXCHANGE (ext4, XFS, Btrfs,
// tmpfs have it); where it fails nothing was exchanged, and the staging copy
// is discarded. Without data to replace, steps 6–8 become: an empty database directory is
// swapped out (swapped) and removed (removed-empty); a missing one is
// replaced by a rename that refuses to overwrite (renamed): a directory that
// appeared there meanwhile is never replaced.
//
// Why a crash is safe after every step: until step 7 the database path holds
// the old database, untouched (the restore only read it); from step 7 on it
// holds the complete, stamped restored database. The exchange is atomic, so
// there is no moment without a database at the path (primary.Open would
// create a fresh database at a missing path) and never a mix. A staging
// directory is either marked incomplete (removed by the next restore: the
// backup still has everything) or complete (moved aside by the next
// restore, like replaced data). Running Restore again after a crash always
// completes: it finds the old database, or the restored one, at the path,
// replaces it in turn and moves it aside, and moves a leftover copy of the
// old data aside too. Nothing is ever deleted except an incomplete copy and
// an empty directory. A crash between steps 6 and 8 can leave a
// replaced-… entry holding only its manifest (its store went aside under
// another name); it holds nothing and may be removed by hand.
//
// # Moved-aside data
//
// replaced-<time>-inc<N> has the layout of a backup (store/ and
// manifest.json), so it can itself be restored by name to undo a restore.
// List does not show it as a backup. An entry whose data could not be read
// when moved aside is named replaced-<time>-unreadable and has no manifest.
//
// All errors are free of filesystem paths; each refusal wraps one sentinel
// (errors.go).
package backup
