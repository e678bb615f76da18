package config

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/riffdb/riffdb/internal/hygiene/pathless"
	"github.com/riffdb/riffdb/internal/hygiene/regularfile"
)

// Defaults applied when neither the command line, the environment nor the
// file sets an option.
const (
	DefaultListen        = "127.0.0.1:7420"
	DefaultMetricsListen = "127.0.0.1:9464"
	DefaultLogLevel      = "info"
	// DefaultShutdownGrace is how long a stopping server lets in-flight
	// requests finish (server.shutdown_grace).
	DefaultShutdownGrace = 10 * time.Second
	// MaxShutdownGrace bounds server.shutdown_grace.
	MaxShutdownGrace = time.Hour
	// MaxConnectionsLimit bounds server.max_connections and
	// server.metrics_max_connections.
	MaxConnectionsLimit = 1 << 20
	// MaxDatabases is the most databases one server may host.
	MaxDatabases = 32
	// DefaultMemoryBudgetBytes is the process's memory budget for its
	// storage engines when server.memory_budget_bytes is not set.
	DefaultMemoryBudgetBytes = 512 << 20
	// MinMemoryBudgetBytes and MaxMemoryBudgetBytes bound
	// server.memory_budget_bytes.
	MinMemoryBudgetBytes = 64 << 20
	MaxMemoryBudgetBytes = 1 << 40
	// DefaultScrubPagesPerSecond is the background scrub's rate when an
	// outbox section does not set scrub_pages_per_second.
	DefaultScrubPagesPerSecond = 4
	// MaxScrubPagesPerSecond bounds scrub_pages_per_second.
	MaxScrubPagesPerSecond = 256
	// MaxDeliveryAttempts is max_delivery_attempts' default and its upper
	// bound: DESIGN's budget of 32 attempts (outbox.MaxAttempts).
	MaxDeliveryAttempts = 32
	// DefaultFullValidationInterval is full_validation_interval when an
	// outbox section does not set it: a start validates the whole archive
	// when its last full validation (a start's, or a complete background
	// scrub pass) is older than a week.
	DefaultFullValidationInterval = 7 * 24 * time.Hour
	// DefaultBackupKeep is backup_keep when a database with a backup_root
	// does not set it; MaxBackupKeep bounds it.
	DefaultBackupKeep = 7
	MaxBackupKeep     = 1000
	// DefaultBackupReserveBytes is backup_reserve_bytes when a database
	// does not set it: 1 GiB left free on backup_root's filesystem.
	DefaultBackupReserveBytes = 1 << 30
	// DefaultBackupMinInterval is backup_min_interval when a database does
	// not set it; MaxBackupMinInterval bounds it.
	DefaultBackupMinInterval = time.Minute
	MaxBackupMinInterval     = 7 * 24 * time.Hour
)

// Server modes.
const (
	ModePrimary  = "primary"
	ModeFollower = "follower"
)

// KindDurableLocal is the only outbox destination kind.
const KindDurableLocal = "durable_local"

// DefaultAlias is the alias of the database of the single-database form.
const DefaultAlias = "default"

// maxFileSize bounds what Load reads, so that pointing --config at a device
// or a huge file fails quickly instead of exhausting memory.
const maxFileSize = 4 << 20

// ErrInvalid is wrapped by every error that reports an invalid configuration:
// bad TOML, unknown or duplicate options, missing or malformed values, and
// paths that are relative, not normalized or overlapping. Its messages name
// options and roles, never paths or other values from the file.
var ErrInvalid = errors.New("config: invalid configuration")

// ErrUnreadable is wrapped by Load when the configuration file cannot be
// read. The error carries the operating system's reason but not the path.
var ErrUnreadable = errors.New("config: cannot read the configuration file")

// ErrNotRegular is wrapped, with ErrUnreadable, by Load when the path names
// something other than a regular file.
var ErrNotRegular = errors.New("not a regular file")

// Config is one server's validated configuration. It is applied at startup;
// changing it requires a restart.
type Config struct {
	Server    Server
	Databases []Database // sorted by alias; the single form yields one database with Alias "default"
	Telemetry Telemetry

	// single records that the file used the single-database form, so that
	// validation messages name the options as the operator wrote them.
	single bool
}

