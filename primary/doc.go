// Package primary is the source database: a Pebble store holding the command
// history, the exact bytes of every committed event, and the commit-coupled
// undelivered index (one outbox intent per event) that the outbox worker
// drains.
//
// # Commits
//
// Execute validates the input against the compiled contract and writes, in
// ONE synced Pebble batch, the history record, each event's exact
// event.Stored bytes, one pending intent per event and the durable
// undelivered count. A batch is one checksummed WAL record, so a commit is
// all or nothing after a crash. Commits are group-committed (committer.go):
// one goroutine takes every commit waiting at that moment, assigns their
// sequences in order, writes them into one batch and enters Pebble's commit
// pipeline (ApplyNoSyncWait) without waiting for the fsync, which a second
// goroutine awaits, answering groups in order. WAL order equals sequence
// order, so a crash can only lose a suffix of sequences (never leave a gap),
// and concurrent commits share batches and fsyncs.
//
// # Publication frontier
//
// Pebble makes a synced write visible before it is durable. The worker must
// not deliver such an event: a crash could erase it and its identity would
// be reused for different bytes. Frontier is the highest sequence such that
// every sequence at or below it is durable: the syncer moves it to a group's
// last sequence once the group's fsync has returned (groups are synced in
// order). ScanIntents never returns an intent above it.
//
// # Keys
//
//	c ‖ seq(8) ‖ e ‖ pos(4)        exact stored event bytes
//	c ‖ seq(8) ‖ h                 history record (versioned; see encodeHistory)
//	i ‖ event id(12)               outbox intent (versioned; see encodeIntent)
//	k ‖ idempotency key            commit sequence, event count, input hash
//	m/identity, m/incarnation      database identity (UUIDv7), history incarnation
//	m/layout                       this key layout's version (2)
//	m/undelivered                  durable undelivered count (u64)
//	m/pruned                       first retained sequence, pruned history bytes
//
// Everything a commit writes sorts after all older commit data, except its
// intents, idempotency key and the count: a flushed memtable overlaps only
// those small namespaces of the older data, so L0 compactions do not rewrite
// the history (see codec.go). Intent keys sort by event id, so the
// undelivered index is scanned in event order and its first key is the
// undelivered low-water mark.
//
// # Undelivered count
//
// The count is stored next to the intents and changed in the same batches
// (+n by commits, −n by Complete), so it is exact without scanning. Open
// verifies it once by counting the intents (the only full scan); a mismatch
// or an unreadable intent makes the index IndexDegraded (count unavailable)
// until a later Open verifies it. UndeliveredCount, HistoryUsage and
// Frontier read in-memory mirrors only, because the stats endpoint polls
// them.
//
// # Intent transitions
//
// Claim, Renew, Retry, DeadLetter and the Complete family are
// compare-and-set against the exact prior state the caller holds,
// serialised by one mutex and written in one batch each: synced, except
// CompleteDeferred and CompleteArchived, which return once the batch is
// applied. Open, from its count-verifying scan, returns every delivering
// intent to pending (RecoverDeliveries does the same on demand): the
// interrupted claim stays counted as an attempt.
//
// # Retention
//
// Prune keeps the newest HistoryRetention commits and never removes a
// commit at or above the undelivered low-water mark (the lowest sequence
// with any intent, dead letters included), read from the store itself.
//
// # Failure
//
// A WAL write or sync failure means acknowledged durability can no longer be
// promised. Pebble reports it through Logger.Fatalf in the committing
// goroutine; this package's logger marks the DB failed (ErrFailed from then
// on, see Failed) and ends only that goroutine. Every write runs on a
// goroutine of its own for that reason. The library never exits the
// process: the server observes Failed and shuts down. Detected data
// corruption fails the DB the same way.
//
// # Bulk intents
//
// A compiled command emits between 1 and 16 events, so the cheapest way to
// create N pending intents is N/16 executions of a 16-event command from
// many goroutines (1,000,000 intents = 62,500 commits; see BenchmarkCommit).
//
// # Existence, and failing closed
//
// Whether the store exists is riffdb's decision, never Pebble's (a plain
// pebble.Open of a directory whose marker.manifest.* was lost creates a new
// store and deletes the old tables and logs as obsolete). Open takes the
// directory lock first, then decides (create.go): a directory with riffdb's
// creation marker (riffdb-created) or with any committed write in it (a
// table, a non-zero WAL byte: internal/store/existence) holds a created store,
// which is opened with ErrorIfNotExists and refused with ErrCorrupt, files
// untouched, when Pebble's markers or the identity are missing. Only a
// directory that provably never held a committed write (a first start that
// crashed while Pebble was creating the store) is emptied and created again.
//
// The creation marker also holds a floor (floor.go): the last commit the
// store reached, and after a clean Close the MANIFEST it was left with.
// Pebble takes a truncated, zeroed or deleted newest WAL for a torn write
// and an older MANIFEST for the truth; the store stays consistent with
// itself either way. Open refuses a history that ends below the floor, or a
// MANIFEST older than or different from the one the clean Close left. What
// a crash leaves unrecorded there is still anchored by the archive: an
// archive event beyond the primary's history stops delivery
// (history_behind_archive), and the delivery mark (delivered.go), written in
// every completion batch, bounds the archive's record count from below.
package primary
