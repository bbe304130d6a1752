#!/usr/bin/python3
"""Soak: concurrent /metrics (or /api/filters) scrapes over many filters, issue 27.

Starts the daemon named by --bin (default $BLOOMD_BIN, else build/bloomd) on a fresh data
dir under --max-memory, creates --filters small filters, then runs --scrapes concurrent
scrapes (--rounds times) while one text client sends CHECKs in a loop and a sampler reads
the daemon's VmRSS. Prints one line of figures per run and exits 1 when a bar of issue 27
is missed: every scrape completes with 200, CHECK p99 <= 100 ms, peak RSS <= 576 MiB.

    BLOOMD_BIN=build/bloomd /usr/bin/python3 tests/soak/http_scrape.py --filters 10000

Every wait is bounded: a scrape gives up after --timeout seconds, the run after --deadline.
"""

import argparse
import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LISTEN_RE = re.compile(r"listening on (\S+):(\d+)")
HTTP_RE = re.compile(r"http on (\S+):(\d+): page at")
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
from ports import free_port  # noqa: E402  (one free-port rule for every test tree)


def wait_log(path, regex, deadline):
    while time.monotonic() < deadline:
        with open(path, "rb") as f:
            m = regex.search(f.read().decode("utf-8", "replace"))
        if m:
            return int(m.group(2))
        time.sleep(0.05)
    raise SystemExit("no %r in %s" % (regex.pattern, path))


def status_kib(pid, field):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Text:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buf = b""

    def cmd(self, line):
        self.s.sendall(line.encode() + b"\r\n")
        return self.line()

    def line(self):
        while b"\r\n" not in self.buf:
            chunk = self.s.recv(65536)
            if not chunk:
                raise EOFError("closed")
            self.buf += chunk
        out, self.buf = self.buf.split(b"\r\n", 1)
        return out.decode()


def create_filters(port, n):
    """CREATEs f000000.. pipelined 500 at a time (capacity 1000: 1.2 KiB each)."""
    t = Text(port)
    for lo in range(0, n, 500):
        hi = min(n, lo + 500)
        t.s.sendall(b"".join(b"CREATE f%06d capacity=1000 error=0.01\r\n" % i
                             for i in range(lo, hi)))
        for i in range(lo, hi):
            r = t.line()
            if r not in ("CREATED", "EXISTS"):
                raise SystemExit("CREATE f%06d: %s" % (i, r))
    t.cmd("CREATE probe capacity=10000 error=0.01")
    t.cmd("ADD probe " + " ".join("k%d" % i for i in range(100)))
    t.s.close()


def scrape(port, path, timeout, out, i):
    t0 = time.monotonic()
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        # /metrics ends with the process_* families: a cut body lacks its last one.
        ok = r.status == 200 and (not path.startswith("/metrics")
                                  or b"process_start_time_seconds " in body)
        out[i] = (r.status, len(body), time.monotonic() - t0, ok)
        c.close()
    except Exception as e:  # noqa: BLE001 - a failed scrape is a figure, not a crash
        out[i] = (str(e)[:40], 0, time.monotonic() - t0, False)


def checker(port, stop, lat):
    t = Text(port)
    while not stop.is_set():
        t0 = time.monotonic()
        r = t.cmd("CHECK probe k1 k2 nope")
        lat.append(time.monotonic() - t0)
        if not r.startswith("1 1 "):
            lat.append(float("inf"))
        time.sleep(0.005)
    t.s.close()


def sampler(pid, stop, peak):
    while not stop.is_set():
        peak[0] = max(peak[0], status_kib(pid, "VmRSS"))
        time.sleep(0.02)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.environ.get("BLOOMD_BIN",
                                                    os.path.join(REPO, "build", "bloomd")))
    ap.add_argument("--filters", type=int, default=10000)
    ap.add_argument("--scrapes", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--path", default="/metrics")
    ap.add_argument("--max-memory", default="512M")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--deadline", type=float, default=600.0)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    end = time.monotonic() + a.deadline
    tmp = tempfile.mkdtemp(prefix="bloomd-soak-")
    hp = free_port()
    log = os.path.join(tmp, "bloomd.log")
    with open(log, "wb") as lf:
        proc = subprocess.Popen([a.bin, "--data-dir", os.path.join(tmp, "data"), "--port", "0",
                                 "--http-port", str(hp), "--max-memory", a.max_memory,
                                 "--max-filters", str(a.filters + 100),
                                 "--durability", "snapshot", "--snapshot-interval", "0"],
                                stdout=lf, stderr=lf, stdin=subprocess.DEVNULL)
    failed = False
    try:
        port = wait_log(log, LISTEN_RE, end)
        wait_log(log, HTTP_RE, end)
        create_filters(port, a.filters)
        time.sleep(1.5)  # let the figures' first tick see every filter
        base_rss = status_kib(proc.pid, "VmRSS")
        stop = threading.Event()
        lat, peak = [], [base_rss]
        threads = [threading.Thread(target=checker, args=(port, stop, lat)),
                   threading.Thread(target=sampler, args=(proc.pid, stop, peak))]
        for t in threads:
            t.start()
        rows = []
        for rnd in range(a.rounds):
            if time.monotonic() > end:
                break
            out = [None] * a.scrapes
            ts = [threading.Thread(target=scrape, args=(hp, a.path, a.timeout, out, i))
                  for i in range(a.scrapes)]
            t0 = time.monotonic()
            for t in ts:
                t.start()
            for t in ts:
                t.join(max(0.1, end - time.monotonic()))
            wall = time.monotonic() - t0
            ok = sum(1 for o in out if o is not None and o[3])
            sizes = sorted(o[1] for o in out if o is not None)
            n503 = sum(1 for o in out if o is not None and o[0] == 503)
            bad = [o[0] for o in out if o is None or (not o[3] and o[0] != 503)]
            rows.append((rnd, ok, wall, sizes[len(sizes) // 2] if sizes else 0,
                         ["503 x%d" % n503] * (n503 > 0) + bad[:3] +
                         ["... %d other failures" % len(bad)] * (len(bad) > 3)))
            time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join(30)
        lat.sort()
        p99 = lat[int(len(lat) * 0.99)] if lat else float("inf")
        worst = lat[-1] if lat else float("inf")
        hwm = status_kib(proc.pid, "VmHWM")
        for rnd, ok, wall, size, bad in rows:
            print("%s round %d: %d/%d scrapes ok in %.2f s (body %d bytes)%s"
                  % (a.label, rnd, ok, a.scrapes, wall, size,
                     (" failures: %s" % bad) if bad else ""))
        print("%s filters=%d scrapes=%dx%d all_ok=%s slowest_round_s=%.2f check_n=%d "
              "check_p99_ms=%.1f check_max_ms=%.1f rss_start_mib=%.0f rss_peak_mib=%.0f "
              "vmhwm_mib=%.0f"
              % (a.label, a.filters, a.scrapes, len(rows),
                 all(r[1] == a.scrapes for r in rows), max((r[2] for r in rows), default=0),
                 len(lat), p99 * 1000, worst * 1000, base_rss / 1024, peak[0] / 1024,
                 hwm / 1024))
        failed = (not all(r[1] == a.scrapes for r in rows) or p99 > 0.100
                  or peak[0] > 576 * 1024)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
