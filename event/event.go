package event

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// ErrMalformed is returned by every decoder in this package when its input is
// not a well-formed encoding. Callers treat it as corrupt content.
var ErrMalformed = errors.New("event: malformed encoding")

// DatabaseID is the 16-byte identity of a database, fixed when it is created
// (a UUIDv7). Its text form is 32 lowercase hexadecimal characters.
type DatabaseID [16]byte

// NewDatabaseID returns a fresh UUIDv7 identity for the time now.
func NewDatabaseID(now time.Time) (DatabaseID, error) {
	var id DatabaseID
	if _, err := rand.Read(id[6:]); err != nil {
		return id, fmt.Errorf("event: new database id: %w", err)
	}
	ms := uint64(now.UnixMilli())
	id[0], id[1], id[2] = byte(ms>>40), byte(ms>>32), byte(ms>>24)
	id[3], id[4], id[5] = byte(ms>>16), byte(ms>>8), byte(ms)
	id[6] = 0x70 | id[6]&0x0f // version 7
	id[8] = 0x80 | id[8]&0x3f // RFC 4122 variant
	return id, nil
}

// ParseDatabaseID parses the 32-hex-character text form.
func ParseDatabaseID(s string) (DatabaseID, error) {
	var id DatabaseID
	if len(s) != 32 {
		return id, fmt.Errorf("%w: database id must be 32 hexadecimal characters", ErrMalformed)
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, fmt.Errorf("%w: database id must be 32 hexadecimal characters", ErrMalformed)
	}
	return id, nil
}

// String returns the 32 lowercase hexadecimal characters of the identity.
func (d DatabaseID) String() string { return hex.EncodeToString(d[:]) }

// IDLen is the length of an encoded event identity.
const IDLen = 12

// ID identifies an event within one history incarnation: the commit sequence
// (nonzero) and the event's zero-based position within that commit.
type ID struct {
	Seq uint64
	Pos uint32
}

// Compare orders identities by sequence, then position.
func (a ID) Compare(b ID) int {
	switch {
	case a.Seq < b.Seq:
		return -1
	case a.Seq > b.Seq:
		return 1
	case a.Pos < b.Pos:
		return -1
	case a.Pos > b.Pos:
		return 1
	}
	return 0
}

// AppendBinary appends the 12-byte big-endian encoding, which sorts like Compare.
func (a ID) AppendBinary(b []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, a.Seq)
	return binary.BigEndian.AppendUint32(b, a.Pos)
}

// DecodeID decodes a 12-byte identity.
func DecodeID(b []byte) (ID, error) {
	if len(b) != IDLen {
		return ID{}, fmt.Errorf("%w: event id has %d bytes", ErrMalformed, len(b))
	}
	return ID{Seq: binary.BigEndian.Uint64(b), Pos: binary.BigEndian.Uint32(b[8:])}, nil
}

// String renders the identity as "seq.pos", for spans and logs.
func (a ID) String() string { return string(a.Append(make([]byte, 0, 24))) }

// Append appends the identity as String renders it to b.
func (a ID) Append(b []byte) []byte {
	b = strconv.AppendUint(b, a.Seq, 10)
	b = append(b, '.')
	return strconv.AppendUint(b, uint64(a.Pos), 10)
}

// KeyLen is the length of an encoded archive key.
const KeyLen = 16 + 8 + IDLen

// Key is the archive identity of an event: database identity, history
// incarnation and event identity. Its encoding sorts in that order.
type Key struct {
	Database    DatabaseID
	Incarnation uint64
	Event       ID
}

// AppendBinary appends the 36-byte encoding of the key.
func (k Key) AppendBinary(b []byte) []byte {
	b = append(b, k.Database[:]...)
	b = binary.BigEndian.AppendUint64(b, k.Incarnation)
	return k.Event.AppendBinary(b)
}

// Bytes returns the 36-byte encoding of the key.
func (k Key) Bytes() []byte { return k.AppendBinary(make([]byte, 0, KeyLen)) }

// DecodeKey decodes a 36-byte archive key.
func DecodeKey(b []byte) (Key, error) {
	if len(b) != KeyLen {
		return Key{}, fmt.Errorf("%w: archive key has %d bytes", ErrMalformed, len(b))
	}
	var k Key
	copy(k.Database[:], b[:16])
	k.Incarnation = binary.BigEndian.Uint64(b[16:24])
	id, err := DecodeID(b[24:])
	k.Event = id
	return k, err
}

// Limits on a stored event. They bound every decoder's allocations.
const (
	MaxTypeLen    = 255
	MaxPayloadLen = 1 << 20
)

// storedVersion is the first byte of every encoded stored event.
const storedVersion = 1

// Stored is the exact form of a committed event: its identity, its type, its
// canonical payload bytes, and the SHA-256 event hash over all three.
type Stored struct {
	ID      ID
	Type    string
	Payload []byte
	Hash    [32]byte
}

