#!/usr/bin/env bash
# run_snapshot.sh - `make bench-snapshot`: how fast a big filter reaches disk and what the
# snapshot costs clients. A ~1 GiB filter is filled, then FLUSHed while bench/loadgen sends
# pipelined CHECKADD to it; prints snapshot MB/s next to dd's fsynced write speed on the
# same disk (idle, and under the same client load), client p50/p99 during vs outside the
# snapshot, and the reload time.
# Knobs (environment): BENCH_SNAP_MB (1024), BENCH_SNAP_FILL (keys added first, 4000000),
# BENCH_SNAP_DIR (where data goes, default /tmp), BENCH_SNAP_DEPTH (64). Bounded: ~90 s.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh

MB=${BENCH_SNAP_MB:-1024}
FILL=${BENCH_SNAP_FILL:-4000000}
DEPTH=${BENCH_SNAP_DEPTH:-64}
LOADGEN=${LOADGEN:-build/rel/bench/loadgen}
BLOOMD=${BLOOMD:-build/bloomd}
PY=/usr/bin/python3

for bin in "$LOADGEN" "$BLOOMD"; do
    [ -x "$bin" ] || { echo "run_snapshot.sh: $bin missing: run 'make bench-snapshot'" >&2; exit 2; }
done

TMP=$(mktemp -d "${BENCH_SNAP_DIR:-/tmp}/bloomd-snapbench.XXXXXX")
PID=
stop_bloomd() {
    stop_pid "$PID"
    PID=
}
trap 'stop_bloomd; rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM

