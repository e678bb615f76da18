//go:build unix

package capability

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestStoreWithoutExpiryOpens writes a version 2 store file exactly as the
// build before expiry wrote it (records without "expires_at") and checks
// that its token authenticates, whatever the clock says, and that a write
// keeps the record without an expiry.
func TestStoreWithoutExpiryOpens(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "credentials")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	key := make([]byte, keySize)
	for i := range key {
		key[i] = byte(i + 1)
	}
	const token = "riffdb_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	h := hmac.New(sha256.New, key)
	h.Write([]byte(token))
	caps := fmt.Sprintf(`[{"id":"0123456789abcdef","name":"old","permissions":["read_health"],"database":"",`+
		`"created_at":"2020-01-02T03:04:05Z","revoked":false,"token_hash":"%x"}]`, h.Sum(nil))
	file := fmt.Sprintf("{\n  \"version\": 2,\n  \"capabilities\": %s,\n  \"integrity\": %q\n}\n",
		caps, hex.EncodeToString(seal(key, storeVersion, 0, []byte(caps))))
	for name, data := range map[string][]byte{keyFile: key, storeFile: []byte(file)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	s := openAt(t, dir, &now)
	c, err := s.Authenticate(token)
	if err != nil || c.ID != "0123456789abcdef" || !c.ExpiresAt.IsZero() {
		t.Fatalf("Authenticate = %+v, %v", c, err)
	}
	if _, _, err := s.Create("new", []Permission{ReadHealth}, ""); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, dir, &now)
	if _, err := s.Authenticate(token); err != nil {
		t.Fatalf("after a write: %v", err)
	}
}

// TestDecodeRefusesExpiryBeforeCreation checks that a record expiring
// before it was created, which no build writes, is damage.
func TestDecodeRefusesExpiryBeforeCreation(t *testing.T) {
	s, _ := sealedStore(t)
	doc := document{Capabilities: []record{{Capability: Capability{ID: "0123456789abcdef", Permissions: []Permission{ReadHealth},
		CreatedAt: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), ExpiresAt: time.Date(2029, 1, 1, 0, 0, 0, 0, time.UTC)},
		TokenHash: hex.EncodeToString(make([]byte, sha256.Size))}}}
	if _, err := s.encode(doc); err == nil {
		t.Fatal("encoded a record that expires before it was created")
	}
	caps := []byte(`[{"id":"0123456789abcdef","name":"","permissions":["read_health"],"database":"",` +
		`"created_at":"2030-01-01T00:00:00Z","revoked":false,"expires_at":"2029-01-01T00:00:00Z","token_hash":"` +
		hex.EncodeToString(make([]byte, sha256.Size)) + `"}]`)
	file := fmt.Sprintf(`{"version":2,"capabilities":%s,"integrity":%q}`, caps, hex.EncodeToString(seal(s.key, storeVersion, 0, caps)))
	if _, err := decode([]byte(file), s.key); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("decode: err = %v, want ErrCorrupt", err)
	}
	doc.Capabilities[0].ExpiresAt = doc.Capabilities[0].CreatedAt.Add(time.Hour)
	data, err := s.encode(doc)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := decode(data, s.key); err != nil || !got.Capabilities[0].ExpiresAt.Equal(doc.Capabilities[0].ExpiresAt) {
		t.Fatalf("decode = %+v, %v", got, err)
	}
}
