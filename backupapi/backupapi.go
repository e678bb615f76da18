// Package backupapi serves a database's online backups over HTTP: POST
// /v1/databases/{alias}/backups takes one (backup.Create), GET lists them
// (backup.List). It gates both on manage_backups, admits one backup per
// database at a time and at most one start per backup_min_interval, and
// answers without paths. The server mounts it (server/api.go).
package backupapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/backup"
	"github.com/riffdb/riffdb/capability"
	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/internal/hygiene/ratelog"
	"github.com/riffdb/riffdb/internal/observe/attrkey"
	"github.com/riffdb/riffdb/primary"
	"github.com/riffdb/riffdb/statsapi"
	"github.com/riffdb/riffdb/telemetry"
)

// scope names the backup instruments. It is the server's scope, where they
// were first registered, so that their series keep their labels.
const scope = "github.com/riffdb/riffdb/server"

// Backup results, the result label of riffdb.backup.duration.
const (
	backupOK                = "ok"
	backupRootUnusable      = "root_unusable"
	backupInsufficientSpace = "insufficient_space"
	backupCanceled          = "canceled"
	backupFailed            = "failed"
)

// Info describes one backup in the API's responses: its manifest
// without the file list, summarized by FileCount and Bytes.
type Info struct {
	Name               string    `json:"name"`
	DatabaseID         string    `json:"database_id"`
	HistoryIncarnation uint64    `json:"history_incarnation"`
	LastCommitSequence uint64    `json:"last_commit_sequence"`
	CreatedAt          time.Time `json:"created_at"`
	FileCount          int       `json:"file_count"`
	Bytes              int64     `json:"bytes"`
	// Damaged marks a backup entry whose manifest cannot be read: only its
	// Name is known. Restoring it is refused (backup_damaged).
	Damaged bool `json:"damaged"`
}

// Response is the body of POST /v1/databases/{alias}/backups.
type Response struct {
	Database string `json:"database"`
	Backup   Info   `json:"backup"`
	// Removed names the database's older backups that retention removed
	// once this one was complete (backup_keep), oldest first; empty when
	// none.
	Removed []string `json:"removed"`
}

// ListResponse is the body of GET /v1/databases/{alias}/backups: the
// database's backups under its backup_root, oldest first (backup.List:
// damaged entries are listed, other databases' backups are not).
type ListResponse struct {
	Database string `json:"database"`
	Backups  []Info `json:"backups"`
}

func infoOf(m backup.Manifest) Info {
	info := Info{Name: m.Name, DatabaseID: m.DatabaseID, HistoryIncarnation: m.HistoryIncarnation,
		LastCommitSequence: m.LastCommitSequence, CreatedAt: m.CreatedAt.UTC(), FileCount: len(m.Files), Damaged: m.Damaged}
	for _, f := range m.Files {
		info.Bytes += f.Size
	}
	return info
}

// API serves a database's backups: POST takes one (online, through
// backup.Create), GET lists them. Both need manage_backups for the
// database (a global capability, or one scoped to it) and a backup_root in
// the database's configuration. One backup runs per database at a time; a
// second request while one runs is refused (409 backup_in_progress) rather
// than queued, so that a client retrying a slow backup does not stack
// checkpoints on the disk. Backups of a database start at most once per
// backup_min_interval (429 backup_rate_limited, with Retry-After): every
// backup that starts counts, a failed one too (it may have copied most of
// the store), while a request refused before it starts (authentication,
// 409, 429) does not.
type API struct {
	opts     Options
	tracer   trace.Tracer
	duration metric.Float64Histogram
	// Create is backup.Create; tests replace it to hold a backup running.
	Create func(ctx context.Context, db *primary.DB, root string, opts backup.Options) (backup.Manifest, error)
	// Now is time.Now; tests replace it to move past backup_min_interval.
	Now func() time.Time

	mu      sync.Mutex
	running map[string]bool      // database alias → a backup is running
	started map[string]time.Time // database alias → when its last backup started
}

// Database is one database the API serves: its alias, its primary and its
// configuration (backup_root and the backup limits).
type Database struct {
	Alias  string
	DB     *primary.DB
	Config config.Database
}

// Options configure an API. Every field but Auth and Database may be zero.
type Options struct {
	Auth statsapi.Authenticator
	// Database finds a database by alias.
	Database func(alias string) (Database, bool)
	// Failures logs credential store failures (statsapi.NewFailureLog);
	// nil: one of its own.
	Failures       *ratelog.Logger
	TracerProvider trace.TracerProvider // nil: no-op
	MeterProvider  metric.MeterProvider // nil: no-op
	Logger         *zap.Logger          // nil: no-op
}

