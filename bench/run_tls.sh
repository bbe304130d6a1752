#!/usr/bin/env bash
# run_tls.sh - `make bench-tls`: CHECKADD, 100 keys a line, pipelined, over TLS as a ratio
# to plain TCP on the same daemon (target >= 0.7). Driver: bench/tls_driver.py (loadgen has
# no TLS), one connection each; rows alternate plain, TLS, plain, ... and the medians are
# compared so drift on a shared machine hits both alike. Stops every process it started.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${BENCH_TLS_ROUNDS:-5}
SECS=${BENCH_TLS_SECONDS:-5}
BLOOMD=${BLOOMD:-build/bloomd}
PYTHON=${PYTHON:-/usr/bin/python3}
[ -x "$BLOOMD" ] || { echo "run_tls.sh: $BLOOMD missing: run 'make bench-tls'" >&2; exit 2; }
command -v openssl >/dev/null || { echo "run_tls.sh: needs openssl(1)" >&2; exit 2; }

TMP=$(mktemp -d /tmp/bloomd-bench-tls.XXXXXX)
PID=
cleanup() {
    if [ -n "$PID" ]; then kill -TERM "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
    PID=
}
trap 'cleanup; rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$TMP/key.pem" \
    -out "$TMP/cert.pem" -days 1 -subj /CN=127.0.0.1 2>/dev/null
free_port() { "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port)
TLS_PORT=$(free_port)
"$BLOOMD" --port "$PORT" --tls-port "$TLS_PORT" --tls-cert-file "$TMP/cert.pem" \
    --tls-key-file "$TMP/key.pem" --data-dir "$TMP/data" --snapshot-interval 0 \
    --max-memory 2G >"$TMP/log" 2>&1 &
PID=$!
for _ in $(seq 1 200); do
    grep -q ":$TLS_PORT (bloomd" "$TMP/log" 2>/dev/null && break
    sleep 0.05
done
grep -q ":$TLS_PORT (bloomd" "$TMP/log" || { cat "$TMP/log" >&2; exit 1; }

plain=()
tls=()
for r in $(seq 1 "$ROUNDS"); do
    p=$("$PYTHON" bench/tls_driver.py --port "$PORT" --secs "$SECS" --filter "p$r")
    t=$("$PYTHON" bench/tls_driver.py --port "$TLS_PORT" --tls --secs "$SECS" --filter "t$r")
    printf 'round %d  plain %s keys/s   tls %s keys/s\n' "$r" "${p#* }" "${t#* }"
    plain+=("${p#* }")
    tls+=("${t#* }")
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mp=$(median "${plain[@]}")
mt=$(median "${tls[@]}")
awk -v p="$mp" -v t="$mt" 'BEGIN {
    r = t / p
    printf "CHECKADD 100 keys/line: plain %.0f keys/s, TLS %.0f keys/s, ratio %.2f (target >= 0.7)%s\n",
           p, t, r, (r >= 0.7 ? "" : "  BELOW TARGET")
}'
