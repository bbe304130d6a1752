#!/usr/bin/env bash
# run_net.sh - `make bench-net`: one dedup workload (distinct keys + repeats, pipelined, over
# loopback) against bloomd, Redis SADD and memcached add, each on a fresh server with a temp
# dir, every reply checked by bench/loadgen. Prints one table: keys/s, p99, bytes per key
# (server RSS growth / distinct keys), false positives, and bloomd's ratio to each rival.
# Knobs (environment): see bench/README.md. Stops every server it started, even on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh

KEYS=${BENCH_KEYS:-10000000}        # distinct keys per row
KEY_LEN=${BENCH_KEY_LEN:-16}        # bytes per key
REPEAT=${BENCH_REPEAT:-0.2}         # fraction of operations that repeat a key
CONNS=${BENCH_CONNS:-4}
DEPTH=${BENCH_DEPTH:-64}            # requests in flight per connection, one-key rows
BATCH=${BENCH_BATCH:-100}           # keys per request in the batched rows
BATCH_DEPTH=${BENCH_BATCH_DEPTH:-8} # requests in flight per connection, batched rows
CAPACITY=${BENCH_CAPACITY:-1000000} # bloomd filter: first-stage capacity ...
ERROR=${BENCH_ERROR:-0.01}          # ... and promised false-positive rate
RIGHT_SIZED=${BENCH_RIGHT_SIZED:-1} # also a bloomd row with capacity = KEYS
BUDGET=${BENCH_SECONDS:-140}        # wall-clock budget for all rows (a row cut short is marked)
LOADGEN=${LOADGEN:-build/rel/bench/loadgen}
BLOOMD=${BLOOMD:-build/bloomd}

for bin in "$LOADGEN" "$BLOOMD"; do
    [ -x "$bin" ] || { echo "run_net.sh: $bin missing: run 'make bench-net'" >&2; exit 2; }
done
for tool in redis-server memcached; do
    command -v "$tool" >/dev/null || { echo "run_net.sh: $tool missing: scripts/deps.sh bench" >&2; exit 2; }
done

TMP=$(mktemp -d /tmp/bloomd-bench.XXXXXX)
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do stop_pid "$pid" 5; done
    PIDS=()
}
trap 'cleanup; rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM


# wait_port PORT PID: until PORT accepts connections (10 s), failing if PID died.
wait_port() {
    local i
    for ((i = 0; i < 100; i++)); do
        kill -0 "$2" 2>/dev/null || return 1
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# journal_bytes PORT: STATS journal_bytes of the bloomd on PORT (bytes its journal took,
# framing included); empty if it does not answer within 5 s.
journal_bytes() {
    local line
    exec 3<>"/dev/tcp/127.0.0.1/$1" || return 0
    printf 'STATS\r\n' >&3
    while IFS= read -r -t 5 line <&3; do
        line=${line%$'\r'}
        case $line in
        "STAT journal_bytes "*) echo "${line#STAT journal_bytes }" ;;
        END) break ;;
        esac
    done
    exec 3>&-
}

# Empty when the process is gone (a server that died mid-row: loadgen fails that row).
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || true; }

# Server starters: set PID and PORT, or return 1 with the log on stderr.
# BLOOMD_ARGS: extra flags of the next bloomd (durability); PROTO_RE: which listener's port.
BLOOMD_ARGS=()
PROTO_RE="bloomd"
start_bloomd() {
    local dir="$TMP/bloomd.$1" i
    mkdir -p "$dir"
    : >"$dir/log" # before the child opens it: the port scan below reads it at once
    "$BLOOMD" --bind 127.0.0.1 --port 0 --data-dir "$dir" --snapshot-interval 0 \
        "${BLOOMD_ARGS[@]}" 2>"$dir/log" &
    PID=$!
    PIDS+=("$PID")
    PORT=
    for ((i = 0; i < 100; i++)); do
        PORT=$(sed -n "s/.*listening on 127\.0\.0\.1:\([0-9]*\) ($PROTO_RE protocol).*/\1/p" \
            "$dir/log" | head -n 1)
        [ -n "$PORT" ] && break
        kill -0 "$PID" 2>/dev/null || break
        sleep 0.1
    done
    [ -n "$PORT" ] && wait_port "$PORT" "$PID" && return 0
    cat "$dir/log" >&2
    return 1
}

