package cli_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/cli"
)

var updateConfigGolden = flag.Bool("update-config-golden", false, "rewrite cli/testdata/config/*.golden.json")

// configCheckEnvelope is the JSON envelope printed by config check.
type configCheckEnvelope struct {
	Schema  string `json:"schema"`
	Command string `json:"command"`
	OK      bool   `json:"ok"`
	Result  *struct {
		Mode      string `json:"mode"`
		Databases []struct {
			Alias  string `json:"alias"`
			Outbox bool   `json:"outbox"`
		} `json:"databases"`
	} `json:"result"`
	Error *struct {
		Kind    string `json:"kind"`
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// runConfigCheck writes doc to a file and runs `riffdb --output json config
// check --config FILE` through cli.Main.
func runConfigCheck(t *testing.T, doc string) (code int, stdout string, env configCheckEnvelope, file string) {
	t.Helper()
	file = filepath.Join(t.TempDir(), "riffdb.toml")
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, env = runConfigCheckFile(t, file)
	return code, stdout, env, file
}

func runConfigCheckFile(t *testing.T, file string) (int, string, configCheckEnvelope) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := cli.Main([]string{"--output", "json", "config", "check", "--config", file}, strings.NewReader(""), &stdout, &stderr)
	var env configCheckEnvelope
	if err := json.Unmarshal(stdout.Bytes(), &env); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout.String())
	}
	if !strings.HasSuffix(stdout.String(), "}\n") || strings.Count(stdout.String(), "\n") != 1 {
		t.Errorf("stdout is not exactly one object and a newline: %q", stdout.String())
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr in JSON mode: %q", stderr.String())
	}
	return code, stdout.String(), env
}

var quotedPath = regexp.MustCompile(`"(/[^"]*)"`)

// assertConfigRejected checks exit code 2, a local invalid_config error whose
// message contains want, and that no path of the document or the file itself
// appears anywhere in the output.
func assertConfigRejected(t *testing.T, doc, want string) {
	t.Helper()
	code, out, env, file := runConfigCheck(t, doc)
	if code != cli.ExitLocal {
		t.Errorf("exit code = %d, want %d", code, cli.ExitLocal)
	}
	if env.OK || env.Error == nil {
		t.Fatalf("not a failure envelope: %s", out)
	}
	if env.Schema != cli.Schema || env.Command != "config.check" {
		t.Errorf("envelope schema/command = %q %q", env.Schema, env.Command)
	}
	if env.Error.Kind != "local" || env.Error.Code != "invalid_config" {
		t.Errorf("error kind/code = %q/%q, want local/invalid_config", env.Error.Kind, env.Error.Code)
	}
	if !strings.Contains(env.Error.Message, want) {
		t.Errorf("message %q does not name %q", env.Error.Message, want)
	}
	if strings.Contains(env.Error.Message, "/") {
		t.Errorf("message %q contains a path separator", env.Error.Message)
	}
	for _, m := range quotedPath.FindAllStringSubmatch(doc, -1) {
		if strings.Contains(out, m[1]) {
			t.Errorf("output %q contains the configured path %q", out, m[1])
		}
	}
	if strings.Contains(out, file) || strings.Contains(out, filepath.Dir(file)) {
		t.Errorf("output %q contains the configuration file's path", out)
	}
}

func readConfigTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "config", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestConfigCheckValid(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"single", "named", "follower"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			file := filepath.Join("testdata", "config", name+".toml")
			code, out, env := runConfigCheckFile(t, file)
			if code != cli.ExitOK || !env.OK {
				t.Fatalf("exit %d: %s", code, out)
			}
			golden := filepath.Join("testdata", "config", name+".golden.json")
			if *updateConfigGolden {
				if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if want := readConfigTestdata(t, name+".golden.json"); out != want {
				t.Errorf("output differs from %s:\n got %s\nwant %s", golden, out, want)
			}
		})
	}
}

func TestConfigCheckText(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	code := cli.Main([]string{"config", "check", "--config", filepath.Join("testdata", "config", "named.toml")},
		strings.NewReader(""), &stdout, &stderr)
	if code != cli.ExitOK || stdout.String() != "configuration is valid: 3 database(s), mode primary\n" || stderr.Len() != 0 {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}

	stdout.Reset()
	code = cli.Main([]string{"config", "check", "--config", filepath.Join("testdata", "config", "no-such-file.toml")},
		strings.NewReader(""), &stdout, &stderr)
	if code != cli.ExitLocal || !strings.Contains(stderr.String(), "cannot read the configuration file") ||
		strings.Contains(stderr.String(), "no-such-file") {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}

func TestConfigCheckUnreadable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, file := range []string{filepath.Join(dir, "missing.toml"), dir} {
		code, out, env := runConfigCheckFile(t, file)
		if code != cli.ExitLocal || env.Error == nil || env.Error.Kind != "local" || env.Error.Code != "config_unreadable" {
			t.Fatalf("exit %d: %s", code, out)
		}
		if !strings.HasPrefix(env.Error.Message, "cannot read the configuration file: ") {
			t.Errorf("message = %q", env.Error.Message)
		}
		if strings.Contains(out, dir) {
			t.Errorf("output %q contains the path", out)
		}
	}
}

