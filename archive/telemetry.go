package archive

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/hygiene/pathless"
	"github.com/riffdb/riffdb/internal/observe/attrkey"
)

// instrumentationName names the archive's tracer and meter.
const instrumentationName = "github.com/riffdb/riffdb/archive"

func (s *Store) initTelemetry(opts Options) error {
	tp := opts.TracerProvider
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	mp := opts.MeterProvider
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	s.tracer = tp.Tracer(instrumentationName)
	s.dbAttr = attrkey.Database.String(opts.Alias)
	m := mp.Meter(instrumentationName)
	var err error
	if s.txnDur, err = m.Float64Histogram("riffdb.archive.txn.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of archive transactions.")); err != nil {
		return fmt.Errorf("archive: telemetry: %w", err)
	}
	if s.checkDur, err = m.Float64Histogram("riffdb.archive.quota.check.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of group quota checks (Fit), failed ones included.")); err != nil {
		return fmt.Errorf("archive: telemetry: %w", err)
	}
	if s.accepted, err = m.Int64Counter("riffdb.archive.accepted.events",
		metric.WithDescription("Events handled by archive acceptance, by result (stored, duplicate, refused).")); err != nil {
		return fmt.Errorf("archive: telemetry: %w", err)
	}
	if s.decisions, err = m.Int64Counter("riffdb.archive.quota.decisions",
		metric.WithDescription("Group quota checks, by result (fits, does_not_fit).")); err != nil {
		return fmt.Errorf("archive: telemetry: %w", err)
	}
	if s.scrubRecords, err = m.Int64Counter("riffdb.archive.scrub.records", metric.WithUnit("{record}"),
		metric.WithDescription("Records validated by the archive's background scrub.")); err != nil {
		return fmt.Errorf("archive: telemetry: %w", err)
	}
	if s.scrubPasses, err = m.Int64Counter("riffdb.archive.scrub.passes", metric.WithUnit("{pass}"),
		metric.WithDescription("Complete passes of the archive's background scrub over every record.")); err != nil {
		return fmt.Errorf("archive: telemetry: %w", err)
	}
	if s.scrubProgress, err = m.Float64Gauge("riffdb.archive.scrub.progress", metric.WithUnit("1"),
		metric.WithDescription("Fraction of the archive's records the current background scrub pass has validated (1 at the end of a pass).")); err != nil {
		return fmt.Errorf("archive: telemetry: %w", err)
	}
	s.dbSet = metric.WithAttributeSet(attribute.NewSet(s.dbAttr))
	s.dbRecord = []metric.RecordOption{s.dbSet}
	s.resultSets = make(map[string][]metric.AddOption)
	for _, result := range []string{"stored", "duplicate", "refused", "fits", "does_not_fit"} {
		s.resultSets[result] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(s.dbAttr, attribute.String("result", result)))}
	}
	// Known label sets start at 0 so that increase() sees the first event.
	for _, result := range []string{"stored", "duplicate", "refused"} {
		s.accepted.Add(context.Background(), 0, s.resultSets[result]...)
	}
	for _, result := range []string{"fits", "does_not_fit"} {
		s.decisions.Add(context.Background(), 0, s.resultSets[result]...)
	}
	used, err := m.Int64ObservableGauge("riffdb.archive.quota.used", metric.WithUnit("By"),
		metric.WithDescription("Encoded bytes charged to the archive quota."))
	if err != nil {
		return fmt.Errorf("archive: telemetry: %w", err)
	}
	limit, err := m.Int64ObservableGauge("riffdb.archive.quota.limit", metric.WithUnit("By"),
		metric.WithDescription("Archive quota in encoded bytes."))
	if err != nil {
		return fmt.Errorf("archive: telemetry: %w", err)
	}
	last, interval, err := validationGauges(m)
	if err != nil {
		return err
	}
	s.gaugeInit = func() (metric.Registration, error) {
		return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
			o.ObserveInt64(used, s.encoded.Load(), metric.WithAttributes(s.dbAttr))
			o.ObserveInt64(limit, s.quota, metric.WithAttributes(s.dbAttr))
			s.mon.observeValidation(o, last, interval, metric.WithAttributes(s.dbAttr))
			return nil
		}, used, limit, last, interval)
	}
	return nil
}

