package contract

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/riffdb/riffdb/internal/hygiene/strictjson"
)

// Draft is one event a command execution emits, before the primary assigns
// it an event id.
type Draft struct {
	// Type is the event type, from the plan's Emits.
	Type string
	// Payload is the canonical JSON of the validated input.
	Payload []byte
}

// value is one validated input value, ready to be written canonically.
type value struct {
	present bool
	str     string // string and bytes (decoded bytes held as a string)
	num     int64
	boolean bool
}

// Events validates input against the plan and returns one draft per emitted
// event type, in the plan's Emits order. Every error is an *InputError
// (wrapping ErrInvalidInput) that names the offending field without
// echoing its value. The payloads of
// the drafts are equal, independent slices holding the canonical JSON of the
// input (see the package documentation); equal logical input always yields
// identical bytes.
func (p *Plan) Events(input json.RawMessage) ([]Draft, error) {
	payload, err := p.Canonical(input)
	if err != nil {
		return nil, err
	}
	drafts := make([]Draft, len(p.Emits))
	for i, t := range p.Emits {
		if i > 0 { // the first takes the canonical bytes themselves
			payload = bytes.Clone(payload)
		}
		drafts[i] = Draft{Type: t, Payload: payload}
	}
	return drafts, nil
}

// Canonical validates input against the plan and returns its canonical JSON,
// the payload of every event the plan emits. Errors are as for Events.
func (p *Plan) Canonical(input json.RawMessage) ([]byte, error) {
	values, err := p.parse(input)
	if err != nil {
		return nil, err
	}
	return p.encode(values)
}

func (p *Plan) fieldIndex(name string) int {
	// Fields are few (at most 64) and sorted; a binary search keeps the
	// lookup cheap without a per-plan map.
	lo, hi := 0, len(p.Fields)
	for lo < hi {
		m := (lo + hi) / 2
		switch {
		case p.Fields[m].Name == name:
			return m
		case p.Fields[m].Name < name:
			lo = m + 1
		default:
			hi = m
		}
	}
	return -1
}

func (p *Plan) parse(input json.RawMessage) ([]value, error) {
	if values, ok := p.parseFast(input); ok {
		return values, nil
	}
	return p.parseReference(input)
}

// parseReference is the reference parser: it reads the input under
// strictjson's rules (the ones the HTTP envelope is read with) and
// produces every error.
func (p *Plan) parseReference(input json.RawMessage) ([]value, error) {
	values := make([]value, len(p.Fields))
	err := strictjson.Members(input, func(key string, raw []byte) error {
		i := p.fieldIndex(key)
		if i < 0 {
			return inputErrorf("input has an unknown field %s", quoteName(key))
		}
		// strictjson refuses a repeated key before its second value.
		v, err := convert(p.Fields[i], raw)
		if err != nil {
			return err
		}
		values[i] = v
		return nil
	})
	if err != nil {
		var se *strictjson.Error
		if !errors.As(err, &se) {
			return nil, err
		}
		// The same sentence the HTTP envelope gives when it finds the
		// problem first (it reads the whole request under these rules).
		return nil, StrictInputError(se)
	}
	for i, f := range p.Fields {
		if !values[i].present && !f.Optional {
			return nil, inputErrorf("required input field %q is missing", f.Name)
		}
	}
	return values, nil
}

