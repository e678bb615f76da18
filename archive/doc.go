// Package archive is the durable local outbox archive: a Pebble v2 store
// that keeps, at least once and exactly as committed, every event a primary
// database delivers to it, within a quota of encoded bytes.
//
// # Model
//
// An archive is bound to one database identity when it is created. Each
// event is archived under its key (database identity ‖ history incarnation ‖
// event identity, event.Key) by Accept, in its own archive transaction: under
// a single-writer mutex a read phase looks the key up (equal bytes: the
// retry is a Duplicate and nothing is written; different bytes: ErrConflict),
// checks the quota and a free-space guard, and then one batch holding the
// record and the updated accounting is committed with pebble.Sync. A synced
// batch is one checksummed WAL record, so the record and its quota charge are
// durable together or not at all; redelivery after a crash finds the same
// key and is accepted once. Fit answers the group quota question for a
// claim run without writing. There is no deletion, ever.
//
// The same validating Reader, over a Pebble snapshot with an opaque
// resumable Cursor, serves Open's validation, the background scrub, offline
// Inspect and reconciliation campaigns over archives larger than one call's
// bound. A page holds at most MaxPageRecords records and MaxPageBytes (a
// scrub page ScrubPageBytes). Every page is validated alike: each record's
// checksum, stored-event decode and hash, identity and binding. Only
// ReadPage copies the events out for its caller; the scans that only
// validate and count (Open's validation, checkpoints, Inspect, the scrub)
// check each value where the engine holds it and keep keys and charges.
//
// # What "validates the archive in bounded pages before dispatch" covers
//
// Validating a record means: its value's checksum (over key, version and
// bytes), the stored event's decode and SHA-256 event hash, the event
// identity against the key, and the key's database binding. Validating the
// archive means that, for every record, plus count and Σ charges equal to
// the durable accounting.
//
// Open, before the first delivery, checks the metadata keys (format
// marker, binding, accounting, nothing unknown) and then uses the
// validated-prefix checkpoint (checkpoint.go): the key K of the last record
// a validation reached, with the count and Σ charges of every record at or
// before K. It validates, in bounded pages, only the records after K and
// the record K itself, and checks continuity: the checkpoint's totals plus
// those of the records after K must equal the durable accounting. Without a
// checkpoint, or with one that is damaged, names no record, exceeds the
// accounting or does not add up, Open validates every record, as the first
// start of an archive does, and writes a fresh checkpoint. It also validates
// every record when the archive's last full validation (validation.go) is
// older than Options.FullValidationInterval, or unknown: the interval bounds
// how long the prefix is trusted without being read. Then come the anchors
// (floor file, the primary's delivery mark and history bound).
//
// The records at or before K are trusted without being read, for three
// reasons. Records are immutable and never deleted, so a record validated
// once stays valid as long as the storage engine returns the bytes it
// stored. Pebble verifies a CRC32C over every WAL chunk and every table
// block it reads from disk (and compactions read every block they rewrite),
// so bit rot is reported as corruption, not returned as data. And the
// continuity check ties the prefix to the accounting: a record lost or
// added without its charge makes the totals disagree, which sends Open to
// the full validation. What a trusted prefix does not show at startup is a
// record whose bytes changed with valid block checksums (a store tampered
// with through Pebble, or a block damaged in memory before it was
// checksummed) and a damaged table block that no read has reached yet:
// those are what the background scrub and Inspect are for.
//
// The checkpoint advances only over records just validated: at the end of
// Open, at Checkpoint (the server calls it while delivering, once
// CheckpointRecords records or CheckpointBytes bytes were accepted beyond
// it), and at a clean Close. So the work of Open is bounded by what was
// accepted since the last checkpoint: nothing after a clean shutdown, at
// most about CheckpointRecords records (plus those in flight) after a
// crash. An Accept of a record that sorts before K (a retry older than
// records already archived) adds it to the checkpoint in its own atomic
// batch, so continuity holds without re-reading the prefix.
//
// The background scrub (Scrub, run by the server at
// scrub_pages_per_second) validates the whole archive again, page by page,
// over a snapshot, reads every table file from the disk past the block
// cache and verifies each block's checksum (scrub_tables.go), checks the
// prefix totals against the checkpoint and all totals against the
// accounting, and records its snapshot time as the last full validation.
// Inspect is the offline full scrub (read-only, so it records nothing): every
// record, the totals, the metadata keys, the floors and Pebble's level
// check. When the scrub (or a Checkpoint) finds corrupt content, the store
// becomes unusable with ErrCorrupt, delivery stops exactly as after a
// failed startup validation (stopped, corrupt_content), and the checkpoint
// is dropped, so that the next start validates everything and refuses the
// archive again until an operator repairs it.
//
// # Offline reading: Inspect and OpenReader
//
// Inspect and OpenReader take exclusive custody of a stopped archive and
// change nothing: no file is created (not even Pebble's LOCK, whose absence
// is refused), no timestamp moves, and the store is opened read-only. Both
// work in bounded steps. Inspect returns, while the scan is incomplete, a
// NextCursor that carries the running totals; the step that completes the
// scan verifies the totals of every step against the durable accounting
// (IntegrityChanged when the archive took records in between). Cursors of
// both are bound to the archive instance and format (archiveID): a cursor
// of another archive, a copy included, or a damaged one is ErrInvalidCursor.
//
// A reconciliation campaign reads the archive in sessions, saving the
// cursor's text form between them (see ExampleOpenReader):
//
//	r, err := archive.OpenReader(ctx, dir, databaseID) // ErrBusy while a server runs
//	if err != nil { ... }
//	defer r.Close()
//	var after archive.Cursor
//	if err := after.UnmarshalText(saved); err != nil { ... } // "" starts
//	for pages := 0; pages < bound; pages++ {
//		page, err := r.ReadPage(ctx, after) // validated records, ≤ MaxPageBytes read
//		if err != nil { ... }               // ErrCorrupt, ErrInvalidCursor, ...
//		reconcile(page.Records)
//		if after = page.Next; after == nil {
//			break // the campaign is complete
//		}
//	}
//	saved, _ = after.MarshalText() // resume here in the next session
//
// # On-disk layout
//
// The configured directory (0700, owned by the server's user, see
// custody_linux.go) holds only archive.pebble, a Pebble store pinned to
// FormatMajorVersion. Pebble keys carry a one-byte prefix:
//
//	'r' ‖ key(36)          record: version(1)=1 ‖ stored-event bytes ‖ CRC32C(key ‖ version ‖ bytes)
//	'm' "format"           "RIFFARCH" ‖ version(u16)=2 (1 is read too, see formatVersion) ‖ CRC32C
//	'm' "binding"          database identity(16) ‖ CRC32C
//	'm' "accounting"       record count(u64) ‖ Σ charges(u64) ‖ CRC32C
//	'm' "checkpoint"       key(36) ‖ record count(u64) ‖ Σ charges(u64) ‖ CRC32C (optional)
//	'm' "validated"        last full validation, UnixNano(u64) ‖ CRC32C (optional; format 2)
//
// The quota charge of a record is the canonical key length (36) plus the
// length of its complete encoded value (Charge). Pebble's own overhead,
// allocated blocks (reported as Usage.AllocatedBytes) and caches are not
// charged.
//
// # Failure classes
//
// Every error wraps one sentinel, and each sentinel carries its delivery
// class and health reason as a mark (package deliverytype), which the worker
// reads without knowing the archive. ClassOf also classifies an errno or a
// storage-engine corruption that reached a caller unwrapped:
//
//   - Unavailable (ErrUnavailable, ErrBusy, ErrClosed; ENOENT, EIO,
//     timeouts): degrade and retry. A fatal storage-engine error or a
//     transaction that exceeds TxnTimeout marks the store unusable; Close it
//     and Open it again after repair (Unusable reports this).
//   - Refused (ErrRefused, ErrCustody; EACCES, EPERM, EROFS): pause before
//     the next claim until permissions are repaired.
//   - Capacity (ErrCapacity; ENOSPC): quota or disk space; pause without
//     spending attempts.
//   - Stop (ErrBindingChanged, ErrIncompatibleFormat, ErrCorrupt,
//     ErrLostRecords, and an archive ahead of the primary's history): stop
//     delivery until an operator investigates.
//   - Conflict (ErrConflict, ErrInvalidRecord): a permanent failure of one
//     event.
//
// # Failing closed: existence and anchors
//
// Whether a store exists is riffdb's decision, not Pebble's (Pebble takes a
// directory without marker.manifest.* for a new store and deletes the old
// tables and logs as obsolete). The floor file (FloorFileName) that Open
// writes next to Pebble's files marks a store riffdb created. A store
// directory without it is created (again) only when it provably never held
// a committed write (no table, no non-zero WAL byte: internal/store/existence);
// any other store is opened with ErrorIfNotExists, and refused with
// ErrCorrupt before Pebble touches it when Pebble's markers are missing.
// Inspect reports such a store as corrupt, never as not found. Open takes
// the store's lock before it decides any of this (ErrBusy while another
// process holds it), so no store is reset or created under another holder.
//
// A refused archive is left exactly as it was found (decide.go): Open
// judges an existing store on Pebble's read-only view, which replays the
// WAL into memory and writes nothing, and runs there every check that
// could refuse it (metadata, format, binding, the validation above, the
// anchors below). Only a store that passed is opened read-write, under the
// same lock, and only then are the checkpoint and a missing floor file
// written. A cut WAL, a record that fails validation or a rolled-back
// archive is therefore refused with every file as the damage left it, for
// an operator or a recovery tool to examine; the validation runs once.
//
// A store cannot notice its own rollback: Pebble trusts the tail of its
// newest WAL to be a torn write, so a truncated, zeroed, deleted or older
// log silently drops its last records, and the accounting rolls back with
// them. Two lower bounds kept outside the rolled-back data catch that (the
// full argument is in floor.go):
//
//   - the floor file, rewritten at every clean Close with the accounting:
//     records are never deleted, so every floor ever written stays a lower
//     bound; Open refuses an archive below it (*LostRecordsError), Inspect
//     reports "mismatch" with missing_records;
//   - the primary's delivery mark (Options.Floor): the archive's record
//     count as it was durable when the primary completed its latest
//     deliveries, written in the same primary batch as those completions.
//     A completed intent proves the archive held the event; every accepted
//     record raised the count by one when it was committed, so losing any
//     suffix of archive transactions that holds a completed event brings
//     the count below the count recorded with that completion. It also
//     covers crashes (the floor file is only as new as the last clean
//     Close), an emptied archive directory (Open refuses to create one
//     while the floor is positive), and an archive replaced by an older
//     copy as a whole. Inspect checks it too when the caller reads it
//     from the stopped database (InspectOptions.Floor; the CLI's
//     --database): the inspection to run after a crash.
//
// The other direction: an archive holding an event of the primary's
// incarnation beyond the primary's last commit (Options.CheckHistory)
// means the primary lost its tail or was copied back by hand; delivery
// would reuse those identities with other bytes, so Open refuses it as a
// stop (reason history_behind_archive; one reverse seek in key order).
//
// # Step cursors
//
// A step cursor of Inspect carries the running totals of a scan, so it is
// authenticated (HMAC-SHA256) under a secret of the store's own, the
// cursor key file (CursorKeyFileName): a cursor edited by hand or by a
// tool is ErrInvalidCursor whatever its checksum. Open writes the key when
// it creates the store, and when an accepted store has none; a damaged key
// file is refused as corrupt and never replaced. See cursorkey.go.
//
// # Never taking the process down
//
// Pebble's defaults exit the process on corruption and on WAL write or sync
// errors, and block forever on a full disk. The archive installs a logger
// whose Fatalf records the error and ends only the calling goroutine
// (runtime.Goexit), runs every Pebble call in its own goroutine bounded by
// TxnTimeout, records DataCorruption events (later calls return ErrCorrupt),
// rate-limits BackgroundError logs, and refuses writes below a free-space
// guard. Error messages never contain filesystem paths or event payloads.
//
// # Process umask
//
// A process that opens an archive should run with umask 077 (the riffdb
// server sets it at startup). The custody wrapper narrows every file Pebble
// creates to 0600 on its file descriptor, but with a looser umask the file
// exists as 0644 for an instant, and a concurrent Audit (the server's, before
// a claim run, or an offline inspect racing a running store) would report it
// as a custody violation.
package archive
