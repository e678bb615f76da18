package config_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/riffdb/riffdb/config"
)

// The paths of the test configurations all start with secretPrefix, so that a
// test can assert that no message echoes a path.
const secretPrefix = "/srv/secret-"

const serverTOML = `
[server]
credential_path = "/srv/secret-cred"
`

const singleTOML = serverTOML + `
[database]
path = "/srv/secret-db"
contract = "/srv/secret-contract.toml"

[maintenance.outbox]
kind = "durable_local"
directory = "/srv/secret-outbox"
quota_encoded_bytes = 1073741824
`

const namedTOML = serverTOML + `
[databases.orders]
path = "/srv/secret-orders/db"
contract = "/srv/secret-contract.toml"
backup_root = "/srv/secret-orders/backup"
history_retention = 1000

[databases.orders.outbox]
kind = "durable_local"
directory = "/srv/secret-orders/outbox"
quota_encoded_bytes = 4096

[databases.billing]
path = "/srv/secret-billing/db"
contract = "/srv/secret-contract.toml"
`

const followerTOML = `
[server]
mode = "follower"
credential_path = "/srv/secret-cred"

[database]
path = "/srv/secret-db"
contract = "/srv/secret-contract.toml"
replication_path = "/srv/secret-replication"
`

func noEnv(string) string { return "" }

func mustParse(t *testing.T, doc string) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(doc), noEnv, config.Overrides{})
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return c
}

func TestParseSingle(t *testing.T) {
	t.Parallel()
	c := mustParse(t, singleTOML)
	want := config.Server{ShutdownGrace: config.DefaultShutdownGrace, Mode: "primary", Listen: config.DefaultListen, MetricsListen: config.DefaultMetricsListen,
		CredentialPath: "/srv/secret-cred"}
	if c.Server != want {
		t.Errorf("Server = %+v, want %+v", c.Server, want)
	}
	if wantT := (config.Telemetry{TrustTraceContext: true, LogLevel: "info", TraceSampleRatio: 1}); c.Telemetry != wantT {
		t.Errorf("Telemetry = %+v, want %+v", c.Telemetry, wantT)
	}
	if len(c.Databases) != 1 {
		t.Fatalf("got %d databases, want 1", len(c.Databases))
	}
	d := c.Databases[0]
	if d.Alias != "default" || d.Path != "/srv/secret-db" || d.Contract != "/srv/secret-contract.toml" || d.HistoryRetention != 0 {
		t.Errorf("database = %+v", d)
	}
	wantO := config.Outbox{Kind: "durable_local", Directory: "/srv/secret-outbox", QuotaEncodedBytes: 1 << 30,
		ScrubPagesPerSecond: config.DefaultScrubPagesPerSecond}
	if d.Outbox == nil || *d.Outbox != wantO {
		t.Errorf("outbox = %+v, want %+v", d.Outbox, wantO)
	}
	if got, ok := c.Database("default"); !ok || got != &c.Databases[0] {
		t.Errorf(`Database("default") = %v, %v`, got, ok)
	}
	if _, ok := c.Database("orders"); ok {
		t.Error(`Database("orders") found in a single-form config`)
	}
}

func TestParseNamed(t *testing.T) {
	t.Parallel()
	c := mustParse(t, namedTOML)
	if len(c.Databases) != 2 || c.Databases[0].Alias != "billing" || c.Databases[1].Alias != "orders" {
		t.Fatalf("databases not sorted by alias: %+v", c.Databases)
	}
	b, o := c.Databases[0], c.Databases[1]
	if b.Outbox != nil {
		t.Errorf("billing has no outbox section, got %+v", b.Outbox)
	}
	if o.Outbox == nil || o.Outbox.QuotaEncodedBytes != 4096 || o.Outbox.Directory != "/srv/secret-orders/outbox" {
		t.Errorf("orders outbox = %+v", o.Outbox)
	}
	if o.HistoryRetention != 1000 || o.BackupRoot != "/srv/secret-orders/backup" {
		t.Errorf("orders = %+v", o)
	}
	if d, ok := c.Database("orders"); !ok || d.Alias != "orders" {
		t.Errorf(`Database("orders") = %v, %v`, d, ok)
	}
}

func TestParseFollower(t *testing.T) {
	t.Parallel()
	c := mustParse(t, followerTOML)
	if c.Server.Mode != "follower" || c.Databases[0].Outbox != nil || c.Databases[0].ReplicationPath != "/srv/secret-replication" {
		t.Errorf("config = %+v", c)
	}
}

func TestParseTelemetry(t *testing.T) {
	t.Parallel()
	c := mustParse(t, singleTOML+`
[telemetry]
log_level = "debug"
otlp_endpoint = "collector:4317"
trace_sample_ratio = 0
`)
	want := config.Telemetry{TrustTraceContext: true, LogLevel: "debug", OTLPEndpoint: "collector:4317", TraceSampleRatio: 0}
	if c.Telemetry != want {
		t.Errorf("Telemetry = %+v, want %+v", c.Telemetry, want)
	}
	// An integer ratio is a number too.
	if c := mustParse(t, singleTOML+"[telemetry]\ntrace_sample_ratio = 1\n"); c.Telemetry.TraceSampleRatio != 1 {
		t.Errorf("ratio = %v, want 1", c.Telemetry.TraceSampleRatio)
	}
}

