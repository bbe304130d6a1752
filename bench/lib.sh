# lib.sh - what the bench scripts share (sourced, not run): a free loopback port, stopping a
# server they started by pid, bounded (TERM, then KILL after a while), and checking targets.
# shellcheck shell=bash

# free_port: prints a TCP port free on 127.0.0.1 now, from below the ephemeral range (the
# rule of tests/integration/ports.py: no port-0 listener can be handed it meanwhile).
BENCH_PORTS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/../tests/integration" && pwd)
free_port() {
    python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); from ports import free_port; print(free_port())' \
        "$BENCH_PORTS_DIR"
}

# stop_pid PID [SECONDS=30] [SIGNAL=TERM]: signals PID, waits up to SECONDS for it to exit,
# then SIGKILLs it; reaps it. Nothing if PID is empty.
stop_pid() {
    local pid=$1 secs=${2:-30} sig=${3:-TERM} i
    [ -n "$pid" ] || return 0
    kill -"$sig" "$pid" 2>/dev/null || true
    for ((i = 0; i < secs * 10; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

# cpu_ticks PID: utime + stime of PID so far, in clock ticks (getconf CLK_TCK per second).
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# wait_ready PID LOG: waits up to 10 s for a daemon started in the background to log
# "ready"; if it exits or stays silent, prints its log and returns 1.
wait_ready() {
    local pid=$1 log=$2 i
    for ((i = 0; i < 100; i++)); do
        grep -q "ready" "$log" 2>/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    cat "$log" >&2
    return 1
}

# target LABEL VALUE OP GOAL: prints "LABEL VALUE (target OP GOAL)" and, when VALUE misses
# the goal (OP is >= or <=), appends "MISSED" and counts the miss in BENCH_MISSED. A script
# that calls it ends with `bench_exit`.
BENCH_MISSED=0
target() {
    local label=$1 value=$2 op=$3 goal=$4 ok
    ok=$(awk -v v="$value" -v g="$goal" -v op="$op" 'BEGIN {
        if (v !~ /^-?[0-9.]+([eE][-+]?[0-9]+)?$/) print 0
        else if (op == ">=") print (v + 0 >= g + 0)
        else if (op == "<=") print (v + 0 <= g + 0)
        else print 0 }')
    if [ "$ok" = 1 ]; then
        printf '%-44s %12s   (target %s %s)\n' "$label" "$value" "$op" "$goal"
    else
        printf '%-44s %12s   (target %s %s)  MISSED\n' "$label" "$value" "$op" "$goal"
        BENCH_MISSED=$((BENCH_MISSED + 1))
    fi
}

# bench_exit: exits 1 if a target was missed, unless BENCH_STRICT=0 (then 0, after saying so).
bench_exit() {
    [ "$BENCH_MISSED" -eq 0 ] && exit 0
    if [ "${BENCH_STRICT:-1}" = 0 ]; then
        echo "$(basename "$0"): $BENCH_MISSED target(s) MISSED (BENCH_STRICT=0: going on)" >&2
        exit 0
    fi
    echo "$(basename "$0"): $BENCH_MISSED target(s) MISSED (BENCH_STRICT=0 to go on)" >&2
    exit 1
}
