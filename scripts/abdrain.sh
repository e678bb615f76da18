#!/usr/bin/env bash
# An A/B comparison of the fast-storage drain (BenchmarkMultiDB with one
# database on tmpfs: make bench's FastDrain) between a base commit and the
# working tree, in alternated pairs (base first in odd pairs, the tree first
# in even ones), each side running its own benchmark code. On a shared
# 2-core machine one 100,000-event drain moves by about ±10 % from one run to
# the next (docs/benchmarks.md), so an effect of a few per cent needs ten or
# more pairs, and one pair, or one profile, says little.
#
#   scripts/abdrain.sh BASE [PAIRS]          PAIRS defaults to 10
#   EVENTS=200000 scripts/abdrain.sh HEAD~1 12
#
# It prints each pair's delivered ÷ spec chain and CPU per event ÷ the
# chain's, then each side's mean and the mean of the pairs' differences
# (tree − base) with its standard error. A difference within about two
# standard errors of zero is not an effect.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${1:-}" ] || ! [[ ${2:-10} =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: scripts/abdrain.sh BASE [PAIRS], or make abdrain BASE=<commit> [PAIRS=n]" >&2
  exit 2
fi
base=$1
pairs=${2:-10}
GO=${GO:-go}
. scripts/ablib.sh
ab_check abdrain "$base"
work=$(mktemp -d)
trap 'git worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add --quiet --detach -f "$work/base" "$rev"
(cd "$work/base" && "$GO" test -c -o "$work/base.test" ./bench/)
"$GO" test -c -o "$work/tree.test" ./bench/

# run SIDE DIR: one drain with SIDE's binary in DIR's bench package; prints
# "delivered÷chain cpu÷chain's" (its standard error goes to $work/stderr).
run() {
  (cd "$2/bench" && TMPDIR=$fast RIFFDB_BENCH_DATABASES=1 RIFFDB_BENCH_EVENTS=${EVENTS:-100000} \
    "$work/$1.test" -test.run '^$' -test.bench '^BenchmarkMultiDB$' -test.benchtime 1x -test.timeout 15m 2>"$work/stderr") |
    awk '/^BenchmarkMultiDB/ {
      for (i = 2; i < NF; i++) m[$(i + 1)] = $i
      if (m["spec_chain_cpu_us/event"] > 0) printf "%.4f %.3f\n", m["delivered_vs_spec_chain"], m["cpu_us/event"] / m["spec_chain_cpu_us/event"]
    }'
}

echo "pair  base $rev (delivered÷chain, cpu÷chain's)  the working tree"
results=$work/results
: >"$results"
for i in $(seq 1 "$pairs"); do
  if [ $((i % 2)) -eq 1 ]; then
    a=$(run base "$work/base"); b=$(run tree .)
  else
    b=$(run tree .); a=$(run base "$work/base")
  fi
  if [ -z "$a" ] || [ -z "$b" ]; then
    echo "abdrain: pair $i: a benchmark run printed no result; the end of its standard error:" >&2
    tail -20 "$work/stderr" >&2
    exit 1
  fi
  printf '%4d  %-40s  %s\n' "$i" "$a" "$b"
  echo "$a $b" >>"$results"
done
awk -v rev="$rev" '
  { n++; for (k = 1; k <= 2; k++) { a[k] += $k; b[k] += $(k + 2); d = $(k + 2) - $k; s[k] += d; q[k] += d * d } }
  END {
    split("delivered ÷ spec chain|CPU per event ÷ the chain'"'"'s", name, "|")
    for (k = 1; k <= 2; k++) {
      mean = s[k] / n
      se = n > 1 ? sqrt((q[k] - n * mean * mean) / (n - 1) / n) : 0
      printf "%s: base %s mean %.3f, the tree mean %.3f; tree − base %+.3f ± %.3f (mean ± standard error over %d pairs)\n",
        name[k], rev, a[k] / n, b[k] / n, mean, se, n
    }
  }' "$results"
