package loadtest

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// Defaults applied to zero fields of Config.
const (
	DefaultDatabase       = "default"
	DefaultCommand        = "place_order"
	DefaultRequests       = 5000
	DefaultConcurrency    = 16
	DefaultDuration       = 30 * time.Second
	DefaultRequestTimeout = 10 * time.Second
	DefaultSampleRatio    = 1.0
	// DefaultWaitTimeout bounds the wait for the backlog to drain
	// (Config.WaitDelivered).
	DefaultWaitTimeout = 2 * time.Minute
	// ProgressInterval is the time between two Config.Progress calls.
	ProgressInterval = time.Second
	// DefaultInputTemplate fits the place_order command of the embedded
	// development contract (riffdb server run --dev).
	DefaultInputTemplate = `{"order_id":"lt-{{run}}-{{n}}","amount_cents":{{n}}}`
	// SlowestKept is how many of the slowest requests a Report lists.
	SlowestKept = 5
)

// Sentinel errors returned by Run before any request is sent.
var (
	// ErrNotLoopback is returned when the target or the OTLP endpoint is not
	// a loopback address; the environment forbids traffic elsewhere.
	ErrNotLoopback = errors.New("loadtest: only loopback targets are allowed (127.0.0.0/8, ::1 or localhost)")
	// ErrInvalidConfig is returned, wrapped with the reason, for a Config
	// that cannot run (bad template, negative counts, missing token, …).
	ErrInvalidConfig = errors.New("loadtest: invalid configuration")
	// ErrNoStatistics is returned by a WaitDelivered run whose token may
	// not read the server's statistics (GET /v1/stats answered 401 or 403).
	ErrNoStatistics = errors.New("loadtest: waiting for delivery needs a token with the global read_statistics permission")
)

// Config describes one load-test run. The zero value of every field but
// Address and Token means its default.
type Config struct {
	// Address is the server's base URL, e.g. "http://127.0.0.1:7420"; a
	// missing scheme means http. It must be a loopback address.
	Address string
	// Token is the bearer token of a capability with execute_commands.
	Token string
	// Database is the database alias (DefaultDatabase).
	Database string
	// Command is the compiled command to run (DefaultCommand).
	Command string
	// InputTemplate is the command input as a JSON object in which {{n}}
	// is replaced by the request's sequence number (0, 1, …) and {{run}} by
	// the run id. It must contain {{n}} so that inputs are unique.
	InputTemplate string
	// Requests bounds the number of requests (DefaultRequests).
	Requests int
	// Concurrency is the number of workers of the closed loop, or the
	// maximum number of requests in flight of the open loop
	// (DefaultConcurrency).
	Concurrency int
	// Rate, when positive, selects the open loop: requests per second.
	Rate float64
	// Duration bounds the run: no request is started (closed loop) or due
	// (open loop) at or after start+Duration (DefaultDuration).
	Duration time.Duration
	// RequestTimeout bounds each request (DefaultRequestTimeout).
	RequestTimeout time.Duration
	// RunID distinguishes this run's idempotency keys and inputs from other
	// runs' ([A-Za-z0-9_-], at most 64 characters); empty means random.
	RunID string
	// RetryRatio is the fraction of requests, in [0, 1], that are sent a
	// second time right after a successful first response, with the same
	// idempotency key and body: a client retrying because it lost the
	// response. The server must answer such a retry as a replay of the same
	// commit (see Report.Retries). Requests are chosen evenly: request n is
	// retried when floor((n+1)·RetryRatio) > floor(n·RetryRatio). 0 means
	// no retries.
	RetryRatio float64

	// TracerProvider, when set, is used for the spans (and the run does not
	// shut it down). When nil the run builds a provider that samples with
	// SampleRatio: the SDK's, exporting to OTLPEndpoint, if set; else one
	// that records nothing (see the package documentation).
	TracerProvider trace.TracerProvider
	// OTLPEndpoint is an OTLP/gRPC collector host:port on loopback; empty
	// means spans are not exported. Ignored when TracerProvider is set.
	OTLPEndpoint string
	// SampleRatio is the fraction of traces sampled, in (0, 1]
	// (DefaultSampleRatio). Ignored when TracerProvider is set. Unsampled
	// requests still carry a trace id and propagate it (flag 00).
	SampleRatio float64

	// Logger receives progress and per-request failures; nil means none.
	Logger *zap.Logger

	// Progress, when set, is called every ProgressInterval while the run
	// and its wait for delivery last, from one goroutine, with the numbers
	// so far. With a token that has read_statistics the snapshot holds the
	// server's pending backlog of the database.
	Progress func(Progress)
	// WaitDelivered makes Run wait, after the last request, until the
	// server's pending backlog of the database is 0 (polling GET /v1/stats,
	// which needs read_statistics) and report the delivery in
	// Report.Delivery. A token without read_statistics is refused with
	// ErrNoStatistics before any request is sent.
	WaitDelivered bool
	// WaitTimeout bounds the wait for the backlog to drain
	// (DefaultWaitTimeout).
	WaitTimeout time.Duration
	// MetricsAddress is the server's Prometheus endpoint ("127.0.0.1:9464"
	// or a URL; loopback only). With WaitDelivered, the commit→archived lag
	// percentiles come from the change of its riffdb_outbox_delivery_lag_seconds
	// histogram over the run; empty means the lag is not reported.
	MetricsAddress string

	// scheduled, when set, is called once the open loop has queued its last
	// request (tests of coordinated-omission accounting).
	scheduled func()
	// now and tick replace the clock and the ProgressInterval ticker of
	// the progress and delivery loops (tests).
	now  func() time.Time
	tick <-chan time.Time
}

