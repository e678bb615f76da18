package statsapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/riffdb/riffdb/capability"
	"github.com/riffdb/riffdb/internal/hygiene/ratelog"
)

// Authenticator resolves a bearer token to its capability.
// *capability.Store implements it.
type Authenticator interface {
	Authenticate(token string) (capability.Capability, error)
}

// Stats is the /v1/stats response.
type Stats struct {
	Databases []DatabaseStats `json:"databases"`
}

// DatabaseStats is one database's entry. Pointer fields encode null when the
// value is unknown.
type DatabaseStats struct {
	Alias                   string       `json:"alias"`
	DatabaseID              string       `json:"database_id"`
	HistoryIncarnation      uint64       `json:"history_incarnation"`
	LastCommitSequence      uint64       `json:"last_commit_sequence"`
	PublicationFrontier     uint64       `json:"publication_frontier"`
	PendingOutboxDeliveries *uint64      `json:"pending_outbox_deliveries"`
	History                 HistoryStats `json:"history"`
	Outbox                  OutboxStats  `json:"outbox"`
}

// HistoryStats reports reclaimable source history.
type HistoryStats struct {
	RetainedBytes    int64 `json:"retained_bytes"`
	ReclaimableBytes int64 `json:"reclaimable_bytes"`
}

// OutboxStats reports the destination: its health and the intentionally
// retained archive. Without a destination the archive fields are null.
// With one, ArchiveEncodedBytes and ArchiveRecordCount are null only until
// the archive was first opened; afterwards they are the last committed
// accounting, also while the archive is closed for repair (unavailable,
// refused), read without waiting on an archive transaction.
// ArchiveAllocatedBytes is null, besides, while the store's files cannot be
// measured, and QuotaEncodedBytes is the configured quota whenever there is
// a destination.
type OutboxStats struct {
	Health                string `json:"health"`
	Reason                string `json:"reason"`
	ArchiveEncodedBytes   *int64 `json:"archive_encoded_bytes"`
	ArchiveAllocatedBytes *int64 `json:"archive_allocated_bytes"`
	QuotaEncodedBytes     *int64 `json:"quota_encoded_bytes"`
	// CompletedDeliveries is the cumulative count of completed deliveries
	// of the current history incarnation, from the primary's durable
	// delivery mark. ArchiveRecordCount is the archive's record count (all
	// incarnations; null while the archive has never been opened, the last
	// committed count while it is closed). A
	// healthy archive holds at least as many records as were completed:
	// monitoring can compare the two.
	CompletedDeliveries uint64 `json:"completed_deliveries"`
	ArchiveRecordCount  *int64 `json:"archive_record_count"`
}

// HealthReport is the /v1/health response.
type HealthReport struct {
	Ready     bool             `json:"ready"`
	Databases []DatabaseHealth `json:"databases"`
}

// DatabaseHealth is one database's health.
type DatabaseHealth struct {
	Alias string `json:"alias"`
	// HistoryIncarnation is the database's history incarnation: 1 until a
	// restore, then one more than any incarnation known for the database.
	HistoryIncarnation uint64       `json:"history_incarnation"`
	Index              string       `json:"index"` // unbuilt, ready or degraded
	Outbox             OutboxHealth `json:"outbox"`
}

// OutboxHealth is the outbox health classification of one database.
type OutboxHealth struct {
	State     string    `json:"state"`
	Reason    string    `json:"reason"`
	Since     time.Time `json:"since"`
	Conflicts uint64    `json:"conflicts"`
	// MissingRecords is how many completed events the archive lost at
	// least (reason archive_lost_records), 0 otherwise.
	MissingRecords int64 `json:"missing_records"`
}

// Options configure the handler.
type Options struct {
	Auth   Authenticator
	Stats  func() Stats        // O(1) per database; must not scan
	Health func() HealthReport // O(1) per database
	Logger *zap.Logger
	// StoreFailures logs credential store failures; nil: one of its own
	// (NewFailureLog) on Logger. The server shares one with its command
	// handler.
	StoreFailures *ratelog.Logger
}

// NewHandler returns the handler for /v1/stats, /v1/health and /healthz.
func NewHandler(opts Options) http.Handler {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.StoreFailures == nil {
		opts.StoreFailures = NewFailureLog(opts.Logger, nil, 0)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) {
		if _, ok := authorize(w, r, opts, capability.ReadStatistics, true); !ok {
			return
		}
		s := opts.Stats()
		if s.Databases == nil {
			s.Databases = []DatabaseStats{}
		}
		writeJSON(w, http.StatusOK, s)
	})
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		c, ok := authorize(w, r, opts, capability.ReadHealth, false)
		if !ok {
			return
		}
		h := opts.Health()
		if c.Database != "" { // a scoped capability sees its own database only
			var mine []DatabaseHealth
			for _, d := range h.Databases {
				if d.Alias == c.Database {
					mine = append(mine, d)
				}
			}
			h.Databases = mine
		}
		if h.Databases == nil {
			h.Databases = []DatabaseHealth{}
		}
		writeJSON(w, http.StatusOK, h)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "up"})
	})
	return mux
}

// BearerToken extracts the token of an "Authorization: Bearer …" header.
func BearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", false
	}
	return strings.TrimSpace(h[len(prefix):]), true
}

// Authenticate resolves the request's bearer token with auth. It writes
// the response itself when the request may not continue: 401 for a missing
// or refused token, and 500 without details when the credential store
// cannot be read, which it records in failures (the operator's only sign
// of it). It reports whether to continue.
func Authenticate(w http.ResponseWriter, r *http.Request, auth Authenticator, failures *ratelog.Logger) (capability.Capability, bool) {
	token, ok := BearerToken(r)
	if !ok {
		Unauthorized(w, "a bearer token is required")
		return capability.Capability{}, false
	}
	c, err := auth.Authenticate(token)
	switch {
	case err == nil:
		failures.Clear()
		return c, true
	case errors.Is(err, capability.ErrUnauthenticated):
		failures.Clear() // the store was read
		Unauthorized(w, "the bearer token is not valid")
	default:
		failures.Error(err)
		WriteError(w, http.StatusInternalServerError, "internal", "the credential store cannot be read")
	}
	return capability.Capability{}, false
}

// authorize checks the request's bearer token for permission p. With global
// set, only a global capability passes; otherwise a capability scoped to any
// database passes too (the handler narrows what it shows). It writes the
// 401/403/500 response itself and reports whether to continue.
func authorize(w http.ResponseWriter, r *http.Request, opts Options, p capability.Permission, global bool) (capability.Capability, bool) {
	c, ok := Authenticate(w, r, opts.Auth, opts.StoreFailures)
	if !ok {
		return capability.Capability{}, false
	}
	allowed := c.Allows(p, "")
	if !global && c.Database != "" {
		allowed = c.Allows(p, c.Database)
	}
	if !allowed {
		scope := "this capability lacks the " + string(p) + " permission"
		if global && c.Database != "" {
			scope = "a global capability with " + string(p) + " is required; this one is scoped to one database"
		}
		WriteError(w, http.StatusForbidden, "forbidden", scope)
		return capability.Capability{}, false
	}
	return c, true
}

// Unauthorized writes a 401 with a WWW-Authenticate challenge.
func Unauthorized(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="riffdb"`)
	WriteError(w, http.StatusUnauthorized, "unauthenticated", msg)
}

// ErrorBody is the JSON body of every error response.
type ErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// WriteError writes a JSON error response.
func WriteError(w http.ResponseWriter, status int, code, msg string) {
	var b ErrorBody
	b.Error.Code, b.Error.Message = code, msg
	writeJSON(w, status, b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
