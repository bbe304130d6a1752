#!/usr/bin/env bash
# run_http.sh - `make bench-http`: CHECKADD throughput (bench/loadgen, batched lines over
# loopback) while a Prometheus-style scraper GETs /metrics SCRAPE_HZ times a second, as a
# ratio to the same run with no scrapes (target >= BENCH_HTTP_TARGET, 0.95; a miss prints
# MISSED and exits 1 unless BENCH_STRICT=0). Rows alternate (quiet, scraped,
# quiet, ...) on fresh daemons so drift on a shared machine hits both alike; the median of
# each is compared. Extra filters make /metrics realistic. Stops every process it started.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh

ROUNDS=${BENCH_HTTP_ROUNDS:-3}
SECS=${BENCH_HTTP_SECONDS:-8}
KEYS=${BENCH_KEYS:-30000000}
SCRAPE_HZ=${BENCH_SCRAPE_HZ:-10}
FILTERS=${BENCH_HTTP_FILTERS:-50}
TARGET=${BENCH_HTTP_TARGET:-0.95}
LOADGEN=${LOADGEN:-build/rel/bench/loadgen}
BLOOMD=${BLOOMD:-build/bloomd}
for bin in "$LOADGEN" "$BLOOMD"; do
    [ -x "$bin" ] || { echo "run_http.sh: $bin missing: run 'make bench-http'" >&2; exit 2; }
done

TMP=$(mktemp -d /tmp/bloomd-bench-http.XXXXXX)
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do stop_pid "$pid"; done
    PIDS=()
}
trap 'cleanup; rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM


# run N scrape(0|1): one fresh daemon, one loadgen run; prints keys_per_s.
run() {
    local dir="$TMP/r$1" hp port i
    mkdir -p "$dir"
    hp=$(free_port)
    : >"$dir/log" # before the child opens it: the port scan below reads it at once
    "$BLOOMD" --bind 127.0.0.1 --port 0 --http-port "$hp" --data-dir "$dir" \
        --snapshot-interval 0 2>"$dir/log" &
    PIDS+=($!)
    port=
    for ((i = 0; i < 100; i++)); do
        port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$dir/log" | head -n 1)
        [ -n "$port" ] && break
        sleep 0.1
    done
    [ -n "$port" ] || { cat "$dir/log" >&2; return 1; }
    python3 - "$port" "$FILTERS" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
for i in range(int(sys.argv[2])):
    s.sendall(b"CREATE extra%d capacity=10000\r\nADD extra%d a b c\r\n" % (i, i))
buf = b""
while buf.count(b"\r\n") < 2 * int(sys.argv[2]):
    buf += s.recv(65536)
PY
    if [ "$2" = 1 ]; then
        python3 - "$hp" "$SCRAPE_HZ" "$dir/scrapes" <<'PY' &
import http.client, sys, time
port, hz, out = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
n, worst, t = 0, 0.0, time.monotonic()
try:
    while True:
        t0 = time.monotonic()
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/metrics")
        body = c.getresponse().read()
        c.close()
        n += 1
        worst = max(worst, time.monotonic() - t0)
        open(out, "w").write("%d %.4f %d\n" % (n, worst, len(body)))
        t += 1.0 / hz
        time.sleep(max(0.0, t - time.monotonic()))
except Exception:
    pass
PY
        PIDS+=($!)
    fi
    local out
    out=$("$LOADGEN" --port "$port" --command CHECKADD --batch 100 --depth 8 --conns 4 \
        --keys "$KEYS" --duration "$SECS" --create "capacity=1000000 error=0.01")
    [ -f "$dir/scrapes" ] && echo "   scrapes, slowest s, bytes: $(cat "$dir/scrapes")" >&2
    cleanup
    printf '%s\n' "$out" | sed -n 's/^result .*keys_per_s=\([0-9]*\).*/\1/p'
}

quiet=() scraped=()
for ((r = 0; r < ROUNDS; r++)); do
    q=$(run "q$r" 0); echo "round $r: no scrapes      $q keys/s" >&2; quiet+=("$q")
    s=$(run "s$r" 1); echo "round $r: $SCRAPE_HZ scrapes/s   $s keys/s" >&2; scraped+=("$s")
done
median() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
mq=$(median "${quiet[@]}")
ms=$(median "${scraped[@]}")
ratio=$(awk -v a="$ms" -v b="$mq" 'BEGIN { printf "%.3f", a / b }')
printf '%-44s %12s\n' "row (CHECKADD, 100 keys/line, 4 conns)" "keys/s (median of $ROUNDS)"
printf '%-44s %12s\n' "no scrapes" "$mq"
printf '%-44s %12s\n' "/metrics scraped ${SCRAPE_HZ}x/s, $FILTERS filters" "$ms"
target "ratio" "$ratio" ">=" "$TARGET"
bench_exit
