#!/usr/bin/env bash
# run_tls.sh - `make bench-tls`: CHECKADD, 100 keys a line, pipelined, over TLS as a ratio
# to plain TCP on the same daemon (target >= BENCH_TLS_TARGET, 0.7; a miss prints MISSED and
# exits 1 unless BENCH_STRICT=0). Driver: build/rel/bench/loadgen, the same
# workload on both ports (4 connections x depth 8, KEYS distinct keys, 20% repeats, a fresh
# filter per row; --tls adds only the TLS layer); rows alternate plain, TLS, plain, ...,
# each round's TLS row is divided by its plain row, and the median of those ratios is
# judged, so drift on a shared machine hits both rows of a round alike. Stops every
# process it started.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh

ROUNDS=${BENCH_TLS_ROUNDS:-7}
KEYS=${BENCH_TLS_KEYS:-8000000} # a row lasts about a second
BLOOMD=${BLOOMD:-build/bloomd}
LOADGEN=${LOADGEN:-build/rel/bench/loadgen}
PYTHON=${PYTHON:-/usr/bin/python3}
TARGET=${BENCH_TLS_TARGET:-0.7}
for b in "$BLOOMD" "$LOADGEN"; do
    [ -x "$b" ] || { echo "run_tls.sh: $b missing: run 'make bench-tls'" >&2; exit 2; }
done
command -v openssl >/dev/null || { echo "run_tls.sh: needs openssl(1)" >&2; exit 2; }

TMP=$(mktemp -d /tmp/bloomd-bench-tls.XXXXXX)
PID=
cleanup() {
    stop_pid "$PID"
    PID=
}
trap 'cleanup; rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$TMP/key.pem" \
    -out "$TMP/cert.pem" -days 1 -subj /CN=127.0.0.1 2>/dev/null
PORT=$(free_port)
TLS_PORT=$(free_port)
"$BLOOMD" --port "$PORT" --tls-port "$TLS_PORT" --tls-cert-file "$TMP/cert.pem" \
    --tls-key-file "$TMP/key.pem" --data-dir "$TMP/data" --snapshot-interval 0 \
    --max-memory 2G >"$TMP/log" 2>&1 &
PID=$!
for _ in $(seq 1 200); do
    grep -q ":$TLS_PORT (TLS bloomd" "$TMP/log" 2>/dev/null && break
    sleep 0.05
done
grep -q ":$TLS_PORT (TLS bloomd" "$TMP/log" || { cat "$TMP/log" >&2; exit 1; }

# The daemon's CPU time (cpu_ticks, all threads) is in clock ticks.
HZ=$(getconf CLK_TCK)
# One row on a fresh filter (loadgen checks every reply): prints "<keys/s> <keys per daemon
# CPU-second>". The second is what the server costs; on a shared machine it moves far less
# than the first, which also carries every other process's load.
row() { # name port [--tls]
    local name=$1 port=$2 c0 c1
    shift 2
    c0=$(cpu_ticks "$PID")
    "$LOADGEN" --port "$port" "$@" --conns 4 --depth 8 --batch 100 --keys "$KEYS" \
        --name "$name" --create "capacity=$((2 * KEYS))" --timeout 30 >"$TMP/row" ||
        { cat "$TMP/row" >&2; exit 1; }
    c1=$(cpu_ticks "$PID")
    grep -q ' complete=1' "$TMP/row" || { echo "run_tls.sh: $name incomplete" >&2; exit 1; }
    sed -n 's/^result .* ops=\([0-9]*\) .* keys_per_s=\([0-9]*\) .*/\2 \1/p' "$TMP/row" |
        awk -v t=$((c1 - c0)) -v hz="$HZ" '{ printf "%d %.0f\n", $1, (t > 0 ? $2 * hz / t : 0) }'
}
printf 'CHECKADD, 100 keys/line, 4 conns x depth 8, %d distinct keys a row (loadgen)\n' "$KEYS"
printf '%-6s %14s %14s %6s %16s %16s %6s\n' round "plain keys/s" "TLS keys/s" ratio \
    "plain keys/cpu-s" "TLS keys/cpu-s" ratio
plain=() tls=() plain_cpu=() tls_cpu=() ratios=() ratios_cpu=()
for r in $(seq 1 "$ROUNDS"); do
    read -r p pc < <(row "p$r" "$PORT")
    read -r t tc < <(row "t$r" "$TLS_PORT" --tls)
    [ -n "$p" ] && [ -n "$t" ] || exit 1
    awk -v r="$r" -v p="$p" -v t="$t" -v pc="$pc" -v tc="$tc" 'BEGIN {
        printf "%-6d %14d %14d %6.2f %16d %16d %6.2f\n", r, p, t, t / p, pc, tc, tc / pc }'
    plain+=("$p") tls+=("$t") plain_cpu+=("$pc") tls_cpu+=("$tc")
    ratios+=("$(awk -v p="$p" -v t="$t" 'BEGIN { printf "%.4f", (p > 0 ? t / p : 0) }')")
    ratios_cpu+=("$(awk -v p="$pc" -v t="$tc" 'BEGIN { printf "%.4f", (p > 0 ? t / p : 0) }')")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
verdict() { # what plain tls unit ratio
    awk -v w="$1" -v p="$2" -v t="$3" -v u="$4" 'BEGIN {
        printf "%s: median plain %.0f %s, TLS %.0f %s\n", w, p, u, t, u }'
    target "  ratio TLS / plain (median of the rounds)" "$(printf '%.3f' "$5")" ">=" "$TARGET"
}
verdict "CHECKADD 100 keys/line" "$(median "${plain[@]}")" "$(median "${tls[@]}")" keys/s \
    "$(median "${ratios[@]}")"
verdict "  per daemon CPU-second" "$(median "${plain_cpu[@]}")" "$(median "${tls_cpu[@]}")" \
    keys/cpu-s "$(median "${ratios_cpu[@]}")"
bench_exit
