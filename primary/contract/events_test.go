package contract_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/primary/contract"
)

const kinds = `
[commands.all]
input = { s = "string", i = "int", b = "bool", raw = "bytes", os = "string?", oi = "int?", ob = "bool?", oraw = "bytes?" }
emits = ["all.done", "all.audit"]
`

func plan(t testing.TB, src, name string) *contract.Plan {
	t.Helper()
	p, ok := mustCompile(t, src).Command(name)
	if !ok {
		t.Fatalf("no command %q", name)
	}
	return p
}

func TestEventsDrafts(t *testing.T) {
	p := plan(t, kinds, "all")
	drafts, err := p.Events(json.RawMessage(`{"s":"x","i":1,"b":true,"raw":"AAE="}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(drafts) != 2 || drafts[0].Type != "all.done" || drafts[1].Type != "all.audit" {
		t.Fatalf("drafts = %+v", drafts)
	}
	want := `{"b":true,"i":1,"raw":"AAE=","s":"x"}`
	for _, d := range drafts {
		if string(d.Payload) != want {
			t.Fatalf("payload = %s, want %s", d.Payload, want)
		}
	}
	// Drafts do not share their payload memory.
	drafts[0].Payload[0] = 'X'
	if drafts[1].Payload[0] != '{' {
		t.Fatal("draft payloads alias each other")
	}
}

func TestCanonicalization(t *testing.T) {
	p := plan(t, kinds, "all")
	cases := []struct{ name, in, want string }{
		{"key order and whitespace",
			" {\n\t\"s\" : \"x\" ,\r\n \"raw\":\"\", \"b\" : false, \"i\" : -5 }\n ",
			`{"b":false,"i":-5,"raw":"","s":"x"}`},
		{"optionals present",
			`{"os":"o","oi":0,"ob":false,"oraw":"/w==","s":"","i":0,"b":false,"raw":"AA=="}`,
			`{"b":false,"i":0,"ob":false,"oi":0,"oraw":"/w==","os":"o","raw":"AA==","s":""}`},
		{"null optionals are absent",
			`{"os":null,"oi":null,"ob":null,"oraw":null,"s":"","i":0,"b":true,"raw":""}`,
			`{"b":true,"i":0,"raw":"","s":""}`},
		{"string escapes are normalized",
			`{"s":"\u0041\/\u00e9\t<&>\"\\\u2028","i":1,"b":true,"raw":""}`,
			"{\"b\":true,\"i\":1,\"raw\":\"\",\"s\":\"A/é\\t<&>\\\"\\\\\\u2028\"}"},
		{"unicode stays literal",
			`{"s":"日本 😀","i":1,"b":true,"raw":""}`,
			`{"b":true,"i":1,"raw":"","s":"日本 😀"}`},
		{"surrogate pair escape is decoded",
			`{"s":"\ud83d\ude00\uD83D\uDE00","i":1,"b":true,"raw":""}`,
			`{"b":true,"i":1,"raw":"","s":"😀😀"}`},
		{"replacement character escape stays itself",
			`{"s":"\ufffd","i":1,"b":true,"raw":""}`,
			"{\"b\":true,\"i\":1,\"raw\":\"\",\"s\":\"\uFFFD\"}"},
		{"int64 extremes",
			`{"s":"","i":-9223372036854775808,"oi":9223372036854775807,"b":true,"raw":""}`,
			`{"b":true,"i":-9223372036854775808,"oi":9223372036854775807,"raw":"","s":""}`},
		{"negative zero", `{"s":"","i":-0,"b":true,"raw":""}`, `{"b":true,"i":0,"raw":"","s":""}`},
		{"base64 with line breaks is normalized",
			`{"s":"","i":1,"b":true,"raw":"AAEC\r\nAw=="}`,
			`{"b":true,"i":1,"raw":"AAECAw==","s":""}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := p.Canonical(json.RawMessage(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("canonical =\n%s\nwant\n%s", got, tc.want)
			}
			again, err := p.Canonical(got)
			if err != nil || !bytes.Equal(again, got) {
				t.Fatalf("canonical form is not a fixed point: %s, %v", again, err)
			}
			if !json.Valid(got) {
				t.Fatal("canonical form is not valid JSON")
			}
		})
	}
}

