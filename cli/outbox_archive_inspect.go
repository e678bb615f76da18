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
	"time"

	"github.com/spf13/cobra"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/event"
)

// inspectResult is the JSON result of `riffdb outbox archive inspect`
// (docs/inspect-result.schema.json). AllocatedBytes is null when the
// physical size could not be measured. Integrity is absent when there is no
// verdict (a binding mismatch); Format, DatabaseBinding, RecordCount and
// EncodedBytes are absent when the archive's metadata could not be read
// (a corrupt store).
type inspectResult struct {
	Format          string `json:"format,omitzero"`
	DatabaseBinding string `json:"database_binding,omitzero"`
	RecordCount     *int64 `json:"record_count,omitzero"`
	EncodedBytes    *int64 `json:"encoded_bytes,omitzero"`
	AllocatedBytes  *int64 `json:"allocated_bytes"`
	PagesExamined   int    `json:"pages_examined"`
	Integrity       string `json:"integrity,omitzero"`
	// MissingRecords is present with integrity "mismatch" when the archive
	// holds fewer records than at its last clean shutdown.
	MissingRecords int64 `json:"missing_records,omitzero"`
}

func newInspectResult(r archive.InspectReport) inspectResult {
	res := inspectResult{
		Format:          r.Format,
		DatabaseBinding: r.DatabaseBinding,
		PagesExamined:   r.PagesExamined,
		Integrity:       r.Integrity,
		MissingRecords:  r.MissingRecords,
	}
	if r.Format != "" {
		res.RecordCount, res.EncodedBytes = &r.RecordCount, &r.EncodedBytes
	}
	if r.AllocatedBytes >= 0 {
		res.AllocatedBytes = &r.AllocatedBytes
	}
	return res
}

// writeText prints the result for people, one field a line; a field absent
// from the JSON result is absent here too.
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
	if r.MissingRecords > 0 {
		line("missing records", r.MissingRecords)
	}
	if r.Integrity != "" {
		line("integrity", r.Integrity)
	}
	_, err := io.WriteString(w, b.String())
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
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			opts := archive.InspectOptions{MaxPages: maxPages}
			if stderr := cmd.ErrOrStderr(); outputMode(cmd) == "text" && isTerminal(stderr) {
				p := newProgressLine(stderr, inspectClock)
				opts.Progress = func(_ int, records int64) { p.update(records, -1) }
				defer p.clear() // before the result or the error is printed
			}
			rep, err := archive.Inspect(ctx, dir, id, opts)
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

// checkDirectoryFlag applies the configuration's rule for paths to
// --directory: absolute and lexically normalized (filepath.Clean leaves it
// unchanged: no "." or ".." components, repeated separators or trailing
// separator), without a NUL byte. It mirrors config's checkPath, which is
// not exported; a test checks that the two agree. The message never
// repeats the path.
func checkDirectoryFlag(p string) error {
	switch {
	case p == "":
		return Local("usage", "--directory is required")
	case strings.IndexByte(p, 0) >= 0:
		return Local("usage", "--directory contains a NUL byte")
	case !filepath.IsAbs(p):
		return Local("usage", "--directory must be an absolute path")
	case filepath.Clean(p) != p:
		return Local("usage", "--directory must be a normalized path: no '.' or '..' components, repeated separators or trailing separator")
	}
	return nil
}

// inspectClock is the progress line's clock; tests replace it.
var inspectClock = time.Now

// progressInterval is the shortest time between two updates of the
// progress line (at most 4 a second), and how long an inspection runs
// before the line first appears.
const progressInterval = 250 * time.Millisecond

// progressLine is the progress line of a text-mode inspection whose stderr
// is a terminal: one line rewritten in place, throttled to progressInterval,
// and erased (clear) before the result is printed. It is not safe for
// concurrent use; Inspect calls Progress on its own goroutine only.
type progressLine struct {
	w     io.Writer
	now   func() time.Time
	start time.Time
	next  time.Time // no update before this
	shown bool
	// expected is the number of records the scan will read in all when it
	// is known (the accounting minus what earlier steps read), else -1.
	expected int64
}

func newProgressLine(w io.Writer, now func() time.Time) *progressLine {
	start := now()
	return &progressLine{w: w, now: now, start: start, next: start.Add(progressInterval), expected: -1}
}

// update shows records and bytes (bytes < 0: unknown) read so far, unless
// the previous update was less than progressInterval ago.
func (p *progressLine) update(records, bytes int64) {
	t := p.now()
	if t.Before(p.next) {
		return
	}
	p.next = t.Add(progressInterval)
	fmt.Fprintf(p.w, "\r\x1b[K%s", formatProgress(records, bytes, p.expected, t.Sub(p.start)))
	p.shown = true
}

// clear erases the line if one is shown.
func (p *progressLine) clear() {
	if p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.shown = false
	}
}

// formatProgress is the text of the progress line: records and bytes so
// far, the rate, and the time left when expected (>= 0) is known.
func formatProgress(records, bytes, expected int64, elapsed time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "inspect: %d records", records)
	if bytes >= 0 {
		fmt.Fprintf(&b, ", %s", formatBytes(bytes))
	}
	if elapsed <= 0 {
		return b.String()
	}
	rate := float64(records) / elapsed.Seconds()
	fmt.Fprintf(&b, ", %.0f records/s", rate)
	if expected >= 0 && rate > 0 {
		left := time.Duration(float64(max(expected-records, 0)) / rate * float64(time.Second))
		fmt.Fprintf(&b, ", about %s left", left.Round(time.Second))
	}
	return b.String()
}

// formatBytes prints n in binary units with one decimal.
func formatBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, unit := float64(n)/1024, "KiB"
	for _, u := range []string{"MiB", "GiB", "TiB"} {
		if v < 1024 {
			break
		}
		v, unit = v/1024, u
	}
	return fmt.Sprintf("%.1f %s", v, unit)
}
