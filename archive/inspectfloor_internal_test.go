package archive

import (
	"context"
	"errors"
	"testing"
)

// TestInspectChecksTheGivenFloor: InspectOptions.Floor, the primary's
// record of completed deliveries, is checked like the floor file: an
// archive below it is "mismatch" with the missing records, named as the
// database's; at or below the accounting it changes nothing.
func TestInspectChecksTheGivenFloor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fs := steppedSetup(t, 300)
	for _, c := range []struct {
		floor   int64
		verdict string
		missing int64
	}{{0, IntegrityVerified, 0}, {300, IntegrityVerified, 0}, {301, IntegrityMismatch, 1}, {1000, IntegrityMismatch, 700}} {
		rep, err := inspect(ctx, testDir, testDatabase, fs, InspectOptions{MaxPages: MaxInspectPages, Floor: c.floor})
		if err != nil || rep.Integrity != c.verdict || rep.MissingRecords != c.missing ||
			(c.missing > 0) != (rep.MissingAnchor == AnchorDatabase) {
			t.Fatalf("floor %d: %+v, %v; want %s with %d missing", c.floor, rep, err, c.verdict, c.missing)
		}
	}
	// The steps before the last one report nothing yet; the last one does.
	reps := runSteps(t, fs, 1, false)
	rep, err := inspect(ctx, testDir, testDatabase, fs, InspectOptions{MaxPages: 1, Floor: 301})
	if err != nil || rep.Integrity != IntegrityIncomplete || len(reps) < 2 {
		t.Fatalf("first step: %+v, %v", rep, err)
	}
	rep, err = inspect(ctx, testDir, testDatabase, fs, InspectOptions{MaxPages: MaxInspectPages, After: rep.NextCursor, Floor: 301})
	if err != nil || rep.Integrity != IntegrityMismatch || rep.MissingRecords != 1 {
		t.Fatalf("last step: %+v, %v", rep, err)
	}
	if _, err := inspect(ctx, testDir, testDatabase, fs, InspectOptions{MaxPages: 1, Floor: -1}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("negative floor: %v", err)
	}
}
