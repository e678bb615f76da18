package primary_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/riffdb/riffdb/primary"
)

// TestReleaseTakesBackTheClaimsAttempt: Release returns claimed members to
// pending with the attempt count they had before the claim, whatever state
// they were claimed from; it refuses a member not in its given delivering
// state, all or nothing.
func TestReleaseTakesBackTheClaimsAttempt(t *testing.T) {
	db, bu := setup(t)
	ctx := context.Background()
	exec(t, db, "two", `{"x":1}`, "")
	in := allIntents(t, db)
	lease := bu.clock.Now().Add(10 * time.Second)
	first, err := db.Claim(ctx, in, lease)
	if err != nil {
		t.Fatal(err)
	}
	// b is retried once, then both are claimed again: a at its 2nd
	// attempt from delivering (an abandoned lease), b from retry_scheduled.
	rb, err := db.Retry(ctx, first[1], bu.clock.Now(), primary.Failure{})
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := db.Claim(ctx, []primary.Intent{first[0], rb}, lease)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Release(ctx, []primary.Intent{claimed[0], first[1]}); !errors.Is(err, primary.ErrConflict) {
		t.Fatalf("release with a stale member: %v, want ErrConflict", err)
	}
	if got := allIntents(t, db); !sameIntent(got[0], claimed[0]) || !sameIntent(got[1], claimed[1]) {
		t.Fatalf("a refused release changed state: %+v", got)
	}
	released, err := db.Release(ctx, claimed)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range released {
		if r.State != primary.IntentPending || r.Attempts != 1 || !r.LeaseDeadline.IsZero() || !r.NextAttempt.IsZero() {
			t.Fatalf("released[%d] = %+v, want pending with the 1 attempt it had before the claim", i, r)
		}
	}
	if got := allIntents(t, db); !sameIntent(got[0], released[0]) || !sameIntent(got[1], released[1]) {
		t.Fatalf("stored %+v, returned %+v", got, released)
	}
	if _, err := db.Release(ctx, released[:1]); !errors.Is(err, primary.ErrConflict) {
		t.Fatalf("release of a pending intent: %v, want ErrConflict", err)
	}
	wantCount(t, db, 2)
}

// TestReleaseIsDurableWhenItReturns: a crash after Release returned keeps
// the members pending with their attempt taken back; a crash before it
// (the claim alone durable) recovers them with the claim counted.
func TestReleaseIsDurableWhenItReturns(t *testing.T) {
	for _, release := range []bool{false, true} {
		mem := vfs.NewCrashableMem()
		db, bu := setup(t, func(o *primary.Options) { o.FS = mem })
		exec(t, db, "two", `{"x":1}`, "")
		claimed, err := db.Claim(context.Background(), allIntents(t, db), bu.clock.Now().Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if release {
			if _, err := db.Release(context.Background(), claimed); err != nil {
				t.Fatal(err)
			}
		}
		o := bu.opts
		o.FS = mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
		db2, err := primary.Open(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		want := uint32(1) // recovered: the interrupted claim counts
		if release {
			want = 0
		}
		for _, in := range allIntents(t, db2) {
			if in.State != primary.IntentPending || in.Attempts != want {
				t.Fatalf("released %v, after the crash: %+v, want pending with %d attempts", release, in, want)
			}
		}
		_ = db2.Close()
	}
}
