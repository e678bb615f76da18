package archive

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/riffdb/riffdb/event"
)

// On-disk layout (see doc.go). Every Pebble key starts with a one-byte
// prefix: metadata keys with 'm', records with 'r', so records sort apart
// from metadata and a record scan is the single range ['r', 's').
const (
	prefixMeta   = 'm'
	prefixRecord = 'r'
)

var (
	keyFormat     = []byte{prefixMeta, 'f', 'o', 'r', 'm', 'a', 't'}
	keyBinding    = []byte{prefixMeta, 'b', 'i', 'n', 'd', 'i', 'n', 'g'}
	keyAccounting = []byte{prefixMeta, 'a', 'c', 'c', 'o', 'u', 'n', 't', 'i', 'n', 'g'}
	keyCheckpoint = []byte{prefixMeta, 'c', 'h', 'e', 'c', 'k', 'p', 'o', 'i', 'n', 't'}
	// keyValidated holds when the whole archive was last validated
	// (validation.go); archive format 2 on.
	keyValidated = []byte{prefixMeta, 'v', 'a', 'l', 'i', 'd', 'a', 't', 'e', 'd'}

	recordLower = []byte{prefixRecord}
	recordUpper = []byte{prefixRecord + 1}
)

// FormatMajorVersion is the Pebble format the archive is created with and the
// oldest it opens. It is pinned (never pebble.FormatNewest) so that a library
// upgrade cannot silently ratchet an archive, and it is at least
// pebble.FormatWALSyncChunks, from which on WAL corruption is detected.
const FormatMajorVersion = pebble.FormatValueSeparation

// checkEngineFormat refuses a storage-engine format outside
// [FormatMajorVersion, pebble.FormatNewest] with ErrIncompatibleFormat. Open
// and Inspect both apply it to the format that pebble.Peek reports.
func checkEngineFormat(v pebble.FormatMajorVersion) error {
	if v < FormatMajorVersion || v > pebble.FormatNewest {
		return fmt.Errorf("%w: storage engine format %d (supported %d..%d)",
			ErrIncompatibleFormat, v, FormatMajorVersion, pebble.FormatNewest)
	}
	return nil
}