start_bloomd_snapshot() { BLOOMD_ARGS=(--durability snapshot); start_bloomd "$@"; }
start_bloomd_everysec() { BLOOMD_ARGS=(--durability everysec); start_bloomd "$@"; }
start_bloomd_always() { BLOOMD_ARGS=(--durability always); start_bloomd "$@"; }
start_bloomd_mc() {
    BLOOMD_ARGS=(--durability snapshot --memcache-port "$(free_port)")
    PROTO_RE="memcached"
    start_bloomd "$@"
    local rc=$?
    PROTO_RE="bloomd"
    return $rc
}

# Two bloomd memcached listeners behind Debian's nutcracker (twemproxy, ketama): PORT is
# the proxy's. Skipped (returns 1) when nutcracker is not installed.
start_nutcracker() {
    local bin dir="$TMP/nutcracker.$1" servers="" i mcport
    bin=$(command -v nutcracker || echo /usr/sbin/nutcracker)
    [ -x "$bin" ] || { echo "run_net.sh: nutcracker missing: scripts/deps.sh bench" >&2; return 1; }
    mkdir -p "$dir"
    for i in 0 1; do
        mcport=$(free_port)
        BLOOMD_ARGS=(--durability snapshot --memcache-port "$mcport")
        start_bloomd "$1.$i" || return 1
        wait_port "$mcport" "$PID" || return 1
        servers="$servers    - 127.0.0.1:$mcport:1 bloomd-$i
"
    done
    PORT=$(free_port)
    printf 'bench:\n  listen: 127.0.0.1:%s\n  hash: fnv1a_64\n  distribution: ketama\n  auto_eject_hosts: false\n  timeout: 5000\n  server_connections: 1\n  preconnect: true\n  servers:\n%s' \
        "$PORT" "$servers" >"$dir/conf.yml"
    "$bin" -c "$dir/conf.yml" -s "$(free_port)" >"$dir/log" 2>&1 &
    PID=$!
    PIDS+=("$PID")
    wait_port "$PORT" "$PID" && return 0
    cat "$dir/log" >&2
    return 1
}

# REDIS_AOF: Redis's appendonly settings of the next server.
REDIS_AOF=(--appendonly no)
start_redis() {
    local dir="$TMP/redis.$1"
    mkdir -p "$dir"
    PORT=$(free_port)
    redis-server --port "$PORT" --bind 127.0.0.1 --save '' "${REDIS_AOF[@]}" --dir "$dir" \
        >"$dir/log" 2>&1 &
    PID=$!
    PIDS+=("$PID")
    wait_port "$PORT" "$PID" && return 0
    cat "$dir/log" >&2
    return 1
}

start_memcached() {
    local dir="$TMP/memcached.$1" user=()
    mkdir -p "$dir"
    PORT=$(free_port)
    # ~100 bytes per 16-byte key with a 1-byte value; room for KEYS so nothing is evicted.
    local mb=$(((KEYS * 160) / 1000000 + 64))
    [ "$(id -u)" -eq 0 ] && user=(-u nobody)
    (cd "$dir" && exec memcached "${user[@]}" -l 127.0.0.1 -p "$PORT" -U 0 -m "$mb" \
        >"$dir/log" 2>&1) &
    PID=$!
    PIDS+=("$PID")
    wait_port "$PORT" "$PID" && return 0
    cat "$dir/log" >&2
    return 1
}

LOAD_START=$(cut -d' ' -f1 /proc/loadavg)
ROWS=()      # "label|result line" per row; result empty when the row failed
NROWS=$((13 + (RIGHT_SIZED == 1)))
FAILED=0