// settings is a validated Config with defaults applied.
type settings struct {
	Config
	base    string // server base URL, without a trailing slash
	metrics string // metrics URL, "" without MetricsAddress
	target  string // full command URL
	// clientAttrs are the attributes every client span starts with.
	clientAttrs []attribute.KeyValue
	parts       []string
	runID       string
	closed      bool
	template    string
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}

func (c Config) validate() (*settings, error) {
	s := &settings{Config: c}
	s.Database = cmp.Or(c.Database, DefaultDatabase)
	s.Command = cmp.Or(c.Command, DefaultCommand)
	s.Requests = cmp.Or(c.Requests, DefaultRequests)
	s.Concurrency = cmp.Or(c.Concurrency, DefaultConcurrency)
	s.Duration = cmp.Or(c.Duration, DefaultDuration)
	s.RequestTimeout = cmp.Or(c.RequestTimeout, DefaultRequestTimeout)
	s.SampleRatio = cmp.Or(c.SampleRatio, DefaultSampleRatio)
	s.WaitTimeout = cmp.Or(c.WaitTimeout, DefaultWaitTimeout)
	s.template = cmp.Or(c.InputTemplate, DefaultInputTemplate)
	s.closed = c.Rate == 0
	switch {
	case s.Requests < 0:
		return nil, invalid("the request count must be positive")
	case s.Concurrency < 0:
		return nil, invalid("the concurrency must be positive")
	case s.Concurrency > 10000:
		return nil, invalid("the concurrency must be at most 10000")
	case s.Duration < 0 || s.RequestTimeout < 0 || s.WaitTimeout < 0:
		return nil, invalid("durations must be positive")
	case math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) || c.Rate < 0:
		return nil, invalid("the rate must be a positive number of requests per second")
	case math.IsNaN(s.SampleRatio) || s.SampleRatio < 0 || s.SampleRatio > 1:
		return nil, invalid("the sample ratio must be in (0, 1]")
	case math.IsNaN(c.RetryRatio) || c.RetryRatio < 0 || c.RetryRatio > 1:
		return nil, invalid("the retry ratio must be in [0, 1]")
	case s.Token == "":
		return nil, invalid("no token")
	}
	if s.Logger == nil {
		s.Logger = zap.NewNop()
	}
	if !s.closed && time.Duration(float64(time.Second)/c.Rate) <= 0 {
		return nil, invalid("the rate is too high")
	}
	u, err := targetURL(c.Address, "server")
	if err != nil {
		return nil, err
	}
	s.base = strings.TrimRight(u.String(), "/")
	s.target = s.base + "/v1/databases/" + url.PathEscape(s.Database) + "/commands/" + url.PathEscape(s.Command)
	s.clientAttrs = clientSpanAttrs(u, s.target)
	if c.MetricsAddress != "" {
		m, err := targetURL(c.MetricsAddress, "metrics")
		if err != nil {
			return nil, err
		}
		if m.Path == "" || m.Path == "/" {
			m.Path = "/metrics"
		}
		s.metrics = m.String()
	}
	if s.now == nil {
		s.now = time.Now
	}
	if c.TracerProvider == nil && c.OTLPEndpoint != "" {
		host, _, err := net.SplitHostPort(c.OTLPEndpoint)
		if err != nil {
			return nil, invalid("the OTLP endpoint must be host:port")
		}
		if !loopbackHost(host) {
			return nil, ErrNotLoopback
		}
	}
	s.runID = c.RunID
	if s.runID == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		s.runID = hex.EncodeToString(b[:])
	}
	if len(s.runID) > 64 || strings.IndexFunc(s.runID, func(r rune) bool {
		return !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) >= 0 {
		return nil, invalid("the run id may hold only letters, digits, '-' and '_' (at most 64)")
	}
	if !strings.Contains(s.template, "{{n}}") {
		return nil, invalid("the input template must contain {{n}} so that every input is unique")
	}
	s.parts = strings.Split(strings.ReplaceAll(s.template, "{{run}}", s.runID), "{{n}}")
	probe := bytes.TrimSpace(s.input(nil, 0))
	if !json.Valid(probe) || probe[0] != '{' {
		return nil, invalid("the input template must be a JSON object once {{n}} is replaced by a number")
	}
	return s, nil
}

