package archive

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/riffdb/riffdb/event"
)

// MaxInspectPages is the largest page bound Inspect accepts.
const MaxInspectPages = 256

// Integrity verdicts of Inspect. A report returned with a non-nil error
// has none: its Integrity is "" (no verdict was reached; the error says
// why, e.g. ErrBindingChanged, ErrBusy, ErrNotFound, ErrInvalidCursor).
const (
	// IntegrityVerified: the complete scan (every step of it) verified every
	// record and matched the durable accounting, and the storage engine's
	// level check passed.
	IntegrityVerified = "verified"
	// IntegrityIncomplete: the page bound ended before the scan did;
	// NextCursor resumes it.
	IntegrityIncomplete = "incomplete"
	// IntegrityMismatch: the complete scan disagrees with the accounting.
	IntegrityMismatch = "mismatch"
	// IntegrityCorrupt: a checksum, decode or storage-engine corruption.
	IntegrityCorrupt = "corrupt"
	// IntegrityChanged: the archive's durable accounting differs from what
	// it was at the first step of a stepped scan (records were archived in
	// between), so the steps cannot verify it. Start again.
	IntegrityChanged = "changed"
)

// InspectReport is the result of an offline inspection.
type InspectReport struct {
	// Format names the archive format and the storage-engine format.
	Format string
	// DatabaseBinding is the bound database identity (32 hex characters).
	DatabaseBinding string
	// RecordCount and EncodedBytes are the durable accounting.
	RecordCount, EncodedBytes int64
	// ScannedRecords and ScannedBytes are what this step's bounded scan
	// verified.
	ScannedRecords, ScannedBytes int64
	// TotalRecords and TotalBytes are what every step so far verified,
	// this one included (equal to ScannedRecords and ScannedBytes in a
	// one-step scan).
	TotalRecords, TotalBytes int64
	// AllocatedBytes is the physical space of the store's files (-1 when it
	// could not be measured).
	AllocatedBytes int64
	// PagesExamined counts the pages this step read, including a failing
	// one.
	PagesExamined int
	// Steps counts the steps of the scan so far, this one included (1 for a
	// scan without After).
	Steps int
	// Integrity is one of the Integrity* constants, or "" when Inspect
	// returns an error.
	Integrity string
	// NextCursor is set exactly when Integrity is "incomplete": pass it as
	// InspectOptions.After to run the next step.
	NextCursor string
	// Incarnations, with InspectOptions.CountIncarnations, counts the
	// records of every step so far per history incarnation, in ascending
	// incarnation order.
	Incarnations []IncarnationCount
	// MissingRecords, with Integrity "mismatch", is how many records at
	// least the archive lost: its accounting is below the floor written at
	// its last clean shutdown, or below InspectOptions.Floor (floor.go).
	// MissingAnchor says which of the two proved the larger loss.
	MissingRecords int64
	MissingAnchor  string
}

// Values of InspectReport.MissingAnchor.
const (
	// AnchorFloorFile: the archive's floor file, written at its last clean
	// shutdown.
	AnchorFloorFile = "floor_file"
	// AnchorDatabase: the primary's record of completed deliveries
	// (InspectOptions.Floor), which also covers a crash.
	AnchorDatabase = "database"
)

// InspectOptions configure Inspect.
type InspectOptions struct {
	// MaxPages bounds the step to at most MaxPages pages of at most
	// MaxPageRecords records and MaxPageBytes. It must be in
	// 1..MaxInspectPages (ErrInvalidArgument otherwise).
	MaxPages int
	// After is the NextCursor of the previous step; "" starts a scan.
	After string
	// CountIncarnations counts records per history incarnation
	// (InspectReport.Incarnations). It is decided at the first step: a
	// cursor of a scan that did not count refuses it (ErrInvalidArgument),
	// and a cursor of a scan that counted keeps counting.
	CountIncarnations bool
	// Progress, when set, is called after every page Inspect examines with
	// the pages, records and encoded bytes of every step so far and the
	// durable record count (the accounting the scan must reach), for a
	// progress line with an estimate of the time left. It runs on the
	// calling goroutine and must not block.
	Progress func(pages int, records, bytes, accounted int64)
	// Floor, when positive, is a durable lower bound of the record count
	// kept outside the archive: the primary's record of completed
	// deliveries (primary.DeliveryMark.ArchiveFloor), the anchor the
	// server's Open checks (Options.Floor). The step that completes the
	// scan reports "mismatch" with MissingRecords when the accounting is
	// below it. Unlike the archive's floor file, which is only as new as
	// its last clean shutdown, it also covers a crash. It must not be
	// negative (ErrInvalidArgument).
	Floor int64
}

