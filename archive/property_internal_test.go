package archive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
)

// TestAccountingEqualsChargesProperty: after any sequence of accepts (new
// keys, equal retries, conflicting bytes, quota refusals) and reopens, the
// durable accounting equals Σ Charge over the records a model says are
// archived, and every archived record reads back exactly.
func TestAccountingEqualsChargesProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		fs := newMemFS(t, false)
		opts := testOptions(t, fs)
		opts.Logger = nil
		opts.QuotaEncodedBytes = rapid.Int64Range(200, 4000).Draw(rt, "quota")
		ctx := context.Background()
		s, err := Open(ctx, testDir, opts)
		if err != nil {
			rt.Fatal(err)
		}
		defer func() { _ = s.Close() }()
		model := map[event.Key][]byte{}
		var used int64
		steps := rapid.IntRange(1, 40).Draw(rt, "steps")
		for i := 0; i < steps; i++ {
			if rapid.IntRange(0, 9).Draw(rt, "reopen") == 0 {
				if err := s.Close(); err != nil {
					rt.Fatal(err)
				}
				if s, err = Open(ctx, testDir, opts); err != nil {
					rt.Fatalf("reopen: %v", err)
				}
			}
			seq := uint64(rapid.IntRange(1, 8).Draw(rt, "seq"))
			variant := rapid.IntRange(0, 2).Draw(rt, "variant")
			size := rapid.IntRange(0, 300).Draw(rt, "size")
			k, r := rec(t, testDatabase, seq, 0, fmt.Sprintf("%d:%s", variant, bytes.Repeat([]byte("x"), size)))
			out, err := s.Accept(ctx, k, r)
			prev, exists := model[k]
			switch {
			case exists && bytes.Equal(prev, r):
				if err != nil || out != deliverytype.Duplicate {
					rt.Fatalf("equal retry: %v, %v", out, err)
				}
			case exists:
				if !errors.Is(err, ErrConflict) {
					rt.Fatalf("different bytes: %v, %v", out, err)
				}
			case used+Charge(k, r) > opts.QuotaEncodedBytes:
				if !errors.Is(err, ErrCapacity) {
					rt.Fatalf("over quota: %v, %v", out, err)
				}
			default:
				if err != nil || out != deliverytype.Stored {
					rt.Fatalf("new key: %v, %v", out, err)
				}
				model[k] = r
				used += Charge(k, r)
			}
			if u := s.Usage(); u.Records != int64(len(model)) || u.EncodedBytes != used {
				rt.Fatalf("usage %+v, model %d records / %d bytes", u, len(model), used)
			}
		}
		if err := s.Close(); err != nil {
			rt.Fatal(err)
		}
		s, err = Open(ctx, testDir, opts)
		if err != nil {
			rt.Fatalf("final reopen: %v", err)
		}
		if u := s.Usage(); u.Records != int64(len(model)) || u.EncodedBytes != used {
			rt.Fatalf("usage after reopen %+v, model %d records / %d bytes", u, len(model), used)
		}
		r := s.NewReader()
		defer r.Close()
		p, err := r.ReadPage(ctx, nil)
		if err != nil {
			rt.Fatal(err)
		}
		if len(p.Records) != len(model) || p.EncodedBytes != used {
			rt.Fatalf("reader saw %d records / %d bytes", len(p.Records), p.EncodedBytes)
		}
		for _, rec := range p.Records {
			if !bytes.Equal(rec.Event.Encode(), model[rec.Key]) {
				rt.Fatalf("record %s differs", rec.Key.Event)
			}
		}
	})
}
