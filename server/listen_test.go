package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/internal/hygiene/connlimit"
)

// startDev starts the development configuration under a temporary folder,
// after edit (if any) changed its configuration, and returns the server and
// its all-permission token.
func startDev(t *testing.T, edit func(*config.Config)) (*Server, string) {
	t.Helper()
	cfg, token, err := DevSetup(filepath.Join(t.TempDir(), "dev"), nil, config.Overrides{Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(cfg)
	}
	s, err := New(context.Background(), Options{Config: cfg, LogOutput: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s, token
}

func TestConnectionLimitsComeFromTheDescriptorLimit(t *testing.T) {
	one := &config.Config{Databases: make([]config.Database, 1)}
	many := &config.Config{Databases: make([]config.Database, 32)}
	for _, tc := range []struct {
		cfg                  *config.Config
		nofile               uint64
		wantAPI, wantMetrics int
	}{
		{one, 1 << 20, maxDerivedAPIConnections, maxDerivedMetricsConnections},
		{one, 1024, 1024 - 192 - 64, 64},
		{one, 256, 64 - 8, 8},
		{many, 65536, maxDerivedAPIConnections, maxDerivedMetricsConnections},
	} {
		api, metrics, err := connectionLimits(tc.cfg, tc.nofile)
		if err != nil || api != tc.wantAPI || metrics != tc.wantMetrics {
			t.Errorf("%d databases, limit %d: got %d, %d, %v; want %d, %d", len(tc.cfg.Databases), tc.nofile, api, metrics, err, tc.wantAPI, tc.wantMetrics)
		}
		if reserve := uint64(fixedReserve + perDatabaseReserve*len(tc.cfg.Databases)); uint64(api+metrics)+reserve > tc.nofile {
			t.Errorf("limit %d: %d+%d connections and %d reserved exceed it", tc.nofile, api, metrics, reserve)
		}
	}
	// Too few descriptors for 32 databases, and explicit caps that do not
	// fit: refused, naming the options.
	if _, _, err := connectionLimits(many, 1024); err == nil || !strings.Contains(err.Error(), "raise the limit") {
		t.Errorf("32 databases under 1024 descriptors: %v", err)
	}
	tooMany := &config.Config{Databases: make([]config.Database, 1), Server: config.Server{MaxConnections: 5000}}
	_, _, err := connectionLimits(tooMany, 4096)
	if err == nil || !strings.Contains(err.Error(), "server.max_connections (5000)") {
		t.Errorf("explicit cap over the limit: %v", err)
	}
	// The per-peer cap: a sixteenth of the API's, at least 32, never more
	// than the API's; or as configured.
	for _, tc := range []struct{ perPeer, api, want int }{{0, 4096, 256}, {0, 56, 32}, {0, 8, 8}, {5, 4096, 5}, {100, 50, 50}} {
		cfg := &config.Config{Server: config.Server{MaxConnectionsPerPeer: tc.perPeer}}
		if got := peerLimit(cfg, tc.api); got != tc.want {
			t.Errorf("per-peer cap for %d of %d: %d, want %d", tc.perPeer, tc.api, got, tc.want)
		}
	}
	explicit := &config.Config{Databases: make([]config.Database, 1), Server: config.Server{MaxConnections: 10, MetricsMaxConnections: 3}}
	if api, metrics, err := connectionLimits(explicit, 4096); api != 10 || metrics != 3 || err != nil {
		t.Errorf("explicit caps: %d, %d, %v", api, metrics, err)
	}
}

// TestConnectionsBeyondTheCapAreClosed holds the API's cap of
// authenticated keep-alive connections: the next client is disconnected at
// once (not left in the backlog), and is served again as soon as one held
// connection goes. Idle connections that never authenticated do not keep
// a newcomer out: the oldest is closed to make room.
func TestConnectionsBeyondTheCapAreClosed(t *testing.T) {
	s, token := startDev(t, func(c *config.Config) { c.Server.MaxConnections, c.Server.MetricsMaxConnections = 4, 2 })
	var held []net.Conn
	for i := range 4 {
		held = append(held, authenticatedConn(t, s.APIAddr(), fmt.Sprintf("127.0.0.%d", 1+i), token))
	}
	waitActive(t, s.apiLimit, 4)
	c, err := net.Dial("tcp", s.APIAddr())
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		t.Fatalf("a connection over the cap was not closed: %v", err)
	}
	c.Close()
	if got := s.apiLimit.Stats().RejectedListenerCap; got < 1 {
		t.Fatalf("rejected = %d", got)
	}
	body := scrapeMetrics(t, s)
	for _, want := range []string{`riffdb_server_connections{riffdb_listener="api"} 4`, `riffdb_server_connections_limit{riffdb_listener="api"} 4`,
		`riffdb_server_connections_rejected_total{riffdb_listener="api",riffdb_reason="listener_cap"} 1`,
		`riffdb_server_connections_rejected_total{riffdb_listener="api",riffdb_reason="peer_cap"} 0`,
		`riffdb_server_connections_evicted_total{riffdb_listener="api"} 0`,
		`riffdb_server_connections_limit{riffdb_listener="metrics"} 2`} {
		if !strings.Contains(body, "\n"+want+"\n") {
			t.Errorf("the scrape lacks %s", want)
		}
	}
	held[0].Close()
	waitActive(t, s.apiLimit, 3)
	code, _ := get(t, s.APIAddr(), "/v1/stats", token)
	if code != http.StatusOK {
		t.Fatalf("after a slot freed: %d", code)
	}
	// The metrics listener has its own cap. Its connections never
	// authenticate, so a scrape closes the longest idle one and is served.
	waitActive(t, s.metricsLimit, 0)
	var idle []net.Conn
	for range 2 {
		m, err := net.Dial("tcp", s.MetricsAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		idle = append(idle, m)
	}
	waitActive(t, s.metricsLimit, 2)
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + s.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatalf("a scrape over a cap of idle connections: %v", err)
	}
	resp.Body.Close()
	if !closedByServer(idle[0]) {
		t.Fatal("the oldest idle metrics connection was kept")
	}
	if got := s.metricsLimit.Stats().Evicted; got != 1 {
		t.Fatalf("metrics evicted = %d", got)
	}
}

// authenticatedConn opens a connection to addr from the loopback address
// from, sends one authenticated request on it and returns it, kept alive.
func authenticatedConn(t *testing.T, addr, from, token string) net.Conn {
	t.Helper()
	c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}).Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "GET /v1/stats HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", token)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("an authenticated request: %d, close %v", resp.StatusCode, resp.Close)
	}
	return c
}

