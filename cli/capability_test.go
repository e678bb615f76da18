package cli_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/capability"
	"github.com/riffdb/riffdb/cli"
)

type capEnvelope struct {
	Schema  string          `json:"schema"`
	Command string          `json:"command"`
	OK      bool            `json:"ok"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Kind    string `json:"kind"`
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

type capResult struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	Permissions []string `json:"permissions"`
	Database    string   `json:"database"`
	CreatedAt   string   `json:"created_at"`
	Revoked     bool     `json:"revoked"`
	Token       string   `json:"token"`
}

type capFixture struct {
	root, config, creds string
}

// capSetup writes a configuration with databases "orders" and "billing"
// whose credential store lies under a fresh temporary directory.
func capSetup(t *testing.T) capFixture {
	t.Helper()
	root := filepath.Join(t.TempDir(), "riff-secret")
	f := capFixture{root: root, config: filepath.Join(t.TempDir(), "riffdb.toml"), creds: filepath.Join(root, "credentials")}
	doc := fmt.Sprintf(`[server]
credential_path = %q

[databases.orders]
path = %q
contract = %q

[databases.billing]
path = %q
contract = %q
`, f.creds, root+"/orders", root+"/orders.toml", root+"/billing", root+"/billing.toml")
	if err := os.WriteFile(f.config, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// run runs riffdb in JSON mode and checks the envelope's shape and that no
// path of the fixture leaks into the output.
func (f capFixture) run(t *testing.T, args ...string) (int, capEnvelope) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := cli.Main(append([]string{"--output", "json"}, args...), strings.NewReader(""), &stdout, &stderr)
	out := stdout.String()
	var env capEnvelope
	if err := json.Unmarshal(stdout.Bytes(), &env); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out)
	}
	if !strings.HasSuffix(out, "}\n") || strings.Count(out, "\n") != 1 || stderr.Len() != 0 {
		t.Fatalf("not exactly one object and a newline on stdout (stderr %q): %q", stderr.String(), out)
	}
	if env.Schema != cli.Schema || !strings.HasPrefix(env.Command, "capability.") {
		t.Fatalf("envelope = %s", out)
	}
	if strings.Contains(out, "riff-secret") || strings.Contains(out, f.config) {
		t.Fatalf("output contains a path: %s", out)
	}
	if env.OK != (code == cli.ExitOK) {
		t.Fatalf("ok=%v with exit %d", env.OK, code)
	}
	return code, env
}

func (f capFixture) create(t *testing.T, args ...string) capResult {
	t.Helper()
	code, env := f.run(t, append([]string{"capability", "create", "--config", f.config}, args...)...)
	if code != cli.ExitOK {
		t.Fatalf("create %v: exit %d, %+v", args, code, env.Error)
	}
	if env.Command != "capability.create" {
		t.Fatalf("command = %q", env.Command)
	}
	var r capResult
	if err := json.Unmarshal(env.Result, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func (f capFixture) list(t *testing.T) []capResult {
	t.Helper()
	code, env := f.run(t, "capability", "list", "--config", f.config)
	if code != cli.ExitOK || env.Command != "capability.list" {
		t.Fatalf("list: exit %d, %+v", code, env)
	}
	var r struct {
		Capabilities []capResult `json:"capabilities"`
	}
	if err := json.Unmarshal(env.Result, &r); err != nil || r.Capabilities == nil {
		t.Fatalf("list result %s: %v", env.Result, err)
	}
	return r.Capabilities
}

func TestCapabilityCreateListRevoke(t *testing.T) {
	t.Parallel()
	f := capSetup(t)
	global := f.create(t, "--permission", "read_statistics", "--permission", "read_health", "--name", "grafana")
	if !strings.HasPrefix(global.Token, "riffdb_") || global.ID == "" || global.Name != "grafana" ||
		global.Database != "" || fmt.Sprint(global.Permissions) != "[read_statistics read_health]" || global.CreatedAt == "" {
		t.Fatalf("created = %+v", global)
	}
	scoped := f.create(t, "--permission", "execute_commands", "--database", "orders")
	if scoped.Database != "orders" || scoped.Name != "" {
		t.Fatalf("scoped = %+v", scoped)
	}

	// The printed tokens authenticate against the store a server would open.
	store, err := capability.Open(f.creds)
	if err != nil {
		t.Fatal(err)
	}
	c, err := store.Authenticate(global.Token)
	if err != nil || c.ID != global.ID || !c.Allows(capability.ReadStatistics, "") {
		t.Fatalf("global token: %+v, %v", c, err)
	}
	c, err = store.Authenticate(scoped.Token)
	if err != nil || !c.Allows(capability.ExecuteCommands, "orders") || c.Allows(capability.ExecuteCommands, "billing") {
		t.Fatalf("scoped token: %+v, %v", c, err)
	}

	list := f.list(t)
	if len(list) != 2 || list[0].ID != global.ID || list[1].ID != scoped.ID || list[0].Token != "" || list[0].Revoked {
		t.Fatalf("list = %+v", list)
	}

	code, env := f.run(t, "capability", "revoke", "--config", f.config, global.ID)
	if code != cli.ExitOK || env.Command != "capability.revoke" || string(env.Result) != fmt.Sprintf(`{"id":%q,"revoked":true}`, global.ID) {
		t.Fatalf("revoke: exit %d, %+v %s", code, env.Error, env.Result)
	}
	// A store opened now (a restarted server) refuses the revoked token; a
	// running one does within its refresh interval (tested in capability).
	store, err = capability.Open(f.creds)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Authenticate(global.Token); !errors.Is(err, capability.ErrUnauthenticated) {
		t.Fatalf("revoked token still authenticates: %v", err)
	}
	if _, err := store.Authenticate(scoped.Token); err != nil {
		t.Fatalf("the other token no longer authenticates: %v", err)
	}
	list = f.list(t)
	if !list[0].Revoked || list[1].Revoked {
		t.Fatalf("list after revoke = %+v", list)
	}
}

func TestCapabilityErrors(t *testing.T) {
	t.Parallel()
	f := capSetup(t)
	cases := []struct {
		name       string
		args       []string
		code, kind string
		mention    string
	}{
		{"unknown permission", []string{"create", "--config", f.config, "--permission", "read_everything"},
			"invalid_permission", "local", "--permission"},
		{"unknown database", []string{"create", "--config", f.config, "--permission", "execute_commands", "--database", "shipping"},
			"unknown_database", "local", "--database"},
		{"bad name", []string{"create", "--config", f.config, "--permission", "read_health", "--name", "a\x00b"},
			"invalid_capability", "local", "--name"},
		{"no permission", []string{"create", "--config", f.config}, "usage", "local", "permission"},
		{"no config", []string{"list"}, "usage", "local", "config"},
		{"missing config file", []string{"list", "--config", f.config + ".missing"}, "config_unreadable", "local", ""},
		{"unknown id", []string{"revoke", "--config", f.config, "0123456789abcdef"}, "capability_not_found", "local", "0123456789abcdef"},
		{"no id", []string{"revoke", "--config", f.config}, "usage", "local", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, env := f.run(t, append([]string{"capability"}, tc.args...)...)
			if code != cli.ExitLocal || env.Error == nil || env.Error.Code != tc.code || env.Error.Kind != tc.kind ||
				!strings.Contains(env.Error.Message, tc.mention) {
				t.Fatalf("exit %d, error %+v; want %s/%s mentioning %q", code, env.Error, tc.kind, tc.code, tc.mention)
			}
		})
	}
	// No failed command created a capability.
	if list := f.list(t); len(list) != 0 {
		t.Fatalf("failures stored capabilities: %+v", list)
	}
}

func TestCapabilityInvalidConfig(t *testing.T) {
	t.Parallel()
	f := capSetup(t)
	if err := os.WriteFile(f.config, []byte("[server]\nbogus = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, env := f.run(t, "capability", "list", "--config", f.config)
	if code != cli.ExitLocal || env.Error.Code != "invalid_config" {
		t.Fatalf("exit %d, %+v", code, env.Error)
	}
}

func TestCapabilityListDoesNotCreateStore(t *testing.T) {
	t.Parallel()
	f := capSetup(t)
	if list := f.list(t); len(list) != 0 {
		t.Fatalf("list = %+v", list)
	}
	if _, err := os.Lstat(f.creds); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("list created the credential store: %v", err)
	}
	code, env := f.run(t, "capability", "revoke", "--config", f.config, "0123456789abcdef")
	if code != cli.ExitLocal || env.Error.Code != "capability_not_found" {
		t.Fatalf("revoke on a missing store: exit %d, %+v", code, env.Error)
	}
	if _, err := os.Lstat(f.creds); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("revoke created the credential store: %v", err)
	}
}

func TestCapabilityInsecureAndCorruptStore(t *testing.T) {
	t.Parallel()
	f := capSetup(t)
	if err := os.MkdirAll(f.creds, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(f.creds, 0o755); err != nil {
		t.Fatal(err)
	}
	code, env := f.run(t, "capability", "create", "--config", f.config, "--permission", "read_health")
	if code != cli.ExitLocal || env.Error.Code != "credentials_insecure" {
		t.Fatalf("insecure store: exit %d, %+v", code, env.Error)
	}
	if err := os.Chmod(f.creds, 0o700); err != nil {
		t.Fatal(err)
	}
	f.create(t, "--permission", "read_health")
	if err := os.WriteFile(filepath.Join(f.creds, "capabilities.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, env = f.run(t, "capability", "list", "--config", f.config)
	if code != cli.ExitLocal || env.Error.Code != "credentials_corrupt" {
		t.Fatalf("corrupt store: exit %d, %+v", code, env.Error)
	}
}

func TestCapabilityCreateText(t *testing.T) {
	t.Parallel()
	f := capSetup(t)
	var stdout, stderr bytes.Buffer
	code := cli.Main([]string{"capability", "create", "--config", f.config, "--permission", "manage_capabilities", "--name", "admin"},
		strings.NewReader(""), &stdout, &stderr)
	out := stdout.String()
	if code != cli.ExitOK || stderr.Len() != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	var token string
	for _, line := range strings.Split(out, "\n") {
		if t, ok := strings.CutPrefix(line, "token: "); ok {
			token = t
		}
	}
	store, err := capability.Open(f.creds)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := store.Authenticate(token); err != nil || c.Name != "admin" || !strings.Contains(out, c.ID) {
		t.Fatalf("text output %q: token does not authenticate: %v", out, err)
	}
	if !strings.Contains(out, "shown only once") {
		t.Fatalf("text output %q lacks the once-only warning", out)
	}
}
