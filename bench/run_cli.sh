#!/usr/bin/env bash
# run_cli.sh - `make bench-cli`: bloomd-cli's bulk modes against the no-install way, nc piping
# ready-made protocol lines (the same keys, the same keys per line), into one fresh bloomd:
# `add FILE` against ADD lines, and `dedup FILE > /dev/null` against CHECKADD lines.
# Rounds alternate which goes first; each run gets a fresh filter of the same parameters.
# Prints every run's seconds, the medians, keys/s, and the ratios of the medians (bloomd-cli's
# time / nc's); the target is <= 1.43 (bloomd-cli at least 0.7x nc's speed), else MISSED.
# Knobs (environment): BENCH_CLI_KEYS (2000000), BENCH_CLI_ROUNDS (9), BENCH_CLI_BATCH (500).
# Stops the server it started, even on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh

KEYS=${BENCH_CLI_KEYS:-2000000}
ROUNDS=${BENCH_CLI_ROUNDS:-9}
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

# The keys (URL-like, 30-40 bytes) and the same keys as ADD and CHECKADD lines of BATCH keys,
# then QUIT so that the server closes and nc exits once every reply is in.
awk -v n="$KEYS" 'BEGIN { for (i = 0; i < n; i++) printf "https://site%d.example/page/%d\n", i % 997, i }' \
    >"$TMP/keys.txt"
lines() {
    awk -v b="$BATCH" -v cmd="$1" '{ if ((NR - 1) % b == 0) { if (NR > 1) printf "\r\n"; printf "%s nc", cmd }
        printf " %s", $0 } END { printf "\r\nQUIT\r\n" }' "$TMP/keys.txt"
}
lines ADD >"$TMP/add.txt"
lines CHECKADD >"$TMP/checkadd.txt"
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

# run_nc FILE / run_cli MODE: one timed run each, on a fresh filter; print seconds. Each
# checks its result: every line answered (nc), the summary line (bloomd-cli).
run_nc() {
    fresh nc
    local t0 t1 got
    t0=$(now)
    nc 127.0.0.1 "$PORT" <"$TMP/$1" >"$TMP/nc.out"
    t1=$(now)
    got=$(wc -l <"$TMP/nc.out")
    [ "$got" -eq "$LINES" ] || { echo "run_cli.sh: nc got $got of $LINES replies" >&2; exit 1; }
    calc "$t1 - $t0"
}
run_cli() {
    fresh cl
    local t0 t1
    t0=$(now)
    "$CLI" -p "$PORT" --batch "$BATCH" "$1" cl "$TMP/keys.txt" >/dev/null 2>"$TMP/cli.err"
    t1=$(now)
    grep -q "^$KEYS keys, " "$TMP/cli.err" || { cat "$TMP/cli.err" >&2; exit 1; }
    calc "$t1 - $t0"
}

NC_T=()
CLI_T=()
NCD_T=()
DEDUP_T=()
for ((r = 0; r < ROUNDS; r++)); do
    if ((r % 2 == 0)); then
        NC_T+=("$(run_nc add.txt)")
        CLI_T+=("$(run_cli add)")
        NCD_T+=("$(run_nc checkadd.txt)")
        DEDUP_T+=("$(run_cli dedup)")
    else
        DEDUP_T+=("$(run_cli dedup)")
        NCD_T+=("$(run_nc checkadd.txt)")
        CLI_T+=("$(run_cli add)")
        NC_T+=("$(run_nc add.txt)")
    fi
done
# Every key of the last bloomd-cli run is present (check --absent prints none), and a
# second dedup of the same keys prints nothing.
absent=$("$CLI" -p "$PORT" -q check cl --absent "$TMP/keys.txt" | wc -l)
[ "$absent" -eq 0 ] || { echo "run_cli.sh: $absent keys absent after bloomd-cli" >&2; exit 1; }
again=$("$CLI" -p "$PORT" -q dedup cl "$TMP/keys.txt" | wc -l)
[ "$again" -eq 0 ] || { echo "run_cli.sh: a second dedup printed $again lines" >&2; exit 1; }

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
NC_M=$(median "${NC_T[@]}")
CLI_M=$(median "${CLI_T[@]}")
NCD_M=$(median "${NCD_T[@]}")
DEDUP_M=$(median "${DEDUP_T[@]}")

echo "bulk modes, $KEYS keys, $BATCH keys per line, $ROUNDS rounds interleaved (seconds):"
printf '%-34s' "run"
for ((r = 1; r <= ROUNDS; r++)); do printf '%7s' "$r"; done
printf '%9s %11s\n' median "keys/s"
row() {
    local name=$1 med=$2
    shift 2
    printf '%-34s' "$name"
    local t
    for t in "$@"; do printf '%7.3f' "$t"; done
    printf '%9.3f %11.0f\n' "$med" "$(calc "$KEYS / $med")"
}
row "nc < ready-made ADD lines" "$NC_M" "${NC_T[@]}"
row "bloomd-cli add FILE" "$CLI_M" "${CLI_T[@]}"
row "nc < ready-made CHECKADD lines" "$NCD_M" "${NCD_T[@]}"
row "bloomd-cli dedup FILE >/dev/null" "$DEDUP_M" "${DEDUP_T[@]}"
verdict() {
    local what=$1 ratio
    ratio=$(calc "$2 / $3")
    local v=OK
    if [ "$(calc "($ratio > $TARGET) ? 1 : 0")" -eq 1 ]; then v=MISSED; fi
    printf 'time ratio %-24s %.3f (target <= %s, i.e. >= 0.7x the speed): %s\n' "$what:" \
        "$ratio" "$TARGET" "$v"
}
verdict "bloomd-cli add / nc" "$CLI_M" "$NC_M"
verdict "bloomd-cli dedup / nc" "$DEDUP_M" "$NCD_M"
