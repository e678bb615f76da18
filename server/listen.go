package server

import (
	"context"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/backupapi"
	"github.com/riffdb/riffdb/capability"
	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/internal/hygiene/connlimit"
	"github.com/riffdb/riffdb/internal/hygiene/ratelog"
	"github.com/riffdb/riffdb/internal/observe/attrkey"
	"github.com/riffdb/riffdb/outboxapi"
	"github.com/riffdb/riffdb/statsapi"
)

// Descriptor budget. A connection holds one descriptor for as long as it is
// open, so connections are capped per listener and the caps are taken out of
// the process's descriptor limit after a reserve for everything else: the
// listeners, logs, the credential store, and each database's two storage
// engines (write-ahead logs, manifests, locks, directories and their open
// tables). Without caps, idle clients could hold every descriptor and starve
// the storage engines, whose flushes then fail (EMFILE) until the clients
// leave.
const (
	fixedReserve       = 64  // descriptors kept for the process itself
	perDatabaseReserve = 128 // descriptors kept for each database's primary store and archive

	// tableFilesPerDatabase is the part of perDatabaseReserve given to the
	// table cache that every store of the process shares (storageFileCache):
	// the rest covers each store's write-ahead logs, manifest, lock,
	// directory and markers (Pebble counts 10 such files per store).
	tableFilesPerDatabase = perDatabaseReserve - 2*16

	maxDerivedAPIConnections     = 4096
	maxDerivedMetricsConnections = 64
	minAPIConnections            = 8
	minMetricsConnections        = 2

	// minDerivedPeerConnections is the least API connections one client
	// address may hold by default: a client's pool of keep-alive
	// connections plus fresh ones for its next requests.
	minDerivedPeerConnections = 32

	// apiHeaderTimeout bounds how long the API waits for a request's
	// headers, and for a new connection's first request (HTTP/2 too).
	apiHeaderTimeout = 5 * time.Second

	// maxConnectionAge bounds how long one keep-alive connection is reused:
	// past it the server answers with "Connection: close".
	maxConnectionAge = 10 * time.Minute
)

// connectionLimits returns the API and metrics connection caps for cfg and a
// process whose descriptor limit is nofile: the configured values, or, for
// 0, values derived from what is left of nofile after the reserve. It
// refuses caps that do not fit the limit, naming the options.
func connectionLimits(cfg *config.Config, nofile uint64) (api, metrics int, err error) {
	reserve := uint64(fixedReserve + perDatabaseReserve*len(cfg.Databases))
	var budget int
	if nofile > reserve {
		budget = int(min(nofile-reserve, 1<<30))
	}
	api, metrics = cfg.Server.MaxConnections, cfg.Server.MetricsMaxConnections
	if metrics == 0 {
		metrics = max(minMetricsConnections, min(maxDerivedMetricsConnections, budget/8))
	}
	if api == 0 {
		api = max(minAPIConnections, min(maxDerivedAPIConnections, budget-metrics))
	}
	if api+metrics > budget {
		return 0, 0, fmt.Errorf("the descriptor limit (%d) leaves %d descriptors for connections after %d reserved for %d database(s), "+
			"but server.max_connections (%d) and server.metrics_max_connections (%d) need %d: raise the limit (ulimit -n, LimitNOFILE=) or lower them",
			nofile, budget, reserve, len(cfg.Databases), api, metrics, api+metrics)
	}
	return api, metrics, nil
}

// peerLimit returns the API's per-peer cap for cfg and the API's cap api:
// server.max_connections_per_peer, or, for 0, a sixteenth of api, at least
// minDerivedPeerConnections; never more than api. A sixteenth leaves a
// client address room for a large pool while no single address can hold
// the listener: past its cap, its own idle unauthenticated connections
// make room for its new ones, and its authenticated ones are capped.
func peerLimit(cfg *config.Config, api int) int {
	n := cfg.Server.MaxConnectionsPerPeer
	if n == 0 {
		n = max(minDerivedPeerConnections, api/16)
	}
	return min(n, api)
}

// connStartKey is the context key under which connContext records when a
// connection was accepted; connKey the key of its *connlimit.Conn.
type (
	connStartKey struct{}
	connKey      struct{}
)

func connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(context.WithValue(ctx, connStartKey{}, time.Now()), connKey{}, connlimit.From(c))
}

// limitedConn returns the connection of r's context as its listener's
// connlimit.Conn, or nil.
func limitedConn(r *http.Request) *connlimit.Conn {
	c, _ := r.Context().Value(connKey{}).(*connlimit.Conn)
	return c
}

// markRequests tells the listener that a request started on its
// connection: the connection has begun its first request (the
// first-request timeout no longer applies) and is the last of the
// unauthenticated ones to be closed to make room.
func markRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limitedConn(r).RequestStarted()
		next.ServeHTTP(w, r)
	})
}

