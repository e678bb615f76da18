// Package ratelog logs recurring errors of background work at a bounded
// rate. A storage engine that retries a failing flush in a tight loop (a
// full disk, no file descriptors left) reports the same error thousands of
// times a second; logging each one floods the log, hides everything else
// and costs as much as the work itself.
//
// A Logger groups reports into classes (the message with its digits
// masked, so that "open 000123.sst" and "open 000124.sst" are one class)
// and writes at most one line per class per interval: the first report at
// once, then after 1 s, 2 s, 4 s, … up to the maximum interval while the
// class keeps recurring, each line with the number of reports it stands
// for ("suppressed"). Clear, called when the caller sees the work succeed
// again, writes one line per class that was reported. Messages are made
// path-free (Clean) and are logged as strings, never with zap.Error:
// errors that format a verbose %+v (cockroachdb/errors, which Pebble uses)
// would otherwise add their stack trace to every line.
package ratelog

import (
	stdlog "log"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/riffdb/riffdb/internal/hygiene/pathless"
	"github.com/riffdb/riffdb/internal/process/clock"
)

// Defaults of Options.
const (
	DefaultInterval    = time.Second
	DefaultMaxInterval = 30 * time.Second
	// MaxClasses bounds the classes a Logger tracks; reports of further
	// classes share one overflow class.
	MaxClasses = 32
)

// overflowClass is the class of reports beyond MaxClasses.
const overflowClass = "\x00overflow"

// Options configures New. Zero values select the defaults.
type Options struct {
	Interval    time.Duration // the first interval; DefaultInterval
	MaxInterval time.Duration // the interval stops doubling here; DefaultMaxInterval
	// AtError writes the lines at error level instead of warn: for a
	// failure that fails requests, not only background work.
	AtError bool
}

// Logger writes rate-limited, deduplicated lines for recurring reports. It
// is safe for concurrent use; its methods never block on anything but its
// own short critical section and the zap logger.
type Logger struct {
	log     *zap.Logger
	clock   clock.Clock
	msg     string
	first   time.Duration
	max     time.Duration
	level   zapcore.Level
	mu      sync.Mutex
	classes map[string]*class
	// reported counts the classes with reported set (under mu), and is
	// read without it, so that Clear costs one atomic load when nothing
	// was reported: callers call it on every success, requests included.
	reported atomic.Int32
}

type class struct {
	text       string        // the latest report's text
	fields     []zap.Field   // the latest report's further fields
	next       time.Time     // no line for this class before next
	interval   time.Duration // the gap after the next line
	lastSeen   time.Time
	suppressed int // reports since the last line
	reported   bool
}

