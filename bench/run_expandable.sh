#!/usr/bin/env bash
# run_expandable.sh - `make bench-expandable`: the expandable kind against blocked through
# the daemon (issue 26's rows), one interleaved run. Each row is a fresh daemon and one
# filter at 1% (BENCH_ERROR), filled by bench/loadgen with CHECKADD of 100 distinct keys per
# line over 4 connections (every reply checked: no false negative), then 1M never-added
# keys checked for the false-positive rate. Per row: keys/s, the server's CPU per key
# (utime+stime from /proc), INFO's bytes per key, RSS per key (the daemon's RSS after the
# fill minus before the CREATE) and the rate. Rows:
#   grown 10x    capacity 1M, 10M keys   (BENCH_ROUNDS rounds, default 3; medians)
#   sized        capacity 10M, 10M keys  (one round)
#   grown 100x   capacity 1M, 100M keys  (one round; BENCH_BIG=0 leaves it out)
# and issue 26's targets, each printed with its figure (MISSED when missed; exit 1 then,
# unless BENCH_STRICT=0).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh

ERROR=${BENCH_ERROR:-0.01}
ROUNDS=${BENCH_ROUNDS:-3}
BIG=${BENCH_BIG:-1}
FRESH=1000000
LOADGEN=${LOADGEN:-build/rel/bench/loadgen}
BLOOMD=${BLOOMD:-build/bloomd}
TICK=$(getconf CLK_TCK)
PAGE=$(getconf PAGESIZE)

for bin in "$LOADGEN" "$BLOOMD"; do
    [ -x "$bin" ] || { echo "run_expandable.sh: $bin missing: run 'make bench-expandable'" >&2; exit 2; }
done

TMP=$(mktemp -d /tmp/bloomd-bench-exp.XXXXXX)
PID=
cleanup() { stop_pid "$PID" 5; PID=; }
trap 'cleanup; rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM

rss_bytes() { awk -v p="$PAGE" '{ print $2 * p }' "/proc/$1/statm"; }

# start N: a fresh daemon (no journal, no snapshots); sets PID and PORT.
start() {
    local dir="$TMP/d$1"
    mkdir -p "$dir"
    PORT=$(free_port)
    "$BLOOMD" --bind 127.0.0.1 --port "$PORT" --data-dir "$dir" --durability snapshot \
        --snapshot-interval 0 2>"$dir/log" &
    PID=$!
    wait_ready "$PID" "$dir/log"
}

# info_bytes NAME: the filter's bytes from INFO.
info_bytes() {
    local line
    exec 3<>"/dev/tcp/127.0.0.1/$PORT"
    printf 'INFO %s\r\n' "$1" >&3
    while IFS= read -r -t 10 line <&3; do
        line=${line%$'\r'}
        case $line in
        "STAT bytes "*) echo "${line#STAT bytes }" ;;
        END | CLIENT_ERROR* | SERVER_ERROR*) break ;;
        esac
    done
    exec 3>&-
}

# kv KEY LINE: the value of KEY= in a loadgen result line.
kv() { printf '%s\n' "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"; }

ROWS=()
# row LABEL KIND CAPACITY KEYS ROUND
row() {
    local label=$1 kind=$2 cap=$3 keys=$4 round=$5 out fp rc=0 t0 t1 r0 r1 bytes
    echo "== round $round: $label ($kind)" >&2
    start "$round.$kind.$keys.$cap"
    r0=$(rss_bytes "$PID")
    t0=$(cpu_ticks "$PID")
    out=$("$LOADGEN" --port "$PORT" --keys "$keys" --conns 4 --depth 8 --batch 100 --repeat 0 \
        --duration 600 --name f --create "capacity=$cap error=$ERROR kind=$kind" |
        grep '^result ') || rc=$?
    t1=$(cpu_ticks "$PID")
    r1=$(rss_bytes "$PID")
    bytes=$(info_bytes f)
    fp=$("$LOADGEN" --port "$PORT" --command CHECK --first 4000000000 --keys "$FRESH" --conns 4 \
        --depth 8 --batch 100 --repeat 0 --duration 300 --name f | grep '^result ') || rc=$?
    cleanup
    if [ "$rc" -ne 0 ] || [ "$(kv complete "$out")" != 1 ]; then
        echo "run_expandable.sh: $label ($kind): loadgen failed (exit $rc)" >&2
        ROWS+=("$label|$kind|$round|FAILED")
        return
    fi
    ROWS+=("$label|$kind|$round|$(kv keys_per_s "$out")|$(awk -v t=$((t1 - t0)) -v k="$keys" \
        -v hz="$TICK" 'BEGIN { printf "%.4f", t / hz * 1e6 / k }')|$(awk -v b="$bytes" \
        -v k="$keys" 'BEGIN { printf "%.4f", b / k }')|$(awk -v a="$r0" -v b="$r1" -v k="$keys" \
        'BEGIN { printf "%.4f", (b - a) / k }')|$(awk -v r="$(kv fp_rate "$fp")" \
        'BEGIN { printf "%.4f", r * 100 }')")
}

