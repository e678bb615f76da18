package archive

import (
	"crypto/hmac"
	"encoding/base64"
	"encoding/binary"
	"fmt"

	"github.com/riffdb/riffdb/event"
)

// IncarnationCount is how many archived records belong to one history
// incarnation (the incarnation part of their key, event.Key).
type IncarnationCount struct {
	Incarnation uint64
	Records     int64
}

// maxCursorIncarnations bounds the incarnation table a step cursor carries
// (an incarnation changes only at a destructive restore).
const maxCursorIncarnations = 4096

// stepState is what a stepped inspection carries from one step to the next
// in InspectReport.NextCursor: the archive's identity, the accounting seen
// at the first step, the running totals and the position.
type stepState struct {
	id             archiveID
	acct           accounting // at the first step
	count          bool       // CountIncarnations was set at the first step
	steps          int
	pages          int64
	records, bytes int64
	incs           []IncarnationCount // ascending, with count
	last           event.Key          // the last record scanned
}

// step cursor layout: 'I' ‖ version(1) ‖ archiveID(16) ‖ flags(1) ‖
// last key(36) ‖ accounting records(8) bytes(8) ‖ steps(4) ‖ pages(8) ‖
// records(8) ‖ bytes(8) ‖ n(2) ‖ n × (incarnation(8) records(8)) ‖
// HMAC-SHA256 of everything before it under the archive's cursor key
// (cursorkey.go). Version 1 ended in a CRC32C, which anyone could
// recompute after editing the totals; it is refused.
const (
	stepCursorTag     = 'I'
	stepCursorVersion = 2
	stepCursorFixed   = 2 + len(archiveID{}) + 1 + event.KeyLen + 16 + 4 + 8 + 16 + 2 + cursorMACLen
)

// encode returns the cursor text, authenticated under key.
func (s *stepState) encode(key cursorKey) string {
	b := make([]byte, 0, stepCursorFixed+16*len(s.incs))
	b = append(b, stepCursorTag, stepCursorVersion)
	b = append(b, s.id[:]...)
	var flags byte
	if s.count {
		flags = 1
	}
	b = append(b, flags)
	b = s.last.AppendBinary(b)
	b = binary.BigEndian.AppendUint64(b, uint64(s.acct.Records))
	b = binary.BigEndian.AppendUint64(b, uint64(s.acct.EncodedBytes))
	b = binary.BigEndian.AppendUint32(b, uint32(s.steps))
	b = binary.BigEndian.AppendUint64(b, uint64(s.pages))
	b = binary.BigEndian.AppendUint64(b, uint64(s.records))
	b = binary.BigEndian.AppendUint64(b, uint64(s.bytes))
	b = binary.BigEndian.AppendUint16(b, uint16(len(s.incs)))
	for _, ic := range s.incs {
		b = binary.BigEndian.AppendUint64(b, ic.Incarnation)
		b = binary.BigEndian.AppendUint64(b, uint64(ic.Records))
	}
	b = append(b, key.mac(b)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

func errDamagedStepCursor() error {
	return fmt.Errorf("%w: the cursor is damaged or truncated (pass the next_cursor of the previous step exactly)", ErrInvalidCursor)
}

// parseStepCursor decodes a step cursor's text and checks its tag and
// version, which needs no key: Inspect runs it before it opens the
// archive. Every defect is ErrInvalidCursor.
func parseStepCursor(text string) ([]byte, error) {
	b, ok := decodeCursorText([]byte(text))
	if !ok {
		return nil, fmt.Errorf("%w: the cursor is not base64url text", ErrInvalidCursor)
	}
	if len(b) < 2 || b[0] != stepCursorTag {
		return nil, fmt.Errorf("%w: not an inspection cursor", ErrInvalidCursor)
	}
	if b[1] != stepCursorVersion {
		return nil, fmt.Errorf("%w: inspection cursor version %d is not supported (this version issues %d); start the scan again",
			ErrInvalidCursor, b[1], stepCursorVersion)
	}
	return b, nil
}

// decodeStepState decodes and checks a step cursor's text, authenticated
// under key: a cursor that was not issued under key exactly as it is, or
// that does not decode, is ErrInvalidCursor.
func decodeStepState(text string, key cursorKey) (*stepState, error) {
	b, err := parseStepCursor(text)
	if err != nil {
		return nil, err
	}
	if len(b) < stepCursorFixed || (len(b)-stepCursorFixed)%16 != 0 {
		return nil, errDamagedStepCursor()
	}
	body := b[:len(b)-cursorMACLen]
	if !hmac.Equal(b[len(body):], key.mac(body)) {
		return nil, fmt.Errorf("%w: the cursor was not issued by this archive as it is (edited, damaged or truncated); "+
			"pass the next_cursor of the previous step exactly, or start the scan again", ErrInvalidCursor)
	}
	s := &stepState{}
	p := b[2:]
	copy(s.id[:], p)
	p = p[len(s.id):]
	if p[0] > 1 {
		return nil, errDamagedStepCursor()
	}
	s.count = p[0] == 1
	if s.last, err = event.DecodeKey(p[1 : 1+event.KeyLen]); err != nil {
		return nil, errDamagedStepCursor()
	}
	p = p[1+event.KeyLen:]
	u64 := func() int64 { v := int64(binary.BigEndian.Uint64(p)); p = p[8:]; return v }
	s.acct.Records, s.acct.EncodedBytes = u64(), u64()
	s.steps = int(binary.BigEndian.Uint32(p))
	p = p[4:]
	s.pages, s.records, s.bytes = u64(), u64(), u64()
	n := int(binary.BigEndian.Uint16(p))
	p = p[2:]
	if n != (len(p)-cursorMACLen)/16 || s.steps < 1 || s.pages < 1 || s.records < 1 || s.bytes < 1 ||
		s.acct.Records < 0 || s.acct.EncodedBytes < 0 || (n > 0) != s.count {
		return nil, errDamagedStepCursor()
	}
	var sum int64
	for i := 0; i < n; i++ {
		ic := IncarnationCount{Incarnation: binary.BigEndian.Uint64(p), Records: int64(binary.BigEndian.Uint64(p[8:]))}
		p = p[16:]
		if ic.Records < 1 || (i > 0 && ic.Incarnation <= s.incs[i-1].Incarnation) {
			return nil, errDamagedStepCursor()
		}
		sum += ic.Records
		s.incs = append(s.incs, ic)
	}
	if s.count && (sum != s.records || s.incs[n-1].Incarnation != s.last.Incarnation) {
		return nil, errDamagedStepCursor()
	}
	return s, nil
}

// countRecords adds the records of a page to the incarnation table. Keys
// come in ascending order, incarnation first, so the table stays sorted
// and only ever grows at its end.
func countRecords(incs []IncarnationCount, recs []Record) ([]IncarnationCount, error) {
	for _, r := range recs {
		if n := len(incs); n > 0 && incs[n-1].Incarnation == r.Key.Incarnation {
			incs[n-1].Records++
			continue
		}
		if len(incs) == maxCursorIncarnations {
			return incs, fmt.Errorf("%w: the archive holds more than %d history incarnations; inspect without counting them",
				ErrInvalidArgument, maxCursorIncarnations)
		}
		incs = append(incs, IncarnationCount{Incarnation: r.Key.Incarnation, Records: 1})
	}
	return incs, nil
}
