package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// capabilityListResult is the JSON result of `riffdb capability list`.
type capabilityListResult struct {
	Capabilities []capabilityResult `json:"capabilities"`
}

func newCapabilityListCommand() *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the capabilities of the credential store, revoked ones included",
		Long: `List every capability of the configuration's credential store, oldest first,
revoked and expired ones included, with each one's expiry time ("expires_at",
null when it never expires) and whether it has passed ("expired"). Tokens are never shown (the store does not hold them).
A credential store that does not exist yet lists as empty and is not created.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := loadCapabilityConfig(path)
			if err != nil {
				return err
			}
			res := capabilityListResult{Capabilities: []capabilityResult{}}
			exists, err := credentialStoreExists(c)
			if err != nil {
				return err
			}
			if exists {
				store, err := openCapabilityStore(c)
				if err != nil {
					return err
				}
				caps, err := store.List()
				if err != nil {
					return capabilityStoreError(err)
				}
				now := time.Now()
				for _, cp := range caps {
					res.Capabilities = append(res.Capabilities, newCapabilityResult(cp, now))
				}
			}
			return Emit(cmd, res, func(w io.Writer) error {
				if len(res.Capabilities) == 0 {
					_, err := fmt.Fprintln(w, "no capabilities")
					return err
				}
				for _, r := range res.Capabilities {
					state := "active"
					switch {
					case r.Revoked:
						state = "revoked"
					case r.Expired:
						state = "expired"
					}
					expiry := "never expires"
					if r.ExpiresAt != nil {
						expiry = "expires " + *r.ExpiresAt
						if r.Expired {
							expiry = "expired " + *r.ExpiresAt
						}
					}
					if _, err := fmt.Fprintf(w, "%s  %-7s  %s  %s  %s  %s  %q\n", r.ID, state, r.CreatedAt, expiry,
						scopeText(r.Database), strings.Join(r.Permissions, ","), r.Name); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "the server's configuration file (required)")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}
