package loadtest

import (
	"context"
	"net"
	"testing"
	"time"
)

// TestOwnProviderRecordsOnlyWithAnExporter: without an OTLP endpoint the
// run's spans are not recorded (nothing would receive them, and recording
// was a share of the generator's CPU per request); with one they are,
// for the exporter.
func TestOwnProviderRecordsOnlyWithAnExporter(t *testing.T) {
	s := &settings{Config: Config{SampleRatio: 1, Requests: 1}}
	sdk, err := newProvider(t.Context(), s)
	if err != nil || sdk != nil {
		t.Fatalf("newProvider without an endpoint = %v, %v; want no SDK provider", sdk, err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	s.OTLPEndpoint = lis.Addr().String()
	sdk, err = newProvider(t.Context(), s)
	if err != nil || sdk == nil {
		t.Fatalf("newProvider with an endpoint = %v, %v; want an SDK provider", sdk, err)
	}
	defer func() {
		// The listener never answers: the flush of the one span fails.
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		_ = sdk.Shutdown(ctx)
	}()
	_, span := sdk.Tracer("test").Start(t.Context(), "loadgen.request")
	if !span.IsRecording() {
		t.Fatal("with an exporter a sampled span does not record")
	}
	span.End()
}