// Server holds the process-wide options of table [server].
type Server struct {
	Mode           string // "primary" (default) or "follower"
	Listen         string // API listener: commands, stats, health
	MetricsListen  string // Prometheus /metrics listener
	CredentialPath string // required, absolute

	// MaxConnections and MetricsMaxConnections cap the open connections of
	// the API and metrics listeners (server.max_connections,
	// server.metrics_max_connections). 0, the default, derives both from
	// the process's descriptor limit at startup (see the server package).
	MaxConnections        int
	MetricsMaxConnections int
	// MaxConnectionsPerPeer caps the API connections one client address
	// (an IPv4 address, an IPv6 /64) keeps open
	// (server.max_connections_per_peer). 0, the default, is a sixteenth
	// of the API's cap, at least 32; a value above the API's cap means
	// the whole cap. A reverse proxy on the same host is one address: give
	// it the whole cap.
	MaxConnectionsPerPeer int
	// ShutdownGrace is how long in-flight requests may run after the first
	// SIGINT/SIGTERM (server.shutdown_grace, a Go duration such as "10s").
	ShutdownGrace time.Duration
	// TLSCertPath and TLSKeyPath, both set or both empty, serve the API
	// over TLS 1.2+ (server.tls_cert_path, server.tls_key_path). They are
	// read at startup.
	TLSCertPath, TLSKeyPath string
	// AllowInsecureListen lets the API listen on a non-loopback address
	// without TLS (server.allow_insecure_listen). Bearer tokens then cross
	// the network in cleartext.
	AllowInsecureListen bool
	// MemoryBudgetBytes is the memory the storage engines of every hosted
	// database share: the block caches and the memtables, sized from it and
	// from the number of databases (server.memory_budget_bytes,
	// internal/process/membudget). 0 means
	// DefaultMemoryBudgetBytes. It bounds the engines, not the Go heap of
	// requests in flight.
	MemoryBudgetBytes int64
}

// Database is one hosted database: table [database] in the single form, or
// [databases.<alias>] in the named form.
type Database struct {
	Alias            string
	Path             string // required
	Contract         string // required: path of the contract TOML file (read-only input)
	BackupRoot       string // optional role, checked for disjointness
	ProjectionRoot   string // optional role, checked for disjointness
	ReplicationPath  string // optional role, checked for disjointness
	HistoryRetention uint64 // option history_retention: newest commits to keep; 0 (default) keeps all history
	// BackupKeep is how many of the database's backups stay under
	// backup_root (backup_keep, 1 to MaxBackupKeep): once a new backup is
	// complete, the oldest beyond it are removed. 0 means
	// DefaultBackupKeep (a file cannot say 0).
	BackupKeep int
	// BackupReserveBytes is the free space a backup must leave on
	// backup_root's filesystem (backup_reserve_bytes). 0 keeps no reserve:
	// only a backup that would not fit is refused. A file that omits the
	// option gets DefaultBackupReserveBytes.
	BackupReserveBytes int64
	// BackupMinInterval is the least time between the starts of two
	// backups of the database through the API (backup_min_interval, 0 to
	// MaxBackupMinInterval); 0 sets no limit. A file that omits the option
	// gets DefaultBackupMinInterval.
	BackupMinInterval time.Duration
	Outbox            *Outbox // nil when the database has no outbox section (no-destination behaviour)
}

// Outbox is a database's outbox destination: [maintenance.outbox] in the
// single form, [databases.<alias>.outbox] in the named form.
type Outbox struct {
	Kind              string // only "durable_local"
	Directory         string
	QuotaEncodedBytes int64 // > 0
	// ScrubPagesPerSecond is the background scrub's rate, in pages (at most
	// 256 records and 256 KiB each, archive.ScrubPageBytes) per second
	// (scrub_pages_per_second): the scrub re-reads the whole archive, over
	// and over, at this bounded rate. 0 disables it. A file that omits the
	// option gets DefaultScrubPagesPerSecond.
	ScrubPagesPerSecond int
	// FullValidationInterval (full_validation_interval, a positive
	// duration) bounds how long a start trusts the archive's validated
	// prefix: a start validates every record when the whole archive was
	// last validated (by a start, or by a complete background scrub pass)
	// longer ago than this, or when that is not known. 0 means the option
	// was not set: DefaultFullValidationInterval applies, and
	// scrub_pages_per_second = 0 is refused, since with the scrub off the
	// interval is the only bound and the operator must choose it. A value
	// the file sets that is not a positive duration is kept as -1, which
	// Validate refuses naming the option.
	FullValidationInterval time.Duration
	// MaxDeliveryAttempts (max_delivery_attempts, 1 to MaxDeliveryAttempts)
	// is how many attempts an event may spend before it is dead-lettered
	// (attempts_exhausted): the budget may be lowered, never raised. 0 means
	// the option was not set (EffectiveMaxDeliveryAttempts); a value the
	// file sets below 1 is kept as -1, which Validate refuses naming the
	// option.
	MaxDeliveryAttempts int
}

// EffectiveMaxDeliveryAttempts is MaxDeliveryAttempts, or
// MaxDeliveryAttempts (the constant) when the option was not set.
func (o *Outbox) EffectiveMaxDeliveryAttempts() int {
	return cmp.Or(o.MaxDeliveryAttempts, MaxDeliveryAttempts)
}

// EffectiveFullValidationInterval is FullValidationInterval, or
// DefaultFullValidationInterval when the option was not set.
func (o *Outbox) EffectiveFullValidationInterval() time.Duration {
	return cmp.Or(o.FullValidationInterval, DefaultFullValidationInterval)
}

