package capability

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/riffdb/riffdb/internal/process/clock"
)

// sealedStore returns a store holding a global, a scoped and a revoked
// capability whose names need escaping, and its store file.
func sealedStore(t *testing.T) (*Store, []byte) {
	t.Helper()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	s := openAt(t, filepath.Join(t.TempDir(), "c"), &now)
	for _, c := range []struct {
		name string
		perm Permission
		db   string
	}{
		{"ops <admin> & é \u2028", ManageCapabilities, ""},
		{"orders writer", ExecuteCommands, "orders"},
		{"", ReadStatistics, ""},
	} {
		now = now.Add(1234567891)
		if _, _, err := s.Create(c.name, []Permission{c.perm}, c.db); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Revoke(s.records[2].ID); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(s.dir, storeFile))
	if err != nil {
		t.Fatal(err)
	}
	return s, data
}

// TestEncodingRoundTripIsByteStable decodes a store file and encodes it
// again: the bytes must not change (times, omitted revoked_at, escaped
// names, cached hashes), so that a write leaves the records it does not
// change exactly as they were.
func TestEncodingRoundTripIsByteStable(t *testing.T) {
	s, data := sealedStore(t)
	doc, err := decode(data, s.key)
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.encode(doc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, data) {
		t.Fatalf("round trip changed the store file:\n%s\nbecame\n%s", data, again)
	}
	// And the cache a write starts from encodes the same way.
	if again, err = s.encode(document{Generation: s.generation, Capabilities: s.records}); err != nil || !bytes.Equal(again, data) {
		t.Fatalf("the cached records encode differently (%v):\n%s", err, again)
	}
}

// TestDecodeRefusesEveryFlippedByte flips each byte of a store file in
// three ways (lowest bit, ASCII case bit, all bits): every result must be
// refused as corrupt. Whitespace outside strings is the only part the tag
// does not cover, and no flip of it yields other valid whitespace.
func TestDecodeRefusesEveryFlippedByte(t *testing.T) {
	s, data := sealedStore(t)
	for i := range data {
		for _, mask := range []byte{0x01, 0x20, 0xff} {
			damaged := bytes.Clone(data)
			damaged[i] ^= mask
			if _, err := decode(damaged, s.key); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("byte %d (%q) ^ %#x: err = %v, want ErrCorrupt\n%s", i, data[i], mask, err, damaged)
			}
		}
	}
}

// FuzzDecode checks that decode never panics, and that whatever it accepts
// with a key encodes to a file that decodes to the same records.
func FuzzDecode(f *testing.F) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	s, err := OpenWith(filepath.Join(f.TempDir(), "c"), Options{Clock: clock.Func(func() time.Time { return now })})
	if err != nil {
		f.Fatal(err)
	}
	if _, _, err := s.Create("fuzz", []Permission{ReadHealth}, "orders"); err != nil {
		f.Fatal(err)
	}
	sealed, err := os.ReadFile(filepath.Join(s.dir, storeFile))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sealed)
	f.Add([]byte(`{"version":1,"capabilities":[]}`))
	f.Add([]byte(`{"version":1,"capabilities":[{"id":"0123456789abcdef","name":"","permissions":["read_health"],"database":"","created_at":"2030-01-01T00:00:00Z","revoked":false,"token_hash":"` +
		string(bytes.Repeat([]byte("00"), 32)) + `"}]}`))
	f.Add([]byte(`{"version":2,"capabilities":[],"integrity":""}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := decode(data, s.key)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
			return
		}
		again, err := s.encode(doc)
		if err != nil {
			t.Fatalf("an accepted store does not encode: %v", err)
		}
		doc2, err := decode(again, s.key)
		if err != nil || len(doc2.Capabilities) != len(doc.Capabilities) {
			t.Fatalf("re-encoded store: %d records, %v; want %d", len(doc2.Capabilities), err, len(doc.Capabilities))
		}
		for i := range doc.Capabilities {
			a, b := doc.Capabilities[i], doc2.Capabilities[i]
			if a.ID != b.ID || a.Name != b.Name || a.TokenHash != b.TokenHash || !a.CreatedAt.Equal(b.CreatedAt) || a.Revoked != b.Revoked {
				t.Fatalf("record %d changed: %+v became %+v", i, a, b)
			}
		}
	})
}

// TestSealSeparatesDomains checks that a document tag is never computed
// over the same input as a token hash: a token is printable, the domain
// contains a NUL byte.
func TestSealSeparatesDomains(t *testing.T) {
	key := make([]byte, keySize)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	if bytes.ContainsRune([]byte(TokenPrefix), 0) || !bytes.ContainsRune([]byte(integrityDomain), 0) {
		t.Fatal("the integrity domain must contain a NUL byte and tokens none")
	}
	if bytes.Equal(seal(key, storeVersion, 0, []byte("[]")), seal(key, legacyVersion, 0, []byte("[]"))) {
		t.Fatal("the tag does not cover the version")
	}
}
