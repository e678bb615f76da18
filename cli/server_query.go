package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/riffdb/riffdb/statsapi"
)

// DefaultAddress is where server queries go without --address or RIFFDB_ADDRESS.
const DefaultAddress = "http://127.0.0.1:7420"

type queryFlags struct {
	address, tokenFile string
	timeout            time.Duration
}

func (q *queryFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&q.address, "address", "", "server URL (default $RIFFDB_ADDRESS or "+DefaultAddress+")")
	cmd.Flags().StringVar(&q.tokenFile, "token-file", "", "file holding the bearer token (default $RIFFDB_TOKEN)")
	cmd.Flags().DurationVar(&q.timeout, "timeout", 10*time.Second, "request timeout")
}

// get fetches path from the server into out, mapping every failure to a
// classified CLI error.
func (q *queryFlags) get(ctx context.Context, path string, out any) error {
	return q.serverRequest(ctx, http.MethodGet, path, nil, out, "")
}

// newServerQueryCommand builds a read-only command that GETs path from the
// server, decodes it into a T, and prints it with text (or as the JSON
// envelope's result).
func newServerQueryCommand[T any](use, short, path string, text func(w io.Writer, v *T) error) *cobra.Command {
	var q queryFlags
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var v T
			if err := q.get(cmd.Context(), path, &v); err != nil {
				return err
			}
			return Emit(cmd, v, func(w io.Writer) error { return text(w, &v) })
		},
	}
	q.add(cmd)
	return cmd
}

func newServerStatsCommand() *cobra.Command {
	return newServerQueryCommand("stats", "Print the server's stats (needs a global capability with read_statistics)",
		"/v1/stats", func(w io.Writer, s *statsapi.Stats) error {
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "DATABASE\tLAST SEQ\tFRONTIER\tPENDING\tOUTBOX\tARCHIVE BYTES\tQUOTA")
			for _, d := range s.Databases {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\n", d.Alias, d.LastCommitSequence, d.PublicationFrontier,
					optU(d.PendingOutboxDeliveries), healthText(d.Outbox.Health, d.Outbox.Reason),
					optI(d.Outbox.ArchiveEncodedBytes), optI(d.Outbox.QuotaEncodedBytes))
			}
			return tw.Flush()
		})
}

func newServerHealthCommand() *cobra.Command {
	return newServerQueryCommand("health", "Print readiness and each database's outbox health (needs read_health)",
		"/v1/health", func(w io.Writer, h *statsapi.HealthReport) error {
			fmt.Fprintf(w, "ready: %v\n", h.Ready)
			for _, d := range h.Databases {
				fmt.Fprintf(w, "%s: index %s, outbox %s (since %s)\n", d.Alias, d.Index,
					healthText(d.Outbox.State, d.Outbox.Reason), d.Outbox.Since.Format(time.RFC3339))
			}
			return nil
		})
}

func healthText(state, reason string) string {
	if reason == "" {
		return state
	}
	return state + "/" + reason
}

func optU(v *uint64) string {
	if v == nil {
		return "unknown"
	}
	return fmt.Sprint(*v)
}

func optI(v *int64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(*v)
}
