package archive

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/store/dirsync"
)

// Anchors: why a rolled-back archive cannot pass for a healthy one.
//
// Pebble trusts the tail of its newest WAL to be a torn write: truncating,
// zeroing or deleting that file silently drops its last records, and the
// accounting key rolls back together with them, so the archive stays
// consistent with itself. Nothing inside a store can notice its own
// rollback; only a lower bound kept outside the rolled-back data can. The
// archive has two:
//
//   - The floor file (FloorFileName, in the store directory next to
//     Pebble's files, never in its WAL) holds the binding and the
//     accounting as of the store's last clean Close, or of its creation.
//     Records are never deleted, so the accounting only grows, and any
//     floor ever written is a lower bound forever: an older copy of the
//     file is still true, a crash leaves the previous one. Open and Inspect
//     refuse an archive whose accounting is below its floor. The floor
//     file also marks the store as created by riffdb (see
//     internal/store/existence): without it, an unknown store is created again
//     only if it provably never held a committed write.
//   - Options.Floor is the record count the primary itself saw durable
//     when it completed its latest deliveries, written in the same primary
//     batches that complete intents. A completed intent is proof that the
//     archive held that event; if the archive later holds fewer records
//     than any count it once reported, records that were completed are
//     gone. Any suffix of archive transactions lost to a WAL truncation
//     that contains a completed event lowers the count below the count
//     recorded with that completion, because each accepted record raised
//     the count by one when it was committed and nothing lowers it. This
//     anchor also covers crashes (the floor file is only as new as the last
//     clean Close) and an archive directory emptied or replaced by an
//     older copy as a whole.
//
// Options.LastCommit anchors the other direction: the archive can hold
// only events that the primary committed, so an archive event of the
// primary's incarnation beyond its last commit sequence means the primary
// lost its tail or was restored by copying files back. Delivery would then
// reuse identities with different bytes; Open refuses the archive instead
// (checkHistory).

// FloorFileName is riffdb's own file in the store directory: the floor of
// the accounting (see the anchors above).
const FloorFileName = "riffdb-floor"

const (
	floorMagic = "RIFFFLR1"
	floorSize  = len(floorMagic) + 16 + 8 + 8 + 4
)