// New returns a Logger that writes lines with message msg at warn level to
// log (nil: no-op) and reads the time from c (nil: clock.Real).
func New(log *zap.Logger, c clock.Clock, msg string, o Options) *Logger {
	if log == nil {
		log = zap.NewNop()
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.MaxInterval < o.Interval {
		o.MaxInterval = max(DefaultMaxInterval, o.Interval)
	}
	level := zapcore.WarnLevel
	if o.AtError {
		level = zapcore.ErrorLevel
	}
	return &Logger{log: log, clock: clock.Or(c), msg: msg, first: o.Interval, max: o.MaxInterval, level: level,
		classes: make(map[string]*class)}
}

// Error reports err, cleaned of paths (see Clean). A nil err is ignored.
func (l *Logger) Error(err error) {
	if err == nil {
		return
	}
	text := Clean(err)
	l.Report(Class(text), text)
}

// Report reports text under class key. It writes a warn line with fields
// "error" (text), the given fields and "suppressed" when the class's
// interval has passed, and otherwise only counts the report. Fields that
// vary between reports belong in key, or only the logged ones are seen.
func (l *Logger) Report(key, text string, fields ...zap.Field) {
	l.mu.Lock()
	now := l.clock.Now()
	c, ok := l.classes[key]
	if !ok {
		if len(l.classes) >= MaxClasses {
			key = overflowClass
			c = l.classes[key]
		}
		if c == nil {
			c = &class{interval: l.first}
			l.classes[key] = c
		}
	}
	if !c.lastSeen.IsZero() && now.Sub(c.lastSeen) >= l.max {
		// Quiet for a whole maximum interval: a new episode.
		c.interval, c.next = l.first, time.Time{}
	}
	c.lastSeen, c.text, c.fields = now, text, fields
	if now.Before(c.next) {
		c.suppressed++
		l.mu.Unlock()
		return
	}
	n := c.suppressed
	c.suppressed = 0
	c.next = now.Add(c.interval)
	c.interval = min(2*c.interval, l.max)
	if !c.reported {
		c.reported = true
		l.reported.Add(1)
	}
	l.mu.Unlock()
	l.log.Log(l.level, l.msg, lineFields(text, fields, n)...)
}

// lineFields returns the fields of a line: the error's text, the report's
// fields and the reports it stands for.
func lineFields(text string, fields []zap.Field, suppressed int) []zap.Field {
	out := make([]zap.Field, 0, len(fields)+2)
	out = append(out, fields...)
	return append(out, zap.String("error", text), zap.Int("suppressed", suppressed))
}

// Clear records that the work succeeded again. Every class with a line
// since the last Clear gets one info line, "<msg> cleared", with the
// class's last text and the reports not yet logged; classes whose line was
// no line since the last Clear stay silent, and every backoff is kept, so an error that
// alternates with success stays bounded. Clear is cheap when nothing was
// reported: call it on every success.
func (l *Logger) Clear() {
	if l.reported.Load() == 0 {
		return
	}
	l.mu.Lock()
	type line struct {
		text   string
		fields []zap.Field
		n      int
	}
	var lines []line
	for _, c := range l.classes {
		if c.reported {
			lines = append(lines, line{c.text, c.fields, c.suppressed})
			c.reported, c.suppressed = false, 0
		}
	}
	l.reported.Store(0)
	l.mu.Unlock()
	for _, ln := range lines {
		l.log.Info(l.msg+" cleared", lineFields(ln.text, ln.fields, ln.n)...)
	}
}

// digits masks the parts of a message that vary between repeats of one
// error (file numbers, offsets, counts).
var digits = regexp.MustCompile(`[0-9]+`)

// Class returns the deduplication class of a cleaned message: the message
// with every run of digits replaced by "#".
func Class(text string) string { return digits.ReplaceAllString(text, "#") }

// Clean returns err's text without filesystem paths: path-carrying errors
// lose their path (internal/hygiene/pathless), and any absolute path left in the
// text, such as one a library formatted into its own message, is replaced
// by its last element ("open /var/lib/db/000123.sst" becomes
// "open 000123.sst"). The text is the error's plain Error(), never a
// verbose %+v form with stacks, and lines of a stack trace are dropped
// (pathless.Message).
func Clean(err error) string {
	if err == nil {
		return ""
	}
	return pathless.Message(err)
}

// CleanText is Clean for a message already formatted (pathless.Text).
func CleanText(s string) string { return pathless.Text(s) }

// StdLogger returns a standard library logger (an http.Server's ErrorLog)
// whose lines go to log at warn, rate-limited, with msg as the message and
// each line, cut to 512 bytes, as its detail: one class per line shape
// (Class), so that a flood of one kind of error does not hide another.
func StdLogger(log *zap.Logger, msg string) *stdlog.Logger {
	return stdlog.New(&stdWriter{log: New(log, nil, msg, Options{})}, "", 0)
}

// stdWriter is StdLogger's writer.
type stdWriter struct{ log *Logger }

func (w *stdWriter) Write(p []byte) (int, error) {
	line := string(p)
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
	}
	if len(line) > 512 {
		line = line[:512] + "…"
	}
	w.log.Report(Class(line), line)
	return len(p), nil
}