// validationGauges creates the gauges of the last full validation and of
// the interval that bounds it (validation.go).
func validationGauges(m metric.Meter) (last, interval metric.Float64ObservableGauge, err error) {
	last, err = m.Float64ObservableGauge("riffdb.archive.last_full_validation.timestamp", metric.WithUnit("s"),
		metric.WithDescription("When the whole archive was last validated (a start's validation of every record, or a complete background scrub pass), in seconds since the Unix epoch."))
	if err != nil {
		return nil, nil, fmt.Errorf("archive: telemetry: %w", err)
	}
	interval, err = m.Float64ObservableGauge("riffdb.archive.full_validation.interval", metric.WithUnit("s"),
		metric.WithDescription("The configured full_validation_interval: a start validates every record when the last full validation is older."))
	if err != nil {
		return nil, nil, fmt.Errorf("archive: telemetry: %w", err)
	}
	return last, interval, nil
}

// observeValidation observes the last full validation of the stores opened
// with m (nothing while it is not known) and their interval (nothing
// without one).
func (m *Monitor) observeValidation(o metric.Observer, last, interval metric.Float64ObservableGauge, attrs metric.ObserveOption) {
	if t, ok := m.LastFullValidation(); ok {
		o.ObserveFloat64(last, float64(t.UnixNano())/1e9, attrs)
	}
	if iv := m.interval.Load(); iv > 0 {
		o.ObserveFloat64(interval, time.Duration(iv).Seconds(), attrs)
	}
}

// ObserveValidation registers the gauges
// riffdb.archive.last_full_validation.timestamp and
// riffdb.archive.full_validation.interval (label riffdb.database = alias)
// read from m, like ObserveQuota: they stay while the archive is closed for
// repair and are absent until a store was first opened with m (the
// timestamp also while the archive records no full validation). A Store
// opened with Options.Monitor registers neither; the caller registers these
// once.
func (m *Monitor) ObserveValidation(mp metric.MeterProvider, alias string) (metric.Registration, error) {
	meter := mp.Meter(instrumentationName)
	last, interval, err := validationGauges(meter)
	if err != nil {
		return nil, err
	}
	attrs := metric.WithAttributeSet(attribute.NewSet(attrkey.Database.String(alias)))
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if m.opened.Load() {
			m.observeValidation(o, last, interval, attrs)
		}
		return nil
	}, last, interval)
	if err != nil {
		return nil, fmt.Errorf("archive: telemetry: %w", err)
	}
	return reg, nil
}

func (s *Store) registerGauges() error {
	reg, err := s.gaugeInit()
	if err != nil {
		return fmt.Errorf("archive: telemetry: %w", err)
	}
	s.gauges = reg
	return nil
}

// The archive's span names (DESIGN.md, telemetry names).
const (
	SpanTxn        = "riffdb.archive.txn"         // one archive transaction (Accept)
	SpanQuotaCheck = "riffdb.archive.quota.check" // one group quota check (Fit)
)

// txnAttrs returns the attributes of the transaction span of record under
// key: the database (db), the event, its history incarnation and its size.
func txnAttrs(db attribute.KeyValue, key event.Key, size int) []attribute.KeyValue {
	return append(make([]attribute.KeyValue, 0, 5), db, // and the outcome or error.type
		attrkey.EventID.String(key.Event.String()),
		attribute.Int64("riffdb.history.incarnation", int64(key.Incarnation)),
		attribute.Int("riffdb.event.bytes", size))
}

// endTxnSpan ends the SpanTxn span of the transaction of a record of size
// bytes under key (endSpan), with its attributes given once it is known to
// record: formatting the event id is wasted on a span that does not.
func (s *Store) endTxnSpan(span trace.Span, key event.Key, size int, err error, out deliverytype.Outcome) {
	var attrs []attribute.KeyValue
	if span.IsRecording() {
		attrs = txnAttrs(s.dbAttr, key, size)
	}
	endSpan(span, attrs, err, attribute.String("riffdb.archive.outcome", out.String()))
}