// closedByServer reports whether the server closed c within 2 s, well
// before the 5 s header timeout would close an idle connection anyway.
func closedByServer(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := c.Read(make([]byte, 1))
	return err != nil && !isTimeout(err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func waitActive(t *testing.T, l *connlimit.Listener, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.Active() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%s listener: %d active connections, want %d", l.Name(), l.Active(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func get(t *testing.T, addr, path, token string) (int, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header
}

// TestUnauthenticatedRequestsDoNotKeepConnections: a liveness ping, a
// request to a route that takes no token, or a refused token closes its
// connection after the response; an authenticated request keeps it.
func TestUnauthenticatedRequestsDoNotKeepConnections(t *testing.T) {
	s, token := startDev(t, nil)
	for _, tc := range []struct {
		path, token string
		keep        bool
	}{
		{"/healthz", "", false},
		{"/v1/stats", "", false},
		{"/v1/stats", "rfd_" + strings.Repeat("A", 43), false},
		{"/v1/stats", token, true},
		{"/v1/health", token, true},
		{"/v1/databases/default/backups", token, true},
		{"/v1/databases/default/backups", "rfd_" + strings.Repeat("A", 43), false},
		// /healthz takes no token: whatever it is sent, it closes.
		{"/healthz", token, false},
		{"/healthz", "rfd_" + strings.Repeat("A", 43), false},
		{"/no/such/path", token, false},
	} {
		c, err := net.Dial("tcp", s.APIAddr())
		if err != nil {
			t.Fatal(err)
		}
		auth := ""
		if tc.token != "" {
			auth = "Authorization: Bearer " + tc.token + "\r\n"
		}
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n", tc.path, auth)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		_, err = br.ReadByte()
		closed := err == io.EOF
		if closed == tc.keep || resp.Close == tc.keep {
			t.Errorf("%s (token %v): connection closed=%v (resp.Close %v), want kept=%v", tc.path, tc.token != "", closed, resp.Close, tc.keep)
		}
		c.Close()
	}
}

// TestMetricsListenerIsBounded: the metrics listener has idle, read and
// header timeouts and a small header limit (on main it had none of the
// first two and the default 1 MiB header limit).
func TestMetricsListenerIsBounded(t *testing.T) {
	s, _ := startDev(t, nil)
	for name, h := range map[string]*http.Server{"api": s.api, "metrics": s.metrics} {
		if h.ReadHeaderTimeout <= 0 || h.ReadTimeout <= 0 || h.WriteTimeout <= 0 || h.IdleTimeout <= 0 || h.MaxHeaderBytes <= 0 || h.MaxHeaderBytes > 64<<10 {
			t.Errorf("%s listener is not bounded: %+v", name, h)
		}
		if h.ErrorLog == nil {
			t.Errorf("%s listener logs its errors to the standard logger", name)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+s.MetricsAddr()+"/metrics", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 100<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("a 100 KiB header on /metrics: %d", resp.StatusCode)
	}
}

// TestStopCutsOffASlowClientAfterTheGrace: a client that sends a request's
// headers and then stalls its body holds the handler until the read
// timeout (30 s); Stop waits for it only the configured grace.
func TestStopCutsOffASlowClientAfterTheGrace(t *testing.T) {
	s, token := startDev(t, func(c *config.Config) { c.Server.ShutdownGrace = 100 * time.Millisecond })
	c, err := net.Dial("tcp", s.APIAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/databases/default/commands/place_order HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"in", token)
	waitActive(t, s.apiLimit, 1)
	time.Sleep(50 * time.Millisecond) // let the handler start reading the body
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- s.Stop(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("Stop took %v with a grace of 100ms", time.Since(start))
	case <-time.After(20 * time.Second):
		t.Fatal("Stop waited for the slow client past the grace (the read timeout is 30 s)")
	}
}

func scrapeMetrics(t *testing.T, s *Server) string {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + s.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSlowHeadersAreCutOff: a client that sends its request line and then
// dribbles header bytes (slowloris) is disconnected once the header timeout
// (5 s) is over, however steadily it keeps sending.
func TestSlowHeadersAreCutOff(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: waits out the 5 s header timeout")
	}
	s, _ := startDev(t, nil)
	for _, addr := range []string{s.APIAddr(), s.MetricsAddr()} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var werr error
		for time.Since(start) < 20*time.Second {
			time.Sleep(200 * time.Millisecond)
			if _, werr = c.Write([]byte("a")); werr != nil {
				break
			}
			_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
			if _, err := c.Read(make([]byte, 512)); err != nil && !isTimeout(err) {
				werr = err
				break
			}
		}
		if werr == nil {
			t.Fatalf("%s: a slowloris client was still connected after 20 s", addr)
		}
		t.Logf("%s: cut off after %v (%v)", addr, time.Since(start).Round(100*time.Millisecond), werr)
	}
}

// TestHTTPErrorLogIsRateLimitedPerKind: a flood of one kind of http.Server
// error (a TLS handshake failure from ever new client ports) writes one
// line, and another kind still gets its own.
func TestHTTPErrorLogIsRateLimitedPerKind(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	l := newErrorLog(zap.New(core), "api")
	for i := range 1000 {
		l.Printf("http: TLS handshake error from 192.0.2.1:%d: EOF", 1024+i)
	}
	l.Printf("http: Accept error: accept tcp: too many open files; retrying in 5ms")
	if n := logs.Len(); n != 2 {
		t.Fatalf("%d lines for 1001 errors of two kinds, want 2: %v", n, logs.All())
	}
	for _, e := range logs.All() {
		if e.ContextMap()["listener"] != "api" {
			t.Errorf("line without its listener: %v", e.ContextMap())
		}
	}
}
