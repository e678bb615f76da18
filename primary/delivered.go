package primary

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// keyDelivered holds the DeliveryMark. It is rewritten in the same batch as
// every completion, so it is exactly as durable as the completions it counts.
var keyDelivered = []byte("m/delivered")

// DeliveryMark is the primary's durable record of what it has delivered into
// its archive: the anchor that lets a start prove the archive did not lose
// completed events (see archive/floor.go for the argument).
type DeliveryMark struct {
	// Incarnation is the history incarnation Completed counts.
	Incarnation uint64
	// Completed is the cumulative number of completed deliveries of that
	// incarnation.
	Completed uint64
	// ArchiveFloor is the highest archive record count that the archive
	// reported durable before a completion: a lower bound of the archive's
	// record count for ever, since archive records are never deleted.
	ArchiveFloor uint64
}

func encodeDelivered(m DeliveryMark) []byte {
	b := binary.BigEndian.AppendUint64(nil, m.Incarnation)
	b = binary.BigEndian.AppendUint64(b, m.Completed)
	return binary.BigEndian.AppendUint64(b, m.ArchiveFloor)
}

func decodeDelivered(v []byte) (DeliveryMark, error) {
	if len(v) != 24 {
		return DeliveryMark{}, fmt.Errorf("%w: delivery mark", ErrCorrupt)
	}
	return DeliveryMark{
		Incarnation:  binary.BigEndian.Uint64(v),
		Completed:    binary.BigEndian.Uint64(v[8:]),
		ArchiveFloor: binary.BigEndian.Uint64(v[16:]),
	}, nil
}

// loadDelivered reads the mark; a store without one (created before the
// mark existed, or that never completed a delivery) starts at zero.
func (db *DB) loadDelivered() error {
	v, err := db.get(keyDelivered)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		db.delivered = DeliveryMark{Incarnation: db.incarnation}
		return nil
	case err != nil:
		return fmt.Errorf("primary: read delivery mark: %w", err)
	}
	m, err := decodeDelivered(v)
	if err != nil {
		return err
	}
	if m.Incarnation != db.incarnation {
		// A new incarnation starts counting completions afresh; the
		// archive floor counts every incarnation's records and stays.
		m = DeliveryMark{Incarnation: db.incarnation, ArchiveFloor: m.ArchiveFloor}
	}
	db.delivered = m
	return nil
}

// Delivered returns the delivery mark as last applied (a completion applied
// without its fsync is included; a crash can only lower the durable one,
// which keeps it a lower bound).
func (db *DB) Delivered() DeliveryMark {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.delivered
}

// OpenedLastSequence returns the last commit sequence found when Open ran,
// before any command of this process: the bound the archive's events of this
// incarnation must not exceed at the first start of delivery.
func (db *DB) OpenedLastSequence() uint64 { return db.openedLast }

// CompleteArchived is CompleteDeferred that also raises the delivery mark's
// archive floor to archiveRecords, which must be a record count the archive
// reported after every member was durably accepted. The floor and the
// completion count are written in the completion's own batch.
func (db *DB) CompleteArchived(ctx context.Context, members []Intent, archiveRecords uint64) error {
	return db.remove(ctx, members, pebble.NoSync, archiveRecords)
}
