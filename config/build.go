package config

import (
	"maps"
	"slices"
	"time"
)

// build turns the decoded document into a Config, enforcing the rules that
// depend on the document's shape: one of the two database forms, never both,
// and at most MaxDatabases databases. Everything else is checked by Validate.
func (r *rawFile) build() (*Config, error) {
	named := r.Databases != nil
	singleOutbox := r.Maintenance != nil && r.Maintenance.Outbox != nil
	switch {
	case r.Database != nil && named:
		return nil, invalidf("the single-database form [database] and the named form [databases.<alias>] cannot be mixed: use one of them")
	case singleOutbox && named:
		return nil, invalidf("[maintenance.outbox] belongs to the single-database form and cannot be combined with [databases.<alias>]: use [databases.<alias>.outbox]")
	case singleOutbox && r.Database == nil:
		return nil, invalidf("[maintenance.outbox] requires the [database] table of the single-database form")
	case r.Database == nil && !named:
		return nil, invalidf("no database is configured: add a [database] table or [databases.<alias>] tables")
	case len(r.Databases) > MaxDatabases:
		return nil, invalidf("at most %d databases may be configured, found %d", MaxDatabases, len(r.Databases))
	}

	c := &Config{single: r.Database != nil}
	c.Server.ShutdownGrace = DefaultShutdownGrace
	if s := r.Server; s != nil {
		if err := s.build(&c.Server); err != nil {
			return nil, err
		}
	}
	c.Telemetry.TraceSampleRatio = 1
	c.Telemetry.TrustTraceContext = true
	if t := r.Telemetry; t != nil {
		c.Telemetry.LogLevel, c.Telemetry.OTLPEndpoint = t.LogLevel, t.OTLPEndpoint
		c.Telemetry.HonorSampledParent = t.HonorSampledParent
		if t.TraceSampleRatio != nil {
			c.Telemetry.TraceSampleRatio = *t.TraceSampleRatio
		}
		if t.TrustTraceContext != nil {
			c.Telemetry.TrustTraceContext = *t.TrustTraceContext
		}
	}

	if d := r.Database; d != nil {
		db, err := d.build(DefaultAlias, "database.")
		if err != nil {
			return nil, err
		}
		if singleOutbox {
			db.Outbox = r.Maintenance.Outbox.build()
		}
		c.Databases = []Database{db}
		return c, nil
	}

	for _, alias := range slices.Sorted(maps.Keys(r.Databases)) {
		d := r.Databases[alias]
		if d == nil {
			// go-toml never stores a nil entry; guard anyway so that a
			// hand-built rawFile cannot panic here.
			return nil, invalidf("database %s has no options", aliasName(alias))
		}
		db, err := d.build(alias, "databases."+keyName([]string{alias})+".")
		if err != nil {
			return nil, err
		}
		if d.Outbox != nil {
			db.Outbox = d.Outbox.build()
		}
		c.Databases = append(c.Databases, db)
	}
	return c, nil
}

// build copies [server] into s (whose defaults are already set).
func (r *rawServer) build(s *Server) error {
	s.Mode, s.Listen, s.MetricsListen, s.CredentialPath = r.Mode, r.Listen, r.MetricsListen, r.CredentialPath
	s.TLSCertPath, s.TLSKeyPath, s.AllowInsecureListen = r.TLSCertPath, r.TLSKeyPath, r.AllowInsecureListen
	for _, o := range []struct {
		name, zero string
		raw        *int64
		dst        *int
	}{
		{"server.max_connections", "the descriptor limit", r.MaxConnections, &s.MaxConnections},
		{"server.metrics_max_connections", "the descriptor limit", r.MetricsMaxConnections, &s.MetricsMaxConnections},
		{"server.max_connections_per_peer", "server.max_connections", r.MaxConnectionsPerPeer, &s.MaxConnectionsPerPeer},
	} {
		if o.raw == nil {
			continue
		}
		if *o.raw < 0 || *o.raw > MaxConnectionsLimit {
			return invalidf("%s must be between 0 (derived from %s) and %d", o.name, o.zero, MaxConnectionsLimit)
		}
		*o.dst = int(*o.raw)
	}
	if r.ShutdownGrace != nil {
		d, err := time.ParseDuration(*r.ShutdownGrace)
		if err != nil {
			return invalidf(`server.shutdown_grace must be a duration such as "10s" or "1m30s"`)
		}
		s.ShutdownGrace = d
	}
	if r.MemoryBudgetBytes != nil {
		s.MemoryBudgetBytes = *r.MemoryBudgetBytes // range-checked by Validate
	}
	return nil
}

