package primary

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/riffdb/riffdb/internal/process/clock"
)

// TestStoreLoggerIsPathFreeAndBounded checks the Pebble logger's Infof and
// Errorf: Pebble formats file paths into them, and an Errorf in a loop
// (a failing cleanup) must not flood the log.
func TestStoreLoggerIsPathFreeAndBounded(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.DebugLevel)
	log := zap.New(core)
	now := time.Unix(1000, 0)
	db := &DB{log: log}
	l := storeLogger{pebbleLogger{db: db}, newStoreLog(log, clock.Func(func() time.Time { return now }))}
	for i := range 1000 {
		l.Errorf("ingest failed to remove original file: %s", "/var/lib/riffdb/db/00001"+string(rune('0'+i%10))+".sst")
	}
	l.Infof("WAL %s stopped reading", "/var/lib/riffdb/db/000002.log")
	if n := logs.FilterMessage("primary storage engine error").Len(); n != 1 {
		t.Fatalf("%d Errorf lines in one second, want 1", n)
	}
	for _, e := range logs.All() {
		for _, v := range e.ContextMap() {
			if s, ok := v.(string); ok && strings.Contains(s, "/var/lib") {
				t.Fatalf("a path in %q: %q", e.Message, s)
			}
		}
	}
	if logs.FilterMessage("primary storage engine").Len() != 1 {
		t.Fatal("Infof was not logged")
	}
}
