package primary

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/riffdb/riffdb/event"
)

// Key layout. Every key starts with a one-byte namespace so that each record
// kind is one contiguous, separately boundable range.
//
// The namespaces are ordered for the LSM: everything a commit writes sorts
// after everything written before it, except the few keys of the namespaces
// after nsCommit. A flushed memtable therefore overlaps only those small
// namespaces of the older data (intents are deleted as they are delivered;
// the meta keys are a handful), and Pebble does not rewrite the history and
// events on every L0 compaction. (With history, events and intents in three
// separately ascending namespaces, every flush spanned the older history and
// intents, and each L0 compaction rewrote them: write amplification grew
// with the size of the history.) Within nsCommit the records of one commit
// are contiguous: its events, then its history record.
const (
	nsCommit = 'c' // c<seq u64>e<pos u32>      → exact stored event bytes
	//                 c<seq u64>h              → history record
	nsIntent = 'i' // i<event id 12>          → outbox intent (the undelivered index)
	nsIdem   = 'k' // k<idempotency key>      → idempotency record
	nsMeta   = 'm' // m<name>                 → meta values

	kindEvent   = 'e'
	kindHistory = 'h'

	historyKeyLen = 1 + 8 + 1
	eventKeyLen   = 1 + 8 + 1 + 4
)

var (
	keyIdentity    = []byte("m/identity")
	keyIncarnation = []byte("m/incarnation")
	keyLayout      = []byte("m/layout")
	keyCount       = []byte("m/undelivered")
	keyPruned      = []byte("m/pruned")
)

// layoutVersion is the key layout above, stored under keyLayout when the
// database is created. A store without it, or with a version this build
// does not know, is not opened: its keys would be misread.
//
// layoutExtendedIntents is the same layout with intents that may be of
// version 2 (intentVersionExtended: an intent with a recorded failure or
// redriven from dead_letter). The first write of such an intent moves the
// store to it in the same batch (casRewrite, casRedrive), so that a build
// that knows only intents of version 1 refuses the store as incompatible
// instead of reading the new intents as damage.
const (
	layoutVersion         = 2
	layoutExtendedIntents = 3
)

// knownLayout reports whether this build reads the key layout l.
func knownLayout(l uint64) bool { return l == layoutVersion || l == layoutExtendedIntents }

// commitPrefix is the first key of commit seq's records.
func commitPrefix(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(append(make([]byte, 0, eventKeyLen), nsCommit), seq)
}

func historyKey(seq uint64) []byte { return append(commitPrefix(seq), kindHistory) }

func eventKey(id event.ID) []byte { return appendEventKey(make([]byte, 0, eventKeyLen), id) }

// appendEventKey appends id's event key to b.
func appendEventKey(b []byte, id event.ID) []byte {
	b = binary.BigEndian.AppendUint64(append(b, nsCommit), id.Seq)
	return binary.BigEndian.AppendUint32(append(b, kindEvent), id.Pos)
}

// isHistoryKey reports whether a key of nsCommit is a history record's.
func isHistoryKey(k []byte) bool {
	return len(k) == historyKeyLen && k[0] == nsCommit && k[historyKeyLen-1] == kindHistory
}

func intentKey(id event.ID) []byte {
	return appendIntentKey(make([]byte, 0, intentKeyLen), id)
}

// intentKeyLen is the length of an intent's key.
const intentKeyLen = 1 + event.IDLen

// appendIntentKey appends id's intent key to b.
func appendIntentKey(b []byte, id event.ID) []byte { return id.AppendBinary(append(b, nsIntent)) }

func idemKey(k string) []byte { return appendIdemKey(nil, k) }

// appendIdemKey appends idemKey(k) to b.
func appendIdemKey(b []byte, k string) []byte { return append(append(b, nsIdem), k...) }

// prefixEnd returns the exclusive upper bound of a one-byte namespace.
func prefixEnd(ns byte) []byte { return []byte{ns + 1} }

