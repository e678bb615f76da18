package server

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/riffdb/riffdb/internal/testsupport/testutil"
)

// TestReadCommandBody: a body of a declared small length is read whole,
// into one buffer; one of a declared length above sizedBodyBytes, or of
// none (chunked), is read up to MaxRequestBytes and refused beyond it with
// an *http.MaxBytesError; a body shorter than its declared length is an
// error.
func TestReadCommandBody(t *testing.T) {
	body := func(n int) []byte { return bytes.Repeat([]byte("x"), n) }
	for _, tc := range []struct {
		name     string
		body     []byte
		declared int64 // -1: none (chunked)
		tooLarge bool
		err      bool
	}{
		{"empty", nil, 0, false, false},
		{"small", body(200), 200, false, false},
		{"at the sized bound", body(sizedBodyBytes), sizedBodyBytes, false, false},
		{"above the sized bound", body(sizedBodyBytes + 1), sizedBodyBytes + 1, false, false},
		{"chunked", body(3000), -1, false, false},
		{"chunked, too large", body(MaxRequestBytes + 1), -1, true, true},
		{"declared too large", body(MaxRequestBytes + 1), MaxRequestBytes + 1, true, true},
		{"shorter than declared", body(10), 20, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(tc.body))
			r.ContentLength = tc.declared
			got, err := readCommandBody(httptest.NewRecorder(), r)
			var mbe *http.MaxBytesError
			switch {
			case tc.err && err == nil:
				t.Fatalf("read %d bytes, want an error", len(got))
			case !tc.err && err != nil:
				t.Fatalf("error %v", err)
			case tc.tooLarge != errors.As(err, &mbe):
				t.Fatalf("error %v; want a MaxBytesError: %v", err, tc.tooLarge)
			case err == nil && !bytes.Equal(got, tc.body):
				t.Fatalf("read %d bytes, want the %d sent", len(got), len(tc.body))
			}
		})
	}
}

// TestReadCommandBodyAllocations: a command's body of a declared length is
// read in one allocation, its buffer (a limit wrapper and a buffer grown
// from 512 bytes cost two or more).
func TestReadCommandBodyAllocations(t *testing.T) {
	testutil.SkipUnderRace(t)
	b := []byte(`{"input":{"order_id":"o-1","amount_cents":1250},"idempotency_key":"k-1"}`)
	src := bytes.NewReader(b)
	r := httptest.NewRequest(http.MethodPost, "/", src)
	w := httptest.NewRecorder()
	allocs := testing.AllocsPerRun(100, func() {
		src.Reset(b)
		if _, err := readCommandBody(w, r); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Fatalf("reading the body allocates %.0f times, want 1", allocs)
	}
}
