package contract

import (
	"fmt"

	"github.com/riffdb/riffdb/internal/hygiene/strictjson"
)

// InputError is the error Plan.Events and Plan.Canonical return for input
// the plan refuses. It wraps ErrInvalidInput. Its Detail is one sentence
// for the client that names the field at fault and never quotes a value.
type InputError struct {
	detail string
}

// Error returns the detail under the package's prefix.
func (e *InputError) Error() string { return ErrInvalidInput.Error() + ": " + e.detail }

// Unwrap returns ErrInvalidInput.
func (e *InputError) Unwrap() error { return ErrInvalidInput }

// Detail returns the client's sentence, such as
// `input field "amount_cents" must be an integer`.
func (e *InputError) Detail() string { return e.detail }

func inputErrorf(format string, args ...any) *InputError {
	return &InputError{detail: fmt.Sprintf(format, args...)}
}

func fieldErrorf(name, format string, args ...any) *InputError {
	return &InputError{detail: "input field " + quoteName(name) + " " + fmt.Sprintf(format, args...)}
}

// StrictInputError turns a strictjson problem found inside an input
// document (its Path relative to the input, see strictjson.Error.In) into
// the InputError the contract reports for it. A caller that validates a
// whole request before handing the input on (the HTTP envelope) uses it so
// that a problem inside the input reads the same whichever reader found it.
func StrictInputError(e *strictjson.Error) *InputError {
	switch {
	case len(e.Path) == 0 && e.InKey:
		return inputErrorf("input has a key that %s", e.Problem)
	case len(e.Path) == 0 && e.Problem == strictjson.TrailingData:
		return inputErrorf("input has data after the JSON object")
	case len(e.Path) == 0 && e.Problem == strictjson.NotObject:
		return inputErrorf("input must be a JSON object")
	case len(e.Path) == 0:
		return inputErrorf("input %s", e.Problem)
	case len(e.Path) == 1 && !e.InKey:
		return fieldErrorf(e.Path[0], "%s", e.Problem)
	case e.InKey:
		return fieldErrorf(e.Path[0], "holds a key that %s", e.Problem)
	case e.Problem == strictjson.DuplicateKey:
		return fieldErrorf(e.Path[0], "holds an object with a repeated key")
	}
	return fieldErrorf(e.Path[0], "%s", e.Problem)
}