// New returns the backup handlers. Without its histogram (the meter
// refused it) backups still run, unmeasured.
func New(opts Options) *API {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Failures == nil {
		opts.Failures = statsapi.NewFailureLog(opts.Logger, nil, 0)
	}
	if opts.TracerProvider == nil {
		opts.TracerProvider = tracenoop.NewTracerProvider()
	}
	if opts.MeterProvider == nil {
		opts.MeterProvider = metricnoop.NewMeterProvider()
	}
	m := opts.MeterProvider.Meter(scope)
	d, err := m.Float64Histogram("riffdb.backup.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of an online backup taken through the API, by result (ok, root_unusable, insufficient_space, canceled, failed)."))
	if err != nil {
		opts.Logger.Warn("the backup duration histogram is unavailable", zap.Error(err))
		d, _ = metricnoop.NewMeterProvider().Meter(scope).Float64Histogram("riffdb.backup.duration")
	}
	return &API{opts: opts, tracer: opts.TracerProvider.Tracer(scope), duration: d,
		Create: backup.Create, Now: time.Now, running: make(map[string]bool), started: make(map[string]time.Time)}
}

// authorize authenticates the request, checks manage_backups for the
// path's database and that the database exists and has a backup_root. It
// writes the refusal itself and reports whether to continue.
func (b *API) authorize(w http.ResponseWriter, r *http.Request) (Database, bool) {
	alias := r.PathValue("alias")
	c, ok := statsapi.Authenticate(w, r, b.opts.Auth, b.opts.Failures)
	if !ok {
		return Database{}, false
	}
	if !c.Allows(capability.ManageBackups, alias) {
		statsapi.WriteError(w, http.StatusForbidden, "forbidden", "this capability may not manage backups of this database (it needs manage_backups)")
		return Database{}, false
	}
	d, ok := b.opts.Database(alias)
	if !ok {
		statsapi.WriteError(w, http.StatusNotFound, "unknown_database", "no database has this alias")
		return Database{}, false
	}
	if d.Config.BackupRoot == "" {
		statsapi.WriteError(w, http.StatusConflict, "backup_root_not_configured",
			"this database has no backup_root: set backup_root in its configuration (a private 0700 directory) and restart the server")
		return Database{}, false
	}
	return d, true
}

// admission is begin's answer.
type admission int

const (
	admitted    admission = iota
	busy                  // a backup of the database is running
	rateLimited           // the last one started less than the interval ago
)

// begin marks a backup of alias running and records when it started,
// unless one is running or the last one started less than interval ago;
// then it records nothing and, for the interval, returns how long is left.
func (b *API) begin(alias string, interval time.Duration) (admission, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running[alias] {
		return busy, 0
	}
	now := b.Now()
	if last, ok := b.started[alias]; ok && interval > 0 {
		if wait := last.Add(interval).Sub(now); wait > 0 {
			return rateLimited, wait
		}
	}
	b.running[alias] = true
	b.started[alias] = now
	return admitted, 0
}

func (b *API) end(alias string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.running, alias)
}