// keepAlive lets a connection be reused only after a request that
// authenticated, and only while the connection is younger than
// maxConnectionAge. Every other response carries "Connection: close": the
// /healthz probe, requests to routes that take no token (unknown paths and
// methods), requests without a bearer token and refused tokens (401). So
// nobody without a valid token can hold a connection past the idle timeout
// by pinging. It decides from the handler's status instead of
// authenticating the token itself: the handlers already do, and a second
// HMAC per request would be work done twice on the command path.
//
// A connection whose response it keeps alive (and that is not a 5xx) is
// trusted by the listener's cap (connlimit.Conn.Trust): it is never closed
// to make room for a newcomer, as unauthenticated connections are.
func (s *Server) keepAlive(next http.Handler) http.Handler {
	return markRequests(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start, _ := r.Context().Value(connStartKey{}).(time.Time)
		_, bearer := statsapi.BearerToken(r)
		keep := bearer && authenticatingRoute(r) && (start.IsZero() || time.Since(start) <= maxConnectionAge)
		next.ServeHTTP(&keepAliveWriter{ResponseWriter: w, keep: keep, conn: limitedConn(r)}, r)
	}))
}

// authenticatingRoute reports whether r goes to a handler that
// authenticates its bearer token: a command, a backup, /v1/stats,
// /v1/health, the outbox deliveries or a dead-letter redrive.
func authenticatingRoute(r *http.Request) bool {
	return isCommandRequest(r) || (backupapi.IsPath(r.URL.Path) && (r.Method == http.MethodGet || r.Method == http.MethodPost)) ||
		(outboxapi.IsPath(r.URL.Path) && r.Method == http.MethodGet) ||
		(outboxapi.IsRedrivePath(r.URL.Path) && r.Method == http.MethodPost) ||
		(r.Method == http.MethodGet && (r.URL.Path == "/v1/stats" || r.URL.Path == "/v1/health"))
}

// keepAliveWriter adds "Connection: close" to a response unless its request
// may keep the connection and the handler did not refuse the token.
type keepAliveWriter struct {
	http.ResponseWriter
	keep  bool
	wrote bool
	conn  *connlimit.Conn // nil outside a connlimit.Listener
	// authenticated is set, with capability, when the trace-context gate
	// authenticated the request's token (rememberCapability).
	authenticated bool
	capability    capability.Capability
}

func (w *keepAliveWriter) WriteHeader(code int) {
	if !w.wrote {
		w.wrote = true
		switch {
		case !w.keep || code == http.StatusUnauthorized:
			w.Header().Set("Connection", "close")
		case code < http.StatusInternalServerError:
			w.conn.Trust()
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *keepAliveWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap gives http.ResponseController the underlying writer.
func (w *keepAliveWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// newErrorLog returns the http.Server's ErrorLog for the listener name: TLS
// handshake failures, accept errors (EMFILE) and malformed requests are
// logged through zap at warn, rate-limited, instead of unbounded lines on
// stderr.
func newErrorLog(log *zap.Logger, name string) *stdlog.Logger {
	return ratelog.StdLogger(log.With(zap.String("listener", name)), "http server error")
}

// registerConnectionMetrics observes each listener's open connections, its
// cap and the connections it refused.
func (s *Server) registerConnectionMetrics() error {
	m := s.tel.MeterProvider.Meter("github.com/riffdb/riffdb/server")
	open, err := m.Int64ObservableGauge("riffdb.server.connections", metric.WithUnit("{connection}"),
		metric.WithDescription("Open connections of a listener (api or metrics)."))
	if err != nil {
		return err
	}
	limit, err := m.Int64ObservableGauge("riffdb.server.connections.limit", metric.WithUnit("{connection}"),
		metric.WithDescription("The most connections a listener keeps open (server.max_connections, server.metrics_max_connections)."))
	if err != nil {
		return err
	}
	rejected, err := m.Int64ObservableCounter("riffdb.server.connections.rejected", metric.WithUnit("{connection}"),
		metric.WithDescription("Connections closed on arrival because the listener (reason listener_cap) or their peer address (peer_cap) held its cap of authenticated connections."))
	if err != nil {
		return err
	}
	evicted, err := m.Int64ObservableCounter("riffdb.server.connections.evicted", metric.WithUnit("{connection}"),
		metric.WithDescription("Unauthenticated connections closed to make room for a new one at the listener's or the peer's cap."))
	if err != nil {
		return err
	}
	s.connReg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, l := range []*connlimit.Listener{s.apiLimit, s.metricsLimit} {
			name := attrkey.Listener.String(l.Name())
			st := l.Stats()
			o.ObserveInt64(open, st.Active, metric.WithAttributes(name))
			o.ObserveInt64(limit, l.Max(), metric.WithAttributes(name))
			o.ObserveInt64(rejected, st.RejectedListenerCap, metric.WithAttributes(name, attrkey.Reason.String(connlimit.ReasonListenerCap)))
			o.ObserveInt64(rejected, st.RejectedPeerCap, metric.WithAttributes(name, attrkey.Reason.String(connlimit.ReasonPeerCap)))
			o.ObserveInt64(evicted, st.Evicted, metric.WithAttributes(name))
		}
		return nil
	}, open, limit, rejected, evicted)
	return err
}

// storageFileCacheShards is the table cache's shard count: each shard
// holds its share of the capacity, so few shards keep that share useful
// for one database's tables.
const storageFileCacheShards = 4

// newStorageFileCache returns the table cache shared by the stores of n
// databases: tableFilesPerDatabase open table files per database, so that
// the stores together stay within the descriptors connectionLimits keeps
// for them, however many tables a growing archive or history has. A table
// beyond the capacity is reopened when read (its blocks stay in the block
// cache).
func newStorageFileCache(n int) *pebble.FileCache {
	return pebble.NewFileCache(storageFileCacheShards, max(1, n)*tableFilesPerDatabase)
}
