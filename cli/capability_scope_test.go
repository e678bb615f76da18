package cli_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/capability"
	"github.com/riffdb/riffdb/cli"
	"github.com/riffdb/riffdb/statsapi"
)

// TestCapabilityCreateHelpMatchesScopes checks what `capability create
// --help` says about scoped capabilities against what the API does: a
// scoped read_health reads the health of its own database only, and the
// permissions that need a global capability are refused with --database.
func TestCapabilityCreateHelpMatchesScopes(t *testing.T) {
	t.Parallel()
	var help bytes.Buffer
	if code := cli.Main([]string{"capability", "create", "--help"}, strings.NewReader(""), &help, &help); code != cli.ExitOK {
		t.Fatalf("help: exit %d", code)
	}
	text := strings.Join(strings.Fields(help.String()), " ")
	for _, claim := range []string{
		"read_health shows that database's health only",
		"read_statistics and manage_capabilities need a global capability",
		"manage_backups takes and lists backups of that database only",
		"read_outbox lists and looks up that database's undelivered events only",
		"--expires-in",
	} {
		if !strings.Contains(text, claim) {
			t.Errorf("help does not say %q:\n%s", claim, help.String())
		}
	}
	for _, p := range capability.AllPermissions() {
		if !strings.Contains(text, string(p)) {
			t.Errorf("help does not list permission %s", p)
		}
	}
	if strings.Contains(text, "cannot read statistics or health") {
		t.Errorf("help still says a scoped capability cannot read health")
	}

	f := capSetup(t)
	scoped := f.create(t, "--permission", "read_health", "--database", "orders")
	global := f.create(t, "--permission", "read_health")
	store, err := capability.Open(f.creds)
	if err != nil {
		t.Fatal(err)
	}
	h := statsapi.NewHandler(statsapi.Options{
		Auth:  store,
		Stats: func() statsapi.Stats { return statsapi.Stats{} },
		Health: func() statsapi.HealthReport {
			return statsapi.HealthReport{Ready: true, Databases: []statsapi.DatabaseHealth{{Alias: "billing"}, {Alias: "orders"}}}
		},
	})
	get := func(path, token string) (int, []string) {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var rep statsapi.HealthReport
		_ = json.Unmarshal(rec.Body.Bytes(), &rep)
		var aliases []string
		for _, d := range rep.Databases {
			aliases = append(aliases, d.Alias)
		}
		return rec.Code, aliases
	}
	if code, aliases := get("/v1/health", scoped.Token); code != http.StatusOK || strings.Join(aliases, ",") != "orders" {
		t.Errorf("scoped read_health: %d %v, want 200 [orders]", code, aliases)
	}
	if code, aliases := get("/v1/health", global.Token); code != http.StatusOK || strings.Join(aliases, ",") != "billing,orders" {
		t.Errorf("global read_health: %d %v, want 200 [billing orders]", code, aliases)
	}

	for _, p := range []string{"read_statistics", "manage_capabilities"} {
		code, env := f.run(t, "capability", "create", "--config", f.config, "--permission", "read_health", "--permission", p, "--database", "orders")
		if code != cli.ExitLocal || env.Error == nil || env.Error.Code != "invalid_scope" || !strings.Contains(env.Error.Message, p) {
			t.Errorf("scoped %s: exit %d, %+v", p, code, env.Error)
		}
	}
	if list := f.list(t); len(list) != 2 {
		t.Errorf("refused creations stored capabilities: %+v", list)
	}
}
