package pathless

import (
	"path/filepath"
	"regexp"
	"strings"
)

// Message returns err's text for a log line or an error envelope: the
// plain Error() of Error(err) — never a verbose %+v form, which for
// cockroachdb/errors (Pebble's errors) carries a stack trace — passed
// through Text. A nil err gives "".
func Message(err error) string {
	if err == nil {
		return ""
	}
	return Text(Error(err).Error())
}

// absPath matches an absolute path that starts a word (after the start,
// white space, a quote, a bracket or "="), up to the next white space,
// quote, bracket, colon or comma.
var absPath = regexp.MustCompile(`(^|[\s"'(\[{=<])(/[^\s"'()\[\]{}<>:,;]*)`)

// frameRef matches a stack frame's file and line ("stack.go:24").
var frameRef = regexp.MustCompile(`\.go:\d+`)

// Text returns s, a message already formatted, made fit for a log line or
// an error envelope. A goroutine dump ("goroutine 7 [running]:", as
// runtime/debug.Stack writes one into some of Pebble's fatal messages) and
// everything after it are dropped, and so is every other line that looks
// like part of a stack trace (a file:line reference, an indented frame,
// cockroachdb/errors' "-- stack trace:" blocks); the lines left are joined
// with "; ". Any absolute path left in the text, such as one a library
// formatted into its own message, is replaced by its last element
// ("open /var/lib/db/000123.sst" becomes "open 000123.sst").
func Text(s string) string {
	if keepPaths {
		return s
	}
	if strings.ContainsAny(s, "\n\t") || frameRef.MatchString(s) {
		var keep []string
		for _, line := range strings.Split(s, "\n") {
			trimmed := strings.TrimSpace(line)
			if strings.HasPrefix(trimmed, "goroutine ") && strings.Contains(trimmed, "[") {
				break
			}
			if trimmed == "" || frameRef.MatchString(line) || strings.HasPrefix(line, "\t") ||
				strings.HasPrefix(trimmed, "|") || strings.HasPrefix(trimmed, "-- stack trace") {
				continue
			}
			keep = append(keep, trimmed)
		}
		s = strings.Join(keep, "; ")
	}
	if !strings.Contains(s, "/") {
		return s
	}
	return absPath.ReplaceAllStringFunc(s, func(m string) string {
		i := strings.IndexByte(m, '/')
		base := filepath.Base(m[i:])
		if base == "/" || base == "." {
			base = ""
		}
		return m[:i] + base
	})
}

// Clean returns err as an error whose message is Message(err) and that
// still matches err's chain with errors.Is and errors.As. It has no
// verbose form: zap.Error logs only its message. A nil err gives nil.
func Clean(err error) error {
	if err == nil {
		return nil
	}
	return cleaned{msg: Message(err), orig: err}
}

// cleaned is Clean's error.
type cleaned struct {
	msg  string
	orig error
}

func (c cleaned) Error() string { return c.msg }
func (c cleaned) Unwrap() error { return c.orig }
