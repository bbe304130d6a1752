"""fairload.py - the fairness load of issue 16: many clients pipeline huge CHECK lines
without reading a reply while one polite client times CHECK round trips.

`run(host, port, ...)` drives it against a running bloomd and returns the polite
client's latencies; run as a script it starts the daemon itself (--bin, default the
release build) and prints the figures (bench/run_fair.sh). Stdlib only; every loop is
bounded in time.
"""

import argparse
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import threading
import time


def big_line(filt, line_bytes, cmd="CHECK"):
    """One request line of about line_bytes bytes of 8-byte keys."""
    head = ("%s %s" % (cmd, filt)).encode()
    n = max(1, (line_bytes - len(head) - 2) // 9)
    keys = b"".join(b" k%07d" % i for i in range(n))
    return head + keys + b"\r\n"


def percentile(sorted_vals, q):
    if not sorted_vals:
        return float("nan")
    i = min(len(sorted_vals) - 1, int(q * len(sorted_vals)))
    return sorted_vals[i]


def _pipeliners(host, port, line, clients, seconds, max_lines, stop, sent):
    """Opens `clients` sockets and keeps writing `line` to each, never reading."""
    sel = selectors.DefaultSelector()
    socks = []
    for _ in range(clients):
        s = socket.create_connection((host, port))
        s.setblocking(False)
        socks.append(s)
        sel.register(s, selectors.EVENT_WRITE, [0, 0])  # [offset in line, lines sent]
    deadline = time.monotonic() + seconds
    view = memoryview(line)
    try:
        while not stop.is_set() and time.monotonic() < deadline and sel.get_map():
            for key, _ in sel.select(timeout=0.1):
                st = key.data
                try:
                    n = key.fileobj.send(view[st[0]:])
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    sel.unregister(key.fileobj)
                    continue
                st[0] += n
                if st[0] == len(line):
                    st[0] = 0
                    st[1] += 1
                    sent[0] += 1
                    if st[1] >= max_lines:
                        sel.unregister(key.fileobj)
    finally:
        for s in socks:
            s.close()


def run(host, port, clients=200, seconds=8.0, line_bytes=1 << 20, max_lines=40, warmup=1.0,
        filt="fair"):
    """Returns {'p50','p99','max' (ms), 'samples', 'lines'} of the polite client."""
    with socket.create_connection((host, port), timeout=30) as c:
        c.sendall(b"CREATE %s capacity=1000000\r\n" % filt.encode())
        c.recv(4096)
    line = big_line(filt, line_bytes)
    stop = threading.Event()
    sent = [0]
    t = threading.Thread(target=_pipeliners,
                         args=(host, port, line, clients, seconds, max_lines, stop, sent))
    t.start()
    lat = []
    polite = socket.create_connection((host, port), timeout=30)
    polite.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    req = b"CHECK %s a b c\r\n" % filt.encode()
    start = time.monotonic()
    try:
        while time.monotonic() - start < seconds and t.is_alive():
            t0 = time.perf_counter()
            polite.sendall(req)
            buf = b""
            while not buf.endswith(b"\r\n"):
                chunk = polite.recv(4096)
                if not chunk:
                    raise ConnectionError("server closed the polite client")
                buf += chunk
            dt = (time.perf_counter() - t0) * 1000
            if time.monotonic() - start >= warmup:
                lat.append(dt)
            time.sleep(0.002)
    finally:
        stop.set()
        t.join()
        polite.close()
    lat.sort()
    return {"p50": percentile(lat, 0.50), "p99": percentile(lat, 0.99),
            "max": lat[-1] if lat else float("nan"), "samples": len(lat), "lines": sent[0]}


def start_daemon(binary, args=()):
    """Starts binary on a free port with a temporary data dir; returns (proc, host, port)."""
    data = tempfile.mkdtemp(prefix="bloomd-fair-")
    log = open(os.path.join(data, "log"), "w+b")
    proc = subprocess.Popen([binary, "--data-dir", os.path.join(data, "d"), "--port", "0"]
                            + list(args), stdout=log, stderr=log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        log.seek(0)
        text = log.read().decode("utf-8", "replace")
        if "listening on " in text:
            addr = text.split("listening on ", 1)[1].split()[0]
            host, port = addr.rsplit(":", 1)
            return proc, host, int(port)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("bloomd did not start:\n" + text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                   "bloomd"))
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--line-bytes", type=int, default=1 << 20)
    ap.add_argument("--max-lines", type=int, default=1000)
    a = ap.parse_args()
    proc, host, port = start_daemon(a.bin)
    try:
        r = run(host, port, a.clients, a.seconds, a.line_bytes, a.max_lines)
        with socket.create_connection((host, port), timeout=30) as c:
            c.sendall(b"STATS\r\n")
            buf = b""
            while not buf.endswith(b"END\r\n"):
                buf += c.recv(65536)
        stall = [ln for ln in buf.decode().splitlines() if "loop_max_stall_us" in ln]
        print("fair: %d clients pipelining %d-byte CHECK lines, %.0f s: polite CHECK p50 %.2f ms, "
              "p99 %.2f ms, max %.2f ms (%d samples); %d big lines sent; %s"
              % (a.clients, a.line_bytes, a.seconds, r["p50"], r["p99"], r["max"], r["samples"],
                 r["lines"], stall[0] if stall else ""))
    finally:
        proc.terminate()
        proc.wait(20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
