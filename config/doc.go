// Package config parses, completes and validates riffdb's server
// configuration: one TOML file, applied at startup (changing it requires a
// restart).
//
// # Model
//
// A server runs in mode "primary" or "follower" and hosts 1 to MaxDatabases
// databases. The file uses one of two forms, never both:
//
//   - the single form: [database] (alias "default") and optionally
//     [maintenance.outbox];
//   - the named form: [databases.<alias>] and optionally
//     [databases.<alias>.outbox], one pair per database.
//
// A database's outbox section configures its durable local outbox archive
// (kind "durable_local", a directory and a quota of encoded bytes). Omitting
// it is valid and keeps the no-destination behaviour: intents stay pending and
// outbox health is degraded. A follower has no outbox destination, so any
// outbox section on a follower is rejected.
//
// # Paths and roles
//
// Every path the server owns plays a role: the server's credential_path and,
// per database, path, backup_root, projection_root, replication_path and the
// outbox directory. Each must be absolute and lexically normalized
// (filepath.Clean leaves it unchanged), and no two roles of any databases may
// be equal or nested: the archive's custody checks and the databases' own
// stores rely on owning their directories exclusively. The contract file is a
// read-only input, so databases may share one, but it must lie outside every
// role.
//
// # Backup limits
//
// A database with a backup_root has three limits on its backups, each with
// a default (backup_keep 7, backup_reserve_bytes 1 GiB, backup_min_interval
// "1m"), so that a token allowed to take backups cannot fill the disk the
// database writes to. Setting one without backup_root is refused, and so is
// backup_keep = 0: there is no "keep every backup".
//
// # Precedence
//
// Parse applies command-line overrides, then RIFFDB_* environment variables,
// then the file, then the Default* constants, and validates the result.
//
// # Errors
//
// Decoding is strict: unknown options, duplicate keys and values of the wrong
// type are rejected. Every validation error wraps ErrInvalid, and its message
// names the option or role concerned ("config: databases.orders.outbox.directory
// overlaps databases.billing.path") but never echoes a value, because values
// are often paths and error messages reach logs and users.
package config