func TestEventsInputErrors(t *testing.T) {
	p := plan(t, kinds, "all")
	const secret = "hunter2-secret"
	cases := []struct{ name, in, mention string }{
		{"empty", ``, "JSON object"},
		{"array", `["s"]`, "JSON object"},
		{"null", `null`, "JSON object"},
		{"string", `"` + secret + `"`, "JSON object"},
		{"broken json", `{"s":"` + secret + `",`, "not valid JSON"},
		{"broken value", `{"s":tru}`, "not valid JSON"},
		{"trailing data", `{"s":"` + secret + `","i":1,"b":true,"raw":""} {}`, "after the JSON object"},
		{"trailing garbage", `{"s":"` + secret + `","i":1,"b":true,"raw":""}x`, "after the JSON object"},
		{"unknown field", `{"s":"` + secret + `","i":1,"b":true,"raw":"","extra":1}`, `unknown field "extra"`},
		{"unknown field long name", `{"` + strings.Repeat("k", 500) + `":1}`, `unknown field "kkkk`},
		{"missing required", `{"i":1,"b":true,"raw":""}`, `required input field "s" is missing`},
		{"null required", `{"s":null,"i":1,"b":true,"raw":""}`, `required input field "s" is null`},
		{"duplicate key", `{"s":"` + secret + `","s":"` + secret + `","i":1,"b":true,"raw":""}`, `field "s" appears more than once`},
		{"duplicate key via escape", `{"s":"a","\u0073":"b","i":1,"b":true,"raw":""}`, `field "s" appears more than once`},
		{"duplicate optional null", `{"os":null,"os":"` + secret + `","s":"","i":1,"b":true,"raw":""}`, `field "os" appears more than once`},
		{"string as number", `{"s":7,"i":1,"b":true,"raw":""}`, `field "s" must be a string`},
		{"string as object", `{"s":{"x":"` + secret + `"},"i":1,"b":true,"raw":""}`, `field "s" must be a string`},
		{"int as string", `{"s":"","i":"` + secret + `","b":true,"raw":""}`, `field "i" must be an integer`},
		{"int as bool", `{"s":"","i":true,"b":true,"raw":""}`, `field "i" must be an integer`},
		{"int fraction", `{"s":"","i":1.5,"b":true,"raw":""}`, `field "i" must be an integer (no fraction`},
		{"int trailing zero fraction", `{"s":"","i":1.0,"b":true,"raw":""}`, `field "i" must be an integer (no fraction`},
		{"int exponent", `{"s":"","i":1e3,"b":true,"raw":""}`, `field "i" must be an integer (no fraction`},
		{"int too big", `{"s":"","i":9223372036854775808,"b":true,"raw":""}`, `field "i" is out of the 64-bit integer range`},
		{"int too small", `{"s":"","i":-9223372036854775809,"b":true,"raw":""}`, `field "i" is out of the 64-bit integer range`},
		{"optional int huge", `{"s":"","i":1,"oi":123456789012345678901234567890,"b":true,"raw":""}`, `field "oi" is out of`},
		{"bool as string", `{"s":"","i":1,"b":"true","raw":""}`, `field "b" must be a boolean`},
		{"bool as number", `{"s":"","i":1,"b":1,"raw":""}`, `field "b" must be a boolean`},
		{"bytes as number", `{"s":"","i":1,"b":true,"raw":1}`, `field "raw" must be a base64 string`},
		{"bytes invalid base64", `{"s":"","i":1,"b":true,"raw":"` + secret + `"}`, `field "raw" must be standard base64`},
		{"bytes url alphabet", `{"s":"","i":1,"b":true,"raw":"-_8="}`, `field "raw" must be standard base64`},
		{"bytes unpadded", `{"s":"","i":1,"b":true,"raw":"AAE"}`, `field "raw" must be standard base64`},
		{"bytes nonzero padding bits", `{"s":"","i":1,"b":true,"raw":"AAF="}`, `field "raw" must be standard base64`},
		{"invalid utf8 string", "{\"s\":\"" + secret + "\xff\",\"i\":1,\"b\":true,\"raw\":\"\"}", `field "s" is not valid UTF-8`},
		{"invalid utf8 optional", "{\"os\":\"\xc3\x28\",\"s\":\"\",\"i\":1,\"b\":true,\"raw\":\"\"}", `field "os" is not valid UTF-8`},
		{"invalid utf8 key", "{\"s\xff\":\"\",\"i\":1,\"b\":true,\"raw\":\"\"}", `input has a key that is not valid UTF-8`},
		{"invalid utf8 escaped string", "{\"s\":\"\\n\xfe\",\"i\":1,\"b\":true,\"raw\":\"\"}", `field "s" is not valid UTF-8`},
		{"invalid utf8 base64", "{\"s\":\"\",\"i\":1,\"b\":true,\"raw\":\"AA\xff=\"}", `field "raw" is not valid UTF-8`},
		{"lone high surrogate", `{"s":"\ud800","i":1,"b":true,"raw":""}`, `field "s" holds an unpaired UTF-16 surrogate escape`},
		{"lone low surrogate", `{"s":"\udfff","i":1,"b":true,"raw":""}`, `field "s" holds an unpaired UTF-16 surrogate escape`},
		{"high surrogate then text", `{"s":"` + secret + `\ud83dx","i":1,"b":true,"raw":""}`, `field "s" holds an unpaired UTF-16 surrogate escape`},
		{"surrogates in the wrong order", `{"os":"\ude00\ud83d","s":"","i":1,"b":true,"raw":""}`, `field "os" holds an unpaired UTF-16 surrogate escape`},
		{"lone surrogate in a key", `{"\ud800":"","i":1,"b":true,"raw":""}`, `input has a key that holds an unpaired UTF-16 surrogate escape`},
		{"lone surrogate in an unknown field", `{"zz":"\ud800","s":"","i":1,"b":true,"raw":""}`, `input field "zz" holds an unpaired UTF-16 surrogate escape`},
		{"duplicate key inside a value", `{"s":{"a":1,"a":2},"i":1,"b":true,"raw":""}`, `field "s" holds an object with a repeated key`},
		{"too deep", `{"s":` + strings.Repeat("[", 2000) + strings.Repeat("]", 2000) + `}`, `field "s" nests more than 1000 levels deep`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			drafts, err := p.Events(json.RawMessage(tc.in))
			if !errors.Is(err, contract.ErrInvalidInput) {
				t.Fatalf("err = %v (drafts %v), want ErrInvalidInput", err, drafts)
			}
			if drafts != nil {
				t.Fatal("drafts returned with an error")
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.mention) {
				t.Fatalf("err = %q, want it to mention %q", msg, tc.mention)
			}
			if strings.Contains(msg, secret) || strings.Contains(msg, "hunter") {
				t.Fatalf("err %q echoes the input value", msg)
			}
			if len(msg) > 200 {
				t.Fatalf("err is %d bytes long", len(msg))
			}
			// One sentence for the client, under one prefix for logs.
			var ie *contract.InputError
			if !errors.As(err, &ie) {
				t.Fatalf("err %v is not an *InputError", err)
			}
			detail := ie.Detail()
			if msg != "contract: invalid input: "+detail || strings.Contains(detail, "invalid input") || strings.Contains(detail, "contract") {
				t.Fatalf("err = %q, detail %q: want one prefix over the detail", msg, detail)
			}
			if !strings.HasPrefix(detail, "input ") && !strings.HasPrefix(detail, "required input field ") {
				t.Fatalf("detail %q does not start by naming the input", detail)
			}
		})
	}
}

