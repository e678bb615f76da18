// Package connlimit caps the connections a listener keeps open, in all and
// per peer, and decides which connection goes when the cap is reached.
//
// A connection holds a descriptor for as long as it is open; without a cap,
// idle clients could hold every descriptor of the process and starve its
// storage engines (server/listen.go derives the caps from the descriptor
// limit). A cap alone, though, lets whoever holds it lock everyone else out:
// 4,200 idle sockets from one client made 18 of 20 fresh probes fail at the
// cap of 4,096. So the listener also tells its connections apart:
//
//   - A connection is trusted once the server says so (Conn.Trust): riffdb
//     trusts a connection after a request with a valid token. Trusted
//     connections are never closed to make room; they are bounded by the
//     HTTP server's idle timeout and maximum connection age instead.
//   - Every other connection is untrusted and waits in least-recently-active
//     order (accepted, or last request started: Conn.RequestStarted).
//
// A new connection that finds its peer at the per-peer cap closes that
// peer's least recently active untrusted connection to take its place; if
// all of the peer's connections are trusted, the new one is closed on
// arrival (reason peer_cap). A new connection that finds the listener at its
// cap closes the listener's least recently active untrusted connection; if
// every connection is trusted, the new one is closed on arrival (reason
// listener_cap). So idle unauthenticated sockets, from one address or from
// many, can never keep out a new client or an authenticated one: the
// newcomer takes the place of the longest idle of them. What one address
// can hold at all is bounded by the per-peer cap, trusted or not.
//
// A peer is an IPv4 address or an IPv6 /64 prefix (one host commonly owns a
// whole /64, so counting single IPv6 addresses would bound nothing).
// Loopback peers are not exempt: other local users are outside riffdb's
// trust (SECURITY.md), and a reverse proxy on the same host needs the
// per-peer cap raised to the listener's cap.
//
// A connection that does not start a request within Options.FirstRequest of
// its arrival is closed. HTTP/1 has its own header timeout; HTTP/2 (over
// TLS) has none for the first request: net/http keeps a connection that
// sent its preface and nothing else open for the server's whole idle
// timeout.
//
// A connection closed to make room or at a cap is closed at once, so that
// the client sees a refusal instead of waiting in the kernel's backlog, and
// its descriptor is freed immediately. No goroutine runs per connection: the
// first-request timer is a time.AfterFunc.
package connlimit