// HandleCreate takes a backup. The request lasts as long as the backup:
// the response's write deadline is lifted for it, and a client that goes
// away cancels the backup (backup.Create leaves no partial backup behind).
func (b *API) HandleCreate(w http.ResponseWriter, r *http.Request) {
	d, ok := b.authorize(w, r)
	if !ok {
		return
	}
	switch adm, wait := b.begin(d.Alias, d.Config.BackupMinInterval); adm {
	case busy:
		statsapi.WriteError(w, http.StatusConflict, "backup_in_progress",
			"a backup of this database is already running; wait for it to finish")
		return
	case rateLimited:
		secs := int64((wait + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		statsapi.WriteError(w, http.StatusTooManyRequests, "backup_rate_limited", fmt.Sprintf(
			"a backup of this database started less than %s ago (backup_min_interval); try again in %d s", d.Config.BackupMinInterval, secs))
		return
	}
	defer b.end(d.Alias)
	// The server's WriteTimeout bounds ordinary requests; a backup of a
	// large database may take longer.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})

	ctx, span := b.tracer.Start(r.Context(), "riffdb.backup", trace.WithAttributes(
		attrkey.Database.String(d.Alias), attrkey.DatabaseID.String(d.DB.Identity().String())))
	defer span.End()
	log := telemetry.Logger(ctx, b.opts.Logger).With(zap.String("database", d.Alias))
	start := time.Now()
	reserve := d.Config.BackupReserveBytes
	if reserve == 0 {
		reserve = -1 // backup_reserve_bytes = 0: no reserve (backup.Options' 0 is the default)
	}
	m, err := b.Create(ctx, d.DB, d.Config.BackupRoot, backup.Options{Logger: log.Named("backup"),
		Keep: d.Config.BackupKeep, ReserveBytes: reserve})
	elapsed := time.Since(start)
	result := backupResult(ctx, err)
	b.duration.Record(context.WithoutCancel(ctx), elapsed.Seconds(), metric.WithAttributeSet(attribute.NewSet(
		attrkey.Database.String(d.Alias), attribute.String("result", result))))
	if err != nil {
		span.SetStatus(codes.Error, result)
		b.createError(w, log, result, err)
		return
	}
	span.SetAttributes(attribute.String("riffdb.backup.name", m.Name),
		attribute.Int64("riffdb.history.incarnation", int64(m.HistoryIncarnation)),
		attribute.Int64("riffdb.commit.seq", int64(m.LastCommitSequence)))
	// backup.Create logged the backup ("backup written").
	writeJSON(w, Response{Database: d.Alias, Backup: infoOf(m), Removed: append([]string{}, m.Removed...)})
}

func backupResult(ctx context.Context, err error) string {
	switch {
	case err == nil:
		return backupOK
	case errors.Is(err, backup.ErrRootUnusable):
		return backupRootUnusable
	case errors.Is(err, backup.ErrInsufficientSpace):
		return backupInsufficientSpace
	case ctx.Err() != nil:
		return backupCanceled
	}
	return backupFailed
}

// createError answers a failed backup. The client's message never holds a
// path; the log has the whole error.
func (b *API) createError(w http.ResponseWriter, log *zap.Logger, result string, err error) {
	switch {
	case result == backupRootUnusable:
		log.Warn("backup refused: the backup_root is not usable", zap.Error(err))
		statsapi.WriteError(w, http.StatusConflict, "backup_root_unusable", rootUnusableMessage)
	case result == backupInsufficientSpace:
		log.Warn("backup refused: it would leave less than the reserve free on backup_root", zap.Error(err))
		statsapi.WriteError(w, http.StatusInsufficientStorage, "backup_insufficient_space", spaceMessage(err))
	case result == backupCanceled:
		log.Info("backup canceled: the request ended", zap.Error(err))
		statsapi.WriteError(w, http.StatusServiceUnavailable, "backup_canceled", "the backup was canceled before it finished; nothing was kept")
	case errors.Is(err, primary.ErrClosed):
		statsapi.WriteError(w, http.StatusServiceUnavailable, "unavailable", "the server is shutting down")
	default:
		log.Error("backup failed", zap.Error(err))
		statsapi.WriteError(w, http.StatusInternalServerError, "backup_failed",
			"the backup failed and was not kept; the server's log says why")
	}
}

// spaceMessage explains a backup refused for want of space, with the
// numbers when the refusal has them.
func spaceMessage(err error) string {
	const advice = "nothing was kept; free space on backup_root's filesystem, lower backup_keep, or lower backup_reserve_bytes"
	var se *backup.SpaceError
	switch {
	case !errors.As(err, &se):
		return "the filesystem of backup_root filled up while the backup was written; " + advice
	case se.AfterCopy:
		return fmt.Sprintf("the backup was refused: with its copy of %d bytes written, %d bytes were free, less than the reserve of %d bytes (backup_reserve_bytes); %s",
			se.Needed, se.Free, se.Reserve, advice)
	}
	return fmt.Sprintf("the backup was refused: it needs about %d bytes and %d bytes are free, which would leave less than the reserve of %d bytes (backup_reserve_bytes); %s",
		se.Needed, se.Free, se.Reserve, advice)
}

const rootUnusableMessage = "this database's backup_root is not usable: it must be an existing directory, " +
	"not a symbolic link, owned by the server's user with mode 0700; the server's log says what is wrong"

// HandleList lists the database's backups.
func (b *API) HandleList(w http.ResponseWriter, r *http.Request) {
	d, ok := b.authorize(w, r)
	if !ok {
		return
	}
	ms, err := backup.List(d.Config.BackupRoot, d.DB.Identity())
	log := telemetry.Logger(r.Context(), b.opts.Logger).With(zap.String("database", d.Alias))
	switch {
	case errors.Is(err, backup.ErrRootUnusable):
		log.Warn("backup list refused: the backup_root is not usable", zap.Error(err))
		statsapi.WriteError(w, http.StatusConflict, "backup_root_unusable", rootUnusableMessage)
		return
	case err != nil:
		log.Error("listing backups failed", zap.Error(err))
		statsapi.WriteError(w, http.StatusInternalServerError, "backup_list_failed", "the backups could not be listed; the server's log says why")
		return
	}
	resp := ListResponse{Database: d.Alias, Backups: make([]Info, 0, len(ms))}
	for _, m := range ms {
		resp.Backups = append(resp.Backups, infoOf(m))
	}
	writeJSON(w, resp)
}

// IsPath reports whether path is /v1/databases/{alias}/backups.
func IsPath(path string) bool {
	rest, ok := strings.CutPrefix(path, "/v1/databases/")
	if !ok {
		return false
	}
	alias, tail, ok := strings.Cut(rest, "/")
	return ok && alias != "" && alias != "." && alias != ".." && tail == "backups"
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}
