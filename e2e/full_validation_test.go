package e2e_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// TestStartPastTheFullValidationIntervalFindsBitRot: with the background
// scrub off, only a start re-reads old records, and a start trusts the
// checkpointed prefix only within full_validation_interval. A byte flipped
// in an old table is found by the first start past the interval, which
// validates every record and stops delivery with corrupt_content. The
// last full validation and the interval are exported.
func TestStartPastTheFullValidationIntervalFindsBitRot(t *testing.T) {
	t.Parallel()
	const interval = time.Second
	e := newEnv(t, envOpts{outbox: true, extra: "scrub_pages_per_second = 0\nfull_validation_interval = \"1s\"\n"})
	token := e.token([]string{"execute_commands", "read_statistics"}, "")
	p := e.start()
	commitAndDrain(t, p, token, 0, 600)
	text := scrape(t, p, false)
	last := metricValue(text, `riffdb_archive_last_full_validation_timestamp_seconds{riffdb_database="default"`)
	if at := time.Unix(0, int64(last*1e9)); last <= 0 || time.Since(at) > time.Minute || time.Until(at) > time.Second {
		t.Fatalf("riffdb_archive_last_full_validation_timestamp_seconds = %v, want the archive's creation moments ago", last)
	}
	if got := metricValue(text, `riffdb_archive_full_validation_interval_seconds{riffdb_database="default"`); got != interval.Seconds() {
		t.Fatalf("riffdb_archive_full_validation_interval_seconds = %v, want %v", got, interval.Seconds())
	}
	p.stop()
	// Every record into one table of the bottom level, as an archive's old
	// records end up, so that no compaction at the next start reads the
	// damaged block before the validation does.
	rawArchive(t, e.outbox, func(db *pebble.DB) {
		must(t, db.Compact(context.Background(), []byte{0}, []byte{0xff}, false))
	})
	flipTableByte(t, e.outbox)
	// The interval is wall time: let it pass since the last full
	// validation (the archive's creation, at the first start).
	time.Sleep(interval + interval/2)

	p = e.start()
	waitStopped(t, p, token)
	if !strings.Contains(p.stderr.String(), "older than the full validation interval; validating the whole archive") {
		t.Fatalf("the start did not say why it validated the whole archive:\n%s", p.stderr.String())
	}
}

// TestScrubOffWithoutTheIntervalIsInvalidConfig: scrub_pages_per_second =
// 0 alone turns off the only reader of old records while the server runs,
// with no bound on how long a start trusts them: config check refuses it
// as invalid_config, naming the options.
func TestScrubOffWithoutTheIntervalIsInvalidConfig(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{outbox: true, extra: "scrub_pages_per_second = 0\n"})
	r := cli(t, "config", "check", "--config", e.config)
	if r.OK || r.Exit != 2 || r.Error == nil || r.Error.Code != "invalid_config" ||
		!strings.Contains(r.Error.Message, "maintenance.outbox.scrub_pages_per_second = 0") ||
		!strings.Contains(r.Error.Message, "maintenance.outbox.full_validation_interval") {
		t.Fatalf("config check with the scrub off and no interval: %+v", r)
	}
	e.appendConfig("full_validation_interval = \"24h\"\n")
	if r := cli(t, "config", "check", "--config", e.config); !r.OK {
		t.Fatalf("config check with the scrub off and an interval: %+v", r)
	}
}
