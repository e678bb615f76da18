package event_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
)

func TestStoredRoundTripAndTamper(t *testing.T) {
	s, err := event.NewStored(event.ID{Seq: 42, Pos: 3}, "order_placed", []byte(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	b := s.Encode()
	if len(b) != s.EncodedLen() {
		t.Fatalf("len %d, want %d", len(b), s.EncodedLen())
	}
	got, err := event.DecodeStored(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != s.ID || got.Type != s.Type || !bytes.Equal(got.Payload, s.Payload) || got.Hash != s.Hash {
		t.Fatalf("round trip: got %+v want %+v", got, s)
	}
	if id, err := event.VerifyStored(b); err != nil || id != s.ID {
		t.Fatalf("VerifyStored = %v, %v; want %v", id, err, s.ID)
	}
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x01
		if _, err := event.DecodeStored(c); !errors.Is(err, event.ErrMalformed) {
			t.Fatalf("flip at %d accepted", i)
		}
		if _, err := event.VerifyStored(c); !errors.Is(err, event.ErrMalformed) {
			t.Fatalf("VerifyStored: flip at %d accepted", i)
		}
	}
	for _, n := range []int{0, 1, len(b) - 1} {
		if _, err := event.VerifyStored(b[:n]); !errors.Is(err, event.ErrMalformed) {
			t.Fatalf("VerifyStored: %d of %d bytes accepted", n, len(b))
		}
	}
}

// TestDecodedPayloadDoesNotAliasItsInput: DecodeStored copies the payload
// (a caller may keep it while the buffer it decoded from is reused), and
// VerifyStored, which does not, is only a check.
func TestDecodedPayloadDoesNotAliasItsInput(t *testing.T) {
	s, err := event.NewStored(event.ID{Seq: 7}, "t", []byte("payload"))
	if err != nil {
		t.Fatal(err)
	}
	b := s.Encode()
	got, err := event.DecodeStored(b)
	if err != nil {
		t.Fatal(err)
	}
	clear(b)
	if string(got.Payload) != "payload" {
		t.Fatalf("the decoded payload changed with its input: %q", got.Payload)
	}
}

func TestKeyOrderAndRoundTrip(t *testing.T) {
	db, err := event.NewDatabaseID(time.Unix(1700000000, 0))
	if err != nil {
		t.Fatal(err)
	}
	a := event.Key{Database: db, Incarnation: 1, Event: event.ID{Seq: 1, Pos: 9}}
	b := event.Key{Database: db, Incarnation: 1, Event: event.ID{Seq: 2, Pos: 0}}
	if bytes.Compare(a.Bytes(), b.Bytes()) >= 0 {
		t.Fatal("key encoding does not sort by event id")
	}
	got, err := event.DecodeKey(b.Bytes())
	if err != nil || got != b {
		t.Fatalf("DecodeKey = %v, %v", got, err)
	}
	p, err := event.ParseDatabaseID(db.String())
	if err != nil || p != db {
		t.Fatalf("ParseDatabaseID = %v, %v", p, err)
	}
	if db[6]>>4 != 7 {
		t.Fatalf("not a UUIDv7: %s", db)
	}
	for _, bad := range []string{"", "zz", db.String()[:31], db.String() + "0", "g" + db.String()[1:]} {
		if _, err := event.ParseDatabaseID(bad); err == nil {
			t.Fatalf("ParseDatabaseID(%q) accepted", bad)
		}
	}
}

func FuzzDecodeStored(f *testing.F) {
	s, _ := event.NewStored(event.ID{Seq: 1}, "t", []byte("p"))
	f.Add(s.Encode())
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := event.DecodeStored(b)
		id, verr := event.VerifyStored(b)
		if (err == nil) != (verr == nil) || (err == nil && id != s.ID) {
			t.Fatalf("DecodeStored: %v, VerifyStored: %v, %v", err, id, verr)
		}
		if err != nil {
			return
		}
		if !bytes.Equal(s.Encode(), b) {
			t.Fatalf("decoded event does not re-encode to its input")
		}
	})
}

func FuzzDecodeKey(f *testing.F) {
	f.Add(make([]byte, event.KeyLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := event.DecodeKey(b)
		if err != nil {
			return
		}
		if !bytes.Equal(k.Bytes(), b) {
			t.Fatal("key does not re-encode to its input")
		}
	})
}

// TestIDString: an identity renders as "seq.pos" in decimal, as fmt would,
// at the extremes of both fields too.
func TestIDString(t *testing.T) {
	for _, id := range []event.ID{{}, {Seq: 1, Pos: 0}, {Seq: 12, Pos: 3}, {Seq: math.MaxUint64, Pos: math.MaxUint32}} {
		want := fmt.Sprintf("%d.%d", id.Seq, id.Pos)
		if got := id.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
		if got := string(id.Append([]byte("x"))); got != "x"+want {
			t.Errorf("Append = %q, want %q", got, "x"+want)
		}
	}
}

// TestAppendEncoding: AppendEncoding appends Encode's bytes after what the
// buffer holds, and reuses its space when there is room.
func TestAppendEncoding(t *testing.T) {
	s, err := event.NewStored(event.ID{Seq: 7, Pos: 1}, "order.placed", []byte(`{"order_id":"o-1"}`))
	if err != nil {
		t.Fatal(err)
	}
	buf := append(make([]byte, 0, 256), "prefix"...)
	got := s.AppendEncoding(buf)
	if want := append([]byte("prefix"), s.Encode()...); !bytes.Equal(got, want) {
		t.Fatalf("AppendEncoding = %x, want %x", got, want)
	}
	if &got[0] != &buf[0] {
		t.Fatal("AppendEncoding did not reuse the buffer's room")
	}
}

// TestVerifyStoredAllocations: verifying a stored event, which the archive
// does for every record it accepts and its scans and scrub for every record
// they read, allocates nothing (it made a string of the type, once per
// record, for the verification to drop).
func TestVerifyStoredAllocations(t *testing.T) {
	testutil.SkipUnderRace(t)
	s, err := event.NewStored(event.ID{Seq: 1}, "order.placed", []byte(`{"order_id":"o-1"}`))
	if err != nil {
		t.Fatal(err)
	}
	b := s.Encode()
	if allocs := testing.AllocsPerRun(100, func() { _, _ = event.VerifyStored(b) }); allocs > 0 {
		t.Fatalf("VerifyStored allocates %.0f times, want 0", allocs)
	}
}
