package archive

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/riffdb/riffdb/event"
)

func FuzzDecodeValue(f *testing.F) {
	k, r := rec(f, testDatabase, 3, 1, `{"x":1}`)
	good := encodeValue(k, r)
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add([]byte{})
	f.Add([]byte{recordVersion, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, v []byte) {
		rec, st, err := decodeValue(k, v)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if st.ID != k.Event || !bytes.Equal(st.Encode(), rec) || !bytes.Equal(encodeValue(k, rec), v) {
			t.Fatal("decoded value does not round-trip")
		}
	})
}

func FuzzDecodeMarker(f *testing.F) {
	f.Add(encodeMarker(formatVersion))
	f.Add(encodeMarker(minFormatVersion))
	f.Add(encodeMarker(formatVersion + 1))
	f.Add([]byte("RIFFARCH"))
	f.Add([]byte("NOTARCHIVE0000"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decodeMarker(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrIncompatibleFormat) {
				t.Fatalf("error %v is neither corrupt nor incompatible", err)
			}
			return
		}
		if v < minFormatVersion || v > formatVersion || !bytes.Equal(encodeMarker(v), b) {
			t.Fatal("accepted marker does not round-trip")
		}
	})
}

func FuzzDecodeMetadata(f *testing.F) {
	f.Add(encodeAccounting(accounting{Records: 3, EncodedBytes: 999}), encodeBinding(testDatabase))
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, acct, binding []byte) {
		if a, err := decodeAccounting(acct); err == nil {
			if !bytes.Equal(encodeAccounting(a), acct) {
				t.Fatal("accounting does not round-trip")
			}
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatal(err)
		}
		if id, err := decodeBinding(binding); err == nil {
			if !bytes.Equal(encodeBinding(id), binding) {
				t.Fatal("binding does not round-trip")
			}
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatal(err)
		}
	})
}

func FuzzCursor(f *testing.F) {
	k := event.Key{Database: testDatabase, Incarnation: 2, Event: event.ID{Seq: 42, Pos: 3}}
	good, _ := newCursor(makeArchiveID(testDatabase, nil), k).MarshalText()
	f.Add(good)
	f.Add([]byte(""))
	f.Add([]byte("AAAA"))
	f.Add([]byte("!!!"))
	f.Fuzz(func(t *testing.T, text []byte) {
		var c Cursor
		if err := c.UnmarshalText(text); err != nil {
			if !errors.Is(err, ErrInvalidCursor) {
				t.Fatalf("error %v does not wrap ErrInvalidCursor", err)
			}
			return
		}
		id, key, ok, err := c.decode()
		if err != nil {
			t.Fatalf("accepted cursor does not decode: %v", err)
		}
		if !ok {
			if len(c) != 0 {
				t.Fatal("non-empty cursor without a key")
			}
			return
		}
		if _, _, err := c.key(id); err != nil {
			t.Fatalf("cursor refused by its own archive: %v", err)
		}
		if _, _, err := c.key(archiveID{}); id != (archiveID{}) && !errors.Is(err, ErrInvalidCursor) {
			t.Fatalf("cursor accepted by another archive: %v", err)
		}
		out, _ := newCursor(id, key).MarshalText()
		if !bytes.Equal(out, text) {
			t.Fatal("the cursor's text does not round-trip")
		}
		var back Cursor
		if err := back.UnmarshalText(out); err != nil || !bytes.Equal(back, c) {
			t.Fatal("cursor does not round-trip")
		}
	})
}

func TestMarkerDecodeClasses(t *testing.T) {
	t.Parallel()
	m := encodeMarker(formatVersion)
	if v, err := decodeMarker(m); err != nil || v != formatVersion {
		t.Fatalf("good marker: %v, %v", v, err)
	}
	bad := bytes.Clone(m)
	bad[len(bad)-1] ^= 1
	if _, err := decodeMarker(bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("checksum flip: %v", err)
	}
	if _, err := decodeMarker(encodeMarker(7)); !errors.Is(err, ErrIncompatibleFormat) {
		t.Fatalf("future version: %v", err)
	}
	if _, err := decodeMarker([]byte("OTHERMAGIC....")); !errors.Is(err, ErrIncompatibleFormat) {
		t.Fatalf("foreign magic: %v", err)
	}
}

func TestValueChecksumCoversKey(t *testing.T) {
	t.Parallel()
	k, r := rec(t, testDatabase, 3, 0, "p")
	other := k
	other.Incarnation = 2
	if _, _, err := decodeValue(other, encodeValue(k, r)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("value under another key: %v", err)
	}
}

