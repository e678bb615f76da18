package capability

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Sentinel errors.
var (
	// ErrUnauthenticated is returned by Authenticate for a token that is
	// malformed, unknown, revoked or expired. Callers map it to HTTP 401 and
	// must not tell the cases apart to the client.
	ErrUnauthenticated = errors.New("capability: unauthenticated")
	// ErrNotFound is returned by Revoke when no capability has the id.
	ErrNotFound = errors.New("capability: not found")
	// ErrInvalid is returned for an unknown permission, an empty permission
	// list, or a malformed name, database alias or id.
	ErrInvalid = errors.New("capability: invalid")
	// ErrCorrupt is returned when the credential store cannot be read as a
	// valid store: an unparsable store file, a missing or malformed key file,
	// a store file missing while its key exists, or a store file whose
	// integrity tag does not match it and the key file (either damaged, or
	// the two not from the same copy of the directory). Its messages name
	// the file and say what to do: restore the directory from a backup, or
	// create new capabilities.
	ErrCorrupt = errors.New("capability: credential store is corrupt")
	// ErrInsecure is returned when the credential directory or one of its
	// files is not private: wrong type, mode or owner, or a symbolic link.
	ErrInsecure = errors.New("capability: credential store is not private")
)

// Permission is one thing a capability may allow.
type Permission string

// Permissions.
const (
	// ExecuteCommands allows running compiled commands against a database.
	ExecuteCommands Permission = "execute_commands"
	// ReadStatistics allows reading the stats endpoint. Only a global
	// capability satisfies it.
	ReadStatistics Permission = "read_statistics"
	// ReadHealth allows reading the health endpoint. A global capability
	// sees every database; one scoped to a database sees that database only.
	ReadHealth Permission = "read_health"
	// ManageCapabilities allows creating, listing and revoking capabilities.
	// Only a global capability satisfies it.
	ManageCapabilities Permission = "manage_capabilities"
	// ManageBackups allows taking and listing a database's backups through
	// the server. A global capability satisfies it for every database; one
	// scoped to a database, for that database only. (Restoring is offline
	// and needs no capability: it needs the server stopped and access to
	// the database's files.)
	ManageBackups Permission = "manage_backups"
	// ReadOutbox allows listing a database's undelivered events and looking
	// one up (GET /v1/databases/{alias}/outbox/deliveries). A global
	// capability satisfies it for every database; one scoped to a database,
	// for that database only. read_statistics does not: the counts it shows
	// name no event.
	ReadOutbox Permission = "read_outbox"
	// ManageOutbox allows redriving a database's dead letters (POST
	// /v1/databases/{alias}/outbox/dead-letters/retry). A global capability
	// satisfies it for every database; one scoped to a database, for that
	// database only. read_outbox does not: it reads, this changes what the
	// worker delivers.
	ManageOutbox Permission = "manage_outbox"
)

// GlobalOnly reports whether only a global capability can use p: a
// capability scoped to a database with p would be refused everywhere.
func (p Permission) GlobalOnly() bool {
	return p == ReadStatistics || p == ManageCapabilities
}

// MaxLifetime bounds the lifetime of an expiring capability.
const MaxLifetime = 10 * 365 * 24 * time.Hour

// allPermissions lists every permission, in canonical order.
var allPermissions = []Permission{ExecuteCommands, ReadStatistics, ReadHealth, ManageCapabilities, ManageBackups, ReadOutbox, ManageOutbox}

// AllPermissions returns every known permission, in canonical order.
func AllPermissions() []Permission { return slices.Clone(allPermissions) }

// ParsePermission returns the permission named s, or an error wrapping
// ErrInvalid that lists the known permissions.
func ParsePermission(s string) (Permission, error) {
	p := Permission(s)
	if slices.Contains(allPermissions, p) {
		return p, nil
	}
	return "", fmt.Errorf("%w: unknown permission %q (known: execute_commands, read_statistics, read_health, manage_capabilities, manage_backups, read_outbox, manage_outbox)",
		ErrInvalid, truncate(s, 64))
}

// Capability is the stored description of one token. It never holds the
// token itself.
type Capability struct {
	// ID is a short random hex identifier, used to list and revoke.
	ID string `json:"id"`
	// Name is an operator-chosen label; it may be empty.
	Name string `json:"name"`
	// Permissions are the granted permissions, deduplicated, in canonical
	// order.
	Permissions []Permission `json:"permissions"`
	// Database is the alias the capability is scoped to, or "" for a global
	// capability.
	Database string `json:"database"`
	// CreatedAt is when the capability was created.
	CreatedAt time.Time `json:"created_at"`
	// Revoked reports whether the capability has been revoked.
	Revoked bool `json:"revoked"`
	// ExpiresAt is when the capability stops authenticating; the zero time
	// means never. Records written before expiry existed have none.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// Expired reports whether c has an expiry time and now is at or past it.
func (c Capability) Expired(now time.Time) bool {
	return !c.ExpiresAt.IsZero() && !now.Before(c.ExpiresAt)
}

// Allows reports whether c grants permission p for database. database ""
// is a global requirement, satisfied only by a global capability; otherwise
// a global capability or one scoped to that database satisfies it. A revoked
// capability allows nothing. Allows does not look at the expiry time:
// Authenticate refuses an expired capability's token.
func (c Capability) Allows(p Permission, database string) bool {
	if c.Revoked || !slices.Contains(c.Permissions, p) {
		return false
	}
	return c.Database == "" || (database != "" && c.Database == database)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
