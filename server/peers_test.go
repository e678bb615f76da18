package server

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/riffdb/riffdb/config"
)

// clientFrom returns an HTTP client whose connections come from the
// loopback address from (Linux routes all of 127.0.0.0/8 to lo).
func clientFrom(from string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
}

// TestIdleSocketsFromOneAddressLockNobodyOut: one address holds more idle
// sockets than the API's cap; a liveness probe and an authenticated
// command from another address are still served.
func TestIdleSocketsFromOneAddressLockNobodyOut(t *testing.T) {
	const apiCap = 8
	s, token := startDev(t, func(c *config.Config) { c.Server.MaxConnections = apiCap })
	for range apiCap + 4 {
		c, err := net.Dial("tcp", s.APIAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	waitActive(t, s.apiLimit, apiCap)
	other := clientFrom("127.0.0.2")
	for i := range 3 {
		resp, err := other.Get("http://" + s.APIAddr() + "/healthz")
		if err != nil {
			t.Fatalf("probe %d from another address: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("probe %d from another address: %d", i, resp.StatusCode)
		}
	}
	body := []byte(`{"input":{"order_id":"o-1","amount_cents":5},"idempotency_key":"k-1"}`)
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost,
		"http://"+s.APIAddr()+"/v1/databases/default/commands/place_order", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := other.Do(req)
	if err != nil {
		t.Fatalf("a command from another address: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a command from another address: %d", resp.StatusCode)
	}
}

// TestPeerCapRefusesTheNextConnection: one address holding
// server.max_connections_per_peer authenticated connections is refused the
// next one at once, while another address is served; an address over its
// cap with idle unauthenticated connections loses its own longest idle one
// instead.
func TestPeerCapRefusesTheNextConnection(t *testing.T) {
	s, token := startDev(t, func(c *config.Config) { c.Server.MaxConnections, c.Server.MaxConnectionsPerPeer = 10, 3 })
	for range 3 {
		authenticatedConn(t, s.APIAddr(), "127.0.0.1", token)
	}
	c, err := net.Dial("tcp", s.APIAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !closedByServer(c) {
		t.Fatal("the 4th connection from one address was kept open over a per-peer cap of 3")
	}
	if st := s.apiLimit.Stats(); st.RejectedPeerCap != 1 || st.Active != 3 {
		t.Fatalf("counts %+v", st)
	}
	if !strings.Contains(scrapeMetrics(t, s), "\n"+`riffdb_server_connections_rejected_total{riffdb_listener="api",riffdb_reason="peer_cap"} 1`+"\n") {
		t.Error("the scrape lacks the peer_cap refusal")
	}

	idle := make([]net.Conn, 3)
	for i := range idle {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
		if idle[i], err = d.Dial("tcp", s.APIAddr()); err != nil {
			t.Fatal(err)
		}
		defer idle[i].Close()
	}
	waitActive(t, s.apiLimit, 6)
	resp, err := clientFrom("127.0.0.2").Get("http://" + s.APIAddr() + "/healthz")
	if err != nil {
		t.Fatalf("a probe from an address over its cap of idle connections: %v", err)
	}
	resp.Body.Close()
	if !closedByServer(idle[0]) {
		t.Fatal("the address's longest idle connection was kept")
	}
	if st := s.apiLimit.Stats(); st.Evicted != 1 || st.RejectedPeerCap != 1 {
		t.Fatalf("counts %+v", st)
	}
}
