package connlimit

import (
	"container/list"
	"net"
	"time"
)

// Conn is a connection accepted by a Listener. It holds its place until its
// first Close, or until the listener closes it to make room (see the
// package documentation). Its methods are safe for concurrent use.
type Conn struct {
	net.Conn
	l    *Listener
	peer *peer

	// Guarded by l.mu.
	released, trusted bool
	inAll, inPeer     *list.Element // nil once trusted or released
	timer             *time.Timer   // the first-request timer, or nil
}

// From returns the *Conn under c: c itself, or the connection a
// *tls.Conn (or any wrapper with a NetConn method) wraps. It returns nil
// for a connection that no Listener accepted.
func From(c net.Conn) *Conn {
	for c != nil {
		if lc, ok := c.(*Conn); ok {
			return lc
		}
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = w.NetConn()
	}
	return nil
}

// Close closes the connection and gives its place back.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.l.mu.Lock()
	c.l.release(c)
	c.l.mu.Unlock()
	return err
}

// RequestStarted records that a request arrived on c: it stops the
// first-request timer and makes c the most recently active of the
// untrusted connections, the last to be closed to make room. A nil c is
// ignored.
func (c *Conn) RequestStarted() {
	if c == nil {
		return
	}
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	if c.inAll != nil {
		c.l.untrusted.MoveToBack(c.inAll)
		c.peer.untrusted.MoveToBack(c.inPeer)
	}
}

// Trust records that c carried an authenticated request: it is never
// closed to make room for another connection. A nil c is ignored.
func (c *Conn) Trust() {
	if c == nil {
		return
	}
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if c.trusted || c.released {
		return
	}
	c.trusted = true
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	c.l.dequeue(c)
}

// Trusted reports whether Trust was called on c.
func (c *Conn) Trusted() bool {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	return c.trusted
}

// expire closes c when no request started within the listener's
// FirstRequest.
func (c *Conn) expire() {
	c.l.mu.Lock()
	expired := c.timer != nil && !c.released
	c.l.mu.Unlock()
	if expired {
		_ = c.Close()
	}
}
