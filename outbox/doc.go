// Package outbox is the server-owned delivery worker: it moves every committed
// event from the primary's commit-coupled undelivered index into the durable
// local archive, at least once, and then completes the event's intent.
//
// # Model
//
// One Worker runs per database that has a destination. It reads only intents
// at or below the publication frontier (a synced Pebble write is visible before
// it is durable; an event read past the frontier could be archived and then
// erased by a crash, and its identity reused for different bytes).
//
// A pass scans the undelivered index one page (500 intents) at a time in
// event-id order. Within a page the worker forms claim runs: up to 16
// consecutive intents claimed in one primary transaction. A run ends at the
// first intent that is not due, has used every attempt, or would not fit the
// archive quota together with the earlier members; that intent is then handled
// on its own (not due: skipped; exhausted: dead-lettered; too big even alone:
// delivery pauses with reason capacity_exhausted and no attempt is spent).
// Members are delivered one at a time, each in its own archive transaction; a
// member whose lease passed before it is reached renews its lease first.
// Once a run's first member is accepted, the next run of the page is formed,
// checked against the quota together with the current run's members not yet
// accepted, and claimed in a goroutine of its own while the current run is
// delivered: the claim's fsync on the primary then overlaps the archive's
// fsyncs instead of sitting between two runs. Its members are delivered only
// after that claim returned, in order, so a claim is still durable before its
// first member is delivered. A failure of the current run retries the current
// run's members not reached (their claim was their attempt, as without
// claim-ahead) and releases the run claimed ahead: its members were never
// attempted, and go back to pending with their claim's attempt taken back
// (primary.DB.Release, one synced transaction), so a failure charges exactly
// the members the sequential algorithm charges. A run whose events cannot be
// loaded is not claimed ahead; the current run is delivered as usual. An
// outage met by a run's first member claims nothing more.
// Accepted members are completed up to 16 per primary transaction, flushed at
// the bound, at page end, or before ordinary failure handling. Nothing waits to
// fill a group. The destination confirms its acceptances once per group,
// before the group is completed (Destination.Confirm: the archive waits for
// their transactions to be durable and checks that its store directory is
// still the one that took them); a group it
// cannot confirm is not completed, and its members are retried. A completion is applied without its own fsync: the next claim
// (or retry, dead letter, command commit) is synced through the same
// write-ahead log and makes it durable, and a pass that completed anything
// syncs the primary before it ends. Per 16 events the primary thus syncs once
// (the claim), not twice; a claim is always durable before its first member
// is delivered, so every attempt stays counted.
//
// # Stages
//
// A pass (pass.go: RunOnce, the scan loop) goes through its stages in files
// of their own: page.go forms claim runs over one scan page (due,
// exhausted, form, load); deliver.go claims a run and delivers its members,
// one archive transaction each; claimahead.go claims the next run while the
// current one is delivered (claimAhead); flush.go completes accepted groups
// (completionFlush, with the destination's Confirm first); failure.go applies
// the retry and dead-letter rules and moves health. calls.go holds the
// worker's traced calls of its source and destination (claim, renew,
// accept, complete); instruments.go holds the instruments.
//
// # Failures
//
// Errors from the Destination are classified by the sentinels in errors.go.
// Unavailability degrades health and is retried; known refusal (permissions,
// read-only filesystem, custody) pauses before the next claim; capacity pauses
// without spending attempts; a changed binding, incompatible format or corrupt
// content stops delivery until a restart. Before claiming while unhealthy the
// worker probes the destination, so an outage does not burn attempts; after a
// pass halts, the next one waits for the probe interval, not for the next
// commit, since no commit can unblock the destination. A destination that
// can fail between the worker's calls (Watched: the archive's background
// scrub finding corrupt content) wakes the worker, whose next pass probes it
// and stops even with nothing to deliver. After a
// claim, failures follow the retry policy: at most 32 attempts (fewer when
// Options.MaxAttempts lowers the budget), 1 s apart, then a dead letter,
// which stays undelivered and fences retention until an operator redrives
// it (primary.DB.Redrive).
//
// # Health
//
// A worker starts degraded (reason starting). It turns healthy at the first
// event the archive accepts — the archive was opened and validated (and
// probed first, while the worker was unhealthy) and delivery works — not
// when its pass reaches the end of the index, so a worker catching up on a
// standing backlog after a restart or an outage reports healthy while the
// backlog falls. A pass that ends without delivering anything and without a
// failure also leaves the worker healthy. An identity conflict keeps health
// degraded (identity_conflict) until a restart; stop reasons hold until one.
//
// Stopping the worker is not a failure. Stop lets the destination call in
// flight finish (an archive transaction abandoned midway has an unknown
// outcome and would leave the archive fenced off as unusable), then the pass
// stops before its next step; accepted members are still completed. A
// destination error seen after the pass's context ended is not classified:
// health keeps its state, nothing is logged, no retry is scheduled or
// counted. The members claimed and not yet delivered stay delivering under
// their lease, exactly as after a crash, and the next start returns them to
// pending.
//
// A crash at any point replays at most MaxCrashReplay (46) accepted events:
// the completion group open when the last claim that returned started, the
// rest of the run then being delivered, and the run that claim claimed
// (claimahead.go). The primary returns every delivering intent to pending at
// startup (the claim stays counted: at most MaxCrashCharged, 31, members
// claimed and not yet delivered, the current run's rest and the run claimed
// ahead), and redelivery hits the same archive key, where equal bytes are
// accepted once.
//
// The worker never blocks the primary's command path: it only reads the index
// and writes intent transitions.
//
// Source is implemented by *primary.DB; Destination by the server's adapter
// around *archive.Store. outbox and archive do not import each other.
package outbox
