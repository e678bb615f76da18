package contract

import (
	"encoding/base64"
	"unicode/utf8"
)

// parseFast is the allocation-light path of parse for the common case: a
// well-formed object whose keys are plain ASCII field names and whose
// values are unescaped strings, plain integers, booleans or null, each
// matching its field. It reports ok=false for anything else (an escape, a
// number with a fraction, an unknown or repeated field, any error), and
// parse then runs the reference parser, which alone produces every error.
// When ok, the values are exactly those the reference parser would return
// and the input obeys strictjson's rules (TestParseFastAgreesWithDecoder,
// FuzzParseFastAgreesWithDecoder and FuzzEvents check this).
func (p *Plan) parseFast(in []byte) (values []value, ok bool) {
	i := skipSpace(in, 0)
	if i >= len(in) || in[i] != '{' {
		return nil, false
	}
	values = make([]value, len(p.Fields))
	var seen uint64 // Compile admits at most MaxFields (64) fields
	i = skipSpace(in, i+1)
	if i < len(in) && in[i] == '}' {
		i++
	} else {
		for {
			// key
			if i >= len(in) || in[i] != '"' {
				return nil, false
			}
			start := i + 1
			end := start
			for end < len(in) && in[end] != '"' {
				if c := in[end]; c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
					return nil, false
				}
				end++
			}
			if end >= len(in) {
				return nil, false
			}
			f := p.fieldIndexBytes(in[start:end])
			if f < 0 || seen&(1<<f) != 0 {
				return nil, false
			}
			seen |= 1 << f
			i = skipSpace(in, end+1)
			if i >= len(in) || in[i] != ':' {
				return nil, false
			}
			i = skipSpace(in, i+1)
			var v value
			if i, v, ok = scanValue(p.Fields[f], in, i); !ok {
				return nil, false
			}
			values[f] = v
			i = skipSpace(in, i)
			if i >= len(in) {
				return nil, false
			}
			if in[i] == '}' {
				i++
				break
			}
			if in[i] != ',' {
				return nil, false
			}
			i = skipSpace(in, i+1)
		}
	}
	if skipSpace(in, i) != len(in) {
		return nil, false
	}
	for k, f := range p.Fields {
		if !f.Optional && !values[k].present {
			return nil, false
		}
	}
	return values, true
}

// scanValue reads the value of field f at in[i:] and returns the index just
// after it.
func scanValue(f Field, in []byte, i int) (int, value, bool) {
	if i >= len(in) {
		return 0, value{}, false
	}
	if in[i] == 'n' {
		if !f.Optional || !hasLiteral(in, i, "null") {
			return 0, value{}, false
		}
		return i + 4, value{}, true
	}
	switch f.Type {
	case TypeString, TypeBytes:
		if in[i] != '"' {
			return 0, value{}, false
		}
		start := i + 1
		end := start
		ascii := true
		for end < len(in) && in[end] != '"' {
			c := in[end]
			if c == '\\' || c < 0x20 {
				return 0, value{}, false
			}
			if c >= utf8.RuneSelf {
				ascii = false
			}
			end++
		}
		if end >= len(in) {
			return 0, value{}, false
		}
		raw := in[start:end]
		if !ascii && !utf8.Valid(raw) {
			return 0, value{}, false
		}
		if f.Type == TypeString {
			return end + 1, value{present: true, str: string(raw)}, true
		}
		b := make([]byte, base64.StdEncoding.DecodedLen(len(raw)))
		n, err := base64.StdEncoding.Strict().Decode(b, raw)
		if err != nil {
			return 0, value{}, false
		}
		return end + 1, value{present: true, str: string(b[:n])}, true
	case TypeInt:
		j := i
		neg := false
		if in[j] == '-' {
			neg = true
			j++
		}
		if j >= len(in) || in[j] < '0' || in[j] > '9' {
			return 0, value{}, false
		}
		if in[j] == '0' && j+1 < len(in) && in[j+1] >= '0' && in[j+1] <= '9' {
			return 0, value{}, false // a leading zero is not JSON
		}
		// Accumulate as a negative number so that the minimum int64 fits.
		var n int64
		const minInt64 = -1 << 63
		for ; j < len(in) && in[j] >= '0' && in[j] <= '9'; j++ {
			d := int64(in[j] - '0')
			if n < (minInt64+d)/10 {
				return 0, value{}, false // out of range: the reference parser reports it
			}
			n = n*10 - d
		}
		if j < len(in) && (in[j] == '.' || in[j] == 'e' || in[j] == 'E') {
			return 0, value{}, false
		}
		if !neg {
			if n == minInt64 {
				return 0, value{}, false
			}
			n = -n
		}
		return j, value{present: true, num: n}, true
	case TypeBool:
		if hasLiteral(in, i, "true") {
			return i + 4, value{present: true, boolean: true}, true
		}
		if hasLiteral(in, i, "false") {
			return i + 5, value{present: true}, true
		}
	}
	return 0, value{}, false
}

// hasLiteral reports whether lit starts at in[i] and is not followed by a
// character that would continue a token.
func hasLiteral(in []byte, i int, lit string) bool {
	if len(in)-i < len(lit) || string(in[i:i+len(lit)]) != lit {
		return false
	}
	j := i + len(lit)
	return j == len(in) || isSpace(in[j]) || in[j] == ',' || in[j] == '}'
}

func skipSpace(in []byte, i int) int {
	for i < len(in) && isSpace(in[i]) {
		i++
	}
	return i
}

// isSpace is JSON's whitespace.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// fieldIndexBytes is fieldIndex for a key held in bytes, without allocating.
func (p *Plan) fieldIndexBytes(name []byte) int {
	lo, hi := 0, len(p.Fields)
	for lo < hi {
		m := (lo + hi) / 2
		switch f := p.Fields[m].Name; {
		case f == string(name):
			return m
		case f < string(name):
			lo = m + 1
		default:
			hi = m
		}
	}
	return -1
}
