package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/riffdb/riffdb/backupapi"
	"github.com/riffdb/riffdb/capability"
	"github.com/riffdb/riffdb/internal/hygiene/ratelog"
	"github.com/riffdb/riffdb/outbox"
	"github.com/riffdb/riffdb/outboxapi"
	"github.com/riffdb/riffdb/primary"
	"github.com/riffdb/riffdb/primary/contract"
	"github.com/riffdb/riffdb/statsapi"
	"github.com/riffdb/riffdb/telemetry"
)

// MaxRequestBytes bounds a command request body.
const MaxRequestBytes = 1 << 20

// sizedBodyBytes is the largest declared Content-Length whose body is read
// into one buffer of that size, made before the body arrives: a client
// that declares a length and sends nothing holds no more than this.
const sizedBodyBytes = 16 << 10

// readCommandBody reads a command request body of at most MaxRequestBytes.
// A body whose Content-Length is known and small is read into one buffer of
// its size (net/http reads no more than that length); any other goes
// through http.MaxBytesReader, which refuses more than MaxRequestBytes with
// an *http.MaxBytesError and closes the connection after the response.
func readCommandBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if n := r.ContentLength; n >= 0 && n <= sizedBodyBytes {
		body := make([]byte, n)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			return nil, err
		}
		return body, nil
	}
	return io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
}

func (s *Server) apiHandler() http.Handler {
	// One failure log for every handler that reads the credential store,
	// so that a broken store is one rate-limited line, not one per route.
	failures := statsapi.NewFailureLog(s.log, nil, 0)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/databases/{alias}/commands/{command}", func(w http.ResponseWriter, r *http.Request) {
		s.handleCommand(w, r, failures)
	})
	backups := s.newBackupAPI(failures)
	mux.HandleFunc("POST /v1/databases/{alias}/backups", backups.HandleCreate)
	mux.HandleFunc("GET /v1/databases/{alias}/backups", backups.HandleList)
	deliveries := outboxapi.New(outboxapi.Options{Auth: s.creds, Failures: failures, Logger: s.log,
		TracerProvider: s.tel.TracerProvider, MeterProvider: s.tel.MeterProvider, Aliases: s.aliases(),
		Database: func(alias string) (*primary.DB, bool) {
			if d := s.database(alias); d != nil {
				return d.db, true
			}
			return nil, false
		}})
	mux.HandleFunc("GET /v1/databases/{alias}/outbox/deliveries", deliveries.HandleList)
	mux.HandleFunc("GET /v1/databases/{alias}/outbox/deliveries/{event_id}", deliveries.HandleShow)
	mux.HandleFunc("POST /v1/databases/{alias}/outbox/dead-letters/retry", deliveries.HandleRedrive)
	stats := statsapi.NewHandler(statsapi.Options{Auth: s.creds, Stats: s.stats, Health: s.health, Logger: s.log, StoreFailures: failures})
	mux.Handle("GET /v1/stats", stats)
	mux.Handle("GET /v1/health", stats)
	mux.Handle("GET /healthz", stats)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		statsapi.WriteError(w, http.StatusNotFound, "not_found", "no such endpoint")
	})
	return mux
}

// newBackupAPI returns the backup handlers for the server's databases.
func (s *Server) newBackupAPI(failures *ratelog.Logger) *backupapi.API {
	return backupapi.New(backupapi.Options{Auth: s.creds, Failures: failures, Logger: s.log,
		TracerProvider: s.tel.TracerProvider, MeterProvider: s.tel.MeterProvider,
		Database: func(alias string) (backupapi.Database, bool) {
			d := s.database(alias)
			if d == nil {
				return backupapi.Database{}, false
			}
			return backupapi.Database{Alias: d.alias, DB: d.db, Config: d.cfg}, true
		}})
}

func routeOf(r *http.Request) string {
	switch {
	case backupapi.IsPath(r.URL.Path):
		return routeBackups
	case outboxapi.IsPath(r.URL.Path):
		return routeDeliveries
	case outboxapi.IsRedrivePath(r.URL.Path):
		return routeRedrive
	case strings.HasPrefix(r.URL.Path, "/v1/databases/"):
		return routeCommands
	case r.URL.Path == routeStats:
		return routeStats
	case r.URL.Path == routeHealth:
		return routeHealth
	case r.URL.Path == routeHealthz:
		return routeHealthz
	}
	return routeOther
}

