package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/capability"
	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/outbox"
	"github.com/riffdb/riffdb/primary"
	"github.com/riffdb/riffdb/primary/contract"
	"github.com/riffdb/riffdb/telemetry"
)

// ErrUnsupportedPlatform is returned by New on any platform but Linux: the
// archive's custody checks and the credential store need Linux system calls,
// and the server refuses rather than run without them.
var ErrUnsupportedPlatform = errors.New("server: riffdb requires Linux")

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

	apiLn, metricsLn net.Listener
	api, metrics     *http.Server

	indexGate <-chan struct{}

	background     sync.WaitGroup // watch goroutines
	stopBackground context.CancelFunc

	fatal     chan error
	fatalOnce sync.Once
	stopOnce  sync.Once
	stopErr   error
	started   time.Time
	meterReg  metric.Registration
}

type database struct {
	alias     string
	cfg       config.Database
	db        *primary.DB
	dest      *archiveDestination // nil without an outbox section
	worker    *outbox.Worker      // nil without an outbox section
	quota     int64
	unobserve func() error

	unobserveArchive func() error
}

// New opens every store and prepares the listeners. Nothing is served until
// Start. On error everything opened so far is closed again.
func New(ctx context.Context, opts Options) (s *Server, err error) {
	cfg := opts.Config
	if cfg == nil {
		return nil, errors.New("server: no configuration")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if runtime.GOOS != "linux" {
		return nil, ErrUnsupportedPlatform
	}
	setPrivateUmask()
	host, _ := os.Hostname()
	tel, err := telemetry.Setup(ctx, telemetry.Config{
		ServiceName: "riffdb", ServiceVersion: Version, InstanceID: fmt.Sprintf("%s:%d", host, os.Getpid()),
		OTLPEndpoint: cfg.Telemetry.OTLPEndpoint, SampleRatio: cfg.Telemetry.TraceSampleRatio,
		LogLevel: cfg.Telemetry.LogLevel, LogOutput: opts.LogOutput,
	})
	if err != nil {
		return nil, fmt.Errorf("server: telemetry: %w", err)
	}
	s = &Server{cfg: cfg, indexGate: opts.indexGate, tel: tel, log: tel.Logger, fatal: make(chan error, 1), started: time.Now()}
	defer func() {
		if err != nil {
			_ = s.closeStores()
			_ = tel.Shutdown(context.WithoutCancel(ctx))
		}
	}()
	if s.creds, err = capability.Open(cfg.Server.CredentialPath); err != nil {
		return nil, fmt.Errorf("server: credential store: %w", err)
	}
	for _, dc := range cfg.Databases {
		d, err := s.openDatabase(ctx, dc)
		if err != nil {
			return nil, fmt.Errorf("server: database %q: %w", dc.Alias, err)
		}
		s.dbs = append(s.dbs, d)
	}
	if err := s.registerGauges(); err != nil {
		return nil, err
	}
	if s.apiLn, err = net.Listen("tcp", cfg.Server.Listen); err != nil {
		return nil, fmt.Errorf("server: listen (server.listen): %w", err)
	}
	if s.metricsLn, err = net.Listen("tcp", cfg.Server.MetricsListen); err != nil {
		_ = s.apiLn.Close()
		return nil, fmt.Errorf("server: listen (server.metrics_listen): %w", err)
	}
	s.api = &http.Server{
		Handler: otelhttp.NewHandler(s.apiHandler(), "riffdb.http",
			otelhttp.WithTracerProvider(tel.TracerProvider), otelhttp.WithMeterProvider(tel.MeterProvider),
			otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + routeOf(r) })),
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 60 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10,
	}
	mmux := http.NewServeMux()
	mmux.Handle("GET /metrics", tel.MetricsHandler)
	s.metrics = &http.Server{Handler: mmux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second}
	return s, nil
}