# row LABEL SERVER LOADGEN-ARGS...: fresh server, RSS before/after, one loadgen run.
row() {
    local label=$1 server=$2
    shift 2
    # Each row gets an equal share of what is left, so fast rows leave time to slow ones.
    local bound=$(((BUDGET - SECONDS) / (NROWS - ${#ROWS[@]})))
    [ "$bound" -ge 5 ] || bound=5
    echo "== $label (at most ${bound}s)" >&2
    if ! "start_$server" "${#ROWS[@]}"; then
        echo "run_net.sh: $server did not start" >&2
        ROWS+=("$label|")
        FAILED=1
        cleanup
        return
    fi
    local before after out rc=0
    before=$(rss_kb "$PID")
    out=$("$LOADGEN" --port "$PORT" --keys "$KEYS" --key-len "$KEY_LEN" --repeat "$REPEAT" --conns "$CONNS" \
        --duration "$bound" "$@") || rc=$?
    after=$(rss_kb "$PID")
    # What the durable rows wrote: bloomd's journal, Redis's append-only file.
    local disk=
    case $server in
    bloomd_everysec | bloomd_always) disk=$(journal_bytes "$PORT") ;;
    redis) [ "${REDIS_AOF[1]}" = yes ] && disk=$(du -sb "$TMP/redis.${#ROWS[@]}" | cut -f1) ;;
    esac
    cleanup
    printf '%s\n' "$out" | grep '^#' >&2 || true
    local res
    res=$(printf '%s\n' "$out" | grep '^result ' || true)
    if [ "$rc" -ne 0 ] || [ -z "$res" ]; then
        echo "run_net.sh: $label: loadgen failed (exit $rc)" >&2
        FAILED=1
    fi
    ROWS+=("$label|$res rss_before_kb=$before rss_after_kb=$after disk_bytes=${disk:-0} rc=$rc")
}

CREATE="capacity=$CAPACITY error=$ERROR"
# The first rows are snapshots only (as bloomd 0.1.0 ran); the durability rows follow.
row "bloomd CHECKADD 1 key, pipelined" bloomd_snapshot --proto bloomd --command CHECKADD \
    --batch 1 --depth "$DEPTH" --create "$CREATE"
row "bloomd CHECKADD $BATCH keys/line" bloomd_snapshot --proto bloomd --command CHECKADD \
    --batch "$BATCH" --depth "$BATCH_DEPTH" --create "$CREATE"
if [ "$RIGHT_SIZED" = 1 ]; then
    row "bloomd CHECKADD $BATCH keys/line, sized" bloomd_snapshot --proto bloomd \
        --command CHECKADD --batch "$BATCH" --depth "$BATCH_DEPTH" \
        --create "capacity=$KEYS error=$ERROR"
fi
row "bloomd $BATCH keys/line, everysec" bloomd_everysec --proto bloomd --command CHECKADD \
    --batch "$BATCH" --depth "$BATCH_DEPTH" --create "$CREATE"
row "bloomd $BATCH keys/line, always" bloomd_always --proto bloomd --command CHECKADD \
    --batch "$BATCH" --depth "$BATCH_DEPTH" --create "$CREATE"
row "bloomd $BATCH keys/line, window" bloomd_snapshot --proto bloomd --command CHECKADD \
    --batch "$BATCH" --depth "$BATCH_DEPTH" \
    --create "window=1h generations=4 capacity=$KEYS error=$ERROR"
row "bloomd memcached add, pipelined" bloomd_mc --proto memcached --approximate --depth "$DEPTH"
row "bloomd memcached add, nutcracker x2" nutcracker --proto memcached --approximate \
    --depth "$DEPTH"
row "Redis SADD 1 member, pipelined" redis --proto redis --batch 1 --depth "$DEPTH"
row "Redis SADD $BATCH members" redis --proto redis --batch "$BATCH" --depth "$BATCH_DEPTH"
REDIS_AOF=(--appendonly yes --appendfsync everysec)
row "Redis SADD $BATCH, aof everysec" redis --proto redis --batch "$BATCH" --depth "$BATCH_DEPTH"
REDIS_AOF=(--appendonly yes --appendfsync always)
row "Redis SADD $BATCH, aof always" redis --proto redis --batch "$BATCH" --depth "$BATCH_DEPTH"
REDIS_AOF=(--appendonly no)
row "memcached add, pipelined" memcached --proto memcached --depth "$DEPTH"

# The table; ratios compare like with like (one-key rows with bloomd's one-key row,
# batched rows with bloomd's first batched row).
echo
echo "bench-net: $KEYS distinct $KEY_LEN-byte keys, $REPEAT repeats, $CONNS connections;" \
    "bloomd filter capacity=$CAPACITY error=$ERROR"
echo "$(nproc) CPUs shared by client and servers; load average $LOAD_START at start," \
    "$(cut -d' ' -f1 /proc/loadavg) at end"
printf '%s\n' "${ROWS[@]}" | awk -v keys="$KEYS" '{ line[++n] = $0 }
END {
    for (i = 1; i <= n; i++) {
        split(line[i], lr, "|"); label[i] = lr[1]; ok[i] = 0
        m = split(lr[2], kv, " ")
        delete f
        for (j = 1; j <= m; j++) { p = index(kv[j], "="); if (p) f[substr(kv[j], 1, p - 1)] = substr(kv[j], p + 1) }
        if (!("keys_per_s" in f)) continue
        ok[i] = 1; kps[i] = f["keys_per_s"]; p99[i] = f["p99_us"]
        distinct = f["expected_new"] > 0 ? f["expected_new"] : keys
        bpk[i] = (f["rss_after_kb"] - f["rss_before_kb"]) * 1024 / distinct
        fp[i] = f["fp"]; rate[i] = f["fp_rate"] * 100
        bad[i] = (f["rc"] != 0) ? " FAILED" : (f["complete"] != 1 ? " CUT SHORT" : "")
        batched[i] = f["batch"] > 1
        if (f["proto"] == "bloomd" && !(batched[i] in ref)) ref[batched[i]] = i
    }
    printf "%-38s %10s %9s %10s %20s %9s %9s\n", "system / mode", "keys/s", "p99 us", "bytes/key", \
        "false positives", "speed", "memory"
    for (i = 1; i <= n; i++) {
        if (!ok[i]) { printf "%-38s FAILED (see above)\n", label[i]; continue }
        sp = "-"; mem = "-"
        if (label[i] !~ /^bloomd/ && (batched[i] in ref)) {
            b = ref[batched[i]]
            sp = ratio(kps[b] / kps[i])
            if (bpk[b] > 0) mem = ratio(bpk[i] / bpk[b])
        }
        printf "%-38s %10.0f %9.0f %10.2f %20s %9s %9s%s\n", label[i], kps[i], p99[i], bpk[i], \
            sprintf("%d (%.3f%%)", fp[i], rate[i]), sp, mem, bad[i]
    }
    print "speed = bloomd keys/s / this row (one-key rows vs bloomd one-key, batched vs batched);"
    print "memory = this row bytes per key / bloomd bytes per key. Shared CPUs: read ratios, not absolutes."
}
function ratio(x) { return x >= 10 ? sprintf("%.0fx", x) : sprintf("%.2fx", x) }'
# Durability and protocol ratios, from the same run.
printf '%s\n' "${ROWS[@]}" | awk -v batch="$BATCH" -v keys="$KEYS" '{
    split($0, lr, "|"); v = lr[2]; sub(/.*keys_per_s=/, "", v); sub(/ .*/, "", v)
    if (lr[2] != "") k[lr[1]] = v + 0
    b = lr[2]; sub(/.*disk_bytes=/, "", b); sub(/ .*/, "", b)
    e = lr[2]; sub(/.*expected_new=/, "", e); sub(/ .*/, "", e)
    if (lr[2] ~ /expected_new=/ && e + 0 > 0) keys_row = e + 0; else keys_row = keys
    if (b + 0 > 0) { d_s = d_s sprintf(" %s %.1f bytes;", lr[1], b / keys_row); d_n++ } }
END {
    base = k["bloomd CHECKADD " batch " keys/line"]
    if (base > 0) {
        printf "durability: everysec %.2fx, always %.2fx of snapshot (100 keys/line)\n",
            k["bloomd " batch " keys/line, everysec"] / base, k["bloomd " batch " keys/line, always"] / base
    }
    r = k["Redis SADD " batch " members"]
    if (r > 0)
        printf "Redis: aof everysec %.2fx, always %.2fx of no aof\n",
            k["Redis SADD " batch ", aof everysec"] / r, k["Redis SADD " batch ", aof always"] / r
    m = k["memcached add, pipelined"]
    if (m > 0)
        printf "memcached protocol: bloomd add %.2fx the real memcached add\n",
            k["bloomd memcached add, pipelined"] / m
    d = k["bloomd memcached add, pipelined"]
    if (d > 0)
        printf "twemproxy: 2 bloomd behind nutcracker %.2fx one bloomd direct\n",
            k["bloomd memcached add, nutcracker x2"] / d
    if (d_n > 0)
        printf "on disk per distinct key:%s\n", d_s
    s = k["bloomd CHECKADD " batch " keys/line, sized"]
    if (s > 0)
        printf "window: window=1h generations=4 sized for the keys %.2fx the sized plain filter\n",
            k["bloomd " batch " keys/line, window"] / s
}'
exit "$FAILED"
