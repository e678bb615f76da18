package server

import (
	"crypto/tls"
	"net/http"
	"net/http/httptrace"
	"testing"
	"time"

	"github.com/riffdb/riffdb/config"
)

// TestIdleHTTP2ConnectionsAreClosedAtTheHeaderTimeout: over TLS, an HTTP/2
// connection that sends its preface and SETTINGS and then no request is
// closed at the header timeout (5 s; net/http alone keeps it for the idle
// timeout, 60 s), while an HTTP/2 client that authenticated keeps its
// connection across the same wait.
func TestIdleHTTP2ConnectionsAreClosedAtTheHeaderTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: waits out the 5 s header timeout")
	}
	certPath, keyPath, pool := writeCert(t, t.TempDir(), 0o600)
	s, token := startDev(t, func(c *config.Config) { c.Server.TLSCertPath, c.Server.TLSKeyPath = certPath, keyPath })

	start := time.Now()
	idle, err := tls.Dial("tcp", s.APIAddr(), &tls.Config{RootCAs: pool, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if p := idle.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("negotiated %q, want h2", p)
	}
	// The client preface, then an empty SETTINGS frame (length 0, type 4,
	// no flags, stream 0), then nothing.
	if _, err := idle.Write(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	stats := func() (proto int, reused bool) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "https://"+s.APIAddr()+"/v1/stats", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stats over HTTP/2: %d", resp.StatusCode)
		}
		return resp.ProtoMajor, reused
	}
	if proto, _ := stats(); proto != 2 {
		t.Fatalf("the client spoke HTTP/%d, want HTTP/2", proto)
	}

	// The server's SETTINGS, its window update and the ACK of ours arrive
	// first; then the connection must end, at the header timeout.
	_ = idle.SetReadDeadline(start.Add(15 * time.Second))
	buf := make([]byte, 4096)
	for {
		if _, err = idle.Read(buf); err != nil {
			break
		}
	}
	waited := time.Since(start)
	if isTimeout(err) {
		t.Fatalf("an HTTP/2 connection without a request was still open after %v", waited.Round(time.Second))
	}
	if waited < 4*time.Second || waited > 8*time.Second {
		t.Fatalf("an HTTP/2 connection without a request was closed after %v (%v), want the 5 s header timeout", waited, err)
	}
	t.Logf("closed after %v", waited.Round(100*time.Millisecond))

	// The authenticated client's connection outlived the header timeout.
	if proto, reused := stats(); proto != 2 || !reused {
		t.Fatalf("after the wait: HTTP/%d, connection reused %v; want the authenticated HTTP/2 connection kept", proto, reused)
	}
}