func TestEventsAllOptional(t *testing.T) {
	p := plan(t, "[commands.ping]\ninput = { note = \"string?\" }\nemits = [\"pinged\"]", "ping")
	for _, in := range []string{`{}`, ` { } `, `{"note":null}`} {
		got, err := p.Canonical(json.RawMessage(in))
		if err != nil || string(got) != `{}` {
			t.Fatalf("Canonical(%s) = %s, %v; want {}", in, got, err)
		}
	}
}

// TestDistinctStringsStayDistinct: strings encoding/json would read as
// U+FFFD are refused, so no two different inputs share a payload.
func TestDistinctStringsStayDistinct(t *testing.T) {
	p := plan(t, kinds, "all")
	in := func(s string) json.RawMessage {
		return json.RawMessage(`{"s":"` + s + `","i":1,"b":true,"raw":""}`)
	}
	for _, s := range []string{`\ud800`, `\udfff`, `\udbff\udbff`, "\xff", "\xfe", "\xed\xa0\x80"} {
		if got, err := p.Canonical(in(s)); !errors.Is(err, contract.ErrInvalidInput) {
			t.Errorf("string %q: Canonical = %s, %v; want it refused", s, got, err)
		}
	}
	// The replacement character itself, escaped or not, is one string.
	a, err := p.Canonical(in(`\ufffd`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Canonical(in("\uFFFD"))
	if err != nil || !bytes.Equal(a, b) {
		t.Fatalf("U+FFFD escaped %s, literal %s, %v", a, b, err)
	}
}
