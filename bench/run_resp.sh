#!/usr/bin/env bash
# run_resp.sh - `make bench-resp`: the RESP listener against the text protocol, same daemon
# build, same filter parameters, same load generator (bench/loadgen, every reply checked):
# BF.MADD of 100 items vs CHECKADD of 100 keys per line, and one-key BF.ADD vs CHECKADD,
# each row on a fresh daemon. Reports keys/s, p99 and the server's CPU time per key
# (utime+stime from /proc, so the client's share of the 2 shared cores does not count),
# the RESP/text ratios (medians over BENCH_ROUNDS interleaved rounds, default 5), a
# RedisBloom BF.MADD row when a module is at hand
# (BENCH_REDISBLOOM=/path/redisbloom.so; skipped otherwise), and redis-benchmark's BF.ADD
# figure. Knobs (environment): BENCH_KEYS, BENCH_BATCH, BENCH_CONNS, BENCH_SECONDS.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh

KEYS=${BENCH_KEYS:-4000000}         # distinct keys per row
BATCH=${BENCH_BATCH:-100}           # keys per request in the batched rows
CONNS=${BENCH_CONNS:-4}
DEPTH=${BENCH_DEPTH:-64}            # requests in flight per connection, one-key rows
BATCH_DEPTH=${BENCH_BATCH_DEPTH:-8} # requests in flight per connection, batched rows
CAPACITY=${BENCH_CAPACITY:-1000000}
ERROR=${BENCH_ERROR:-0.01}
ROW_SECONDS=${BENCH_SECONDS:-25}    # bound per row
LOADGEN=${LOADGEN:-build/rel/bench/loadgen}
BLOOMD=${BLOOMD:-build/bloomd}
TICK=$(getconf CLK_TCK)

for bin in "$LOADGEN" "$BLOOMD"; do
    [ -x "$bin" ] || { echo "run_resp.sh: $bin missing: run 'make bench-resp'" >&2; exit 2; }
done

TMP=$(mktemp -d /tmp/bloomd-bench-resp.XXXXXX)
PID=
cleanup() { stop_pid "$PID" 5; PID=; }
trap 'cleanup; rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM

# start: a fresh daemon with the text and RESP listeners; sets PID, TPORT, RPORT.
start() {
    local dir="$TMP/d$1.round${ROUND:-0}"
    mkdir -p "$dir"
    TPORT=$(free_port)
    RPORT=$(free_port)
    "$BLOOMD" --bind 127.0.0.1 --port "$TPORT" --redis-port "$RPORT" --data-dir "$dir" \
        --durability snapshot --snapshot-interval 0 2>"$dir/log" &
    PID=$!
    wait_ready "$PID" "$dir/log"
}

# resp_cmd PORT ARGS...: sends one RESP command, prints the first reply line.
resp_cmd() {
    local port=$1 a req line
    shift
    req="*$#\r\n"
    for a in "$@"; do req+="\$${#a}\r\n$a\r\n"; done
    exec 3<>"/dev/tcp/127.0.0.1/$port"
    printf "$req" >&3
    IFS= read -r -t 5 line <&3 || true
    exec 3>&-
    printf '%s\n' "${line%$'\r'}"
}

ROWS=()
ROUND=0
# row LABEL PORTVAR LOADGEN-ARGS...: loadgen against the fresh daemon, server CPU around it.
row() {
    local label=$1 portvar=$2 out rc=0 t0 t1
    shift 2
    t0=$(cpu_ticks "$PID")
    out=$("$LOADGEN" --port "${!portvar}" --keys "$KEYS" --conns "$CONNS" \
        --duration "$ROW_SECONDS" "$@") || rc=$?
    t1=$(cpu_ticks "$PID")
    printf '%s\n' "$out" | grep '^#' >&2 || true
    local res
    res=$(printf '%s\n' "$out" | grep '^result ' || true)
    [ "$rc" -eq 0 ] && [ -n "$res" ] || echo "run_resp.sh: $label: loadgen failed (exit $rc)" >&2
    ROWS+=("$label|$ROUND|$res cpu_ticks=$((t1 - t0)) rc=$rc")
}

