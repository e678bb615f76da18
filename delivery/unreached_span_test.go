package delivery

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/event"
)

// TestSpansOfCallsThatNeverReachTheStore: a quota check or a transaction
// that fails before it reaches an open store — the archive cannot be
// opened, or its custody audit refuses it — still records its
// riffdb.archive.quota.check or riffdb.archive.txn span, a child of the
// caller's span, with status Error (the failure's class), error.type and
// the error recorded without the archive's path.
func TestSpansOfCallsThatNeverReachTheStore(t *testing.T) {
	id := event.DatabaseID{0x01, 0x93, 0x2a, 0x71, 0x01, 0x81, 0x70, 0x01, 0x81, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x04}
	st, err := event.NewStored(event.ID{Seq: 1}, "put", []byte(`{"k":"v"}`))
	if err != nil {
		t.Fatal(err)
	}
	key, record := event.Key{Database: id, Event: st.ID}, st.Encode()
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string, d *Destination) // before the call
		call  func(ctx context.Context, d *Destination) error
		span  string
		class string
	}{
		{"quota check, archive cannot be opened", nil, func(ctx context.Context, d *Destination) error {
			_, err := d.Fit(ctx, []event.Key{key}, [][]byte{record})
			return err
		}, archive.SpanQuotaCheck, "unavailable"},
		{"transaction, archive cannot be opened", nil, func(ctx context.Context, d *Destination) error {
			_, err := d.Accept(ctx, key, record)
			return err
		}, archive.SpanTxn, "unavailable"},
		{"quota check, custody audit refuses", func(t *testing.T, dir string, d *Destination) {
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := d.Probe(context.Background()); err != nil { // opened and audited
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o750); err != nil { // then its mode changes
				t.Fatal(err)
			}
		}, func(ctx context.Context, d *Destination) error {
			_, err := d.Fit(ctx, []event.Key{key}, [][]byte{record})
			return err
		}, archive.SpanQuotaCheck, "refused"},
		{"transaction, custody refused at the open", func(t *testing.T, dir string, _ *Destination) {
			if err := os.Mkdir(dir, 0o750); err != nil {
				t.Fatal(err)
			}
		}, func(ctx context.Context, d *Destination) error {
			_, err := d.Accept(ctx, key, record)
			return err
		}, archive.SpanTxn, "refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sr := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			dir := filepath.Join(t.TempDir(), "outbox-archive-dir")
			d := newDestination(dir, archive.Options{Database: id, QuotaEncodedBytes: 1 << 30, MinFreeBytes: -1,
				Alias: "default", TracerProvider: tp})
			d.setScrubRate(0)
			t.Cleanup(func() { _ = d.Close() })
			if tc.setup != nil {
				tc.setup(t, dir, d)
			}
			ctx, parent := tp.Tracer("test").Start(context.Background(), "riffdb.outbox.claim")
			callErr := tc.call(ctx, d)
			parent.End()
			if callErr == nil {
				t.Fatal("the call succeeded")
			}
			var found bool
			for _, s := range sr.Ended() {
				if s.Name() != tc.span {
					continue
				}
				found = true
				if s.Status().Code != codes.Error || s.Status().Description != tc.class {
					t.Errorf("status %+v, want Error %q", s.Status(), tc.class)
				}
				if s.Parent().SpanID() != parent.SpanContext().SpanID() {
					t.Errorf("parent %v, want the caller's span", s.Parent().SpanID())
				}
				attrs := map[string]string{}
				for _, kv := range s.Attributes() {
					attrs[string(kv.Key)] = kv.Value.String()
				}
				if attrs["riffdb.database"] != "default" || attrs["error.type"] != tc.class {
					t.Errorf("attributes %v", attrs)
				}
				var recorded int
				for _, ev := range s.Events() {
					if ev.Name != "exception" {
						continue
					}
					recorded++
					for _, kv := range ev.Attributes {
						if v := kv.Value.String(); strings.Contains(v, dir) || strings.Contains(v, "outbox-archive-dir") {
							t.Errorf("recorded error %s = %q names the archive's path", kv.Key, v)
						}
					}
				}
				if recorded != 1 {
					t.Errorf("%d errors recorded, want 1", recorded)
				}
			}
			if !found {
				t.Fatalf("no %s span for a call that failed with %v", tc.span, callErr)
			}
		})
	}
}
