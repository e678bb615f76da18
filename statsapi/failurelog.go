package statsapi

import (
	"time"

	"go.uber.org/zap"

	"github.com/riffdb/riffdb/internal/hygiene/ratelog"
	"github.com/riffdb/riffdb/internal/process/clock"
)

// DefaultFailureLogInterval is how often, at most, a store failure log
// writes a line for one kind of failure while the credential store keeps
// failing.
const DefaultFailureLogInterval = 30 * time.Second

// StoreFailureMessage is the message of the lines a store failure log
// writes; the line written once the store is readable again adds
// " cleared".
const StoreFailureMessage = "credential store cannot be read: requests with a token fail with 500"

// NewFailureLog returns the log of a credential store's failures, a
// ratelog.Logger: such a failure makes every request that carries a token
// fail with 500, and anyone can send tokens, so a line per request would let
// a client flood the log. The first failure of a kind is logged at once at
// error level, later ones at most once per every (zero:
// DefaultFailureLogInterval) with the number of failures the line stands
// for ("suppressed"), and the first successful read after failures logs one
// "cleared" line. Messages are path-free. c nil: clock.Real; log nil: no-op.
func NewFailureLog(log *zap.Logger, c clock.Clock, every time.Duration) *ratelog.Logger {
	every = max(every, 0)
	if every == 0 {
		every = DefaultFailureLogInterval
	}
	return ratelog.New(log, c, StoreFailureMessage, ratelog.Options{Interval: every, MaxInterval: every, AtError: true})
}
