package config

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

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
	MaxConnectionsPerPeer *int64  `toml:"max_connections_per_peer"`
	ShutdownGrace         *string `toml:"shutdown_grace"`
	TLSCertPath           string  `toml:"tls_cert_path"`
	TLSKeyPath            string  `toml:"tls_key_path"`
	AllowInsecureListen   bool    `toml:"allow_insecure_listen"`
	MemoryBudgetBytes     *int64  `toml:"memory_budget_bytes"`
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
	// Backup limits; each needs backup_root (build).
	BackupKeep         *int64  `toml:"backup_keep"`
	BackupReserveBytes *int64  `toml:"backup_reserve_bytes"`
	BackupMinInterval  *string `toml:"backup_min_interval"`
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
	Kind                string `toml:"kind"`
	Directory           string `toml:"directory"`
	QuotaEncodedBytes   int64  `toml:"quota_encoded_bytes"`
	ScrubPagesPerSecond *int64 `toml:"scrub_pages_per_second"`
	// FullValidationInterval is a duration string (build).
	FullValidationInterval *string `toml:"full_validation_interval"`
	MaxDeliveryAttempts    *int64  `toml:"max_delivery_attempts"`
}

type rawTelemetry struct {
	LogLevel           string   `toml:"log_level"`
	OTLPEndpoint       string   `toml:"otlp_endpoint"`
	TraceSampleRatio   *float64 `toml:"trace_sample_ratio"`
	TrustTraceContext  *bool    `toml:"trust_trace_context"`
	HonorSampledParent bool     `toml:"honor_sampled_parent"`
}

// Bounds of the message that lists unknown options: a hostile file may
// hold tens of thousands of them.
const (
	maxNamedProblems = 20
	maxProblemBytes  = 4096
)

// decode parses data strictly into a rawFile. Errors name the offending
// option and line but never echo a value, since a value may be a path.
//
// check runs first, in one linear pass over the document: it reports
// syntax errors, unknown options, values that cannot fit any option
// (arrays) and too many databases. go-toml's decoder alone is quadratic on
// hostile input (its strict mode renders a context for every unknown key by
// splitting the whole document into lines, and its duplicate-key tracker
// scans every sibling of every key: 40,000 unknown keys took about a
// minute), so it only sees a document that check accepted, whose keys are
// all options: at most a few hundred before the first duplicate.
func decode(data []byte) (*rawFile, error) {
	if err := check(data); err != nil {
		return nil, err
	}
	var raw rawFile
	err := toml.NewDecoder(bytes.NewReader(data)).Decode(&raw)
	var de *toml.DecodeError
	switch {
	case err == nil:
		return &raw, nil
	case errors.As(err, &de):
		return nil, decodeError(data, de)
	default:
		// Not reachable with go-toml v2's decoder, which reports every
		// document problem as a DecodeError; kept so that a future version
		// still yields ErrInvalid without echoing its message.
		return nil, invalidf("the file is not valid TOML")
	}
}

// unknownOptions reports the unknown options, in document order: the first
// maxNamedProblems of them by name, within maxProblemBytes, then a count.
func unknownOptions(names []string) error {
	hint := ""
	if slices.Contains(names, "database.outbox") {
		hint = " (the single-database form's outbox section is [maintenance.outbox])"
	}
	if len(names) == 1 {
		return invalidf("unknown option %q%s", names[0], hint)
	}
	var b strings.Builder
	b.WriteString("unknown options ")
	shown := 0
	for _, n := range names {
		q := strconv.Quote(n)
		if shown == maxNamedProblems || b.Len()+len(q)+len(hint)+64 > maxProblemBytes {
			break
		}
		if shown > 0 {
			b.WriteString(", ")
		}
		b.WriteString(q)
		shown++
	}
	if rest := len(names) - shown; rest > 0 {
		fmt.Fprintf(&b, " and %d more", rest)
	}
	return invalidf("%s%s", b.String(), hint)
}

