package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

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
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a capability and print its token once",
		Long: `Create a capability in the configuration's credential store and print its
token. The token is shown only here: the store keeps only a keyed hash of it.
Works offline; a running server sees the new capability within a second.

Permissions: execute_commands, read_statistics, read_health, manage_capabilities.
Without --database the capability is global; with it, it is scoped to that
database alias (a scoped capability cannot read statistics or health).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			perms := make([]capability.Permission, 0, len(permissions))
			for _, s := range permissions {
				p, err := capability.ParsePermission(s)
				if err != nil {
					return Local("invalid_permission", "--permission %q is not a permission: use execute_commands, read_statistics, read_health or manage_capabilities",
						truncateFlag(s))
				}
				perms = append(perms, p)
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
			token, created, err := store.Create(name, perms, database)
			switch {
			case errors.Is(err, capability.ErrInvalid):
				return Local("invalid_capability", "--name: %s", strings.TrimPrefix(err.Error(), "capability: invalid: "))
			case err != nil:
				return capabilityStoreError(err)
			}
			res := capabilityCreateResult{capabilityResult: newCapabilityResult(created), Token: token}
			return Emit(cmd, res, func(w io.Writer) error {
				label := ""
				if res.Name != "" {
					label = fmt.Sprintf(" %q", res.Name)
				}
				_, err := fmt.Fprintf(w, "created capability %s%s (%s): %s\ntoken: %s\nThe token is shown only once; store it now.\n",
					res.ID, label, scopeText(res.Database), strings.Join(res.Permissions, ", "), res.Token)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "the server's configuration file (required)")
	cmd.Flags().StringArrayVar(&permissions, "permission", nil, "a permission to grant (repeatable, at least one)")
	cmd.Flags().StringVar(&database, "database", "", "scope the capability to this database alias (default: global)")
	cmd.Flags().StringVar(&name, "name", "", "a label for the capability")
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
