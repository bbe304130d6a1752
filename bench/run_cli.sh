#!/usr/bin/env bash
# run_cli.sh - `make bench-cli`: bloomd-cli's bulk add against the no-install way, nc piping
# ready-made ADD lines (the same keys, the same keys per line), into one fresh bloomd.
# Rounds alternate which goes first; each run gets a fresh filter of the same parameters.
# Prints every run's seconds, the medians, keys/s, and the ratio of the medians (bloomd-cli's
# time / nc's); the target is <= 1.43 (bloomd-cli at least 0.7x nc's speed), else MISSED.
# Knobs (environment): BENCH_CLI_KEYS (2000000), BENCH_CLI_ROUNDS (7), BENCH_CLI_BATCH (500).
# Stops the server it started, even on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh

KEYS=${BENCH_CLI_KEYS:-2000000}
ROUNDS=${BENCH_CLI_ROUNDS:-7}
BATCH=${BENCH_CLI_BATCH:-500}
TARGET=1.43
BLOOMD=${BLOOMD:-build/bloomd}
CLI=${BLOOMD_CLI:-build/bloomd-cli}
CREATE_OPTS="capacity=$KEYS error=0.001"

for bin in "$BLOOMD" "$CLI"; do
    [ -x "$bin" ] || { echo "run_cli.sh: $bin missing: run 'make bench-cli'" >&2; exit 2; }
done
command -v nc >/dev/null || { echo "run_cli.sh: nc missing: scripts/deps.sh bench" >&2; exit 2; }

TMP=$(mktemp -d /tmp/bloomd-bench-cli.XXXXXX)
PID=
trap 'stop_pid "$PID" 10; rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM

# The keys (URL-like, 30-40 bytes) and the same keys as ADD lines of BATCH keys, then QUIT
# so that the server closes and nc exits once every reply is in.
awk -v n="$KEYS" 'BEGIN { for (i = 0; i < n; i++) printf "https://site%d.example/page/%d\n", i % 997, i }' \
    >"$TMP/keys.txt"
awk -v b="$BATCH" '{ if ((NR - 1) % b == 0) { if (NR > 1) printf "\r\n"; printf "ADD nc" }
                     printf " %s", $0 } END { printf "\r\nQUIT\r\n" }' "$TMP/keys.txt" >"$TMP/add.txt"
LINES=$(((KEYS + BATCH - 1) / BATCH))

PORT=$(free_port)
mkdir -p "$TMP/data"
"$BLOOMD" --bind 127.0.0.1 --port "$PORT" --http-port 0 --data-dir "$TMP/data" \
    --snapshot-interval 0 2>"$TMP/log" &
PID=$!
for ((i = 0; i < 100; i++)); do
    "$CLI" -p "$PORT" --timeout 1 VERSION >/dev/null 2>&1 && break
    kill -0 "$PID" 2>/dev/null || { cat "$TMP/log" >&2; exit 1; }
    sleep 0.1
done

cmd() { "$CLI" -p "$PORT" "$@" >/dev/null; }
fresh() { "$CLI" -p "$PORT" DROP "$1" >/dev/null || true; cmd CREATE "$1" $CREATE_OPTS; }
now() { date +%s.%N; }
calc() { awk "BEGIN { print $1 }"; }

# run_nc / run_cli: one timed run each, on a fresh filter; print seconds. Each checks its
# result: every ADD line answered (nc), the summary line (bloomd-cli), every key in.
run_nc() {
    fresh nc
    local t0 t1 got
    t0=$(now)
    nc 127.0.0.1 "$PORT" <"$TMP/add.txt" >"$TMP/nc.out"
    t1=$(now)
    got=$(grep -c '^ADDED ' "$TMP/nc.out" || true)
    [ "$got" -eq "$LINES" ] || { echo "run_cli.sh: nc got $got of $LINES replies" >&2; exit 1; }
    calc "$t1 - $t0"
}
run_cli() {
    fresh cl
    local t0 t1
    t0=$(now)
    "$CLI" -p "$PORT" --batch "$BATCH" add cl "$TMP/keys.txt" 2>"$TMP/cli.err"
    t1=$(now)
    grep -q "^$KEYS keys, " "$TMP/cli.err" || { cat "$TMP/cli.err" >&2; exit 1; }
    calc "$t1 - $t0"
}

NC_T=()
CLI_T=()
for ((r = 0; r < ROUNDS; r++)); do
    if ((r % 2 == 0)); then
        NC_T+=("$(run_nc)")
        CLI_T+=("$(run_cli)")
    else
        CLI_T+=("$(run_cli)")
        NC_T+=("$(run_nc)")
    fi
done
# Every key of the last bloomd-cli run is present (check --absent prints none).
absent=$("$CLI" -p "$PORT" -q check cl --absent "$TMP/keys.txt" | wc -l)
[ "$absent" -eq 0 ] || { echo "run_cli.sh: $absent keys absent after bloomd-cli add" >&2; exit 1; }

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
NC_M=$(median "${NC_T[@]}")
CLI_M=$(median "${CLI_T[@]}")
RATIO=$(calc "$CLI_M / $NC_M")

echo "bulk add of $KEYS keys, $BATCH keys per ADD line, $ROUNDS rounds interleaved (seconds):"
printf '%-30s' "run"
for ((r = 1; r <= ROUNDS; r++)); do printf '%8s' "$r"; done
printf '%10s %12s\n' median "keys/s"
row() {
    local name=$1 med=$2
    shift 2
    printf '%-30s' "$name"
    local t
    for t in "$@"; do printf '%8.3f' "$t"; done
    printf '%10.3f %12.0f\n' "$med" "$(calc "$KEYS / $med")"
}
row "nc < ready-made ADD lines" "$NC_M" "${NC_T[@]}"
row "bloomd-cli add FILE" "$CLI_M" "${CLI_T[@]}"
verdict=OK
if [ "$(calc "($RATIO > $TARGET) ? 1 : 0")" -eq 1 ]; then verdict=MISSED; fi
printf 'time ratio bloomd-cli / nc: %.3f (target <= %s, i.e. >= 0.7x the speed): %s\n' \
    "$RATIO" "$TARGET" "$verdict"
