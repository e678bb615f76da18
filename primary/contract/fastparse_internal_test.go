package contract

import (
	"reflect"
	"testing"

	"github.com/riffdb/riffdb/internal/hygiene/strictjson"
)

const fastKinds = `
[commands.all]
input = { s = "string", i = "int", b = "bool", raw = "bytes", os = "string?", oi = "int?", ob = "bool?", oraw = "bytes?" }
emits = ["all.done"]
`

// fastSeeds are inputs the fast path accepts, inputs it must hand to the
// decoder, and malformed ones.
var fastSeeds = []string{
	`{"s":"x","i":1,"b":true,"raw":"AAE="}`,
	` { "s" : "héllo ✓" , "i" : -9223372036854775808 , "b" : false , "raw" : "" , "os" : null , "oi" : 9223372036854775807 } `,
	"{\t\"raw\":\"/w==\",\n\"b\":true,\r\"i\":0,\"s\":\"\"}",
	`{"s":"x","i":-0,"b":true,"raw":""}`,
	`{"s":"x","i":9223372036854775808,"b":true,"raw":""}`,
	`{"s":"x","i":-9223372036854775809,"b":true,"raw":""}`,
	`{"s":"x","i":12345678901234567890123,"b":true,"raw":""}`,
	`{"s":"x","i":01,"b":true,"raw":""}`,
	`{"s":"x","i":1.0,"b":true,"raw":""}`,
	`{"s":"x","i":1e3,"b":true,"raw":""}`,
	`{"s":"x","i":-,"b":true,"raw":""}`,
	`{"s":"x","i":1x,"b":true,"raw":""}`,
	`{"s":"\u0041","i":1,"b":true,"raw":""}`,
	`{"\u0073":"x","i":1,"b":true,"raw":""}`,
	"{\"s\":\"\xff\",\"i\":1,\"b\":true,\"raw\":\"\"}",
	"{\"s\":\"a\x01\",\"i\":1,\"b\":true,\"raw\":\"\"}",
	`{"s":"x","i":1,"b":true,"raw":"AAE"}`,
	`{"s":"x","i":1,"b":true,"raw":"AAF="}`,
	`{"s":"x","i":1,"b":true,"raw":"A A="}`,
	`{"s":"x","i":1,"b":truex,"raw":""}`,
	`{"s":"x","i":1,"b":nul,"raw":""}`,
	`{"s":"x","i":1,"b":null,"raw":""}`,
	`{"s":"x","i":1,"b":true,"raw":"","ob":null}`,
	`{"s":"x","i":1,"b":true,"raw":"","ob":nullx}`,
	`{"s":"x","i":1,"b":true,"raw":"","s":"y"}`,
	`{"s":"x","i":1,"b":true,"raw":"","zz":1}`,
	`{"s":"x","i":1,"b":true}`,
	`{"s":"x","i":1,"b":true,"raw":"",}`,
	`{"s":"x","i":1,"b":true,"raw":""}}`,
	`{"s":"x","i":1,"b":true,"raw":""} {}`,
	`{"s":"x","i":1,"b":true,"raw":"" `,
	`{"s":"x" "i":1,"b":true,"raw":""}`,
	`{"s":1,"i":"1","b":true,"raw":""}`,
	`{"s":{},"i":[],"b":true,"raw":""}`,
	`{"s":"x","i":1,"b":true,"raw":"","os":"\"q\""}`,
	`{}`, `{ }`, `[]`, ``, `null`, `{`, `"s"`, ` `,
	`{"s":"\ud800","i":1,"b":true,"raw":""}`,
	`{"s":"\udfff","i":1,"b":true,"raw":""}`,
	`{"s":"\ufffd","i":1,"b":true,"raw":""}`,
	"{\"s\":\"\xef\xbf\xbd\",\"i\":1,\"b\":true,\"raw\":\"\"}",
	`{"s":"\ud83d\ude00","i":1,"b":true,"raw":""}`,
	`{"s":"\ude00\ud83d","i":1,"b":true,"raw":""}`,
	`{"s":"\ud83dx","i":1,"b":true,"raw":""}`,
	"{\"s\":\"\xed\xa0\x80\",\"i\":1,\"b\":true,\"raw\":\"\"}",
	"{\"s\":\"\xfe\",\"i\":1,\"b\":true,\"raw\":\"\"}",
	"{\"s\xff\":\"\",\"i\":1,\"b\":true,\"raw\":\"\"}",
	`{"s":{"a":1,"a":2},"i":1,"b":true,"raw":""}`,
}

func fastPlan(t testing.TB) *Plan {
	c, err := Compile([]byte(fastKinds))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := c.Command("all")
	return p
}

// checkAgreement fails when the fast path accepts an input with values
// other than the decoder's, or accepts one the decoder refuses.
func checkAgreement(t *testing.T, p *Plan, in []byte) {
	t.Helper()
	fast, ok := p.parseFast(in)
	ref, err := p.parseReference(in)
	if !ok {
		return // the reference parser decides
	}
	if verr := strictjson.Validate(in); verr != nil {
		t.Fatalf("fast path accepted %q, which strictjson refuses: %v", in, verr)
	}
	if err != nil {
		t.Fatalf("fast path accepted %q, the reference parser refuses it: %v", in, err)
	}
	if !reflect.DeepEqual(fast, ref) {
		t.Fatalf("input %q: fast path %+v, reference parser %+v", in, fast, ref)
	}
}

// TestParseFastAgreesWithDecoder: wherever the fast path accepts an input it
// returns the decoder's values, and it accepts the ordinary inputs.
func TestParseFastAgreesWithDecoder(t *testing.T) {
	p := fastPlan(t)
	for _, s := range fastSeeds {
		checkAgreement(t, p, []byte(s))
	}
	// The first four seeds and the two with null optional values are the
	// common shapes; the fast path must take them (or it saves nothing).
	for _, s := range append(fastSeeds[:4:4], fastSeeds[22], fastSeeds[1]) {
		if _, ok := p.parseFast([]byte(s)); !ok {
			t.Fatalf("fast path declined an ordinary input %q", s)
		}
	}
}

func FuzzParseFastAgreesWithDecoder(f *testing.F) {
	for _, s := range fastSeeds {
		f.Add([]byte(s))
	}
	p := fastPlan(f)
	f.Fuzz(func(t *testing.T, in []byte) { checkAgreement(t, p, in) })
}
