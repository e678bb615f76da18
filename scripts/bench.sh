#!/usr/bin/env bash
# Benchmarks with their same-run baselines, then the report table.
#
# Every throughput is measured next to its baseline in the same run on the
# same disk (raw fdatasync loops, bare Pebble), because these machines are
# noisy; the report prints values, ratios and the targets they are held
# against, and never fails on a missed target. Benchmarks that ran several
# times (-count) are reported by their median. Bounded: about 15 minutes on
# 2 cores, the soak's short form included (SOAK=0 skips it).
#
#   scripts/bench.sh            run everything, print raw output and the table
#   BENCH_OUT=file scripts/bench.sh   also keep the raw `go test` output in file
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
raw="$tmp/bench.txt"

run() {
  echo "### go test -run '^\$' $*" >&2
  "$GO" test -run '^$' -timeout 15m "$@" 2>&1 | tee -a "$raw"
}

start=$(date +%s)
# 1. Commit throughput: 1 and 64 clients, raw fdatasync, bare Pebble 64 writers
#    (2-key batches: the target's baseline; with the primary's Pebble options
#    and with commit-shaped batches: context).
#    Separate benchmarks (medians of 3 runs), then the same four workloads
#    interleaved in time (the ratios to trust on a noisy disk).
run -bench '^(BenchmarkRawFdatasync|BenchmarkPebbleSyncedBatch64|BenchmarkPebbleSyncedBatch64Tuned|BenchmarkPebbleCommitShapedBatch64|BenchmarkCommit)$' -benchtime 2s -count 3 ./primary/
run -bench '^BenchmarkCommitInterleaved$' -benchtime 3x ./primary/
# 2. Archive: one writer's accepts next to raw fdatasync; inspect throughput
#    and the inspect CLI's peak RSS over 10k and 1M records.
run -bench '^(BenchmarkRawFdatasync|BenchmarkAccept)$' -benchtime 3000x -count 3 ./archive/
run -bench '^BenchmarkAcceptInterleaved$' -benchtime 3x ./archive/
run -bench '^BenchmarkInspect$' -benchtime 20x ./archive/
run -bench '^BenchmarkInspectRSS$' -benchtime 3x ./archive/
# 3 and 5. Delivery through the real server, each drain paired with a raw
#    fdatasync baseline, tracing off / sampled / exported in rotating order;
#    then commit→archived latency at half the drain rate or of the command
#    capacity, the lesser.
run -bench '^BenchmarkDelivery$' -benchtime 5x ./bench/
run -bench '^BenchmarkDeliveryLatency$' -benchtime 1x -count 3 ./bench/
# 4. GET /v1/stats at 100 and 1,000,000 pending intents.
run -bench '^BenchmarkStats$' -benchtime 3000x ./bench/
#    A page of the deliveries listing at 100 and 1,000,000 undelivered events.
run -bench '^BenchmarkDeliveriesPage$' -benchtime 300x ./bench/
# 6. Dead letters at scale: 100,000 dead letters at the bottom of the
#    undelivered index against a clean database, interleaved in rounds:
#    burst delivery, trickle commit→archived lag, GET /v1/stats latency.
run -bench '^BenchmarkDeadLetters$' -benchtime 3x ./bench/
# 7. Startup: process start → first delivery after a clean shutdown (real
#    binary), a 1,000,000-record archive against a 10,000-record one,
#    interleaved (`make bench-startup-10m` for 10,000,000); archive.Open.
run -bench '^BenchmarkStartup$' -benchtime 15x ./bench/
run -bench '^BenchmarkOpen$' -benchtime 5x ./archive/
# 8. The background scrub: delivery with the scrub off, at the default and
#    at the maximum rate, interleaved.
run -bench '^BenchmarkDeliveryWithScrub$' -benchtime 5x ./delivery/
# 9. Online backup: commits while a backup of an 80 MiB store runs against
#    commits alone, interleaved.
run -bench '^BenchmarkCommitDuringBackup$' -benchtime 4x ./backup/
# 10. Many databases in one process: N = 1, 4, 16, 32 delivering next to N
#    raw writers (paired), commits/s and CPU, disk per database against its
#    data; bare Pebble stores next to the same raw writers; the server's
#    GOMAXPROCS against the runtime's default (interleaved); peak RSS with
#    32 busy databases; N parallel sync streams; the primary's WAL handling
#    before and after the disk fix (interleaved).
run -bench '^BenchmarkParallelSync$' -benchtime 1x ./bench/
run -bench '^BenchmarkMultiDB$' -benchtime 1x ./bench/
run -bench '^BenchmarkMultiDBProcs$' -benchtime 1x ./bench/
run -bench '^BenchmarkMultiDBMemory$' -benchtime 1x ./bench/
run -bench '^BenchmarkWALSpace$' -benchtime 1x ./primary/
# 12. Fast storage: one database on tmpfs (/dev/shm), where an fsync costs
#     about what it costs on NVMe, so the CPU is the limit: the drain against
#     the spec's chain on bare Pebble and its CPU per event, in the same run
#     (BenchmarkMultiDB/n=1, renamed FastDrain for the report); then HTTP
#     commands against a do-nothing server and against the storage floor, that
#     server committing and delivering each command on bare Pebble
#     (BenchmarkFastCommands), and the same binary exporting every span over
#     OTLP, for what the exporter costs.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
  echo "### TMPDIR=/dev/shm go test -run '^\$' -bench '^BenchmarkMultiDB$' (n=1, as FastDrain)" >&2
  TMPDIR=/dev/shm RIFFDB_BENCH_DATABASES=1 RIFFDB_BENCH_EVENTS=${FAST_EVENTS:-100000} \
    "$GO" test -run '^$' -timeout 15m -bench '^BenchmarkMultiDB$' -benchtime 3x ./bench/ 2>&1 |
    sed 's/^BenchmarkMultiDB\/n=1/BenchmarkFastDrain\/n=1/' | tee -a "$raw"
  #     HTTP commands through the load generator against the real binary
  #     (stores on tmpfs), against a do-nothing Go server and against the
  #     floor (nullserver -store, stores on tmpfs), alternated.
  TMPDIR=/dev/shm run -bench '^BenchmarkFastCommands$' -benchtime 3x ./bench/
else
  echo "### 12. fast storage skipped: /dev/shm is not a writable directory" >&2
fi
end=$(date +%s)

if [ -n "${BENCH_OUT:-}" ]; then
  cp "$raw" "$BENCH_OUT"
fi
echo
echo "riffdb benchmark report ($(nproc) cores, $((end - start)) s; medians of the runs above)"
"$GO" run ./bench/cmd/benchreport "$raw"

# 11. The soak's short form (SOAK=5m; SOAK=0 skips it; `make soak` runs the
#     60-minute form): about 7 minutes (calibration, 5 minutes of load at
#     half the drain rate, the drain), targets printed with their baselines.
if [ "${SOAK:-5m}" != "0" ]; then
  echo
  SOAK=${SOAK:-5m} ./scripts/soak.sh
fi
