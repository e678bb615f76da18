package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/internal/observe/attrkey"
	"github.com/riffdb/riffdb/internal/observe/unrecorded"
)

// ServiceName is the service.name of the spans of a run's own provider.
const ServiceName = "riffdb-loadtest"

// SpanName is the name of each request's root span.
const SpanName = "loadgen.request"

// maxResponseBytes bounds how much of a response body is read.
const maxResponseBytes = 1 << 20

// maxQueued bounds the open loop's queue of due requests.
const maxQueued = 1 << 16

// Run executes one load test described by cfg and returns its report. It
// blocks until the run ends: after cfg.Requests requests, at cfg.Duration,
// or when ctx ends. A configuration error (ErrInvalidConfig,
// ErrNotLoopback) is returned before any request is sent. When ctx ends the
// run, the report of the completed requests is returned with Interrupted set,
// together with context.Cause(ctx). Failed requests are not errors of Run:
// they are counted in the report.
func Run(ctx context.Context, cfg Config) (Report, error) {
	s, err := cfg.validate()
	if err != nil {
		return Report{}, err
	}
	tp := cfg.TracerProvider
	if tp == nil {
		sdk, err := newProvider(ctx, s)
		if err != nil {
			return Report{}, err
		}
		if sdk != nil {
			defer func() {
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				defer cancel()
				if err := sdk.Shutdown(sctx); err != nil {
					s.Logger.Warn("flushing spans failed", zap.Error(err))
				}
			}()
			tp = sdk
		} else {
			tp = unrecorded.NewTracerProvider(newSampler(s))
		}
	}
	conns := &connSet{m: map[net.Conn]struct{}{}}
	r := &runner{s: s, tracer: tp.Tracer("github.com/riffdb/riffdb/loadtest"), client: newClient(s, conns)}
	// Close every connection, including ones the transport dialed
	// speculatively and never used: left open, they would hold up the
	// server's graceful shutdown.
	defer conns.closeAll()
	stats := &statsClient{s: s, client: newClient(s, conns)} // a pool of its own, apart from the commands'

	var first dbStats
	var lagBefore map[float64]float64
	if s.WaitDelivered {
		if first, err = stats.get(ctx); err != nil {
			return Report{}, err
		}
		if s.metrics != "" {
			if lagBefore, err = stats.lagBuckets(ctx); err != nil {
				return Report{}, err
			}
		}
	}

	rep := Report{Mode: "closed", LatencyFrom: "send", Target: s.target, RunID: s.runID,
		Concurrency: s.Concurrency, Rate: s.Rate}
	if !s.closed {
		rep.Mode, rep.LatencyFrom = "open", "intended_send"
	}
	s.Logger.Info("load test starting", zap.String("mode", rep.Mode), zap.String("target", s.target),
		zap.Int("requests", s.Requests), zap.Int("concurrency", s.Concurrency), zap.Float64("rate", s.Rate),
		zap.Duration("duration", s.Duration), zap.String("run_id", s.runID))

	start, clockStart := time.Now(), s.now()
	var draining atomic.Bool
	if s.Progress != nil {
		r.live = newLive()
		stop, done := make(chan struct{}), make(chan struct{})
		p := &progressLoop{s: s, live: r.live, stats: stats, start: clockStart, draining: draining.Load}
		go func() { defer close(done); p.run(ctx, stop) }()
		// The loop ends before Run returns, so no call follows the report.
		defer func() { close(stop); <-done }()
	}
	recs := r.run(ctx, start)
	elapsed := time.Since(start)
	total := newRecorder()
	for _, rec := range recs {
		total.merge(rec)
	}
	total.fill(&rep, elapsed)
	s.Logger.Info("load test done", zap.Int64("requests", rep.Requests), zap.Int64("errors", rep.Errors),
		zap.Duration("elapsed", elapsed))
	if s.WaitDelivered && ctx.Err() == nil {
		draining.Store(true)
		d, err := stats.waitDelivered(ctx, first, clockStart, s.now())
		if err != nil && ctx.Err() == nil {
			return rep, err
		}
		if d != nil && lagBefore != nil {
			after, err := stats.lagBuckets(ctx)
			if err != nil && ctx.Err() == nil {
				return rep, err
			}
			d.LagMillis = lagPercentiles(lagBefore, after)
		}
		rep.Delivery = d
	}
	if ctx.Err() != nil {
		rep.Interrupted = true
		return rep, context.Cause(ctx)
	}
	return rep, nil
}

