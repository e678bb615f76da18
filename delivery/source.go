package delivery

import (
	"context"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/primary"
)

// anchoredTo makes every open of the archive check the primary's anchors
// (see openOptions) and returns the worker's source, whose completions
// record the archive's durable record count. Call it before the first open
// (Connect does).
func (d *Destination) anchoredTo(db *primary.DB) anchoredSource {
	d.anchor = db
	return anchoredSource{DB: db, dest: d}
}

// anchorSource is what the archive's anchors need from the primary.
// *primary.DB implements it.
type anchorSource interface {
	Incarnation() uint64
	Delivered() primary.DeliveryMark
	OpenedLastSequence() uint64
	LastCommitSequence() uint64
}

// openOptions returns the archive options of the next open, with the
// primary's anchors: its durable archive floor, and its history bound. The
// first open of this process compares the archive with the history found
// when the primary opened (before any new command could reuse a lost
// sequence); a reopen after an outage with the history as it is now, which
// bounds every event delivered since.
func (d *Destination) openOptions() archive.Options {
	o := d.opts
	if d.anchor == nil {
		return o
	}
	o.Floor = int64(d.anchor.Delivered().ArchiveFloor)
	o.Incarnation, o.CheckHistory = d.anchor.Incarnation(), true
	o.LastCommit = d.anchor.OpenedLastSequence()
	if d.opened {
		o.LastCommit = d.anchor.LastCommitSequence()
	}
	return o
}

// records returns a durable lower bound of the archive's record count: the
// open store's count, or the last one seen (records are never deleted, so
// any count once durable stays a lower bound). It never waits.
func (d *Destination) records() uint64 { return uint64(d.recordsSeen.Load()) }

// seen raises recordsSeen to the store's durable record count. Callers hold
// d.mu.
func (d *Destination) seen(s *archive.Store) {
	d.raiseSeen(s.Records()) // not Usage: that also measures the store's files
}

// raiseSeen raises recordsSeen to n.
func (d *Destination) raiseSeen(n int64) {
	for {
		cur := d.recordsSeen.Load()
		if n <= cur || d.recordsSeen.CompareAndSwap(cur, n) {
			return
		}
	}
}

// anchoredSource is the worker's source: the primary, whose completions
// also record the archive's durable record count in the delivery mark.
type anchoredSource struct {
	*primary.DB
	dest *Destination
}

// CompleteDeferred implements outbox.Source. The count is read after every
// member was accepted and confirmed (a completion follows its group's
// Confirm, which raised the count to cover them).
func (s anchoredSource) CompleteDeferred(ctx context.Context, members []primary.Intent) error {
	return s.DB.CompleteArchived(ctx, members, s.dest.records())
}
