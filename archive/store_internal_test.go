package archive

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
)

func TestAcceptStoredDuplicateConflict(t *testing.T) {
	t.Parallel()
	fs := newMemFS(t, false)
	s := mustOpen(t, testOptions(t, fs))
	ctx := context.Background()

	k, r := rec(t, testDatabase, 7, 0, `{"a":1}`)
	mustAccept(t, s, k, r, deliverytype.Stored)
	mustAccept(t, s, k, r, deliverytype.Duplicate)

	_, other := rec(t, testDatabase, 7, 0, `{"a":2}`)
	_, err := s.Accept(ctx, k, other)
	if !errors.Is(err, ErrConflict) || ClassOf(err) != deliverytype.Conflict {
		t.Fatalf("conflicting Accept: %v", err)
	}
	assertNoPath(t, err)
	if got := string(err.Error()); strings.Contains(got, `{"a":2}`) || strings.Contains(got, `{"a":1}`) {
		t.Fatalf("error leaks payload: %q", got)
	}

	want := Usage{Records: 1, EncodedBytes: Charge(k, r), QuotaEncodedBytes: 1 << 30}
	got := s.Usage()
	if got.Records != want.Records || got.EncodedBytes != want.EncodedBytes || got.QuotaEncodedBytes != want.QuotaEncodedBytes {
		t.Fatalf("Usage = %+v, want %+v", got, want)
	}
	if got.AllocatedBytes <= 0 {
		t.Fatalf("AllocatedBytes = %d", got.AllocatedBytes)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Accept(ctx, k, r); !errors.Is(err, ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}

	// Reopen: validation passes, the record and its accounting survived.
	s2 := mustOpen(t, testOptions(t, fs))
	if u := s2.Usage(); u.Records != 1 || u.EncodedBytes != Charge(k, r) {
		t.Fatalf("Usage after reopen = %+v", u)
	}
	mustAccept(t, s2, k, r, deliverytype.Duplicate)
}

func TestChargeIsKeyPlusEncodedValue(t *testing.T) {
	t.Parallel()
	k, r := rec(t, testDatabase, 1, 0, "payload")
	if got, want := Charge(k, r), int64(event.KeyLen+len(encodeValue(k, r))); got != want {
		t.Fatalf("Charge = %d, want %d", got, want)
	}
}

func TestAcceptRefusesInvalidRecordsAndForeignKeys(t *testing.T) {
	t.Parallel()
	s := mustOpen(t, testOptions(t, newMemFS(t, false)))
	ctx := context.Background()
	k, r := rec(t, testDatabase, 1, 0, "x")

	bad := append([]byte(nil), r...)
	bad[len(bad)-1] ^= 1 // hash no longer matches
	if _, err := s.Accept(ctx, k, bad); !errors.Is(err, ErrInvalidRecord) || ClassOf(err) != deliverytype.Conflict {
		t.Fatalf("tampered record: %v", err)
	}
	k2 := k
	k2.Event.Pos = 1 // record's identity differs from the key
	if _, err := s.Accept(ctx, k2, r); !errors.Is(err, ErrInvalidRecord) {
		t.Fatalf("identity mismatch: %v", err)
	}
	other := k
	other.Database[0] ^= 0xff
	if _, err := s.Accept(ctx, other, r); !errors.Is(err, ErrBindingChanged) || ClassOf(err) != deliverytype.Stop {
		t.Fatalf("foreign database: %v", err)
	}
	if u := s.Usage(); u.Records != 0 || u.EncodedBytes != 0 {
		t.Fatalf("refused records were charged: %+v", u)
	}
}

func TestQuotaExactBoundary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k1, r1 := rec(t, testDatabase, 1, 0, "aaaa")
	k2, r2 := rec(t, testDatabase, 2, 0, "bbbb")
	k3, r3 := rec(t, testDatabase, 3, 0, "c")
	opts := testOptions(t, newMemFS(t, false))
	opts.QuotaEncodedBytes = Charge(k1, r1) + Charge(k2, r2) // exactly two
	s := mustOpen(t, opts)

	keys, recs := []event.Key{k1, k2, k3}, [][]byte{r1, r2, r3}
	if n, err := s.Fit(ctx, keys, recs); err != nil || n != 2 {
		t.Fatalf("Fit = %d, %v; want 2", n, err)
	}
	// A repeated key in the group charges nothing the second time.
	if n, err := s.Fit(ctx, []event.Key{k1, k1, k2}, [][]byte{r1, r1, r2}); err != nil || n != 3 {
		t.Fatalf("Fit with repeat = %d, %v; want 3", n, err)
	}
	mustAccept(t, s, k1, r1, deliverytype.Stored)
	// k1 is archived: it charges 0, so k1+k2 still fits exactly, k3 does not.
	if n, err := s.Fit(ctx, keys, recs); err != nil || n != 2 {
		t.Fatalf("Fit after k1 = %d, %v; want 2", n, err)
	}
	mustAccept(t, s, k2, r2, deliverytype.Stored)
	if u := s.Usage(); u.EncodedBytes != opts.QuotaEncodedBytes {
		t.Fatalf("used %d, want exactly the quota %d", u.EncodedBytes, opts.QuotaEncodedBytes)
	}
	if n, err := s.Fit(ctx, []event.Key{k3}, [][]byte{r3}); err != nil || n != 0 {
		t.Fatalf("Fit at full quota = %d, %v; want 0", n, err)
	}
	_, err := s.Accept(ctx, k3, r3)
	if !errors.Is(err, ErrCapacity) || ClassOf(err) != deliverytype.Capacity {
		t.Fatalf("Accept over quota: %v", err)
	}
	// Duplicates are still accepted at full quota: they charge nothing.
	mustAccept(t, s, k1, r1, deliverytype.Duplicate)
	if _, err := s.Fit(ctx, keys, recs[:2]); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Fit with mismatched lengths: %v", err)
	}
}

