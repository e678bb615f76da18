package connlimit_test

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/riffdb/riffdb/internal/hygiene/connlimit"
)

// setup caps a loopback listener as opts say and returns it with the
// channel its accepted connections arrive on.
func setup(t *testing.T, opts connlimit.Options) (*connlimit.Listener, <-chan *connlimit.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := connlimit.New(ln, opts)
	accepted := make(chan *connlimit.Conn, 64)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c.(*connlimit.Conn)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		for c := range accepted {
			c.Close()
		}
	})
	return l, accepted
}

// dial connects to l from the loopback address from (127.0.0.1,
// 127.0.0.2, …: Linux routes all of 127/8 to lo).
func dial(t *testing.T, l *connlimit.Listener, from string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// next returns the next accepted connection.
func next(t *testing.T, accepted <-chan *connlimit.Conn) *connlimit.Conn {
	t.Helper()
	select {
	case c := <-accepted:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no connection accepted within 10 s")
		return nil
	}
}

// closedByServer reports whether the server closed c (a read ends in EOF
// or a reset) rather than keeping it open for wait.
func closedByServer(c net.Conn, wait time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// waitStats waits until the listener's counts satisfy ok: the listener
// closes a refused connection after the client's dial returned.
func waitStats(t *testing.T, l *connlimit.Listener, ok func(connlimit.Stats) bool) connlimit.Stats {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := l.Stats()
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("counts %+v", s)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestPeerCapRefusesTheNextOfTrustedConnections: a peer holding its cap of
// authenticated connections is refused the next one; another address is
// not.
func TestPeerCapRefusesTheNextOfTrustedConnections(t *testing.T) {
	l, accepted := setup(t, connlimit.Options{Name: "api", Max: 10, MaxPerPeer: 3})
	for range 3 {
		dial(t, l, "127.0.0.1")
		next(t, accepted).Trust()
	}
	over := dial(t, l, "127.0.0.1")
	if !closedByServer(over, 5*time.Second) {
		t.Fatal("the 4th connection from one address was kept open over a per-peer cap of 3")
	}
	s := waitStats(t, l, func(s connlimit.Stats) bool { return s.RejectedPeerCap == 1 })
	if s.Active != 3 || s.Evicted != 0 || s.RejectedListenerCap != 0 {
		t.Fatalf("counts %+v", s)
	}
	other := dial(t, l, "127.0.0.2")
	next(t, accepted)
	if closedByServer(other, 100*time.Millisecond) {
		t.Fatal("another address was refused")
	}
}

// TestPeerCapClosesThePeersLeastRecentlyActive: a peer at its cap that
// opens another connection loses its own longest idle unauthenticated one,
// never an authenticated one or another peer's.
func TestPeerCapClosesThePeersLeastRecentlyActive(t *testing.T) {
	l, accepted := setup(t, connlimit.Options{Name: "api", Max: 10, MaxPerPeer: 3})
	otherClient := dial(t, l, "127.0.0.2")
	next(t, accepted)
	var clients []net.Conn
	var conns []*connlimit.Conn
	for range 3 {
		clients = append(clients, dial(t, l, "127.0.0.1"))
		conns = append(conns, next(t, accepted))
	}
	conns[0].Trust()
	conns[1].RequestStarted() // now more recently active than conns[2]
	dial(t, l, "127.0.0.1")
	next(t, accepted)
	if !closedByServer(clients[2], 5*time.Second) {
		t.Fatal("the least recently active unauthenticated connection was kept")
	}
	for i, c := range []net.Conn{clients[0], clients[1], otherClient} {
		if closedByServer(c, 50*time.Millisecond) {
			t.Fatalf("connection %d was closed", i)
		}
	}
	if s := l.Stats(); s.Active != 4 || s.Evicted != 1 || s.RejectedPeerCap != 0 {
		t.Fatalf("counts %+v", s)
	}
}

// TestListenerCapMakesRoomForANewcomer: idle unauthenticated connections
// from one address that fill the listener are closed, oldest first, to let
// others in; once every connection is authenticated, a newcomer is refused.
func TestListenerCapMakesRoomForANewcomer(t *testing.T) {
	l, accepted := setup(t, connlimit.Options{Name: "api", Max: 4})
	var idle []net.Conn
	for range 4 {
		idle = append(idle, dial(t, l, "127.0.0.1"))
		next(t, accepted)
	}
	for i := range 4 {
		dial(t, l, "127.0.0.2")
		next(t, accepted).Trust()
		if !closedByServer(idle[i], 5*time.Second) {
			t.Fatalf("idle connection %d was kept for a newcomer", i)
		}
	}
	over := dial(t, l, "127.0.0.3")
	if !closedByServer(over, 5*time.Second) {
		t.Fatal("a connection over a cap of authenticated connections was kept")
	}
	s := waitStats(t, l, func(s connlimit.Stats) bool { return s.RejectedListenerCap == 1 })
	if s.Active != 4 || s.Evicted != 4 {
		t.Fatalf("counts %+v", s)
	}
}

// TestFirstRequestTimeout: a connection that starts no request in time is
// closed; one that started a request is not.
func TestFirstRequestTimeout(t *testing.T) {
	l, accepted := setup(t, connlimit.Options{Name: "api", Max: 4, FirstRequest: 100 * time.Millisecond})
	silent := dial(t, l, "127.0.0.1")
	next(t, accepted)
	busy := dial(t, l, "127.0.0.1")
	next(t, accepted).RequestStarted()
	if !closedByServer(silent, 5*time.Second) {
		t.Fatal("a connection without a request outlived the first-request timeout")
	}
	if closedByServer(busy, 300*time.Millisecond) {
		t.Fatal("a connection that started a request was closed")
	}
	waitStats(t, l, func(s connlimit.Stats) bool { return s.Active == 1 })
}

// TestFromUnwraps: From finds the listener's connection under a wrapper
// with NetConn (as *tls.Conn is).
func TestFromUnwraps(t *testing.T) {
	l, accepted := setup(t, connlimit.Options{Name: "api", Max: 1})
	dial(t, l, "127.0.0.1")
	c := next(t, accepted)
	if got := connlimit.From(wrapped{c}); got != c {
		t.Fatalf("From(wrapped) = %v", got)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if connlimit.From(a) != nil {
		t.Fatal("From found a connection no listener accepted")
	}
	var nilConn *connlimit.Conn
	nilConn.Trust()
	nilConn.RequestStarted()
}

type wrapped struct{ net.Conn }

func (w wrapped) NetConn() net.Conn { return w.Conn }
