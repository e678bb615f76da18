package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/internal/hygiene/strictjson"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
	"github.com/riffdb/riffdb/primary/contract"
)

func apiPlan(tb testing.TB) *contract.Plan {
	tb.Helper()
	c, err := contract.Compile([]byte(apiContract))
	if err != nil {
		tb.Fatal(err)
	}
	p, _ := c.Command("put")
	return p
}

var envelopeInputSeeds = []string{
	`{"k":"A"}`, `{"k":"A","n":1}`, `{"k":"\ud800"}`, `{"k":"\udfff"}`, `{"k":"\ufffd"}`,
	`{"k":"\ud83d\ude00"}`, `{"k":"\ude00\ud83d"}`, "{\"k\":\"\xff\"}", "{\"k\":\"\xfe\"}",
	`{"k":"A","k":"B"}`, `{"k":{"x":1,"x":2}}`, "{\"\xff\":1}", `{"\udc00":1}`, `{"zz":"\ud800"}`,
	`{"k":7}`, `{"k":"A"} `, `[]`, `null`, `{"k":"A"}x`, `{`, ``,
}

// TestEnvelopeAndContractAgree: a rule broken inside the input reads the
// same whether the envelope or the contract finds it.
func TestEnvelopeAndContractAgree(t *testing.T) {
	p := apiPlan(t)
	for _, in := range []string{
		`{"k":"\ud800"}`, `{"k":"\udfff","n":1}`, `{"n":1,"k":"\ud83d\u0041"}`, "{\"k\":\"\xff\"}",
		`{"k":"A","k":"B"}`, `{"k":{"x":1,"x":2}}`, "{\"\xff\":1}", `{"\udc00":1}`, `{"zz":"\ud800"}`,
		`{"k":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}`,
	} {
		_, err := parseCommandRequest([]byte(`{"input":` + in + `}`))
		var env, direct *contract.InputError
		if !errors.As(err, &env) {
			t.Fatalf("envelope with input %.40q: %v, want an *InputError", in, err)
		}
		_, cerr := p.Canonical(json.RawMessage(in))
		if !errors.As(cerr, &direct) {
			t.Fatalf("contract on %.40q: %v, want an *InputError", in, cerr)
		}
		if env.Detail() != direct.Detail() {
			t.Errorf("input %.40q: envelope says %q, contract says %q", in, env.Detail(), direct.Detail())
		}
	}
}

// FuzzCommandRequestAgreesWithContract: the envelope accepts every input
// the contract accepts, hands it on byte for byte, and refuses for the
// input only what the contract refuses too.
func FuzzCommandRequestAgreesWithContract(f *testing.F) {
	for _, s := range envelopeInputSeeds {
		f.Add([]byte(s))
	}
	p := apiPlan(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		body := append(append([]byte(`{"idempotency_key":"k","input":`), in...), '}')
		req, err := parseCommandRequest(body)
		_, cerr := p.Canonical(in)
		if cerr == nil {
			if err != nil {
				t.Fatalf("contract accepts %q, the envelope refuses it: %v", in, err)
			}
			if !bytes.Equal(req.Input, bytes.TrimRight(bytes.TrimLeft(in, " \t\r\n"), " \t\r\n")) || req.IdempotencyKey != "k" {
				t.Fatalf("envelope read %q as input %q key %q", in, req.Input, req.IdempotencyKey)
			}
		}
		var ie *contract.InputError
		if errors.As(err, &ie) && cerr == nil {
			t.Fatalf("envelope refuses input %q that the contract accepts: %v", in, err)
		}
		if err == nil && strictjson.Validate(req.Input) != nil {
			t.Fatalf("envelope accepted input %q that breaks strictjson's rules", req.Input)
		}
	})
}

// BenchmarkParseCommandRequest compares the strict envelope reader with
// the encoding/json decoding it replaced.
func BenchmarkParseCommandRequest(b *testing.B) {
	body := []byte(`{"input":{"order_id":"order-12345","amount_cents":1250,"note":"a note with some words in it"},"idempotency_key":"order-12345-attempt-1"}`)
	b.Run("strict", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if _, err := parseCommandRequest(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var req CommandRequest
			dec := json.NewDecoder(strings.NewReader(string(body)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil || dec.More() {
				b.Fatal(err)
			}
		}
	})
}

// TestParseCommandRequestAllocations: reading a command's envelope makes
// one allocation, the idempotency key's string (a string of each top-level
// key, which only a switch compared, cost two more).
func TestParseCommandRequestAllocations(t *testing.T) {
	testutil.SkipUnderRace(t)
	body := []byte(`{"input":{"order_id":"o-1","amount_cents":1250},"idempotency_key":"k-1"}`)
	req, err := parseCommandRequest(body)
	if err != nil || req.IdempotencyKey != "k-1" || string(req.Input) != `{"order_id":"o-1","amount_cents":1250}` {
		t.Fatalf("parseCommandRequest = %+v, %v", req, err)
	}
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := parseCommandRequest(body); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Fatalf("parseCommandRequest allocates %.0f times, want 1", allocs)
	}
}
