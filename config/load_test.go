package config_test

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/riffdb/riffdb/config"
)

// unknownKeysTOML is singleTOML followed by n unknown options in
// [telemetry].
func unknownKeysTOML(n int) []byte {
	var b strings.Builder
	b.WriteString(singleTOML)
	b.WriteString("[telemetry]\n")
	for i := range n {
		fmt.Fprintf(&b, "unknown_option_%06d = \"/srv/secret-%d\"\n", i, i)
	}
	return []byte(b.String())
}

// hostileTOML returns documents of n problems each, of the shapes that
// go-toml's decoder handles in quadratic time, with the message each must
// give.
var hostileTOML = []struct {
	name string
	doc  func(n int) string
	want string
}{
	{"unknown options", func(n int) string { return string(unknownKeysTOML(n)) }, "unknown options"},
	{"unknown tables", func(n int) string {
		return singleTOML + strings.Repeat("[bogus]\n", 1) + repeatf(n, "[bogus.t%d]\nk = 1\n")
	}, `unknown option "bogus"`},
	{"many databases", func(n int) string {
		return serverTOML + repeatf(n, "[databases.db%d]\npath = \"/srv/secret\"\n")
	}, "at most 32 databases may be configured"},
	{"inline tables in an array", func(n int) string {
		return strings.Replace(singleTOML, "[server]", "[server]\nmode = [{"+repeatf(n, "k%d = 1,")+"x = 1}]", 1)
	}, `option "server.mode" must be a string`},
	{"array tables", func(n int) string { return singleTOML + repeatf(n, "[[database]]\nk%d = 1\n") }, `option "database" must be a table`},
	{"duplicate after many lines", func(n int) string {
		return singleTOML + "[telemetry]\n" + repeatf(n, "# comment %d\nlog_level = \"info\"\n")
	}, `duplicate option "telemetry.log_level"`},
}

// repeatf concatenates format applied to 0..n-1.
func repeatf(n int, format string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, format, i)
	}
	return b.String()
}

// parseTime returns the shortest of five timings of Parse(doc), and the
// error Parse returned.
func parseTime(doc []byte) (time.Duration, error) {
	best := time.Duration(1<<63 - 1)
	var err error
	// The collector is off while Parse runs: its work depends on the
	// heap's history, not on the input, and dominates short timings.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for range 5 {
		runtime.GC()
		start := time.Now()
		_, err = config.Parse(doc, noEnv, config.Overrides{})
		best = min(best, time.Since(start))
	}
	runtime.GC()
	return best, err
}

// TestParseIsLinearInTheInput compares Parse on n and 8n problems in the
// same run: a linear parser takes about 8 times as long, a quadratic one 64
// times. (go-toml's decoder renders a context for every unknown key by
// splitting the whole document into lines, and its duplicate-key tracker
// compares every key with all its siblings; before the fix 40,000 unknown
// keys took about a minute.) No absolute time is asserted. The bound, 32,
// leaves room for a noisy machine, and a ratio above it is measured again
// before the test fails. RIFFDB_LINEAR_N sets n (default 5000).
func TestParseIsLinearInTheInput(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a timing ratio over growing inputs (seconds; noisy under load and the race detector)")
	}
	n := 5000
	if s := os.Getenv("RIFFDB_LINEAR_N"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	for _, tc := range hostileTOML {
		t.Run(tc.name, func(t *testing.T) {
			small, large := []byte(tc.doc(n)), []byte(tc.doc(8*n))
			var ratio float64
			for attempt := range 3 {
				ts, err := parseTime(small)
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("n: err = %.300v, want %q", err, tc.want)
				}
				tl, err := parseTime(large)
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("8n: err = %.300v, want %q", err, tc.want)
				}
				ratio = float64(tl) / float64(max(ts, time.Microsecond))
				t.Logf("attempt %d: n=%d (%d bytes): %v, 8n: %v, ratio %.1f", attempt, n, len(small), ts, tl, ratio)
				if ratio <= 32 {
					return
				}
			}
			t.Errorf("8 times the input took %.1f times as long: not linear", ratio)
		})
	}
}

// TestParseBoundsUnknownOptions checks that a file with many unknown
// options gets a short message: the first 20 named, then a count.
func TestParseBoundsUnknownOptions(t *testing.T) {
	t.Parallel()
	_, err := config.Parse(unknownKeysTOML(40000), noEnv, config.Overrides{})
	if !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("err = %v", err)
	}
	msg := err.Error()
	if len(msg) > 4096 {
		t.Errorf("message has %d bytes, want at most 4096", len(msg))
	}
	for i := range 20 {
		if name := fmt.Sprintf(`"telemetry.unknown_option_%06d"`, i); !strings.Contains(msg, name) {
			t.Errorf("message does not name %s: %q", name, msg)
		}
	}
	if strings.Contains(msg, "unknown_option_000020") || !strings.HasSuffix(msg, "and 39980 more") {
		t.Errorf("message does not stop after 20 names with a count: %q", msg)
	}
	if strings.Contains(msg, "secret-") {
		t.Errorf("message echoes a value: %q", msg)
	}
}

