package cli

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/riffdb/riffdb/capability"
	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/internal/hygiene/pathless"
	"github.com/riffdb/riffdb/server"
)

// loadCapabilityConfig loads the configuration named by --config for the
// capability commands, with the same error codes as config check.
func loadCapabilityConfig(path string) (*config.Config, error) {
	c, err := config.Load(path, getenv, config.Overrides{})
	switch {
	case errors.Is(err, config.ErrUnreadable):
		return nil, Local("config_unreadable", "%s", strings.TrimPrefix(err.Error(), "config: "))
	case err != nil:
		return nil, Local("invalid_config", "%s", err.Error())
	}
	return c, nil
}

// openCapabilityStore opens the configuration's credential store, creating
// it if needed. Errors name the problem, never the path.
func openCapabilityStore(c *config.Config) (*capability.Store, error) {
	s, err := capability.OpenWith(c.Server.CredentialPath, capability.Options{Anchor: server.NewCredentialAnchor(c)})
	if err != nil {
		return nil, capabilityStoreError(err)
	}
	return s, nil
}

// credentialStoreExists reports whether the credential directory exists, so
// that read-only commands can avoid creating it.
func credentialStoreExists(c *config.Config) (bool, error) {
	_, err := os.Lstat(c.Server.CredentialPath)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		if _, cause, ok := pathless.PathCause(err); ok {
			err = cause
		}
		return false, Local("credentials_unavailable", "cannot examine the credential store (credential_path): %v", err)
	}
}

// capabilityStoreError classifies a credential-store failure. The capability
// package keeps paths out of its messages.
func capabilityStoreError(err error) error {
	switch {
	case errors.Is(err, capability.ErrInsecure):
		return Local("credentials_insecure", "%v (credential_path must be a 0700 directory of 0600 files owned by this user)", err)
	case errors.Is(err, capability.ErrRolledBack):
		return Local("credentials_rolled_back", "%v", err)
	case errors.Is(err, capability.ErrNotAnchored):
		return Local("credentials_not_anchored", "%v", pathless.Error(err))
	case errors.Is(err, capability.ErrCorrupt):
		return Local("credentials_corrupt", "%v", err)
	default:
		return Local("credentials_unavailable", "%v", err)
	}
}

// capabilityResult is one capability as the capability commands report it.
type capabilityResult struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	Permissions []string `json:"permissions"`
	// Database is the alias the capability is scoped to; "" means global.
	Database  string `json:"database"`
	CreatedAt string `json:"created_at"`
	Revoked   bool   `json:"revoked"`
	// ExpiresAt is when the token stops authenticating; null: never.
	ExpiresAt *string `json:"expires_at"`
	// Expired reports whether ExpiresAt has passed (at now).
	Expired bool `json:"expired"`
}

// timeFormat is RFC 3339 in UTC with as many fractional digits as needed.
const timeFormat = "2006-01-02T15:04:05.999999999Z07:00"

// newCapabilityResult describes c as it stands at now.
func newCapabilityResult(c capability.Capability, now time.Time) capabilityResult {
	perms := make([]string, len(c.Permissions))
	for i, p := range c.Permissions {
		perms[i] = string(p)
	}
	r := capabilityResult{ID: c.ID, Name: c.Name, Permissions: perms, Database: c.Database,
		CreatedAt: c.CreatedAt.UTC().Format(timeFormat), Revoked: c.Revoked, Expired: c.Expired(now)}
	if !c.ExpiresAt.IsZero() {
		at := c.ExpiresAt.UTC().Format(timeFormat)
		r.ExpiresAt = &at
	}
	return r
}

func scopeText(database string) string {
	if database == "" {
		return "global"
	}
	return "database " + database
}