// build copies a database's table; prefix ("database." or
// "databases.<alias>.") names its options in messages. An absent backup
// limit gets its default. A backup limit without backup_root is refused: it
// would limit nothing, and the operator who wrote it expects backups. An
// explicit backup_keep = 0 is refused here, since a zero BackupKeep in a
// Config means the default; the ranges are checked by Validate.
func (d *rawDatabase) build(alias, prefix string) (Database, error) {
	db := Database{Alias: alias, Path: d.Path, Contract: d.Contract, BackupRoot: d.BackupRoot,
		ProjectionRoot: d.ProjectionRoot, ReplicationPath: d.ReplicationPath,
		BackupKeep: DefaultBackupKeep, BackupReserveBytes: DefaultBackupReserveBytes, BackupMinInterval: DefaultBackupMinInterval}
	if d.HistoryRetention != nil {
		db.HistoryRetention = *d.HistoryRetention
	}
	for _, o := range []struct {
		name string
		set  bool
	}{{"backup_keep", d.BackupKeep != nil}, {"backup_reserve_bytes", d.BackupReserveBytes != nil}, {"backup_min_interval", d.BackupMinInterval != nil}} {
		if o.set && d.BackupRoot == "" {
			return Database{}, invalidf("%s%s needs %sbackup_root: without it the database takes no backups", prefix, o.name, prefix)
		}
	}
	if d.BackupKeep != nil {
		if *d.BackupKeep < 1 || *d.BackupKeep > MaxBackupKeep {
			return Database{}, invalidf("%sbackup_keep must be between 1 and %d", prefix, MaxBackupKeep)
		}
		db.BackupKeep = int(*d.BackupKeep)
	}
	if d.BackupReserveBytes != nil {
		db.BackupReserveBytes = *d.BackupReserveBytes // range-checked by Validate
	}
	if d.BackupMinInterval != nil {
		v, err := time.ParseDuration(*d.BackupMinInterval)
		if err != nil {
			return Database{}, invalidf(`%sbackup_min_interval must be a duration such as "1m" or "0s"`, prefix)
		}
		db.BackupMinInterval = v
	}
	return db, nil
}

func (o *rawOutbox) build() *Outbox {
	out := &Outbox{Kind: o.Kind, Directory: o.Directory, QuotaEncodedBytes: o.QuotaEncodedBytes,
		ScrubPagesPerSecond: DefaultScrubPagesPerSecond}
	if o.MaxDeliveryAttempts != nil {
		// Out of range (kept as -1 below 1) is refused by Validate, which
		// names the option.
		out.MaxDeliveryAttempts = int(min(*o.MaxDeliveryAttempts, MaxDeliveryAttempts+1))
		if out.MaxDeliveryAttempts < 1 {
			out.MaxDeliveryAttempts = -1
		}
	}
	if o.ScrubPagesPerSecond != nil {
		// Out-of-range values are refused by Validate, which names the
		// option; clamp only what an int cannot hold.
		out.ScrubPagesPerSecond = int(max(-1, min(*o.ScrubPagesPerSecond, MaxScrubPagesPerSecond+1)))
	}
	if o.FullValidationInterval != nil {
		v, err := time.ParseDuration(*o.FullValidationInterval)
		if err != nil || v <= 0 {
			v = -1 // refused by Validate, which names the option
		}
		out.FullValidationInterval = v
	}
	return out
}