// splitNamespaces ends every table Pebble writes, by flush or by
// compaction, at the end of a namespace, so that no table holds keys of two.
// A flushed memtable holds the newest commits and, after them, intents,
// idempotency records and meta values; as one table it overlaps every
// idempotency record (their keys are the clients') and the newest commits in
// the level below, and each L0 compaction rewrites them. Split, the commits
// overlap nothing older and only the other namespaces are merged. The
// policy itself is Pebble's default.
func splitNamespaces(start []byte) (pebble.SpanPolicy, []byte, error) {
	if len(start) == 0 || start[0] == 0xff {
		return pebble.SpanPolicy{}, nil, nil
	}
	return pebble.SpanPolicy{}, prefixEnd(start[0]), nil
}

func decodeIntentKey(k []byte) (event.ID, error) {
	if len(k) != 1+event.IDLen || k[0] != nsIntent {
		return event.ID{}, fmt.Errorf("%w: intent key", ErrCorrupt)
	}
	return event.DecodeID(k[1:])
}

// Limits on variable-length fields. They bound every decoder's allocations.
const (
	// MaxIdempotencyKeyLen is the longest accepted idempotency key.
	MaxIdempotencyKeyLen = 256
	maxTraceParentLen    = 255
	// MaxDeadReasonLen is the longest stored dead-letter reason; longer
	// reasons are truncated.
	MaxDeadReasonLen = 1024
	maxPlanIDLen     = 1024
)

func appendTime(b []byte, t time.Time) []byte {
	var n int64
	if !t.IsZero() {
		n = t.UnixNano()
	}
	return binary.BigEndian.AppendUint64(b, uint64(n))
}

func readTime(n uint64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(n))
}

func sameTime(a, b time.Time) bool {
	if a.IsZero() || b.IsZero() {
		return a.IsZero() == b.IsZero()
	}
	return a.UnixNano() == b.UnixNano()
}