func TestConfigCheckRequiresConfigFlag(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	code := cli.Main([]string{"--output", "json", "config", "check"}, strings.NewReader(""), &stdout, &stderr)
	if code != cli.ExitLocal || !strings.Contains(stdout.String(), `"kind":"local"`) || !strings.Contains(stdout.String(), "config") {
		t.Errorf("exit %d, stdout %q", code, stdout.String())
	}
}

// TestConfigCheckAppliesEnvironment shows that check applies RIFFDB_*
// variables as the server would: a follower mode from the environment
// rejects the file's outbox section. It sets the process environment, so it
// does not run in parallel.
func TestConfigCheckAppliesEnvironment(t *testing.T) {
	t.Setenv("RIFFDB_SERVER_MODE", "follower")
	code, out, _ := runConfigCheckFile(t, filepath.Join("testdata", "config", "single.toml"))
	if code != cli.ExitLocal || !strings.Contains(out, `maintenance.outbox is not allowed when server.mode is \"follower\"`) {
		t.Errorf("exit %d: %s", code, out)
	}
}

const checkServer = `[server]
credential_path = "/srv/riff-secret/cred"
`

const checkSingle = checkServer + `
[database]
path = "/srv/riff-secret/db"
contract = "/etc/riff-secret/contract.toml"

[maintenance.outbox]
kind = "durable_local"
directory = "/srv/riff-secret/outbox"
quota_encoded_bytes = 1073741824
`

const checkNamed = checkServer + `
[databases.orders]
path = "/srv/riff-secret/orders"
contract = "/etc/riff-secret/contract.toml"

[databases.orders.outbox]
kind = "durable_local"
directory = "/srv/riff-secret/orders-outbox"
quota_encoded_bytes = 1073741824
`

func replaceOnce(t *testing.T, doc, old, new string) string {
	t.Helper()
	if !strings.Contains(doc, old) {
		t.Fatalf("test bug: %q not in document", old)
	}
	return strings.Replace(doc, old, new, 1)
}

