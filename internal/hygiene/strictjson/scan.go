package strictjson

import (
	"bytes"
	"slices"
	"unicode/utf8"
)

type scanner struct {
	data  []byte
	pos   int
	depth int
}

// fail returns the error of problem p at s.pos. Its path is filled in as
// the error returns through the objects it lies in (object): keeping the
// path while reading would cost allocations on every request's path.
func (s *scanner) fail(p Problem, inKey bool) *Error {
	return &Error{InKey: inKey, Problem: p, Offset: s.pos}
}

// under puts key in front of the path of err, an error of the value read
// under key, if it is one of this package's.
func under(key []byte, err error) error {
	if e, ok := err.(*Error); ok {
		e.Path = slices.Insert(e.Path, 0, string(key))
	}
	return err
}

func (s *scanner) skipSpace() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// end accepts only whitespace after the value.
func (s *scanner) end() error {
	s.skipSpace()
	if s.pos != len(s.data) {
		return s.fail(TrailingData, false)
	}
	return nil
}

func (s *scanner) value() error {
	s.skipSpace()
	if s.pos >= len(s.data) {
		return s.fail(Syntax, false)
	}
	switch c := s.data[s.pos]; {
	case c == '{':
		return s.object(nil)
	case c == '[':
		return s.array()
	case c == '"':
		_, err := s.str(false, false)
		return err
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	}
	return s.fail(Syntax, false)
}

func (s *scanner) literal(lit string) error {
	if len(s.data)-s.pos < len(lit) || string(s.data[s.pos:s.pos+len(lit)]) != lit {
		return s.fail(Syntax, false)
	}
	s.pos += len(lit)
	return nil
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (s *scanner) number() error {
	if s.data[s.pos] == '-' {
		s.pos++
	}
	switch {
	case s.pos < len(s.data) && s.data[s.pos] == '0':
		s.pos++
	case s.digits() == 0:
		return s.fail(Syntax, false)
	}
	if s.pos < len(s.data) && s.data[s.pos] == '.' {
		s.pos++
		if s.digits() == 0 {
			return s.fail(Syntax, false)
		}
	}
	if s.pos < len(s.data) && (s.data[s.pos] == 'e' || s.data[s.pos] == 'E') {
		s.pos++
		if s.pos < len(s.data) && (s.data[s.pos] == '+' || s.data[s.pos] == '-') {
			s.pos++
		}
		if s.digits() == 0 {
			return s.fail(Syntax, false)
		}
	}
	return nil
}

func (s *scanner) digits() int {
	start := s.pos
	for s.pos < len(s.data) && s.data[s.pos] >= '0' && s.data[s.pos] <= '9' {
		s.pos++
	}
	return s.pos - start
}

func (s *scanner) enter() error {
	s.depth++
	if s.depth > MaxDepth {
		return s.fail(TooDeep, false)
	}
	s.pos++ // the opening bracket
	return nil
}

func (s *scanner) array() error {
	if err := s.enter(); err != nil {
		return err
	}
	s.skipSpace()
	if s.pos < len(s.data) && s.data[s.pos] == ']' {
		s.pos++
		s.depth--
		return nil
	}
	for {
		if err := s.value(); err != nil {
			return err
		}
		s.skipSpace()
		if s.pos >= len(s.data) {
			return s.fail(Syntax, false)
		}
		switch s.data[s.pos] {
		case ',':
			s.pos++
		case ']':
			s.pos++
			s.depth--
			return nil
		default:
			return s.fail(Syntax, false)
		}
	}
}

// object reads an object and, when fn is set, calls it for each member.
func (s *scanner) object(fn func(key, value []byte) error) error {
	if err := s.enter(); err != nil {
		return err
	}
	s.skipSpace()
	if s.pos < len(s.data) && s.data[s.pos] == '}' {
		s.pos++
		s.depth--
		return nil
	}
	// The keys seen so far: most objects hold a few, kept in an array on
	// the stack instead of a slice grown on the heap (five allocations for
	// a command's envelope and input, TestMembersAllocations). Each is its
	// decoded bytes, which alias data unless the key holds an escape.
	var buf [8][]byte
	keys := buf[:0]
	var set map[string]struct{}
	for {
		s.skipSpace()
		if s.pos >= len(s.data) || s.data[s.pos] != '"' {
			return s.fail(Syntax, false)
		}
		key, err := s.str(true, true)
		if err != nil {
			return err
		}
		var dup bool
		if keys, dup = seen(key, keys, &set); dup && !allowDuplicates {
			return under(key, s.fail(DuplicateKey, false))
		}
		s.skipSpace()
		if s.pos >= len(s.data) || s.data[s.pos] != ':' {
			return s.fail(Syntax, false)
		}
		s.pos++
		s.skipSpace()
		start := s.pos
		if err := s.value(); err != nil {
			return under(key, err)
		}
		if fn != nil {
			if err := fn(key, s.data[start:s.pos]); err != nil {
				return err
			}
		}
		s.skipSpace()
		if s.pos >= len(s.data) {
			return s.fail(Syntax, false)
		}
		switch s.data[s.pos] {
		case ',':
			s.pos++
		case '}':
			s.pos++
			s.depth--
			return nil
		default:
			return s.fail(Syntax, false)
		}
	}
}

// seen records key among an object's keys, returning them with key added,
// and reports whether it was there already.
func seen(key []byte, keys [][]byte, set *map[string]struct{}) ([][]byte, bool) {
	if *set != nil {
		if _, ok := (*set)[string(key)]; ok {
			return keys, true
		}
		(*set)[string(key)] = struct{}{}
		return keys, false
	}
	for _, k := range keys {
		if bytes.Equal(k, key) {
			return keys, true
		}
	}
	keys = append(keys, key)
	if len(keys) > smallObject {
		*set = make(map[string]struct{}, 2*len(keys))
		for _, k := range keys {
			(*set)[string(k)] = struct{}{}
		}
	}
	return keys, false
}

// str reads the string token at s.pos (an opening quote) and, when decode
// is set, returns its decoded value: a slice of data when the token holds
// no escape, else new bytes. inKey says where a problem lies.
func (s *scanner) str(inKey, decode bool) ([]byte, error) {
	s.pos++
	start := s.pos
	// Fast scan: no escapes.
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			var v []byte
			if decode {
				v = s.data[start:s.pos:s.pos]
			}
			s.pos++
			return v, nil
		case c == '\\':
			return s.escaped(start, inKey, decode)
		case c < 0x20:
			return nil, s.fail(Syntax, inKey)
		case c < utf8.RuneSelf:
			s.pos++
		default:
			r, n := utf8.DecodeRune(s.data[s.pos:])
			if r == utf8.RuneError && n == 1 {
				return nil, s.fail(InvalidUTF8, inKey)
			}
			s.pos += n
		}
	}
	return nil, s.fail(Syntax, inKey)
}

