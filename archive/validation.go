package archive

import (
	"context"
	"errors"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"
)

// The last full validation.
//
// A start validates only the records beyond the checkpoint (checkpoint.go);
// the records before it are re-read by the background scrub (scrub.go),
// which a server may run slowly or not at all. So that the trust in the
// validated prefix has a bound, the archive records when the whole archive
// was last validated: one metadata value, 'm' "validated" (format 2 on),
// the time at which a validation of every record began. It is written, in
// one synced batch with what else that validation writes, by
//
//   - Open's validation of every record (an archive's first start, a
//     checkpoint that does not hold, or a start past the interval), and
//   - a complete scrub pass: the time its snapshot was taken, since every
//     record of that snapshot was read at or after it (and its tables'
//     blocks from the disk, scrub_tables.go).
//
// Offline inspect validates the whole archive too, but it is read-only: it
// opens the store without writing anything, so it cannot record it.
//
// With Options.FullValidationInterval, Open validates every record when the
// last full validation is older than the interval, is not known (an
// archive of format 1, a damaged value) or lies in the future (a clock set
// back, or a forged value: never trusted). The Monitor serves the time to
// the metrics (riffdb.archive.last_full_validation.timestamp), so that an
// alert can say when the trust has grown older than the interval: the
// scrub is off or does not complete its passes, and the next start will
// validate the whole archive.

// fullValidationDue reports whether Open must validate every record because
// of the interval, and logs why.
func (s *Store) fullValidationDue(m meta) bool {
	if s.fullInterval <= 0 || m.acct.Records == 0 {
		return false
	}
	now := s.clock()
	switch {
	case m.validatedErr != nil:
		s.log.Warn("the time of the archive's last full validation is damaged; validating the whole archive")
	case m.validated.IsZero():
		s.log.Info("the archive records no full validation; validating the whole archive")
	case m.validated.After(now):
		s.log.Warn("the archive's last full validation lies in the future; validating the whole archive",
			zap.Time("last_full_validation", m.validated))
	case now.Sub(m.validated) >= s.fullInterval:
		s.log.Info("the archive's last full validation is older than the full validation interval; validating the whole archive",
			zap.Time("last_full_validation", m.validated), zap.Duration("interval", s.fullInterval))
	default:
		return false
	}
	return true
}

// writeMeta durably writes, in one synced batch, the checkpoint c (nil:
// unchanged) and, when validated is not zero, the time of the last full
// validation, with the format marker of formatVersion when the archive is
// of an older format (the upgrade, see formatVersion). Below the free-space
// guard it writes nothing and keeps what it has: an older checkpoint or
// validation time stays true, it only makes the next Open validate more.
// Callers hold s.mu (or are Open).
func (s *Store) writeMeta(ctx context.Context, c *checkpoint, validated time.Time) error {
	n := 0
	if c != nil {
		n += checkpointLen
	}
	upgrade := !validated.IsZero() && s.format < formatVersion
	if !validated.IsZero() {
		n += validatedLen
	}
	if upgrade {
		n += len(encodeMarker(formatVersion))
	}
	if err := s.checkFreeSpace(int64(n)); err != nil {
		if errors.Is(err, ErrCapacity) {
			s.log.Warn("archive checkpoint and validation time not advanced: free disk space is below the guard")
			return nil
		}
		return err
	}
	err := guarded(ctx, s.st, s.timeout, "writing the checkpoint", true, func() error {
		b := s.db.NewBatch()
		if c != nil {
			_ = b.Set(keyCheckpoint, encodeCheckpoint(*c), nil)
		}
		if !validated.IsZero() {
			_ = b.Set(keyValidated, encodeValidated(validated), nil)
		}
		if upgrade {
			_ = b.Set(keyFormat, encodeMarker(formatVersion), nil)
		}
		err := b.Commit(pebble.Sync)
		_ = b.Close()
		return err
	})
	if err != nil {
		return err
	}
	if c != nil {
		s.setCheckpoint(*c)
	}
	if upgrade {
		s.log.Info("archive format upgraded", zap.Uint16("from", s.format), zap.Uint16("to", formatVersion))
		s.format = formatVersion
	}
	if !validated.IsZero() {
		s.setValidated(validated)
	}
	return nil
}

// setValidated records t as the last full validation and publishes it.
// Callers hold s.mu (or are Open).
func (s *Store) setValidated(t time.Time) {
	s.validated = t
	s.mon.validatedAt(t)
}

// validatedGrain is how much newer than the recorded last full validation
// a scrub pass must be to be written: a small archive completes a pass at
// every scrub step, and the time serves an alert measured in hours.
const validatedGrain = time.Minute

// scrubbed records that a scrub pass whose snapshot was taken at began
// validated every record: the time of the last full validation moves to
// began, unless the recorded one is less than validatedGrain older. A ctx
// that ended before the write writes nothing; one that ends during it does
// not abandon the store (background writes wait for their outcome, bounded
// by the store's timeout: a shutdown must not turn a write in flight into
// a fatal error).
func (s *Store) scrubbed(ctx context.Context, began time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	if began.Sub(s.validated) < validatedGrain {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.writeMeta(context.WithoutCancel(ctx), nil, began)
}

// LastFullValidation returns when the whole archive was last validated (by
// Open or by a complete scrub pass), or false when the archive does not
// record it.
func (s *Store) LastFullValidation() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.validated, !s.validated.IsZero()
}
