#!/usr/bin/env bash
# run_repl.sh - what a replica costs its primary, measured in one run, rounds interleaved:
#   alone     the primary with no replica (the baseline)
#   async     the same with one replica attached: the primary's server CPU per key, and
#             the replica's lag (records behind, polled every 20 ms) while it keeps up
#   acks      --min-replica-acks 1: keys/s against async
# Targets (issue 24): CPU per key with a replica <= 1.3x alone; acks >= 0.5x async keys/s;
# the lag stays bounded (its maximum is printed). Each run on fresh servers and data dirs.
#   bench/run_repl.sh [loadgen args...]
# Knobs: REPL_ROUNDS (3), BLOOMD (build/bloomd), LOADGEN (build/rel/bench/loadgen).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh

ROUNDS=${REPL_ROUNDS:-3}
BLOOMD=${BLOOMD:-build/bloomd}
LOADGEN=${LOADGEN:-build/rel/bench/loadgen}
WORK=("$@")
[ ${#WORK[@]} -gt 0 ] || WORK=(--keys 3000000 --batch 100 --depth 8 --conns 4 --command CHECKADD
    --create "capacity=1000000 error=0.01" --duration 15)
for bin in "$BLOOMD" "$LOADGEN"; do
    [ -x "$bin" ] || { echo "run_repl.sh: $bin missing" >&2; exit 2; }
done

TMP=$(mktemp -d /tmp/bloomd-repl.XXXXXX)
PRIMARY= REPLICA= POLLER=
stop_all() {
    stop_pid "$POLLER" 5
    stop_pid "$REPLICA"
    stop_pid "$PRIMARY"
    POLLER= REPLICA= PRIMARY=
}
trap 'stop_all; rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM

# %.0f, not %d: mawk's %d saturates at 2^31 - 1 (2.1 s), which capped every longer run.
cpu_ns() {
    cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%.0f", s }'
}

# start VAR PORT ARGS...: a daemon on PORT with a fresh data dir; its pid into VAR.
start() {
    local var=$1 port=$2 dir i
    shift 2
    dir=$(mktemp -d "$TMP/d.XXXXXX")
    "$BLOOMD" --bind 127.0.0.1 --port "$port" --data-dir "$dir" --snapshot-interval 0 \
        --durability snapshot "$@" 2>"$dir/log" &
    printf -v "$var" '%s' "$!"
    for ((i = 0; i < 100; i++)); do
        grep -q "listening on" "$dir/log" 2>/dev/null && return 0
        sleep 0.1
    done
    cat "$dir/log" >&2
    return 1
}

# role PORT: the ROLE line of the daemon on PORT.
role() {
    python3 - "$1" <<'EOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(b"ROLE\r\n")
print(s.makefile().readline().strip())
EOF
}

wait_up() {
    local i
    for ((i = 0; i < 200; i++)); do
        case "$(role "$1")" in *" up "*) return 0 ;; esac
        sleep 0.05
    done
    echo "run_repl.sh: the replica on $1 never came up" >&2
    return 1
}

# poll PPORT RPORT OUT: until killed, every 20 ms, the largest primary - replica offset.
poll() {
    python3 - "$1" "$2" "$3" <<'EOF' &
import signal, socket, sys, time
def conn(port):
    s = socket.create_connection(("127.0.0.1", int(port)), timeout=5)
    return s, s.makefile("rb")
p, pf = conn(sys.argv[1])
r, rf = conn(sys.argv[2])
worst = 0
def done(*_):
    open(sys.argv[3], "w").write("%d\n" % worst)
    sys.exit(0)
signal.signal(signal.SIGTERM, done)
end = time.monotonic() + 600
while time.monotonic() < end:
    p.sendall(b"ROLE\r\n"); po = int(pf.readline().split()[-1])
    r.sendall(b"ROLE\r\n"); ro = int(rf.readline().split()[-1])
    worst = max(worst, po - ro)
    time.sleep(0.02)
done()
EOF
    POLLER=$!
}

