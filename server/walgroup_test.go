package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/internal/store/walfill"
)

// withDatabases replaces the development configuration's database with n
// named ones, each with its own primary and archive under one private
// folder.
func withDatabases(t *testing.T, n int) func(*config.Config) {
	t.Helper()
	root := t.TempDir()
	return func(cfg *config.Config) {
		contract := cfg.Databases[0].Contract
		cfg.Databases = nil
		for i := range n {
			alias := fmt.Sprintf("db%02d", i)
			out := filepath.Join(root, "outbox-"+alias)
			if err := os.Mkdir(out, 0o700); err != nil {
				t.Fatal(err)
			}
			cfg.Databases = append(cfg.Databases, config.Database{
				Alias: alias, Path: filepath.Join(root, "db-"+alias), Contract: contract,
				Outbox: &config.Outbox{Kind: "durable_local", Directory: out, QuotaEncodedBytes: 1 << 30,
					ScrubPagesPerSecond: config.DefaultScrubPagesPerSecond},
			})
		}
	}
}

// commitTwice commits two events into each of s's databases.
func commitTwice(t *testing.T, s *Server) {
	t.Helper()
	for _, d := range s.dbs {
		for i := range 2 {
			in, _ := json.Marshal(map[string]any{"order_id": fmt.Sprint(i), "amount_cents": 1})
			if _, err := d.db.Execute(context.Background(), "place_order", in, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// primaryWALSizes returns the size of the newest WAL of each of s's
// primaries.
func primaryWALSizes(t *testing.T, s *Server) []int64 {
	t.Helper()
	var sizes []int64
	for _, d := range s.dbs {
		logs, err := filepath.Glob(filepath.Join(d.cfg.Path, "*.log"))
		if err != nil || len(logs) == 0 {
			t.Fatalf("no WAL in the primary store of %s: %v", d.alias, err)
		}
		st, err := os.Stat(logs[len(logs)-1])
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, st.Size())
	}
	return sizes
}

// TestEightDatabasesZeroFillTheirWALs: a server with eight databases (16
// WALs, walfill.MaxFilledLogs) writes zeros ahead of every primary's log,
// as one database does; delivery with four and eight databases was 1.3x
// faster with them (internal/store/walfill, docs/benchmarks.md).
//
// The server then stops and a new one opens the same stores: every
// database's commits come back from logs that end in zeros (the server
// does not flush its memtables when it stops, so they are read from the
// WALs).
func TestEightDatabasesZeroFillTheirWALs(t *testing.T) {
	s, _ := startDev(t, withDatabases(t, 8))
	commitTwice(t, s)
	for i, n := range primaryWALSizes(t, s) {
		if n < walfill.MinStep {
			t.Errorf("with 8 databases, %s's primary WAL is %d bytes after two commits: not zero-filled", s.dbs[i].alias, n)
		}
	}
	var last []uint64
	for _, d := range s.dbs {
		last = append(last, d.db.LastCommitSequence())
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, n := range primaryWALSizes(t, s) {
		if n < walfill.MinStep {
			t.Fatalf("after the stop %s's primary WAL is %d bytes: the reopen would not read a zero-filled log", s.dbs[i].alias, n)
		}
	}
	again, err := New(context.Background(), Options{Config: s.cfg, LogOutput: io.Discard})
	if err != nil {
		t.Fatalf("reopening 8 databases with zero-filled WALs: %v", err)
	}
	t.Cleanup(func() { _ = again.Stop(context.Background()) })
	if err := again.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, d := range again.dbs {
		if got := d.db.LastCommitSequence(); got != last[i] || got < 2 {
			t.Errorf("%s reopened at commit %d, want %d", d.alias, got, last[i])
		}
	}
}

// TestEachServerZeroFillsItsOwnWALs: a server counts the WALs of its own
// stores (internal/store/walfill's Group), so two servers in one process, 20
// WALs in all, each write zeros ahead of their logs as one server alone
// does, and a benchmark that runs two side by side measures what
// production runs. With one count for the process, the 20 would stop the
// zeros of both.
func TestEachServerZeroFillsItsOwnWALs(t *testing.T) {
	const perServer = 5
	a, _ := startDev(t, withDatabases(t, perServer))
	b, _ := startDev(t, withDatabases(t, perServer))
	for _, s := range []*Server{a, b} {
		commitTwice(t, s)
	}
	// Every store has now logged more than once (the primaries their
	// commits, the archives the events delivered), so every WAL is counted.
	for _, s := range []*Server{a, b} {
		deadline := time.Now().Add(30 * time.Second)
		for s.walGroup.Open() < 2*perServer && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if got := s.walGroup.Open(); got != 2*perServer {
			t.Fatalf("a server with %d databases counts %d open WALs, want %d: its own, and only its own", perServer, got, 2*perServer)
		}
	}
	for _, s := range []*Server{a, b} {
		for i, n := range primaryWALSizes(t, s) {
			if n < walfill.MinStep {
				t.Errorf("with two servers in the process, %s's primary WAL is %d bytes after two commits: not zero-filled", s.dbs[i].alias, n)
			}
		}
	}
}
