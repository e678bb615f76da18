//go:build linux

package loadtest_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/riffdb/riffdb/loadtest"
)

// TestEachRequestIsOneSegment: the load generator writes each request, its
// headers and its body, with one system call, so the server receives it as
// one TCP segment. A body net/http cannot tell is in memory (one wrapped by
// otelhttp's transport, as it was until #47) makes it flush the headers
// first and write the body with a second call: two segments, and twice the
// client's and the loopback's work per request, which made the generator
// the limit of the do-nothing server's measurement. The server counts the
// data segments it received (TCP_INFO) on each connection at each request.
func TestEachRequestIsOneSegment(t *testing.T) {
	var (
		mu   sync.Mutex
		segs = map[net.Conn]uint32{} // data segments received, as of the connection's last request
	)
	// The count is read in the handler, once the request's body was read
	// and before its response is written: the connection is open then, and
	// the client sends nothing more on it until the response arrives. (Read
	// when the connection turned idle, it raced with the client closing
	// its idle connections at the end of the run.)
	type connKey struct{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		c := r.Context().Value(connKey{}).(*net.TCPConn)
		raw, err := c.SyscallConn()
		if err != nil {
			t.Error(err)
			return
		}
		var (
			info    *unix.TCPInfo
			infoErr error
		)
		if err := raw.Control(func(fd uintptr) {
			info, infoErr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		}); err != nil || infoErr != nil {
			t.Errorf("TCP_INFO: %v", errors.Join(err, infoErr))
			return
		}
		mu.Lock()
		segs[c] = info.Data_segs_in
		mu.Unlock()
		_, _ = io.WriteString(w, `{"commit_sequence":1,"replayed":false}`)
	}))
	srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, c)
	}
	srv.Start()
	defer srv.Close()
	const requests = 60
	rep, err := loadtest.Run(t.Context(), loadtest.Config{Address: srv.URL, Token: "tok", Requests: requests, Concurrency: 3})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Succeeded != requests {
		t.Fatalf("%d of %d requests succeeded: %v", rep.Succeeded, requests, rep.ErrorsByStatus)
	}
	mu.Lock()
	defer mu.Unlock()
	var total uint32
	for _, n := range segs {
		total += n
	}
	if total != requests {
		t.Fatalf("the server received %d data segments over %d connections for %d requests, want one per request", total, len(segs), requests)
	}
}
