package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/riffdb/riffdb/internal/testsupport/treestate"
)

// TestCutArchiveWALIsRefusedAsFound is issue 48's first reproduction, with
// the real binary: the server is killed, the archive's newest WAL is cut (to
// zero, and to half of the records it holds), and the server started again.
// The outbox stops and says why (archive_lost_records with the missing
// count, or corrupt_content), commands are still served, and every file of
// the archive is byte-identical to what the operator left: the archive was
// judged on a read-only view and never opened read-write. Before, by the
// time delivery stopped, the cut WAL had been replayed and deleted, its
// surviving records flushed into a new table, and a new MANIFEST, markers
// and OPTIONS written.
func TestCutArchiveWALIsRefusedAsFound(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: three server starts per cut")
	}
	for _, cut := range []string{"zero", "half"} {
		t.Run(cut, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOpts{outbox: true})
			token := e.token([]string{"execute_commands", "read_statistics", "read_health"}, "")
			// The first part reaches the archive's tables (the next open
			// flushes the replayed WAL), the second stays in its newest WAL.
			p := e.start()
			burst(t, p, token, 0, 40)
			p.waitDrained(t, token)
			p.stop()
			p = e.start()
			p.waitDrained(t, token)
			flushed := *p.stats(token).Databases[0].Outbox.ArchiveRecordCount
			burst(t, p, token, 40, 40)
			p.waitDrained(t, token)
			held := *p.stats(token).Databases[0].Outbox.ArchiveRecordCount
			p.kill()

			store := filepath.Join(e.outbox, "archive.pebble")
			logs, err := filepath.Glob(filepath.Join(store, "*.log"))
			must(t, err)
			if len(logs) == 0 {
				t.Fatal("the archive has no WAL")
			}
			slices.SortFunc(logs, func(a, b string) int {
				return strings.Compare(dmFileNumber(filepath.Base(a)), dmFileNumber(filepath.Base(b)))
			})
			newest := logs[len(logs)-1]
			to := int64(0)
			if cut == "half" {
				data, err := os.ReadFile(newest)
				must(t, err)
				var num uint32
				fmt.Sscanf(filepath.Base(newest), "%d.log", &num)
				to = dmWALLiveEnd(data, num) / 2
			}
			must(t, os.Truncate(newest, to))
			before := treestate.MustTake(t, e.outbox)

			p = e.start()
			waitFor(t, 30*time.Second, "the outbox to stop for the cut WAL", func() bool {
				s, r, _ := p.outboxState(token)
				return s == "stopped" && (r == "archive_lost_records" || r == "corrupt_content")
			})
			h := p.health(token)
			t.Logf("cut to %d bytes: outbox %s/%s, missing_records %d (the archive held %d, %d of them in tables)",
				to, h.State, h.Reason, h.MissingRecords, held, flushed)
			if h.Reason == "archive_lost_records" {
				if h.MissingRecords <= 0 || h.MissingRecords > held-flushed {
					t.Errorf("missing_records %d: want 1..%d, the records the cut WAL held", h.MissingRecords, held-flushed)
				}
				if cut == "zero" && h.MissingRecords != held-flushed {
					t.Errorf("missing_records %d: the WAL cut to zero held %d", h.MissingRecords, held-flushed)
				}
			}
			burst(t, p, token, 80, 4) // commands are still acknowledged
			if d := treestate.Diff(before, treestate.MustTake(t, e.outbox)); d != nil {
				t.Errorf("the refused archive was changed while the server ran: %q", d)
			}
			p.stop()
			if d := treestate.Diff(before, treestate.MustTake(t, e.outbox)); d != nil {
				t.Fatalf("the refused archive was changed by the server: %q", d)
			}
		})
	}
}
