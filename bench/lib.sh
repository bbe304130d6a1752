# lib.sh - what the bench scripts share (sourced, not run): a free loopback port, and
# stopping a server they started by pid, bounded (TERM, then KILL after a while).

# free_port: prints a TCP port free on 127.0.0.1 now.
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
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
