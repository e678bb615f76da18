#!/usr/bin/env bash
# The soak: the real riffdb binary under the traced load generator at half
# its measured drain rate, recorded every 10 s (RSS, goroutines, descriptors,
# compaction debt, commit→archived p50/p99) into bench/results/soak-*.csv and
# a plot soak-*.svg, then each target printed with its value and baseline.
#
#   scripts/soak.sh             60 minutes
#   SOAK=5m scripts/soak.sh     the short form (windows scaled by 5/60)
#
# Extra arguments go to the soak tool (bench/cmd/soak), e.g. -keep, or -rate 300
# to offer 300 events/s without calibrating (to compare two settings at one load).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}

mkdir -p bin
"$GO" build -o bin/riffdb ./cmd/riffdb
"$GO" build -o bin/soak ./bench/cmd/soak
exec bin/soak -riffdb bin/riffdb -duration "${SOAK:-60m}" -out bench/results "$@"