// newSampler is the run's sampler.
func newSampler(s *settings) sdktrace.Sampler {
	return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(s.SampleRatio))
}

// newProvider builds the run's own SDK tracer provider, which exports to
// the OTLP endpoint; nil without one. Nothing would receive a recorded span
// then, and the run's spans are unrecorded's: the same ids and sampling
// decisions, without recording (or paying for) what nobody reads.
func newProvider(ctx context.Context, s *settings) (*sdktrace.TracerProvider, error) {
	if s.OTLPEndpoint == "" {
		return nil, nil
	}
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(s.OTLPEndpoint), otlptracegrpc.WithInsecure())
	if err != nil {
		return nil, fmt.Errorf("loadtest: OTLP exporter: %w", err)
	}
	return sdktrace.NewTracerProvider(
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", ServiceName))),
		sdktrace.WithSampler(newSampler(s)),
		sdktrace.WithBatcher(exp, sdktrace.WithMaxQueueSize(max(2*s.Requests, 2048)))), nil
}

// errNotLoopbackDial refuses a connection whose resolved address is not
// loopback.
var errNotLoopbackDial = errors.New("loadtest: refusing to connect to a non-loopback address")

// newClient builds an HTTP client with a connection pool of its own:
// loopback-only dialing, no proxy, no redirects. The commands' client spans
// and traceparent headers are send's (clientspan.go).
func newClient(s *settings, conns *connSet) *http.Client {
	return &http.Client{
		Timeout:       s.RequestTimeout,
		Transport:     newTransport(s, conns),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// newTransport is the loopback-only transport, without a proxy, whose
// connections conns tracks.
func newTransport(s *settings, conns *connSet) *http.Transport {
	dialer := &net.Dialer{Timeout: 5 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return err
		}
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			return errNotLoopbackDial
		}
		return nil
	}}
	return &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return conns.add(c)
		},
		MaxIdleConns:        s.Concurrency,
		MaxIdleConnsPerHost: s.Concurrency,
		IdleConnTimeout:     30 * time.Second,
		ForceAttemptHTTP2:   false,
	}
}

// errRunOver is returned for a connection dialed after the run ended.
var errRunOver = errors.New("loadtest: the run is over")

// connSet tracks the client's connections so that the run can close all of
// them when it ends.
type connSet struct {
	mu     sync.Mutex
	m      map[net.Conn]struct{}
	closed bool
}

func (cs *connSet) add(c net.Conn) (net.Conn, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.closed {
		_ = c.Close()
		return nil, errRunOver
	}
	cs.m[c] = struct{}{}
	return c, nil
}

func (cs *connSet) closeAll() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.closed = true
	for c := range cs.m {
		_ = c.Close()
	}
	clear(cs.m)
}

type runner struct {
	s      *settings
	tracer trace.Tracer
	client *http.Client
	live   *live // nil without Config.Progress
}

// record counts o in the worker's recorder and in the live numbers.
func (r *runner) record(rec *recorder, o outcome) {
	rec.record(o)
	if r.live != nil {
		r.live.record(o)
	}
}

type job struct {
	seq      int64
	intended time.Time
}

// run drives the loop and returns the workers' recorders.
func (r *runner) run(ctx context.Context, start time.Time) []*recorder {
	s := r.s
	deadline := start.Add(s.Duration)
	workers := s.Concurrency
	if s.closed {
		workers = min(workers, s.Requests)
	}
	recs := make([]*recorder, workers)
	var wg sync.WaitGroup
	if s.closed {
		var next atomic.Int64
		for w := range recs {
			recs[w] = newRecorder()
			wg.Go(func() {
				for ctx.Err() == nil {
					seq := next.Add(1) - 1
					if seq >= int64(s.Requests) {
						return
					}
					now := time.Now()
					if !now.Before(deadline) {
						return
					}
					r.record(recs[w], r.do(ctx, seq, now))
				}
			})
		}
		wg.Wait()
		return recs
	}
	// The queue holds every due request the workers have not taken yet, so
	// the scheduler keeps to its timetable while the server is slow.
	jobs := make(chan job, min(s.Requests, maxQueued))
	for w := range recs {
		recs[w] = newRecorder()
		wg.Go(func() {
			for j := range jobs {
				r.record(recs[w], r.do(ctx, j.seq, j.intended))
			}
		})
	}
	r.schedule(ctx, start, deadline, jobs)
	wg.Wait()
	return recs
}

