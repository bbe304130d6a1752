#!/usr/bin/env bash
# run_ab.sh - A/B two bloomd binaries on one loadgen workload, interleaved (A, B, A, B, ...)
# so that a shared machine's drift hits both alike; each run on a fresh server and data dir.
# Prints per round each one's keys/s and server CPU ns per key (all threads, from
# /proc/PID/task/*/schedstat: less noisy than keys/s on a shared machine), the ratios B/A,
# then their medians.
#   bench/run_ab.sh OLD NEW [loadgen args...]
# Knobs (environment): AB_ROUNDS (5), AB_ARGS_A / AB_ARGS_B (extra daemon flags per binary,
# e.g. AB_ARGS_B="--durability snapshot" for a build that has a journal), AB_LISTENER
# (bloomd; memcached: each daemon also gets --memcache-port on a free port and loadgen
# drives that listener), LOADGEN. Default workload: CHECKADD 100 keys/line, depth 8,
# 4 connections, 3M keys.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh

[ $# -ge 2 ] || { echo "usage: bench/run_ab.sh A-BINARY B-BINARY [loadgen args...]" >&2; exit 2; }
A=$1 B=$2
shift 2
ROUNDS=${AB_ROUNDS:-5}
LOADGEN=${LOADGEN:-build/rel/bench/loadgen}
LISTENER=${AB_LISTENER:-bloomd}
read -r -a ARGS_A <<<"${AB_ARGS_A:-}"
read -r -a ARGS_B <<<"${AB_ARGS_B:-}"
WORK=("$@")
[ ${#WORK[@]} -gt 0 ] || WORK=(--keys 3000000 --batch 100 --depth 8 --conns 4 --command CHECKADD
    --create "capacity=1000000 error=0.01" --duration 30)
for bin in "$A" "$B" "$LOADGEN"; do
    [ -x "$bin" ] || { echo "run_ab.sh: $bin missing" >&2; exit 2; }
done

TMP=$(mktemp -d /tmp/bloomd-ab.XXXXXX)
PID=
stop() {
    stop_pid "$PID"
    PID=
}
trap 'stop; rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM


# one BIN ARGS...: prints keys/s of one fresh run (empty on failure).
one() {
    local bin=$1 dir port="" i mc=()
    shift
    dir=$(mktemp -d "$TMP/run.XXXXXX")
    [ "$LISTENER" = memcached ] && mc=(--memcache-port "$(free_port)")
    "$bin" --bind 127.0.0.1 --port 0 --data-dir "$dir" --snapshot-interval 0 "$@" "${mc[@]}" \
        2>"$dir/log" &
    PID=$!
    for ((i = 0; i < 100; i++)); do
        # 0.1.0 logs "listening on ADDR:PORT" with no protocol: that is its bloomd port.
        port=$(sed -n -e "s/.*listening on 127\.0\.0\.1:\([0-9]*\) ($LISTENER protocol).*/\1/p" \
            -e "s/.*listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p" "$dir/log" | head -n 1)
        [ "$LISTENER" = bloomd ] || port=$(sed -n \
            "s/.*listening on 127\.0\.0\.1:\([0-9]*\) ($LISTENER protocol).*/\1/p" "$dir/log")
        [ -n "$port" ] && break
        sleep 0.1
    done
    [ -n "$port" ] || { cat "$dir/log" >&2; stop; return 0; }
    local out cpu0 cpu1 kps
    cpu0=$(cpu_ns "$PID")
    out=$("$LOADGEN" --port "$port" "${WORK[@]}" || true)
    cpu1=$(cpu_ns "$PID")
    stop
    kps=$(printf '%s\n' "$out" | sed -n 's/^result .*keys_per_s=\([0-9.]*\).*/\1/p')
    local ops
    ops=$(printf '%s\n' "$out" | sed -n 's/^result .* ops=\([0-9]*\).*/\1/p')
    [ -n "$kps" ] && awk -v k="$kps" -v c=$((cpu1 - cpu0)) -v o="${ops:-0}" \
        'BEGIN { printf "%s %.1f\n", k, (o > 0 ? c / o : 0) }'
}

# Server CPU time so far, every thread, in ns (/proc/PID/task/*/schedstat's first field).
# %.0f, not %d: mawk's %d saturates at 2^31 - 1 (2.1 s), which capped every longer run.
cpu_ns() {
    cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%.0f", s }'
}

echo "A: $A ${ARGS_A[*]}"
echo "B: $B ${ARGS_B[*]}"
echo "workload: ${WORK[*]}; load average $(cut -d' ' -f1 /proc/loadavg)"
printf '%-6s %12s %12s %8s %10s %10s %8s\n' round "A keys/s" "B keys/s" "B/A" "A ns/key" \
    "B ns/key" "B/A cpu"
RATIOS=()
CPUS=()
for ((r = 1; r <= ROUNDS; r++)); do
    # Alternate which goes first, so neither always gets the warmer (or colder) slot.
    if ((r % 2)); then
        a=$(one "$A" "${ARGS_A[@]}")
        b=$(one "$B" "${ARGS_B[@]}")
    else
        b=$(one "$B" "${ARGS_B[@]}")
        a=$(one "$A" "${ARGS_A[@]}")
    fi
    read -r ak ac <<<"${a:-0 0}"
    read -r bk bc <<<"${b:-0 0}"
    line=$(awk -v ak="$ak" -v bk="$bk" -v ac="$ac" -v bc="$bc" 'BEGIN {
        printf "%.0f %.0f %s %.0f %.0f %s", ak, bk, (ak > 0 ? sprintf("%.3f", bk / ak) : "-"), ac, bc,
            (ac > 0 ? sprintf("%.3f", bc / ac) : "-") }')
    read -r -a col <<<"$line"
    RATIOS+=("${col[2]}")
    CPUS+=("${col[5]}")
    printf '%-6s %12s %12s %8s %10s %10s %8s\n' "$r" "${col[@]}"
done
# median NAME VALUES...: the median, min and max of the numeric values.
median() {
    local name=$1
    shift
    printf '%s\n' "$@" | grep -v '^-$' | sort -n |
        awk -v name="$name" '{ v[++n] = $1 } END { if (n) printf "median %s %.3f (min %.3f, max %.3f)\n",
            name, (n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2), v[1], v[n] }'
}
median "B/A keys/s" "${RATIOS[@]}"
median "B/A server cpu per key" "${CPUS[@]}"
echo "load average now $(cut -d' ' -f1 /proc/loadavg)"
