package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
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

// Classes of StartupError. A failure to start matches exactly one of them
// with errors.Is, except a failure outside these classes (telemetry, an
// invalid configuration, ErrUnsupportedPlatform), which matches none.
var (
	// ErrListen: the API (server.listen) or metrics (server.metrics_listen)
	// address cannot be bound.
	ErrListen = errors.New("server: cannot listen")
	// ErrContract: a database's contract file is missing, unreadable or
	// invalid.
	ErrContract = errors.New("server: contract refused")
	// ErrCredentials: the credential store cannot be opened (a wrong mode
	// or owner, damage, an unreadable file).
	ErrCredentials = errors.New("server: credential store refused")
	// ErrDatabase: a database's primary store cannot be opened. The error
	// also matches primary.ErrBusy when another process holds the store,
	// primary.ErrCorrupt when it is damaged (Pebble's corruption included)
	// and primary.ErrIncompatible when its format is not supported.
	ErrDatabase = errors.New("server: primary store cannot be opened")
)

// StartupError is returned by New and Run when the server cannot start. Its
// message names the option, the database alias and the role concerned and
// never a filesystem path; errors.Is and errors.As see through it to its
// class (ErrListen, ErrContract, ErrCredentials, ErrDatabase) and to the
// underlying error, whose own text may name paths and is for logs only.
type StartupError struct {
	msg     string
	classes []error
	cause   error
}

func (e *StartupError) Error() string { return e.msg }

// Unwrap returns the error's classes and its cause.
func (e *StartupError) Unwrap() []error { return append(slices.Clip(e.classes), e.cause) }

// newStartupError returns a failure to start caused by cause: what, then the
// cause's text with every path removed.
func newStartupError(cfg *config.Config, what string, cause error, classes ...error) *StartupError {
	msg := scrub(cfg, cause)
	if what != "" {
		msg = what + ": " + msg
	}
	return &StartupError{msg: msg, classes: classes, cause: cause}
}

// primaryError classifies a failure of primary.Open for the database alias.
func (s *Server) primaryError(alias string, err error) *StartupError {
	what := fmt.Sprintf("database %q: ", alias)
	switch {
	case errors.Is(err, primary.ErrBusy): // primary.Open could not take the store's lock
		return &StartupError{
			msg:     what + "the primary store is held by another process (is another riffdb server running on it?)",
			classes: []error{ErrDatabase, primary.ErrBusy}, cause: err,
		}
	case errors.Is(err, primary.ErrCorrupt) || pebble.IsCorruptionError(err):
		return newStartupError(s.cfg, what+"the primary store is corrupt", err, ErrDatabase, primary.ErrCorrupt)
	case errors.Is(err, primary.ErrIncompatible):
		return newStartupError(s.cfg, what+"the primary store is incompatible with this version", err, ErrDatabase)
	default:
		return newStartupError(s.cfg, what+"the primary store cannot be opened", err, ErrDatabase)
	}
}

// scrub returns err's text without filesystem paths: withoutPaths removes the
// paths of *fs.PathError and *os.LinkError anywhere in the tree of wrapped
// and joined errors, and every path cfg configures that remains (a storage
// engine may quote one in its own text) is replaced by the name of its role.
// Joined errors are separated by "; ".
func scrub(cfg *config.Config, err error) string {
	msg := withoutPaths(err)
	type role struct{ path, name string }
	roles := []role{{cfg.Server.CredentialPath, "<server.credential_path>"}}
	for _, d := range cfg.Databases {
		roles = append(roles,
			role{d.Path, fmt.Sprintf("<path of database %q>", d.Alias)},
			role{d.Contract, fmt.Sprintf("<contract of database %q>", d.Alias)},
			role{d.BackupRoot, fmt.Sprintf("<backup_root of database %q>", d.Alias)},
			role{d.ProjectionRoot, fmt.Sprintf("<projection_root of database %q>", d.Alias)},
			role{d.ReplicationPath, fmt.Sprintf("<replication_path of database %q>", d.Alias)})
		if d.Outbox != nil {
			roles = append(roles, role{d.Outbox.Directory, fmt.Sprintf("<outbox directory of database %q>", d.Alias)})
		}
	}
	// Longest first, so that a path inside another is replaced whole.
	slices.SortFunc(roles, func(a, b role) int { return len(b.path) - len(a.path) })
	for _, r := range roles {
		if r.path != "" {
			msg = strings.ReplaceAll(msg, r.path, r.name)
		}
	}
	return strings.ReplaceAll(msg, "\n", "; ")
}

