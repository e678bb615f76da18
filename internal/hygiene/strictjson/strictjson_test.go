package strictjson_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/riffdb/riffdb/internal/hygiene/strictjson"
)

// refused are documents encoding/json accepts (or would read differently)
// that the strict rules refuse, with where and why.
var refused = []struct {
	name, in string
	path     []string
	inKey    bool
	problem  strictjson.Problem
}{
	{"invalid utf8 value", "{\"k\":\"\xff\"}", []string{"k"}, false, strictjson.InvalidUTF8},
	{"invalid utf8 after escape", "{\"k\":\"\\n\xfe\"}", []string{"k"}, false, strictjson.InvalidUTF8},
	{"encoded surrogate bytes", "{\"k\":\"\xed\xa0\x80\"}", []string{"k"}, false, strictjson.InvalidUTF8},
	{"truncated sequence", "{\"k\":\"\xc3\"}", []string{"k"}, false, strictjson.InvalidUTF8},
	{"invalid utf8 key", "{\"\xff\":1}", nil, true, strictjson.InvalidUTF8},
	{"invalid utf8 nested key", "{\"a\":{\"b\":[{\"\xfe\":1}]}}", []string{"a", "b"}, true, strictjson.InvalidUTF8},
	{"invalid utf8 top-level string", "\"\xff\"", nil, false, strictjson.InvalidUTF8},
	{"lone high", `{"k":"\ud800"}`, []string{"k"}, false, strictjson.LoneSurrogate},
	{"lone low", `{"k":"\udfff"}`, []string{"k"}, false, strictjson.LoneSurrogate},
	{"high then text", `{"k":"\ud83dx"}`, []string{"k"}, false, strictjson.LoneSurrogate},
	{"high then non-surrogate escape", `{"k":"\ud83d\u0041"}`, []string{"k"}, false, strictjson.LoneSurrogate},
	{"high then high", `{"k":"\ud83d\ud83d"}`, []string{"k"}, false, strictjson.LoneSurrogate},
	{"wrong order", `{"k":"\ude00\ud83d"}`, []string{"k"}, false, strictjson.LoneSurrogate},
	{"high at end", `{"k":"a\ud83d"}`, []string{"k"}, false, strictjson.LoneSurrogate},
	{"lone surrogate in key", `{"\udc00":1}`, nil, true, strictjson.LoneSurrogate},
	{"lone surrogate in array", `[1,"\ud800"]`, nil, false, strictjson.LoneSurrogate},
	{"duplicate key", `{"input":1,"input":2}`, []string{"input"}, false, strictjson.DuplicateKey},
	{"duplicate key via escape", `{"s":1,"\u0073":2}`, []string{"s"}, false, strictjson.DuplicateKey},
	{"duplicate nested key", `{"a":[{"x":1,"y":2,"x":3}]}`, []string{"a", "x"}, false, strictjson.DuplicateKey},
	{"duplicate key in a large object", `{` + manyKeys(40) + `,"k7":0}`, []string{"k7"}, false, strictjson.DuplicateKey},
	{"too deep", strings.Repeat("[", strictjson.MaxDepth+1) + strings.Repeat("]", strictjson.MaxDepth+1), nil, false, strictjson.TooDeep},
}

// manyKeys returns n members "k0":0, "k1":0, … without the braces.
func manyKeys(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = `"k` + strconv.Itoa(i) + `":0`
	}
	return strings.Join(parts, ",")
}

func TestValidateRefuses(t *testing.T) {
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			err := strictjson.Validate([]byte(tc.in))
			var e *strictjson.Error
			if !errors.As(err, &e) {
				t.Fatalf("Validate = %v, want an *Error", err)
			}
			if e.Problem != tc.problem || e.InKey != tc.inKey || !slices.Equal(e.Path, tc.path) {
				t.Fatalf("got problem %v inKey %v path %q, want %v %v %q", e.Problem, e.InKey, e.Path, tc.problem, tc.inKey, tc.path)
			}
			if msg := e.Error(); strings.Contains(msg, `"`) || !utf8.ValidString(msg) || strings.Contains(msg, "input") {
				t.Fatalf("Error() %q quotes the document", e.Error())
			}
		})
	}
}

func TestValidateAccepts(t *testing.T) {
	for _, in := range []string{
		`{"input":{"s":"x","n":-1.5e+3,"b":[true,false,null]},"idempotency_key":"k"}`,
		`"\ud83d\ude00"`, `"\uD83D\uDE00"`, `"\ufffd"`, "\"\xef\xbf\xbd\"", `"\u0000"`,
		` [ ] `, `{}`, `0`, `-0`, `1E9`, `"日本 😀"`,
		`{"a":{"x":1},"b":{"x":1}}`, // equal keys in different objects
		`{` + manyKeys(40) + `}`,
		strings.Repeat("[", strictjson.MaxDepth) + strings.Repeat("]", strictjson.MaxDepth),
	} {
		if err := strictjson.Validate([]byte(in)); err != nil {
			t.Errorf("Validate(%.60q) = %v", in, err)
		}
	}
}

