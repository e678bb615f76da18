package outbox

import (
	"sync"
	"time"

	"github.com/riffdb/riffdb/deliverytype"
)

// Health states.
const (
	StateHealthy  = "healthy"
	StateDegraded = "degraded"
	StatePaused   = "paused"
	StateStopped  = "stopped"
)

// States lists every health state, in the order metrics report them.
var States = []string{StateHealthy, StateDegraded, StatePaused, StateStopped}

// healthOf returns the health state and reason a destination failure err
// moves the worker to: its class decides the state, its mark names the
// reason (deliverytype.ReasonOf).
func healthOf(err error) (string, deliverytype.Reason) {
	err = marked(err)
	var state string
	switch deliverytype.ClassOf(err) {
	case deliverytype.Stop:
		state = StateStopped
	case deliverytype.Refused:
		state = StatePaused
	default: // unavailable, capacity
		state = StateDegraded
	}
	return state, deliverytype.ReasonOf(err)
}

// Health is the outbox health of one database.
type Health struct {
	State string `json:"state"`
	// Reason is machine-readable (deliverytype's Reason* constants).
	Reason deliverytype.Reason `json:"reason"`
	Since  time.Time           `json:"since"`
	// Conflicts counts identity conflicts since start: different bytes
	// under an existing archive key. Each was dead-lettered.
	Conflicts uint64 `json:"conflicts"`
	// MissingRecords, with reason archive_lost_records, is how many
	// completed events the archive lost at least.
	MissingRecords int64 `json:"missing_records"`
}

// NoDestination is the health of a database without an outbox section:
// intents stay pending and health is degraded.
func NoDestination(since time.Time) Health {
	return Health{State: StateDegraded, Reason: deliverytype.ReasonNoDestination, Since: since}
}

type healthState struct {
	mu sync.Mutex
	h  Health
}

func (s *healthState) get() Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.h
}

// set moves to state/reason. A stopped worker stays stopped. An identity
// conflict keeps health degraded (identity_conflict) when it would otherwise
// be healthy: the operator must investigate the conflicting event.
func (s *healthState) set(state string, reason deliverytype.Reason, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h.State == StateStopped {
		return
	}
	if state == StateHealthy && s.h.Conflicts > 0 {
		state, reason = StateDegraded, deliverytype.ReasonIdentityConflict
	}
	if s.h.State != state || s.h.Reason != reason {
		s.h.State, s.h.Reason, s.h.Since = state, reason, now
	}
}

func (s *healthState) conflict(now time.Time) {
	s.mu.Lock()
	s.h.Conflicts++
	s.mu.Unlock()
	s.set(StateDegraded, deliverytype.ReasonIdentityConflict, now)
}

// missing records how many records the archive lost at least.
func (s *healthState) missing(n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h.State != StateStopped {
		s.h.MissingRecords = n
	}
}