for ((r = 1; r <= ROUNDS; r++)); do
    row "grown 10x" blocked 1000000 10000000 "$r"
    row "grown 10x" expandable 1000000 10000000 "$r"
done
row "sized 10M" blocked 10000000 10000000 1
row "sized 10M" expandable 10000000 10000000 1
if [ "$BIG" != 0 ]; then
    row "grown 100x" blocked 1000000 100000000 1
    row "grown 100x" expandable 1000000 100000000 1
fi

echo
echo "bench-expandable: CHECKADD of distinct 16-byte keys, 100 per line, 4 connections," \
    "error=$ERROR; FP on $FRESH never-added keys; $(nproc) CPUs shared by client and server"
printf '%s\n' "${ROWS[@]}" | awk -F'|' -v rounds="$ROUNDS" '
function median(a, n,    i, j, t) {
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n == 0 ? 0 : (n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2)
}
# med(L, K, F): the median over rounds of field F of row L/K.
function med(L, K, F,    r, n, x) {
    n = 0; delete x
    for (r = 1; r <= rounds; r++) if ((L, K, r) in val) { split(val[L, K, r], v, "|"); x[++n] = v[F] }
    return median(x, n)
}
# ratio(L, A, B): the median over rounds of keys/s of B / A (both in the same round).
function ratio(L, A, B,    r, n, x, va, vb) {
    n = 0; delete x
    for (r = 1; r <= rounds; r++)
        if (((L, A, r) in val) && ((L, B, r) in val)) {
            split(val[L, A, r], va, "|"); split(val[L, B, r], vb, "|"); x[++n] = vb[1] / va[1]
        }
    return n ? sprintf("%.3f", median(x, n)) : "none"
}
{
    if ($4 == "FAILED") { failed[$1, $2] = 1; if (!(($1, $2) in seen)) { seen[$1, $2] = 1; order[++no] = $1 SUBSEP $2 }; next }
    val[$1, $2, $3] = $4 "|" $5 "|" $6 "|" $7 "|" $8
    if (!(($1, $2) in seen)) { seen[$1, $2] = 1; order[++no] = $1 SUBSEP $2 }
}
END {
    printf "%-12s %-11s %12s %14s %10s %10s %8s\n", "row", "kind", "keys/s", "server us/key", "INFO B/key", "RSS B/key", "FP %"
    for (i = 1; i <= no; i++) {
        split(order[i], lk, SUBSEP)
        if (failed[lk[1], lk[2]]) { printf "%-12s %-11s %12s\n", lk[1], lk[2], "FAILED"; continue }
        printf "%-12s %-11s %12.0f %14.3f %10.3f %10.3f %8.3f\n", lk[1], lk[2], med(lk[1], lk[2], 1),
            med(lk[1], lk[2], 2), med(lk[1], lk[2], 3), med(lk[1], lk[2], 4), med(lk[1], lk[2], 5)
    }
    g = "grown 10x"; s = "sized 10M"; h = "grown 100x"; e = "expandable"
    printf "T_B10 %.3f\nT_R10 %.3f\nT_FP10 %.3f\n", med(g, e, 3), med(g, e, 4), med(g, e, 5)
    printf "T_BS %.3f\nT_RS %.3f\nT_FPS %.3f\n", med(s, e, 3), med(s, e, 4), med(s, e, 5)
    printf "T_S10 %s\n", ratio(g, "blocked", e)
    if ((h, e, 1) in val) {
        printf "T_B100 %.3f\nT_R100 %.3f\nT_FP100 %.3f\n", med(h, e, 3), med(h, e, 4), med(h, e, 5)
        printf "T_S100 %s\n", ratio(h, "blocked", e)
        printf "T_OWN %.3f\n", med(h, e, 1) / med(g, e, 1)
    }
}' | tee "$TMP/table" | grep -v '^T_'
t() { sed -n "s/^$1 //p" "$TMP/table"; }
target "grown 10x: INFO bytes/key" "$(t T_B10)" "<=" 1.6
target "grown 10x: RSS bytes/key" "$(t T_R10)" "<=" 1.6
target "grown 10x: FP % on fresh keys" "$(t T_FP10)" "<=" 1
target "sized 10M: INFO bytes/key" "$(t T_BS)" "<=" 1.3
target "sized 10M: RSS bytes/key" "$(t T_RS)" "<=" 1.3
target "sized 10M: FP % on fresh keys" "$(t T_FPS)" "<=" 1
target "grown 10x: keys/s vs blocked" "$(t T_S10)" ">=" 1.0
if [ "$BIG" != 0 ]; then
    target "grown 100x: INFO bytes/key" "$(t T_B100)" "<=" 1.6
    target "grown 100x: RSS bytes/key" "$(t T_R100)" "<=" 1.6
    target "grown 100x: FP % on fresh keys" "$(t T_FP100)" "<=" 1
    target "grown 100x: keys/s vs blocked" "$(t T_S100)" ">=" 1.5
    target "expandable keys/s, 100M / 10M" "$(t T_OWN)" ">=" 0.8
fi
bench_exit
