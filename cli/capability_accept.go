package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/riffdb/riffdb/capability"
	"github.com/riffdb/riffdb/server"
)

// capabilityAcceptResult is the JSON result of `riffdb capability
// accept-restored`.
type capabilityAcceptResult struct {
	// Accepted reports whether the store is at a generation an operator
	// accepted below the one recorded before.
	Accepted bool `json:"accepted"`
	// Generation is the store's generation.
	Generation uint64 `json:"generation"`
	// RecordedGeneration is the generation the databases had recorded
	// before the acceptance; equal to Generation when nothing was accepted.
	RecordedGeneration uint64 `json:"recorded_generation"`
}

func newCapabilityAcceptRestoredCommand() *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "accept-restored",
		Short: "Accept a credential store restored from an older copy",
		Long: `Accept the credential store as it is, after it was restored from an older
copy (a backup or a snapshot) on purpose.

Every write of the credential store raises its generation, and each database
directory records the highest generation seen. A store below that record is
refused ("rolled back": credentials_refused at server start,
credentials_rolled_back here), because capabilities revoked after the copy was
taken would work again. This command lowers the databases' records to the
store's generation, so the next server start accepts it and logs the
acceptance at warn level. Capabilities revoked after the copy was taken ARE
LIVE AGAIN: revoke them once more (see capability list). A running server keeps
refusing the restored store until it is restarted.

A store that was not rolled back is left as it is (accepted: false).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := loadCapabilityConfig(path)
			if err != nil {
				return err
			}
			exists, err := credentialStoreExists(c)
			if err != nil {
				return err
			}
			if !exists {
				return Local("credentials_unavailable", "there is no credential store to accept (credential_path does not exist)")
			}
			store, err := capability.AcceptRestored(c.Server.CredentialPath, capability.Options{Anchor: server.NewCredentialAnchor(c)})
			if err != nil {
				return capabilityStoreError(err)
			}
			a := store.Accepted()
			res := capabilityAcceptResult{Accepted: a.AcceptedFrom != 0, Generation: store.Generation(), RecordedGeneration: store.Generation()}
			if res.Accepted {
				res.RecordedGeneration = a.AcceptedFrom
			}
			return Emit(cmd, res, func(w io.Writer) error {
				if !res.Accepted {
					_, err := fmt.Fprintf(w, "the credential store (generation %d) was not rolled back; nothing to accept\n", res.Generation)
					return err
				}
				_, err := fmt.Fprintf(w, "accepted the credential store at generation %d (generation %d was recorded); "+
					"capabilities revoked after this copy was taken are live again: revoke them once more\n", res.Generation, res.RecordedGeneration)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "the server's configuration file (required)")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}
