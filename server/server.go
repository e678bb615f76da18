package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/capability"
	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/internal/hygiene/connlimit"
	"github.com/riffdb/riffdb/internal/hygiene/pathless"
	"github.com/riffdb/riffdb/internal/process/cmalloc"
	"github.com/riffdb/riffdb/internal/process/gctune"
	"github.com/riffdb/riffdb/internal/process/membudget"
	"github.com/riffdb/riffdb/internal/process/procs"
	"github.com/riffdb/riffdb/internal/store/walfill"
	"github.com/riffdb/riffdb/outbox"
	"github.com/riffdb/riffdb/primary"
	"github.com/riffdb/riffdb/telemetry"
)

// Version is reported in telemetry resources and logs.
var Version = "0.1.0-dev"

// Options configure a Server.
type Options struct {
	Config    *config.Config
	LogOutput io.Writer // nil → stderr

	// indexGate holds every primary's undelivered index unbuilt until
	// closed (tests of the unbuilt state).
	indexGate <-chan struct{}
}

// Server is one running riffdb process.
type Server struct {
	cfg   *config.Config
	tel   *telemetry.Telemetry
	log   *zap.Logger
	creds *capability.Store
	dbs   []*database

	apiLn, metricsLn       net.Listener
	apiLimit, metricsLimit *connlimit.Listener // apiLn and metricsLn, capped
	api, metrics           *http.Server

	indexGate <-chan struct{}
	// memory divides server.memory_budget_bytes among the stores; cache is
	// the block cache the primaries share and archiveCache the one the
	// archives share (internal/process/membudget). The server holds a reference to
	// each until closeStores.
	memory       membudget.Split
	cache        *pebble.Cache
	archiveCache *pebble.Cache
	// fileCache is the one table cache they share, sized from the
	// descriptors reserved for the databases (listen.go); the server holds
	// a reference until closeStores.
	fileCache *pebble.FileCache
	// walGroup counts the WALs open in the server's stores: with at most
	// walfill.MaxFilledLogs of them (eight databases) they are zero-filled.
	// It is the server's, not the process's, so that two servers in one
	// process (tests, benchmarks) each behave as one server does.
	walGroup walfill.Group
	// newWorker creates each outbox worker; nil means outbox.New. Tests
	// make it fail to exercise attach's error path.
	newWorker func(outbox.Options) (*outbox.Worker, error)

	background     sync.WaitGroup // watch goroutines
	stopBackground context.CancelFunc

	fatal     chan error
	fatalOnce sync.Once
	stopOnce  sync.Once
	stopErr   error
	started   time.Time
	meterReg  metric.Registration
	connReg   metric.Registration // registerConnectionMetrics
}

// New opens every store and prepares the listeners. Nothing is served until
// Start. A failure to start is a *StartupError (see ErrListen and the other
// classes); by then everything New opened has been closed again, in reverse
// order, so that a retry — in this process or another — finds every store
// and address free.
func New(ctx context.Context, opts Options) (*Server, error) {
	cfg := opts.Config
	if cfg == nil {
		return nil, errors.New("server: no configuration")
	}
	if err := cfg.Validate(); err != nil {
		return nil, newStartupError(cfg, "", err)
	}
	if runtime.GOOS != "linux" {
		return nil, newStartupError(cfg, "", ErrUnsupportedPlatform)
	}
	setPrivateUmask()
	host, _ := os.Hostname()
	tel, err := telemetry.Setup(ctx, telemetry.Config{
		ServiceName: "riffdb", ServiceVersion: Version, InstanceID: fmt.Sprintf("%s:%d", host, os.Getpid()),
		OTLPEndpoint: cfg.Telemetry.OTLPEndpoint, SampleRatio: cfg.Telemetry.TraceSampleRatio,
		HonorSampledParent: cfg.Telemetry.HonorSampledParent,
		LogLevel:           cfg.Telemetry.LogLevel, LogOutput: opts.LogOutput,
	})
	if err != nil {
		return nil, newStartupError(cfg, "telemetry cannot be set up", err)
	}
	s := &Server{cfg: cfg, indexGate: opts.indexGate, tel: tel, log: tel.Logger, fatal: make(chan error, 1), started: time.Now()}
	if err := s.open(ctx); err != nil {
		// Neither the log nor the returned error names a path or carries a
		// stack (zap.Error would add a Pebble error's verbose form).
		s.log.Error("riffdb cannot start", zap.String("reason", err.Error()), zap.String("cause", pathless.Message(err.cause)))
		if cerr := s.abandon(ctx); cerr != nil {
			s.log.Warn("closing after the failed start", zap.Error(cerr))
		}
		_ = tel.Shutdown(context.WithoutCancel(ctx))
		return nil, err
	}
	return s, nil
}

