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
	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
)

// inspectResult is the JSON result of `riffdb outbox archive inspect`,
// documented by docs/inspect-result.schema.json. AllocatedBytes is null
// when the physical size could not be measured. A field that has no value
// is absent, never empty: Integrity without a verdict (a binding mismatch);
// Format, DatabaseBinding, RecordCount and EncodedBytes when the archive's
// metadata could not be read (a corrupt store); Steps and the totals when
// no step ran; NextCursor unless the verdict is "incomplete"; Incarnations
// unless the scan counts them.
type inspectResult struct {
	Format          string             `json:"format,omitzero"`
	DatabaseBinding string             `json:"database_binding,omitzero"`
	RecordCount     *int64             `json:"record_count,omitzero"`
	EncodedBytes    *int64             `json:"encoded_bytes,omitzero"`
	AllocatedBytes  *int64             `json:"allocated_bytes"`
	PagesExamined   int                `json:"pages_examined"`
	Steps           int                `json:"steps,omitzero"`
	TotalRecords    *int64             `json:"total_records,omitzero"`
	TotalBytes      *int64             `json:"total_bytes,omitzero"`
	Incarnations    []incarnationCount `json:"incarnations,omitzero"`
	Integrity       string             `json:"integrity,omitzero"`
	NextCursor      string             `json:"next_cursor,omitzero"`
	// MissingRecords is present with integrity "mismatch" when the archive
	// holds fewer records than at its last clean shutdown or, with
	// --database-path, than the database recorded with its completed
	// deliveries.
	MissingRecords int64 `json:"missing_records,omitzero"`
	// resume is the command that runs the next step (text mode only).
	resume string
}

type incarnationCount struct {
	Incarnation uint64 `json:"incarnation"`
	Records     int64  `json:"records"`
}

// newInspectResult converts a report; counting says whether
// --count-incarnations was given (a scan that counts reports the table even
// when it is empty).
func newInspectResult(r archive.InspectReport, counting bool) inspectResult {
	res := inspectResult{
		Format:          r.Format,
		DatabaseBinding: r.DatabaseBinding,
		PagesExamined:   r.PagesExamined,
		Integrity:       r.Integrity,
		NextCursor:      r.NextCursor,
		MissingRecords:  r.MissingRecords,
	}
	if r.Format != "" {
		res.RecordCount, res.EncodedBytes = &r.RecordCount, &r.EncodedBytes
	}
	if r.AllocatedBytes >= 0 {
		res.AllocatedBytes = &r.AllocatedBytes
	}
	if r.Steps > 0 {
		res.Steps, res.TotalRecords, res.TotalBytes = r.Steps, &r.TotalRecords, &r.TotalBytes
		if r.Incarnations != nil || counting {
			res.Incarnations = make([]incarnationCount, 0, len(r.Incarnations))
			for _, c := range r.Incarnations {
				res.Incarnations = append(res.Incarnations, incarnationCount{Incarnation: c.Incarnation, Records: c.Records})
			}
		}
	}
	return res
}

