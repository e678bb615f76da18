package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/outbox"
	"github.com/riffdb/riffdb/telemetry"
)

// TestOpenDatabaseUnregistersPebbleMetricsWhenTheWorkerFails fails the
// creation of a database's outbox worker, after attach has registered the
// Pebble metric callbacks of its primary and archive stores: openDatabase
// must unregister them with the stores it closes, or every scrape would call
// into a closed store (and a retry would export the database twice).
func TestOpenDatabaseUnregistersPebbleMetricsWhenTheWorkerFails(t *testing.T) {
	root := t.TempDir()
	if err := os.Chmod(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "contract.toml"), []byte(statsContract), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "outbox"), 0o700); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
[server]
listen = "127.0.0.1:0"
metrics_listen = "127.0.0.1:0"
credential_path = %q
[databases.a]
path = %q
contract = %q
[databases.a.outbox]
kind = "durable_local"
directory = %q
quota_encoded_bytes = 1000000
`, root+"/creds", root+"/db", root+"/contract.toml", root+"/outbox")), nil, config.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tel, err := telemetry.Setup(ctx, telemetry.Config{ServiceName: "riffdb", LogOutput: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })

	errWorker := errors.New("injected worker failure")
	var (
		atFailure map[string]int
		dest      outbox.Destination
	)
	s := &Server{cfg: cfg, tel: tel, log: tel.Logger,
		newWorker: func(o outbox.Options) (*outbox.Worker, error) {
			dest = o.Destination
			// Open the archive, so that its store exports series too.
			if err := o.Destination.Probe(ctx); err != nil {
				t.Errorf("probing the archive: %v", err)
			}
			atFailure = pebbleSeries(t, tel, "a")
			return nil, errWorker
		}}
	d, serr := s.openDatabase(ctx, cfg.Databases[0])
	if serr == nil || !errors.Is(serr, errWorker) {
		t.Fatalf("openDatabase = %v, %v; want the injected worker failure", d, serr)
	}
	for _, store := range []string{"primary", "archive"} {
		if atFailure[store] == 0 {
			t.Fatalf("no Pebble series of the %s store were exported when the worker was created: the test proves nothing", store)
		}
	}
	if after := pebbleSeries(t, tel, "a"); len(after) != 0 {
		t.Errorf("Pebble series of database a per store after openDatabase failed: %v (before: %v), want none", after, atFailure)
	}
	// A closed archive exports nothing even while its callback is
	// registered: open it again to see whether the callback is still there.
	if err := dest.Probe(ctx); err != nil {
		t.Fatalf("probing the archive again: %v", err)
	}
	defer dest.(io.Closer).Close()
	if after := pebbleSeries(t, tel, "a"); len(after) != 0 {
		t.Errorf("Pebble series of database a per store with its archive open again: %v, want none", after)
	}
}

// pebbleSeries returns how many riffdb_pebble_* series of database alias
// tel's registry exports, by store.
func pebbleSeries(t *testing.T, tel *telemetry.Telemetry, alias string) map[string]int {
	t.Helper()
	families, err := tel.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "riffdb_pebble_") {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["riffdb_database"] == alias {
				n[labels["riffdb_store"]]++
			}
		}
	}
	return n
}

// TestWriteStallSeriesOfBothStores: the server exports the write-stall
// counters of every database's primary and archive (0 until Pebble stalls a
// write), so that the dashboards and RiffdbStoreWritesHeldBack have a series
// to read from the start.
func TestWriteStallSeriesOfBothStores(t *testing.T) {
	s, _ := startDev(t, nil)
	families, err := s.tel.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, f := range families {
		name := f.GetName()
		if name != "riffdb_pebble_write_stalls_total" && name != "riffdb_pebble_write_stall_time_seconds_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			found[name+" "+labels["riffdb_database"]+" "+labels["riffdb_store"]] = true
		}
	}
	for _, store := range []string{"primary", "archive"} {
		for _, name := range []string{"riffdb_pebble_write_stalls_total", "riffdb_pebble_write_stall_time_seconds_total"} {
			if key := name + " default " + store; !found[key] {
				t.Errorf("no series %s{riffdb_database=\"default\",riffdb_store=%q}; found %v", name, store, found)
			}
		}
	}
}
