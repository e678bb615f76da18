package strictjson

import (
	"fmt"
	"strconv"
)

// MaxDepth bounds how deeply arrays and objects may nest.
const MaxDepth = 1000

// smallObject is how many keys an object holds before duplicate detection
// switches from a linear scan to a map.
const smallObject = 16

// Problem says what is wrong with a document. Its String form is a
// predicate ("is not valid UTF-8") that a caller puts after a subject that
// names the field.
type Problem int

// Problems.
const (
	// Syntax: the document is not JSON (includes unescaped control
	// characters in strings and an empty document).
	Syntax Problem = iota + 1
	// InvalidUTF8: a string holds bytes that are not UTF-8.
	InvalidUTF8
	// LoneSurrogate: a \u escape leaves a UTF-16 surrogate unpaired.
	LoneSurrogate
	// DuplicateKey: an object has the key at the end of Path twice.
	DuplicateKey
	// TooDeep: arrays and objects nest more than MaxDepth levels.
	TooDeep
	// TrailingData: something other than whitespace follows the value.
	TrailingData
	// NotObject: Members was given a value that is not an object.
	NotObject
)

// String returns the problem as a predicate.
func (p Problem) String() string {
	switch p {
	case Syntax:
		return "is not valid JSON"
	case InvalidUTF8:
		return "is not valid UTF-8"
	case LoneSurrogate:
		return "holds an unpaired UTF-16 surrogate escape"
	case DuplicateKey:
		return "appears more than once"
	case TooDeep:
		return "nests more than " + strconv.Itoa(MaxDepth) + " levels deep"
	case TrailingData:
		return "has data after its end"
	case NotObject:
		return "is not a JSON object"
	}
	return "is not acceptable"
}

// Error is a refused document. It never holds any part of the document
// but the keys in Path, which are valid strings that were read before the
// problem was found.
type Error struct {
	// Path holds the keys, outermost first, of the object members inside
	// whose value the problem lies; empty for a problem of the document
	// itself or of its top-level object. For DuplicateKey it ends with the
	// repeated key.
	Path []string
	// InKey reports that the problem is in a key of the object that Path
	// leads to, not in a value.
	InKey bool
	// Problem says what is wrong.
	Problem Problem
	// Offset is the byte offset at which the problem was found.
	Offset int
}

// Error describes the problem by depth and offset only, so that it can be
// logged without echoing the client's keys.
func (e *Error) Error() string {
	what := "a value"
	if e.InKey {
		what = "a key"
	}
	return fmt.Sprintf("strictjson: %s at depth %d %s (byte offset %d)", what, len(e.Path), e.Problem, e.Offset)
}

// In returns the problem relative to the value of the top-level member key
// when it lies inside that value, and false when it lies elsewhere (a
// repetition of key itself is a problem of the outer object, not inside
// the value).
func (e *Error) In(key string) (*Error, bool) {
	if len(e.Path) == 0 || e.Path[0] != key {
		return nil, false
	}
	if len(e.Path) == 1 && e.Problem == DuplicateKey {
		return nil, false
	}
	rel := *e
	rel.Path = e.Path[1:]
	return &rel, true
}

// Validate reports whether data is one strict JSON document; the error is
// an *Error.
func Validate(data []byte) error {
	s := scanner{data: data}
	if err := s.value(); err != nil {
		return err
	}
	return s.end()
}

// Members reads data, which must be one strict JSON object (an empty or
// blank data is NotObject, other non-objects that are not JSON are Syntax,
// and the other values NotObject), and calls fn
// for each member in document order with the decoded key and the member's
// raw value (without surrounding whitespace), once that value has been
// validated. A validation problem anywhere in data is returned as an
// *Error; an error from fn stops the walk and is returned as it is. fn may
// have been called for earlier members before a later problem is found,
// so callers act on what fn saw only when Members returns nil.
func Members(data []byte, fn func(key string, value []byte) error) error {
	return MemberBytes(data, func(key, value []byte) error { return fn(string(key), value) })
}

// MemberBytes is Members with each key given as its decoded bytes, valid
// during the call only: a caller that compares keys (switch string(key))
// makes no string of them.
func MemberBytes(data []byte, fn func(key, value []byte) error) error {
	s := scanner{data: data}
	s.skipSpace()
	if s.pos >= len(s.data) {
		return s.fail(NotObject, false) // nothing at all
	}
	if s.data[s.pos] != '{' {
		if err := s.value(); err != nil {
			return err // not JSON at all
		}
		return s.fail(NotObject, false)
	}
	if err := s.object(fn); err != nil {
		return err
	}
	return s.end()
}

// Unquote decodes raw, which must be exactly one JSON string token (quotes
// included), to the string it denotes, under the same rules as Validate.
func Unquote(raw []byte) (string, error) {
	s := scanner{data: raw}
	if len(raw) == 0 || raw[0] != '"' {
		return "", s.fail(Syntax, false)
	}
	v, err := s.str(false, true)
	if err != nil {
		return "", err
	}
	if s.pos != len(raw) {
		return "", s.fail(TrailingData, false)
	}
	return string(v), nil
}