// The routes routeOf names, all of them in routes.
const (
	routeBackups    = "/v1/databases/{alias}/backups"
	routeDeliveries = "/v1/databases/{alias}/outbox/deliveries"
	routeRedrive    = "/v1/databases/{alias}/outbox/dead-letters/retry"
	routeCommands   = "/v1/databases/{alias}/commands/{command}"
	routeStats      = "/v1/stats"
	routeHealth     = "/v1/health"
	routeHealthz    = "/healthz"
	routeOther      = "other"
)

var routes = []string{routeBackups, routeDeliveries, routeRedrive, routeCommands, routeStats, routeHealth, routeHealthz, routeOther}

// CommandRequest is the body of a command request:
// {"input":{…},"idempotency_key":"…"}. See parseCommandRequest for the
// rules it is read with.
type CommandRequest struct {
	Input          json.RawMessage `json:"input"`
	IdempotencyKey string          `json:"idempotency_key"`
}

// CommandResponse is the body of a successful command.
type CommandResponse struct {
	Database       string   `json:"database"`
	Command        string   `json:"command"`
	CommitSequence uint64   `json:"commit_sequence"`
	Events         []string `json:"events"` // "seq.pos"
	Replayed       bool     `json:"replayed"`
}

func (s *Server) handleCommand(w http.ResponseWriter, r *http.Request, failures *ratelog.Logger) {
	alias, command := r.PathValue("alias"), r.PathValue("command")
	// A traced command was authenticated by the trace-context gate, with
	// the same token and store: the token is not authenticated again.
	c, ok := rememberedCapability(w)
	if ok {
		failures.Clear() // the store was read, as statsapi.Authenticate clears it
	} else if c, ok = statsapi.Authenticate(w, r, s.creds, failures); !ok {
		return
	}
	if !c.Allows(capability.ExecuteCommands, alias) {
		statsapi.WriteError(w, http.StatusForbidden, "forbidden", "this capability may not execute commands on this database")
		return
	}
	d := s.database(alias)
	if d == nil {
		statsapi.WriteError(w, http.StatusNotFound, "unknown_database", "no database has this alias")
		return
	}
	if s.cfg.Server.Mode == "follower" {
		statsapi.WriteError(w, http.StatusConflict, "follower", "this server is a follower and refuses commands; send them to the primary")
		return
	}
	if msg, ok := checkContentType(r.Header.Get("Content-Type")); !ok {
		statsapi.WriteError(w, http.StatusUnsupportedMediaType, "unsupported_media_type", msg)
		return
	}
	body, err := readCommandBody(w, r)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			statsapi.WriteError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the request body exceeds %d bytes", MaxRequestBytes))
			return
		}
		statsapi.WriteError(w, http.StatusBadRequest, "bad_request", "the request body could not be read")
		return
	}
	req, err := parseCommandRequest(body)
	if err != nil {
		var ie *contract.InputError
		if errors.As(err, &ie) {
			statsapi.WriteError(w, http.StatusBadRequest, "invalid_input", ie.Detail())
		} else if errors.Is(err, errEmptyIdempotencyKey) {
			statsapi.WriteError(w, http.StatusBadRequest, "invalid_idempotency_key", err.Error())
		} else {
			statsapi.WriteError(w, http.StatusBadRequest, "malformed_request", err.Error())
		}
		return
	}
	commit, err := d.db.Execute(r.Context(), command, req.Input, req.IdempotencyKey)
	if err != nil {
		s.commandError(r.Context(), w, err)
		return
	}
	writeCommandResponse(w, alias, command, commit)
}

// writeCommandResponse writes the CommandResponse of commit, encoded into a
// buffer of responseBufs (TestWriteCommandResponseAllocations).
func writeCommandResponse(w http.ResponseWriter, alias, command string, commit primary.Commit) {
	w.Header().Set("Content-Type", "application/json")
	bp := responseBufs.Get().(*[]byte)
	*bp = appendCommandResponse((*bp)[:0], alias, command, commit)
	_, _ = w.Write(*bp) // copied into the connection's buffer or written out: not kept
	if cap(*bp) <= maxPooledResponse {
		responseBufs.Put(bp)
	}
}

// responseBufs holds buffers for command responses between requests; one
// grown past maxPooledResponse (a commit of many events) is left to the
// collector instead of being kept.
var responseBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

const maxPooledResponse = 64 << 10

