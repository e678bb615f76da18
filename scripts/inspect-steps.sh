#!/usr/bin/env bash
# The stepped-reconciliation acceptance of `outbox archive inspect`: a
# 1,000,000-record archive reconciled in steps of --max-pages 256, each step
# a separate process whose peak RSS is compared with a one-shot inspect of a
# 10,000-record archive measured in the same run (bench/cmd/peakrss), and
# the last step must say "verified" with totals equal to the accounting.
# Then a cursor of that archive replayed against another archive of the same
# database must be refused. (A tampered record found by the step that reaches
# it is tested in archive and e2e.)
#
#   scripts/inspect-steps.sh [records]   (default 1000000)
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
records=${1:-1000000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 700 "$work"
db=00000000002a71018101010101010101
other=00000000002a71018101010101010102

$GO build -o "$work/bin/" ./cmd/riffdb ./bench/cmd/peakrss ./bench/cmd/mkarchive
riffdb=$work/bin/riffdb
peakrss=$work/bin/peakrss

"$work/bin/mkarchive" -records 10000 -dir "$work/small" -database "$db" >/dev/null
"$work/bin/mkarchive" -records "$records" -dir "$work/big" -database "$db" >/dev/null
"$work/bin/mkarchive" -records 1000 -dir "$work/other" -database "$db" >/dev/null

field() { sed -n "s/.*\"$1\":\"\{0,1\}\([^\",}]*\).*/\1/p" | head -1; }
peak() { sed -n 's/^peakrss: \([0-9]*\) KiB$/\1/p' | tail -1; }

"$peakrss" "$riffdb" outbox archive inspect --output json --directory "$work/small" \
  --database-id "$db" --max-pages 256 >"$work/out" 2>"$work/err"
base=$(peak <"$work/err")
[ "$(field integrity <"$work/out")" = verified ] || { cat "$work/out"; exit 1; }
echo "baseline: one-shot inspect of 10,000 records: peak RSS ${base} KiB"

after=""
step=0
maxpeak=0
start=$(date +%s.%N)
while :; do
  step=$((step + 1))
  s0=$(date +%s.%N)
  "$peakrss" "$riffdb" outbox archive inspect --output json --directory "$work/big" \
    --database-id "$db" --max-pages 256 ${after:+--after "$after"} >"$work/out" 2>"$work/err" || true
  s1=$(date +%s.%N)
  p=$(peak <"$work/err")
  maxpeak=$((p > maxpeak ? p : maxpeak))
  integrity=$(field integrity <"$work/out")
  total=$(field total_records <"$work/out")
  printf 'step %2d: %-10s total_records %8s  peak RSS %6s KiB  %.2f s\n' "$step" "$integrity" "$total" "$p" "$(awk -v a="$s0" -v b="$s1" 'BEGIN { print b - a }')"
  if [ "$step" = 1 ]; then first_cursor=$(field next_cursor <"$work/out"); fi
  [ "$integrity" = incomplete ] || break
  after=$(field next_cursor <"$work/out")
done
end=$(date +%s.%N)
count=$(field record_count <"$work/out")
echo "steps: $step, last: $integrity, total_records $total of record_count $count, $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }') s"
ratio=$(awk -v a="$maxpeak" -v b="$base" 'BEGIN { printf "%.2f", a / b }')
echo "largest step peak RSS ${maxpeak} KiB = ${ratio}x the 10,000-record one-shot baseline (acceptance: <= 1.5x)"
[ "$integrity" = verified ] && [ "$total" = "$count" ] && [ "$count" = "$records" ] || { echo FAIL; exit 1; }
awk -v r="$ratio" 'BEGIN { exit !(r <= 1.5) }' || { echo "FAIL: ratio $ratio"; exit 1; }

# A cursor replayed against another archive (same database id) is refused.
set +e
"$riffdb" outbox archive inspect --output json --directory "$work/other" --database-id "$db" \
  --max-pages 1 --after "$first_cursor" >"$work/out" 2>&1
code=$?
set -e
echo "cursor of the big archive replayed against another archive: exit $code, $(field code <"$work/out")"
[ "$code" != 0 ] || { echo FAIL; exit 1; }
echo PASS
