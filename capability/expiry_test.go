package capability_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/riffdb/riffdb/capability"
)

// TestExpiry checks that an expiring token authenticates until its expiry
// time, by the store's clock, and is refused from then on exactly like an
// unknown token, by this store and by another one opened later.
func TestExpiry(t *testing.T) {
	s, b := setup(t)
	perms := []capability.Permission{capability.ExecuteCommands}
	tok, c, err := s.CreateExpiring("ci", perms, "orders", 720*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if want := b.clock.Now().Add(720 * time.Hour); !c.ExpiresAt.Equal(want) {
		t.Fatalf("ExpiresAt = %v, want %v", c.ExpiresAt, want)
	}
	b.clock.Advance(time.Second) // List sorts by creation time
	forever, _, err := s.Create("app", perms, "orders")
	if err != nil {
		t.Fatal(err)
	}

	b.clock.Advance(720*time.Hour - time.Second - time.Nanosecond)
	if got, err := s.Authenticate(tok); err != nil || got.ID != c.ID || got.Expired(b.clock.Now()) {
		t.Fatalf("just before the expiry: %+v, %v", got, err)
	}

	b.clock.Advance(time.Nanosecond)
	for _, st := range []*capability.Store{s, b.open(t)} {
		_, err := st.Authenticate(tok)
		if !errors.Is(err, capability.ErrUnauthenticated) {
			t.Fatalf("at the expiry: err = %v, want ErrUnauthenticated", err)
		}
		if _, err := st.Authenticate(forever); err != nil {
			t.Fatalf("a capability without expiry: %v", err)
		}
	}

	list, err := s.List()
	if err != nil || len(list) != 2 {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if !list[0].Expired(b.clock.Now()) || !list[0].ExpiresAt.Equal(c.ExpiresAt) || list[1].Expired(b.clock.Now()) || !list[1].ExpiresAt.IsZero() {
		t.Fatalf("List = %+v", list)
	}
	// A record without expiry is stored as before: no expires_at at all.
	data := readFile(t, filepath.Join(b.dir, "capabilities.json"))
	if n := bytes.Count(data, []byte(`"expires_at"`)); n != 1 {
		t.Fatalf("the store file holds %d expires_at fields, want 1:\n%s", n, data)
	}
}

func TestCreateExpiringInvalid(t *testing.T) {
	s, _ := setup(t)
	perms := []capability.Permission{capability.ReadHealth}
	for _, d := range []time.Duration{-time.Second, capability.MaxLifetime + time.Nanosecond} {
		if _, _, err := s.CreateExpiring("x", perms, "", d); !errors.Is(err, capability.ErrInvalid) {
			t.Errorf("lifetime %v: err = %v, want ErrInvalid", d, err)
		}
	}
	if _, c, err := s.CreateExpiring("x", perms, "", capability.MaxLifetime); err != nil || c.ExpiresAt.IsZero() {
		t.Errorf("MaxLifetime: %+v, %v", c, err)
	}
	if list, _ := s.List(); len(list) != 1 {
		t.Errorf("refused lifetimes stored capabilities: %+v", list)
	}
}

func TestGlobalOnly(t *testing.T) {
	for p, want := range map[capability.Permission]bool{capability.ExecuteCommands: false, capability.ReadHealth: false,
		capability.ReadStatistics: true, capability.ManageCapabilities: true} {
		if got := p.GlobalOnly(); got != want {
			t.Errorf("%s.GlobalOnly() = %v, want %v", p, got, want)
		}
		// GlobalOnly agrees with Allows: a scoped capability with p does not
		// satisfy the global requirement.
		scoped := capability.Capability{Permissions: []capability.Permission{p}, Database: "orders"}
		if scoped.Allows(p, "") {
			t.Errorf("a scoped %s satisfies a global requirement", p)
		}
	}
}