// schedule queues request n at start + n/Rate, for every n below Requests
// whose due time is before deadline. It does not look at the clock to decide
// which requests exist, only to wait for them, so a slow server delays
// requests (and the delay is measured) but never removes them.
func (r *runner) schedule(ctx context.Context, start, deadline time.Time, jobs chan<- job) {
	defer close(jobs)
	interval := float64(time.Second) / r.s.Rate
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for n := int64(0); n < int64(r.s.Requests); n++ {
		due := start.Add(time.Duration(float64(n) * interval))
		if !due.Before(deadline) {
			break
		}
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
		}
		select {
		case <-ctx.Done():
			return
		case jobs <- job{seq: n, intended: due}:
		}
	}
	if r.s.scheduled != nil {
		r.s.scheduled()
	}
}

// do sends request seq; its latency runs from since (the send time in the
// closed loop, the intended send time in the open loop). A request chosen by
// RetryRatio whose first response succeeded is then sent again (retry).
func (r *runner) do(ctx context.Context, seq int64, since time.Time) outcome {
	s := r.s
	ctx, span := r.tracer.Start(ctx, SpanName, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.Int64("loadgen.seq", seq), attrkey.Database.String(s.Database),
			attrkey.Command.String(s.Command)))
	o := outcome{seq: seq, traceID: span.SpanContext().TraceID().String(), sampled: span.SpanContext().IsSampled()}
	defer span.End()
	body := s.body(seq)
	status, resp, failure, err := r.send(ctx, body)
	o.latency = time.Since(since)
	o.status, o.failure = status, failure
	switch {
	case status != 0:
		span.SetAttributes(attribute.Int("http.response.status_code", status))
	case err != nil:
		span.RecordError(err)
	}
	if failure != "" {
		if status != 0 {
			span.SetStatus(codes.Error, "HTTP "+strconv.Itoa(status))
		} else {
			span.SetStatus(codes.Error, failure)
		}
		s.Logger.Debug("request failed", zap.Int64("seq", seq), zap.Int("status", status),
			zap.String("trace_id", o.traceID), zap.Error(err))
		return o
	}
	o.replayed = resp.Replayed
	if s.retried(seq) {
		o.retried = true
		o.retryFailure = r.retry(ctx, seq, body, resp)
	}
	return o
}

// commandResponse is what the load generator reads of a successful
// command's response.
type commandResponse struct {
	CommitSequence uint64 `json:"commit_sequence"`
	Replayed       bool   `json:"replayed"`
}

// send posts body to the command endpoint. failure is "" on a 2xx response,
// else its errors_by_status key; status is 0 when no response came, and err
// is then the transport's error.
func (r *runner) send(ctx context.Context, body []byte) (status int, resp commandResponse, failure string, err error) {
	s := r.s
	ctx, span := r.tracer.Start(ctx, clientSpanName, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(s.clientAttrs...))
	defer func() { endClientSpan(span, status, err) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.target, bytes.NewReader(body))
	if err != nil { // the URL was validated, so this is not expected
		return 0, resp, "transport", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+s.Token)
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	hr, err := r.client.Do(req)
	if err != nil {
		return 0, resp, transportKey(ctx, err), err
	}
	b, rerr := io.ReadAll(io.LimitReader(hr.Body, maxResponseBytes))
	_ = hr.Body.Close()
	switch {
	case hr.StatusCode < 200 || hr.StatusCode > 299:
		return hr.StatusCode, resp, statusKey(hr.StatusCode), nil
	case rerr != nil:
		return hr.StatusCode, resp, transportKey(ctx, rerr), rerr
	}
	_ = json.Unmarshal(b, &resp) // a body that is not a command response reads as a fresh commit
	return hr.StatusCode, resp, "", nil
}

// retry sends request seq's body again, as a client that lost first's
// response would, and returns "" when the server answered with a replay of
// the same commit, else the Report.RetryErrors key.
func (r *runner) retry(ctx context.Context, seq int64, body []byte, first commandResponse) string {
	_, resp, failure, err := r.send(ctx, body)
	switch {
	case failure != "":
	case !resp.Replayed:
		failure = RetryNotReplayed
	case resp.CommitSequence != first.CommitSequence:
		failure = RetryOtherCommit
	}
	if failure != "" {
		r.s.Logger.Debug("retry not replayed", zap.Int64("seq", seq), zap.String("failure", failure), zap.Error(err))
	}
	return failure
}

// transportKey classifies a failure without an HTTP status.
func transportKey(ctx context.Context, err error) string {
	var ne net.Error
	switch {
	case ctx.Err() != nil:
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return "transport"
}
