// Package connlimit caps the connections a listener keeps open.
//
// A connection holds a descriptor for as long as it is open; without a cap,
// idle clients could hold every descriptor of the process and starve its
// storage engines (server/listen.go derives the caps from the descriptor
// limit). A connection beyond the cap is accepted and closed at once, so
// that the client sees a refusal instead of waiting in the kernel's backlog,
// and its descriptor is freed immediately.
package connlimit

import (
	"net"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/riffdb/riffdb/internal/ratelog"
)

// Listener accepts at most Max connections at a time. It is safe for
// concurrent use.
type Listener struct {
	net.Listener
	name     string
	max      int64
	active   atomic.Int64
	rejected atomic.Int64
	log      *ratelog.Logger
}

// New caps ln at max open connections. name names the listener in the log
// line (rate-limited) that says the cap was reached.
func New(ln net.Listener, name string, max int, log *zap.Logger) *Listener {
	return &Listener{Listener: ln, name: name, max: int64(max),
		log: ratelog.New(log.With(zap.String("listener", name), zap.Int("limit", max)), nil, "connection limit reached: refusing new connections", ratelog.Options{})}
}

// Name returns the listener's name.
func (l *Listener) Name() string { return l.name }

// Max returns the cap.
func (l *Listener) Max() int64 { return l.max }

// Active returns how many accepted connections are open.
func (l *Listener) Active() int64 { return l.active.Load() }

// Rejected returns how many connections were closed on arrival because the
// listener held its cap.
func (l *Listener) Rejected() int64 { return l.rejected.Load() }

// Accept implements net.Listener.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.active.Add(1) > l.max {
			l.active.Add(-1)
			l.rejected.Add(1)
			_ = c.Close()
			l.log.Report("cap", "the listener holds its cap of connections")
			continue
		}
		return &conn{Conn: c, l: l}, nil
	}
}

// conn gives its slot back on its first Close.
type conn struct {
	net.Conn
	l    *Listener
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.active.Add(-1) })
	return err
}
