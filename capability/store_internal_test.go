package capability

import (
	"crypto/hmac"
	"path/filepath"
	"testing"
	"time"

	"github.com/riffdb/riffdb/internal/process/clock"
)

func openAt(t *testing.T, dir string, now *time.Time) *Store {
	t.Helper()
	s, err := OpenWith(dir, Options{Clock: clock.Func(func() time.Time { return *now })})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestAuthenticateComparesEveryRecordInConstantTime checks that lookups go
// through hmac.Equal and never stop at the first match.
func TestAuthenticateComparesEveryRecordInConstantTime(t *testing.T) {
	now := time.Unix(1_900_000_000, 0)
	s := openAt(t, filepath.Join(t.TempDir(), "c"), &now)
	var tokens []string
	for range 4 {
		tok, _, err := s.Create("", []Permission{ReadHealth}, "")
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, tok)
	}
	calls := 0
	s.compare = func(a, b []byte) bool {
		calls++
		return hmac.Equal(a, b)
	}
	for _, tok := range tokens {
		calls = 0
		if _, err := s.Authenticate(tok); err != nil {
			t.Fatal(err)
		}
		if calls != len(tokens) {
			t.Fatalf("%d comparisons for %d records: the lookup is not constant-time", calls, len(tokens))
		}
	}
	// The stored value is the keyed hash, not a plain digest of the token.
	if got := s.records[0].hash; !hmac.Equal(got, s.mac(tokens[0])) || len(s.key) != keySize {
		t.Fatal("stored hash is not HMAC(key, token)")
	}
}

// TestRefreshReadsOnlyOnChange checks the refresh throttle: no stat within
// the interval, no read when the file is unchanged, one read after a change.
func TestRefreshReadsOnlyOnChange(t *testing.T) {
	now := time.Unix(1_900_000_000, 0)
	dir := filepath.Join(t.TempDir(), "c")
	s := openAt(t, dir, &now)
	tok, c, err := s.Create("", []Permission{ReadHealth}, "")
	if err != nil {
		t.Fatal(err)
	}
	base := s.reads
	for range 10 {
		now = now.Add(DefaultRefreshInterval)
		if _, err := s.Authenticate(tok); err != nil {
			t.Fatal(err)
		}
	}
	if s.reads != base {
		t.Fatalf("%d reads of an unchanged store", s.reads-base)
	}
	other := openAt(t, dir, &now)
	if err := other.Revoke(c.ID); err != nil {
		t.Fatal(err)
	}
	// Within the interval the cached view is used (no stat, no read).
	now = now.Add(DefaultRefreshInterval / 2)
	if _, err := s.Authenticate(tok); err != nil {
		t.Fatalf("within the interval: %v", err)
	}
	if s.reads != base {
		t.Fatal("store read within the refresh interval")
	}
	now = now.Add(DefaultRefreshInterval / 2)
	if _, err := s.Authenticate(tok); err == nil {
		t.Fatal("revocation not seen after the refresh interval")
	}
	if s.reads != base+1 {
		t.Fatalf("%d reads after one change, want 1", s.reads-base)
	}
}
