#!/usr/bin/env bash
# Where a database's delivery time goes, per delivered event, when N
# databases drain at once: BenchmarkMultiDB's drain at one N, run with an
# execution trace (RIFFDB_DRAIN_TRACE), and the trace read with the Go
# toolchain's own tools (go tool trace -pprof, go tool pprof).
#
#   scripts/drain-chain.sh          N = 4, 3 runs
#   N=16 RUNS=5 scripts/drain-chain.sh
#
# Each database's worker is one chain of steps: every event is one synced
# archive transaction, every run of up to 16 events one synced claim on the
# primary (made while the run before it is delivered, after that run's first
# archive transaction). Per event and per database, the script prints the chain's length
# (N / delivered events/s) and its parts, measured from the workers' own
# waits in the trace:
#   archive_txn     the worker waiting for its archive transaction
#                   (Store.Accept's storage call, on its own goroutine)
#     of it fsync   the archive WALs' fdatasync
#   claim           the worker waiting for a claim: one made inline
#                   (primary.Claim, the first run of a page) or one made
#                   while the run before was delivered (pass.awaitClaim)
#     fsync         the primaries' WAL fdatasync (claims, completions),
#                   most of it now off the chain, beside the archive's
#   worker          the rest: the worker's own work between those waits
#   sched           every goroutine's wait for a CPU once runnable (the
#                   trace's scheduler latency), all goroutines summed, per
#                   event: the handoffs along the chain (worker → the
#                   transaction's goroutine → Pebble's WAL flusher and back)
#                   and the background's
#     of it riffdb  the part the worker and its transaction goroutine wake
#                   each other for (goexit: Runner.Go, and the outcome sent
#                   back)
# next to the same run's baselines: one raw writer's period
# (N / raw events/s), one bare Pebble store's synced commit
# (N / pebble events/s), and the spec's chain per event with nothing of the
# worker's own (N / spec_chain events/s: bare stores running only the
# synced claim per run of 16, made while the run before it is delivered,
# and each event's synced archive commit, see
# specChains in bench/). The tracer adds its own cost: the rates here are
# a little lower than without it.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
N=${N:-4}
RUNS=${RUNS:-3}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$GO" test -c -o "$work/bench.test" ./bench

# in_seconds turns pprof's durations ("1.5s", "283.51ms", "12us") into seconds.
in_seconds() {
	sed 's/\([0-9.]*\)\([mun]*s\)/\1 \2/' |
		awk '{f = 1; if ($2 == "ms") f = 1e-3; if ($2 == "us") f = 1e-6; if ($2 == "ns") f = 1e-9; print $1 * f}'
}

# seconds prints the total of a delay profile ("accounting for 1.5s")
# restricted by the pprof options given, in seconds.
seconds() {
	local profile=$1
	shift
	"$GO" tool pprof -top "$@" "$profile" 2>/dev/null |
		sed -n 's/.*accounting for \([0-9.]*[mun]*s\).*/\1/p' | head -1 | in_seconds
}

# node prints one function's cumulative delay in a profile, in seconds.
node() {
	local profile=$1 fn=$2
	shift 2
	"$GO" tool pprof -top "$@" "$profile" 2>/dev/null | awk -v fn="$fn" '$6 == fn {print $4}' | in_seconds
}

printf '%-4s %9s %9s %9s %7s | %8s %8s %8s %8s %8s %8s | %8s %8s | %8s %8s %8s %7s\n' \
	run deliv/s raw/s pebble/s ratio chain arch_txn fsync claim fsync worker sched riffdb raw_per pebble spec spec/raw
for i in $(seq 1 "$RUNS"); do
	d=$work/r$i
	mkdir -p "$d"
	out=$(cd bench && RIFFDB_BENCH_DATABASES=$N RIFFDB_DRAIN_TRACE=$d "$work/bench.test" -test.run '^$' \
		-test.bench "^BenchmarkMultiDB\$/^n=$N\$" -test.benchtime 1x 2>&1) || {
		echo "$out" >&2
		exit 1
	}
	metric() { echo "$out" | grep -o "[0-9.e+-]* $1" | head -1 | cut -d' ' -f1; }
	del=$(metric delivered_events/s)
	raw=$(metric raw_events/s)
	peb=$(metric pebble_events/s)
	spec=$(metric spec_chain_events/s)
	"$GO" tool trace -pprof=sync "$d/drain-n$N.trace" >"$d/sync.pprof"
	"$GO" tool trace -pprof=syscall "$d/drain-n$N.trace" >"$d/syscall.pprof"
	"$GO" tool trace -pprof=sched "$d/drain-n$N.trace" >"$d/sched.pprof"
	# The worker's own goroutine (a claim made ahead runs on another).
	focus='outbox.\(\*pass\).page'
	txn=$(node "$d/sync.pprof" github.com/riffdb/riffdb/archive.guardedTxn -focus="$focus")
	inline=$(node "$d/sync.pprof" 'github.com/riffdb/riffdb/primary.(*DB).Claim' -focus="$focus")
	ahead=$(node "$d/sync.pprof" 'github.com/riffdb/riffdb/outbox.(*pass).awaitClaim' -focus="$focus")
	claim=$(awk -v a="${inline:-0}" -v b="${ahead:-0}" 'BEGIN {print a + b}')
	# The archive opens its store through Pebble's errorfs (its fence); the
	# primary does not.
	afs=$(seconds "$d/syscall.pprof" -focus='errorfs.\(\*errorFile\).SyncData')
	pfs=$(seconds "$d/syscall.pprof" -focus='unix.Fdatasync' -ignore=errorfs)
	sched=$(seconds "$d/sched.pprof")
	wake=$(node "$d/sched.pprof" 'github.com/riffdb/riffdb/internal/store/goexit.(*Runner).Go')
	back=$(node "$d/sched.pprof" runtime.chansend1 -focus='goexit\.call')
	handoff=$(awk -v a="${wake:-0}" -v b="${back:-0}" 'BEGIN {print a + b}')
	events=$(($(metric events/db) * N))
	awk -v i="$i" -v n="$N" -v ev="$events" -v del="$del" -v raw="$raw" -v peb="$peb" -v spec="$spec" \
		-v txn="${txn:-0}" -v claim="${claim:-0}" -v afs="${afs:-0}" -v pfs="${pfs:-0}" \
		-v sched="${sched:-0}" -v handoff="${handoff:-0}" 'BEGIN {
		us = 1e6 / ev
		chain = n / del * 1e6
		printf "%-4s %9.0f %9.0f %9.0f %7.2f | %8.0f %8.0f %8.0f %8.0f %8.0f %8.0f | %8.1f %8.1f | %8.0f %8.0f %8.0f %7.2f\n", i, del, raw, peb, del / raw,
			chain, txn * us, afs * us, claim * us, pfs * us, chain - (txn + claim) * us, sched * 1e6 / ev, handoff * 1e6 / ev,
			n / raw * 1e6, n / peb * 1e6, n / spec * 1e6, spec / raw
	}'
done
echo "(per event and database, µs, but sched and riffdb per event; ratio is delivered / raw, the target's; spec/raw the spec's chain's)"
