#!/usr/bin/env bash
# run_replay.sh - start-up replay of a big journal, server level (issue 12: 100M keys in
# under 10 s). Fills a filter through the daemon under `durability everysec` with
# bench/loadgen (distinct keys, 100 per CHECKADD line), waits past one fsync, kills it
# with SIGKILL (so no snapshot covers the journal), then starts it again on the same data
# dir and times the start to its "listening" line (the client listener opens after the
# start-up load and replay). Prints the journal's size and the replay rate.
# Knobs (environment): REPLAY_KEYS (100000000), REPLAY_CAPACITY (REPLAY_KEYS: one stage;
# a smaller one makes the filter grow through stages, and every stage costs a probe per
# key), REPLAY_DIR (where data goes, /tmp), REPLAY_ROUNDS (restarts timed, 3),
# REPLAY_KEEP=1 (keep the data dir, for REPLAY_DATA=<its path>: time restarts of that
# filled dir, no fill), BLOOMD, LOADGEN.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh

KEYS=${REPLAY_KEYS:-100000000}
CAPACITY=${REPLAY_CAPACITY:-$KEYS}
ROUNDS=${REPLAY_ROUNDS:-3}
LOADGEN=${LOADGEN:-build/rel/bench/loadgen}
BLOOMD=${BLOOMD:-build/bloomd}
for bin in "$LOADGEN" "$BLOOMD"; do
    [ -x "$bin" ] || { echo "run_replay.sh: $bin missing: make build/bloomd $LOADGEN" >&2; exit 2; }
done

if [ -n "${REPLAY_DATA:-}" ]; then
    TMP=$(cd "$REPLAY_DATA/.." && pwd)
    REPLAY_KEEP=1
else
    TMP=$(mktemp -d "${REPLAY_DIR:-/tmp}/bloomd-replay.XXXXXX")
fi
PID=
stop() {
    stop_pid "$PID" 30 "${1:-TERM}"
    PID=
}
if [ "${REPLAY_KEEP:-0}" = 1 ]; then
    trap 'stop KILL; echo "kept: REPLAY_DATA=$TMP/data" >&2' EXIT
else
    trap 'stop KILL; rm -rf "$TMP"' EXIT
fi
trap 'exit 130' INT TERM

# start LOG: starts the daemon on TMP/data; sets PID and PORT once it listens (600 s).
start() {
    "$BLOOMD" --bind 127.0.0.1 --port 0 --data-dir "$TMP/data" --snapshot-interval 0 \
        --durability everysec 2>"$1" &
    PID=$!
    PORT=
    local i
    for ((i = 0; i < 60000; i++)); do
        PORT=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\) (bloomd protocol).*/\1/p' "$1" |
            head -n 1)
        [ -n "$PORT" ] && return 0
        kill -0 "$PID" 2>/dev/null || { cat "$1" >&2; return 1; }
        sleep 0.01
    done
    return 1
}

if [ -z "${REPLAY_DATA:-}" ]; then
    mkdir -p "$TMP/data"
    start "$TMP/fill.log"
    echo "filling $KEYS keys (capacity=$CAPACITY error=0.01, durability everysec) ..." >&2
    "$LOADGEN" --port "$PORT" --keys "$KEYS" --repeat 0 --batch 100 --depth 8 --conns 4 \
        --duration 3600 --timeout 60 --create "capacity=$CAPACITY error=0.01" | grep '^#' >&2
    sleep 2 # past one everysec fdatasync
    stop KILL
fi
JBYTES=$(du -sb "$TMP/data/journal" | cut -f1)
echo "journal: $JBYTES bytes ($(awk -v b="$JBYTES" -v k="$KEYS" 'BEGIN { printf "%.2f", b / k }') per key)"
printf '%-6s %10s %14s\n' round "start s" "keys/s replayed"
for ((r = 1; r <= ROUNDS; r++)); do
    t0=$(date +%s.%N)
    start "$TMP/start.$r.log"
    t1=$(date +%s.%N)
    # The keys are all there: CHECK a few (loadgen fails on any false negative).
    "$LOADGEN" --port "$PORT" --keys 100000 --present 100000 --repeat 0 --command CHECK \
        --batch 100 --depth 8 >/dev/null
    stop KILL # SIGKILL again: the next round replays the same journal
    awk -v a="$t0" -v b="$t1" -v k="$KEYS" -v r="$r" \
        'BEGIN { printf "%-6s %10.2f %14.0f\n", r, b - a, k / (b - a) }'
done
grep -h -i "journal\|replay" "$TMP/start.1.log" | head -n 5 >&2 || true
