package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// createCapability creates a read_statistics capability with the CLI and
// returns its token and id.
func (e *env) createCapability(name string) (token, id string) {
	e.t.Helper()
	r := cli(e.t, "capability", "create", "--config", e.config, "--name", name, "--permission", "read_statistics")
	if !r.OK {
		e.t.Fatalf("capability create: %+v %s", r.Error, r.Stderr)
	}
	var res struct {
		Token string `json:"token"`
		ID    string `json:"id"`
	}
	must(e.t, json.Unmarshal(r.Result, &res))
	return res.Token, res.ID
}

// revoke revokes a capability with the CLI.
func (e *env) revoke(id string) {
	e.t.Helper()
	if r := cli(e.t, "capability", "revoke", "--config", e.config, id); !r.OK {
		e.t.Fatalf("capability revoke: %+v %s", r.Error, r.Stderr)
	}
}

// storeFile is the credential store's file in e's installation.
func (e *env) storeFile() string {
	return filepath.Join(e.root, "credentials", "capabilities.json")
}

// putBack replaces the credential store's file by older, as a restore from a
// backup would: a new file renamed over the current one.
func (e *env) putBack(older []byte) {
	e.t.Helper()
	tmp := e.storeFile() + ".restore"
	must(e.t, os.WriteFile(tmp, older, 0o600))
	must(e.t, os.Rename(tmp, e.storeFile()))
}

// statsStatus returns the status of GET /v1/stats with token.
func (p *proc) statsStatus(token string) int {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, _, err := p.do(ctx, http.MethodGet, "/v1/stats", token, nil)
	must(p.t, err)
	return code
}

// TestCredentialRollbackIsRefusedAtStart copies the credential store, revokes
// a token offline, puts the older copy back and starts the server: the start
// is refused with credentials_refused, saying the store was rolled back. The
// operator then accepts the restored copy with `capability accept-restored`:
// the next start succeeds, logs the acceptance at warn level, and the token
// revoked after the copy was taken authenticates again, because the operator
// accepted the copy that still grants it.
func TestCredentialRollbackIsRefusedAtStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	token, id := e.createCapability("rolled-back")
	e.start().stop() // the database exists, and has seen the store

	older, err := os.ReadFile(e.storeFile())
	must(t, err)
	e.revoke(id)
	e.putBack(older)

	startupRefused(t, e, "credentials_refused", "rolled back")

	r := cli(t, "capability", "list", "--config", e.config)
	if r.OK || r.Error == nil || r.Error.Code != "credentials_rolled_back" {
		t.Fatalf("capability list on the rolled-back store: %+v, want credentials_rolled_back", r.Error)
	}
	if strings.Contains(r.Error.Message, e.root) {
		t.Errorf("message %q names a path", r.Error.Message)
	}

	r = cli(t, "capability", "accept-restored", "--config", e.config)
	if !r.OK {
		t.Fatalf("capability accept-restored: %+v %s", r.Error, r.Stderr)
	}
	var acc struct {
		Accepted           bool   `json:"accepted"`
		Generation         uint64 `json:"generation"`
		RecordedGeneration uint64 `json:"recorded_generation"`
	}
	must(t, json.Unmarshal(r.Result, &acc))
	if !acc.Accepted || acc.Generation >= acc.RecordedGeneration {
		t.Fatalf("accept-restored result %s, want accepted with a lower generation", r.Result)
	}

	p := e.start()
	defer p.stop()
	if code := p.statsStatus(token); code != http.StatusOK {
		t.Fatalf("the accepted copy's token: status %d, want 200 (it was revoked after the copy)", code)
	}
	if !hasWarn(p.stderr.String(), "accepted after a rollback") {
		t.Errorf("no warn line about the accepted rollback:\n%s", p.stderr.String())
	}
}

// TestCredentialRollbackWhileRunningFailsClosed puts an older copy of the
// credential store back under a running server, after a token was revoked:
// requests with tokens are not authenticated (500, as for a damaged store),
// and the log says the store was rolled back.
func TestCredentialRollbackWhileRunningFailsClosed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	token, id := e.createCapability("rolled-back")
	other, _ := e.createCapability("other")
	p := e.start()
	defer p.stop()
	if code := p.statsStatus(token); code != http.StatusOK {
		t.Fatalf("status %d before the revocation, want 200", code)
	}
	older, err := os.ReadFile(e.storeFile())
	must(t, err)
	e.revoke(id)
	waitFor(t, 10*time.Second, "the revocation to take effect", func() bool {
		return p.statsStatus(token) == http.StatusUnauthorized
	})

	e.putBack(older)
	time.Sleep(time.Second) // past the store's refresh interval
	for _, tok := range []string{token, other} {
		if code := p.statsStatus(tok); code == http.StatusOK {
			t.Fatalf("a token authenticated against the rolled-back store")
		} else if code != http.StatusInternalServerError {
			t.Errorf("status %d against the rolled-back store, want 500", code)
		}
	}
	waitFor(t, 10*time.Second, "the rolled-back log line", func() bool {
		return strings.Contains(p.stderr.String(), "rolled back")
	})
	if strings.Contains(p.stderr.String(), e.root) {
		t.Errorf("the log names a path of the installation")
	}
}

// hasWarn reports whether a JSON log line at warn level contains says.
func hasWarn(log, says string) bool {
	for _, line := range strings.Split(log, "\n") {
		var l struct {
			Level string `json:"level"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Level == "warn" && strings.Contains(line, says) {
			return true
		}
	}
	return false
}
