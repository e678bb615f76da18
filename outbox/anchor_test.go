package outbox_test

import (
	"fmt"
	"testing"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/outbox"
)

// lostErr is what a destination returns for an archive that lost records.
type lostErr struct{ n int64 }

func (e lostErr) Error() string         { return fmt.Sprintf("archive lost %d records", e.n) }
func (e lostErr) Unwrap() error         { return errArchiveLost }
func (e lostErr) MissingRecords() int64 { return e.n }

// TestLostRecordsAndHistoryBehindStopBeforeAnyClaim: an archive that lost
// completed records, or that holds events beyond the primary's history,
// stops delivery with its own reason before anything is claimed, and the
// number of missing records shows in health.
func TestLostRecordsAndHistoryBehindStopBeforeAnyClaim(t *testing.T) {
	for _, tc := range []struct {
		err    error
		reason deliverytype.Reason
		miss   int64
	}{
		{lostErr{n: 42}, deliverytype.ReasonArchiveLostRecords, 42},
		{fmt.Errorf("%w: event 9.0 beyond the last commit 7", errHistoryBehind), deliverytype.ReasonHistoryBehindArchive, 0},
	} {
		t.Run(string(tc.reason), func(t *testing.T) {
			b := setup(t, 1<<30, 0)
			b.commit(t, 3)
			b.dst.probeErr = tc.err // the first pass of a new worker probes
			res := b.run(t)
			if res.Claimed != 0 || len(b.src.claims) != 0 {
				t.Fatalf("claimed: %+v", res)
			}
			h := b.w.Health()
			if h.State != outbox.StateStopped || h.Reason != tc.reason || h.MissingRecords != tc.miss {
				t.Fatalf("health %+v", h)
			}
			// Stopped stays stopped: no probe or repair resumes it.
			b.dst.probeErr = nil
			if res := b.run(t); res.Claimed != 0 || b.w.Health().State != outbox.StateStopped {
				t.Fatalf("resumed without a restart: %+v %+v", res, b.w.Health())
			}
		})
	}
}