// withoutPaths returns err's text with the path of every *fs.PathError and
// *os.LinkError in its tree left out (their operation and reason are kept).
// A wrapping error — fmt.Errorf's %w, errors.Join, *os.SyscallError,
// *net.OpError — keeps its own words, with the text of each cause replaced
// by the cause's pathless text. errors.Unwrap alone would not do: it yields
// nil for a joined error and keeps paths deeper in the chain.
func withoutPaths(err error) string {
	switch e := err.(type) {
	case nil:
		return ""
	case *fs.PathError:
		return e.Op + ": " + withoutPaths(e.Err)
	case *os.LinkError:
		return e.Op + ": " + withoutPaths(e.Err)
	}
	var causes []error
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		causes = []error{u.Unwrap()}
	case interface{ Unwrap() []error }:
		causes = u.Unwrap()
	}
	msg := err.Error()
	from := 0 // causes appear in order (errors.Join, several %w)
	for _, c := range causes {
		if c == nil {
			continue
		}
		text := c.Error()
		i := strings.Index(msg[from:], text)
		if text == "" || i < 0 {
			continue
		}
		clean := withoutPaths(c)
		msg = msg[:from+i] + clean + msg[from+i+len(text):]
		from += i + len(clean)
	}
	return msg
}

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
		LogLevel: cfg.Telemetry.LogLevel, LogOutput: opts.LogOutput,
	})
	if err != nil {
		return nil, newStartupError(cfg, "telemetry cannot be set up", err)
	}
	s := &Server{cfg: cfg, indexGate: opts.indexGate, tel: tel, log: tel.Logger, fatal: make(chan error, 1), started: time.Now()}
	if err := s.open(ctx); err != nil {
		// The log may name paths; the returned error does not.
		s.log.Error("riffdb cannot start", zap.String("reason", err.Error()), zap.Error(err.cause))
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
	creds, err := capability.Open(cfg.Server.CredentialPath)
	if err != nil {
		return newStartupError(cfg, "server.credential_path: the credential store cannot be opened", err, ErrCredentials)
	}
	s.creds = creds
	for _, dc := range cfg.Databases {
		d, err := s.openDatabase(ctx, dc)
		if err != nil {
			return err
		}
		s.dbs = append(s.dbs, d)
	}
	if err := s.registerGauges(); err != nil {
		return newStartupError(cfg, "metrics cannot be registered", err)
	}
	if s.apiLn, err = net.Listen("tcp", cfg.Server.Listen); err != nil {
		return newStartupError(cfg, "server.listen: cannot listen", err, ErrListen)
	}
	if s.metricsLn, err = net.Listen("tcp", cfg.Server.MetricsListen); err != nil {
		return newStartupError(cfg, "server.metrics_listen: cannot listen", err, ErrListen)
	}
	s.api = &http.Server{
		Handler: otelhttp.NewHandler(s.apiHandler(), "riffdb.http",
			otelhttp.WithTracerProvider(s.tel.TracerProvider), otelhttp.WithMeterProvider(s.tel.MeterProvider),
			otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + routeOf(r) })),
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 60 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10,
	}
	mmux := http.NewServeMux()
	mmux.Handle("GET /metrics", s.tel.MetricsHandler)
	s.metrics = &http.Server{Handler: mmux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second}
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
	if s.meterReg != nil {
		errs = append(errs, s.meterReg.Unregister())
		s.meterReg = nil
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

func (s *Server) openDatabase(ctx context.Context, dc config.Database) (*database, *StartupError) {
	data, err := os.ReadFile(dc.Contract)
	if err != nil {
		return nil, newStartupError(s.cfg, fmt.Sprintf("database %q: the contract file cannot be read", dc.Alias), err, ErrContract)
	}
	c, err := contract.Compile(data)
	if err != nil {
		return nil, newStartupError(s.cfg, fmt.Sprintf("database %q: the contract is invalid", dc.Alias), err, ErrContract)
	}
	log := s.log.With(zap.String("database", dc.Alias))
	db, err := primary.Open(ctx, primary.Options{
		Alias: dc.Alias, Path: dc.Path, Contract: c, HistoryRetention: dc.HistoryRetention, Logger: log,
		TracerProvider: s.tel.TracerProvider, MeterProvider: s.tel.MeterProvider, IndexGate: s.indexGate,
	})
	if err != nil {
		return nil, s.primaryError(dc.Alias, err)
	}
	d := &database{alias: dc.Alias, cfg: dc, db: db}
	if err := s.attach(d, log); err != nil {
		if cerr := d.close(); cerr != nil {
			log.Warn("closing the database after the failed start", zap.Error(cerr))
		}
		return nil, newStartupError(s.cfg, fmt.Sprintf("database %q: the outbox cannot be prepared", dc.Alias), err)
	}
	return d, nil
}

// attach adds the open primary store's metrics and, with an outbox section,
// its archive destination and worker to d. On error d still records what was
// attached, for d.close.
func (s *Server) attach(d *database, log *zap.Logger) error {
	dc := d.cfg
	if un, err := telemetry.ObservePebble(s.tel.MeterProvider, "primary", dc.Alias, d.db.Metrics); err == nil {
		d.unobserve = un
	} else {
		log.Warn("pebble metrics unavailable", zap.Error(err))
	}
	if dc.Outbox == nil {
		log.Warn("no outbox destination configured: intents stay pending and outbox health is degraded")
		return nil
	}
	d.quota = dc.Outbox.QuotaEncodedBytes
	d.dest = newArchiveDestination(dc.Outbox.Directory, archive.Options{
		Alias: dc.Alias, Database: d.db.Identity(), QuotaEncodedBytes: dc.Outbox.QuotaEncodedBytes, Logger: log.Named("archive"),
		TracerProvider: s.tel.TracerProvider, MeterProvider: s.tel.MeterProvider,
	})
	source := d.dest.anchoredTo(d.db)
	if un, err := telemetry.ObservePebble(s.tel.MeterProvider, "archive", dc.Alias, d.dest.Metrics); err == nil {
		d.unobserveArchive = un
	} else {
		log.Warn("archive pebble metrics unavailable", zap.Error(err))
	}
	w, err := outbox.New(outbox.Options{
		Alias: dc.Alias, Source: source, Destination: d.dest, Logger: s.log.Named("outbox"), // the worker adds the alias
		TracerProvider: s.tel.TracerProvider, MeterProvider: s.tel.MeterProvider,
	})
	if err != nil {
		return err
	}
	d.worker = w
	return nil
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
		errs = append(errs, d.close())
	}
	s.dbs = nil
	return errors.Join(errs...)
}

// close closes the database's archive, its metric observers and its primary
// store (releasing the store's lock). The worker must be stopped first.
func (d *database) close() error {
	var errs []error
	if d.dest != nil {
		errs = append(errs, d.dest.Close())
	}
	if d.unobserve != nil {
		errs = append(errs, d.unobserve())
	}
	if d.unobserveArchive != nil {
		errs = append(errs, d.unobserveArchive())
	}
	return errors.Join(append(errs, d.db.Close())...)
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
		// Its message reaches the CLI's envelope: without paths, like a
		// startup failure's (the log has the full error).
		runErr = pathFree{msg: scrub(opts.Config, runErr), cause: runErr}
	}
	return errors.Join(runErr, s.Stop(context.WithoutCancel(ctx)))
}

// pathFree is an error whose message has no paths and that still matches
// its cause's chain.
type pathFree struct {
	msg   string
	cause error
}

func (e pathFree) Error() string { return e.msg }
func (e pathFree) Unwrap() error { return e.cause }

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