func TestValidateSyntax(t *testing.T) {
	for _, tc := range []struct {
		in      string
		problem strictjson.Problem
	}{
		{``, strictjson.Syntax}, {` `, strictjson.Syntax}, {`{`, strictjson.Syntax},
		{`{"a":1,}`, strictjson.Syntax}, {`[1,]`, strictjson.Syntax}, {`{"a" 1}`, strictjson.Syntax},
		{`01`, strictjson.TrailingData}, {`1.`, strictjson.Syntax}, {`1e`, strictjson.Syntax}, {`-`, strictjson.Syntax},
		{`tru`, strictjson.Syntax}, {`nul`, strictjson.Syntax}, {`"a`, strictjson.Syntax},
		{"\"a\x01\"", strictjson.Syntax}, {`"\x"`, strictjson.Syntax}, {`"\u12"`, strictjson.Syntax},
		{`"\ud83d\u12"`, strictjson.Syntax}, {`{} {}`, strictjson.TrailingData}, {`{}x`, strictjson.TrailingData},
		{`{'a':1}`, strictjson.Syntax}, {"\xef\xbb\xbf{}", strictjson.Syntax},
	} {
		err := strictjson.Validate([]byte(tc.in))
		var e *strictjson.Error
		if !errors.As(err, &e) || e.Problem != tc.problem {
			t.Errorf("Validate(%q) = %v, want %v", tc.in, err, tc.problem)
		}
	}
}

func TestMembers(t *testing.T) {
	var keys, values []string
	err := strictjson.Members([]byte(` {"a" : {"x":[1, "y"]} ,"\u0062":"\ud83d\ude00", "c":null } `), func(k string, v []byte) error {
		keys, values = append(keys, k), append(values, string(v))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "b", "c"}; !slices.Equal(keys, want) {
		t.Fatalf("keys %q, want %q", keys, want)
	}
	if want := []string{`{"x":[1, "y"]}`, `"\ud83d\ude00"`, `null`}; !slices.Equal(values, want) {
		t.Fatalf("values %q, want %q", values, want)
	}
	stop := errors.New("stop")
	if err := strictjson.Members([]byte(`{"a":1,"b":2}`), func(string, []byte) error { return stop }); err != stop {
		t.Fatalf("fn's error: got %v", err)
	}
	for _, in := range []string{`[]`, `"{}"`, `null`, `1`, ``, " \n"} {
		var e *strictjson.Error
		if err := strictjson.Members([]byte(in), func(string, []byte) error { return nil }); !errors.As(err, &e) || e.Problem != strictjson.NotObject {
			t.Errorf("Members(%s) = %v, want NotObject", in, err)
		}
	}
}

func TestErrorIn(t *testing.T) {
	inside := &strictjson.Error{Path: []string{"input", "s"}, Problem: strictjson.InvalidUTF8}
	if rel, ok := inside.In("input"); !ok || !slices.Equal(rel.Path, []string{"s"}) || rel.Problem != strictjson.InvalidUTF8 {
		t.Fatalf("In = %+v, %v", rel, ok)
	}
	keyInside := &strictjson.Error{Path: []string{"input"}, InKey: true, Problem: strictjson.InvalidUTF8}
	if rel, ok := keyInside.In("input"); !ok || len(rel.Path) != 0 || !rel.InKey {
		t.Fatalf("In = %+v, %v", rel, ok)
	}
	for _, e := range []*strictjson.Error{
		{Path: []string{"input"}, Problem: strictjson.DuplicateKey},
		{Path: []string{"idempotency_key"}, Problem: strictjson.InvalidUTF8},
		{InKey: true, Problem: strictjson.InvalidUTF8},
	} {
		if _, ok := e.In("input"); ok {
			t.Errorf("%+v is reported inside input", e)
		}
	}
}

var unquoteSeeds = []string{
	`"abc"`, `"\ud83d\ude00"`, `"\ud800"`, `"\udfff"`, `"\ufffd"`, "\"\xff\"", "\"\xfe\"",
	`"\u0041\/\b\f\n\r\t\"\\"`, `"\ude00\ud83d"`, `"\ud83d\u0041"`, `"日本"`, `"\u00e9"`, `"a`, `"\u12`,
}

// FuzzUnquoteMatchesEncodingJSON: a string the strict rules accept decodes
// to exactly what encoding/json decodes; one encoding/json accepts and the
// strict rules refuse is refused only for invalid UTF-8 or a lone surrogate,
// which encoding/json turns into U+FFFD.
func FuzzUnquoteMatchesEncodingJSON(f *testing.F) {
	for _, s := range unquoteSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := strictjson.Unquote(in)
		var want string
		jerr := json.Unmarshal(in, &want)
		if len(in) < 2 || in[0] != '"' || in[len(in)-1] != '"' {
			// Unmarshal also takes other values and surrounding whitespace.
			jerr = errors.New("not exactly one string token")
		}
		switch {
		case err == nil && jerr != nil:
			t.Fatalf("Unquote accepts %q, encoding/json refuses it: %v", in, jerr)
		case err == nil && got != want:
			t.Fatalf("Unquote(%q) = %q, encoding/json %q", in, got, want)
		case err == nil && !utf8.ValidString(got):
			t.Fatalf("Unquote(%q) is not valid UTF-8", in)
		case err != nil && jerr == nil:
			var e *strictjson.Error
			if !errors.As(err, &e) || (e.Problem != strictjson.InvalidUTF8 && e.Problem != strictjson.LoneSurrogate) {
				t.Fatalf("Unquote refuses %q, which encoding/json accepts: %v", in, err)
			}
			if !strings.ContainsRune(want, utf8.RuneError) {
				t.Fatalf("encoding/json read %q as %q without U+FFFD", in, want)
			}
		}
	})
}

