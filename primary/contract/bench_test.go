package contract_test

import (
	"encoding/json"
	"testing"
)

// benchInputs are the shapes a command path sees: the ordinary one the fast
// path takes, and one with escapes that the reference parser handles.
var benchInputs = []struct{ name, in string }{
	{"fast", `{"s":"order-12345","i":1250,"b":true,"raw":"AAECAwQFBgc=","os":"a note with some words in it"}`},
	{"escaped", `{"s":"order-\u0031\u0032\u0033\u0034\u0035","i":1250,"b":true,"raw":"AAECAwQFBgc=","os":"a note \"quoted\" with\ttabs"}`},
}

func BenchmarkCanonical(b *testing.B) {
	p := plan(b, kinds, "all")
	for _, bc := range benchInputs {
		in := json.RawMessage(bc.in)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				if _, err := p.Canonical(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
