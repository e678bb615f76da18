package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/riffdb/riffdb/backupapi"
	"github.com/riffdb/riffdb/internal/hygiene/pathless"
	"github.com/riffdb/riffdb/statsapi"
)

// DefaultBackupTimeout bounds `riffdb database backup` (the request lasts
// as long as the backup).
const DefaultBackupTimeout = time.Hour

// serverRequest sends method path (with body as JSON, if not nil) to the
// server that q names and decodes a 200 response into out. A refusal keeps the server's error code
// (backup_root_not_configured, backup_in_progress, unknown_database, …),
// except 401 and 403, which become unauthenticated and forbidden as for
// every server query. When uncertainAdvice is given, a request that times
// out or whose connection drops before the answer has an unknown outcome
// (a backup may have been kept): that failure is Uncertain (exit 3), code
// outcome_unknown, with the advice.
func (q *queryFlags) serverRequest(ctx context.Context, method, path string, body []byte, out any, uncertainAdvice string) error {
	addr := q.address
	if addr == "" {
		addr = getenv("RIFFDB_ADDRESS")
	}
	if addr == "" {
		addr = DefaultAddress
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	token, err := bearerToken(q.tokenFile)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, q.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(addr, "/")+path, rd)
	if err != nil {
		return Local("usage", "--address is not a valid URL")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		var ue *url.Error
		sent := errors.As(err, &ue) && (ue.Timeout() || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF))
		if sent && uncertainAdvice != "" {
			return Uncertain("outcome_unknown", "the server did not answer in time or dropped the connection: %s", uncertainAdvice)
		}
		cause := err
		if ue != nil {
			cause = ue.Err // the request's method and URL add nothing to the cause
		}
		return Client("unreachable", "cannot reach the server: %v", pathless.Error(cause))
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		if uncertainAdvice != "" {
			return Uncertain("outcome_unknown", "the server's answer was cut off: %s", uncertainAdvice)
		}
		return Client("transport", "reading the response failed: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		var eb statsapi.ErrorBody
		msg, code := resp.Status, ""
		if json.Unmarshal(answer, &eb) == nil && eb.Error.Message != "" {
			msg, code = eb.Error.Message, eb.Error.Code
		}
		switch {
		case resp.StatusCode == http.StatusUnauthorized:
			code = "unauthenticated"
		case resp.StatusCode == http.StatusForbidden:
			code = "forbidden"
		case !plainCode(code):
			code = "http_" + fmt.Sprint(resp.StatusCode)
		}
		return Public(code, "the server refused: %s", msg)
	}
	if err := json.Unmarshal(answer, out); err != nil {
		return Client("bad_response", "the server's response is not valid JSON")
	}
	return nil
}

// plainCode reports whether a server's error code may be passed on as the
// CLI's: lower-case words joined by underscores, as every riffdb code is.
func plainCode(code string) bool {
	if code == "" || len(code) > 64 {
		return false
	}
	for _, r := range code {
		if (r < 'a' || r > 'z') && r != '_' {
			return false
		}
	}
	return true
}

// backupsPath is the API path of alias's backups.
func backupsPath(alias string) string {
	return "/v1/databases/" + url.PathEscape(alias) + "/backups"
}

// backupQueryFlags adds the server query flags and --database to cmd.
func backupQueryFlags(cmd *cobra.Command, q *queryFlags, database *string, timeout time.Duration) {
	q.add(cmd)
	f := cmd.Flags().Lookup("timeout")
	q.timeout = timeout
	f.DefValue = timeout.String()
	cmd.Flags().StringVar(database, "database", "", "the database's alias (required)")
	_ = cmd.MarkFlagRequired("database")
}

func newDatabaseBackupCommand() *cobra.Command {
	var (
		q        queryFlags
		database string
	)
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Back up a running database under its backup_root (through the server; needs manage_backups)",
		Long: `Ask the running server for an online backup of a database. The server writes a
consistent copy of the database's store (a Pebble checkpoint) and a manifest
(database identity, history incarnation, last commit sequence, creation time,
a SHA-256 of every file) into a new directory under the database's
backup_root, and prints the backup's name. Commands keep being acknowledged
while it runs. One backup per database runs at a time (backup_in_progress).

The token needs manage_backups, global or scoped to the database. A database
without backup_root is refused (backup_root_not_configured). A backup that
would leave less than backup_reserve_bytes free on backup_root's filesystem
is refused (backup_insufficient_space), and so is one that starts within
backup_min_interval of the last (backup_rate_limited). Once a backup is
complete, the oldest beyond backup_keep are removed (listed as "removed").

"riffdb database backup list" lists the backups; "riffdb database restore"
restores one, offline.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var resp backupapi.Response
			advice := "the backup may or may not have been kept; run \"riffdb database backup list\" to see"
			if err := q.serverRequest(cmd.Context(), http.MethodPost, backupsPath(database), nil, &resp, advice); err != nil {
				return err
			}
			return Emit(cmd, resp, func(w io.Writer) error {
				b := resp.Backup
				_, err := fmt.Fprintf(w, "backup %s of database %s: history incarnation %d, last commit sequence %d, %d files, %d bytes\n",
					b.Name, resp.Database, b.HistoryIncarnation, b.LastCommitSequence, b.FileCount, b.Bytes)
				return err
			})
		},
	}
	backupQueryFlags(cmd, &q, &database, DefaultBackupTimeout)
	cmd.AddCommand(newDatabaseBackupListCommand())
	return cmd
}

func newDatabaseBackupListCommand() *cobra.Command {
	var (
		q        queryFlags
		database string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List a database's backups, oldest first (through the server; needs manage_backups)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var resp backupapi.ListResponse
			if err := q.serverRequest(cmd.Context(), http.MethodGet, backupsPath(database), nil, &resp, ""); err != nil {
				return err
			}
			if resp.Backups == nil {
				resp.Backups = []backupapi.Info{}
			}
			return Emit(cmd, resp, func(w io.Writer) error {
				if len(resp.Backups) == 0 {
					_, err := fmt.Fprintf(w, "database %s has no backups\n", resp.Database)
					return err
				}
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tCREATED\tINCARNATION\tLAST SEQ\tFILES\tBYTES")
				for _, b := range resp.Backups {
					if b.Damaged {
						fmt.Fprintf(tw, "%s\tdamaged: its manifest cannot be read\t\t\t\t\n", b.Name)
						continue
					}
					fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\n", b.Name, b.CreatedAt.UTC().Format(time.RFC3339),
						b.HistoryIncarnation, b.LastCommitSequence, b.FileCount, b.Bytes)
				}
				return tw.Flush()
			})
		},
	}
	backupQueryFlags(cmd, &q, &database, 10*time.Second)
	return cmd
}
