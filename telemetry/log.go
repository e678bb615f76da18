package telemetry

import (
	"context"
	"errors"
	"io"
	"os"
	"syscall"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Log field names that join a log line to its trace.
const (
	TraceIDKey = "trace_id"
	SpanIDKey  = "span_id"
)

// NewLogger returns a zap logger that writes one JSON object per line to w
// (nil means os.Stderr) at the given level: debug, info, warn or error; ""
// means info. Any other level returns ErrInvalidLogLevel. Writes to w are
// serialized, so w need not be safe for concurrent use. Lines carry ts
// (RFC 3339), level, caller and msg; nothing is sampled away.
func NewLogger(level string, w io.Writer) (*zap.Logger, error) {
	var lvl zapcore.Level
	switch level {
	case "debug":
		lvl = zapcore.DebugLevel
	case "", "info":
		lvl = zapcore.InfoLevel
	case "warn":
		lvl = zapcore.WarnLevel
	case "error":
		lvl = zapcore.ErrorLevel
	default:
		return nil, ErrInvalidLogLevel
	}
	if w == nil {
		w = os.Stderr
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.Lock(zapcore.AddSync(w)), lvl)
	return zap.New(core, zap.AddCaller()), nil
}

// Logger returns l with trace_id and span_id fields when ctx carries a valid
// span context (sampled or not), so a log line can be joined to its trace;
// otherwise it returns l unchanged. A nil l gives a no-op logger.
func Logger(ctx context.Context, l *zap.Logger) *zap.Logger {
	if l == nil {
		l = zap.NewNop()
	}
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return l
	}
	return l.With(zap.Stringer(TraceIDKey, sc.TraceID()), zap.Stringer(SpanIDKey, sc.SpanID()))
}

// syncLogger flushes l, ignoring the errors a terminal or pipe returns for
// fsync (EINVAL, ENOTTY), which say nothing about lost log lines.
func syncLogger(l *zap.Logger) error {
	err := l.Sync()
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTTY) {
		return nil
	}
	return err
}
