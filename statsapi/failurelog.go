package statsapi

import (
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/riffdb/riffdb/internal/clock"
	"github.com/riffdb/riffdb/internal/pathless"
)

// DefaultFailureLogInterval is how often, at most, a FailureLog writes a
// line while the credential store keeps failing.
const DefaultFailureLogInterval = 30 * time.Second

// FailureLog logs the failures of a credential store that cannot be read.
// Such a failure makes every request that carries a token fail with 500,
// and anyone can send tokens, so a line per request would let a client
// flood the log: the first failure is logged at once (error level), later
// ones at most once per interval with the number of failures the line
// stands for ("suppressed"). Messages are path-free. It is safe for
// concurrent use; the zero value is not usable, see NewFailureLog.
type FailureLog struct {
	log   *zap.Logger
	clock clock.Clock
	every time.Duration

	failing    atomic.Bool // so that Recovered costs one load per request
	mu         sync.Mutex
	next       time.Time // no line before next
	suppressed int
}

// NewFailureLog returns a FailureLog writing to log (nil: no-op), reading
// the time from c (nil: clock.Real), writing at most one line per every
// (zero: DefaultFailureLogInterval).
func NewFailureLog(log *zap.Logger, c clock.Clock, every time.Duration) *FailureLog {
	if log == nil {
		log = zap.NewNop()
	}
	if every <= 0 {
		every = DefaultFailureLogInterval
	}
	return &FailureLog{log: log, clock: clock.Or(c), every: every}
}

// Record reports one failed read of the credential store.
func (l *FailureLog) Record(err error) {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failing.Store(true)
	if now.Before(l.next) {
		l.suppressed++
		return
	}
	l.log.Error("credential store cannot be read; requests with a token fail with 500",
		zap.String("error", pathless.Error(err).Error()), zap.Int("suppressed", l.suppressed))
	l.suppressed = 0
	l.next = now.Add(l.every)
}

// Recovered reports a successful read; after failures it logs one line and
// lets the next failure be logged at once.
func (l *FailureLog) Recovered() {
	if !l.failing.Load() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.failing.Load() {
		return
	}
	l.log.Info("credential store is readable again", zap.Int("suppressed", l.suppressed))
	l.failing.Store(false)
	l.suppressed, l.next = 0, time.Time{}
}