// convert checks one raw JSON value against its field's type. raw is one
// value that strictjson validated, with no surrounding whitespace.
func convert(f Field, raw []byte) (value, error) {
	if string(raw) == "null" {
		if f.Optional {
			return value{}, nil
		}
		return value{}, inputErrorf("required input field %q is null", f.Name)
	}
	switch f.Type {
	case TypeString, TypeBytes:
		if raw[0] != '"' {
			return value{}, fieldErrorf(f.Name, "must be a %s", describe(f.Type))
		}
		s, err := strictjson.Unquote(raw)
		if err != nil {
			// Not reached: Members validated raw under the same rules.
			return value{}, fieldErrorf(f.Name, "must be a %s", describe(f.Type))
		}
		if f.Type == TypeString {
			return value{present: true, str: s}, nil
		}
		b, err := base64.StdEncoding.Strict().DecodeString(s)
		if err != nil {
			return value{}, fieldErrorf(f.Name, "must be standard base64 (with padding)")
		}
		return value{present: true, str: string(b)}, nil
	case TypeInt:
		if !(raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9') {
			return value{}, fieldErrorf(f.Name, "must be an integer")
		}
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			if errors.Is(err, strconv.ErrRange) {
				return value{}, fieldErrorf(f.Name, "is out of the 64-bit integer range")
			}
			// A JSON number with a fraction or an exponent.
			return value{}, fieldErrorf(f.Name, "must be an integer (no fraction or exponent)")
		}
		return value{present: true, num: n}, nil
	case TypeBool:
		switch string(raw) {
		case "true":
			return value{present: true, boolean: true}, nil
		case "false":
			return value{present: true}, nil
		}
		return value{}, fieldErrorf(f.Name, "must be a boolean")
	}
	// Compile admits only the four types above.
	panic(fmt.Sprintf("contract: field %q has unknown type %q", f.Name, f.Type))
}

func describe(typ string) string {
	if typ == TypeBytes {
		return "base64 string"
	}
	return typ
}

// encode writes the canonical JSON of values: fields in name order (the
// plan's Fields are sorted, and names are ASCII, so this is bytewise key
// order), no whitespace, absent fields omitted.
func (p *Plan) encode(values []value) ([]byte, error) {
	n := 2
	for i, f := range p.Fields {
		if v := values[i]; v.present {
			// The name, its quotes, colon and comma, and the value: a
			// plain string's length and quotes, base64's length, or
			// at most 20 digits and a sign.
			n += len(f.Name) + 4 + max(len(v.str)+2, base64.StdEncoding.EncodedLen(len(v.str))+2, 20)
		}
	}
	b := make([]byte, 0, n)
	var esc *stringEscaper
	b = append(b, '{')
	first := true
	for i, f := range p.Fields {
		v := values[i]
		if !v.present {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, '"')
		b = append(b, f.Name...) // [a-z0-9_]: needs no escaping
		b = append(b, '"', ':')
		switch f.Type {
		case TypeString:
			if plainJSONString(v.str) {
				b = append(append(append(b, '"'), v.str...), '"')
				break
			}
			if esc == nil {
				esc = newStringEscaper()
			}
			var err error
			if b, err = esc.append(b, v.str); err != nil {
				return nil, fmt.Errorf("contract: encoding field %q: %w", f.Name, err)
			}
		case TypeBytes:
			b = append(b, '"')
			b = base64.StdEncoding.AppendEncode(b, []byte(v.str))
			b = append(b, '"')
		case TypeInt:
			b = strconv.AppendInt(b, v.num, 10)
		case TypeBool:
			b = strconv.AppendBool(b, v.boolean)
		}
	}
	return append(b, '}'), nil
}

// plainJSONString reports whether encoding/json writes s as its bytes
// between quotes (with HTML escaping off): printable ASCII but for the
// quote and the backslash. Any other string goes through encoding/json
// itself (stringEscaper), so the canonical bytes stay exactly its bytes.
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// stringEscaper writes a string as encoding/json's Encoder does with HTML
// escaping off: the canonical form of a string that is not plain.
type stringEscaper struct {
	buf bytes.Buffer
	enc *json.Encoder
}

func newStringEscaper() *stringEscaper {
	e := &stringEscaper{}
	e.enc = json.NewEncoder(&e.buf)
	e.enc.SetEscapeHTML(false)
	return e
}

// append appends s, quoted and escaped, to b.
func (e *stringEscaper) append(b []byte, s string) ([]byte, error) {
	e.buf.Reset()
	if err := e.enc.Encode(s); err != nil {
		return b, err
	}
	q := e.buf.Bytes()
	return append(b, q[:len(q)-1]...), nil // Encode appends a newline
}
