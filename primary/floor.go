package primary

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/hygiene/pathless"
	"github.com/riffdb/riffdb/internal/store/dirsync"
)

// The creation marker and the history floor.
//
// createdMarkerName is riffdb's own file in the database directory. Its
// existence marks a database riffdb created (so the store is never created
// again, see openStore). Its content is the history floor: the identity and
// a last commit sequence that the store is known to have reached, plus,
// after a clean Close, which MANIFEST the store was left with and that
// file's checksum.
//
// Pebble trusts the tail of its newest WAL to be a torn write, so a
// truncated, zeroed or deleted log silently drops acknowledged commits, and
// an older copy of the MANIFEST (or of its marker) makes Pebble delete newer
// tables as obsolete. The store stays consistent with itself either way; only
// an anchor outside it can tell. Acknowledged commits are durable, so the
// last commit sequence never goes down: Open refuses a store whose history
// ends below the floor. And after a clean Close nothing changes the
// MANIFEST until the next Open: Open refuses one that is older than the
// recorded one, or the same file with other content. After a crash the
// floor is as of the last successful Open or Close: still a true lower
// bound, but a damage of what was written since is not caught by it (the
// archive's anchors still catch what was delivered: archive/floor.go).
//
// A 0-byte marker (written by earlier builds) marks the database without a
// floor. A marker that does not decode is damage: Open refuses it. An
// operator who has checked the database otherwise can remove the file; it is
// written again at the next Open.
const createdMarkerName = "riffdb-created"

const (
	floorMagic = "RIFFPFL1"
	floorSize  = len(floorMagic) + 16 + 8 + 8 + 8 + 4 + 4
)