// formatMagic and formatVersion make up the archive's own format marker.
//
// Format history. 1: records, the binding, the accounting and (added
// without a new version, which made a riffdb older than the checkpoint
// refuse such an archive as corrupt: an unknown metadata key) the
// validated-prefix checkpoint. 2: format 1 and the time of the last full
// validation (keyValidated). A riffdb that reads only format 1 refuses a
// format-2 archive with ErrIncompatibleFormat.
//
// Upgrade path: Open and Inspect read every format from minFormatVersion
// to formatVersion. Open writes a format-1 archive's marker as format 2 in
// the same synced batch as the first keyValidated value (a full validation
// at a start, or a complete scrub pass), never before the archive was
// validated; until then the archive stays at format 1, readable by an
// older riffdb. The upgrade is one-way: once at format 2, an older riffdb
// refuses the archive as incompatible_format.
const (
	formatMagic = "RIFFARCH"
	// formatVersion is the format this riffdb writes, and the newest it
	// reads.
	formatVersion = 2
	// minFormatVersion is the oldest format this riffdb reads.
	minFormatVersion = 1
	// recordVersion is the first byte of every encoded record value.
	recordVersion = 1
	// cursorVersion is the first byte of every cursor (version 1 was not
	// bound to an archive).
	cursorVersion = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func checksum(parts ...[]byte) uint32 {
	var c uint32
	for _, p := range parts {
		c = crc32.Update(c, castagnoli, p)
	}
	return c
}

// recordKey returns the Pebble key of an archived event.
func recordKey(k event.Key) []byte {
	return k.AppendBinary(append(make([]byte, 0, 1+event.KeyLen), prefixRecord))
}

// Charge is the quota charge of archiving record under key: the length of the
// canonical 36-byte key plus the length of the complete encoded value
// (version, stored event, checksum). The one-byte Pebble key prefix, Pebble's
// own overhead, allocated blocks and caches are not charged.
func Charge(key event.Key, record []byte) int64 {
	_ = key // every key encodes to event.KeyLen bytes
	return int64(event.KeyLen + encodedValueLen(len(record)))
}

func encodedValueLen(recordLen int) int { return 1 + recordLen + 4 }

// encodeValue encodes a record: version ‖ stored-event bytes ‖ CRC32C over
// the canonical key, the version and the stored-event bytes. Covering the key
// detects a value that ended up under another key.
func encodeValue(key event.Key, record []byte) []byte {
	return appendValue(make([]byte, 0, encodedValueLen(len(record))), key.Bytes(), record)
}

// appendValue appends encodeValue's encoding of record to dst, given the
// canonical key's bytes.
func appendValue(dst, keyBytes, record []byte) []byte {
	start := len(dst)
	dst = append(dst, recordVersion)
	dst = append(dst, record...)
	return binary.BigEndian.AppendUint32(dst, checksum(keyBytes, dst[start:]))
}

// decodeValue verifies an encoded value under its canonical key and returns
// the stored-event bytes (aliasing v) and the decoded, hash-verified event.
func decodeValue(key event.Key, v []byte) ([]byte, event.Stored, error) {
	rec, err := unframeValue(key, v)
	if err != nil {
		return nil, event.Stored{}, err
	}
	st, err := event.DecodeStored(rec)
	if err != nil {
		return nil, event.Stored{}, fmt.Errorf("%w: record %s: stored event does not verify", ErrCorrupt, key.Event)
	}
	if st.ID != key.Event {
		return nil, event.Stored{}, fmt.Errorf("%w: record %s: event identity differs from its key", ErrCorrupt, key.Event)
	}
	return rec, st, nil
}

// checkValue validates a value exactly as decodeValue does and returns the
// stored-event bytes (aliasing v), without copying the payload: what a scan
// that only validates needs (Reader's scans, the scrub), which would
// otherwise copy every payload it reads only to drop it, and Accept's
// comparison of a replay with the record it finds.
func checkValue(key event.Key, v []byte) ([]byte, error) {
	rec, err := unframeValue(key, v)
	if err != nil {
		return nil, err
	}
	id, err := event.VerifyStored(rec)
	if err != nil {
		return nil, fmt.Errorf("%w: record %s: stored event does not verify", ErrCorrupt, key.Event)
	}
	if id != key.Event {
		return nil, fmt.Errorf("%w: record %s: event identity differs from its key", ErrCorrupt, key.Event)
	}
	return rec, nil
}

// unframeValue checks a value's version and checksum under key and returns
// the stored-event bytes it frames (aliasing v).
func unframeValue(key event.Key, v []byte) ([]byte, error) {
	if len(v) < encodedValueLen(0) || v[0] != recordVersion {
		return nil, fmt.Errorf("%w: record %s: bad value header", ErrCorrupt, key.Event)
	}
	body := v[:len(v)-4]
	if binary.BigEndian.Uint32(v[len(v)-4:]) != checksum(key.Bytes(), body) {
		return nil, fmt.Errorf("%w: record %s: checksum mismatch", ErrCorrupt, key.Event)
	}
	return body[1:], nil
}

// encodeMarker encodes the format marker: magic ‖ version(u16) ‖ CRC32C.
func encodeMarker(version uint16) []byte {
	b := append([]byte(formatMagic), byte(version>>8), byte(version))
	return binary.BigEndian.AppendUint32(b, checksum(b))
}

// decodeMarker returns the format version of a marker value. A foreign magic
// or a version outside [minFormatVersion, formatVersion] is
// ErrIncompatibleFormat; a damaged marker of the known layout is
// ErrCorrupt.
func decodeMarker(b []byte) (uint16, error) {
	const n = len(formatMagic) + 2 + 4
	if len(b) < len(formatMagic)+2 || string(b[:len(formatMagic)]) != formatMagic {
		return 0, fmt.Errorf("%w: not an archive format marker", ErrIncompatibleFormat)
	}
	v := binary.BigEndian.Uint16(b[len(formatMagic):])
	known := v >= minFormatVersion && v <= formatVersion
	if len(b) != n || binary.BigEndian.Uint32(b[n-4:]) != checksum(b[:n-4]) {
		if !known {
			return 0, fmt.Errorf("%w: archive format version %d", ErrIncompatibleFormat, v)
		}
		return 0, fmt.Errorf("%w: format marker checksum", ErrCorrupt)
	}
	if !known {
		return 0, fmt.Errorf("%w: archive format version %d (supported: %d..%d)", ErrIncompatibleFormat, v, minFormatVersion, formatVersion)
	}
	return v, nil
}

// encodeValidated encodes the time of the last full validation:
// UnixNano(u64) ‖ CRC32C.
func encodeValidated(t time.Time) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, validatedLen), uint64(t.UnixNano()))
	return binary.BigEndian.AppendUint32(b, checksum(b))
}

const validatedLen = 8 + 4

