package connlimit

import (
	"container/list"
	"net"
	"net/netip"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/riffdb/riffdb/internal/hygiene/ratelog"
)

// Reasons a connection is closed on arrival, as reported in Stats and in
// the rejected-connections metric's reason attribute.
const (
	// ReasonListenerCap: the listener held its cap of connections, all of
	// them trusted.
	ReasonListenerCap = "listener_cap"
	// ReasonPeerCap: the peer held its per-peer cap of connections, all of
	// them trusted.
	ReasonPeerCap = "peer_cap"
)

// Options configure New.
type Options struct {
	// Name names the listener in log lines.
	Name string
	// Max is the most connections the listener keeps open; at least 1.
	Max int
	// MaxPerPeer is the most connections one peer (an IPv4 address, an
	// IPv6 /64) keeps open. 0, or more than Max, means Max.
	MaxPerPeer int
	// FirstRequest, if positive, is how long after its arrival a
	// connection may take to start its first request (Conn.RequestStarted)
	// before it is closed.
	FirstRequest time.Duration
	// Logger gets the rate-limited lines that say a cap was reached; nil
	// logs nothing.
	Logger *zap.Logger
}

// Stats counts what a Listener did.
type Stats struct {
	Active int64 // connections open now
	// RejectedListenerCap and RejectedPeerCap count connections closed on
	// arrival (ReasonListenerCap, ReasonPeerCap).
	RejectedListenerCap, RejectedPeerCap int64
	// Evicted counts untrusted connections closed to make room for a new
	// one.
	Evicted int64
}

// Listener accepts connections within its caps (see the package
// documentation). It is safe for concurrent use; Accept is meant to be
// called from one goroutine, as net/http does.
type Listener struct {
	net.Listener
	name         string
	max, perPeer int
	firstRequest time.Duration
	log          *ratelog.Logger

	mu        sync.Mutex
	stats     Stats
	untrusted list.List // of *Conn, least recently active first
	peers     map[netip.Addr]*peer
}

// peer is what the listener holds for one peer address.
type peer struct {
	key       netip.Addr
	open      int
	untrusted list.List // of *Conn, least recently active first
}

// New caps ln as opts say.
func New(ln net.Listener, opts Options) *Listener {
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	max := max(opts.Max, 1)
	perPeer := opts.MaxPerPeer
	if perPeer <= 0 || perPeer > max {
		perPeer = max
	}
	return &Listener{Listener: ln, name: opts.Name, max: max, perPeer: perPeer, firstRequest: opts.FirstRequest,
		peers: make(map[netip.Addr]*peer),
		log: ratelog.New(log.With(zap.String("listener", opts.Name), zap.Int("limit", max), zap.Int("peer_limit", perPeer)),
			nil, "connection limit reached", ratelog.Options{})}
}

// Name returns the listener's name.
func (l *Listener) Name() string { return l.name }

// Max returns the cap.
func (l *Listener) Max() int64 { return int64(l.max) }

// MaxPerPeer returns the per-peer cap.
func (l *Listener) MaxPerPeer() int64 { return int64(l.perPeer) }

// Active returns how many accepted connections are open.
func (l *Listener) Active() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats.Active
}

// Stats returns the listener's counts.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// Accept implements net.Listener. The connections it returns are *Conn.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		raw, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c := l.admit(raw); c != nil {
			return c, nil
		}
	}
}

// admit takes raw in, making room for it if it must, or closes it and
// returns nil.
func (l *Listener) admit(raw net.Conn) *Conn {
	key := peerOf(raw.RemoteAddr())
	l.mu.Lock()
	p := l.peers[key]
	var victim *Conn
	refused := ""
	switch {
	case p != nil && p.open >= l.perPeer:
		if victim = front(&p.untrusted); victim == nil {
			refused = ReasonPeerCap
			l.stats.RejectedPeerCap++
		}
	case l.stats.Active >= int64(l.max):
		if victim = front(&l.untrusted); victim == nil {
			refused = ReasonListenerCap
			l.stats.RejectedListenerCap++
		}
	}
	if victim != nil {
		l.release(victim)
		l.stats.Evicted++
		p = l.peers[key] // release may have removed the peer
	}
	var c *Conn
	if refused == "" {
		if p == nil {
			p = &peer{key: key}
			l.peers[key] = p
		}
		c = &Conn{Conn: raw, l: l, peer: p}
		p.open++
		l.stats.Active++
		c.inAll = l.untrusted.PushBack(c)
		c.inPeer = p.untrusted.PushBack(c)
		if l.firstRequest > 0 {
			c.timer = time.AfterFunc(l.firstRequest, c.expire)
		}
	}
	l.mu.Unlock()

	switch {
	case refused == ReasonPeerCap:
		_ = raw.Close()
		l.log.Report(ReasonPeerCap, "peer "+key.String()+" holds its cap of connections, all of them authenticated: refused a new one")
	case refused == ReasonListenerCap:
		_ = raw.Close()
		l.log.Report(ReasonListenerCap, "the listener holds its cap of connections, all of them authenticated: refused a new one")
	case victim != nil:
		_ = victim.Conn.Close()
		l.log.Report("evicted", "a cap was reached: closed the least recently active unauthenticated connection to make room")
	}
	return c
}

// front returns the first connection of q, or nil.
func front(q *list.List) *Conn {
	if e := q.Front(); e != nil {
		return e.Value.(*Conn)
	}
	return nil
}

// release gives c's place back. It is called with l.mu held, once per
// connection.
func (l *Listener) release(c *Conn) {
	if c.released {
		return
	}
	c.released = true
	if c.timer != nil {
		c.timer.Stop()
	}
	l.stats.Active--
	c.peer.open--
	l.dequeue(c)
	if c.peer.open == 0 {
		delete(l.peers, c.peer.key)
	}
}

// dequeue takes c out of the untrusted queues. It is called with l.mu held.
func (l *Listener) dequeue(c *Conn) {
	if c.inAll != nil {
		l.untrusted.Remove(c.inAll)
		c.peer.untrusted.Remove(c.inPeer)
		c.inAll, c.inPeer = nil, nil
	}
}

// peerOf returns the peer an address counts against: an IPv4 address, or
// an IPv6 address's /64 prefix. IPv4-mapped IPv6 addresses count as IPv4.
// An address that is not an IP (a Unix socket) is the zero peer.
func peerOf(a net.Addr) netip.Addr {
	var ip netip.Addr
	if t, ok := a.(*net.TCPAddr); ok {
		ip, _ = netip.AddrFromSlice(t.IP)
	} else if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		ip = ap.Addr()
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		if p, err := ip.Prefix(64); err == nil {
			return p.Addr()
		}
	}
	return ip
}
