package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/riffdb/riffdb/outboxapi"
)

// redriveAdvice is what to do when a redrive's outcome is unknown.
const redriveAdvice = "some events may have been redriven; run the same command again (an event already redriven is reported not_dead_letter) and list the dead letters"

func newOutboxDeadLettersRetryCommand() *cobra.Command {
	var (
		q        queryFlags
		database string
		events   []string
		reason   string
	)
	cmd := &cobra.Command{
		Use:   "retry (--event EVENT_ID... | --reason REASON)",
		Short: "Return dead letters to pending for another delivery (needs manage_outbox)",
		Long: `Ask the running server to redrive dead letters: each goes back to pending with
a fresh attempt budget, and the outbox worker delivers it like any other event.
Repair the cause first (an archive that was unavailable for longer than the
attempt budget, a quota that stayed full): a dead letter redriven into the
same failure uses its attempts up again.

--event (repeatable, or comma-separated; at most 1000) names the events, as
"outbox deliveries list --state dead_letter" lists them. --reason exhausted
(or conflict) redrives every dead letter of that reason; the server reads the
index in bounded steps and this command repeats the request until the whole
index was read. Each batch is one primary transaction, and each event is a
compare-and-set on its dead-letter state: an event the worker or another
redrive changed first is left alone and reported under not redriven, with
why (not_dead_letter, not_undelivered, other_reason).

An identity conflict (the archive holds different bytes under the event's
identity) redriven becomes a dead letter again (identity_conflict) on its
next attempt: resolve it in the archive, not here.

The token needs manage_outbox, global or scoped to the database.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case len(events) > 0 && reason != "":
				return Local("usage", "give --event or --reason, not both")
			case len(events) == 0 && reason == "":
				return Local("usage", "give --event (at most %d) or --reason (exhausted or conflict)", outboxapi.MaxRedriveIDs)
			case len(events) > outboxapi.MaxRedriveIDs:
				return Local("usage", "at most %d --event per command", outboxapi.MaxRedriveIDs)
			}
			for _, e := range events {
				if _, ok := outboxapi.ParseEventID(e); !ok {
					return Local("usage", "--event takes SEQ.POS event ids, e.g. 42.0")
				}
			}
			path := "/v1/databases/" + url.PathEscape(database) + "/outbox/dead-letters/retry"
			req := outboxapi.RedriveRequest{EventIDs: events, Reason: reason}
			var total outboxapi.RedriveResponse
			for {
				body, _ := json.Marshal(req)
				var resp outboxapi.RedriveResponse
				if err := q.serverRequest(cmd.Context(), http.MethodPost, path, body, &resp, redriveAdvice); err != nil {
					return err
				}
				total.Database, total.DatabaseID, total.HistoryIncarnation = resp.Database, resp.DatabaseID, resp.HistoryIncarnation
				total.Redriven = append(total.Redriven, resp.Redriven...)
				total.NotRedriven = append(total.NotRedriven, resp.NotRedriven...)
				total.Conflicts += resp.Conflicts
				if resp.Note != "" {
					total.Note = resp.Note
				}
				if resp.NextAfter == "" {
					break
				}
				req.After = resp.NextAfter
			}
			if total.Redriven == nil {
				total.Redriven = []string{}
			}
			if total.NotRedriven == nil {
				total.NotRedriven = []outboxapi.NotRedriven{}
			}
			return Emit(cmd, total, func(w io.Writer) error { return redriveText(w, total) })
		},
	}
	q.add(cmd)
	cmd.Flags().StringVar(&database, "database", "", "the database's alias (required)")
	_ = cmd.MarkFlagRequired("database")
	cmd.Flags().StringSliceVar(&events, "event", nil, "a dead letter's event id, SEQ.POS (repeatable)")
	cmd.Flags().StringVar(&reason, "reason", "", "redrive every dead letter of this reason: exhausted or conflict")
	return cmd
}

func redriveText(w io.Writer, r outboxapi.RedriveResponse) error {
	fmt.Fprintf(w, "database %s: %d dead letters redriven (pending again, with a fresh attempt budget)\n", r.Database, len(r.Redriven))
	if len(r.NotRedriven) > 0 {
		fmt.Fprintf(w, "%d not redriven:\n", len(r.NotRedriven))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "EVENT\tWHY\tSTATE")
		for _, n := range r.NotRedriven {
			state := n.State
			if state == "" {
				state = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", n.EventID, n.Why, state)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if r.Note != "" {
		_, err := fmt.Fprintf(w, "note: %d %s\n", r.Conflicts, r.Note)
		return err
	}
	return nil
}