func decodeValidated(b []byte) (time.Time, error) {
	if len(b) != validatedLen || binary.BigEndian.Uint32(b[8:]) != checksum(b[:8]) {
		return time.Time{}, fmt.Errorf("%w: last full validation value", ErrCorrupt)
	}
	ns := int64(binary.BigEndian.Uint64(b))
	if ns <= 0 {
		return time.Time{}, fmt.Errorf("%w: last full validation value out of range", ErrCorrupt)
	}
	return time.Unix(0, ns), nil
}

// encodeBinding encodes the database binding: id(16) ‖ CRC32C.
func encodeBinding(id event.DatabaseID) []byte {
	return binary.BigEndian.AppendUint32(append([]byte(nil), id[:]...), checksum(id[:]))
}

func decodeBinding(b []byte) (event.DatabaseID, error) {
	var id event.DatabaseID
	if len(b) != len(id)+4 || binary.BigEndian.Uint32(b[len(id):]) != checksum(b[:len(id)]) {
		return id, fmt.Errorf("%w: binding value", ErrCorrupt)
	}
	copy(id[:], b)
	return id, nil
}

// accounting is the durable record count and Σ charges.
type accounting struct {
	Records      int64
	EncodedBytes int64
}

// encodeAccounting encodes count(u64) ‖ bytes(u64) ‖ CRC32C.
func encodeAccounting(a accounting) []byte {
	return appendAccounting(make([]byte, 0, accountingLen), a)
}

const accountingLen = 8 + 8 + 4

// appendAccounting appends encodeAccounting's encoding of a to dst.
func appendAccounting(dst []byte, a accounting) []byte {
	start := len(dst)
	dst = binary.BigEndian.AppendUint64(dst, uint64(a.Records))
	dst = binary.BigEndian.AppendUint64(dst, uint64(a.EncodedBytes))
	return binary.BigEndian.AppendUint32(dst, checksum(dst[start:]))
}

func decodeAccounting(b []byte) (accounting, error) {
	if len(b) != accountingLen || binary.BigEndian.Uint32(b[16:]) != checksum(b[:16]) {
		return accounting{}, fmt.Errorf("%w: accounting value", ErrCorrupt)
	}
	a := accounting{Records: int64(binary.BigEndian.Uint64(b)), EncodedBytes: int64(binary.BigEndian.Uint64(b[8:]))}
	if a.Records < 0 || a.EncodedBytes < 0 {
		return accounting{}, fmt.Errorf("%w: accounting value out of range", ErrCorrupt)
	}
	return a, nil
}

// checkpoint is the validated prefix (see checkpoint.go): every record
// whose key sorts at or before key, acct.Records of them holding
// acct.EncodedBytes of charges. The zero checkpoint (no records) means none.
type checkpoint struct {
	key  event.Key
	acct accounting
}

// encodeCheckpoint encodes key(36) ‖ count(u64) ‖ bytes(u64) ‖ CRC32C.
func encodeCheckpoint(c checkpoint) []byte {
	b := make([]byte, 0, checkpointLen)
	b = c.key.AppendBinary(b)
	b = binary.BigEndian.AppendUint64(b, uint64(c.acct.Records))
	b = binary.BigEndian.AppendUint64(b, uint64(c.acct.EncodedBytes))
	return binary.BigEndian.AppendUint32(b, checksum(b))
}

const checkpointLen = event.KeyLen + 8 + 8 + 4

func decodeCheckpoint(b []byte) (checkpoint, error) {
	if len(b) != checkpointLen || binary.BigEndian.Uint32(b[checkpointLen-4:]) != checksum(b[:checkpointLen-4]) {
		return checkpoint{}, fmt.Errorf("%w: checkpoint value", ErrCorrupt)
	}
	k, err := event.DecodeKey(b[:event.KeyLen])
	if err != nil {
		return checkpoint{}, fmt.Errorf("%w: checkpoint key", ErrCorrupt)
	}
	a := accounting{Records: int64(binary.BigEndian.Uint64(b[event.KeyLen:])), EncodedBytes: int64(binary.BigEndian.Uint64(b[event.KeyLen+8:]))}
	if a.Records <= 0 || a.EncodedBytes <= 0 {
		return checkpoint{}, fmt.Errorf("%w: checkpoint value out of range", ErrCorrupt)
	}
	return checkpoint{key: k, acct: a}, nil
}

// archiveID identifies one archive instance and its format: a digest of the
// archive format, the database binding and the store directory's instance
// (storeInstance: its inode and birth time on the real filesystem; nothing
// on a test filesystem). Cursors carry it, so that a cursor is refused by
// every other archive, including another archive of the same database (a
// copy, or one created again in the same place).
type archiveID [16]byte