// schema is the shape of the options a document may hold, derived from
// the raw* types: a table of named options, a table of any keys (elem, for
// [databases.<alias>]), or a value (neither).
type schema struct {
	fields map[string]*schema
	elem   *schema
}

// fileSchema is the schema of a configuration file.
var fileSchema = sync.OnceValue(func() *schema { return schemaOf(reflect.TypeFor[rawFile]()) })

func schemaOf(t reflect.Type) *schema {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		s := &schema{fields: map[string]*schema{}}
		addFields(s, t)
		return s
	case reflect.Map:
		return &schema{elem: schemaOf(t.Elem())}
	default:
		return &schema{}
	}
}

// addFields adds the options of struct t to s; an embedded struct without
// a tag contributes its own options, as go-toml decodes it.
func addFields(s *schema, t reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		switch {
		case f.Anonymous && tag == "":
			addFields(s, f.Type)
		case tag != "" && tag != "-":
			s.fields[tag] = schemaOf(f.Type)
		}
	}
}

func (s *schema) isTable() bool { return s.fields != nil || s.elem != nil }

// child returns the schema of option name of table s. Names match exactly:
// go-toml alone would also take "Mode" for "mode".
func (s *schema) child(name string) (*schema, bool) {
	if s.elem != nil {
		return s.elem, true
	}
	c, ok := s.fields[name]
	return c, ok
}

// checker is the state of check's pass over a document.
type checker struct {
	lines   lineCounter
	seen    map[string]bool // unknown options already named
	unknown []string        // distinct unknown options, in document order
	aliases map[string]bool // the keys of [databases.<alias>]
	shape   error           // the first value that cannot fit its option
}

// check parses data once with go-toml's parser, without decoding it, and
// reports, in this order: a syntax error; a value that fits no option
// (every option is a scalar or a table, so an array, an array of tables or
// an inline table in place of a scalar); unknown options; more than
// MaxDatabases databases. Option names match exactly (go-toml's decoder
// alone would take "Mode" for "mode").
func check(data []byte) error {
	c := checker{lines: lineCounter{data: data}, seen: map[string]bool{}, aliases: map[string]bool{}}
	root := fileSchema()
	var p unstable.Parser
	p.Reset(data)
	table, tablePath := root, []string(nil)
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			tablePath = keyParts(e)
			table = c.walk(root, nil, tablePath)
			if table != nil && e.Kind == unstable.ArrayTable {
				c.badShape(e, tablePath, table)
				table = nil
			}
		case unstable.KeyValue:
			if table != nil {
				c.keyValue(table, tablePath, e)
			}
		}
	}
	if err := p.Error(); err != nil {
		line, col := 1, 1
		var pe *unstable.ParserError
		if errors.As(err, &pe) {
			line, col = c.lines.position(min(int(p.Range(pe.Highlight).Offset), len(data)))
		}
		return invalidf("invalid TOML syntax at line %d, column %d", line, col)
	}
	switch {
	case c.shape != nil:
		return c.shape
	case len(c.unknown) > 0:
		return unknownOptions(c.unknown)
	case len(c.aliases) > MaxDatabases:
		return invalidf("at most %d databases may be configured, found %d", MaxDatabases, len(c.aliases))
	}
	return nil
}

// walk descends from table s along parts, which follow prefix. It records
// the first unknown part and returns nil then, or when a part goes below a
// value (a type error, which the decoder reports); otherwise it returns the
// schema reached.
func (c *checker) walk(s *schema, prefix, parts []string) *schema {
	for i, part := range parts {
		if !s.isTable() {
			return nil
		}
		if s.elem != nil {
			c.aliases[part] = true
		}
		next, ok := s.child(part)
		if !ok {
			name := keyName(append(slices.Clip(prefix), parts[:i+1]...))
			if !c.seen[name] {
				c.seen[name] = true
				c.unknown = append(c.unknown, name)
			}
			return nil
		}
		s = next
	}
	return s
}

