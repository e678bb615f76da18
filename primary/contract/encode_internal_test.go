package contract

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/riffdb/riffdb/internal/testsupport/testutil"
)

// encodeReference is the canonical encoding as it was first written, every
// string through encoding/json's Encoder: encode must write its bytes.
func (p *Plan) encodeReference(values []value) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	buf.WriteByte('{')
	first := true
	for i, f := range p.Fields {
		v := values[i]
		if !v.present {
			continue
		}
		if !first {
			buf.WriteByte(',')
		}
		first = false
		buf.WriteString(`"` + f.Name + `":`)
		switch f.Type {
		case TypeString:
			_ = enc.Encode(v.str)
			buf.Truncate(buf.Len() - 1)
		case TypeBytes:
			buf.WriteString(`"` + base64.StdEncoding.EncodeToString([]byte(v.str)) + `"`)
		case TypeInt:
			buf.WriteString(strconv.FormatInt(v.num, 10))
		case TypeBool:
			buf.WriteString(strconv.FormatBool(v.boolean))
		}
	}
	buf.WriteByte('}')
	return buf.Bytes()
}

// encodeStrings are strings whose canonical form needs care: HTML
// characters (not escaped), controls, the quote and backslash, DEL,
// invalid UTF-8, U+2028 and U+2029 (escaped by encoding/json), U+FFFD,
// and characters beyond the BMP.
var encodeStrings = []string{
	"", "x", "plain text 123", `<a href="x">&amp;</a>`, "tab\there", "nl\n", "\x00\x01\x1f", "\x7f",
	`q"uote`, `back\slash`, "\xff", "a\xfe\xffb", "\xed\xa0\x80", "line\u2028sep\u2029", "\ufffd", "héllo ✓",
	"\U0001F600", "/slash/", "~!@#$%^*()_+{}|:?",
}

// checkEncode fails when encode's bytes differ from encodeReference's.
func checkEncode(t *testing.T, p *Plan, values []value) {
	t.Helper()
	got, err := p.encode(values)
	if err != nil {
		t.Fatal(err)
	}
	if want := p.encodeReference(values); !bytes.Equal(got, want) {
		t.Fatalf("encode(%+v) = %q, encoding/json wrote %q", values, got, want)
	}
}

// TestEncodeIsEncodingJSON: the canonical bytes are encoding/json's, for
// every value the fast path's seeds parse to and every string of
// encodeStrings in each string and bytes field, present or absent.
func TestEncodeIsEncodingJSON(t *testing.T) {
	p := fastPlan(t)
	for _, s := range fastSeeds {
		if values, err := p.parseReference([]byte(s)); err == nil {
			checkEncode(t, p, values)
		}
	}
	for _, s := range encodeStrings {
		values := valuesOf(p, s, func(i int, f Field) value {
			if f.Type == TypeInt {
				return value{present: i%2 == 0, num: -9223372036854775808}
			}
			return value{present: true, boolean: i%2 == 0}
		})
		checkEncode(t, p, values)
		values[0].present = false
		checkEncode(t, p, values)
	}
}

func FuzzEncodeIsEncodingJSON(f *testing.F) {
	for _, s := range encodeStrings {
		f.Add(s, int64(len(s)), len(s)%2 == 0)
	}
	p := fastPlan(f)
	f.Fuzz(func(t *testing.T, s string, n int64, b bool) {
		checkEncode(t, p, valuesOf(p, s, func(_ int, fl Field) value {
			if fl.Type == TypeInt {
				return value{present: true, num: n}
			}
			return value{present: b, boolean: b}
		}))
	})
}

// valuesOf returns a value for each of p's fields: s in every string and
// bytes field, other's value in every int and bool field.
func valuesOf(p *Plan, s string, other func(i int, f Field) value) []value {
	values := make([]value, len(p.Fields))
	for i, f := range p.Fields {
		if f.Type == TypeString || f.Type == TypeBytes {
			values[i] = value{present: true, str: s}
		} else {
			values[i] = other(i, f)
		}
	}
	return values
}

// TestCanonicalAllocations holds the canonical form of an ordinary input
// (no escapes) to the allocations it needs: the values, the three decoded
// strings, and the output. Writing it through bytes.Buffer and
// encoding/json's Encoder, base64's EncodeToString and strconv's Format
// functions made eleven.
func TestCanonicalAllocations(t *testing.T) {
	testutil.SkipUnderRace(t)
	p := fastPlan(t)
	in := []byte(`{"s":"order-12345","i":1250,"b":true,"raw":"AAECAwQFBgc=","os":"a note with some words in it"}`)
	if allocs := testing.AllocsPerRun(100, func() { _, _ = p.Canonical(in) }); allocs > 5 {
		t.Fatalf("Canonical allocates %.0f times for an ordinary input, want at most 5", allocs)
	}
}