func TestParsePrecedence(t *testing.T) {
	t.Parallel()
	file := `
[server]
mode = "follower"
listen = "127.0.0.1:1001"
metrics_listen = "127.0.0.1:2001"
credential_path = "/srv/secret-file-cred"

[database]
path = "/srv/secret-db"
contract = "/srv/secret-contract.toml"

[telemetry]
log_level = "warn"
otlp_endpoint = "file:4317"
trace_sample_ratio = 0.25
`
	env := map[string]string{
		"RIFFDB_SERVER_MODE":                  "primary",
		"RIFFDB_SERVER_LISTEN":                "127.0.0.1:1002",
		"RIFFDB_SERVER_METRICS_LISTEN":        "127.0.0.1:2002",
		"RIFFDB_SERVER_CREDENTIAL_PATH":       "/srv/secret-env-cred",
		"RIFFDB_TELEMETRY_LOG_LEVEL":          "error",
		"RIFFDB_TELEMETRY_OTLP_ENDPOINT":      "env:4317",
		"RIFFDB_TELEMETRY_TRACE_SAMPLE_RATIO": "0.5",
	}
	flags := config.Overrides{Listen: "127.0.0.1:1003", MetricsListen: "127.0.0.1:2003", LogLevel: "debug", OTLPEndpoint: "flag:4317"}

	// File over defaults.
	c, err := config.Parse([]byte(file), nil, config.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	wantS := config.Server{ShutdownGrace: config.DefaultShutdownGrace, Mode: "follower", Listen: "127.0.0.1:1001", MetricsListen: "127.0.0.1:2001", CredentialPath: "/srv/secret-file-cred"}
	wantT := config.Telemetry{TrustTraceContext: true, LogLevel: "warn", OTLPEndpoint: "file:4317", TraceSampleRatio: 0.25}
	if c.Server != wantS || c.Telemetry != wantT {
		t.Errorf("file: got %+v %+v, want %+v %+v", c.Server, c.Telemetry, wantS, wantT)
	}

	// Environment over file.
	c, err = config.Parse([]byte(file), func(k string) string { return env[k] }, config.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	wantS = config.Server{ShutdownGrace: config.DefaultShutdownGrace, Mode: "primary", Listen: "127.0.0.1:1002", MetricsListen: "127.0.0.1:2002", CredentialPath: "/srv/secret-env-cred"}
	wantT = config.Telemetry{TrustTraceContext: true, LogLevel: "error", OTLPEndpoint: "env:4317", TraceSampleRatio: 0.5}
	if c.Server != wantS || c.Telemetry != wantT {
		t.Errorf("env: got %+v %+v, want %+v %+v", c.Server, c.Telemetry, wantS, wantT)
	}

	// Command line over environment.
	c, err = config.Parse([]byte(file), func(k string) string { return env[k] }, flags)
	if err != nil {
		t.Fatal(err)
	}
	wantS.Listen, wantS.MetricsListen = "127.0.0.1:1003", "127.0.0.1:2003"
	wantT.LogLevel, wantT.OTLPEndpoint = "debug", "flag:4317"
	if c.Server != wantS || c.Telemetry != wantT {
		t.Errorf("flags: got %+v %+v, want %+v %+v", c.Server, c.Telemetry, wantS, wantT)
	}

	// Defaults when nothing sets an option; the environment can supply a
	// required option the file lacks.
	c, err = config.Parse([]byte(singleTOML[len(serverTOML):]), func(k string) string {
		if k == "RIFFDB_SERVER_CREDENTIAL_PATH" {
			return "/srv/secret-env-cred"
		}
		return ""
	}, config.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	wantS = config.Server{ShutdownGrace: config.DefaultShutdownGrace, Mode: "primary", Listen: config.DefaultListen, MetricsListen: config.DefaultMetricsListen, CredentialPath: "/srv/secret-env-cred"}
	if c.Server != wantS || c.Telemetry != (config.Telemetry{TrustTraceContext: true, LogLevel: config.DefaultLogLevel, TraceSampleRatio: 1}) {
		t.Errorf("defaults: got %+v %+v", c.Server, c.Telemetry)
	}

	// Environment values are validated like file values.
	for k, v := range map[string]string{
		"RIFFDB_TELEMETRY_TRACE_SAMPLE_RATIO": "half",
		"RIFFDB_SERVER_MODE":                  "leader",
		"RIFFDB_SERVER_CREDENTIAL_PATH":       "relative/cred",
	} {
		_, err := config.Parse([]byte(singleTOML), func(key string) string {
			if key == k {
				return v
			}
			return ""
		}, config.Overrides{})
		if !errors.Is(err, config.ErrInvalid) {
			t.Errorf("%s=%s: err = %v, want ErrInvalid", k, v, err)
		}
	}
}

// TestParseRejects covers every rejection rule: each case fails with a
// message naming the option or role, and no message echoes a path.
func TestParseRejects(t *testing.T) {
	t.Parallel()
	named := func(outbox string) string {
		return serverTOML + `
[databases.alpha]
path = "/srv/secret-alpha"
contract = "/srv/secret-contract.toml"
` + outbox
	}
	var manyDBs strings.Builder
	manyDBs.WriteString(serverTOML)
	for i := range config.MaxDatabases + 1 {
		fmt.Fprintf(&manyDBs, "[databases.db%02d]\npath = \"/srv/secret-db%02d\"\ncontract = \"/srv/secret-contract.toml\"\n", i, i)
	}

	cases := []struct {
		name, doc, want string
	}{
		{"unknown top-level option", "bogus = 1\n" + singleTOML, `unknown option "bogus"`},
		{"unknown top-level table", singleTOML + "\n[bogus]\n", `unknown option "bogus"`},
		{"unknown server option", withSingle("[server]", "[server]\nlisten_addr = \"x\""), `unknown option "server.listen_addr"`},
		{"unknown database option", withSingle("[database]", "[database]\nbackup = \"/srv/secret-b\""), `unknown option "database.backup"`},
		{"unknown outbox option", singleTOML + "foo = \"/srv/secret-x\"\n", `unknown option "maintenance.outbox.foo"`},
		{"unknown maintenance option", singleTOML + "[maintenance.vacuum]\n", `unknown option "maintenance.vacuum"`},
		{"unknown named outbox option", named("[databases.alpha.outbox]\nkind = \"durable_local\"\ndirectory = \"/srv/secret-o\"\nquota_encoded_bytes = 1\nfsync = true\n"), `unknown option "databases.alpha.outbox.fsync"`},
		{"outbox table in single database", withSingle("[maintenance.outbox]", "[database.outbox]"), `unknown option "database.outbox"`},
		{"unknown quoted key not echoed", singleTOML + "\"/srv/secret-key\" = 1\n", `unknown option "maintenance.outbox.<quoted key>"`},

		{"relative path", withSingle(`"/srv/secret-db"`, `"srv/secret-db"`), "database.path must be an absolute path"},
		{"dot-dot path", withSingle(`"/srv/secret-db"`, `"/srv/secret-x/../secret-db"`), "database.path must be a normalized path"},
		{"dot path", withSingle(`"/srv/secret-db"`, `"/srv/./secret-db"`), "database.path must be a normalized path"},
		{"double slash", withSingle(`"/srv/secret-db"`, `"/srv//secret-db"`), "database.path must be a normalized path"},
		{"trailing slash", withSingle(`"/srv/secret-outbox"`, `"/srv/secret-outbox/"`), "maintenance.outbox.directory must be a normalized path"},
		{"relative outbox", withSingle(`"/srv/secret-outbox"`, `"secret-outbox"`), "maintenance.outbox.directory must be an absolute path"},
		{"relative credential path", withSingle(`"/srv/secret-cred"`, `"secret-cred"`), "server.credential_path must be an absolute path"},
		{"relative contract", withSingle(`"/srv/secret-contract.toml"`, `"secret-contract.toml"`), "database.contract must be an absolute path"},
		{"relative backup root", withSingle("[database]", "[database]\nbackup_root = \"secret-b\""), "database.backup_root must be an absolute path"},
		{"non-normalized projection root", withSingle("[database]", "[database]\nprojection_root = \"/srv/secret-p/..\""), "database.projection_root must be a normalized path"},
		{"NUL in path", withSingle(`"/srv/secret-db"`, `"/srv/secret-db\u0000x"`), "database.path contains a NUL byte"},
		{"missing path", withSingle(`path = "/srv/secret-db"`, ``), "database.path is required"},
		{"missing contract", withSingle(`contract = "/srv/secret-contract.toml"`, ``), "database.contract is required"},
		{"missing credential path", withSingle(`credential_path = "/srv/secret-cred"`, ``), "server.credential_path is required"},

		{"zero quota", withSingle("1073741824", "0"), "maintenance.outbox.quota_encoded_bytes must be set to an integer greater than zero"},
		{"negative quota", withSingle("1073741824", "-5"), "maintenance.outbox.quota_encoded_bytes must be set to an integer greater than zero"},
		{"missing quota", withSingle("quota_encoded_bytes = 1073741824", ""), "maintenance.outbox.quota_encoded_bytes must be set to an integer greater than zero"},
		{"float quota", withSingle("1073741824", "1.5"), `option "maintenance.outbox.quota_encoded_bytes" must be an integer`},
		{"string quota", withSingle("1073741824", `"10"`), `option "maintenance.outbox.quota_encoded_bytes" must be an integer`},
		{"huge quota", withSingle("1073741824", "99999999999999999999"), `option "maintenance.outbox.quota_encoded_bytes" is out of range`},
		{"unknown kind", withSingle(`"durable_local"`, `"s3"`), `maintenance.outbox.kind must be "durable_local"`},
		{"missing kind", withSingle(`kind = "durable_local"`, ``), "maintenance.outbox.kind is required"},
		{"missing directory", withSingle(`directory = "/srv/secret-outbox"`, ``), "maintenance.outbox.directory is required"},
		{"named unknown kind", named("[databases.alpha.outbox]\nkind = \"file\"\ndirectory = \"/srv/secret-o\"\nquota_encoded_bytes = 1\n"), `databases.alpha.outbox.kind must be "durable_local"`},
		{"named zero quota", named("[databases.alpha.outbox]\nkind = \"durable_local\"\ndirectory = \"/srv/secret-o\"\nquota_encoded_bytes = 0\n"), "databases.alpha.outbox.quota_encoded_bytes must be set"},

		{"mixed forms", singleTOML + "[databases.alpha]\npath = \"/srv/secret-a\"\n", "[database] and the named form [databases.<alias>] cannot be mixed"},
		{"maintenance outbox with named form", named("[maintenance.outbox]\nkind = \"durable_local\"\ndirectory = \"/srv/secret-o\"\nquota_encoded_bytes = 1\n"), "[maintenance.outbox] belongs to the single-database form"},
		{"maintenance outbox alone", serverTOML + "[maintenance.outbox]\nkind = \"durable_local\"\n", "[maintenance.outbox] requires the [database] table"},
		{"no database", serverTOML, "no database is configured"},
		{"empty databases table", serverTOML + "[databases]\n", "no database is configured"},
		{"33 databases", manyDBs.String(), "at most 32 databases may be configured, found 33"},
		{"alias with uppercase", strings.Replace(named(""), "alpha", "Alpha", 1), `database alias "Alpha" is invalid`},
		{"alias with leading digit", strings.Replace(named(""), "alpha", "9alpha", 1), `database alias "9alpha" is invalid`},
		{"alias too long", strings.Replace(named(""), "alpha", "a"+strings.Repeat("b", 64), 1), "database alias <quoted key> is invalid"},
		{"quoted alias not echoed", strings.Replace(named(""), "alpha", `"/srv/secret-alias"`, 1), "database alias <quoted key> is invalid"},

		{"unknown mode", withSingle("[server]", "[server]\nmode = \"leader\""), `server.mode must be "primary" or "follower"`},
		{"follower with single outbox", withSingle("[server]", "[server]\nmode = \"follower\""), `maintenance.outbox is not allowed when server.mode is "follower"`},
		{"follower with named outbox", strings.Replace(named("[databases.alpha.outbox]\nkind = \"durable_local\"\ndirectory = \"/srv/secret-o\"\nquota_encoded_bytes = 1\n"), "[server]", "[server]\nmode = \"follower\"", 1), `databases.alpha.outbox is not allowed when server.mode is "follower"`},
		{"follower with empty outbox", strings.Replace(named("[databases.alpha.outbox]\n"), "[server]", "[server]\nmode = \"follower\"", 1), `databases.alpha.outbox is not allowed`},

		{"duplicate key", withSingle(`path = "/srv/secret-db"`, "path = \"/srv/secret-db\"\npath = \"/srv/secret-db2\""), `duplicate option "database.path" (line`},
		{"duplicate named key", named("[databases.alpha.outbox]\nkind = \"durable_local\"\nkind = \"durable_local\"\n"), `duplicate option "databases.alpha.outbox.kind"`},
		{"duplicate table", singleTOML + "[database]\n", `duplicate table "database"`},
		{"duplicate server key", withSingle("[server]", "[server]\nmode = \"primary\"\nmode = \"primary\""), `duplicate option "server.mode"`},

		{"syntax error", withSingle(`"/srv/secret-db"`, `/srv/secret-db`), "invalid TOML syntax at line"},
		{"path of wrong type", withSingle(`"/srv/secret-db"`, `5`), `option "database.path" must be a string`},
		{"table of wrong type", "database = 5\n" + serverTOML, `option "database" must be a table`},
		{"backup keep zero", withBackup("backup_keep = 0"), "database.backup_keep must be between 1 and 1000"},
		{"backup keep negative", withBackup("backup_keep = -3"), "database.backup_keep must be between 1 and 1000"},
		{"backup keep huge", withBackup("backup_keep = 1001"), "database.backup_keep must be between 1 and 1000"},
		{"backup keep string", withBackup(`backup_keep = "7"`), `option "database.backup_keep" must be an integer`},
		{"backup reserve negative", withBackup("backup_reserve_bytes = -1"), "database.backup_reserve_bytes must not be negative"},
		{"backup reserve float", withBackup("backup_reserve_bytes = 1.5"), `option "database.backup_reserve_bytes" must be an integer`},
		{"backup interval not a duration", withBackup(`backup_min_interval = "often"`), "database.backup_min_interval must be a duration"},
		{"backup interval integer", withBackup(`backup_min_interval = 60`), `option "database.backup_min_interval" must be a duration string`},
		{"backup interval negative", withBackup(`backup_min_interval = "-1s"`), "database.backup_min_interval must be between 0s (no limit) and 168h0m0s"},
		{"backup interval too long", withBackup(`backup_min_interval = "169h"`), "database.backup_min_interval must be between 0s"},
		{"backup keep without root", withSingle("[database]", "[database]\nbackup_keep = 3"), "database.backup_keep needs database.backup_root"},
		{"backup reserve without root", withSingle("[database]", "[database]\nbackup_reserve_bytes = 0"), "database.backup_reserve_bytes needs database.backup_root"},
		{"backup interval without root", named(`backup_min_interval = "0s"
`), "databases.alpha.backup_min_interval needs databases.alpha.backup_root"},
		{"negative history retention", withSingle("[database]", "[database]\nhistory_retention = -1"), `option "database.history_retention" must not be negative`},
		{"bad log level", singleTOML + "[telemetry]\nlog_level = \"loud\"\n", "telemetry.log_level must be one of debug, info, warn, error"},
		{"ratio above one", singleTOML + "[telemetry]\ntrace_sample_ratio = 1.5\n", "telemetry.trace_sample_ratio must be a number between 0 and 1"},
		{"ratio nan", singleTOML + "[telemetry]\ntrace_sample_ratio = nan\n", "telemetry.trace_sample_ratio must be a number between 0 and 1"},
		{"otlp endpoint without port", singleTOML + "[telemetry]\notlp_endpoint = \"collector\"\n", "telemetry.otlp_endpoint must be host:port"},
		{"bad listen", withSingle("[server]", "[server]\nlisten = \"7420\""), "server.listen must be host:port"},
		{"bad metrics port", withSingle("[server]", "[server]\nmetrics_listen = \"127.0.0.1:http\""), "server.metrics_listen must be host:port with a numeric port"},
		{"same listeners", withSingle("[server]", "[server]\nlisten = \"127.0.0.1:8000\"\nmetrics_listen = \"127.0.0.1:8000\""), "server.metrics_listen must differ from server.listen"},
		{"negative max connections", withSingle("[server]", "[server]\nmax_connections = -1"), "server.max_connections must be between 0"},
		{"huge metrics connections", withSingle("[server]", "[server]\nmetrics_max_connections = 99999999999"), "server.metrics_max_connections must be between 0"},
		{"negative connections per peer", withSingle("[server]", "[server]\nmax_connections_per_peer = -1"), "server.max_connections_per_peer must be between 0"},
		{"connections per peer over the cap", withSingle("[server]", "[server]\nmax_connections = 10\nmax_connections_per_peer = 11"),
			"server.max_connections_per_peer (11) must not exceed server.max_connections (10)"},
		{"bad shutdown grace", withSingle("[server]", "[server]\nshutdown_grace = \"ten\""), "server.shutdown_grace must be a duration"},
		{"negative shutdown grace", withSingle("[server]", "[server]\nshutdown_grace = \"-1s\""), "server.shutdown_grace must be between"},
		{"numeric shutdown grace", withSingle("[server]", "[server]\nshutdown_grace = 10"), `option "server.shutdown_grace" must be a duration string`},
		{"tls cert alone", withSingle("[server]", "[server]\ntls_cert_path = \"/etc/secret-cert\""), "server.tls_cert_path and server.tls_key_path must be set together"},
		{"tls relative key", withSingle("[server]", "[server]\ntls_cert_path = \"/etc/secret-cert\"\ntls_key_path = \"secret-key\""), "server.tls_key_path must be an absolute path"},
		{"plaintext on all interfaces", withSingle("[server]", "[server]\nlisten = \":7420\""), "server.listen is not a loopback address and TLS is not configured"},
		{"plaintext on a public address", withSingle("[server]", "[server]\nlisten = \"192.0.2.10:7420\""), "server.allow_insecure_listen"},
		{"trust not a bool", singleTOML + "[telemetry]\ntrust_trace_context = \"yes\"\n", `option "telemetry.trust_trace_context" must be a boolean`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := config.Parse([]byte(tc.doc), noEnv, config.Overrides{})
			if err == nil {
				t.Fatalf("Parse accepted the configuration: %+v", c)
			}
			if !errors.Is(err, config.ErrInvalid) {
				t.Errorf("err = %v, does not wrap ErrInvalid", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.want) {
				t.Errorf("message %q does not contain %q", msg, tc.want)
			}
			if strings.Contains(msg, secretPrefix) || strings.Contains(msg, "secret-") {
				t.Errorf("message %q echoes a path", msg)
			}
			if !strings.HasPrefix(msg, "config: ") {
				t.Errorf("message %q lacks the package prefix", msg)
			}
		})
	}
}

func TestParseAccepts32Databases(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString(serverTOML)
	for i := range config.MaxDatabases {
		fmt.Fprintf(&b, "[databases.db%02d]\npath = \"/srv/secret-db%02d\"\ncontract = \"/srv/secret-contract.toml\"\n", i, i)
		fmt.Fprintf(&b, "[databases.db%02d.outbox]\nkind = \"durable_local\"\ndirectory = \"/srv/secret-o%02d\"\nquota_encoded_bytes = 1\n", i, i)
	}
	c := mustParse(t, b.String())
	if len(c.Databases) != config.MaxDatabases {
		t.Fatalf("got %d databases", len(c.Databases))
	}
}

// roleNames and rolePaths describe a named two-database configuration with
// every role set, in the order validation checks them.
var roleNames = []string{
	"server.credential_path",
	"databases.alpha.path", "databases.alpha.backup_root", "databases.alpha.projection_root",
	"databases.alpha.replication_path", "databases.alpha.outbox.directory",
	"databases.beta.path", "databases.beta.backup_root", "databases.beta.projection_root",
	"databases.beta.replication_path", "databases.beta.outbox.directory",
}

func rolePaths() []string {
	p := make([]string, len(roleNames))
	for i, n := range roleNames {
		p[i] = "/srv/secret-" + strings.ReplaceAll(n, ".", "-")
	}
	return p
}

// rolesTOML renders the configuration with the given role paths and contract
// paths for alpha and beta.
func rolesTOML(p []string, contractA, contractB string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[server]\ncredential_path = %q\n", p[0])
	for i, alias := range []string{"alpha", "beta"} {
		r := p[1+5*i:]
		contract := []string{contractA, contractB}[i]
		fmt.Fprintf(&b, "[databases.%s]\npath = %q\ncontract = %q\nbackup_root = %q\nprojection_root = %q\nreplication_path = %q\n",
			alias, r[0], contract, r[1], r[2], r[3])
		fmt.Fprintf(&b, "[databases.%s.outbox]\nkind = \"durable_local\"\ndirectory = %q\nquota_encoded_bytes = 10\n", alias, r[4])
	}
	return b.String()
}

// TestParseRejectsOverlappingRoles checks every pair of roles, within one
// database and across databases, for equality and nesting both ways.
func TestParseRejectsOverlappingRoles(t *testing.T) {
	t.Parallel()
	base := rolePaths()
	mustParse(t, rolesTOML(base, "/srv/secret-contract.toml", "/srv/secret-contract.toml"))
	for j := range roleNames {
		for i := range j {
			for _, rel := range []string{"equal", "inside", "contains"} {
				p := rolePaths()
				switch rel {
				case "equal":
					p[j] = p[i]
				case "inside":
					p[j] = p[i] + "/sub"
				case "contains":
					p[i] = p[j] + "/sub"
				}
				_, err := config.Parse([]byte(rolesTOML(p, "/srv/secret-contract.toml", "/srv/secret-contract.toml")), noEnv, config.Overrides{})
				want := roleNames[j] + " overlaps " + roleNames[i]
				if err == nil || !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), want) {
					t.Errorf("%s %s %s: err = %v, want %q", roleNames[j], rel, roleNames[i], err, want)
				} else if strings.Contains(err.Error(), "secret-") {
					t.Errorf("message %q echoes a path", err)
				}
			}
		}
	}
}

func TestParseRejectsRootRole(t *testing.T) {
	t.Parallel()
	p := rolePaths()
	p[5] = "/" // databases.alpha.outbox.directory contains everything
	_, err := config.Parse([]byte(rolesTOML(p, "/srv/secret-contract.toml", "/srv/secret-contract.toml")), noEnv, config.Overrides{})
	if err == nil || !strings.Contains(err.Error(), "databases.alpha.outbox.directory overlaps server.credential_path") {
		t.Errorf("err = %v", err)
	}
}

func TestParseRejectsSingleFormOverlap(t *testing.T) {
	t.Parallel()
	doc := strings.Replace(singleTOML, `"/srv/secret-outbox"`, `"/srv/secret-db/outbox"`, 1)
	_, err := config.Parse([]byte(doc), noEnv, config.Overrides{})
	if err == nil || !strings.Contains(err.Error(), "config: maintenance.outbox.directory overlaps database.path") {
		t.Errorf("err = %v", err)
	}
}

func TestParseContractPlacement(t *testing.T) {
	t.Parallel()
	p := rolePaths()
	// Databases may share a contract file, and prefixes that are not path
	// components are not overlaps.
	mustParse(t, rolesTOML(p, p[1]+"-contract.toml", p[1]+"-contract.toml"))
	for i, name := range roleNames {
		for _, contract := range []string{p[i], p[i] + "/contract.toml"} {
			_, err := config.Parse([]byte(rolesTOML(p, "/srv/secret-contract.toml", contract)), noEnv, config.Overrides{})
			want := "databases.beta.contract overlaps " + name
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("contract under %s: err = %v, want %q", name, err, want)
			}
		}
	}
}