// TestConfigCheckRejects is the acceptance table of `riffdb config check`.
func TestConfigCheckRejects(t *testing.T) {
	t.Parallel()
	var many strings.Builder
	many.WriteString(checkServer)
	for i := range 33 {
		fmt.Fprintf(&many, "[databases.db%02d]\npath = \"/srv/riff-secret/db%02d\"\ncontract = \"/etc/riff-secret/contract.toml\"\n", i, i)
	}
	cases := []struct{ name, doc, want string }{
		{"unknown top-level option", "colour = \"/srv/riff-secret/x\"\n" + checkSingle, `unknown option "colour"`},
		{"unknown outbox option", checkSingle + "retention = \"/srv/riff-secret/x\"\n", `unknown option "maintenance.outbox.retention"`},
		{"unknown named outbox option", checkNamed + "retention = 5\n", `unknown option "databases.orders.outbox.retention"`},
		{"relative database path", replaceOnce(t, checkSingle, `"/srv/riff-secret/db"`, `"srv/riff-secret/db"`), "database.path must be an absolute path"},
		{"relative outbox directory", replaceOnce(t, checkNamed, `"/srv/riff-secret/orders-outbox"`, `"riff-secret/orders-outbox"`), "databases.orders.outbox.directory must be an absolute path"},
		{"dot-dot path", replaceOnce(t, checkSingle, `"/srv/riff-secret/outbox"`, `"/srv/riff-secret/db/../outbox"`), "maintenance.outbox.directory must be a normalized path"},
		{"dot-dot credential path", replaceOnce(t, checkSingle, `"/srv/riff-secret/cred"`, `"/srv/riff-secret/../cred"`), "server.credential_path must be a normalized path"},
		{"zero quota", replaceOnce(t, checkSingle, "1073741824", "0"), "maintenance.outbox.quota_encoded_bytes must be set to an integer greater than zero"},
		{"negative quota", replaceOnce(t, checkNamed, "1073741824", "-1"), "databases.orders.outbox.quota_encoded_bytes must be set to an integer greater than zero"},
		{"float quota", replaceOnce(t, checkSingle, "1073741824", "1.5"), `option \"maintenance.outbox.quota_encoded_bytes\" must be an integer`},
		{"string quota", replaceOnce(t, checkSingle, "1073741824", `"10"`), `option \"maintenance.outbox.quota_encoded_bytes\" must be an integer`},
		{"unknown kind", replaceOnce(t, checkSingle, `"durable_local"`, `"s3"`), `maintenance.outbox.kind must be \"durable_local\"`},
		{"missing kind", replaceOnce(t, checkNamed, `kind = "durable_local"`, ""), "databases.orders.outbox.kind is required"},
		{"missing directory", replaceOnce(t, checkSingle, `directory = "/srv/riff-secret/outbox"`, ""), "maintenance.outbox.directory is required"},
		{"mixed database and databases", checkSingle + "[databases.billing]\npath = \"/srv/riff-secret/billing\"\n", "cannot be mixed"},
		{"maintenance outbox with named form", checkNamed + "[maintenance.outbox]\nkind = \"durable_local\"\ndirectory = \"/srv/riff-secret/o2\"\nquota_encoded_bytes = 1\n", "[maintenance.outbox] belongs to the single-database form"},
		{"33 databases", many.String(), "at most 32 databases may be configured, found 33"},
		{"invalid alias", replaceOnce(t, checkNamed, "orders", "Orders"), `database alias \"Orders\" is invalid`},
		{"invalid quoted alias", strings.ReplaceAll(checkNamed, "databases.orders", `databases."/srv/riff-secret/alias"`), "database alias <quoted key> is invalid"},
		{"unknown mode", replaceOnce(t, checkSingle, "[server]", "[server]\nmode = \"replica\""), `server.mode must be \"primary\" or \"follower\"`},
		{"follower with maintenance outbox", replaceOnce(t, checkSingle, "[server]", "[server]\nmode = \"follower\""), "maintenance.outbox is not allowed"},
		{"follower with named outbox", replaceOnce(t, checkNamed, "[server]", "[server]\nmode = \"follower\""), "databases.orders.outbox is not allowed"},
		{"duplicate key", replaceOnce(t, checkSingle, `path = "/srv/riff-secret/db"`, "path = \"/srv/riff-secret/db\"\npath = \"/srv/riff-secret/db2\""), `duplicate option \"database.path\"`},
		{"duplicate table", checkNamed + "[databases.orders]\n", `duplicate table \"databases.orders\"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The JSON message escapes quotes; compare against the decoded text.
			assertConfigRejected(t, tc.doc, strings.ReplaceAll(tc.want, `\"`, `"`))
		})
	}
}

// overlapRoles are the roles of a two-database named configuration in the
// order validation checks them.
var overlapRoles = []string{
	"server.credential_path",
	"databases.alpha.path", "databases.alpha.backup_root", "databases.alpha.projection_root",
	"databases.alpha.replication_path", "databases.alpha.outbox.directory",
	"databases.beta.path", "databases.beta.backup_root", "databases.beta.projection_root",
	"databases.beta.replication_path", "databases.beta.outbox.directory",
}

func overlapTOML(p []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[server]\ncredential_path = %q\n", p[0])
	for i, alias := range []string{"alpha", "beta"} {
		r := p[1+5*i:]
		fmt.Fprintf(&b, "[databases.%s]\npath = %q\ncontract = \"/etc/riff-secret/contract.toml\"\nbackup_root = %q\nprojection_root = %q\nreplication_path = %q\n",
			alias, r[0], r[1], r[2], r[3])
		fmt.Fprintf(&b, "[databases.%s.outbox]\nkind = \"durable_local\"\ndirectory = %q\nquota_encoded_bytes = 10\n", alias, r[4])
	}
	return b.String()
}

// TestConfigCheckRejectsOverlaps covers every pair of roles, within one
// database and across the two, as equal paths and as nested paths both ways.
func TestConfigCheckRejectsOverlaps(t *testing.T) {
	t.Parallel()
	paths := func() []string {
		p := make([]string, len(overlapRoles))
		for i, n := range overlapRoles {
			p[i] = "/srv/riff-secret/" + strings.ReplaceAll(n, ".", "-")
		}
		return p
	}
	if code, out, _, _ := runConfigCheck(t, overlapTOML(paths())); code != cli.ExitOK {
		t.Fatalf("base configuration rejected: %s", out)
	}
	for j := range overlapRoles {
		for i := range j {
			for _, rel := range []string{"equal", "inside", "contains"} {
				t.Run(fmt.Sprintf("%s %s %s", overlapRoles[j], rel, overlapRoles[i]), func(t *testing.T) {
					p := paths()
					switch rel {
					case "equal":
						p[j] = p[i]
					case "inside":
						p[j] = p[i] + "/nested"
					case "contains":
						p[i] = p[j] + "/nested"
					}
					assertConfigRejected(t, overlapTOML(p), overlapRoles[j]+" overlaps "+overlapRoles[i])
				})
			}
		}
	}
}
