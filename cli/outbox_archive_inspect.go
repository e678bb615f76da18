package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/event"
)

// inspectResult is the JSON result of `riffdb outbox archive inspect`.
// AllocatedBytes is null when the physical size could not be measured.
type inspectResult struct {
	Format          string `json:"format"`
	DatabaseBinding string `json:"database_binding"`
	RecordCount     int64  `json:"record_count"`
	EncodedBytes    int64  `json:"encoded_bytes"`
	AllocatedBytes  *int64 `json:"allocated_bytes"`
	PagesExamined   int    `json:"pages_examined"`
	Integrity       string `json:"integrity"`
	// MissingRecords is present with integrity "mismatch" when the archive
	// holds fewer records than at its last clean shutdown.
	MissingRecords int64 `json:"missing_records,omitempty"`
}

func newInspectResult(r archive.InspectReport) inspectResult {
	res := inspectResult{
		Format:          r.Format,
		DatabaseBinding: r.DatabaseBinding,
		RecordCount:     r.RecordCount,
		EncodedBytes:    r.EncodedBytes,
		PagesExamined:   r.PagesExamined,
		Integrity:       r.Integrity,
		MissingRecords:  r.MissingRecords,
	}
	if r.AllocatedBytes >= 0 {
		n := r.AllocatedBytes
		res.AllocatedBytes = &n
	}
	return res
}

// writeText prints the result for people, one field a line.
func (r inspectResult) writeText(w io.Writer) error {
	allocated := "unknown"
	if r.AllocatedBytes != nil {
		allocated = fmt.Sprint(*r.AllocatedBytes)
	}
	_, err := fmt.Fprintf(w, "format:           %s\ndatabase binding: %s\nrecord count:     %d\n"+
		"encoded bytes:    %d\nallocated bytes:  %s\npages examined:   %d\nintegrity:        %s\n",
		r.Format, r.DatabaseBinding, r.RecordCount, r.EncodedBytes, allocated, r.PagesExamined, r.Integrity)
	return err
}