func (s *Server) openDatabase(ctx context.Context, dc config.Database) (*database, error) {
	data, err := os.ReadFile(dc.Contract)
	if err != nil {
		return nil, fmt.Errorf("cannot read the contract file: %w", errors.Unwrap(err))
	}
	c, err := contract.Compile(data)
	if err != nil {
		return nil, err
	}
	log := s.log.With(zap.String("database", dc.Alias))
	db, err := primary.Open(ctx, primary.Options{
		Alias: dc.Alias, Path: dc.Path, Contract: c, HistoryRetention: dc.HistoryRetention, Logger: log,
		TracerProvider: s.tel.TracerProvider, MeterProvider: s.tel.MeterProvider, IndexGate: s.indexGate,
	})
	if err != nil {
		return nil, err
	}
	d := &database{alias: dc.Alias, cfg: dc, db: db}
	if un, err := telemetry.ObservePebble(s.tel.MeterProvider, "primary", dc.Alias, db.Metrics); err == nil {
		d.unobserve = un
	} else {
		log.Warn("pebble metrics unavailable", zap.Error(err))
	}
	if dc.Outbox == nil {
		log.Warn("no outbox destination configured: intents stay pending and outbox health is degraded")
		return d, nil
	}
	d.quota = dc.Outbox.QuotaEncodedBytes
	d.dest = newArchiveDestination(dc.Outbox.Directory, archive.Options{
		Alias: dc.Alias, Database: db.Identity(), QuotaEncodedBytes: dc.Outbox.QuotaEncodedBytes, Logger: log.Named("archive"),
		TracerProvider: s.tel.TracerProvider, MeterProvider: s.tel.MeterProvider,
	})
	if un, err := telemetry.ObservePebble(s.tel.MeterProvider, "archive", dc.Alias, d.dest.Metrics); err == nil {
		d.unobserveArchive = un
	} else {
		log.Warn("archive pebble metrics unavailable", zap.Error(err))
	}
	d.worker, err = outbox.New(outbox.Options{
		Alias: dc.Alias, Source: db, Destination: d.dest, Logger: s.log.Named("outbox"), // the worker adds the alias
		TracerProvider: s.tel.TracerProvider, MeterProvider: s.tel.MeterProvider,
	})
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return d, nil
}

// registerGauges exports the pending count from the undelivered index, read
// at collection time (no scans), for every database.
func (s *Server) registerGauges() error {
	m := s.tel.MeterProvider.Meter("github.com/riffdb/riffdb/server")
	pending, err := m.Int64ObservableGauge("riffdb.outbox.pending", metric.WithUnit("{event}"),
		metric.WithDescription("Undelivered outbox intents (pending, scheduled retries, active deliveries and dead letters) from the commit-coupled index. Absent while the index is unbuilt or degraded."))
	if err != nil {
		return err
	}
	s.meterReg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, d := range s.dbs {
			if n, st := d.db.UndeliveredCount(); st == primary.IndexReady {
				o.ObserveInt64(pending, int64(n), metric.WithAttributes(attribute.String("riffdb.database", d.alias)))
			}
		}
		return nil
	}, pending)
	return err
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
	go s.serve(s.api, s.apiLn, "api")
	go s.serve(s.metrics, s.metricsLn, "metrics")
	s.log.Info("riffdb ready", zap.String("listen", s.APIAddr()), zap.String("metrics_listen", s.MetricsAddr()),
		zap.String("mode", s.cfg.Server.Mode), zap.Int("databases", len(s.dbs)))
	return nil
}

func (s *Server) serve(h *http.Server, ln net.Listener, name string) {
	if err := h.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.fail(fmt.Errorf("server: %s listener: %w", name, err))
	}
}

func (s *Server) fail(err error) {
	s.fatalOnce.Do(func() {
		s.log.Error("stopping the server", zap.Error(err))
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

// Stop shuts the server down in order: HTTP (in-flight commands finish),
// workers, archives, primary stores, telemetry. It is idempotent.
func (s *Server) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() {
		var errs []error
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		errs = append(errs, s.api.Shutdown(ctx), s.metrics.Shutdown(ctx))
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
		if s.meterReg != nil {
			errs = append(errs, s.meterReg.Unregister())
		}
		s.log.Info("riffdb stopped")
		errs = append(errs, s.tel.Shutdown(ctx))
		s.stopErr = errors.Join(errs...)
	})
	return s.stopErr
}

func (s *Server) closeStores() error {
	var errs []error
	for _, d := range s.dbs {
		if d.dest != nil {
			errs = append(errs, d.dest.Close())
		}
		if d.unobserve != nil {
			errs = append(errs, d.unobserve())
		}
		if d.unobserveArchive != nil {
			errs = append(errs, d.unobserveArchive())
		}
		errs = append(errs, d.db.Close())
	}
	s.dbs = nil
	return errors.Join(errs...)
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
		return err
	}
	if ready != nil {
		ready(s)
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-s.fatal:
	}
	return errors.Join(runErr, s.Stop(context.WithoutCancel(ctx)))
}

func (s *Server) database(alias string) *database {
	for _, d := range s.dbs {
		if d.alias == alias {
			return d
		}
	}
	return nil
}

// PruneInterval is how often a database with history_retention prunes.
const PruneInterval = 10 * time.Second

// watch stops the server when the database's primary store fails (it can no
// longer promise durability) and, with history retention configured, prunes
// history periodically below the undelivered low-water mark.
func (s *Server) watch(ctx context.Context, d *database) {
	defer s.background.Done()
	var tick <-chan time.Time
	if d.cfg.HistoryRetention > 0 {
		t := time.NewTicker(PruneInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.db.Failed():
			s.fail(fmt.Errorf("server: database %q: %w", d.alias, d.db.Err()))
			return
		case <-tick:
			if n, err := d.db.Prune(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("history pruning failed", zap.String("database", d.alias), zap.Error(err))
			} else if n > 0 {
				s.log.Debug("history pruned", zap.String("database", d.alias), zap.Int("commits", n))
			}
		}
	}
}