// escaped continues str from the first backslash, building the decoded
// string when decode is set.
func (s *scanner) escaped(start int, inKey, decode bool) ([]byte, error) {
	var buf []byte
	if decode {
		buf = make([]byte, 0, len(s.data)-start)
		buf = append(buf, s.data[start:s.pos]...)
	}
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			s.pos++
			return buf, nil
		case c == '\\':
			if s.pos+1 >= len(s.data) {
				return nil, s.fail(Syntax, inKey)
			}
			var b byte
			switch s.data[s.pos+1] {
			case '"', '\\', '/':
				b = s.data[s.pos+1]
			case 'b':
				b = '\b'
			case 'f':
				b = '\f'
			case 'n':
				b = '\n'
			case 'r':
				b = '\r'
			case 't':
				b = '\t'
			case 'u':
				r, err := s.unicode(inKey)
				if err != nil {
					return nil, err
				}
				if decode {
					buf = utf8.AppendRune(buf, r)
				}
				continue
			default:
				return nil, s.fail(Syntax, inKey)
			}
			if decode {
				buf = append(buf, b)
			}
			s.pos += 2
		case c < 0x20:
			return nil, s.fail(Syntax, inKey)
		case c < utf8.RuneSelf:
			if decode {
				buf = append(buf, c)
			}
			s.pos++
		default:
			r, n := utf8.DecodeRune(s.data[s.pos:])
			if r == utf8.RuneError && n == 1 {
				return nil, s.fail(InvalidUTF8, inKey)
			}
			if decode {
				buf = append(buf, s.data[s.pos:s.pos+n]...)
			}
			s.pos += n
		}
	}
	return nil, s.fail(Syntax, inKey)
}

// unicode reads the \uXXXX escape at s.pos, and the low half that must
// follow a high surrogate.
func (s *scanner) unicode(inKey bool) (rune, error) {
	r, ok := hex4(s.data, s.pos+2)
	if !ok {
		return 0, s.fail(Syntax, inKey)
	}
	switch {
	case r >= 0xDC00 && r <= 0xDFFF:
		return 0, s.fail(LoneSurrogate, inKey)
	case r >= 0xD800 && r < 0xDC00:
		next := s.pos + 6
		if next+1 >= len(s.data) || s.data[next] != '\\' || s.data[next+1] != 'u' {
			return 0, s.fail(LoneSurrogate, inKey)
		}
		lo, ok := hex4(s.data, next+2)
		if !ok {
			s.pos = next
			return 0, s.fail(Syntax, inKey)
		}
		if lo < 0xDC00 || lo > 0xDFFF {
			return 0, s.fail(LoneSurrogate, inKey)
		}
		s.pos = next + 6
		return 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00), nil
	}
	s.pos += 6
	return r, nil
}

// hex4 reads four hexadecimal digits at data[i:].
func hex4(data []byte, i int) (rune, bool) {
	if i+4 > len(data) {
		return 0, false
	}
	var r rune
	for _, c := range data[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