// quotaCheckAttrs returns the attributes of the quota check span of a group
// of n members.
func quotaCheckAttrs(db attribute.KeyValue, n int) []attribute.KeyValue {
	return []attribute.KeyValue{db, attribute.Int("riffdb.group.size", n)}
}

// RecordFailedTxn records the SpanTxn span of an acceptance of record under
// key (for the database alias) that failed with err before it reached an
// open store: the archive could not be opened and validated, or its
// custody audit refused it. Every attempted transaction thus has its span,
// as one that reached the store has: status Error with err's class, err
// recorded, error.type. err is recorded without filesystem paths. tp nil
// records nothing.
func RecordFailedTxn(ctx context.Context, tp trace.TracerProvider, alias string, key event.Key, record []byte, err error) {
	recordFailed(ctx, tp, SpanTxn, err, txnAttrs(attrkey.Database.String(alias), key, len(record)))
}

// RecordFailedQuotaCheck is RecordFailedTxn for the SpanQuotaCheck span of
// the quota check of a group of n members.
func RecordFailedQuotaCheck(ctx context.Context, tp trace.TracerProvider, alias string, n int, err error) {
	recordFailed(ctx, tp, SpanQuotaCheck, err, quotaCheckAttrs(attrkey.Database.String(alias), n))
}

func recordFailed(ctx context.Context, tp trace.TracerProvider, name string, err error, attrs []attribute.KeyValue) {
	if tp == nil || err == nil {
		return
	}
	_, span := tp.Tracer(instrumentationName).Start(ctx, name, trace.WithAttributes(attrs...))
	endSpan(span, nil, pathless.Clean(err))
}

// endSpan ends span. With a non-nil err it records err and sets the error's
// Class as the span status and as error.type; otherwise it sets ok. attrs
// are the span's other attributes, given in the same call: the SDK copies
// attributes given at a span's start twice and grows the span's slice
// again for each later call (for a transaction span, three allocations and
// about 1 KiB an event), so a span on a hot path is started without any.
// attrs may be appended to.
func endSpan(span trace.Span, attrs []attribute.KeyValue, err error, ok ...attribute.KeyValue) {
	if !span.IsRecording() { // not sampled, or no exporter
		span.End()
		return
	}
	if err != nil {
		class := ClassOf(err).String()
		span.RecordError(err)
		span.SetStatus(codes.Error, class)
		attrs = append(attrs, attribute.String("error.type", class))
	} else {
		attrs = append(attrs, ok...)
	}
	span.SetAttributes(attrs...)
	span.End()
}

// ObserveQuota registers the gauges riffdb.archive.quota.used and
// riffdb.archive.quota.limit (label riffdb.database = alias) read from m:
// the last committed accounting of any store opened with m, so that the
// series stay while the archive is closed for repair (unavailable, refused)
// and never wait on a transaction. They are absent until a store was first
// opened with m. A Store opened with Options.Monitor registers no quota
// gauges of its own; the caller registers these once.
func (m *Monitor) ObserveQuota(mp metric.MeterProvider, alias string) (metric.Registration, error) {
	meter := mp.Meter(instrumentationName)
	used, err := meter.Int64ObservableGauge("riffdb.archive.quota.used", metric.WithUnit("By"),
		metric.WithDescription("Encoded bytes charged to the archive quota."))
	if err != nil {
		return nil, fmt.Errorf("archive: telemetry: %w", err)
	}
	limit, err := meter.Int64ObservableGauge("riffdb.archive.quota.limit", metric.WithUnit("By"),
		metric.WithDescription("Archive quota in encoded bytes."))
	if err != nil {
		return nil, fmt.Errorf("archive: telemetry: %w", err)
	}
	attrs := metric.WithAttributeSet(attribute.NewSet(attrkey.Database.String(alias)))
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		a, ok := m.accounting()
		if !m.opened.Load() || !ok {
			return nil
		}
		o.ObserveInt64(used, a.EncodedBytes, attrs)
		o.ObserveInt64(limit, a.QuotaEncodedBytes, attrs)
		return nil
	}, used, limit)
	if err != nil {
		return nil, fmt.Errorf("archive: telemetry: %w", err)
	}
	return reg, nil
}
