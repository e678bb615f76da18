package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/riffdb/riffdb/telemetry"
)

func TestLoggerAddsTraceAndSpanIDs(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	core, logs := observer.New(zapcore.DebugLevel)
	l := zap.New(core)

	ctx, span := tp.Tracer("test").Start(context.Background(), "riffdb.outbox.claim")
	defer span.End()
	telemetry.Logger(ctx, l).Info("claimed")
	telemetry.Logger(context.Background(), l).Info("no span")

	entries := logs.All()
	if len(entries) != 2 {
		t.Fatalf("got %d entries, want 2", len(entries))
	}
	fields := entries[0].ContextMap()
	if got, want := fields[telemetry.TraceIDKey], span.SpanContext().TraceID().String(); got != want {
		t.Errorf("trace_id %v, want %v", got, want)
	}
	if got, want := fields[telemetry.SpanIDKey], span.SpanContext().SpanID().String(); got != want {
		t.Errorf("span_id %v, want %v", got, want)
	}
	if n := len(entries[1].Context); n != 0 {
		t.Errorf("log without span has %d fields: %v", n, entries[1].ContextMap())
	}
}

func TestLoggerAddsIDsOfUnsampledSpans(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{7}, SpanID: trace.SpanID{8}})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	telemetry.Logger(ctx, zap.New(core)).Warn("x")
	if got := logs.All()[0].ContextMap()[telemetry.TraceIDKey]; got != sc.TraceID().String() {
		t.Errorf("trace_id %v, want %v", got, sc.TraceID())
	}
}

func TestLoggerNilIsNop(t *testing.T) {
	ctx, span := sdktrace.NewTracerProvider().Tracer("t").Start(context.Background(), "s")
	defer span.End()
	telemetry.Logger(ctx, nil).Info("dropped") // must not panic
}

func TestNewLoggerLevelsAndJSON(t *testing.T) {
	cases := []struct {
		level string
		want  []string // messages that pass
	}{
		{"debug", []string{"d", "i", "w", "e"}},
		{"", []string{"i", "w", "e"}},
		{"info", []string{"i", "w", "e"}},
		{"warn", []string{"w", "e"}},
		{"error", []string{"e"}},
	}
	for _, tc := range cases {
		var buf bytes.Buffer
		l, err := telemetry.NewLogger(tc.level, &buf)
		if err != nil {
			t.Fatalf("level %q: %v", tc.level, err)
		}
		l.Debug("d")
		l.Info("i")
		l.Warn("w")
		l.Error("e")
		var got []string
		for line := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
			var rec struct {
				Msg, Level, TS, Caller string
			}
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("level %q: line %q is not JSON: %v", tc.level, line, err)
			}
			if rec.TS == "" || rec.Caller == "" {
				t.Errorf("line %q lacks ts or caller", line)
			}
			got = append(got, rec.Msg)
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("level %q: logged %v, want %v", tc.level, got, tc.want)
		}
	}
	for _, bad := range []string{"DEBUG", "trace", "fatal", " info"} {
		if _, err := telemetry.NewLogger(bad, nil); !errors.Is(err, telemetry.ErrInvalidLogLevel) {
			t.Errorf("level %q: err %v, want ErrInvalidLogLevel", bad, err)
		}
	}
}