// floorRecord is the content of the creation marker.
type floorRecord struct {
	ID   event.DatabaseID
	Last uint64
	// ManifestNum, ManifestSize and ManifestCRC describe the MANIFEST a
	// clean Close left; ManifestNum 0 means unknown (the store was opened
	// since, or closed after a failure).
	ManifestNum, ManifestSize uint64
	ManifestCRC               uint32
	present                   bool // the marker had content
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (f floorRecord) encode() []byte {
	b := make([]byte, 0, floorSize)
	b = append(b, floorMagic...)
	b = append(b, f.ID[:]...)
	b = binary.BigEndian.AppendUint64(b, f.Last)
	b = binary.BigEndian.AppendUint64(b, f.ManifestNum)
	b = binary.BigEndian.AppendUint64(b, f.ManifestSize)
	b = binary.BigEndian.AppendUint32(b, f.ManifestCRC)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

var errFloorDamaged = fmt.Errorf("%w: the database's creation marker (%s) is damaged; "+
	"if the database is otherwise known to be intact, remove that file and start again", ErrCorrupt, createdMarkerName)

func decodeFloor(b []byte) (floorRecord, error) {
	if len(b) != floorSize || string(b[:len(floorMagic)]) != floorMagic ||
		crc32.Checksum(b[:floorSize-4], castagnoli) != binary.BigEndian.Uint32(b[floorSize-4:]) {
		return floorRecord{}, errFloorDamaged
	}
	b = b[len(floorMagic):]
	var f floorRecord
	copy(f.ID[:], b)
	f.Last = binary.BigEndian.Uint64(b[16:])
	f.ManifestNum = binary.BigEndian.Uint64(b[24:])
	f.ManifestSize = binary.BigEndian.Uint64(b[32:])
	f.ManifestCRC = binary.BigEndian.Uint32(b[40:])
	f.present = true
	return f, nil
}

// readFloor reads the marker: marked is false when there is none.
func readFloor(fs vfs.FS, dir string) (f floorRecord, marked bool, err error) {
	file, err := fs.Open(fs.PathJoin(dir, createdMarkerName))
	if errors.Is(err, os.ErrNotExist) {
		return f, false, nil
	}
	if err != nil {
		return f, false, fmt.Errorf("primary: read the creation marker: %w", pathless.Error(err))
	}
	defer file.Close()
	b, err := io.ReadAll(io.LimitReader(file, int64(floorSize)+1))
	if err != nil {
		return f, false, fmt.Errorf("primary: read the creation marker: %w", pathless.Error(err))
	}
	if len(b) == 0 {
		return f, true, nil
	}
	f, err = decodeFloor(b)
	return f, true, err
}

// writeFloor replaces the marker atomically and durably.
func writeFloor(fs vfs.FS, dir string, f floorRecord) error {
	return dirsync.WriteFile(fs, dir, createdMarkerName, f.encode())
}

// manifestNum parses the file number of a MANIFEST-NNNNNN path.
func manifestNum(path string) (uint64, bool) {
	i := strings.LastIndex(path, "MANIFEST-")
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseUint(path[i+len("MANIFEST-"):], 10, 64)
	return n, err == nil
}

// manifestSum returns the size and CRC32C of a file.
func manifestSum(fs vfs.FS, path string) (uint64, uint32, error) {
	f, err := fs.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	h := crc32.New(castagnoli)
	n, err := io.Copy(h, f)
	return uint64(n), h.Sum32(), err
}

// checkManifest refuses a MANIFEST older than, or different from, the one
// the last clean Close left, when the floor knows it.
func (f floorRecord) checkManifest(fs vfs.FS, desc *pebble.DBDesc) error {
	if f.ManifestNum == 0 {
		return nil
	}
	n, ok := manifestNum(desc.ManifestFilename)
	switch {
	case !ok:
		return nil
	case n < f.ManifestNum:
		return fmt.Errorf("%w: the storage engine's manifest marker names an older manifest than the one the last clean shutdown left; "+
			"newer tables would be deleted as obsolete", ErrCorrupt)
	case n > f.ManifestNum:
		return nil // opened since (and not closed cleanly): nothing to compare
	}
	size, sum, err := manifestSum(fs, desc.ManifestFilename)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: the storage engine's manifest is missing", ErrCorrupt)
	}
	if err != nil {
		return fmt.Errorf("primary: read the storage engine's manifest: %w", pathless.Error(err))
	}
	if size != f.ManifestSize || sum != f.ManifestCRC {
		return fmt.Errorf("%w: the storage engine's manifest changed since the last clean shutdown "+
			"(an older copy, or damage); newer tables would be deleted as obsolete", ErrCorrupt)
	}
	return nil
}

// checkFloor compares the loaded store with the floor.
func (db *DB) checkFloor(f floorRecord) error {
	if !f.present {
		return nil
	}
	if f.ID != db.id {
		return fmt.Errorf("%w: the creation marker names database %s, the store holds %s", ErrCorrupt, f.ID, db.id)
	}
	if db.last < f.Last {
		return fmt.Errorf("%w: the history ends at commit %d, but commit %d was reached before: "+
			"acknowledged commits were lost (a truncated, zeroed, deleted or older write-ahead log)", ErrCorrupt, db.last, f.Last)
	}
	return nil
}

// decide is Open's judgement of an existing store on a read-only view
// (openStore): the checks of load and checkFloor, which only read, run on a
// throwaway DB over view. A store they refuse is never opened read-write.
// The read-write open runs them again (a few reads) on the same files,
// which nothing changed in between under the held lock.
func (db *DB) decide(view *pebble.DB, floor floorRecord) error {
	v := &DB{opts: db.opts, log: db.log, alias: db.alias, clock: db.clock, store: view,
		failCh: make(chan struct{}), ready: make(chan struct{})}
	v.frontier.init()
	if err := v.load(); err != nil {
		return err
	}
	return v.checkFloor(floor)
}

// writeCleanFloor records, after the store is closed, the last commit and
// the MANIFEST the store was left with.
func (db *DB) writeCleanFloor() error {
	fs, dir := db.opts.FS, db.opts.Path
	f := cleanFloor(fs, dir, floorRecord{ID: db.id, Last: db.lastApplied.Load()})
	if err := writeFloor(fs, dir, f); err != nil {
		return fmt.Errorf("primary: write the creation marker: %w", pathless.Error(err))
	}
	return nil
}

// cleanFloor returns f with the MANIFEST that the closed store in dir was
// left with (unknown, 0, when it cannot be read).
func cleanFloor(fs vfs.FS, dir string, f floorRecord) floorRecord {
	if desc, err := pebble.Peek(dir, fs); err == nil && desc.Exists {
		if n, ok := manifestNum(desc.ManifestFilename); ok {
			if size, sum, err := manifestSum(fs, desc.ManifestFilename); err == nil {
				f.ManifestNum, f.ManifestSize, f.ManifestCRC = n, size, sum
			}
		}
	}
	return f
}