func TestValidateHandBuilt(t *testing.T) {
	t.Parallel()
	valid := func() *config.Config {
		return &config.Config{
			Server:    config.Server{Mode: "primary", Listen: "127.0.0.1:0", MetricsListen: ":0", CredentialPath: "/srv/secret-cred"},
			Telemetry: config.Telemetry{LogLevel: "info", TraceSampleRatio: 1},
			Databases: []config.Database{
				{Alias: "a", Path: "/srv/secret-a", Contract: "/srv/secret-c.toml"},
				{Alias: "b", Path: "/srv/secret-b", Contract: "/srv/secret-c.toml",
					Outbox: &config.Outbox{Kind: "durable_local", Directory: "/srv/secret-b-out", QuotaEncodedBytes: 1,
						ScrubPagesPerSecond: config.DefaultScrubPagesPerSecond}},
			},
		}
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	cases := map[string]struct {
		mutate func(*config.Config)
		want   string
	}{
		"duplicate alias": {func(c *config.Config) { c.Databases[1].Alias = "a" }, `database alias "a" is configured twice`},
		"empty alias":     {func(c *config.Config) { c.Databases[0].Alias = "" }, "database alias <quoted key> is invalid"},
		"no databases":    {func(c *config.Config) { c.Databases = nil }, "no database is configured"},
		"33 databases": {func(c *config.Config) {
			for len(c.Databases) <= config.MaxDatabases {
				c.Databases = append(c.Databases, c.Databases[0])
			}
		}, "at most 32 databases"},
		"empty mode":      {func(c *config.Config) { c.Server.Mode = "" }, "server.mode"},
		"empty listen":    {func(c *config.Config) { c.Server.Listen = "" }, "server.listen is required"},
		"named overlap":   {func(c *config.Config) { c.Databases[1].Outbox.Directory = "/srv/secret-a" }, "databases.b.outbox.directory overlaps databases.a.path"},
		"named follower":  {func(c *config.Config) { c.Server.Mode = "follower" }, "databases.b.outbox is not allowed"},
		"negative quota":  {func(c *config.Config) { c.Databases[1].Outbox.QuotaEncodedBytes = -1 }, "databases.b.outbox.quota_encoded_bytes must be set"},
		"negative ratio":  {func(c *config.Config) { c.Telemetry.TraceSampleRatio = -0.1 }, "telemetry.trace_sample_ratio"},
		"otlp port zero":  {func(c *config.Config) { c.Telemetry.OTLPEndpoint = "collector:0" }, "telemetry.otlp_endpoint must be host:port with a host"},
		"empty log level": {func(c *config.Config) { c.Telemetry.LogLevel = "" }, "telemetry.log_level"},
	}
	for name, tc := range cases {
		c := valid()
		tc.mutate(c)
		err := c.Validate()
		if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.want)
		}
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	if err := os.WriteFile(good, []byte(singleTOML), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(good, noEnv, config.Overrides{Listen: "127.0.0.1:1"})
	if err != nil || c.Server.Listen != "127.0.0.1:1" {
		t.Fatalf("Load = %+v, %v", c, err)
	}

	missing := filepath.Join(dir, "missing.toml")
	_, err = config.Load(missing, noEnv, config.Overrides{})
	if !errors.Is(err, config.ErrUnreadable) || errors.Is(err, config.ErrInvalid) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v", err)
	}
	if err != nil && strings.Contains(err.Error(), dir) {
		t.Errorf("message %q contains the path", err)
	}
	if _, err := config.Load(dir, noEnv, config.Overrides{}); !errors.Is(err, config.ErrUnreadable) || strings.Contains(err.Error(), dir) {
		t.Errorf("directory: err = %v", err)
	}

	big := filepath.Join(dir, "big.toml")
	if err := os.WriteFile(big, []byte(singleTOML+"#"+strings.Repeat("x", 4<<20)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(big, noEnv, config.Overrides{}); !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("big file: err = %v", err)
	}
}

func TestParseHardeningOptions(t *testing.T) {
	c := mustParse(t, withSingle("[server]", `[server]
listen = "0.0.0.0:7420"
max_connections = 100
metrics_max_connections = 7
max_connections_per_peer = 100
shutdown_grace = "1m30s"
tls_cert_path = "/etc/secret-cert"
tls_key_path = "/etc/secret-key"`)+"[telemetry]\ntrust_trace_context = false\nhonor_sampled_parent = true\n")
	s := c.Server
	if s.MaxConnections != 100 || s.MetricsMaxConnections != 7 || s.MaxConnectionsPerPeer != 100 || s.ShutdownGrace != 90*time.Second ||
		s.TLSCertPath != "/etc/secret-cert" || s.TLSKeyPath != "/etc/secret-key" || s.AllowInsecureListen {
		t.Fatalf("Server = %+v", s)
	}
	if c.Telemetry.TrustTraceContext || !c.Telemetry.HonorSampledParent {
		t.Fatalf("Telemetry = %+v", c.Telemetry)
	}
	// Plaintext on a public address is accepted only when asked for.
	c = mustParse(t, withSingle("[server]", "[server]\nlisten = \"192.0.2.10:7420\"\nallow_insecure_listen = true"))
	if !c.Server.AllowInsecureListen {
		t.Fatal("allow_insecure_listen not parsed")
	}
	for addr, want := range map[string]bool{"127.0.0.1:1": true, "[::1]:1": true, "localhost:1": true, "127.9.9.9:1": true,
		":1": false, "0.0.0.0:1": false, "[::]:1": false, "192.0.2.1:1": false, "example.com:1": false, "bad": false} {
		if got := config.IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// withBackup is singleTOML with a backup_root and the option line opt.
func withBackup(opt string) string {
	return withSingle("[database]", "[database]\nbackup_root = \"/srv/secret-backup\"\n"+opt)
}

// TestParseBackupOptions: a database with a backup_root gets the backup
// limits' defaults unless it sets them; backup_reserve_bytes = 0 and
// backup_min_interval = "0s" turn the reserve and the rate limit off.
func TestParseBackupOptions(t *testing.T) {
	t.Parallel()
	d := mustParse(t, withBackup("")).Databases[0]
	if d.BackupKeep != 7 || d.BackupReserveBytes != 1<<30 || d.BackupMinInterval != time.Minute {
		t.Fatalf("defaults: %+v", d)
	}
	d = mustParse(t, withBackup("backup_keep = 2\nbackup_reserve_bytes = 0\nbackup_min_interval = \"0s\"")).Databases[0]
	if d.BackupKeep != 2 || d.BackupReserveBytes != 0 || d.BackupMinInterval != 0 {
		t.Fatalf("explicit zeros: %+v", d)
	}
	c := mustParse(t, strings.Replace(namedTOML, "history_retention = 1000", "history_retention = 1000\nbackup_keep = 30\nbackup_reserve_bytes = 5368709120\nbackup_min_interval = \"1h\"", 1))
	o, _ := c.Database("orders")
	if o.BackupKeep != 30 || o.BackupReserveBytes != 5<<30 || o.BackupMinInterval != time.Hour {
		t.Fatalf("named: %+v", o)
	}
}

// withSingle is singleTOML with its first old replaced by new.
func withSingle(old, new string) string {
	if !strings.Contains(singleTOML, old) {
		panic("test bug: " + old)
	}
	return strings.Replace(singleTOML, old, new, 1)
}

func TestParseResourceOptions(t *testing.T) {
	c := mustParse(t, singleTOML)
	if got := c.Server.MemoryBudgetBytes; got != 0 {
		t.Errorf("default MemoryBudgetBytes = %d, want 0 (the server applies DefaultMemoryBudgetBytes)", got)
	}
	if got := c.Databases[0].Outbox.ScrubPagesPerSecond; got != config.DefaultScrubPagesPerSecond {
		t.Errorf("default ScrubPagesPerSecond = %d, want %d", got, config.DefaultScrubPagesPerSecond)
	}
	c = mustParse(t, withSingle("[server]", "[server]\nmemory_budget_bytes = 1073741824")+"scrub_pages_per_second = 0\nfull_validation_interval = \"24h\"\n")
	if c.Server.MemoryBudgetBytes != 1<<30 || c.Databases[0].Outbox.ScrubPagesPerSecond != 0 {
		t.Fatalf("memory budget %d, scrub %d", c.Server.MemoryBudgetBytes, c.Databases[0].Outbox.ScrubPagesPerSecond)
	}
	c = mustParse(t, strings.Replace(namedTOML, "quota_encoded_bytes = 4096", "quota_encoded_bytes = 4096\nscrub_pages_per_second = 256", 1))
	if got := c.Databases[1].Outbox.ScrubPagesPerSecond; got != 256 {
		t.Fatalf("named scrub_pages_per_second = %d, want 256", got)
	}
	for _, tc := range []struct{ doc, want string }{
		{withSingle("[server]", "[server]\nmemory_budget_bytes = 1048576"), "server.memory_budget_bytes must be 0"},
		{withSingle("[server]", "[server]\nmemory_budget_bytes = -1"), "memory_budget_bytes"},
		{withSingle("[server]", "[server]\nmemory_budget_bytes = 2199023255552"), "server.memory_budget_bytes must be 0"},
		{withSingle("[server]", "[server]\nmemory_budget_bytes = \"1G\""), "memory_budget_bytes"},
		{singleTOML + "scrub_pages_per_second = 257\n", "maintenance.outbox.scrub_pages_per_second must be between 0"},
		{singleTOML + "scrub_pages_per_second = -1\n", "scrub_pages_per_second"},
		{singleTOML + "scrub_pages_per_second = 9223372036854775807\n", "scrub_pages_per_second"},
		{strings.Replace(namedTOML, "quota_encoded_bytes = 4096", "quota_encoded_bytes = 4096\nscrub_pages_per_second = 1000", 1),
			"databases.orders.outbox.scrub_pages_per_second must be between 0"},
	} {
		_, err := config.Parse([]byte(tc.doc), noEnv, config.Overrides{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(...%q) = %v, want an error containing %q", tc.doc[len(tc.doc)-40:], err, tc.want)
		}
	}
	// A hand-built configuration is checked the same way.
	c = mustParse(t, singleTOML)
	c.Server.MemoryBudgetBytes = 1
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "server.memory_budget_bytes") {
		t.Errorf("Validate(memory budget 1) = %v", err)
	}
}

// TestFullValidationInterval: full_validation_interval is a positive
// duration, DefaultFullValidationInterval when omitted, and
// scrub_pages_per_second = 0 is refused without it (the error names both
// options, in either form).
func TestFullValidationInterval(t *testing.T) {
	c := mustParse(t, singleTOML)
	o := c.Databases[0].Outbox
	if o.FullValidationInterval != 0 || o.EffectiveFullValidationInterval() != config.DefaultFullValidationInterval {
		t.Fatalf("omitted: %v, effective %v; want 0 and %v", o.FullValidationInterval, o.EffectiveFullValidationInterval(), config.DefaultFullValidationInterval)
	}
	c = mustParse(t, singleTOML+"full_validation_interval = \"36h\"\n")
	if got := c.Databases[0].Outbox.EffectiveFullValidationInterval(); got != 36*time.Hour {
		t.Fatalf("full_validation_interval = %v, want 36h", got)
	}
	c = mustParse(t, singleTOML+"scrub_pages_per_second = 0\nfull_validation_interval = \"1s\"\n")
	if o := c.Databases[0].Outbox; o.ScrubPagesPerSecond != 0 || o.FullValidationInterval != time.Second {
		t.Fatalf("scrub off with an interval: %+v", o)
	}
	for _, tc := range []struct{ doc, want string }{
		{singleTOML + "scrub_pages_per_second = 0\n", "maintenance.outbox.scrub_pages_per_second = 0 turns the background scrub off"},
		{singleTOML + "scrub_pages_per_second = 0\n", "set maintenance.outbox.full_validation_interval too"},
		{strings.Replace(namedTOML, "quota_encoded_bytes = 4096", "quota_encoded_bytes = 4096\nscrub_pages_per_second = 0", 1),
			"databases.orders.outbox.full_validation_interval"},
		{singleTOML + "full_validation_interval = \"0s\"\n", `maintenance.outbox.full_validation_interval must be a positive duration`},
		{singleTOML + "full_validation_interval = \"-1h\"\n", `maintenance.outbox.full_validation_interval must be a positive duration`},
		{singleTOML + "full_validation_interval = \"weekly\"\n", `maintenance.outbox.full_validation_interval must be a positive duration`},
		{singleTOML + "full_validation_interval = 86400\n", `"maintenance.outbox.full_validation_interval" must be a duration string`},
	} {
		_, err := config.Parse([]byte(tc.doc), noEnv, config.Overrides{})
		if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(...%q) = %v, want ErrInvalid containing %q", tc.doc[len(tc.doc)-40:], err, tc.want)
		}
	}
	// A hand-built configuration is checked the same way.
	c = mustParse(t, singleTOML)
	c.Databases[0].Outbox.ScrubPagesPerSecond = 0
	if err := c.Validate(); !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "full_validation_interval") {
		t.Errorf("Validate(scrub 0, no interval) = %v", err)
	}
}