// NewStored builds a stored event and computes its hash.
func NewStored(id ID, typ string, payload []byte) (Stored, error) {
	if err := CheckLimits(typ, payload); err != nil {
		return Stored{}, err
	}
	s := Stored{ID: id, Type: typ, Payload: payload}
	s.Hash = Hash(id, typ, payload)
	return s, nil
}

// CheckLimits reports whether an event of this type and payload can be
// stored: the type is 1..MaxTypeLen bytes and the payload at most
// MaxPayloadLen bytes.
func CheckLimits(typ string, payload []byte) error {
	if typ == "" || len(typ) > MaxTypeLen {
		return fmt.Errorf("event: type must be 1..%d bytes", MaxTypeLen)
	}
	if len(payload) > MaxPayloadLen {
		return fmt.Errorf("event: payload exceeds %d bytes", MaxPayloadLen)
	}
	return nil
}

// Hash is the event hash: SHA-256 over the identity, the type (length-prefixed),
// the payload length and the payload.
func Hash(id ID, typ string, payload []byte) [32]byte { return hashBytes(id, []byte(typ), payload) }

// hashBytes is Hash of a type given as bytes.
func hashBytes(id ID, typ, payload []byte) [32]byte {
	h := sha256.New()
	var buf [IDLen + 2 + 4]byte
	b := id.AppendBinary(buf[:0])
	b = binary.BigEndian.AppendUint16(b, uint16(len(typ)))
	h.Write(b)
	h.Write(typ)
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(payload)))
	h.Write(n[:])
	h.Write(payload)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// EncodedLen is the length of the encoding of s.
func (s Stored) EncodedLen() int { return 1 + IDLen + 1 + len(s.Type) + 4 + len(s.Payload) + 32 }

// Encode returns the exact bytes of the stored event:
// version(1) ‖ id(12) ‖ typeLen(1) ‖ type ‖ payloadLen(4) ‖ payload ‖ hash(32).
func (s Stored) Encode() []byte { return s.AppendEncoding(make([]byte, 0, s.EncodedLen())) }

// AppendEncoding appends Encode's bytes to b.
func (s Stored) AppendEncoding(b []byte) []byte {
	b = slices.Grow(b, s.EncodedLen())
	b = append(b, storedVersion)
	b = s.ID.AppendBinary(b)
	b = append(b, byte(len(s.Type)))
	b = append(b, s.Type...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.Payload)))
	b = append(b, s.Payload...)
	return append(b, s.Hash[:]...)
}

// DecodeStored decodes and verifies an encoded stored event: the layout must
// be exact and the hash must match the content. The result does not alias b.
func DecodeStored(b []byte) (Stored, error) {
	s, err := viewStored(b)
	if err != nil {
		return Stored{}, err
	}
	s.Payload = bytes.Clone(s.Payload)
	return s, nil
}

// VerifyStored checks b as DecodeStored does and returns the event's
// identity, without copying the payload: for a reader that only validates
// (the archive's scans and scrub), which would otherwise copy every payload
// it reads only to drop it.
func VerifyStored(b []byte) (ID, error) {
	id, _, _, _, err := parseStored(b)
	return id, err
}

// viewStored decodes and verifies b; the payload of the result aliases b.
func viewStored(b []byte) (Stored, error) {
	id, typ, payload, hash, err := parseStored(b)
	if err != nil {
		return Stored{}, err
	}
	return Stored{ID: id, Type: string(typ), Payload: payload, Hash: hash}, nil
}

// parseStored decodes and verifies b; the type and payload alias b (a
// verification that only validates makes no string of the type).
func parseStored(b []byte) (id ID, typ, payload []byte, hash [32]byte, err error) {
	const fixed = 1 + IDLen + 1 + 4 + 32
	if len(b) < fixed || b[0] != storedVersion {
		return ID{}, nil, nil, hash, fmt.Errorf("%w: stored event header", ErrMalformed)
	}
	id, _ = DecodeID(b[1 : 1+IDLen])
	p := 1 + IDLen
	tl := int(b[p])
	p++
	if tl == 0 || len(b) < fixed+tl {
		return ID{}, nil, nil, hash, fmt.Errorf("%w: stored event type", ErrMalformed)
	}
	typ = b[p : p+tl : p+tl]
	p += tl
	pl := int(binary.BigEndian.Uint32(b[p:]))
	p += 4
	if pl > MaxPayloadLen || len(b) != p+pl+32 {
		return ID{}, nil, nil, hash, fmt.Errorf("%w: stored event payload length", ErrMalformed)
	}
	payload = b[p : p+pl : p+pl]
	copy(hash[:], b[p+pl:])
	if hash != hashBytes(id, typ, payload) {
		return ID{}, nil, nil, [32]byte{}, fmt.Errorf("%w: stored event hash mismatch", ErrMalformed)
	}
	return id, typ, payload, hash, nil
}