// appendCommandResponse appends the CommandResponse of commit to b, byte for
// byte as json.Encoder writes it (TestCommandResponseBytes), without the
// reflection and the per-event strings: it was about 4 µs of a command's
// CPU on tmpfs (docs/benchmarks.md).
func appendCommandResponse(b []byte, alias, command string, commit primary.Commit) []byte {
	b = append(b, `{"database":`...)
	b = appendJSONString(b, alias)
	b = append(b, `,"command":`...)
	b = appendJSONString(b, command)
	b = append(b, `,"commit_sequence":`...)
	b = strconv.AppendUint(b, commit.Seq, 10)
	b = append(b, `,"events":[`...)
	for i, id := range commit.Events {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(id.Append(append(b, '"')), '"')
	}
	b = append(b, `],"replayed":`...)
	b = strconv.AppendBool(b, commit.Replayed)
	return append(b, "}\n"...)
}

// appendJSONString appends s as encoding/json writes a string (HTML
// characters escaped, as json.Encoder does by default).
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	return append(append(append(b, '"'), s...), '"')
}

func (s *Server) commandError(ctx context.Context, w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, primary.ErrUnknownCommand):
		statsapi.WriteError(w, http.StatusNotFound, "unknown_command", "the contract has no command with this name")
	case errors.Is(err, primary.ErrInvalidInput):
		// The client gets the one sentence, never the wrapped chain.
		msg := "the input is not acceptable for this command"
		var ie *primary.InputError
		if errors.As(err, &ie) {
			msg = ie.Detail
		}
		statsapi.WriteError(w, http.StatusBadRequest, "invalid_input", msg)
	case errors.Is(err, primary.ErrIdempotencyConflict):
		statsapi.WriteError(w, http.StatusConflict, "idempotency_conflict",
			"this idempotency key was used with a different input")
	case errors.Is(err, primary.ErrFailed):
		s.fail(err)
		statsapi.WriteError(w, http.StatusServiceUnavailable, "unavailable", "the database store failed; the server is stopping")
	case errors.Is(err, primary.ErrClosed):
		statsapi.WriteError(w, http.StatusServiceUnavailable, "unavailable", "the server is shutting down")
	default:
		telemetry.Logger(ctx, s.log).Error("command failed", zap.Error(err))
		statsapi.WriteError(w, http.StatusInternalServerError, "internal", "the command failed; its outcome is unknown")
	}
}

func (s *Server) outboxHealth(d *database) outbox.Health {
	if d.worker == nil {
		return outbox.NoDestination(s.started)
	}
	return d.worker.Health()
}

func (s *Server) stats() statsapi.Stats {
	out := statsapi.Stats{Databases: make([]statsapi.DatabaseStats, 0, len(s.dbs))}
	for _, d := range s.dbs {
		st := statsapi.DatabaseStats{
			Alias: d.alias, DatabaseID: d.db.Identity().String(), HistoryIncarnation: d.db.Incarnation(),
			LastCommitSequence: d.db.LastCommitSequence(), PublicationFrontier: d.db.Frontier(),
		}
		if n, state := d.db.UndeliveredCount(); state == primary.IndexReady {
			st.PendingOutboxDeliveries = &n
		}
		st.History.RetainedBytes, st.History.ReclaimableBytes = d.db.HistoryUsage()
		h := s.outboxHealth(d)
		st.Outbox.Health, st.Outbox.Reason = h.State, string(h.Reason)
		st.Outbox.CompletedDeliveries = d.db.Delivered().Completed
		if d.dest != nil {
			q := d.quota
			st.Outbox.QuotaEncodedBytes = &q
			// The last committed accounting, never waiting on an archive
			// transaction; null only while the archive was never opened.
			// The allocated bytes are null while they cannot be measured.
			if u, ok := d.monitor.Usage(); ok {
				recs, enc := u.Records, u.EncodedBytes
				st.Outbox.ArchiveRecordCount, st.Outbox.ArchiveEncodedBytes = &recs, &enc
				if alloc := u.AllocatedBytes; alloc >= 0 {
					st.Outbox.ArchiveAllocatedBytes = &alloc
				}
			}
		}
		out.Databases = append(out.Databases, st)
	}
	return out
}

func (s *Server) health() statsapi.HealthReport {
	rep := statsapi.HealthReport{Ready: true, Databases: make([]statsapi.DatabaseHealth, 0, len(s.dbs))}
	for _, d := range s.dbs {
		_, idx := d.db.UndeliveredCount()
		if idx != primary.IndexReady {
			rep.Ready = false
		}
		h := s.outboxHealth(d)
		rep.Databases = append(rep.Databases, statsapi.DatabaseHealth{Alias: d.alias, HistoryIncarnation: d.db.Incarnation(), Index: idx.String(),
			Outbox: statsapi.OutboxHealth{State: h.State, Reason: string(h.Reason), Since: h.Since.UTC().Truncate(time.Millisecond),
				Conflicts: h.Conflicts, MissingRecords: h.MissingRecords}})
	}
	return rep
}