# load PORT PID: "keys/s cpu-ns-per-key" of one loadgen run against the primary PID.
load() {
    local out cpu0 cpu1 kps ops
    cpu0=$(cpu_ns "$2")
    out=$("$LOADGEN" --port "$1" "${WORK[@]}" || true)
    cpu1=$(cpu_ns "$2")
    kps=$(printf '%s\n' "$out" | sed -n 's/^result .*keys_per_s=\([0-9.]*\).*/\1/p')
    ops=$(printf '%s\n' "$out" | sed -n 's/^result .* ops=\([0-9]*\).*/\1/p')
    awk -v k="${kps:-0}" -v c=$((cpu1 - cpu0)) -v o="${ops:-0}" \
        'BEGIN { printf "%.0f %.1f\n", k, (o > 0 ? c / o : 0) }'
}

run_alone() {
    local p
    p=$(free_port)
    start PRIMARY "$p"
    load "$p" "$PRIMARY"
    stop_all
}

# run_replica ACKS: with one replica; prints "keys/s cpu/key lag catchup_ms".
run_replica() {
    local p r res lag t0 t1 i po ro
    p=$(free_port)
    r=$(free_port)
    if [ "$1" -gt 0 ]; then start PRIMARY "$p" --min-replica-acks "$1"; else start PRIMARY "$p"; fi
    start REPLICA "$r" --replica-of "127.0.0.1:$p"
    wait_up "$r"
    poll "$p" "$r" "$TMP/lag"
    res=$(load "$p" "$PRIMARY")
    t0=$(date +%s%N)
    for ((i = 0; i < 600; i++)); do
        po=$(role "$p" | awk '{ print $NF }')
        ro=$(role "$r" | awk '{ print $NF }')
        [ "$po" = "$ro" ] && break
        sleep 0.05
    done
    t1=$(date +%s%N)
    stop_pid "$POLLER" 5
    POLLER=
    lag=$(cat "$TMP/lag" 2>/dev/null || echo -)
    [ "$po" = "$ro" ] || lag="never-caught-up"
    stop_all
    echo "$res $lag $(((t1 - t0) / 1000000))"
}

echo "bloomd: $BLOOMD; workload: ${WORK[*]}; load average $(cut -d' ' -f1 /proc/loadavg)"
printf '%-6s %11s %9s %11s %9s %8s %8s %11s %8s\n' round "alone k/s" "alone ns" "async k/s" \
    "async ns" "cpu B/A" "lag max" "acks k/s" "acks/as"
CPU=() ACKS=() LAGS=()
for ((round = 1; round <= ROUNDS; round++)); do
    read -r ak ac <<<"$(run_alone)"
    read -r sk sc lag _ <<<"$(run_replica 0)"
    read -r kk _ _ _ <<<"$(run_replica 1)"
    line=$(awk -v ak="$ak" -v ac="$ac" -v sk="$sk" -v sc="$sc" -v kk="$kk" 'BEGIN {
        printf "%s %s", (ac > 0 ? sprintf("%.3f", sc / ac) : "-"), (sk > 0 ? sprintf("%.3f", kk / sk) : "-") }')
    read -r cr kr <<<"$line"
    CPU+=("$cr") ACKS+=("$kr") LAGS+=("$lag")
    printf '%-6s %11s %9s %11s %9s %8s %8s %11s %8s\n' "$round" "$ak" "$ac" "$sk" "$sc" "$cr" "$lag" \
        "$kk" "$kr"
done
med() { printf '%s\n' "$@" | grep -E '^[0-9.]+$' | sort -n | awk '{ v[++n] = $1 } END {
    if (n) printf "%.3f", (n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2); else print "-" }'; }
maxlag=$(printf '%s\n' "${LAGS[@]}" | sort -n | tail -n 1)
target "primary CPU/key, one replica / alone (median)" "$(med "${CPU[@]}")" "<=" 1.3
target "keys/s, min-replica-acks 1 / async (median)" "$(med "${ACKS[@]}")" ">=" 0.5
echo "replica lag, records behind at worst over all rounds: $maxlag"
echo "load average now $(cut -d' ' -f1 /proc/loadavg)"
bench_exit
