package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/riffdb/riffdb/capability"
)

// capabilityRevokeResult is the JSON result of `riffdb capability revoke`.
type capabilityRevokeResult struct {
	ID      string `json:"id"`
	Revoked bool   `json:"revoked"`
}

func newCapabilityRevokeCommand() *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a capability",
		Long: `Revoke the capability with the given id (see "capability list"). Works
offline; a running server refuses the token within a second. Revoking an
already revoked capability succeeds.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			c, err := loadCapabilityConfig(path)
			if err != nil {
				return err
			}
			exists, err := credentialStoreExists(c)
			if err != nil {
				return err
			}
			if !exists {
				return Local("capability_not_found", "no capability has id %q (the credential store is empty)", truncateFlag(id))
			}
			store, err := openCapabilityStore(c)
			if err != nil {
				return err
			}
			switch err := store.Revoke(id); {
			case errors.Is(err, capability.ErrNotFound):
				return Local("capability_not_found", "no capability has id %q (see capability list)", truncateFlag(id))
			case err != nil:
				return capabilityStoreError(err)
			}
			res := capabilityRevokeResult{ID: id, Revoked: true}
			return Emit(cmd, res, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "revoked capability %s\n", id)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "the server's configuration file (required)")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}