// TestParseBoundsLongKeys checks that the message stays short when every
// unknown key is as long as a bare key may be.
func TestParseBoundsLongKeys(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString(singleTOML)
	for i := range 100 {
		// Each key has several long parts; only the first is unknown.
		fmt.Fprintf(&b, "[%s%03d.%s.%s]\n", strings.Repeat("k", 61), i, strings.Repeat("x", 64), strings.Repeat("y", 64))
	}
	_, err := config.Parse([]byte(b.String()), noEnv, config.Overrides{})
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "unknown options") {
		t.Fatalf("err = %v", err)
	}
	if msg := err.Error(); len(msg) > 4096 || !strings.Contains(msg, " more") {
		t.Errorf("message has %d bytes: %q", len(msg), msg)
	}

	// A duplicate key of many parts is named in a bounded form too.
	long := strings.Repeat("part.", 2000) + "end"
	_, err = config.Parse([]byte(singleTOML+"[telemetry]\n"+long+" = 1\n"+long+" = 2\n"), noEnv, config.Overrides{})
	if !errors.Is(err, config.ErrInvalid) || len(err.Error()) > 4096 {
		t.Fatalf("err = %.200v (%d bytes)", err, len(err.Error()))
	}
}

// TestParseUnknownOptionsShapes covers where unknown options can hide: in
// dotted keys, inline tables, array tables and under unknown tables, and
// that option names are matched exactly (go-toml alone matches them
// case-insensitively, so "Mode" and "mode" would both set the mode).
func TestParseUnknownOptionsShapes(t *testing.T) {
	t.Parallel()
	named := serverTOML + "[databases.alpha]\npath = \"/srv/secret-a\"\ncontract = \"/srv/secret-c\"\n"
	cases := []struct{ name, doc, want string }{
		{"dotted key at the top", "server.credential_path = \"/srv/secret-cred\"\nserver.bogus = 1\n" + strings.TrimPrefix(singleTOML, serverTOML), `unknown option "server.bogus"`},
		{"dotted key in a table", withSingle("[database]", "[database]\nbackup.root = \"/srv/secret-b\""), `unknown option "database.backup"`},
		{"inline table", strings.Replace(singleTOML, "[server]\ncredential_path = \"/srv/secret-cred\"", "server = { credential_path = \"/srv/secret-cred\", bogus = 1 }", 1), `unknown option "server.bogus"`},
		{"nested inline table", named + "outbox = { kind = \"durable_local\", directory = \"/srv/secret-o\", quota_encoded_bytes = 1, extra = { a = 1 } }\n", `unknown option "databases.alpha.outbox.extra"`},
		{"array table", singleTOML + "[[bogus]]\nx = 1\n", `unknown option "bogus"`},
		{"keys under an unknown table", singleTOML + "[bogus]\na = 1\nb = 2\n[bogus.c]\n", `unknown option "bogus"`},
		{"unknown below an alias", named + "[databases.alpha.vacuum]\n", `unknown option "databases.alpha.vacuum"`},
		{"upper-case table", strings.Replace(singleTOML, "[server]", "[Server]", 1), `unknown option "Server"`},
		{"upper-case option", withSingle("[server]", "[server]\nMode = \"follower\""), `unknown option "server.Mode"`},
		{"hint for the single form's outbox", withSingle("[maintenance.outbox]", "[database.outbox]"), "the single-database form's outbox section is [maintenance.outbox]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Parse([]byte(tc.doc), noEnv, config.Overrides{})
			if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "secret-") {
				t.Errorf("message %q echoes a value", err)
			}
		})
	}
	// Unknown bogus appears once even when named several times.
	_, err := config.Parse([]byte(singleTOML+"[bogus]\n[bogus.a]\n[bogus.b]\n"), noEnv, config.Overrides{})
	if err == nil || strings.Count(err.Error(), "bogus") != 1 {
		t.Errorf("err = %v, want bogus named once", err)
	}
	// An inline table is accepted where a table belongs.
	mustParse(t, named+"outbox = { kind = \"durable_local\", directory = \"/srv/secret-o\", quota_encoded_bytes = 1 }\n")
}