func newOutboxArchiveInspectCommand() *cobra.Command {
	var (
		dir      string
		idText   string
		maxPages int
	)
	cmd := &cobra.Command{
		Use:   "inspect",
		Short: "Verify a durable local outbox archive offline, in bounded pages",
		Long: `Verify the archive in --directory offline. Stop the owning server first:
inspection needs exclusive custody of the archive and refuses while another
process holds it. It reports the format, the database binding, the durable
record count and encoded bytes, the physical allocated bytes, the pages
examined and the integrity verdict. Each page examines at most 256 records and
4 MiB; --max-pages (1 through 256, default 1) bounds the scan. Integrity is
"verified" only after the complete scan matched the durable accounting,
"incomplete" when the bound ended first (increase --max-pages), "mismatch" or
"corrupt" otherwise (non-zero exit). Counts alone are not integrity evidence.

Inspection never creates or changes archive content; it only takes the store's
lock, which updates the lock file's modification time. Errors contain no paths
and no event payloads. This implementation requires Linux.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return Local("usage", "--directory is required")
			}
			if !filepath.IsAbs(dir) {
				return Local("usage", "--directory must be an absolute path")
			}
			id, err := event.ParseDatabaseID(idText)
			if err != nil {
				return Local("usage", "--database-id must be 32 hexadecimal characters")
			}
			if maxPages < 1 || maxPages > archive.MaxInspectPages {
				return Local("usage", "--max-pages must be 1 through %d", archive.MaxInspectPages)
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			var progress func(int, int64)
			if stderr := cmd.ErrOrStderr(); isTerminal(stderr) {
				// One line rewritten in place per page; a newline at the end.
				progress = func(pages int, records int64) {
					fmt.Fprintf(stderr, "\rinspect: %d records, %d pages", records, pages)
				}
				defer fmt.Fprintln(stderr)
			}
			rep, err := archive.Inspect(ctx, dir, id, archive.InspectOptions{MaxPages: maxPages, Progress: progress})
			if err != nil {
				return inspectError(err, dir, rep)
			}
			res := newInspectResult(rep)
			switch rep.Integrity {
			case archive.IntegrityMismatch, archive.IntegrityCorrupt:
				msg := integrityMessage(rep.Integrity)
				if rep.MissingRecords > 0 {
					msg = fmt.Sprintf("the archive holds %d records fewer than at its last clean shutdown: records were lost "+
						"(a truncated or replaced log); stop delivery and investigate", rep.MissingRecords)
				}
				return &Error{Kind: KindPublic, Code: "archive_integrity_" + rep.Integrity, Result: res, Message: msg}
			}
			return Emit(cmd, res, res.writeText)
		},
	}
	cmd.Flags().StringVar(&dir, "directory", "", "the configured outbox directory (absolute; required)")
	cmd.Flags().StringVar(&idText, "database-id", "", "the expected database identity, 32 hexadecimal characters (required)")
	cmd.Flags().IntVar(&maxPages, "max-pages", 1, fmt.Sprintf("the page bound, 1 through %d", archive.MaxInspectPages))
	return cmd
}

func integrityMessage(integrity string) string {
	if integrity == archive.IntegrityMismatch {
		return "the archive's records disagree with its durable accounting; stop delivery and investigate"
	}
	return "the archive holds corrupt content; stop delivery and investigate"
}

// inspectError classifies a failed inspection. Messages are composed here
// (custody reasons are taken from the archive package, which writes them
// without paths); a message that would still mention dir is replaced by a
// generic one.
func inspectError(err error, dir string, rep archive.InspectReport) *Error {
	e := classifyInspectError(err, rep)
	if dir != "" && strings.Contains(e.Message, dir) {
		e.Message = "archive inspection failed"
	}
	return e
}

func classifyInspectError(err error, rep archive.InspectReport) *Error {
	switch {
	case errors.Is(err, archive.ErrUnsupportedPlatform):
		return Local("unsupported_platform", "this implementation requires Linux; archive inspection is refused on this platform")
	case errors.Is(err, archive.ErrNotFound):
		return Local("archive_not_found", "no archive exists in the directory given by --directory; inspection creates nothing")
	case errors.Is(err, archive.ErrBusy):
		return Local("archive_busy", "the archive is held by another process; stop the owning server before inspection")
	case errors.Is(err, archive.ErrCustody):
		return Local("archive_custody", "%s", custodyReason(err))
	case errors.Is(err, archive.ErrBindingChanged):
		if rep.DatabaseBinding == "" {
			return Public("archive_binding_mismatch",
				"the archive is bound to another database than --database-id; it requires operator investigation")
		}
		e := Public("archive_binding_mismatch",
			"the archive is bound to database %s, not to --database-id; it requires operator investigation", rep.DatabaseBinding)
		e.Result = newInspectResult(rep)
		return e
	case errors.Is(err, archive.ErrIncompatibleFormat):
		return Public("archive_incompatible_format", "the archive's format is not supported by this riffdb; it requires operator investigation")
	case errors.Is(err, archive.ErrCorrupt), archive.Classify(err) == archive.ClassStop:
		// Storage-engine corruption found while scanning can arrive
		// unwrapped; Classify recognizes it. The verdict is still reported.
		e := Public("archive_integrity_corrupt", "%s", integrityMessage(archive.IntegrityCorrupt))
		if rep.Format != "" {
			rep.Integrity = archive.IntegrityCorrupt
			e.Result = newInspectResult(rep)
		}
		return e
	case errors.Is(err, archive.ErrRefused), errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM),
		errors.Is(err, syscall.EROFS):
		return Local("archive_refused", "access to the archive was refused%s; run inspection as the archive's owner", errnoSuffix(err))
	case errors.Is(err, archive.ErrInvalidArgument):
		return Local("usage", "--max-pages must be 1 through %d", archive.MaxInspectPages)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return Local("interrupted", "archive inspection was interrupted")
	default:
		return Local("archive_unavailable", "the archive could not be read%s", errnoSuffix(err))
	}
}

// custodyReason returns the custody violation's own text, which starts at
// the ErrCustody message: whatever a storage-engine wrapper put before it
// (which may name files) is dropped.
func custodyReason(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, archive.ErrCustody.Error()); i >= 0 {
		return msg[i:]
	}
	return archive.ErrCustody.Error()
}

// errnoSuffix names the operating-system error under err, if any.
func errnoSuffix(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return " (" + errno.Error() + ")"
	}
	return ""
}

// isTerminal reports whether w is a terminal, for the progress line.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && fdIsTerminal(f.Fd())
}
