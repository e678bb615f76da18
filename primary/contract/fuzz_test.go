package contract_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/riffdb/riffdb/internal/hygiene/strictjson"
	"github.com/riffdb/riffdb/primary/contract"
)

func FuzzCompile(f *testing.F) {
	f.Add([]byte(orders))
	f.Add([]byte(kinds))
	f.Add([]byte("[commands.a]\ninput = { x = \"int\" }\nemits = [\"e\", \"e\"]"))
	f.Add([]byte("[commands.a]\ninput.x = \"bytes?\"\nemits = ['e.f']\n[commands.b]\ninput = { y = \"bool\" }\nemits = [\"g\"]"))
	f.Add([]byte("commands = 1"))
	f.Add([]byte("[commands.a]\ninput = { x = \"int\" }\nemits = [\"e\"]\n[commands.a]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := contract.Compile(data)
		if err != nil {
			if !errors.Is(err, contract.ErrInvalidContract) {
				t.Fatalf("error does not wrap ErrInvalidContract: %v", err)
			}
			return
		}
		again, err := contract.Compile(data)
		if err != nil {
			t.Fatalf("second compile failed: %v", err)
		}
		a, b := c.Commands(), again.Commands()
		if len(a) == 0 || len(a) != len(b) {
			t.Fatalf("plans: %d vs %d", len(a), len(b))
		}
		for i := range a {
			if a[i].ID != b[i].ID || a[i].Name != b[i].Name {
				t.Fatalf("unstable plan %d: %+v vs %+v", i, a[i], b[i])
			}
			if len(a[i].Fields) == 0 || len(a[i].Fields) > contract.MaxFields ||
				len(a[i].Emits) == 0 || len(a[i].Emits) > contract.MaxEmits {
				t.Fatalf("plan %q out of limits", a[i].Name)
			}
			if p, ok := c.Command(a[i].Name); !ok || p != a[i] {
				t.Fatalf("Command(%q) does not return the listed plan", a[i].Name)
			}
		}
	})
}

func FuzzEvents(f *testing.F) {
	p := plan(f, kinds, "all")
	seeds := []string{
		`{"s":"x","i":1,"b":true,"raw":"AAE="}`,
		`{"os":"o","oi":0,"ob":false,"oraw":"/w==","s":"","i":0,"b":false,"raw":"AA=="}`,
		`{"s":"\u0041\/\u00e9\t<&>\"\\\u2028","i":-9223372036854775808,"b":true,"raw":""}`,
		`{"s":"\ud800","i":1e3,"b":true,"raw":""}`,
		`{"s":"a","s":"b"}`,
		"{\"s\":\"\xff\",\"i\":1,\"b\":true,\"raw\":\"\"}",
		`{"s":"","i":1,"b":true,"raw":"AAEC\r\nAw=="} `,
		`[]`, ``, `null`,
		`{"s":"\udfff","i":1,"b":true,"raw":""}`,
		`{"s":"\ud83d\ude00","i":1,"b":true,"raw":""}`,
		`{"s":"\ude00\ud83d","i":1,"b":true,"raw":""}`,
		`{"s":"\ufffd","i":1,"b":true,"raw":""}`,
		"{\"s\":\"\xfe\",\"i\":1,\"b\":true,\"raw\":\"\"}",
		"{\"s\xff\":\"\",\"i\":1,\"b\":true,\"raw\":\"\"}",
		`{"s":"","i":1,"b":true,"raw":"","s":""}`,
		`{"s":{"a":1,"a":2},"i":1,"b":true,"raw":""}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		drafts, err := p.Events(json.RawMessage(in))
		// The input obeys the rules the envelope is read with: whatever
		// strictjson refuses, the contract refuses.
		if verr := strictjson.Validate(in); verr != nil && err == nil {
			t.Fatalf("Events accepts %q, which strictjson refuses: %v", in, verr)
		}
		if err != nil {
			if !errors.Is(err, contract.ErrInvalidInput) {
				t.Fatalf("error does not wrap ErrInvalidInput: %v", err)
			}
			return
		}
		if len(drafts) != len(p.Emits) {
			t.Fatalf("%d drafts for %d emits", len(drafts), len(p.Emits))
		}
		canon := drafts[0].Payload
		if !json.Valid(canon) {
			t.Fatalf("payload is not valid JSON: %q", canon)
		}
		for _, d := range drafts[1:] {
			if !bytes.Equal(d.Payload, canon) {
				t.Fatal("drafts carry different payloads")
			}
		}
		again, err := p.Canonical(canon)
		if err != nil {
			t.Fatalf("canonical payload %q is refused: %v", canon, err)
		}
		if !bytes.Equal(again, canon) {
			t.Fatalf("canonical form is not a fixed point:\n%q\n%q", canon, again)
		}
	})
}
