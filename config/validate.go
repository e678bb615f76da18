package config

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/riffdb/riffdb/internal/hygiene/alias"
)

// logLevels are the accepted values of telemetry.log_level.
var logLevels = []string{"debug", "info", "warn", "error"}

// Validate checks c and returns the first problem found, wrapping
// ErrInvalid. Messages name options and roles, never their values. It checks
// the server mode and listeners, the credential path, telemetry, 1 to
// MaxDatabases databases with valid unique aliases, that every path is
// absolute and normalized, that no two roles of any databases or the server
// overlap, that contracts lie outside every data role, that outbox sections
// are well-formed, and that a follower has no outbox section.
func (c *Config) Validate() error {
	if err := c.validateServer(); err != nil {
		return err
	}
	if err := c.validateTelemetry(); err != nil {
		return err
	}
	switch n := len(c.Databases); {
	case n == 0:
		return invalidf("no database is configured: add a [database] table or [databases.<alias>] tables")
	case n > MaxDatabases:
		return invalidf("at most %d databases may be configured, found %d", MaxDatabases, n)
	}
	seen := make(map[string]bool, len(c.Databases))
	for i := range c.Databases {
		d := &c.Databases[i]
		if !alias.Valid(d.Alias) {
			return invalidf("database alias %s is invalid: an alias is "+alias.Syntax, aliasName(d.Alias))
		}
		if seen[d.Alias] {
			return invalidf("database alias %s is configured twice", aliasName(d.Alias))
		}
		seen[d.Alias] = true
		if err := c.validateDatabase(d); err != nil {
			return err
		}
	}
	return c.validateDisjoint()
}

func (c *Config) validateServer() error {
	s := &c.Server
	if s.Mode != ModePrimary && s.Mode != ModeFollower {
		return invalidf("server.mode must be %q or %q", ModePrimary, ModeFollower)
	}
	if err := checkAddress("server.listen", s.Listen, true); err != nil {
		return err
	}
	if err := checkAddress("server.metrics_listen", s.MetricsListen, true); err != nil {
		return err
	}
	if _, port, _ := net.SplitHostPort(s.Listen); s.Listen == s.MetricsListen && port != "0" {
		return invalidf("server.metrics_listen must differ from server.listen")
	}
	if s.MaxConnections < 0 || s.MaxConnections > MaxConnectionsLimit {
		return invalidf("server.max_connections must be between 0 (derived from the descriptor limit) and %d", MaxConnectionsLimit)
	}
	if s.MetricsMaxConnections < 0 || s.MetricsMaxConnections > MaxConnectionsLimit {
		return invalidf("server.metrics_max_connections must be between 0 (derived from the descriptor limit) and %d", MaxConnectionsLimit)
	}
	if s.MaxConnectionsPerPeer < 0 || s.MaxConnectionsPerPeer > MaxConnectionsLimit {
		return invalidf("server.max_connections_per_peer must be between 0 (derived from server.max_connections) and %d", MaxConnectionsLimit)
	}
	if s.MaxConnections > 0 && s.MaxConnectionsPerPeer > s.MaxConnections {
		return invalidf("server.max_connections_per_peer (%d) must not exceed server.max_connections (%d)", s.MaxConnectionsPerPeer, s.MaxConnections)
	}
	if s.MemoryBudgetBytes != 0 && (s.MemoryBudgetBytes < MinMemoryBudgetBytes || s.MemoryBudgetBytes > MaxMemoryBudgetBytes) {
		return invalidf("server.memory_budget_bytes must be 0 (the default, %d) or between %d and %d",
			int64(DefaultMemoryBudgetBytes), int64(MinMemoryBudgetBytes), int64(MaxMemoryBudgetBytes))
	}
	if s.ShutdownGrace < 0 || s.ShutdownGrace > MaxShutdownGrace {
		return invalidf("server.shutdown_grace must be between 0s and %s", MaxShutdownGrace)
	}
	if (s.TLSCertPath == "") != (s.TLSKeyPath == "") {
		return invalidf("server.tls_cert_path and server.tls_key_path must be set together")
	}
	if err := checkPath("server.tls_cert_path", s.TLSCertPath, false); err != nil {
		return err
	}
	if err := checkPath("server.tls_key_path", s.TLSKeyPath, false); err != nil {
		return err
	}
	if s.TLSCertPath == "" && !s.AllowInsecureListen && !IsLoopback(s.Listen) {
		return invalidf("server.listen is not a loopback address and TLS is not configured: bearer tokens would cross the network in cleartext; " +
			"set server.tls_cert_path and server.tls_key_path, or set server.allow_insecure_listen = true to accept that")
	}
	return checkPath("server.credential_path", s.CredentialPath, true)
}