// open opens the credential store and every database, registers the gauges
// and binds the listeners, recording each in s as soon as it is open so that
// abandon can close exactly what was opened.
func (s *Server) open(ctx context.Context) *StartupError {
	cfg := s.cfg
	creds, err := capability.OpenWith(cfg.Server.CredentialPath, capability.Options{Anchor: NewCredentialAnchor(cfg)})
	if errors.Is(err, primary.ErrCorrupt) {
		// A database's credential anchor is damaged: damage to the
		// database directory, refused as such (database_corrupt).
		return newStartupError(cfg, "the credential store cannot be checked against its anchors", err, ErrDatabase, primary.ErrCorrupt)
	}
	if err != nil {
		return newStartupError(cfg, "server.credential_path: the credential store cannot be opened", err, ErrCredentials)
	}
	s.creds = creds
	s.logAcceptedCredentials()
	archives := 0
	for _, dc := range cfg.Databases {
		if dc.Outbox != nil {
			archives++
		}
	}
	s.memory = divideMemory(cmp.Or(cfg.Server.MemoryBudgetBytes, config.DefaultMemoryBudgetBytes), len(cfg.Databases), archives)
	s.cache = pebble.NewCache(s.memory.PrimaryCacheBytes)
	if s.memory.ArchiveCacheBytes > 0 {
		s.archiveCache = pebble.NewCache(s.memory.ArchiveCacheBytes)
	}
	s.fileCache = newStorageFileCache(len(cfg.Databases))
	goProcs, goProcsSetting := procs.Set(len(cfg.Databases))
	gcSetting := gctune.Start()
	s.log.Info("storage memory budget divided", zap.Int64("budget_bytes", s.memory.Budget),
		zap.Int64("block_cache_bytes", s.memory.BlockBytes), zap.Int64("primary_block_cache_bytes", s.memory.PrimaryCacheBytes),
		zap.Int64("primary_block_cache_for_blocks_bytes", s.memory.PrimaryBlockBytes), zap.Int64("archive_block_cache_bytes", s.memory.ArchiveCacheBytes),
		zap.Int64("archive_block_cache_for_blocks_bytes", s.memory.ArchiveBlockBytes), zap.Uint64("primary_memtable_bytes", s.memory.PrimaryMemTable),
		zap.Uint64("archive_memtable_bytes", s.memory.ArchiveMemTable), zap.Int64("engine_bytes_at_most", s.memory.EngineBytes),
		zap.String("c_allocator", cmalloc.Setting()), zap.Int("go_max_procs", goProcs),
		zap.String("go_max_procs_setting", goProcsSetting), zap.String("go_gc_setting", gcSetting))
	for _, dc := range cfg.Databases {
		if err := context.Cause(ctx); err != nil {
			return interrupted(err)
		}
		d, err := s.openDatabase(ctx, dc)
		if err != nil {
			return err
		}
		s.dbs = append(s.dbs, d)
	}
	// A database created just now has no anchor yet.
	if err := creds.RecordGeneration(); err != nil {
		return newStartupError(cfg, "server.credential_path: the credential store's generation cannot be recorded", err, ErrCredentials)
	}
	if err := context.Cause(ctx); err != nil {
		return interrupted(err)
	}
	if err := s.registerGauges(); err != nil {
		return newStartupError(cfg, "metrics cannot be registered", err)
	}
	nofile, err := descriptorLimit()
	if err != nil {
		return newStartupError(cfg, "the descriptor limit cannot be read", err)
	}
	apiMax, metricsMax, err := connectionLimits(cfg, nofile)
	if err != nil {
		return newStartupError(cfg, "", err, config.ErrInvalid)
	}
	var tlsConfig *tls.Config
	if cfg.Server.TLSCertPath != "" {
		if tlsConfig, err = loadTLS(cfg.Server.TLSCertPath, cfg.Server.TLSKeyPath); err != nil {
			return newStartupError(cfg, "", err, ErrTLS)
		}
	}
	if s.apiLn, err = net.Listen("tcp", cfg.Server.Listen); err != nil {
		return newStartupError(cfg, "server.listen: cannot listen", err, ErrListen)
	}
	if s.metricsLn, err = net.Listen("tcp", cfg.Server.MetricsListen); err != nil {
		return newStartupError(cfg, "server.metrics_listen: cannot listen", err, ErrListen)
	}
	// A connection must start its first request within the header
	// timeout of its arrival. HTTP/1 needs no help (ReadHeaderTimeout);
	// net/http's HTTP/2 server has no first-request timeout and keeps a
	// connection that sent only its preface for the whole IdleTimeout.
	s.apiLimit = connlimit.New(s.apiLn, connlimit.Options{Name: "api", Max: apiMax, MaxPerPeer: peerLimit(cfg, apiMax),
		FirstRequest: apiHeaderTimeout, Logger: s.log})
	s.metricsLimit = connlimit.New(s.metricsLn, connlimit.Options{Name: "metrics", Max: metricsMax, Logger: s.log})
	if err := s.registerConnectionMetrics(); err != nil {
		return newStartupError(cfg, "metrics cannot be registered", err)
	}
	api, err := newHTTPTelemetry(s.tel, otel.GetTextMapPropagator(), spanName, s.apiHandler())
	if err != nil {
		return newStartupError(cfg, "metrics cannot be registered", err)
	}
	s.api = &http.Server{
		Handler:           s.keepAlive(traceContextGate(cfg.Telemetry.TrustTraceContext, commandAuthenticator(s.creds), api)),
		TLSConfig:         tlsConfig,
		ConnContext:       connContext,
		ReadHeaderTimeout: apiHeaderTimeout, ReadTimeout: 30 * time.Second,
		WriteTimeout: 60 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 64 << 10,
		ErrorLog: newErrorLog(s.log, "api"),
	}
	mmux := http.NewServeMux()
	mmux.Handle("GET /metrics", s.tel.MetricsHandler)
	// A scrape is one small GET: short timeouts and small headers; a
	// scraper keeps its connection alive between scrapes (the usual 15 s to
	// 1 min interval), anything idle longer is closed.
	s.metrics = &http.Server{
		Handler:           markRequests(mmux),
		ConnContext:       connContext,
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 90 * time.Second, MaxHeaderBytes: 16 << 10,
		ErrorLog: newErrorLog(s.log, "metrics"),
	}
	return nil
}

// abandon closes, in reverse order, whatever open recorded in s before it
// failed: listeners, the gauge registration, every database (its worker's
// instruments, archive and primary store). The credential store holds
// nothing open between operations. Telemetry is left to the caller.
func (s *Server) abandon(context.Context) error {
	var errs []error
	for _, ln := range []net.Listener{s.metricsLn, s.apiLn} {
		if ln != nil {
			errs = append(errs, ln.Close())
		}
	}
	for _, reg := range []*metric.Registration{&s.connReg, &s.meterReg} {
		if *reg != nil {
			errs = append(errs, (*reg).Unregister())
			*reg = nil
		}
	}
	for _, d := range s.dbs {
		if d.worker != nil {
			errs = append(errs, d.worker.Close())
		}
	}
	errs = append(errs, s.closeStores())
	s.creds = nil
	return errors.Join(errs...)
}

// Start serves the API and metrics and starts the outbox workers.
func (s *Server) Start(ctx context.Context) error {
	for _, d := range s.dbs {
		if d.worker != nil {
			if err := d.worker.Start(ctx); err != nil {
				return err
			}
		}
	}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.stopBackground = cancel
	for _, d := range s.dbs {
		s.background.Add(1)
		go s.watch(bg, d)
	}
	tlsOn := s.api.TLSConfig != nil // read before serve configures HTTP/2 on it
	go s.serve(s.api, s.apiLimit, "api")
	go s.serve(s.metrics, s.metricsLimit, "metrics")
	s.log.Info("riffdb ready", zap.String("listen", s.APIAddr()), zap.String("metrics_listen", s.MetricsAddr()),
		zap.Bool("tls", tlsOn), zap.Int64("max_connections", s.apiLimit.Max()),
		zap.Int64("max_connections_per_peer", s.apiLimit.MaxPerPeer()), zap.Int64("metrics_max_connections", s.metricsLimit.Max()),
		zap.String("mode", s.cfg.Server.Mode), zap.Int("databases", len(s.dbs)))
	return nil
}

