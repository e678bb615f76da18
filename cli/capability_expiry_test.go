package cli_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/riffdb/riffdb/capability"
	"github.com/riffdb/riffdb/cli"
	"github.com/riffdb/riffdb/internal/process/clock"
)

// capExpiry is the expiry part of a capability in the JSON output.
type capExpiry struct {
	ID        string  `json:"id"`
	CreatedAt string  `json:"created_at"`
	ExpiresAt *string `json:"expires_at"`
	Expired   bool    `json:"expired"`
}

func TestCapabilityCreateExpiresIn(t *testing.T) {
	t.Parallel()
	f := capSetup(t)
	code, env := f.run(t, "capability", "create", "--config", f.config, "--permission", "execute_commands", "--expires-in", "720h")
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %+v", code, env.Error)
	}
	var created struct {
		capExpiry
		Token string `json:"token"`
	}
	if err := json.Unmarshal(env.Result, &created); err != nil || created.ExpiresAt == nil || created.Expired {
		t.Fatalf("result %s: %v", env.Result, err)
	}
	at, err1 := time.Parse(time.RFC3339Nano, created.CreatedAt)
	exp, err2 := time.Parse(time.RFC3339Nano, *created.ExpiresAt)
	if err1 != nil || err2 != nil || exp.Sub(at) != 720*time.Hour {
		t.Fatalf("created_at %s, expires_at %s", created.CreatedAt, *created.ExpiresAt)
	}
	// The store a server opens honours it: the token works now and not
	// after its expiry.
	store, err := capability.Open(f.creds)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Authenticate(created.Token); err != nil {
		t.Fatalf("fresh token: %v", err)
	}
	later, err := capability.OpenWith(f.creds, capability.Options{Clock: clock.Func(func() time.Time { return exp })})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := later.Authenticate(created.Token); !errors.Is(err, capability.ErrUnauthenticated) {
		t.Fatalf("at the expiry: err = %v, want ErrUnauthenticated", err)
	}

	for _, v := range []string{"0s", "-1h", "87601h"} {
		code, env := f.run(t, "capability", "create", "--config", f.config, "--permission", "read_health", "--expires-in", v)
		if code != cli.ExitLocal || env.Error == nil || env.Error.Code != "invalid_expiry" || !strings.Contains(env.Error.Message, "87600h") {
			t.Errorf("--expires-in %s: exit %d, %+v", v, code, env.Error)
		}
	}
	if code, env := f.run(t, "capability", "create", "--config", f.config, "--permission", "read_health", "--expires-in", "month"); code != cli.ExitLocal || env.Error.Code != "usage" {
		t.Errorf("--expires-in month: exit %d, %+v", code, env.Error)
	}
	if list := f.list(t); len(list) != 1 {
		t.Fatalf("refused creations stored capabilities: %+v", list)
	}
}

// TestCapabilityListShowsExpiry lists a capability that never expires, one
// that expires in the future and one that expired (created with a clock in
// the past), in JSON and in text.
func TestCapabilityListShowsExpiry(t *testing.T) {
	t.Parallel()
	f := capSetup(t)
	never := f.create(t, "--permission", "read_health", "--name", "never")
	past := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	old, err := capability.OpenWith(f.creds, capability.Options{Clock: clock.Func(func() time.Time { return past })})
	if err != nil {
		t.Fatal(err)
	}
	_, expired, err := old.CreateExpiring("expired", []capability.Permission{capability.ReadHealth}, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	code, env := f.run(t, "capability", "create", "--config", f.config, "--permission", "read_health", "--name", "future", "--expires-in", "1h")
	if code != cli.ExitOK {
		t.Fatalf("create: %+v", env.Error)
	}

	code, env = f.run(t, "capability", "list", "--config", f.config)
	if code != cli.ExitOK {
		t.Fatalf("list: %+v", env.Error)
	}
	var res struct {
		Capabilities []capExpiry `json:"capabilities"`
	}
	if err := json.Unmarshal(env.Result, &res); err != nil || len(res.Capabilities) != 3 {
		t.Fatalf("list %s: %v", env.Result, err)
	}
	// Oldest first: expired (2020), never, future.
	e, n, fu := res.Capabilities[0], res.Capabilities[1], res.Capabilities[2]
	if e.ID != expired.ID || e.ExpiresAt == nil || *e.ExpiresAt != "2020-01-02T04:04:05Z" || !e.Expired {
		t.Errorf("expired capability listed as %+v", e)
	}
	if n.ID != never.ID || n.ExpiresAt != nil || n.Expired {
		t.Errorf("capability without expiry listed as %+v", n)
	}
	if fu.ExpiresAt == nil || fu.Expired {
		t.Errorf("future expiry listed as %+v", fu)
	}
	if !bytes.Contains(env.Result, []byte(`"expires_at":null`)) {
		t.Errorf("no expiry is not null: %s", env.Result)
	}

	var stdout, stderr bytes.Buffer
	if code := cli.Main([]string{"capability", "list", "--config", f.config}, strings.NewReader(""), &stdout, &stderr); code != cli.ExitOK {
		t.Fatalf("text list: exit %d, %s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 3 ||
		!strings.Contains(lines[0], "expired  ") || !strings.Contains(lines[0], "expired 2020-01-02T04:04:05Z") ||
		!strings.Contains(lines[1], "active ") || !strings.Contains(lines[1], "never expires") ||
		!strings.Contains(lines[2], "active ") || !strings.Contains(lines[2], "expires 20") {
		t.Errorf("text list:\n%s", stdout.String())
	}
}