// Telemetry holds the options of table [telemetry].
type Telemetry struct {
	LogLevel         string  // debug|info|warn|error, default info
	OTLPEndpoint     string  // host:port of an OTLP/gRPC collector; "" = traces not exported
	TraceSampleRatio float64 // option trace_sample_ratio, 0..1, default 1
	// TrustTraceContext honours an incoming W3C trace context
	// (traceparent/tracestate) on authenticated command requests
	// (telemetry.trust_trace_context, default true). Every other request's
	// trace context is dropped.
	TrustTraceContext bool
	// HonorSampledParent samples every request whose trusted parent is
	// sampled, whatever trace_sample_ratio says
	// (telemetry.honor_sampled_parent, default false: the ratio decides).
	HonorSampledParent bool
}

// Overrides are command-line values; empty fields leave the config alone.
type Overrides struct {
	Listen, MetricsListen, LogLevel, OTLPEndpoint string
}

// Environment variables read by Parse. Each overrides the file's option of
// the same name and is overridden by the command line.
const (
	EnvServerMode            = "RIFFDB_SERVER_MODE"
	EnvServerListen          = "RIFFDB_SERVER_LISTEN"
	EnvServerMetricsListen   = "RIFFDB_SERVER_METRICS_LISTEN"
	EnvServerCredentialPath  = "RIFFDB_SERVER_CREDENTIAL_PATH"
	EnvTelemetryLogLevel     = "RIFFDB_TELEMETRY_LOG_LEVEL"
	EnvTelemetryOTLPEndpoint = "RIFFDB_TELEMETRY_OTLP_ENDPOINT"
	EnvTelemetrySampleRatio  = "RIFFDB_TELEMETRY_TRACE_SAMPLE_RATIO"
)

// Load reads the file at path and parses it with Parse. A file that cannot
// be read yields an error wrapping ErrUnreadable whose message carries the
// operating system's reason without the path; an invalid configuration
// yields an error wrapping ErrInvalid.
//
// The file must be a regular file (a symbolic link to one is followed):
// anything else (a FIFO, which would block, a device, a directory) yields
// an error wrapping ErrUnreadable and ErrNotRegular. The file is opened
// without blocking and examined before anything is read from it.
func Load(path string, env func(string) string, o Overrides) (*Config, error) {
	data, _, err := regularfile.Read(path, maxFileSize, regularfile.Follow)
	switch {
	case errors.Is(err, regularfile.ErrNotRegular):
		return nil, unreadable(ErrNotRegular)
	case errors.Is(err, regularfile.ErrTooLarge):
		return nil, invalidf("the configuration file is larger than %d bytes", maxFileSize)
	case err != nil:
		return nil, unreadable(err)
	}
	return Parse(data, env, o)
}

// unreadable strips the path from an *fs.PathError and wraps the reason.
func unreadable(err error) error {
	if _, cause, ok := pathless.PathCause(err); ok {
		err = cause
	}
	return fmt.Errorf("%w: %w", ErrUnreadable, err)
}

// Parse decodes data as strict TOML, applies the precedence command line
// (o) > RIFFDB_* environment (env; nil means none) > file > defaults, and
// validates the result. Every error it returns wraps ErrInvalid.
func Parse(data []byte, env func(string) string, o Overrides) (*Config, error) {
	raw, err := decode(data)
	if err != nil {
		return nil, err
	}
	c, err := raw.build()
	if err != nil {
		return nil, err
	}
	if env == nil {
		env = func(string) string { return "" }
	}
	c.Server.Mode = cmp.Or(env(EnvServerMode), c.Server.Mode, ModePrimary)
	c.Server.Listen = cmp.Or(o.Listen, env(EnvServerListen), c.Server.Listen, DefaultListen)
	c.Server.MetricsListen = cmp.Or(o.MetricsListen, env(EnvServerMetricsListen), c.Server.MetricsListen, DefaultMetricsListen)
	c.Server.CredentialPath = cmp.Or(env(EnvServerCredentialPath), c.Server.CredentialPath)
	c.Telemetry.LogLevel = cmp.Or(o.LogLevel, env(EnvTelemetryLogLevel), c.Telemetry.LogLevel, DefaultLogLevel)
	c.Telemetry.OTLPEndpoint = cmp.Or(o.OTLPEndpoint, env(EnvTelemetryOTLPEndpoint), c.Telemetry.OTLPEndpoint)
	if s := env(EnvTelemetrySampleRatio); s != "" {
		r, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, invalidf("%s must be a number between 0 and 1", EnvTelemetrySampleRatio)
		}
		c.Telemetry.TraceSampleRatio = r
	}
	slices.SortFunc(c.Databases, func(a, b Database) int { return cmp.Compare(a.Alias, b.Alias) })
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// Database returns the database with the given alias.
func (c *Config) Database(alias string) (*Database, bool) {
	for i := range c.Databases {
		if c.Databases[i].Alias == alias {
			return &c.Databases[i], true
		}
	}
	return nil, false
}

// invalidf returns an error wrapping ErrInvalid with message
// "config: <formatted>".
func invalidf(format string, args ...any) error {
	return &invalidError{msg: "config: " + fmt.Sprintf(format, args...)}
}

// invalidError is an ErrInvalid whose message is the specific reason, so that
// users see "config: unknown option …" rather than two stacked prefixes.
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }
