#!/usr/bin/env bash
# An A/B comparison of the server's CPU per command between a base commit
# and the working tree, both servers running at the same time. On a shared
# 2-core machine two runs of BenchmarkFastCommands a minute apart differ by
# more than a few per cent (docs/benchmarks.md), so an alternation of single
# runs cannot resolve a change of that size; two servers measured over the
# same window share whatever the machine does meanwhile.
#
#   scripts/abcommands.sh BASE [ROUNDS]       ROUNDS defaults to 10
#
# Each round starts both builds' servers (the default development
# configuration, on tmpfs, on ports 7420 and 7421, metrics 9464 and 9465),
# drives each with its own `riffdb loadtest` of CLIENTS (16) closed-loop
# clients for SECS (12) seconds, and reads each server's CPU from
# /proc/PID/stat over the same window. The builds swap ports and start
# order every round: the server started second does better. Both are
# driven by the working tree's load generator. It prints each
# round's CPU per command and commands of both, then the mean difference
# (tree − base) with its standard error and the mean ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${1:-}" ] || ! [[ ${2:-10} =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: scripts/abcommands.sh BASE [ROUNDS], or make abcommands BASE=<commit> [ROUNDS=n]" >&2
  exit 2
fi
base=$1
rounds=${2:-10}
clients=${CLIENTS:-16}
secs=${SECS:-12}
GO=${GO:-go}
. scripts/ablib.sh
ab_check abcommands "$base"
work=$(mktemp -d)
data=$(mktemp -d "$fast/abcommands.XXXXXX")
pids=()
# stop PID...: interrupts the servers (started in a subshell, so not this
# shell's children) and waits until they are gone.
stop() {
  kill -INT "$@" 2>/dev/null || true
  for p in "$@"; do
    while kill -0 "$p" 2>/dev/null; do sleep 0.1; done
  done
}
cleanup() {
  [ ${#pids[@]} -eq 0 ] || stop "${pids[@]}"
  git worktree remove --force "$work/base" >/dev/null 2>&1 || true
  rm -rf "$work" "$data"
}
trap cleanup EXIT
git worktree add --quiet --detach -f "$work/base" "$rev"
bin_base=$work/base-riffdb
bin_tree=$work/tree-riffdb
(cd "$work/base" && "$GO" build -o "$bin_base" ./cmd/riffdb)
"$GO" build -o "$bin_tree" ./cmd/riffdb

# serve BIN NAME PORT MPORT: starts BIN on a fresh data directory and prints its pid.
serve() {
  local dir=$data/$2
  rm -rf "$dir" "$dir.log"
  "$1" server run --dev --dev-dir "$dir" >"$dir.init" 2>&1 &
  local p=$!
  for _ in $(seq 100); do grep -q '"riffdb ready"' "$dir.init" && break; sleep 0.1; done
  stop "$p"
  sed "s#{{ROOT}}#$dir#g; s#127.0.0.1:7420#127.0.0.1:$3#; s#127.0.0.1:9464#127.0.0.1:$4#" config/dev.toml >"$dir/riffdb.toml"
  "$1" server run --config "$dir/riffdb.toml" >"$dir.log" 2>&1 &
  echo $!
}

# ready NAME: waits until the server of NAME is ready.
ready() {
  for _ in $(seq 100); do grep -q '"riffdb ready"' "$data/$1.log" && return 0; sleep 0.1; done
  echo "abcommands: the $1 server did not start; its log:" >&2
  tail -20 "$data/$1.log" >&2
  exit 1
}

cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }

echo "round  base $rev (µs/command, commands)  the working tree"
results=$work/results
: >"$results"
for i in $(seq 1 "$rounds"); do
  if [ $((i % 2)) -eq 1 ]; then
    pb=$(serve "$bin_base" base 7420 9464); pt=$(serve "$bin_tree" tree 7421 9465); portb=7420; portt=7421
  else
    pt=$(serve "$bin_tree" tree 7420 9464); pb=$(serve "$bin_base" base 7421 9465); portt=7420; portb=7421
  fi
  pids=("$pb" "$pt")
  ready base; ready tree
  for w in 2 "$secs"; do # a warm-up, then the measured window
    [ "$w" = "$secs" ] && { cb0=$(cpu "$pb"); ct0=$(cpu "$pt"); }
    "$bin_tree" loadtest --token-file "$data/base/dev-token" --address "http://127.0.0.1:$portb" -c "$clients" \
      --duration "${w}s" -n 1000000000 >"$work/base.lt" 2>&1 &
    lb=$!
    "$bin_tree" loadtest --token-file "$data/tree/dev-token" --address "http://127.0.0.1:$portt" -c "$clients" \
      --duration "${w}s" -n 1000000000 >"$work/tree.lt" 2>&1 &
    lt=$!
    wait "$lb" "$lt"
  done
  cb1=$(cpu "$pb"); ct1=$(cpu "$pt")
  nb=$(grep -m1 -oE 'requests=[0-9]+' "$work/base.lt" | cut -d= -f2)
  nt=$(grep -m1 -oE 'requests=[0-9]+' "$work/tree.lt" | cut -d= -f2)
  stop "$pb" "$pt"
  pids=()
  if [ -z "$nb" ] || [ -z "$nt" ]; then
    echo "abcommands: round $i: a load generator reported no requests" >&2
    exit 1
  fi
  tick=$(getconf CLK_TCK)
  a=$(awk -v c=$((cb1 - cb0)) -v n="$nb" -v t="$tick" 'BEGIN {printf "%.1f %d", c / t * 1e6 / n, n}')
  b=$(awk -v c=$((ct1 - ct0)) -v n="$nt" -v t="$tick" 'BEGIN {printf "%.1f %d", c / t * 1e6 / n, n}')
  printf '%5d  %-38s  %s\n' "$i" "$a" "$b"
  echo "$a $b" >>"$results"
done
awk -v rev="$rev" '
  { n++; a += $1; b += $3; d = $3 - $1; s += d; q += d * d; r += $3 / $1 }
  END {
    mean = s / n
    se = n > 1 ? sqrt((q - n * mean * mean) / (n - 1) / n) : 0
    printf "server CPU per command, µs: base %s mean %.1f, the tree mean %.1f; tree − base %+.1f ± %.1f (mean ± standard error over %d rounds); mean ratio %.3f\n",
      rev, a / n, b / n, mean, se, n, r / n
  }' "$results"