func TestFreeSpaceGuard(t *testing.T) {
	t.Parallel()
	fs := newMemFS(t, false)
	opts := testOptions(t, fs)
	opts.MinFreeBytes = 1 << 20
	s := mustOpen(t, opts)
	k, r := rec(t, testDatabase, 1, 0, "x")
	fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1<<20 + uint64(Charge(k, r)) - 1, TotalBytes: 1 << 30})
	if _, err := s.Accept(context.Background(), k, r); !errors.Is(err, ErrCapacity) {
		t.Fatalf("Accept below the guard: %v", err)
	}
	fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1<<20 + uint64(Charge(k, r)), TotalBytes: 1 << 30})
	mustAccept(t, s, k, r, deliverytype.Stored)
}

func TestStartupValidationCatchesTampering(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		edit func(t *testing.T, db *pebble.DB, k event.Key, r []byte)
		want error
	}{
		{"edited accounting", func(t *testing.T, db *pebble.DB, k event.Key, r []byte) {
			setKey(t, db, keyAccounting, encodeAccounting(accounting{Records: 3, EncodedBytes: 3*Charge(k, r) + 1}))
		}, ErrCorrupt},
		{"accounting checksum", func(t *testing.T, db *pebble.DB, k event.Key, r []byte) {
			v := encodeAccounting(accounting{Records: 3, EncodedBytes: 3 * Charge(k, r)})
			v[0] ^= 1
			setKey(t, db, keyAccounting, v)
		}, ErrCorrupt},
		{"flipped record byte", func(t *testing.T, db *pebble.DB, k event.Key, r []byte) {
			v := encodeValue(k, r)
			v[10] ^= 0x04
			setKey(t, db, recordKey(k), v)
		}, ErrCorrupt},
		{"record of another database", func(t *testing.T, db *pebble.DB, k event.Key, r []byte) {
			k.Database[15] ^= 1
			setKey(t, db, recordKey(k), encodeValue(k, r))
			setKey(t, db, keyAccounting, encodeAccounting(accounting{Records: 4, EncodedBytes: 4 * Charge(k, r)}))
		}, ErrCorrupt},
		{"unknown metadata key", func(t *testing.T, db *pebble.DB, k event.Key, r []byte) {
			setKey(t, db, []byte("mextra"), []byte("x"))
		}, ErrCorrupt},
		{"changed binding", func(t *testing.T, db *pebble.DB, k event.Key, r []byte) {
			other := testDatabase
			other[0] ^= 1
			setKey(t, db, keyBinding, encodeBinding(other))
		}, ErrBindingChanged},
		{"foreign marker", func(t *testing.T, db *pebble.DB, k event.Key, r []byte) {
			setKey(t, db, keyFormat, []byte("SOMEONE-ELSE"))
		}, ErrIncompatibleFormat},
		{"future marker version", func(t *testing.T, db *pebble.DB, k event.Key, r []byte) {
			setKey(t, db, keyFormat, encodeMarker(formatVersion+1))
		}, ErrIncompatibleFormat},
		{"absent marker", func(t *testing.T, db *pebble.DB, k event.Key, r []byte) {
			if err := db.Delete(keyFormat, pebble.Sync); err != nil {
				t.Fatal(err)
			}
		}, ErrIncompatibleFormat},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fs := newMemFS(t, false)
			s := mustOpen(t, testOptions(t, fs))
			var k event.Key
			var r []byte
			for i := uint64(1); i <= 3; i++ {
				k, r = rec(t, testDatabase, i, 0, "payload")
				mustAccept(t, s, k, r, deliverytype.Stored)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			editStore(t, fs, func(db *pebble.DB) { tc.edit(t, db, k, r) })
			_, err := Open(context.Background(), testDir, testOptions(t, fs))
			if !errors.Is(err, tc.want) || ClassOf(err) != deliverytype.Stop {
				t.Fatalf("Open = %v, want %v (class stop)", err, tc.want)
			}
			assertNoPath(t, err)
			if errors.Is(tc.want, ErrCorrupt) {
				// The store was released: editing it again works.
				editStore(t, fs, func(*pebble.DB) {})
			}
		})
	}
}

