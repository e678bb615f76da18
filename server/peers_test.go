package server

import (
	"bytes"
	"context"
	"net"
	"net/http"
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
