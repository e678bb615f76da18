package primary

import (
	"fmt"
	"time"

	"github.com/riffdb/riffdb/event"
)

// IntentState is the delivery state of one outbox intent.
type IntentState uint8

// Intent states. Every transition is a compare-and-set against the exact
// prior state.
const (
	IntentPending IntentState = iota
	IntentRetryScheduled
	IntentDelivering
	IntentDeadLetter
)

// String returns pending, retry_scheduled, delivering or dead_letter.
func (s IntentState) String() string {
	switch s {
	case IntentPending:
		return "pending"
	case IntentRetryScheduled:
		return "retry_scheduled"
	case IntentDelivering:
		return "delivering"
	case IntentDeadLetter:
		return "dead_letter"
	}
	return fmt.Sprintf("IntentState(%d)", uint8(s))
}

// Intent is the undelivered-index entry of one committed event.
type Intent struct {
	Event         event.ID
	State         IntentState
	Attempts      uint32    // claims so far
	NextAttempt   time.Time // RetryScheduled: when due; zero otherwise
	LeaseDeadline time.Time // Delivering only
	CommittedAt   time.Time // commit time of the event (for delivery lag)
	TraceParent   string    // W3C traceparent of the committing command's span context ("" if none), for span links
	EncodedLen    int       // len of the stored event's exact bytes
	DeadReason    string    // DeadLetter only
	Redrives      uint32    // how often an operator redrove it from dead_letter (redrive.go)
	// LastFailure is the failure that ended its last unsuccessful attempt
	// (zero: none since it was committed).
	LastFailure Failure
}

// Failure is why a delivery attempt failed, in codes only (never a message,
// a path or a payload): the failure's class (unavailable, refused,
// capacity, conflict, stop) and its health reason (destination_unavailable,
// identity_conflict, …), each at most MaxFailureCodeLen bytes of [a-z_].
type Failure struct {
	At     time.Time
	Class  string
	Reason string
}

// MaxFailureCodeLen bounds a Failure's Class and Reason.
const MaxFailureCodeLen = 64

// SafeCode returns s when it is a code (lower-case letters and
// underscores, at most MaxFailureCodeLen bytes), as riffdb writes its
// failure classes, health reasons and dead-letter reasons, and "other"
// otherwise: text from elsewhere never passes as a code.
func SafeCode(s string) string {
	if s == "" || len(s) > MaxFailureCodeLen {
		return "other"
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && r != '_' {
			return "other"
		}
	}
	return s
}

// withFailure records f as in's last failure, unless f is zero.
func withFailure(in Intent, f Failure) Intent {
	if !f.At.IsZero() {
		in.LastFailure = Failure{At: f.At, Class: SafeCode(f.Class), Reason: SafeCode(f.Reason)}
	}
	return in
}

// sameState reports whether two intents hold the same mutable state.
func sameState(a, b Intent) bool {
	return a.Event == b.Event && a.State == b.State && a.Attempts == b.Attempts &&
		sameTime(a.NextAttempt, b.NextAttempt) && sameTime(a.LeaseDeadline, b.LeaseDeadline) &&
		a.DeadReason == b.DeadReason && a.Redrives == b.Redrives && a.LastFailure.Class == b.LastFailure.Class &&
		a.LastFailure.Reason == b.LastFailure.Reason && sameTime(a.LastFailure.At, b.LastFailure.At)
}
