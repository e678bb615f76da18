package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/riffdb/riffdb/internal/walfill"
)

// TestEachServerZeroFillsItsOwnWALs: a server counts the WALs of its own
// stores (internal/walfill's Group), so two servers in one process, four
// WALs in all, each write zeros ahead of their logs as one server alone
// does, and a benchmark that runs two side by side measures what
// production runs. With one count for the process, neither would.
func TestEachServerZeroFillsItsOwnWALs(t *testing.T) {
	a, _ := startDev(t, nil)
	b, _ := startDev(t, nil)
	for _, s := range []*Server{a, b} {
		d := s.dbs[0]
		for i := range 2 {
			in, _ := json.Marshal(map[string]any{"order_id": fmt.Sprint(i), "amount_cents": 1})
			if _, err := d.db.Execute(context.Background(), "place_order", in, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, s := range []*Server{a, b} {
		logs, err := filepath.Glob(filepath.Join(s.dbs[0].cfg.Path, "*.log"))
		if err != nil || len(logs) == 0 {
			t.Fatalf("no WAL in the primary store: %v", err)
		}
		st, err := os.Stat(logs[len(logs)-1])
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() < walfill.Step {
			t.Fatalf("with two servers in the process, a primary's WAL is %d bytes after two commits: not zero-filled", st.Size())
		}
	}
}
