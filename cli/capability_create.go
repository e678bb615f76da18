package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/riffdb/riffdb/capability"
)

// capabilityCreateResult is the JSON result of `riffdb capability create`:
// the capability and, this once, its token.
type capabilityCreateResult struct {
	capabilityResult
	Token string `json:"token"`
}

func newCapabilityCreateCommand() *cobra.Command {
	var (
		path, database, name string
		permissions          []string
		expiresIn            time.Duration
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a capability and print its token once",
		Long: `Create a capability in the configuration's credential store and print its
token. The token is shown only here: the store keeps only a keyed hash of it.
Works offline; a running server sees the new capability within a second.

Permissions: ` + permissionList(", ", ", ") + `.
Without --database the capability is global; with it, it is scoped to that
database alias: execute_commands then runs commands of that database only,
read_health shows that database's health only (GET /v1/health lists no
other database), and manage_backups takes and lists backups of that
database only ("database backup", "database backup list"), and read_outbox
lists and looks up that database's undelivered events only ("outbox
deliveries list", "outbox deliveries show"), and manage_outbox redrives
that database's dead letters only ("outbox dead-letters retry"). read_statistics
and manage_capabilities need a global capability, so they are refused
together with --database.

With --expires-in (a Go duration such as 720h, at most 87600h: ten years)
the token stops authenticating that long after its creation, and is then
refused like an unknown token (HTTP 401). Without it the token never
expires; revoke it with "capability revoke".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			perms := make([]capability.Permission, 0, len(permissions))
			for _, s := range permissions {
				p, err := capability.ParsePermission(s)
				if err != nil {
					return Local("invalid_permission", "--permission %q is not a permission: use %s",
						truncateFlag(s), permissionList(", ", " or "))
				}
				perms = append(perms, p)
			}
			if database != "" {
				for _, p := range perms {
					if p.GlobalOnly() {
						return Local("invalid_scope", "--permission %s needs a global capability: drop --database, or create a separate global capability for it", p)
					}
				}
			}
			if cmd.Flags().Changed("expires-in") && (expiresIn <= 0 || expiresIn > capability.MaxLifetime) {
				return Local("invalid_expiry", "--expires-in must be a positive duration of at most %s (ten years)", fmtHours(capability.MaxLifetime))
			}
			c, err := loadCapabilityConfig(path)
			if err != nil {
				return err
			}
			if database != "" {
				if _, ok := c.Database(database); !ok {
					known := make([]string, len(c.Databases))
					for i, d := range c.Databases {
						known[i] = d.Alias
					}
					return Local("unknown_database", "--database %q is not a database of the configuration (aliases: %s)",
						truncateFlag(database), strings.Join(known, ", "))
				}
			}
			store, err := openCapabilityStore(c)
			if err != nil {
				return err
			}
			token, created, err := store.CreateExpiring(name, perms, database, expiresIn)
			switch {
			case errors.Is(err, capability.ErrInvalid):
				return Local("invalid_capability", "--name: %s", strings.TrimPrefix(err.Error(), "capability: invalid: "))
			case err != nil:
				return capabilityStoreError(err)
			}
			res := capabilityCreateResult{capabilityResult: newCapabilityResult(created, created.CreatedAt), Token: token}
			return Emit(cmd, res, func(w io.Writer) error {
				label := ""
				if res.Name != "" {
					label = fmt.Sprintf(" %q", res.Name)
				}
				expiry := "never expires"
				if res.ExpiresAt != nil {
					expiry = "expires " + *res.ExpiresAt
				}
				_, err := fmt.Fprintf(w, "created capability %s%s (%s, %s): %s\ntoken: %s\nThe token is shown only once; store it now.\n",
					res.ID, label, scopeText(res.Database), expiry, strings.Join(res.Permissions, ", "), res.Token)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "the server's configuration file (required)")
	cmd.Flags().StringArrayVar(&permissions, "permission", nil, "a permission to grant (repeatable, at least one)")
	cmd.Flags().StringVar(&database, "database", "", "scope the capability to this database alias (default: global)")
	cmd.Flags().StringVar(&name, "name", "", "a label for the capability")
	cmd.Flags().DurationVar(&expiresIn, "expires-in", 0, "the token's lifetime, e.g. 720h (default: never expires)")
	_ = cmd.MarkFlagRequired("config")
	_ = cmd.MarkFlagRequired("permission")
	return cmd
}

// truncateFlag shortens a flag value for an error message.
func truncateFlag(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// fmtHours prints d in whole hours, as --expires-in takes it.
func fmtHours(d time.Duration) string {
	return fmt.Sprintf("%dh", int64(d/time.Hour))
}

// permissionList names every permission, in canonical order, joined by sep
// and, before the last, by last.
func permissionList(sep, last string) string {
	all := capability.AllPermissions()
	names := make([]string, len(all))
	for i, p := range all {
		names[i] = string(p)
	}
	if len(names) < 2 {
		return strings.Join(names, sep)
	}
	return strings.Join(names[:len(names)-1], sep) + last + names[len(names)-1]
}
