package config

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// The raw* types mirror the TOML document. Pointers distinguish an absent
// option from an explicit zero, so that "missing" and "zero" get their own
// messages. Decoding is strict: any key without a field here is an unknown
// option.
type rawFile struct {
	Server      *rawServer             `toml:"server"`
	Database    *rawDatabase           `toml:"database"`
	Maintenance *rawMaintenance        `toml:"maintenance"`
	Databases   map[string]*rawNamedDB `toml:"databases"`
	Telemetry   *rawTelemetry          `toml:"telemetry"`
}

type rawServer struct {
	Mode                  string  `toml:"mode"`
	Listen                string  `toml:"listen"`
	MetricsListen         string  `toml:"metrics_listen"`
	CredentialPath        string  `toml:"credential_path"`
	MaxConnections        *int64  `toml:"max_connections"`
	MetricsMaxConnections *int64  `toml:"metrics_max_connections"`
	ShutdownGrace         *string `toml:"shutdown_grace"`
	TLSCertPath           string  `toml:"tls_cert_path"`
	TLSKeyPath            string  `toml:"tls_key_path"`
	AllowInsecureListen   bool    `toml:"allow_insecure_listen"`
}

// rawDatabase is [database] of the single form: it has no outbox table, the
// single form's outbox lives in [maintenance.outbox].
type rawDatabase struct {
	Path             string  `toml:"path"`
	Contract         string  `toml:"contract"`
	BackupRoot       string  `toml:"backup_root"`
	ProjectionRoot   string  `toml:"projection_root"`
	ReplicationPath  string  `toml:"replication_path"`
	HistoryRetention *uint64 `toml:"history_retention"`
}

// rawNamedDB is [databases.<alias>] of the named form: the options of
// [database] plus its own outbox table.
type rawNamedDB struct {
	rawDatabase
	Outbox *rawOutbox `toml:"outbox"`
}

type rawMaintenance struct {
	Outbox *rawOutbox `toml:"outbox"`
}

type rawOutbox struct {
	Kind              string `toml:"kind"`
	Directory         string `toml:"directory"`
	QuotaEncodedBytes int64  `toml:"quota_encoded_bytes"`
}

type rawTelemetry struct {
	LogLevel           string   `toml:"log_level"`
	OTLPEndpoint       string   `toml:"otlp_endpoint"`
	TraceSampleRatio   *float64 `toml:"trace_sample_ratio"`
	TrustTraceContext  *bool    `toml:"trust_trace_context"`
	HonorSampledParent bool     `toml:"honor_sampled_parent"`
}

// decode parses data strictly into a rawFile. Errors name the offending
// option and line but never echo a value, since a value may be a path.
func decode(data []byte) (*rawFile, error) {
	var raw rawFile
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(&raw)
	if err == nil {
		return &raw, nil
	}
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) {
		return nil, unknownOptions(strict)
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		return nil, decodeError(data, de)
	}
	// Not reachable with go-toml v2's decoder, which reports every document
	// problem as one of the two types above; kept so that a future version
	// still yields ErrInvalid without echoing its message.
	return nil, invalidf("the file is not valid TOML")
}

func unknownOptions(strict *toml.StrictMissingError) error {
	names := make([]string, 0, len(strict.Errors))
	for i := range strict.Errors {
		names = append(names, fmt.Sprintf("%q", keyName(strict.Errors[i].Key())))
	}
	hint := ""
	for i := range strict.Errors {
		if k := keyName(strict.Errors[i].Key()); k == "database.outbox" {
			hint = " (the single-database form's outbox section is [maintenance.outbox])"
		}
	}
	if len(names) == 1 {
		return invalidf("unknown option %s%s", names[0], hint)
	}
	return invalidf("unknown options %s%s", strings.Join(names, ", "), hint)
}

// decodeError turns a go-toml DecodeError into a message of our own. The
// library's message is not reused: it may quote bytes of the document.
func decodeError(data []byte, de *toml.DecodeError) error {
	row, col := de.Position()
	msg := de.Error()
	key := []string(de.Key())
	switch {
	case strings.Contains(msg, "already"):
		name := fullKeyAt(data, row, key)
		what := "option"
		if strings.Contains(msg, "table") {
			what = "table"
		}
		return invalidf("duplicate %s %q (line %d)", what, name, row)
	case len(key) == 0:
		return invalidf("invalid TOML syntax at line %d, column %d", row, col)
	case strings.Contains(msg, "negative"):
		return invalidf("option %q must not be negative (line %d)", keyName(key), row)
	case strings.Contains(msg, "too large") || strings.Contains(msg, "overflow") || strings.Contains(msg, "out of range"):
		return invalidf("option %q is out of range (line %d)", keyName(key), row)
	default:
		return invalidf("option %q must be %s (line %d)", keyName(key), expected(key), row)
	}
}

// scalarTypes describes the value each scalar option takes.
var scalarTypes = map[string]string{
	"mode": "a string", "listen": "a string", "metrics_listen": "a string", "credential_path": "a string",
	"path": "a string", "contract": "a string", "backup_root": "a string", "projection_root": "a string",
	"replication_path": "a string", "history_retention": "a non-negative integer",
	"kind": "a string", "directory": "a string", "quota_encoded_bytes": "an integer",
	"log_level": "a string", "otlp_endpoint": "a string", "trace_sample_ratio": "a number",
	"max_connections": "an integer", "metrics_max_connections": "an integer",
	"shutdown_grace": `a duration string such as "10s"`, "tls_cert_path": "a string", "tls_key_path": "a string",
	"allow_insecure_listen": "a boolean", "trust_trace_context": "a boolean", "honor_sampled_parent": "a boolean",
}

// expected describes what the option at key must hold.
func expected(key []string) string {
	last := key[len(key)-1]
	if len(key) == 1 || (len(key) == 2 && key[0] == "databases") || last == "outbox" {
		return "a table"
	}
	if t, ok := scalarTypes[last]; ok {
		return t
	}
	return "a table"
}

// keyName renders a key for a message. Parts that are not plain TOML bare
// keys are not echoed: a quoted key could hold a path.
func keyName(k []string) string {
	parts := make([]string, len(k))
	for i, p := range k {
		if isBareKey(p) {
			parts[i] = p
		} else {
			parts[i] = "<quoted key>"
		}
	}
	return strings.Join(parts, ".")
}

// isBareKey reports whether s is a TOML bare key of at most 64 bytes.
func isBareKey(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// fullKeyAt names the key defined at line row: go-toml reports a duplicate
// key relative to its table ("path"), while users need "databases.x.path".
// It walks the document's expressions, tracking the current table header.
func fullKeyAt(data []byte, row int, rel []string) string {
	var p unstable.Parser
	p.Reset(data)
	var table []string
	for p.NextExpression() {
		e := p.Expression()
		if e.Kind != unstable.KeyValue && e.Kind != unstable.Table && e.Kind != unstable.ArrayTable {
			continue
		}
		var parts []string
		first := true
		line := 0
		it := e.Key()
		for it.Next() {
			n := it.Node()
			if first {
				line = p.Shape(n.Raw).Start.Line
				first = false
			}
			parts = append(parts, string(n.Data))
		}
		if e.Kind != unstable.KeyValue {
			table = parts
			if line == row {
				return keyName(parts)
			}
			continue
		}
		if line == row {
			full := append(append([]string{}, table...), parts...)
			if len(rel) > 0 && rel[len(rel)-1] != parts[len(parts)-1] {
				// The duplicate is inside an inline table value.
				full = append(full, rel...)
			}
			return keyName(full)
		}
	}
	return keyName(rel)
}