// keyValue checks the key of one key-value expression of table s (at
// prefix), and the keys of its value when that is an inline table where a
// table belongs. The recursion is bounded by the schema's depth.
func (c *checker) keyValue(s *schema, prefix []string, kv *unstable.Node) {
	parts := keyParts(kv)
	s = c.walk(s, prefix, parts)
	if s == nil {
		return
	}
	path := append(slices.Clip(prefix), parts...)
	switch v := kv.Value(); {
	case v.Kind == unstable.Array || (v.Kind == unstable.InlineTable && !s.isTable()):
		c.badShape(kv, path, s)
	case v.Kind == unstable.InlineTable:
		it := v.Children()
		for it.Next() {
			c.keyValue(s, path, it.Node())
		}
	}
}

// badShape records that the value of the option at key (defined by node n,
// whose schema is s) has a shape no option has.
func (c *checker) badShape(n *unstable.Node, key []string, s *schema) {
	if c.shape != nil {
		return
	}
	it := n.Key()
	it.Next()
	line, _ := c.lines.position(int(it.Node().Raw.Offset))
	what := "a table"
	if !s.isTable() {
		what = expected(key)
	}
	c.shape = invalidf("option %q must be %s (line %d)", keyName(key), what, line)
}

// lineCounter turns offsets into lines and columns, counting on from the
// previous offset: the parser's Shape counts from the start of the document
// every time, which is quadratic over a document's expressions.
type lineCounter struct {
	data              []byte
	offset, line, bol int // bol: the offset where line starts
}

// position returns the 1-based line and column of offset.
func (l *lineCounter) position(offset int) (line, col int) {
	if offset < l.offset || l.line == 0 {
		l.offset, l.line, l.bol = 0, 1, 0
	}
	for i := l.offset; i < offset; i++ {
		if l.data[i] == '\n' {
			l.line++
			l.bol = i + 1
		}
	}
	l.offset = offset
	return l.line, offset - l.bol + 1
}

// keyParts returns the parts of the key of a table or key-value node.
func keyParts(n *unstable.Node) []string {
	var parts []string
	it := n.Key()
	for it.Next() {
		parts = append(parts, string(it.Node().Data))
	}
	return parts
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
	"backup_keep": "an integer", "backup_reserve_bytes": "an integer", "backup_min_interval": `a duration string such as "1m"`,
	"kind": "a string", "directory": "a string", "quota_encoded_bytes": "an integer",
	"log_level": "a string", "otlp_endpoint": "a string", "trace_sample_ratio": "a number",
	"max_connections": "an integer", "metrics_max_connections": "an integer", "max_connections_per_peer": "an integer",
	"shutdown_grace": `a duration string such as "10s"`, "tls_cert_path": "a string", "tls_key_path": "a string",
	"allow_insecure_listen": "a boolean", "memory_budget_bytes": "an integer", "scrub_pages_per_second": "an integer", "full_validation_interval": `a duration string such as "168h"`, "max_delivery_attempts": "an integer", "trust_trace_context": "a boolean", "honor_sampled_parent": "a boolean",
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
// No configuration key has more than maxKeyParts parts; a longer key is
// cut there, so that a message naming it stays short.
func keyName(k []string) string {
	more := ""
	if len(k) > maxKeyParts {
		k, more = k[:maxKeyParts], ".…"
	}
	parts := make([]string, len(k))
	for i, p := range k {
		if isBareKey(p) {
			parts[i] = p
		} else {
			parts[i] = "<quoted key>"
		}
	}
	return strings.Join(parts, ".") + more
}

// maxKeyParts bounds the parts of a key that keyName shows.
const maxKeyParts = 6

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
	lines := lineCounter{data: data}
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
				line, _ = lines.position(int(n.Raw.Offset))
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