// FuzzValidateMatchesEncodingJSON: every document Validate accepts is
// valid for encoding/json; one that encoding/json accepts and Validate
// refuses is refused only for a rule encoding/json does not have.
func FuzzValidateMatchesEncodingJSON(f *testing.F) {
	for _, tc := range refused {
		f.Add([]byte(tc.in))
	}
	for _, s := range unquoteSeeds {
		f.Add([]byte(`{"k":` + s + `}`))
	}
	f.Add([]byte(`{"input":{"s":"x","i":1},"idempotency_key":"k"}`))
	f.Add([]byte(`[1, 2.5e-3, true, null, {"a":[]}]`))
	f.Fuzz(func(t *testing.T, in []byte) {
		err := strictjson.Validate(in)
		valid := json.Valid(in)
		if err == nil && !valid {
			t.Fatalf("Validate accepts %q, encoding/json refuses it", in)
		}
		if err != nil && valid {
			var e *strictjson.Error
			if !errors.As(err, &e) {
				t.Fatalf("Validate error is not an *Error: %v", err)
			}
			switch e.Problem {
			case strictjson.InvalidUTF8, strictjson.LoneSurrogate, strictjson.DuplicateKey, strictjson.TooDeep:
			default:
				t.Fatalf("Validate refuses %q, which encoding/json accepts: %v", in, err)
			}
		}
		if err == nil {
			// Members agrees with Validate on objects.
			merr := strictjson.Members(in, func(string, []byte) error { return nil })
			var e *strictjson.Error
			if merr != nil && (!errors.As(merr, &e) || e.Problem != strictjson.NotObject) {
				t.Fatalf("Members refuses %q, which Validate accepts: %v", in, merr)
			}
		}
	})
}

// TestMembersAllocations holds the check of a command's request body to
// two allocations: the string of each top-level key, which the callback
// takes. The keys seen so far in an object are kept on the stack (a slice
// grown on the heap cost five more for this body: 12), compared as the
// bytes they decode to (a string of each key, nested ones included, cost
// three more), and the path of keys down to a problem is made only for an
// error (two more).
func TestMembersAllocations(t *testing.T) {
	body := []byte(`{"input":{"order_id":"o-1","amount_cents":1250,"note":"n"},"idempotency_key":"k-1"}`)
	allocs := testing.AllocsPerRun(200, func() {
		if err := strictjson.Members(body, func(string, []byte) error { return nil }); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 2 {
		t.Fatalf("Members allocates %.0f times, want at most 2", allocs)
	}
}

// TestMemberBytesAllocations: with the keys given as bytes, checking a
// command's request body allocates nothing.
func TestMemberBytesAllocations(t *testing.T) {
	body := []byte(`{"input":{"order_id":"o-1","amount_cents":1250,"note":"n"},"idempotency_key":"k-1"}`)
	var keys []string
	if err := strictjson.MemberBytes(body, func(k, _ []byte) error { keys = append(keys, string(k)); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(keys, []string{"input", "idempotency_key"}) {
		t.Fatalf("keys %q", keys)
	}
	allocs := testing.AllocsPerRun(200, func() {
		if err := strictjson.MemberBytes(body, func(_, _ []byte) error { return nil }); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Fatalf("MemberBytes allocates %.0f times, want 0", allocs)
	}
}
