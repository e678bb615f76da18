package cli

import (
	"fmt"
	"io"
	"time"
)

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
//
// Inspect reports cumulative numbers (every step so far), so the line
// measures this step from its first page: the rate, and the time left until
// the step's page bound, an upper bound since the scan may end earlier.
type progressLine struct {
	w        io.Writer
	now      func() time.Time
	maxPages int
	next     time.Time // no update before this
	shown    bool
	based    bool      // base* are set
	basePage int       // the cumulative page count at this step's first page
	baseRecs int64     // and the records then
	baseTime time.Time // and when
}

func newProgressLine(w io.Writer, now func() time.Time, maxPages int) *progressLine {
	return &progressLine{w: w, now: now, maxPages: maxPages, next: now().Add(progressInterval)}
}

// update shows the records and bytes read so far, unless the previous
// update was less than progressInterval ago (or the step began less than
// that ago).
func (p *progressLine) update(pages int, records, bytes, accounted int64) {
	t := p.now()
	if !p.based {
		p.based, p.basePage, p.baseRecs, p.baseTime = true, pages, records, t
	}
	if t.Before(p.next) {
		return
	}
	p.next = t.Add(progressInterval)
	rate, left, eta := -1.0, time.Duration(-1), time.Duration(-1)
	if d := t.Sub(p.baseTime); d > 0 && pages > p.basePage {
		rate = float64(records-p.baseRecs) / d.Seconds()
		perPage := d / time.Duration(pages-p.basePage)
		left = perPage * time.Duration(max(p.maxPages-(pages-p.basePage+1), 0))
		if rate > 0 && accounted >= records {
			eta = time.Duration(float64(accounted-records) / rate * float64(time.Second))
		}
	}
	fmt.Fprintf(p.w, "\r\x1b[K%s", formatProgress(records, bytes, accounted, rate, left, eta))
	p.shown = true
}

// clear erases the line if one is shown.
func (p *progressLine) clear() {
	if p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.shown = false
	}
}

// formatProgress is the text of the progress line: records (of the
// accounting's total) and bytes so far, the rate (records a second; < 0: not
// measured yet), the estimated time until the whole scan is done at that
// rate (eta; < 0: not measured yet) and the time left at most in this step
// (left; < 0: not measured yet).
func formatProgress(records, bytes, accounted int64, rate float64, left, eta time.Duration) string {
	s := fmt.Sprintf("inspect: %d of %d records, %s", records, accounted, formatBytes(bytes))
	if rate >= 0 {
		s += fmt.Sprintf(", %.0f records/s", rate)
	}
	if eta >= 0 {
		s += fmt.Sprintf(", about %s left in all", eta.Round(time.Second))
	}
	if left >= 0 {
		s += fmt.Sprintf(", this step ends within %s", left.Round(time.Second))
	}
	return s
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
