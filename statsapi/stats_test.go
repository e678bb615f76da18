package statsapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/capability"
	"github.com/riffdb/riffdb/statsapi"
)

func setup(t *testing.T) (http.Handler, map[string]string) {
	t.Helper()
	store, err := capability.Open(t.TempDir() + "/creds")
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]string{}
	for name, spec := range map[string]struct {
		perms []capability.Permission
		db    string
	}{
		"stats":       {[]capability.Permission{capability.ReadStatistics}, ""},
		"stats-a":     {[]capability.Permission{capability.ReadStatistics}, "a"},
		"health-a":    {[]capability.Permission{capability.ReadHealth}, "a"},
		"health-glob": {[]capability.Permission{capability.ReadHealth}, ""},
	} {
		tok, _, err := store.Create(name, spec.perms, spec.db)
		if err != nil {
			t.Fatal(err)
		}
		tokens[name] = tok
	}
	h := statsapi.NewHandler(statsapi.Options{
		Auth:  store,
		Stats: func() statsapi.Stats { return statsapi.Stats{} }, // no databases: [] not null
		Health: func() statsapi.HealthReport {
			return statsapi.HealthReport{Ready: true, Databases: []statsapi.DatabaseHealth{{Alias: "a"}, {Alias: "b"}}}
		},
	})
	return h, tokens
}

func get(h http.Handler, path, auth string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestAuthorization(t *testing.T) {
	h, tok := setup(t)
	for _, tc := range []struct {
		path, auth string
		code       int
	}{
		{"/v1/stats", "", 401},
		{"/v1/stats", "Basic abc", 401},
		{"/v1/stats", "Bearer ", 401},
		{"/v1/stats", "Bearer riffdb_unknown", 401},
		{"/v1/stats", "Bearer " + tok["stats-a"], 403},
		{"/v1/stats", "Bearer " + tok["health-glob"], 403},
		{"/v1/stats", "bearer " + tok["stats"], 200},
		{"/v1/health", "Bearer " + tok["stats"], 403},
		{"/v1/health", "Bearer " + tok["health-a"], 200},
		{"/healthz", "", 200},
	} {
		w := get(h, tc.path, tc.auth)
		if w.Code != tc.code {
			t.Errorf("%s with %q: %d %s, want %d", tc.path, tc.auth, w.Code, w.Body, tc.code)
		}
		if tc.code == 401 && w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without a challenge", tc.path)
		}
		if w.Header().Get("Cache-Control") != "no-store" {
			t.Errorf("%s: responses must not be cached", tc.path)
		}
	}
}

func TestEmptyListsAreArraysAndScopedHealthIsNarrowed(t *testing.T) {
	h, tok := setup(t)
	if body := get(h, "/v1/stats", "Bearer "+tok["stats"]).Body.String(); strings.TrimSpace(body) != `{"databases":[]}` {
		t.Fatalf("stats with no databases: %s", body)
	}
	var rep statsapi.HealthReport
	if err := json.Unmarshal(get(h, "/v1/health", "Bearer "+tok["health-a"]).Body.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Databases) != 1 || rep.Databases[0].Alias != "a" {
		t.Fatalf("scoped health shows %+v", rep.Databases)
	}
	if err := json.Unmarshal(get(h, "/v1/health", "Bearer "+tok["health-glob"]).Body.Bytes(), &rep); err != nil || len(rep.Databases) != 2 {
		t.Fatalf("global health shows %+v", rep.Databases)
	}
}

func TestNullPendingEncodesAsNull(t *testing.T) {
	b, err := json.Marshal(statsapi.DatabaseStats{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"pending_outbox_deliveries":null`, `"archive_encoded_bytes":null`, `"quota_encoded_bytes":null`} {
		if !strings.Contains(string(b), k) {
			t.Fatalf("%s missing from %s", k, b)
		}
	}
}
