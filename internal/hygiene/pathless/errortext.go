package pathless

import (
	"io/fs"
	"os"
	"strings"
)

// ErrorText returns err's text with the path of every *fs.PathError and
// *os.LinkError in its tree left out (their operation and reason are kept),
// for a message that is only ever printed (server startup errors). Unlike
// Error, which rebuilds a wrapper's text only when it ends with its cause,
// ErrorText edits every wrapper's text in place: a wrapping error — fmt.Errorf's %w, errors.Join, *os.SyscallError,
// *net.OpError — keeps its own words, with the text of each cause replaced
// by the cause's pathless text. errors.Unwrap alone would not do: it yields
// nil for a joined error and keeps paths deeper in the chain.
func ErrorText(err error) string {
	switch e := err.(type) {
	case nil:
		return ""
	case *fs.PathError:
		return e.Op + ": " + ErrorText(e.Err)
	case *os.LinkError:
		return e.Op + ": " + ErrorText(e.Err)
	}
	var causes []error
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		causes = []error{u.Unwrap()}
	case interface{ Unwrap() []error }:
		causes = u.Unwrap()
	}
	msg := err.Error()
	from := 0 // causes appear in order (errors.Join, several %w)
	for _, c := range causes {
		if c == nil {
			continue
		}
		text := c.Error()
		i := strings.Index(msg[from:], text)
		if text == "" || i < 0 {
			continue
		}
		clean := ErrorText(c)
		msg = msg[:from+i] + clean + msg[from+i+len(text):]
		from += i + len(clean)
	}
	return msg
}
