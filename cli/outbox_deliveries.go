package cli

import (
	"fmt"
	"io"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/riffdb/riffdb/outboxapi"
)

// deliveriesPath is the API path of alias's undelivered events.
func deliveriesPath(alias string) string {
	return "/v1/databases/" + url.PathEscape(alias) + "/outbox/deliveries"
}

func newOutboxDeliveriesListCommand() *cobra.Command {
	var (
		q        queryFlags
		database string
		states   []string
		after    string
		limit    int
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List a page of a database's undelivered events, in event order (needs read_outbox)",
		Long: `Ask the running server for a page of a database's undelivered events, read
from the primary's undelivered index in event order: each event's id, commit
sequence, state (pending, retry_scheduled, delivering, dead_letter), attempts
spent, next attempt time, lease deadline, commit time, for a dead letter why
it was given up on (attempts_exhausted, identity_conflict, …), the time,
class and reason of the failure that ended its last unsuccessful attempt, how
often an operator redrove it, and the trace id of the command that committed
it when that command was traced. Never an event's payload.

--state (repeatable, or comma-separated) keeps the events in those states. A
page reads at most 4 × --limit events of the index, so with --state a page
may hold fewer events than --limit, or none, and still go on: pass its
next_cursor as --after for the next page. No next_cursor: the listing reached
the end. A cursor is valid for the server process that issued it, on the
database and history incarnation it was issued for; any other is refused
(invalid_cursor, cursor_other_database, cursor_other_incarnation): list from
the start.

The token needs read_outbox, global or scoped to the database.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > outboxapi.MaxLimit {
				return Local("usage", "--limit must be from 1 to %d", outboxapi.MaxLimit)
			}
			v := url.Values{"limit": {strconv.Itoa(limit)}}
			for _, s := range states {
				v.Add("state", s)
			}
			if after != "" {
				v.Set("after", after)
			}
			var resp outboxapi.ListResponse
			if err := q.get(cmd.Context(), deliveriesPath(database)+"?"+v.Encode(), &resp); err != nil {
				return err
			}
			if resp.Deliveries == nil {
				resp.Deliveries = []outboxapi.Item{}
			}
			return Emit(cmd, resp, func(w io.Writer) error {
				if len(resp.Deliveries) == 0 {
					fmt.Fprintf(w, "database %s: no undelivered events on this page\n", resp.Database)
				} else {
					tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, itemHeader)
					for _, it := range resp.Deliveries {
						fmt.Fprintln(tw, itemRow(it))
					}
					if err := tw.Flush(); err != nil {
						return err
					}
				}
				if resp.NextCursor != "" {
					_, err := fmt.Fprintf(w, "more: --after %s\n", resp.NextCursor)
					return err
				}
				return nil
			})
		},
	}
	q.add(cmd)
	cmd.Flags().StringVar(&database, "database", "", "the database's alias (required)")
	_ = cmd.MarkFlagRequired("database")
	cmd.Flags().StringSliceVar(&states, "state", nil, "keep events in this state: pending, retry_scheduled, delivering, dead_letter (repeatable)")
	cmd.Flags().StringVar(&after, "after", "", "continue after this cursor (a page's next_cursor)")
	cmd.Flags().IntVar(&limit, "limit", outboxapi.DefaultLimit, fmt.Sprintf("events per page, 1 to %d", outboxapi.MaxLimit))
	return cmd
}

// itemHeader heads the columns of itemRow.
const itemHeader = "EVENT\tSTATE\tATTEMPTS\tNEXT ATTEMPT\tLEASE DEADLINE\tCOMMITTED\tREASON\tLAST FAILURE\tREDRIVES\tTRACE"

func itemRow(it outboxapi.Item) string {
	at := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	reason, trace := it.DeadLetterReason, it.TraceID
	if reason == "" {
		reason = "-"
	}
	if trace == "" {
		trace = "-"
	}
	failure := "-"
	if f := it.LastFailure; f != nil {
		failure = f.Class + "/" + f.Reason + " " + f.At.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s", it.EventID, it.State, it.Attempts, at(it.NextAttemptAt),
		at(it.LeaseDeadline), it.CommittedAt.UTC().Format(time.RFC3339), reason, failure, it.Redrives, trace)
}

func newOutboxDeliveriesShowCommand() *cobra.Command {
	var (
		q        queryFlags
		database string
	)
	cmd := &cobra.Command{
		Use:   "show EVENT_ID",
		Short: "Say where one event's delivery stands (needs read_outbox)",
		Long: `Ask the running server where one event's delivery stands. EVENT_ID is
SEQ.POS, as a command's response names its events. The state is one of the
undelivered states (with the event's attempts, times and reason, as "list"
prints them), delivered (the archive holds it under this database, its
history incarnation and its id) or unknown (no such event, or its history
was reclaimed).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, ok := outboxapi.ParseEventID(args[0]); !ok {
				return Local("usage", "EVENT_ID is SEQ.POS, e.g. 42.0")
			}
			var resp outboxapi.ShowResponse
			if err := q.get(cmd.Context(), deliveriesPath(database)+"/"+url.PathEscape(args[0]), &resp); err != nil {
				return err
			}
			return Emit(cmd, resp, func(w io.Writer) error {
				if resp.Delivery == nil {
					_, err := fmt.Fprintf(w, "event %s of database %s: %s\n", resp.EventID, resp.Database, resp.State)
					return err
				}
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, itemHeader)
				fmt.Fprintln(tw, itemRow(*resp.Delivery))
				return tw.Flush()
			})
		},
	}
	q.add(cmd)
	cmd.Flags().StringVar(&database, "database", "", "the database's alias (required)")
	_ = cmd.MarkFlagRequired("database")
	return cmd
}