func encodeFloor(binding event.DatabaseID, a accounting) []byte {
	b := make([]byte, 0, floorSize)
	b = append(b, floorMagic...)
	b = append(b, binding[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(a.Records))
	b = binary.BigEndian.AppendUint64(b, uint64(a.EncodedBytes))
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func decodeFloor(b []byte) (event.DatabaseID, accounting, error) {
	var id event.DatabaseID
	if len(b) != floorSize || string(b[:len(floorMagic)]) != floorMagic ||
		crc32.Checksum(b[:floorSize-4], castagnoli) != binary.BigEndian.Uint32(b[floorSize-4:]) {
		return id, accounting{}, newError(ErrCorrupt, "the archive's floor file is damaged", nil)
	}
	b = b[len(floorMagic):]
	copy(id[:], b[:16])
	a := accounting{Records: int64(binary.BigEndian.Uint64(b[16:])), EncodedBytes: int64(binary.BigEndian.Uint64(b[24:]))}
	if a.Records < 0 || a.EncodedBytes < 0 {
		return id, accounting{}, newError(ErrCorrupt, "the archive's floor file is damaged", nil)
	}
	return id, a, nil
}

// readFloor reads the floor file; ok is false when there is none.
func readFloor(fs vfs.FS, storeDir string) (id event.DatabaseID, a accounting, ok bool, err error) {
	b, ok, err := readOwnFile(fs, storeDir, FloorFileName, floorSize, "reading the archive's floor file")
	if err != nil || !ok {
		return id, a, false, err
	}
	id, a, err = decodeFloor(b)
	return id, a, err == nil, err
}

// readOwnFile reads one of riffdb's own files of the store directory,
// through fs (on the real filesystem, the custody FS verifies the opened
// descriptor), up to one byte more than size so that a longer file is
// seen; ok is false when there is none. Errors name what, never a path.
func readOwnFile(fs vfs.FS, storeDir, name string, size int, what string) (b []byte, ok bool, err error) {
	f, err := fs.Open(fs.PathJoin(storeDir, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, mapError(what, err)
	}
	defer f.Close()
	if b, err = io.ReadAll(io.LimitReader(f, int64(size)+1)); err != nil {
		return nil, false, mapError(what, err)
	}
	return b, true, nil
}

// writeFloor replaces the floor file atomically and durably
// (dirsync.WriteFile).
func writeFloor(fs vfs.FS, storeDir string, binding event.DatabaseID, a accounting) error {
	return mapError("writing the archive's floor file", dirsync.WriteFile(fs, storeDir, FloorFileName, encodeFloor(binding, a)))
}

// LostRecordsError reports an archive that holds fewer records than a
// durable lower bound says it once held: records were lost (a truncated or
// replaced log, an older copy of the store). It wraps ErrLostRecords.
type LostRecordsError struct {
	// Missing is how many records are missing at least.
	Missing int64
	// Anchor names the lower bound that proved it.
	Anchor string
}

func (e *LostRecordsError) Error() string {
	return fmt.Sprintf("%v: at least %d records are missing (the %s says the archive held more)", ErrLostRecords, e.Missing, e.Anchor)
}

// Unwrap returns ErrLostRecords, with its delivery mark (a stop, reason
// archive_lost_records).
func (e *LostRecordsError) Unwrap() error { return ErrLostRecords }

func (*LostRecordsError) archiveError() {}

// MissingRecords returns Missing (for callers that must not import this
// package to read it).
func (e *LostRecordsError) MissingRecords() int64 { return e.Missing }

// Anchor names for LostRecordsError.
const (
	anchorFloorFile = "archive's floor file, written at its last clean shutdown,"
	anchorPrimary   = "primary's record of completed deliveries"
)

// checkFloor returns a *LostRecordsError when acct is below the floor.
func checkFloor(acct accounting, floorRecords int64, anchor string) error {
	if acct.Records < floorRecords {
		return &LostRecordsError{Missing: floorRecords - acct.Records, Anchor: anchor}
	}
	return nil
}

// lastEventOf returns the highest event identity archived for (binding,
// incarnation), or ok false when there is none: one reverse seek.
func (c *core) lastEventOf(ctx context.Context, incarnation uint64) (id event.ID, ok bool, err error) {
	lo := recordKey(event.Key{Database: c.binding, Incarnation: incarnation})
	hi := recordKey(event.Key{Database: c.binding, Incarnation: incarnation + 1})
	if incarnation == ^uint64(0) {
		hi = recordUpper
	}
	last, err := c.lastKey(ctx, "reading the last archived event", lo, hi)
	if err != nil || last == nil {
		return event.ID{}, false, err
	}
	k, err := event.DecodeKey(last[1:])
	if err != nil {
		return event.ID{}, false, newError(ErrCorrupt, "decoding an archive key", nil)
	}
	return k.Event, true, nil
}

// lastKey returns a copy of the greatest key in [lo, hi), or nil when the
// range is empty: one reverse seek, as the storage call named what.
func (c *core) lastKey(ctx context.Context, what string, lo, hi []byte) ([]byte, error) {
	var last []byte
	err := guarded(ctx, c.st, c.timeout, what, false, func() error {
		it, err := c.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return err
		}
		if it.Last() {
			last = bytes.Clone(it.Key())
		}
		return it.Close()
	})
	return last, err
}

// checkHistory returns ErrHistoryBehind when the archive holds an event of
// incarnation beyond lastCommit.
func (c *core) checkHistory(ctx context.Context, incarnation, lastCommit uint64) error {
	last, ok, err := c.lastEventOf(ctx, incarnation)
	if err != nil || !ok || last.Seq <= lastCommit {
		return err
	}
	return fmt.Errorf("%w: the archive holds event %s of history incarnation %d, beyond the primary's last commit sequence %d "+
		"(the primary lost its tail, or its files were copied back by hand instead of restored with `riffdb database restore`)",
		ErrHistoryBehind, last, incarnation, lastCommit)
}
