#!/usr/bin/env bash
# run_fair.sh - `make bench-fair`: issue 16's fairness load on the release build. 200
# clients pipeline 1 MiB CHECK lines without reading their replies while one polite client
# times CHECK round trips (bench/fairload.py); prints its p50/p99/max and the loop's longest
# callback (STATS loop_max_stall_us). BASELINE=<another bloomd binary> adds its row, for a
# ratio in the same run. Knobs: FAIR_CLIENTS, FAIR_SECONDS, FAIR_LINE_BYTES.
set -euo pipefail
cd "$(dirname "$0")/.."

BLOOMD=${BLOOMD:-build/bloomd}
[ -x "$BLOOMD" ] || { echo "run_fair.sh: $BLOOMD missing: run 'make bench-fair'" >&2; exit 2; }
args=(--clients "${FAIR_CLIENTS:-200}" --seconds "${FAIR_SECONDS:-10}"
      --line-bytes "${FAIR_LINE_BYTES:-1048576}")
echo "this build ($BLOOMD):"
/usr/bin/python3 bench/fairload.py --bin "$BLOOMD" "${args[@]}"
if [ -n "${BASELINE:-}" ]; then
    echo "baseline ($BASELINE):"
    /usr/bin/python3 bench/fairload.py --bin "$BASELINE" "${args[@]}"
fi