MODULE=${BENCH_REDISBLOOM:-}
if [ -n "$MODULE" ] && { [ ! -r "$MODULE" ] || ! command -v redis-server >/dev/null; }; then
    echo "run_resp.sh: BENCH_REDISBLOOM=$MODULE unreadable or no redis-server: row skipped" >&2
    MODULE=
fi

# The rows of one round, text and RESP alternating, each on a fresh daemon; the ratios are
# taken within a round, and their median over the rounds is reported (one run of each row
# lasts about a second here: a single run's ratio swings with whatever else is running).
ROUNDS=${BENCH_ROUNDS:-5}
for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
    echo "== round $ROUND of $ROUNDS: text CHECKADD $BATCH keys/line" >&2
    start 0
    row "text CHECKADD $BATCH keys/line" TPORT --proto bloomd --command CHECKADD \
        --batch "$BATCH" --depth "$BATCH_DEPTH" --name t --create "capacity=$CAPACITY error=$ERROR"
    cleanup

    echo "== round $ROUND of $ROUNDS: RESP BF.MADD $BATCH items" >&2
    start 1
    [ "$(resp_cmd "$RPORT" BF.RESERVE r "$ERROR" "$CAPACITY")" = "+OK" ] ||
        { echo "run_resp.sh: BF.RESERVE failed" >&2; exit 1; }
    row "RESP BF.MADD $BATCH items" RPORT --proto redis --command BF.MADD --batch "$BATCH" \
        --depth "$BATCH_DEPTH" --name r
    cleanup

    echo "== round $ROUND of $ROUNDS: text CHECKADD 1 key, pipelined" >&2
    start 2
    row "text CHECKADD 1 key, pipelined" TPORT --proto bloomd --command CHECKADD --batch 1 \
        --depth "$DEPTH" --name t --create "capacity=$CAPACITY error=$ERROR"
    cleanup

    echo "== round $ROUND of $ROUNDS: RESP BF.ADD 1 item, pipelined" >&2
    start 3
    resp_cmd "$RPORT" BF.RESERVE r "$ERROR" "$CAPACITY" >/dev/null
    row "RESP BF.ADD 1 item, pipelined" RPORT --proto redis --command BF.ADD --batch 1 \
        --depth "$DEPTH" --name r
    cleanup

    if [ -n "$MODULE" ]; then
        echo "== round $ROUND of $ROUNDS: RedisBloom BF.MADD $BATCH items" >&2
        RPORT=$(free_port)
        redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no \
            --loadmodule "$MODULE" >"$TMP/redis.log" 2>&1 &
        PID=$!
        sleep 1
        resp_cmd "$RPORT" BF.RESERVE r "$ERROR" "$CAPACITY" >/dev/null
        row "RedisBloom BF.MADD $BATCH items" RPORT --proto redis --command BF.MADD \
            --batch "$BATCH" --depth "$BATCH_DEPTH" --name r
        cleanup
    fi
done
[ -n "$MODULE" ] || echo "== RedisBloom row skipped: set BENCH_REDISBLOOM to a redisbloom.so (none here)" >&2

BENCHMARK=
if command -v redis-benchmark >/dev/null; then
    echo "== redis-benchmark -n 200000 -P 16 BF.ADD" >&2
    start 4
    BENCHMARK=$(timeout 120 redis-benchmark -p "$RPORT" -n 200000 -P 16 -q \
        BF.ADD f __rand_int__ 2>&1 | tr '\r' '\n' | grep -E 'requests per second' | tail -n 1 || true)
    cleanup
fi

