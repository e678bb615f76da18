package archive

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
)

// steppedSetup creates a closed store on a MemFS holding, for each entry
// of perIncarnation, that many records of incarnation i+1.
func steppedSetup(t *testing.T, perIncarnation ...int) *vfs.MemFS {
	t.Helper()
	fs := newMemFS(t, false)
	s := mustOpen(t, testOptions(t, fs))
	for i, n := range perIncarnation {
		for seq := 1; seq <= n; seq++ {
			k, r := rec(t, testDatabase, uint64(seq), 0, "payload")
			k.Incarnation = uint64(i + 1)
			mustAccept(t, s, k, r, deliverytype.Stored)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return fs
}

// runSteps inspects in steps of maxPages pages until the scan ends, and
// returns every report.
func runSteps(t *testing.T, fs vfs.FS, maxPages int, count bool) []InspectReport {
	t.Helper()
	var reps []InspectReport
	after := ""
	for {
		rep, err := inspect(context.Background(), testDir, testDatabase, fs, InspectOptions{MaxPages: maxPages, After: after, CountIncarnations: count})
		if err != nil {
			t.Fatalf("step %d: %v", len(reps)+1, err)
		}
		reps = append(reps, rep)
		if (rep.NextCursor != "") != (rep.Integrity == IntegrityIncomplete) {
			t.Fatalf("step %d: cursor %q with integrity %s", len(reps), rep.NextCursor, rep.Integrity)
		}
		if rep.NextCursor == "" {
			return reps
		}
		if len(reps) > 100 {
			t.Fatal("the steps do not end")
		}
		after = rep.NextCursor
	}
}

func TestInspectStepsEqualOneScan(t *testing.T) {
	t.Parallel()
	fs := steppedSetup(t, 300, 5, 700)
	one := runSteps(t, fs, MaxInspectPages, true)
	if len(one) != 1 || one[0].Integrity != IntegrityVerified || one[0].Steps != 1 || one[0].TotalRecords != 1005 {
		t.Fatalf("one scan: %+v", one)
	}
	steps := runSteps(t, fs, 1, true)
	if len(steps) != 4 {
		t.Fatalf("%d steps of one page for 1005 records, want 4", len(steps))
	}
	var scanned, bytes int64
	for i, rep := range steps {
		scanned += rep.ScannedRecords
		bytes += rep.ScannedBytes
		if rep.Steps != i+1 || rep.TotalRecords != scanned || rep.TotalBytes != bytes || rep.PagesExamined != 1 {
			t.Fatalf("step %d: %+v", i+1, rep)
		}
		if i < len(steps)-1 && rep.Integrity != IntegrityIncomplete {
			t.Fatalf("step %d: %s", i+1, rep.Integrity)
		}
	}
	last, full := steps[len(steps)-1], one[0]
	want := []IncarnationCount{{1, 300}, {2, 5}, {3, 700}}
	if !reflect.DeepEqual(full.Incarnations, want) || !reflect.DeepEqual(last.Incarnations, want) {
		t.Fatalf("incarnations: one scan %v, steps %v; want %v", full.Incarnations, last.Incarnations, want)
	}
	if last.Integrity != full.Integrity || last.TotalRecords != full.TotalRecords || last.TotalBytes != full.TotalBytes ||
		last.RecordCount != full.RecordCount || last.EncodedBytes != full.EncodedBytes {
		t.Fatalf("steps end with %+v, one scan %+v", last, full)
	}
	// Without counting, no table.
	if reps := runSteps(t, fs, 2, false); reps[len(reps)-1].Incarnations != nil || reps[len(reps)-1].Integrity != IntegrityVerified {
		t.Fatalf("without counting: %+v", reps[len(reps)-1])
	}
}

func TestInspectStepProgressIsCumulative(t *testing.T) {
	t.Parallel()
	fs := steppedSetup(t, 600)
	type call struct {
		pages          int
		records, bytes int64
	}
	var calls []call
	progress := func(p int, r, b, accounted int64) {
		if accounted != 600 {
			t.Errorf("progress reports an accounting of %d records, want 600", accounted)
		}
		calls = append(calls, call{p, r, b})
	}
	rep, err := inspect(context.Background(), testDir, testDatabase, fs, InspectOptions{MaxPages: 2, Progress: progress})
	if err != nil {
		t.Fatal(err)
	}
	rep2, err := inspect(context.Background(), testDir, testDatabase, fs, InspectOptions{MaxPages: 2, After: rep.NextCursor, Progress: progress})
	if err != nil || rep2.Integrity != IntegrityVerified {
		t.Fatalf("step 2: %+v, %v", rep2, err)
	}
	if len(calls) != 3 || calls[2].pages != 3 || calls[2].records != 600 || calls[2].bytes != rep2.TotalBytes || calls[1].records != 512 {
		t.Fatalf("progress %+v", calls)
	}
}

func TestInspectStepFindsCorruptRecordInTheMiddle(t *testing.T) {
	t.Parallel()
	fs := steppedSetup(t, 1000)
	k, r := rec(t, testDatabase, 600, 0, "payload")
	editStore(t, fs, func(db *pebble.DB) {
		v := encodeValue(k, r)
		v[len(v)/2] ^= 1
		setKey(t, db, recordKey(k), v)
	})
	one, err := inspect(context.Background(), testDir, testDatabase, fs, InspectOptions{MaxPages: MaxInspectPages})
	if err != nil || one.Integrity != IntegrityCorrupt {
		t.Fatalf("one scan: %+v, %v", one, err)
	}
	reps := runSteps(t, fs, 1, false)
	// Pages of 256: records 513..768 are the third page.
	if len(reps) != 3 || reps[0].Integrity != IntegrityIncomplete || reps[1].Integrity != IntegrityIncomplete ||
		reps[2].Integrity != IntegrityCorrupt || reps[2].TotalRecords != 512 {
		t.Fatalf("steps: %+v", reps)
	}
}

func TestInspectStepsSeeAChangedArchive(t *testing.T) {
	t.Parallel()
	fs := steppedSetup(t, 600)
	rep, err := inspect(context.Background(), testDir, testDatabase, fs, InspectOptions{MaxPages: 1})
	if err != nil || rep.NextCursor == "" {
		t.Fatalf("step 1: %+v, %v", rep, err)
	}
	s := mustOpen(t, testOptions(t, fs))
	k, r := rec(t, testDatabase, 5000, 0, "late")
	mustAccept(t, s, k, r, deliverytype.Stored)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rep2, err := inspect(context.Background(), testDir, testDatabase, fs, InspectOptions{MaxPages: MaxInspectPages, After: rep.NextCursor})
	if err != nil || rep2.Integrity != IntegrityChanged || rep2.NextCursor != "" || rep2.Steps != 2 ||
		rep2.TotalRecords != MaxPageRecords || rep2.RecordCount != 601 {
		t.Fatalf("step 2 after a change: %+v, %v", rep2, err)
	}
}

func TestInspectRefusesBadCursors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fs, good := firstStep(t)
	// Another archive, bound to another database, with as many records.
	other := newMemFS(t, false)
	otherDB := event.DatabaseID{0xfe, 1}
	o := testOptions(t, other)
	o.Database = otherDB
	s := mustOpen(t, o)
	for i := 1; i <= 300; i++ {
		k, r := rec(t, otherDB, uint64(i), 0, "payload")
		mustAccept(t, s, k, r, deliverytype.Stored)
	}
	_ = s.Close()
	cases := map[string]struct {
		fs    vfs.FS
		db    event.DatabaseID
		after string
	}{
		"damaged":   {fs, testDatabase, good[:10] + strings.Map(func(r rune) rune { return r ^ 1 }, good[10:11]) + good[11:]},
		"truncated": {fs, testDatabase, good[:len(good)-6]},
		"not text":  {fs, testDatabase, "!!!"},
		"reader": {fs, testDatabase, func() string {
			b, _ := newCursor(makeArchiveID(testDatabase, nil), rec0(t)).MarshalText()
			return string(b)
		}()},
		"foreign": {other, otherDB, good},
	}
	for name, tc := range cases {
		rep, err := inspect(ctx, testDir, tc.db, tc.fs, InspectOptions{MaxPages: 1, After: tc.after})
		if !errors.Is(err, ErrInvalidCursor) || !reflect.DeepEqual(rep, InspectReport{AllocatedBytes: -1}) {
			t.Fatalf("%s cursor: %+v, %v", name, rep, err)
		}
		assertNoPath(t, err)
	}
	// Counting cannot start in the middle of a scan.
	if _, err := inspect(ctx, testDir, testDatabase, fs, InspectOptions{MaxPages: 1, After: good, CountIncarnations: true}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("counting from step 2: %v", err)
	}
}

func rec0(t *testing.T) event.Key {
	k, _ := rec(t, testDatabase, 1, 0, "")
	return k
}

// TestReaderPageDoesNotFetchBeyondItsBudget: the record that would take a
// page past MaxPageBytes is recognised by its length; its value is not
// fetched.
func TestReaderPageDoesNotFetchBeyondItsBudget(t *testing.T) {
	t.Parallel()
	s := mustOpen(t, testOptions(t, newMemFS(t, false)))
	big := strings.Repeat("x", 900<<10)
	for i := 1; i <= 6; i++ {
		k, r := rec(t, testDatabase, uint64(i), 0, big)
		mustAccept(t, s, k, r, deliverytype.Stored)
	}
	r := s.NewReader()
	defer r.Close()
	var fetched []int
	r.onFetch = func(n int) { fetched = append(fetched, n) }
	p, err := r.ReadPage(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Records) != 4 || len(fetched) != 4 {
		t.Fatalf("page of %d records fetched %d values, want 4 and 4", len(p.Records), len(fetched))
	}
}

func TestInspectStepsEndInMismatchLikeOneScan(t *testing.T) {
	t.Parallel()
	fs := steppedSetup(t, 600)
	k, r := rec(t, testDatabase, 1, 0, "payload")
	editStore(t, fs, func(db *pebble.DB) {
		setKey(t, db, keyAccounting, encodeAccounting(accounting{Records: 601, EncodedBytes: 601 * Charge(k, r)}))
	})
	one := runSteps(t, fs, MaxInspectPages, false)
	steps := runSteps(t, fs, 1, false)
	last := steps[len(steps)-1]
	if len(one) != 1 || one[0].Integrity != IntegrityMismatch || len(steps) != 3 || last.Integrity != IntegrityMismatch ||
		last.TotalRecords != one[0].TotalRecords || last.TotalBytes != one[0].TotalBytes {
		t.Fatalf("one scan %+v; steps %+v", one, steps)
	}
}

func TestReaderRefusesCursorsOfOtherVersions(t *testing.T) {
	t.Parallel()
	s := mustOpen(t, testOptions(t, newMemFS(t, false)))
	fillStore(t, s, 3, "p")
	r := s.NewReader()
	defer r.Close()
	old := append([]byte{1}, rec0(t).Bytes()...) // version 1: key and checksum, no archive
	old = append(old, 0, 0, 0, 0)
	if _, err := r.ReadPage(context.Background(), Cursor(old)); !errors.Is(err, ErrInvalidCursor) || !strings.Contains(err.Error(), "version 1") {
		t.Fatalf("version 1 cursor: %v", err)
	}
	other := newCursor(makeArchiveID(event.DatabaseID{9}, nil), rec0(t))
	if _, err := r.ReadPage(context.Background(), other); !errors.Is(err, ErrInvalidCursor) || !strings.Contains(err.Error(), "another archive") {
		t.Fatalf("cursor of another archive: %v", err)
	}
}
