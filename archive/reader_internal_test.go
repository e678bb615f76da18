package archive

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
)

func fillStore(t *testing.T, s *Store, n int, payload string) {
	t.Helper()
	for i := 1; i <= n; i++ {
		k, r := rec(t, testDatabase, uint64(i), 0, payload)
		mustAccept(t, s, k, r, deliverytype.Stored)
	}
}

func TestReaderPagesResumeOverASnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mustOpen(t, testOptions(t, newMemFS(t, false)))
	fillStore(t, s, 600, "p")

	r := s.NewReader()
	defer r.Close()
	p1, err := r.ReadPage(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(p1.Records) != MaxPageRecords || p1.Next == nil {
		t.Fatalf("page 1: %d records, next %v", len(p1.Records), p1.Next)
	}
	// Writes after the snapshot, before and after the cursor, are not seen.
	kb, rb := rec(t, testDatabase, 1, 7, "before")
	ka, ra := rec(t, testDatabase, 9999, 0, "after")
	mustAccept(t, s, kb, rb, deliverytype.Stored)
	mustAccept(t, s, ka, ra, deliverytype.Stored)

	// The cursor survives its text form.
	text, err := p1.Next.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	var cur Cursor
	if err := cur.UnmarshalText(text); err != nil {
		t.Fatal(err)
	}
	seen := map[event.Key]bool{}
	for _, rec := range p1.Records {
		seen[rec.Key] = true
	}
	sizes := []int{len(p1.Records)}
	var total int64 = p1.EncodedBytes
	for cur != nil {
		p, err := r.ReadPage(ctx, cur)
		if err != nil {
			t.Fatal(err)
		}
		for i, rec := range p.Records {
			if seen[rec.Key] {
				t.Fatalf("record %s returned twice", rec.Key.Event)
			}
			seen[rec.Key] = true
			if i > 0 && p.Records[i-1].Key.Event.Compare(rec.Key.Event) >= 0 {
				t.Fatal("records out of order")
			}
		}
		sizes = append(sizes, len(p.Records))
		total += p.EncodedBytes
		cur = p.Next
	}
	if len(seen) != 600 || seen[kb] || seen[ka] {
		t.Fatalf("snapshot scan saw %d records (before=%v after=%v)", len(seen), seen[kb], seen[ka])
	}
	if want := []int{256, 256, 88}; len(sizes) != 3 || sizes[1] != want[1] || sizes[2] != want[2] {
		t.Fatalf("page sizes %v, want %v", sizes, want)
	}
	if total != s.Usage().EncodedBytes-Charge(kb, rb)-Charge(ka, ra) {
		t.Fatalf("Σ page bytes %d disagrees with accounting", total)
	}
	// A new reader sees the later writes.
	r2 := s.NewReader()
	defer r2.Close()
	n := 0
	for cur := Cursor(nil); ; {
		p, err := r2.ReadPage(ctx, cur)
		if err != nil {
			t.Fatal(err)
		}
		n += len(p.Records)
		if cur = p.Next; cur == nil {
			break
		}
	}
	if n != 602 {
		t.Fatalf("new reader saw %d records, want 602", n)
	}
}

func TestReaderPageByteBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mustOpen(t, testOptions(t, newMemFS(t, false)))
	big := strings.Repeat("b", event.MaxPayloadLen) // a charge just above 1 MiB
	fillStore(t, s, 5, big)
	r := s.NewReader()
	defer r.Close()
	p, err := r.ReadPage(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Records) != 3 || p.EncodedBytes > MaxPageBytes || p.Next == nil {
		t.Fatalf("page 1: %d records, %d bytes", len(p.Records), p.EncodedBytes)
	}
	p, err = r.ReadPage(ctx, p.Next)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Records) != 2 || p.Next != nil {
		t.Fatalf("page 2: %d records, next %v", len(p.Records), p.Next)
	}
	if string(p.Records[1].Event.Payload) != big {
		t.Fatal("payload differs")
	}
}

func TestReaderRejectsBadCursorAndReportsCorruption(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mustOpen(t, testOptions(t, newMemFS(t, false)))
	fillStore(t, s, 3, "p")
	r := s.NewReader()
	if _, err := r.ReadPage(ctx, Cursor("garbage")); !errors.Is(err, ErrInvalidCursor) {
		t.Fatalf("bad cursor: %v", err)
	}
	_ = r.Close()

	k, rb := rec(t, testDatabase, 2, 0, "p")
	v := encodeValue(k, rb)
	v[5] ^= 1
	if err := s.db.Set(recordKey(k), v, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	r = s.NewReader()
	defer r.Close()
	_, err := r.ReadPage(ctx, nil)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt record: %v", err)
	}
	assertNoPath(t, err)
	k9, r9 := rec(t, testDatabase, 9, 0, "p")
	if _, err := s.Accept(ctx, k9, r9); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Accept after corruption was found: %v", err)
	}
}