# start_bloomd: sets PID and PORT; STARTUP_S = seconds until it listened (load included).
start_bloomd() {
    local t0 i skip
    touch "$TMP/log"
    skip=$(wc -l <"$TMP/log")
    t0=$(date +%s.%N)
    "$BLOOMD" --bind 127.0.0.1 --port 0 --data-dir "$TMP/data" --snapshot-interval 0 \
        2>>"$TMP/log" &
    PID=$!
    PORT=
    for ((i = 0; i < 600; i++)); do
        PORT=$(tail -n +"$((skip + 1))" "$TMP/log" |
            sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' | head -n 1)
        [ -n "$PORT" ] && break
        kill -0 "$PID" 2>/dev/null || break
        sleep 0.1
    done
    [ -n "$PORT" ] || { cat "$TMP/log" >&2; echo "run_snapshot.sh: bloomd did not start" >&2; exit 1; }
    STARTUP_S=$(calc "$(date +%s.%N) - $t0")
}

# cmd LINE: sends one request, prints the reply (one line, or up to END), 120 s at most.
cmd() {
    "$PY" - "$PORT" "$1" <<'EOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=120)
s.sendall(sys.argv[2].encode() + b"\r\n")
buf = b""
while True:
    d = s.recv(65536)
    if not d:
        break
    buf += d
    lines = buf.split(b"\r\n")
    if len(lines) > 1 and (not lines[0].startswith(b"STAT") or b"END" in lines[:-1]):
        break
sys.stdout.write(buf.decode().replace("\r", ""))
EOF
}

# calc EXPR: awk's arithmetic (no bc needed); clamp X LO HI: X bounded to [LO, HI].
calc() { awk "BEGIN { printf \"%.6f\\n\", ($1) }"; }
clamp() { awk -v x="$1" -v lo="$2" -v hi="$3" 'BEGIN { if (x < lo) x = lo; if (x > hi) x = hi; print x }'; }

stat_of() { awk -v k="$1" '$1 == "STAT" && $2 == k { print $3 }'; }

mkdir -p "$TMP/data"
echo "== disk: $(df -h "$TMP" | awk 'NR == 2 { print $1 " (" $2 ", " $4 " free)" }')" >&2

# dd's fsynced sequential write of the same size, same directory.
dd_out=$(dd if=/dev/zero of="$TMP/dd.bin" bs=1M count="$MB" conv=fsync 2>&1 | tail -n 1)
rm -f "$TMP/dd.bin"
DD_S=$(echo "$dd_out" | sed -n 's/.* copied, \([0-9.e-]*\) s,.*/\1/p')
DD_MBS=$(calc "$MB / $DD_S")
echo "== dd: $dd_out" >&2

start_bloomd
# Size the filter: ask how many bytes a capacity gives, then scale it to MB.
cmd "CREATE probe capacity=10000000 error=0.01" >/dev/null
probe=$(cmd "INFO probe" | stat_of bytes)
cmd "DROP probe" >/dev/null
CAP=$(awk -v mb="$MB" -v p="$probe" 'BEGIN { printf "%.0f\n", int(10000000 * mb * 1048576 / p) }')
cmd "CREATE big capacity=$CAP error=0.01" | grep -q CREATED
BYTES=$(cmd "INFO big" | stat_of bytes)
echo "== filter: capacity $CAP, $((BYTES / 1048576)) MiB of bits" >&2

# Fill it (touches every page), then a first snapshot so the file exists (overwrite case).
"$LOADGEN" --port "$PORT" --name big --command ADD --batch 100 --depth 8 --conns 2 \
    --keys "$FILL" --repeat 0 --duration 30 | grep '^#' >&2
cmd "FLUSH" | grep -q OK
STATS=$(cmd "STATS")
IDLE_MS=$(echo "$STATS" | stat_of snapshot_last_duration_ms)
IDLE_MBS=$(calc "$(echo "$STATS" | stat_of snapshot_last_bytes) / 1048576 / ($IDLE_MS / 1000)")

# outside: 5 s of pipelined one-key CHECKADD, no snapshot running.
lg() {
    "$LOADGEN" --port "$PORT" --name big --command CHECKADD --batch 1 --depth "$DEPTH" \
        --conns 1 --keys 100000000 --repeat 0.2 --first "$1" --duration "$2" \
        --seed "$3" | grep '^result '
}
field() { tr ' ' '\n' | sed -n "s/^$1=//p"; }
OUT=$(lg 1000000000 5 7)
# during: FLUSH in the background (the filter is dirty again after the run above); the
# client runs as long as the idle snapshot took: under load it is slower, so the whole
# client run falls inside the snapshot.
RUN_S=$(clamp "$(calc "$IDLE_MS / 1000")" 1 20)
t0=$(date +%s.%N)
cmd "FLUSH big" >"$TMP/flush" &
FLUSH_PID=$!
DUR=$(lg 2000000000 "$RUN_S" 8)
wait "$FLUSH_PID"
FLUSH_S=$(calc "$(date +%s.%N) - $t0")
grep -q '^OK' "$TMP/flush" || { echo "run_snapshot.sh: FLUSH failed: $(cat "$TMP/flush")" >&2; exit 1; }
STATS=$(cmd "STATS")
SNAP_MS=$(echo "$STATS" | stat_of snapshot_last_duration_ms)
SNAP_BYTES=$(echo "$STATS" | stat_of snapshot_last_bytes)
SNAP_MBS=$(calc "$SNAP_BYTES / 1048576 / ($SNAP_MS / 1000)")

# Reload: a clean stop (nothing dirty), then time the start-up that loads the file.
stop_bloomd
start_bloomd
LOAD_S=$STARTUP_S

# dd again, under the same client load, for a like-for-like ratio (on a VM the disk path
# needs guest CPU too). The client outlasts dd; the daemon is then killed, not stopped, so
# no final snapshot is written.
LOAD_RUN_S=$(clamp "$(calc "$DD_S * 3")" 3 20)
lg 3000000000 "$LOAD_RUN_S" 9 >/dev/null &
LG_PID=$!
sleep 0.5
dd_out=$(dd if=/dev/zero of="$TMP/dd.bin" bs=1M count="$MB" conv=fsync 2>&1 | tail -n 1)
rm -f "$TMP/dd.bin"
wait "$LG_PID" || true
DDL_S=$(echo "$dd_out" | sed -n 's/.* copied, \([0-9.e-]*\) s,.*/\1/p')
DDL_MBS=$(calc "$MB / $DDL_S")
kill -KILL "$PID" 2>/dev/null || true
{ wait "$PID"; } 2>/dev/null || true # quiet: bash reports the kill otherwise
PID=

printf '\nbench-snapshot: %d MiB filter (%s keys added), one client at depth %d, %d CPUs shared\n' \
    "$((BYTES / 1048576))" "$FILL" "$DEPTH" "$(nproc)"
printf '%-34s %12s\n' "snapshot write, idle (MiB/s)" "$(printf '%.0f' "$IDLE_MBS")"
printf '%-34s %12s\n' "snapshot write, under load (MiB/s)" "$(printf '%.0f' "$SNAP_MBS")"
printf '%-34s %12s\n' "dd bs=1M conv=fsync (MiB/s)" "$(printf '%.0f' "$DD_MBS")"
printf '%-34s %12s\n' "snapshot / dd, idle" "$(printf '%.2f' "$(calc "$IDLE_MBS / $DD_MBS")")"
printf '%-34s %12s\n' "dd, same client load (MiB/s)" "$(printf '%.0f' "$DDL_MBS")"
printf '%-34s %12s\n' "snapshot / dd, both under load" "$(printf '%.2f' "$(calc "$SNAP_MBS / $DDL_MBS")")"
printf '%-34s %12s\n' "snapshot duration under load (ms)" "$SNAP_MS"
printf '%-34s %12s\n' "FLUSH round trip (s)" "$(printf '%.2f' "$FLUSH_S")"
printf '%-34s %12s\n' "client run during snapshot (s)" "$(printf '%.2f' "$RUN_S")"
printf '%-34s %12s %12s\n' "CHECKADD latency (us)" "outside" "during"
for q in p50 p99 p999 max; do
    printf '%-34s %12s %12s\n' "  $q" "$(echo "$OUT" | field "${q}_us")" "$(echo "$DUR" | field "${q}_us")"
done
printf '%-34s %12s %12s\n' "  requests/s" "$(echo "$OUT" | field req_per_s)" \
    "$(echo "$DUR" | field req_per_s)"
printf '%-34s %12s\n' "start-up with the snapshot (s)" "$(printf '%.2f' "$LOAD_S")"