echo
echo "bench-resp: $KEYS distinct 16-byte keys, 0.2 repeats, $CONNS connections;" \
    "filters capacity=$CAPACITY error=$ERROR; $ROUNDS rounds, medians;" \
    "$(nproc) CPUs shared by client and server"
printf '%s\n' "${ROWS[@]}" | awk -v tick="$TICK" '
function median(a, n,    i, j, t) {
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n == 0 ? 0 : (n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2)
}
# ratio_of(A, B): the median over rounds of row B / row A (keys/s, or CPU if cpu is set).
function ratio_of(A, B, usecpu,    r, k, x) {
    k = 0; delete x
    for (r = 1; r <= rounds; r++)
        if (((A, r) in kps) && ((B, r) in kps) && kps[A, r] > 0 && kps[B, r] > 0)
            x[++k] = usecpu ? (cpu[A, r] > 0 ? cpu[B, r] / cpu[A, r] : 0) : kps[B, r] / kps[A, r]
    return median(x, k)
}
{
    split($0, lr, "|"); lab = lr[1]; r = lr[2] + 0; if (r > rounds) rounds = r
    if (!(lab in seen)) { seen[lab] = ++n; label[n] = lab }
    i = seen[lab]
    m = split(lr[3], kv, " "); delete f
    for (j = 1; j <= m; j++) { p = index(kv[j], "="); if (p) f[substr(kv[j], 1, p - 1)] = substr(kv[j], p + 1) }
    if (!("keys_per_s" in f) || f["rc"] != 0) { failed[i] = 1; next }
    kps[i, r] = f["keys_per_s"]; cpu[i, r] = f["ops"] > 0 ? f["cpu_ticks"] / tick * 1e6 / f["ops"] : 0
    p99[i, r] = f["p99_us"]; fp[i, r] = f["fp_rate"] * 100
}
END {
    printf "%-34s %12s %10s %14s %8s\n", "row (median of rounds)", "keys/s", "p99 us", "server us/key", "fp %"
    for (i = 1; i <= n; i++) {
        k = 0; delete a; delete b; delete c; delete d
        for (r = 1; r <= rounds; r++) if ((i, r) in kps) { k++; a[k] = kps[i, r]; b[k] = p99[i, r]; c[k] = cpu[i, r]; d[k] = fp[i, r] }
        if (k == 0 || failed[i]) { printf "%-34s %12s\n", label[i], "FAILED"; continue }
        printf "%-34s %12.0f %10.1f %14.3f %8.3f\n", label[i], median(a, k), median(b, k), median(c, k), median(d, k)
    }
    printf "BF.MADD/CHECKADD (batched): throughput %.2fx, server CPU per key %.2fx\n", ratio_of(1, 2, 0), ratio_of(1, 2, 1)
    printf "BF.ADD/CHECKADD (one key): throughput %.2fx, server CPU per key %.2fx\n", ratio_of(3, 4, 0), ratio_of(3, 4, 1)
    if (n >= 5)
        printf "bloomd BF.MADD / RedisBloom BF.MADD: throughput %.2fx; RedisBloom server CPU per key %.2fx bloomd'"'"'s\n", ratio_of(5, 2, 0), ratio_of(2, 5, 1)
    printf "RATIO %.4f\n", ratio_of(1, 2, 0)
    if (n >= 5)
        printf "RB_RATIO %.4f\n", ratio_of(5, 2, 0)
}' | tee "$TMP/table"
[ -n "$BENCHMARK" ] && echo "redis-benchmark -P 16 BF.ADD f __rand_int__: $BENCHMARK"
ratio=$(sed -n 's/^RATIO //p' "$TMP/table")
target "RESP BF.MADD / text CHECKADD keys/s" "$ratio" ">=" 0.9
rb_ratio=$(sed -n 's/^RB_RATIO //p' "$TMP/table")
[ -z "$rb_ratio" ] || target "bloomd BF.MADD / RedisBloom BF.MADD keys/s" "$rb_ratio" ">=" 3
bench_exit
