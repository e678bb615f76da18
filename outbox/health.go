package outbox

import (
	"sync"
	"time"
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

// Health reasons (machine-readable).
const (
	ReasonNone                    = ""
	ReasonStarting                = "starting"
	ReasonNoDestination           = "no_destination"
	ReasonStartupValidationFailed = "startup_validation_failed"
	ReasonDestinationUnavailable  = "destination_unavailable"
	ReasonCapacityExhausted       = "capacity_exhausted"
	ReasonIdentityConflict        = "identity_conflict"
	ReasonDestinationRefused      = "destination_refused"
	ReasonBindingChanged          = "binding_changed"
	ReasonIncompatibleFormat      = "incompatible_format"
	ReasonCorruptContent          = "corrupt_content"
	// ReasonArchiveLostRecords: the archive lost events that were completed
	// (Health.MissingRecords says how many at least).
	ReasonArchiveLostRecords = "archive_lost_records"
	// ReasonHistoryBehindArchive: the archive holds events beyond the
	// primary's last commit; restore with `riffdb database restore`, never
	// by copying files back.
	ReasonHistoryBehindArchive = "history_behind_archive"
)

// Reasons lists every health reason but ReasonNone, in the order metrics
// report them (riffdb.outbox.health.reason).
var Reasons = []string{ReasonStarting, ReasonNoDestination, ReasonStartupValidationFailed,
	ReasonDestinationUnavailable, ReasonCapacityExhausted, ReasonIdentityConflict,
	ReasonDestinationRefused, ReasonBindingChanged, ReasonIncompatibleFormat, ReasonCorruptContent,
	ReasonArchiveLostRecords, ReasonHistoryBehindArchive}

// Health is the outbox health of one database.
type Health struct {
	State  string    `json:"state"`
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
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
	return Health{State: StateDegraded, Reason: ReasonNoDestination, Since: since}
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
func (s *healthState) set(state, reason string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h.State == StateStopped {
		return
	}
	if state == StateHealthy && s.h.Conflicts > 0 {
		state, reason = StateDegraded, ReasonIdentityConflict
	}
	if s.h.State != state || s.h.Reason != reason {
		s.h.State, s.h.Reason, s.h.Since = state, reason, now
	}
}

func (s *healthState) conflict(now time.Time) {
	s.mu.Lock()
	s.h.Conflicts++
	s.mu.Unlock()
	s.set(StateDegraded, ReasonIdentityConflict, now)
}

// missing records how many records the archive lost at least.
func (s *healthState) missing(n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h.State != StateStopped {
		s.h.MissingRecords = n
	}
}