func setKey(t *testing.T, db *pebble.DB, k, v []byte) {
	t.Helper()
	if err := db.Set(k, v, pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRefusesOldEngineFormat(t *testing.T) {
	t.Parallel()
	fs := newMemFS(t, false)
	db, err := pebble.Open(fs.PathJoin(testDir, StoreDirName), &pebble.Options{FS: fs, FormatMajorVersion: pebble.FormatMinSupported, Logger: testutil.QuietPebbleLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	setKey(t, db, keyFormat, encodeMarker(formatVersion)) // not a leftover of an interrupted creation
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = Open(context.Background(), testDir, testOptions(t, fs))
	if !errors.Is(err, ErrIncompatibleFormat) {
		t.Fatalf("Open of a format-%d store: %v", pebble.FormatMinSupported, err)
	}
	// It was not ratcheted.
	desc, err := pebble.Peek(fs.PathJoin(testDir, StoreDirName), fs)
	if err != nil || desc.FormatMajorVersion != pebble.FormatMinSupported {
		t.Fatalf("format after refused open: %v, %v", desc, err)
	}
}

func TestOpenChecksDirectory(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMem()
	opts := testOptions(t, fs)
	if _, err := Open(context.Background(), testDir, opts); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("missing directory: %v", err)
	}
	if err := fs.MkdirAll(testDir+"/stray", 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(context.Background(), testDir, opts); !errors.Is(err, ErrRefused) {
		t.Fatalf("foreign entry: %v", err)
	}
	opts.QuotaEncodedBytes = 0
	if _, err := Open(context.Background(), testDir, opts); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("zero quota: %v", err)
	}
}

func TestSecondOpenIsBusy(t *testing.T) {
	t.Parallel()
	fs := newMemFS(t, false)
	_ = mustOpen(t, testOptions(t, fs))
	_, err := Open(context.Background(), testDir, testOptions(t, fs))
	if !errors.Is(err, ErrBusy) || ClassOf(err) != deliverytype.Unavailable {
		t.Fatalf("second Open: %v", err)
	}
}

func TestCloseIsIdempotentAndClosesReaders(t *testing.T) {
	t.Parallel()
	s := mustOpen(t, testOptions(t, newMemFS(t, false)))
	r := s.NewReader()
	if err := s.Close(); err != nil {
		t.Fatalf("Close with an open reader: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := r.ReadPage(context.Background(), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("ReadPage after Close: %v", err)
	}
	if _, err := s.Fit(context.Background(), nil, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Fit after Close: %v", err)
	}
}
