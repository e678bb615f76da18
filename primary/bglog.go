package primary

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/internal/hygiene/ratelog"
	"github.com/riffdb/riffdb/internal/process/clock"
)

// storeLog routes what Pebble reports about its background work into the
// primary's log at a bounded rate. Pebble retries a failed flush at once,
// without backoff: a process out of file descriptors or disk space reports
// the same error thousands of times a second (an EMFILE episode once wrote
// 289,682 lines in 25 s). Each distinct error is logged at most once per
// interval, backing off from 1 s to 30 s while it repeats, with the count
// of reports in between; a successful flush or compaction logs that the
// condition cleared. Messages are path-free (Pebble's errors name table
// files by absolute path) and are logged as plain strings: zap.Error on a
// Pebble error adds its verbose form, a stack trace, to every line.
type storeLog struct {
	background *ratelog.Logger // EventListener.BackgroundError
	errors     *ratelog.Logger // Logger.Errorf
}

func newStoreLog(log *zap.Logger, c clock.Clock) *storeLog {
	return &storeLog{
		background: ratelog.New(log, c, "primary store background error", ratelog.Options{}),
		errors:     ratelog.New(log, c, "primary storage engine error", ratelog.Options{}),
	}
}

// listen sets the background-error, flush-end and compaction-end handlers
// of l.
func (s *storeLog) listen(l *pebble.EventListener) {
	l.BackgroundError = s.background.Error
	l.FlushEnd = func(info pebble.FlushInfo) {
		if info.Err == nil {
			s.background.Clear()
		}
	}
	l.CompactionEnd = func(info pebble.CompactionInfo) {
		if info.Err == nil {
			s.background.Clear()
		}
	}
}

// storeLogger is the primary's Pebble logger: pebbleLogger's Fatalf (fail
// the store, end the goroutine), with Infof and Errorf made path-free and
// Errorf rate-limited per format like background errors.
type storeLogger struct {
	pebbleLogger
	log *storeLog
}

func (l storeLogger) Infof(format string, args ...any) {
	l.db.log.Debug("primary storage engine", zap.String("message", ratelog.CleanText(fmt.Sprintf(format, args...))))
}

func (l storeLogger) Errorf(format string, args ...any) {
	l.log.errors.Report(format, ratelog.CleanText(fmt.Sprintf(format, args...)))
}