// Inspect verifies the archive in dir offline, one bounded step at a time:
// at most opts.MaxPages pages (1..MaxInspectPages) of at most
// MaxPageRecords records and MaxPageBytes, after opts.After.
//
// It refuses a missing archive (ErrNotFound) and never creates or changes
// anything: it audits custody, checks existence without opening, takes the
// store's exclusive lock without creating LOCK or changing its timestamps
// (ErrBusy while a server holds it; a store without LOCK is refused with
// ErrRefused) and opens it read-only with that lock. It refuses a damaged
// or edited cursor (one not issued under the archive's cursor key exactly
// as it is, whatever its content: cursorkey.go), or one another archive
// issued (another archive of the same database included), with
// ErrInvalidCursor before it reports anything; then another binding
// (ErrBindingChanged) and an incompatible format. Without a cursor key
// file it still verifies an archive in one step, but refuses to issue or
// accept a cursor (ErrRefused); a damaged key file is "corrupt".
//
// Integrity is "incomplete" with a NextCursor when the bound ends first;
// "changed" when the durable accounting differs from the one the first step
// saw; "corrupt" on checksum, decode or storage-engine corruption (the step
// that reaches a damaged record says so); at the end of the scan,
// "verified" only when the totals of every step match the durable
// accounting, the metadata keys are the expected ones, the floor checks
// (the archive's floor file, and opts.Floor when given) pass and the
// storage engine's level check passes, "mismatch" otherwise.
// These reports come with a nil error. Running the steps one after another
// gives the same totals and verdict as one scan of enough pages.
//
// Each step reads at most MaxPages pages and keeps only the running totals
// and the incarnation table, so memory does not grow with the archive. The
// level check (pebble.DB.CheckLevels) is a pass over the whole store, run
// once, by the step that completes the scan (in a one-step scan, by that
// step): that step costs one extra sequential pass over the store, which
// the stepped scan accepts to verify exactly what a one-step scan verifies.
//
// Errors contain no paths and no payloads.
func Inspect(ctx context.Context, dir string, db event.DatabaseID, opts InspectOptions) (InspectReport, error) {
	return inspect(ctx, dir, db, nil, opts)
}

// inspect is Inspect with a filesystem seam: fs == nil is the real
// filesystem with the custody audit.
func inspect(ctx context.Context, dir string, database event.DatabaseID, fs vfs.FS, opts InspectOptions) (InspectReport, error) {
	rep := InspectReport{AllocatedBytes: -1}
	if opts.MaxPages < 1 || opts.MaxPages > MaxInspectPages {
		return rep, fmt.Errorf("%w: max pages must be 1..%d", ErrInvalidArgument, MaxInspectPages)
	}
	if opts.After != "" {
		if _, err := parseStepCursor(opts.After); err != nil {
			return rep, err
		}
	}
	if opts.Floor < 0 {
		return rep, fmt.Errorf("%w: the floor must not be negative", ErrInvalidArgument)
	}
	ro, err := openReadOnly(ctx, dir, fs)
	if errors.Is(err, ErrCorrupt) {
		rep.Integrity = IntegrityCorrupt
		return rep, nil
	}
	if err != nil {
		return rep, err
	}
	defer ro.close()
	m, err := ro.bind(ctx)
	if errors.Is(err, ErrCorrupt) {
		rep.Integrity = IntegrityCorrupt
		return rep, nil
	}
	if err != nil {
		return rep, err
	}
	key, haveKey, keyErr := readCursorKey(ro.fs, ro.storeDir)
	if keyErr != nil && !errors.Is(keyErr, ErrCorrupt) {
		return rep, keyErr
	}
	var prev *stepState
	if opts.After != "" && keyErr == nil {
		if !haveKey {
			return rep, errNoCursorKey
		}
		if prev, err = decodeStepState(opts.After, key); err != nil {
			return rep, err
		}
		if prev.id != ro.id {
			return rep, errForeignCursor
		}
		if opts.CountIncarnations && !prev.count {
			return rep, fmt.Errorf("%w: the scan did not count incarnations at its first step; start it again to count them", ErrInvalidArgument)
		}
	}
	if n, err := storeAllocated(ro.fs, ro.real, ro.storeDir); err == nil {
		rep.AllocatedBytes = n
	}
	rep.Format = fmt.Sprintf("riffarch/%d pebble/%d", m.version, ro.engine)
	rep.DatabaseBinding = m.binding.String()
	rep.RecordCount, rep.EncodedBytes = m.acct.Records, m.acct.EncodedBytes
	if m.binding != database {
		return rep, fmt.Errorf("%w: archive is bound to database %s", ErrBindingChanged, m.binding)
	}
	if keyErr != nil {
		// A damaged key file is damage to the store: nothing is verified
		// and no cursor is issued or accepted.
		rep.Integrity = IntegrityCorrupt
		return rep, nil
	}
	return ro.step(ctx, rep, m, prev, stepKey{key: key, ok: haveKey}, opts)
}