func (s *Server) serve(h *http.Server, ln net.Listener, name string) {
	var err error
	if h.TLSConfig != nil {
		err = h.ServeTLS(ln, "", "")
	} else {
		err = h.Serve(ln)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.fail(fmt.Errorf("server: %s listener: %w", name, err))
	}
}

func (s *Server) fail(err error) {
	s.fatalOnce.Do(func() {
		s.log.Error("stopping the server", zap.String("error", pathless.Message(err)))
		s.fatal <- err
	})
}

// Fatal yields an error when the server must stop (a primary store failed,
// a listener died).
func (s *Server) Fatal() <-chan error { return s.fatal }

// APIAddr is the address the API listens on.
func (s *Server) APIAddr() string { return s.apiLn.Addr().String() }

// MetricsAddr is the address /metrics is served on.
func (s *Server) MetricsAddr() string { return s.metricsLn.Addr().String() }

// Logger is the server's logger.
func (s *Server) Logger() *zap.Logger { return s.log }

// Stop shuts the server down in order: HTTP (in-flight requests get
// server.shutdown_grace to finish, then their connections are closed),
// workers, archives, primary stores, telemetry. It is idempotent.
func (s *Server) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() {
		var errs []error
		grace, cancelGrace := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Server.ShutdownGrace)
		for _, h := range []*http.Server{s.api, s.metrics} {
			if err := h.Shutdown(grace); errors.Is(err, context.DeadlineExceeded) {
				// The grace is over: whatever is still in flight is cut
				// off. A command cut off before its commit is not
				// acknowledged; one cut off after it is durable and
				// replays by its idempotency key.
				s.log.Info("shutdown grace over: closing the remaining connections", zap.Duration("grace", s.cfg.Server.ShutdownGrace))
				errs = append(errs, h.Close())
			} else {
				errs = append(errs, err)
			}
		}
		cancelGrace()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		// Shutdown closes only the listeners being served; Start may have
		// failed before serving them.
		for _, ln := range []net.Listener{s.apiLn, s.metricsLn} {
			if err := ln.Close(); !errors.Is(err, net.ErrClosed) {
				errs = append(errs, err)
			}
		}
		if s.stopBackground != nil {
			s.stopBackground()
			s.background.Wait()
		}
		for _, d := range s.dbs {
			if d.worker != nil {
				errs = append(errs, d.worker.Stop(ctx), d.worker.Close())
			}
		}
		errs = append(errs, s.closeStores())
		for _, reg := range []metric.Registration{s.connReg, s.meterReg} {
			if reg != nil {
				errs = append(errs, reg.Unregister())
			}
		}
		s.log.Info("riffdb stopped")
		errs = append(errs, s.tel.Shutdown(ctx))
		s.stopErr = errors.Join(errs...)
	})
	return s.stopErr
}

// Run starts a server and blocks until ctx is done or the server fails, then
// stops it. ready, if set, is called once the listeners are serving.
func Run(ctx context.Context, opts Options, ready func(*Server)) error {
	s, err := New(ctx, opts)
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		_ = s.Stop(ctx)
		return newStartupError(opts.Config, "the server cannot start", err)
	}
	if ready != nil {
		ready(s)
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-s.fatal:
	}
	// The message reaches the CLI's envelope (server_failed): without
	// paths or stack lines, like a startup failure's.
	if err := errors.Join(runErr, s.Stop(context.WithoutCancel(ctx))); err != nil {
		return pathFree{msg: scrub(opts.Config, err), cause: err}
	}
	return nil
}