// reader is a bounds-checked cursor over an encoding.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) take(n int) []byte {
	if r.bad || n < 0 || len(r.b) < n {
		r.bad = true
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() byte {
	if v := r.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if v := r.take(2); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if v := r.take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if v := r.take(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (r *reader) done() bool { return !r.bad && len(r.b) == 0 }

const (
	intentVersion         = 1
	intentVersionExtended = 2
)

// encodeIntent encodes the mutable delivery state of one event:
// version(1) ‖ state(1) ‖ attempts(4) ‖ nextAttempt(8) ‖ leaseDeadline(8) ‖
// committedAt(8) ‖ encodedLen(4) ‖ tpLen(1) ‖ traceparent ‖ reasonLen(2) ‖ reason,
// and, for an event with a recorded failure or redriven at least once
// (version 2 only), ‖ redrives(4) ‖ failedAt(8) ‖ classLen(1) ‖ class ‖
// failReasonLen(1) ‖ failReason. Times are Unix nanoseconds, 0 for the zero
// time. An intent that never failed keeps version 1, the bytes every build
// reads.
func encodeIntent(in Intent) []byte { return appendIntent(nil, in) }

// appendIntent appends encodeIntent's encoding of in to b.
func appendIntent(b []byte, in Intent) []byte {
	tp := in.TraceParent
	if len(tp) > maxTraceParentLen {
		tp = ""
	}
	reason := in.DeadReason
	if len(reason) > MaxDeadReasonLen {
		reason = reason[:MaxDeadReasonLen]
	}
	b = slices.Grow(b, 36+len(tp)+2+len(reason)+4)
	version := byte(intentVersion)
	f := in.LastFailure
	if in.Redrives > 0 || !f.At.IsZero() {
		version = intentVersionExtended
		f.Class, f.Reason = clip(f.Class, MaxFailureCodeLen), clip(f.Reason, MaxFailureCodeLen)
	}
	b = append(b, version, byte(in.State))
	b = binary.BigEndian.AppendUint32(b, in.Attempts)
	b = appendTime(b, in.NextAttempt)
	b = appendTime(b, in.LeaseDeadline)
	b = appendTime(b, in.CommittedAt)
	b = binary.BigEndian.AppendUint32(b, uint32(in.EncodedLen))
	b = append(b, byte(len(tp)))
	b = append(b, tp...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(reason)))
	b = append(b, reason...)
	if version == intentVersionExtended {
		b = binary.BigEndian.AppendUint32(b, in.Redrives)
		b = appendTime(b, f.At)
		b = append(append(b, byte(len(f.Class))), f.Class...)
		b = append(append(b, byte(len(f.Reason))), f.Reason...)
	}
	return b
}

// clip returns s cut to at most n bytes.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// decodeIntent decodes an intent value for the event id.
func decodeIntent(id event.ID, v []byte) (Intent, error) { return decodeIntentLike(id, v, &Intent{}) }

// decodeIntentLike is decodeIntent for a caller that expects like: a
// string field whose bytes equal like's is like's string, not a new one (a
// compare-and-set reads back the state it was given, traceparent and all).
func decodeIntentLike(id event.ID, v []byte, like *Intent) (Intent, error) {
	r := reader{b: v}
	version := r.u8()
	if version != intentVersion && version != intentVersionExtended {
		return Intent{}, fmt.Errorf("%w: intent version", ErrCorrupt)
	}
	in := Intent{Event: id, State: IntentState(r.u8())}
	in.Attempts = r.u32()
	in.NextAttempt = readTime(r.u64())
	in.LeaseDeadline = readTime(r.u64())
	in.CommittedAt = readTime(r.u64())
	n := r.u32()
	in.EncodedLen = int(n)
	in.TraceParent = stringLike(r.take(int(r.u8())), like.TraceParent)
	rl := int(r.u16())
	if rl > MaxDeadReasonLen {
		return Intent{}, fmt.Errorf("%w: intent reason length", ErrCorrupt)
	}
	in.DeadReason = stringLike(r.take(rl), like.DeadReason)
	if version == intentVersionExtended {
		in.Redrives = r.u32()
		in.LastFailure.At = readTime(r.u64())
		in.LastFailure.Class = stringLike(r.take(int(r.u8())), like.LastFailure.Class)
		in.LastFailure.Reason = stringLike(r.take(int(r.u8())), like.LastFailure.Reason)
		if in.Redrives == 0 && in.LastFailure.At.IsZero() {
			return Intent{}, fmt.Errorf("%w: intent of version 2 with neither redrives nor a failure", ErrCorrupt)
		}
		if len(in.LastFailure.Class) > MaxFailureCodeLen || len(in.LastFailure.Reason) > MaxFailureCodeLen {
			return Intent{}, fmt.Errorf("%w: intent failure length", ErrCorrupt)
		}
	}
	if !r.done() || in.State > IntentDeadLetter || n > 1<<30 {
		return Intent{}, fmt.Errorf("%w: intent layout", ErrCorrupt)
	}
	return in, nil
}

// stringLike returns s if b holds its bytes, else b as a new string.
func stringLike(b []byte, s string) string {
	if string(b) == s {
		return s
	}
	return string(b)
}

const historyVersion = 1

// historyRecord is the durable record of one command commit.
type historyRecord struct {
	Seq         uint64
	CommittedAt time.Time
	// Cum is the total history bytes (keys and values of history records
	// and events) of every commit up to and including this one.
	Cum       uint64
	PlanID    string
	IdemKey   string
	InputHash [32]byte
	Events    uint32 // event ids are (Seq, 0..Events-1)
}

// encodeHistory: version(1) ‖ seq(8) ‖ committedAt(8) ‖ cum(8) ‖ planLen(2) ‖
// plan ‖ keyLen(2) ‖ key ‖ inputHash(32) ‖ events(4).
func encodeHistory(h historyRecord) []byte { return appendHistory(make([]byte, 0, historyLen(h)), h) }

// appendHistory appends encodeHistory's encoding of h to b.
func appendHistory(b []byte, h historyRecord) []byte {
	b = slices.Grow(b, historyLen(h))
	b = append(b, historyVersion)
	b = binary.BigEndian.AppendUint64(b, h.Seq)
	b = appendTime(b, h.CommittedAt)
	b = binary.BigEndian.AppendUint64(b, h.Cum)
	b = binary.BigEndian.AppendUint16(b, uint16(len(h.PlanID)))
	b = append(b, h.PlanID...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(h.IdemKey)))
	b = append(b, h.IdemKey...)
	b = append(b, h.InputHash[:]...)
	return binary.BigEndian.AppendUint32(b, h.Events)
}

func historyLen(h historyRecord) int {
	return 1 + 8 + 8 + 8 + 2 + len(h.PlanID) + 2 + len(h.IdemKey) + 32 + 4
}

func decodeHistory(v []byte) (historyRecord, error) {
	r := reader{b: v}
	if r.u8() != historyVersion {
		return historyRecord{}, fmt.Errorf("%w: history version", ErrCorrupt)
	}
	var h historyRecord
	h.Seq = r.u64()
	h.CommittedAt = readTime(r.u64())
	h.Cum = r.u64()
	pl := int(r.u16())
	if pl > maxPlanIDLen {
		return historyRecord{}, fmt.Errorf("%w: history plan id", ErrCorrupt)
	}
	h.PlanID = string(r.take(pl))
	kl := int(r.u16())
	if kl > MaxIdempotencyKeyLen {
		return historyRecord{}, fmt.Errorf("%w: history key", ErrCorrupt)
	}
	h.IdemKey = string(r.take(kl))
	copy(h.InputHash[:], r.take(32))
	h.Events = r.u32()
	if !r.done() || h.Seq == 0 {
		return historyRecord{}, fmt.Errorf("%w: history layout", ErrCorrupt)
	}
	return h, nil
}

// idemRecord maps an idempotency key to its commit: seq(8) ‖ events(4) ‖ inputHash(32).
type idemRecord struct {
	Seq       uint64
	Events    uint32
	InputHash [32]byte
}

func encodeIdem(r idemRecord) []byte { return appendIdem(make([]byte, 0, 44), r) }

// appendIdem appends encodeIdem's encoding of r to b.
func appendIdem(b []byte, r idemRecord) []byte {
	b = binary.BigEndian.AppendUint64(b, r.Seq)
	b = binary.BigEndian.AppendUint32(b, r.Events)
	return append(b, r.InputHash[:]...)
}

func decodeIdem(v []byte) (idemRecord, error) {
	if len(v) != 44 {
		return idemRecord{}, fmt.Errorf("%w: idempotency record", ErrCorrupt)
	}
	var r idemRecord
	r.Seq = binary.BigEndian.Uint64(v)
	r.Events = binary.BigEndian.Uint32(v[8:])
	copy(r.InputHash[:], v[12:])
	return r, nil
}

// prunedMark records how far history has been pruned: first retained seq and
// the cumulative history bytes of every pruned commit.
type prunedMark struct {
	First uint64
	Cum   uint64
}

func encodePruned(p prunedMark) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 16), p.First)
	return binary.BigEndian.AppendUint64(b, p.Cum)
}

func decodePruned(v []byte) (prunedMark, error) {
	if len(v) != 16 {
		return prunedMark{}, fmt.Errorf("%w: pruned mark", ErrCorrupt)
	}
	return prunedMark{First: binary.BigEndian.Uint64(v), Cum: binary.BigEndian.Uint64(v[8:])}, nil
}

func encodeU64(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

func decodeU64(v []byte) (uint64, error) {
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: counter", ErrCorrupt)
	}
	return binary.BigEndian.Uint64(v), nil
}