// stepKey is the archive's cursor key, when it has one.
type stepKey struct {
	key cursorKey
	ok  bool
}

// step runs one step of the scan after prev (nil: the first step).
func (ro *readOnly) step(ctx context.Context, rep InspectReport, m meta, prev *stepState, key stepKey, opts InspectOptions) (InspectReport, error) {
	cur := stepState{id: ro.id, acct: m.acct, count: opts.CountIncarnations}
	var after Cursor
	if prev != nil {
		cur = *prev
		cur.incs = slices.Clone(prev.incs)
		after = newCursor(ro.id, prev.last)
	}
	cur.steps++
	rep.Steps = cur.steps
	report := func() InspectReport {
		rep.TotalRecords, rep.TotalBytes = cur.records, cur.bytes
		if cur.count {
			rep.Incarnations = slices.Clone(cur.incs)
		}
		return rep
	}
	if m.acct != cur.acct {
		rep.Integrity = IntegrityChanged
		return report(), nil
	}

	// The floor file is a lower bound of the accounting kept outside the
	// log (floor.go): an archive below it lost records to a truncated or
	// replaced log, however consistent it is with itself.
	var lost *LostRecordsError
	fid, floor, haveFloor, floorErr := readFloor(ro.fs, ro.storeDir)
	if floorErr == nil && haveFloor {
		if fid != m.binding {
			floorErr = newError(ErrCorrupt, "the archive's floor file names another database", nil)
		} else if ferr := checkFloor(m.acct, floor.Records, anchorFloorFile); ferr != nil {
			lost = ferr.(*LostRecordsError)
		}
	}
	if floorErr != nil && !errors.Is(floorErr, ErrCorrupt) {
		return rep, floorErr
	}
	// The primary's record of completed deliveries, when the caller read
	// it (InspectOptions.Floor): the anchor that also covers a crash.
	if perr := checkFloor(m.acct, opts.Floor, anchorPrimary); perr != nil {
		if p := perr.(*LostRecordsError); lost == nil || p.Missing > lost.Missing {
			lost = p
		}
	}

	t, err := ro.scan(ctx, after, opts.MaxPages, func(p Page) error {
		cur.pages++
		cur.records += int64(len(p.Records))
		cur.bytes += p.EncodedBytes
		if n := len(p.Records); n > 0 {
			cur.last = p.Records[n-1].Key
		}
		if opts.Progress != nil {
			opts.Progress(int(cur.pages), cur.records, cur.bytes, m.acct.Records)
		}
		if !cur.count {
			return nil
		}
		var err error
		cur.incs, err = countRecords(cur.incs, p.Records)
		return err
	})
	rep.PagesExamined, rep.ScannedRecords, rep.ScannedBytes = t.pages, t.records, t.bytes
	if err == nil && t.complete {
		err = ro.checkMetaKeys(ctx)
		if err == nil {
			err = guarded(ctx, ro.st, ro.timeout, "checking levels", false, func() error {
				return ro.db.CheckLevels(&pebble.CheckLevelsStats{})
			})
		}
	}
	switch {
	case errors.Is(err, ErrCorrupt):
		rep.Integrity = IntegrityCorrupt
	case err != nil:
		return rep, err
	case !t.complete && !key.ok:
		return rep, errNoCursorKey
	case !t.complete:
		rep.Integrity, rep.NextCursor = IntegrityIncomplete, cur.encode(key.key)
	case cur.records != m.acct.Records || cur.bytes != m.acct.EncodedBytes:
		rep.Integrity = IntegrityMismatch
	case floorErr != nil:
		rep.Integrity = IntegrityCorrupt
	case lost != nil:
		rep.Integrity, rep.MissingRecords = IntegrityMismatch, lost.Missing
		rep.MissingAnchor = AnchorFloorFile
		if lost.Anchor == anchorPrimary {
			rep.MissingAnchor = AnchorDatabase
		}
	default:
		rep.Integrity = IntegrityVerified
	}
	return report(), nil
}
