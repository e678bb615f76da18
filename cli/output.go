package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// Schema is the schema tag of every JSON envelope.
const Schema = "riffdb.cli.output/v1"

// Kind classifies a failure for the envelope and the exit code.
type Kind string

// Failure kinds, as in the CLI contract.
const (
	KindLocal     Kind = "local"     // bad flags, bad configuration, local files: exit 2
	KindPublic    Kind = "public"    // the server or the data said no: exit 1
	KindClient    Kind = "client"    // transport failure talking to a server: exit 1
	KindUncertain Kind = "uncertain" // the outcome is unknown: exit 3
)

// Exit codes.
const (
	ExitOK        = 0
	ExitPublic    = 1
	ExitLocal     = 2
	ExitUncertain = 3
)

// ExitCode returns the process exit code for a failure of kind k.
func (k Kind) ExitCode() int {
	switch k {
	case KindPublic, KindClient:
		return ExitPublic
	case KindUncertain:
		return ExitUncertain
	default:
		return ExitLocal
	}
}

// Error is a classified command failure. Message is shown to the user as is,
// so it must never contain filesystem paths or event payloads where the
// command's contract forbids them.
type Error struct {
	Kind    Kind
	Code    string
	Message string
	// Result, when set, is still reported (in JSON as "result" beside
	// "error"), for commands such as inspect whose failing verdict carries
	// the numbers that explain it.
	Result any
}

func (e *Error) Error() string { return e.Message }

// Local returns a local or usage failure (exit 2).
func Local(code, format string, args ...any) *Error {
	return &Error{Kind: KindLocal, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Public returns a failure reported by a server or by the data (exit 1).
func Public(code, format string, args ...any) *Error {
	return &Error{Kind: KindPublic, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Client returns a transport failure (exit 1).
func Client(code, format string, args ...any) *Error {
	return &Error{Kind: KindClient, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Uncertain returns a failure whose outcome is unknown (exit 3).
func Uncertain(code, format string, args ...any) *Error {
	return &Error{Kind: KindUncertain, Code: code, Message: fmt.Sprintf(format, args...)}
}

type envelope struct {
	Schema  string         `json:"schema"`
	Command string         `json:"command"`
	OK      bool           `json:"ok"`
	Result  any            `json:"result,omitempty"`
	Error   *envelopeError `json:"error,omitempty"`
}

type envelopeError struct {
	Kind    Kind   `json:"kind"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// commandName is the dotted name of cmd below the root ("outbox.archive.inspect").
func commandName(cmd *cobra.Command) string {
	parts := strings.Fields(cmd.CommandPath())
	if len(parts) > 1 {
		parts = parts[1:]
	}
	return strings.Join(parts, ".")
}

// Emit reports a successful result. In JSON mode it prints the envelope with
// result; in text mode it calls text, or prints result as indented JSON when
// text is nil.
func Emit(cmd *cobra.Command, result any, text func(w io.Writer) error) error {
	w := cmd.OutOrStdout()
	if outputMode(cmd) == "json" {
		return writeJSON(w, envelope{Schema: Schema, Command: commandName(cmd), OK: true, Result: result})
	}
	if text != nil {
		return text(w)
	}
	b, err := json.MarshalIndent(result, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// report prints a failure and returns the exit code.
func report(cmd *cobra.Command, mode string, stdout, stderr io.Writer, err error) int {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Kind: KindLocal, Code: "usage", Message: err.Error()}
	}
	if mode == "json" {
		name := "riffdb"
		if cmd != nil {
			name = commandName(cmd)
		}
		_ = writeJSON(stdout, envelope{Schema: Schema, Command: name, OK: false, Result: e.Result,
			Error: &envelopeError{Kind: e.Kind, Code: e.Code, Message: e.Message}})
	} else {
		if t, ok := e.Result.(textResult); ok {
			_ = t.writeText(stdout)
		} else if e.Result != nil {
			if b, err := json.MarshalIndent(e.Result, "", "  "); err == nil {
				fmt.Fprintf(stdout, "%s\n", b)
			}
		}
		fmt.Fprintf(stderr, "riffdb: %s\n", e.Message)
	}
	return e.Kind.ExitCode()
}

// textResult is a result with its own text layout. A failure whose Result
// has one prints it in text mode as a success would; any other Result is
// printed as indented JSON.
type textResult interface {
	writeText(w io.Writer) error
}