// TestCheckEngineFormat pins the range and the message of the one
// storage-engine format check that Open and Inspect share.
func TestCheckEngineFormat(t *testing.T) {
	for _, v := range []pebble.FormatMajorVersion{FormatMajorVersion, pebble.FormatNewest} {
		if err := checkEngineFormat(v); err != nil {
			t.Errorf("format %d: %v, want nil", v, err)
		}
	}
	for _, v := range []pebble.FormatMajorVersion{FormatMajorVersion - 1, pebble.FormatNewest + 1} {
		err := checkEngineFormat(v)
		if !errors.Is(err, ErrIncompatibleFormat) {
			t.Fatalf("format %d: %v, want ErrIncompatibleFormat", v, err)
		}
		want := fmt.Sprintf("archive: incompatible format: storage engine format %d (supported %d..%d)",
			v, FormatMajorVersion, pebble.FormatNewest)
		if err.Error() != want {
			t.Errorf("format %d: %q, want %q", v, err.Error(), want)
		}
	}
}

func FuzzStepCursor(f *testing.F) {
	good := (&stepState{id: makeArchiveID(testDatabase, []byte{1}), acct: accounting{Records: 9, EncodedBytes: 900},
		count: true, steps: 2, pages: 3, records: 5, bytes: 500,
		incs: []IncarnationCount{{1, 2}, {4, 3}}, last: event.Key{Database: testDatabase, Incarnation: 4, Event: event.ID{Seq: 7}}}).encode(testCursorKey)
	f.Add(good)
	f.Add("")
	f.Add(good[:len(good)-3])
	f.Add("!!")
	f.Fuzz(func(t *testing.T, text string) {
		s, err := decodeStepState(text, testCursorKey)
		if err != nil {
			if !errors.Is(err, ErrInvalidCursor) {
				t.Fatalf("error %v does not wrap ErrInvalidCursor", err)
			}
			return
		}
		if s.encode(testCursorKey) != text {
			t.Fatal("step cursor does not round-trip")
		}
	})
}

// testCursorKey is the cursor key of the cursor tests that need no store.
var testCursorKey = cursorKey{b: [cursorKeyLen]byte{1, 2, 3}}

func TestStepCursorRefusesDamage(t *testing.T) {
	t.Parallel()
	s := &stepState{id: makeArchiveID(testDatabase, nil), acct: accounting{Records: 3, EncodedBytes: 30}, steps: 1, pages: 1,
		records: 2, bytes: 20, last: event.Key{Database: testDatabase, Incarnation: 1, Event: event.ID{Seq: 2}}}
	text := s.encode(testCursorKey)
	back, err := decodeStepState(text, testCursorKey)
	if err != nil || back.encode(testCursorKey) != text {
		t.Fatalf("round trip: %v", err)
	}
	raw, _ := base64.RawURLEncoding.DecodeString(text)
	for i := range raw {
		b := bytes.Clone(raw)
		b[i] ^= 0x40
		if _, err := decodeStepState(base64.RawURLEncoding.EncodeToString(b), testCursorKey); !errors.Is(err, ErrInvalidCursor) {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
	}
	for n := 0; n < len(text); n++ {
		if _, err := decodeStepState(text[:n], testCursorKey); !errors.Is(err, ErrInvalidCursor) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
	}
	old := bytes.Clone(raw)
	old[1] = 0
	if _, err := decodeStepState(base64.RawURLEncoding.EncodeToString(old), testCursorKey); !errors.Is(err, ErrInvalidCursor) ||
		!strings.Contains(err.Error(), "version") {
		t.Fatalf("other version: %v", err)
	}
}

// TestSetRecordEncodesAsEncodeValue: the record and the accounting that
// Accept encodes into its batch (setRecord, setAccounting) are, key and
// value, what encodeValue and encodeAccounting give, and the batch holds
// nothing else.
func TestSetRecordEncodesAsEncodeValue(t *testing.T) {
	k, r := rec(t, testDatabase, 3, 1, `{"order_id":"o-1","amount_cents":125}`)
	a := accounting{Records: 7, EncodedBytes: 4096}
	b := new(pebble.Batch)
	rk := recordKey(k)
	setRecord(b, rk, r)
	setAccounting(b, a)
	want := []struct{ key, value []byte }{{rk, encodeValue(k, r)}, {keyAccounting, encodeAccounting(a)}}
	rd := b.Reader()
	for i, w := range want {
		kind, key, value, ok, err := rd.Next()
		if err != nil || !ok || kind != pebble.InternalKeyKindSet {
			t.Fatalf("entry %d: kind %v, ok %v, err %v", i, kind, ok, err)
		}
		if !bytes.Equal(key, w.key) || !bytes.Equal(value, w.value) {
			t.Fatalf("entry %d: %x = %x, want %x = %x", i, key, value, w.key, w.value)
		}
	}
	if _, _, _, ok, err := rd.Next(); ok || err != nil {
		t.Fatalf("more in the batch than the record and the accounting (err %v)", err)
	}
	if _, _, err := decodeValue(k, want[0].value); err != nil {
		t.Fatal(err)
	}
}
