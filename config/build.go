package config

import (
	"maps"
	"slices"
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
	if s := r.Server; s != nil {
		c.Server = Server{Mode: s.Mode, Listen: s.Listen, MetricsListen: s.MetricsListen, CredentialPath: s.CredentialPath}
	}
	if t := r.Telemetry; t != nil {
		c.Telemetry = Telemetry{LogLevel: t.LogLevel, OTLPEndpoint: t.OTLPEndpoint, TraceSampleRatio: 1}
		if t.TraceSampleRatio != nil {
			c.Telemetry.TraceSampleRatio = *t.TraceSampleRatio
		}
	} else {
		c.Telemetry.TraceSampleRatio = 1
	}

	if d := r.Database; d != nil {
		db := d.build(DefaultAlias)
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
		db := d.build(alias)
		if d.Outbox != nil {
			db.Outbox = d.Outbox.build()
		}
		c.Databases = append(c.Databases, db)
	}
	return c, nil
}

func (d *rawDatabase) build(alias string) Database {
	db := Database{Alias: alias, Path: d.Path, Contract: d.Contract, BackupRoot: d.BackupRoot,
		ProjectionRoot: d.ProjectionRoot, ReplicationPath: d.ReplicationPath}
	if d.HistoryRetention != nil {
		db.HistoryRetention = *d.HistoryRetention
	}
	return db
}

func (o *rawOutbox) build() *Outbox {
	return &Outbox{Kind: o.Kind, Directory: o.Directory, QuotaEncodedBytes: o.QuotaEncodedBytes}
}