// IsLoopback reports whether the listener address addr (host:port) binds
// only loopback interfaces: "localhost" or a loopback IP literal. An empty
// host binds every interface and is not loopback.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (c *Config) validateTelemetry() error {
	t := &c.Telemetry
	ok := false
	for _, l := range logLevels {
		ok = ok || t.LogLevel == l
	}
	if !ok {
		return invalidf("telemetry.log_level must be one of %s", strings.Join(logLevels, ", "))
	}
	if t.OTLPEndpoint != "" {
		if err := checkAddress("telemetry.otlp_endpoint", t.OTLPEndpoint, false); err != nil {
			return err
		}
	}
	if !(t.TraceSampleRatio >= 0 && t.TraceSampleRatio <= 1) {
		return invalidf("telemetry.trace_sample_ratio must be a number between 0 and 1")
	}
	return nil
}

func (c *Config) validateDatabase(d *Database) error {
	for _, r := range []struct {
		option, path string
		required     bool
	}{
		{"path", d.Path, true},
		{"contract", d.Contract, true},
		{"backup_root", d.BackupRoot, false},
		{"projection_root", d.ProjectionRoot, false},
		{"replication_path", d.ReplicationPath, false},
	} {
		if err := checkPath(c.option(d, r.option), r.path, r.required); err != nil {
			return err
		}
	}
	switch {
	case d.BackupKeep < 0 || d.BackupKeep > MaxBackupKeep:
		return invalidf("%s must be between 1 and %d", c.option(d, "backup_keep"), MaxBackupKeep)
	case d.BackupReserveBytes < 0:
		return invalidf("%s must not be negative (0 keeps no reserve)", c.option(d, "backup_reserve_bytes"))
	case d.BackupMinInterval < 0 || d.BackupMinInterval > MaxBackupMinInterval:
		return invalidf("%s must be between 0s (no limit) and %s", c.option(d, "backup_min_interval"), MaxBackupMinInterval)
	}
	o := d.Outbox
	if o == nil {
		return nil
	}
	if c.Server.Mode == ModeFollower {
		return invalidf("%s is not allowed when server.mode is %q: a follower has no outbox destination", c.outbox(d, ""), ModeFollower)
	}
	switch o.Kind {
	case KindDurableLocal:
	case "":
		return invalidf("%s is required (the only kind is %q)", c.outbox(d, "kind"), KindDurableLocal)
	default:
		return invalidf("%s must be %q", c.outbox(d, "kind"), KindDurableLocal)
	}
	if err := checkPath(c.outbox(d, "directory"), o.Directory, true); err != nil {
		return err
	}
	if o.QuotaEncodedBytes <= 0 {
		return invalidf("%s must be set to an integer greater than zero", c.outbox(d, "quota_encoded_bytes"))
	}
	if o.ScrubPagesPerSecond < 0 || o.ScrubPagesPerSecond > MaxScrubPagesPerSecond {
		return invalidf("%s must be between 0 (no background scrub) and %d", c.outbox(d, "scrub_pages_per_second"), MaxScrubPagesPerSecond)
	}
	if o.MaxDeliveryAttempts < 0 || o.MaxDeliveryAttempts > MaxDeliveryAttempts {
		return invalidf("%s must be between 1 and %d (the default)", c.outbox(d, "max_delivery_attempts"), MaxDeliveryAttempts)
	}
	if o.FullValidationInterval < 0 {
		return invalidf(`%s must be a positive duration such as "168h"`, c.outbox(d, "full_validation_interval"))
	}
	if o.ScrubPagesPerSecond == 0 && o.FullValidationInterval == 0 {
		return invalidf(`%s = 0 turns the background scrub off, which then leaves only a start to validate old records: `+
			`set %s too (how long a start may trust records validated before it, such as "24h")`,
			c.outbox(d, "scrub_pages_per_second"), c.outbox(d, "full_validation_interval"))
	}
	return nil
}