// writeText prints the result for people, one field a line; a field absent
// from the JSON result is absent here too. An incomplete scan ends with the
// command that runs its next step.
func (r inspectResult) writeText(w io.Writer) error {
	var b strings.Builder
	line := func(label string, v any) { fmt.Fprintf(&b, "%-18s%v\n", label+":", v) }
	if r.Format != "" {
		line("format", r.Format)
	}
	if r.DatabaseBinding != "" {
		line("database binding", r.DatabaseBinding)
	}
	if r.RecordCount != nil {
		line("record count", *r.RecordCount)
		line("encoded bytes", *r.EncodedBytes)
	}
	if r.AllocatedBytes != nil {
		line("allocated bytes", *r.AllocatedBytes)
	} else {
		line("allocated bytes", "unknown")
	}
	line("pages examined", r.PagesExamined)
	if r.Steps > 0 {
		line("steps", r.Steps)
		line("total records", *r.TotalRecords)
		line("total bytes", *r.TotalBytes)
	}
	if r.Incarnations != nil {
		line("incarnations", len(r.Incarnations))
		for _, c := range r.Incarnations {
			line(fmt.Sprintf("  incarnation %d", c.Incarnation), fmt.Sprintf("%d records", c.Records))
		}
	}
	if r.MissingRecords > 0 {
		line("missing records", r.MissingRecords)
	}
	if r.Integrity != "" {
		line("integrity", r.Integrity)
	}
	if r.NextCursor != "" {
		line("next cursor", r.NextCursor)
		if r.resume != "" {
			fmt.Fprintf(&b, "to continue, run:\n  %s\n", r.resume)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func newOutboxArchiveInspectCommand() *cobra.Command {
	var (
		dir, idText, after string
		dbPath             string
		maxPages           int
		count              bool
	)
	cmd := &cobra.Command{
		Use:   "inspect",
		Short: "Verify a durable local outbox archive offline, in bounded, resumable steps",
		Long: `Verify the archive in --directory offline. Stop the owning server first:
inspection needs exclusive custody of the archive and refuses while another
process holds it. It reports the format, the database binding, the durable
record count and encoded bytes, the physical allocated bytes, the pages
examined and the integrity verdict.

One run is one step of a scan: at most --max-pages pages (1 through 256,
default 1) of at most 256 records and 4 MiB each. When the bound ends first,
the verdict is "incomplete" and the result carries next_cursor; run the same
command with --after <next_cursor> for the next step, until the verdict is
final. Every step reports the totals of all steps so far (steps,
total_records, total_bytes). Integrity is "verified" only at the end of the
scan, when the totals of every step match the durable accounting; "mismatch"
or "corrupt" otherwise (the step that reaches a damaged record says so), and
"changed" when records were archived between two steps (start again without
--after). These three exit non-zero. Counts alone are not integrity evidence.
--count-incarnations also counts the records of each history incarnation
(give it at the first step; later steps keep counting).

A cursor resumes only the scan of the archive that issued it, and is refused
(invalid_cursor) for any other archive, when damaged or when edited in any way:
it is authenticated with a key kept in the archive's store.

After a crash, also give --database-path, the stopped database's directory:
the archive's own floor is only as new as its last clean shutdown, while the
database records, with every completed delivery, how many records the archive
held. Inspection then takes the database's lock too, reads it read-only and
says "mismatch" with missing_records when the archive holds fewer.

Inspection creates and changes nothing, in the archive or the database, not
even the lock files' timestamps. On a terminal, text mode
shows a progress line on stderr (records of the total, bytes, rate, time left).
Errors contain no paths and no event
payloads. This implementation requires Linux.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkDirectoryFlag(dir); err != nil {
				return err
			}
			id, err := event.ParseDatabaseID(idText)
			if err != nil {
				return Local("usage", "--database-id must be 32 hexadecimal characters")
			}
			if maxPages < 1 || maxPages > archive.MaxInspectPages {
				return Local("usage", "--max-pages must be 1 through %d", archive.MaxInspectPages)
			}
			if cmd.Flags().Changed("after") && after == "" {
				return Local("invalid_cursor", "--after needs the next_cursor of the previous step")
			}
			if cmd.Flags().Changed("database-path") {
				if err := checkPathFlag("--database-path", dbPath); err != nil {
					return err
				}
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			opts := archive.InspectOptions{MaxPages: maxPages, After: after, CountIncarnations: count}
			if dbPath != "" {
				// Held until the inspection ends: no server starts the
				// database in between.
				release, floor, err := databaseAnchor(ctx, dbPath, id)
				if err != nil {
					return err
				}
				defer release()
				opts.Floor = floor
			}
			if stderr := cmd.ErrOrStderr(); outputMode(cmd) == "text" && isTerminal(stderr) {
				p := newProgressLine(stderr, inspectClock, maxPages)
				opts.Progress = p.update
				defer p.clear() // before the result or the error is printed
			}
			rep, err := archive.Inspect(ctx, dir, id, opts)
			if err != nil {
				return inspectError(err, dir, rep, opts)
			}
			res := newInspectResult(rep, count)
			switch rep.Integrity {
			case archive.IntegrityMismatch, archive.IntegrityCorrupt, archive.IntegrityChanged:
				msg := integrityMessage(rep.Integrity)
				if rep.MissingRecords > 0 {
					msg = missingMessage(rep)
				}
				return &Error{Kind: KindPublic, Code: "archive_integrity_" + rep.Integrity, Result: res, Message: msg}
			case archive.IntegrityIncomplete:
				res.resume = resumeCommand(dir, dbPath, id, maxPages, count, rep.NextCursor)
			}
			return Emit(cmd, res, res.writeText)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "directory", "", "the configured outbox directory (absolute and normalized; required)")
	f.StringVar(&idText, "database-id", "", "the expected database identity, 32 hexadecimal characters (required)")
	f.IntVar(&maxPages, "max-pages", 1, fmt.Sprintf("the page bound of this step, 1 through %d", archive.MaxInspectPages))
	f.StringVar(&after, "after", "", "resume the scan after the previous step: its next_cursor")
	f.BoolVar(&count, "count-incarnations", false, "also count the records of each history incarnation (from the first step)")
	f.StringVar(&dbPath, "database-path", "", "the stopped database's directory (the configured [database] path): also check "+
		"the archive against the database's record of completed deliveries, the inspection to run after a crash")
	return cmd
}

// resumeCommand is the command line that runs the step after this one.
func resumeCommand(dir, dbPath string, id event.DatabaseID, maxPages int, count bool, cursor string) string {
	s := fmt.Sprintf("riffdb outbox archive inspect --directory %s --database-id %s --max-pages %d",
		shellQuote(dir), id, maxPages)
	if dbPath != "" {
		s += " --database-path " + shellQuote(dbPath)
	}
	if count {
		s += " --count-incarnations"
	}
	return s + " --after " + shellQuote(cursor)
}

// shellQuote quotes s for a POSIX shell unless it needs no quoting.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:,@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func integrityMessage(integrity string) string {
	switch integrity {
	case archive.IntegrityMismatch:
		return "the archive's records disagree with its durable accounting; stop delivery and investigate"
	case archive.IntegrityChanged:
		return "the archive changed between the steps of this scan (records were archived in between), so the steps " +
			"cannot verify it; stop the server and start the scan again without --after"
	}
	return "the archive holds corrupt content; stop delivery and investigate"
}

// inspectError classifies a failed inspection. Messages are composed here
// (custody reasons are taken from the archive package, which writes them
// without paths); a message that would still mention dir is replaced by a
// generic one.
func inspectError(err error, dir string, rep archive.InspectReport, opts archive.InspectOptions) *Error {
	e := classifyInspectError(err, rep, opts)
	if dir != "" && strings.Contains(e.Message, dir) {
		e.Message = "archive inspection failed"
	}
	return e
}

func classifyInspectError(err error, rep archive.InspectReport, opts archive.InspectOptions) *Error {
	switch {
	case errors.Is(err, archive.ErrInvalidCursor):
		// The cursor is not repeated: it is the caller's input.
		return Local("invalid_cursor", "--after is not a cursor of this archive's scan: a cursor resumes only the scan "+
			"of the archive that issued it, and must be passed unchanged; start the scan again without --after")
	case errors.Is(err, archive.ErrUnsupportedPlatform):
		return Local("unsupported_platform", "this implementation requires Linux; archive inspection is refused on this platform")
	case errors.Is(err, archive.ErrNotFound):
		return Local("archive_not_found", "no archive exists in the directory given by --directory; inspection creates nothing")
	case errors.Is(err, archive.ErrBusy):
		return Local("archive_busy", "the archive is held by another process; stop the owning server before inspection")
	case errors.Is(err, archive.ErrCustody):
		return Local("archive_custody", "%s", reasonFrom(err, archive.ErrCustody))
	case errors.Is(err, archive.ErrBindingChanged):
		if rep.DatabaseBinding == "" {
			return Public("archive_binding_mismatch",
				"the archive is bound to another database than --database-id; it requires operator investigation")
		}
		e := Public("archive_binding_mismatch",
			"the archive is bound to database %s, not to --database-id; it requires operator investigation", rep.DatabaseBinding)
		e.Result = newInspectResult(rep, false)
		return e
	case errors.Is(err, archive.ErrIncompatibleFormat):
		return Public("archive_incompatible_format", "the archive's format is not supported by this riffdb; it requires operator investigation")
	case errors.Is(err, archive.ErrCorrupt), archive.ClassOf(err) == deliverytype.Stop:
		// Storage-engine corruption found while scanning can arrive
		// unwrapped; ClassOf recognizes it. The verdict is still reported.
		e := Public("archive_integrity_corrupt", "%s", integrityMessage(archive.IntegrityCorrupt))
		if rep.Format != "" {
			rep.Integrity = archive.IntegrityCorrupt
			e.Result = newInspectResult(rep, opts.CountIncarnations)
		}
		return e
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EROFS):
		return Local("archive_refused", "access to the archive was refused%s; run inspection as the archive's owner", errnoSuffix(err))
	case errors.Is(err, archive.ErrRefused):
		// The archive package's own reason (a missing lock file, which a
		// read-only inspection never creates), without any prefix.
		return Local("archive_refused", "%s", strings.TrimPrefix(reasonFrom(err, archive.ErrRefused), "archive: "))
	case errors.Is(err, archive.ErrInvalidArgument) && opts.After != "" && opts.CountIncarnations:
		return Local("usage", "--count-incarnations must be given at the first step of a scan; start the scan again without --after to count")
	case errors.Is(err, archive.ErrInvalidArgument):
		return Local("usage", "--max-pages must be 1 through %d", archive.MaxInspectPages)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return Local("interrupted", "archive inspection was interrupted")
	default:
		return Local("archive_unavailable", "the archive could not be read%s", errnoSuffix(err))
	}
}

// reasonFrom returns err's text from sentinel's message on (the archive
// package writes its reasons without paths): whatever a storage-engine
// wrapper put before it (which may name files) is dropped.
func reasonFrom(err, sentinel error) string {
	msg := err.Error()
	if i := strings.Index(msg, sentinel.Error()); i >= 0 {
		return msg[i:]
	}
	return sentinel.Error()
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

// checkDirectoryFlag applies the configuration's rule for paths to
// --directory (checkPathFlag).
func checkDirectoryFlag(p string) error { return checkPathFlag("--directory", p) }

// checkPathFlag applies the configuration's rule for paths to the flag
// named flag: absolute and lexically normalized (filepath.Clean leaves it
// unchanged: no "." or ".." components, repeated separators or trailing
// separator), without a NUL byte. It mirrors config's checkPath, which is
// not exported; a test checks that the two agree. The message never
// repeats the path.
func checkPathFlag(flag, p string) error {
	switch {
	case p == "":
		return Local("usage", "%s is required", flag)
	case strings.IndexByte(p, 0) >= 0:
		return Local("usage", "%s contains a NUL byte", flag)
	case !filepath.IsAbs(p):
		return Local("usage", "%s must be an absolute path", flag)
	case filepath.Clean(p) != p:
		return Local("usage", "%s must be a normalized path: no '.' or '..' components, repeated separators or trailing separator", flag)
	}
	return nil
}
