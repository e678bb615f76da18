#!/usr/bin/env bash
# Puts the damage matrix's table (written by TestDamageMatrix to
# $RIFFDB_DAMAGE_REPORT) into its section of the reliability report, between
# the section's markers, after the section's first paragraph.
#
#   scripts/reliability-report.sh docs/reliability.md bin/reliability/damage-matrix.md
set -euo pipefail
report=$1
table=$2
if [[ ! -s $table ]]; then
	echo "reliability-report: no damage matrix table in $table; section left as it was" >&2
	exit 0
fi
begin='<!-- reliability:damage-matrix:begin -->'
end='<!-- reliability:damage-matrix:end -->'
grep -qF "$begin" "$report" || { echo "reliability-report: $report has no damage matrix section" >&2; exit 1; }
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
awk -v table="$table" -v begin="$begin" -v end="$end" -v when="$(date -u '+%Y-%m-%d %H:%M')" '
	$0 == begin {
		print
		print "Produced by `make reliability` from TestDamageMatrix (e2e/damage_test.go), which writes its"
		print "table to $RIFFDB_DAMAGE_REPORT; scripts/reliability-report.sh puts it here. Run " when " UTC."
		print ""
		while ((getline line < table) > 0) print line
		skip = 1
		next
	}
	$0 == end { skip = 0 }
	!skip
' "$report" >"$tmp"
cat "$tmp" >"$report"