// role is one configured path that the server owns.
type role struct{ name, path string }

// validateDisjoint rejects any two data roles that are equal or nested, and
// any contract file that equals or lies inside a data role. Contracts are
// read-only inputs, so databases may share one.
func (c *Config) validateDisjoint() error {
	roles := []role{{"server.credential_path", c.Server.CredentialPath}}
	for i := range c.Databases {
		d := &c.Databases[i]
		roles = append(roles, role{c.option(d, "path"), d.Path})
		for _, r := range []role{
			{c.option(d, "backup_root"), d.BackupRoot},
			{c.option(d, "projection_root"), d.ProjectionRoot},
			{c.option(d, "replication_path"), d.ReplicationPath},
		} {
			if r.path != "" {
				roles = append(roles, r)
			}
		}
		if d.Outbox != nil {
			roles = append(roles, role{c.outbox(d, "directory"), d.Outbox.Directory})
		}
	}
	for j := range roles {
		for i := range j {
			if overlaps(roles[i].path, roles[j].path) {
				return invalidf("%s overlaps %s: every role needs its own path, neither equal to nor inside another", roles[j].name, roles[i].name)
			}
		}
	}
	for i := range c.Databases {
		d := &c.Databases[i]
		for _, r := range roles {
			if within(d.Contract, r.path) {
				return invalidf("%s overlaps %s: the contract file must be outside every data path", c.option(d, "contract"), r.name)
			}
		}
	}
	return nil
}

// overlaps reports whether a and b, absolute and clean, are equal or one
// contains the other.
func overlaps(a, b string) bool { return within(a, b) || within(b, a) }

// within reports whether p equals dir or lies below it; both are absolute
// and clean.
func within(p, dir string) bool {
	if p == dir || dir == "/" {
		return true
	}
	return strings.HasPrefix(p, dir+"/")
}

// option names a database's option as the operator wrote it.
func (c *Config) option(d *Database, name string) string {
	if c.single && len(c.Databases) == 1 {
		return "database." + name
	}
	return "databases." + keyName([]string{d.Alias}) + "." + name
}

// outbox names a database's outbox section, or one of its options when name
// is not empty.
func (c *Config) outbox(d *Database, name string) string {
	s := "databases." + keyName([]string{d.Alias}) + ".outbox"
	if c.single && len(c.Databases) == 1 {
		s = "maintenance.outbox"
	}
	if name != "" {
		s += "." + name
	}
	return s
}

// checkPath checks that p is absolute and lexically normalized.
func checkPath(name, p string, required bool) error {
	switch {
	case p == "":
		if required {
			return invalidf("%s is required", name)
		}
		return nil
	case strings.IndexByte(p, 0) >= 0:
		return invalidf("%s contains a NUL byte", name)
	case !filepath.IsAbs(p):
		return invalidf("%s must be an absolute path", name)
	case filepath.Clean(p) != p:
		return invalidf("%s must be a normalized path: no '.' or '..' components, repeated separators or trailing separator", name)
	}
	return nil
}

// checkAddress checks a host:port listener or endpoint address. A listener
// may leave the host empty (all interfaces) and use port 0 (any free port).
func checkAddress(name, addr string, listener bool) error {
	if addr == "" {
		return invalidf("%s is required", name)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return invalidf("%s must be host:port", name)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	switch {
	case err != nil:
		return invalidf("%s must be host:port with a numeric port", name)
	case !listener && (n == 0 || host == ""):
		return invalidf("%s must be host:port with a host and a port from 1 to 65535", name)
	}
	return nil
}

// aliasName quotes an alias for a message, unless it is not a plain bare
// key, in which case it is not echoed (it could hold a path).
func aliasName(alias string) string {
	if isBareKey(alias) {
		return fmt.Sprintf("%q", alias)
	}
	return "<quoted key>"
}
