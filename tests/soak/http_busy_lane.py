#!/usr/bin/python3
"""Soak: a /metrics scrape while the long lane writes big snapshots (issue 27).

Renderings run on the long lane, behind snapshot writes. This fills 8 filters of about
360 MB (capacity 2e8 at 0.001, 1M keys each, so every page is dirty) beside 400 small
ones (past RENDER_INLINE_FILTERS, so renderings use the lane), FLUSHes all 8 at
once (several seconds of writing on the long lane) and scrapes /metrics meanwhile: the
scrape must be answered within RENDER_WAIT_MS (2 s) plus a margin, by the loop, with the
"waited ... for the long lane" WARN logged, not after the writes. Needs ~3 GB of memory.

    /usr/bin/python3 tests/soak/http_busy_lane.py --bin build/bloomd
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import http_scrape  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def get(port, path, timeout):
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.environ.get("BLOOMD_BIN",
                                                    os.path.join(REPO, "build", "bloomd")))
    ap.add_argument("--filters", type=int, default=8)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bloomd-soak-")
    hp = http_scrape.free_port()
    log = os.path.join(tmp, "bloomd.log")
    with open(log, "wb") as lf:
        proc = subprocess.Popen([a.bin, "--data-dir", os.path.join(tmp, "d"), "--port", "0",
                                 "--http-port", str(hp), "--durability", "snapshot",
                                 "--snapshot-interval", "0"],
                                stdout=lf, stderr=lf, stdin=subprocess.DEVNULL)
    ok = False
    try:
        port = http_scrape.wait_log(log, http_scrape.LISTEN_RE, time.monotonic() + 30)
        # More than RENDER_INLINE_FILTERS, so that renderings go to the long lane.
        http_scrape.create_filters(port, 400)
        t = http_scrape.Text(port)
        end = time.monotonic() + 180
        for f in range(a.filters):
            t.cmd("CREATE b%d capacity=200000000 error=0.001" % f)
            for lo in range(0, 1000000, 20000):
                if time.monotonic() > end:
                    raise SystemExit("filling took too long")
                t.s.sendall(b"".join(b"ADD b%d " % f + b" ".join(
                    b"k%d" % (lo + j * 1000 + i) for i in range(1000)) + b"\r\n"
                    for j in range(20)))
                for _ in range(20):
                    t.line()
        get(hp, "/metrics", 30)
        time.sleep(1.2)
        res = {}

        def flush():
            t0 = time.monotonic()
            t.s.sendall(b"".join(b"FLUSH b%d\r\n" % f for f in range(a.filters)))
            res["flush"] = ([t.line() for _ in range(a.filters)], time.monotonic() - t0)

        th = threading.Thread(target=flush)
        th.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        status, body = get(hp, "/metrics", 60)
        scrape_s = time.monotonic() - t0
        th.join(300)
        with open(log) as f:
            warned = any("for the long lane" in ln for ln in f)
        print("flush of %d filters: %.2f s; /metrics meanwhile: %d in %.2f s; WARN logged: %s"
              % (a.filters, res["flush"][1], status, scrape_s, warned))
        ok = status == 200 and (scrape_s < 3.5 or res["flush"][1] < 2.5) and (
            warned or res["flush"][1] < 2.5)
    finally:
        proc.terminate()
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