// targetURL parses and checks an address; role names it in errors ("server",
// "metrics").
func targetURL(addr, role string) (*url.URL, error) {
	if addr == "" {
		return nil, invalid("no %s address", role)
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" {
		return nil, invalid("the %s address is not a valid URL", role)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, invalid("the %s address must be an http or https URL", role)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, invalid("the %s address must not carry credentials, a query or a fragment", role)
	}
	if !loopbackHost(u.Hostname()) {
		return nil, ErrNotLoopback
	}
	return u, nil
}

// loopbackHost reports whether host is "localhost" or a loopback IP literal.
func loopbackHost(host string) bool {
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// input appends request n's input to dst.
func (s *settings) input(dst []byte, n int64) []byte {
	for i, p := range s.parts {
		if i > 0 {
			dst = fmt.Appendf(dst, "%d", n)
		}
		dst = append(dst, p...)
	}
	return dst
}

// body returns request n's JSON body.
func (s *settings) body(n int64) []byte {
	b := make([]byte, 0, len(s.template)+64)
	b = append(b, `{"input":`...)
	b = s.input(b, n)
	b = append(b, `,"idempotency_key":"`...)
	b = append(b, s.key(n)...)
	return append(b, `"}`...)
}

// retried reports whether request n is sent a second time (RetryRatio).
func (s *settings) retried(n int64) bool {
	return s.RetryRatio > 0 && math.Floor(float64(n+1)*s.RetryRatio) > math.Floor(float64(n)*s.RetryRatio)
}

// key returns request n's idempotency key.
func (s *settings) key(n int64) string { return fmt.Sprintf("lt-%s-%d", s.runID, n) }