func makeArchiveID(binding event.DatabaseID, instance []byte) archiveID {
	h := sha256.New()
	h.Write([]byte(formatMagic))
	h.Write([]byte{formatVersion >> 8, formatVersion & 0xff})
	h.Write(binding[:])
	h.Write(instance)
	var id archiveID
	copy(id[:], h.Sum(nil))
	return id
}

// Cursor is an opaque, resumable position of a Reader: the page after it
// starts with the first record whose key sorts after the cursor's key. A nil
// or empty cursor means "from the beginning". It is bound to the archive
// that issued it (and to its format): any other archive refuses it with
// ErrInvalidCursor. Its text form (MarshalText) is unpadded base64url, safe
// for JSON and command lines.
type Cursor []byte

// cursor layout: version(1) ‖ archiveID(16) ‖ key(36) ‖ CRC32C.
const cursorLen = 1 + len(archiveID{}) + event.KeyLen + 4

func newCursor(id archiveID, k event.Key) Cursor {
	b := make([]byte, 0, cursorLen)
	b = append(b, cursorVersion)
	b = append(b, id[:]...)
	b = k.AppendBinary(b)
	return binary.BigEndian.AppendUint32(b, checksum(b))
}

// decode checks the cursor's layout, version and checksum. ok is false for
// an empty cursor.
func (c Cursor) decode() (id archiveID, k event.Key, ok bool, err error) {
	if len(c) == 0 {
		return id, k, false, nil
	}
	if c[0] != cursorVersion {
		return id, k, false, fmt.Errorf("%w: cursor version %d is not supported (this version issues %d); start the scan again",
			ErrInvalidCursor, c[0], cursorVersion)
	}
	if len(c) != cursorLen || binary.BigEndian.Uint32(c[cursorLen-4:]) != checksum(c[:cursorLen-4]) {
		return id, k, false, fmt.Errorf("%w: the cursor is damaged or truncated", ErrInvalidCursor)
	}
	copy(id[:], c[1:])
	k, err = event.DecodeKey(c[1+len(id) : 1+len(id)+event.KeyLen])
	if err != nil {
		return id, k, false, fmt.Errorf("%w: the cursor is damaged", ErrInvalidCursor)
	}
	return id, k, true, nil
}

// key decodes the cursor for the archive id. ok is false for an empty
// cursor; a cursor of another archive is ErrInvalidCursor.
func (c Cursor) key(id archiveID) (k event.Key, ok bool, err error) {
	got, k, ok, err := c.decode()
	if err != nil || !ok {
		return k, ok, err
	}
	if got != id {
		return k, false, errForeignCursor
	}
	return k, true, nil
}

var errForeignCursor = fmt.Errorf("%w: the cursor was issued by another archive (another database's, or another copy or instance of this database's archive)", ErrInvalidCursor)

// MarshalText encodes the cursor as unpadded base64url.
func (c Cursor) MarshalText() ([]byte, error) {
	out := make([]byte, base64.RawURLEncoding.EncodedLen(len(c)))
	base64.RawURLEncoding.Encode(out, c)
	return out, nil
}

// decodeCursorText decodes the text of a cursor (a page cursor or a step
// cursor): unpadded base64url as MarshalText writes it, and nothing else.
// encoding/base64 skips CR and LF anywhere in its input and, unless
// strict, ignores the unused low bits of the last character, so several
// texts would decode to one cursor; every byte outside the alphabet is
// refused first, and the decoding is strict.
func decodeCursorText(text []byte) ([]byte, bool) {
	for _, c := range text {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return nil, false
		}
	}
	b := make([]byte, base64.RawURLEncoding.DecodedLen(len(text)))
	n, err := base64.RawURLEncoding.Strict().Decode(b, text)
	if err != nil {
		return nil, false
	}
	return b[:n], true
}

// UnmarshalText decodes and validates a cursor's text form. Empty text is the
// start cursor. Anything that is not a cursor produced by MarshalText is
// ErrInvalidCursor.
func (c *Cursor) UnmarshalText(text []byte) error {
	if len(text) == 0 {
		*c = nil
		return nil
	}
	b, ok := decodeCursorText(text)
	if !ok {
		return fmt.Errorf("%w: the cursor is not base64url text", ErrInvalidCursor)
	}
	cur := Cursor(b)
	if _, _, _, err := cur.decode(); err != nil {
		return err
	}
	*c = bytes.Clone(cur)
	return nil
}
