package primary_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/primary"
	"github.com/riffdb/riffdb/primary/contract"
)

// TestInvalidInputMessageIsOneSentence: Execute's invalid-input errors say
// "invalid input" once, under one prefix, and carry the client's sentence
// (issue 12: the message used to double its prefixes).
func TestInvalidInputMessageIsOneSentence(t *testing.T) {
	db, _ := setup(t)
	ctx := context.Background()
	cases := []struct{ input, key, detail string }{
		{`{"x":"one"}`, "", `input field "x" must be an integer`},
		{`{"x":1,"x":2}`, "", `input field "x" appears more than once`},
		{`{"x":1,"y":2}`, "", `input has an unknown field "y"`},
		{`{"x":1}`, strings.Repeat("k", primary.MaxIdempotencyKeyLen+1), "idempotency_key exceeds 256 bytes"},
		{`{"x":1}`, "\xff", "idempotency_key is not valid UTF-8"},
	}
	for _, c := range cases {
		_, err := db.Execute(ctx, "two", json.RawMessage(c.input), c.key)
		if !errors.Is(err, primary.ErrInvalidInput) || !errors.Is(err, contract.ErrInvalidInput) {
			t.Fatalf("Execute(%s) = %v, want ErrInvalidInput", c.input, err)
		}
		var ie *primary.InputError
		if !errors.As(err, &ie) || ie.Detail != c.detail {
			t.Fatalf("Execute(%s) = %v, want an *InputError with detail %q", c.input, err, c.detail)
		}
		if want := "primary: invalid input: " + c.detail; err.Error() != want {
			t.Fatalf("Execute(%s): message %q, want %q", c.input, err.Error(), want)
		}
	}
	if db.LastCommitSequence() != 0 {
		t.Fatal("a refused command committed")
	}
}

// TestIdempotencyKeysAreExactBytes: keys that differ only in bytes that
// are not UTF-8 are refused instead of colliding (issue 12: "\xff" and
// "\xfe" both read as U+FFFD).
func TestIdempotencyKeysAreExactBytes(t *testing.T) {
	db, _ := setup(t)
	ctx := context.Background()
	for _, key := range []string{"\xff", "\xfe", "a\xed\xa0\x80"} {
		if _, err := db.Execute(ctx, "two", json.RawMessage(`{"x":1}`), key); !errors.Is(err, primary.ErrInvalidInput) {
			t.Fatalf("key %q: %v, want ErrInvalidInput", key, err)
		}
	}
	a := exec(t, db, "two", `{"x":1}`, "\uFFFD")
	if b := exec(t, db, "two", `{"x":1}`, "\uFFFD"); !b.Replayed || b.Seq != a.Seq {
		t.Fatalf("the same key did not replay: %+v %+v", a, b)
	}
}
