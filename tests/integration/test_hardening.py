"""Issue 16: no client can freeze the loop or hold memory past max_memory.

Fairness: 200 clients pipelining 1 MiB CHECK lines without reading while a polite client
times round trips (bench/fairload.py; bench/run_fair.sh measures the release build), and
the loop's longest callback (STATS loop_max_stall_us) for one 1 MiB CHECK / CHECKADD line.
Memory: the daemon's RSS, read from /proc/<pid>/status, stays under max_memory + 64 MiB
while clients trickle unfinished long lines, while clients never read their replies, and
with 100k tiny filters (whose overhead STATS counts). RSS is only meaningful without the
sanitizer's shadow and quarantine, so those tests run the release build (BLOOMD_REL_BIN,
which the Makefile passes) and skip without it. Every load is bounded in count and time.
"""

import os
import selectors
import socket
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, Daemon

sys.path.insert(0, str(REPO / "bench"))
import fairload  # noqa: E402

REL_BIN = os.environ.get("BLOOMD_REL_BIN", str(REPO / "build" / "bloomd"))
MIB = 1 << 20
ASAN = "asan" in os.environ.get("BLOOMD_BIN", str(REPO / "build" / "asan"))


def rss(d):
    """The daemon's resident set in bytes."""
    for line in Path("/proc/%d/status" % d.proc.pid).read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def release(tmp_path):
    """Makes release-build daemons. No release build fails when BLOOMD_REL_BIN names one
    (make test does), and skips only when the variable is unset and build/bloomd absent."""
    if not os.access(REL_BIN, os.X_OK):
        if "BLOOMD_REL_BIN" in os.environ:
            pytest.fail("BLOOMD_REL_BIN=%s is not an executable" % REL_BIN)
        pytest.skip("no release build at %s (make build/bloomd): RSS under ASan means nothing"
                    % REL_BIN)
    made = []

    def make(args):
        d = Daemon(tmp_path / ("rel%d" % len(made)), args, binary=REL_BIN,
                   log_path=tmp_path / ("rel%d.log" % len(made)))
        made.append(d)
        return d.start()

    yield make
    for d in made:
        d.stop()


def test_polite_client_not_starved(daemon_factory):
    d = daemon_factory()
    r = fairload.run(d.host, d.port, clients=200, seconds=8.0, max_lines=30)
    with d.client() as c:
        stall = int(c.stats()["loop_max_stall_us"])
    print("fairness (%s): polite p50 %.1f ms, p99 %.1f ms, max %.1f ms, %d samples, %d lines; "
          "longest callback %.1f ms" % ("asan" if ASAN else "release", r["p50"], r["p99"],
                                        r["max"], r["samples"], r["lines"], stall / 1000))
    assert r["samples"] > 20 and r["lines"] > 200, r
    # Release: p99 < 50 ms (bench/run_fair.sh). ASan makes a 1 MiB CHECK ~50 ms of CPU, and on
    # a shared 2-core machine the loop is preempted for as long again.
    assert r["p99"] < (500 if ASAN else 50), r


@pytest.mark.parametrize("cmd", ["CHECK", "CHECKADD"])
def test_one_megabyte_line_stall(daemon_factory, cmd):
    d = daemon_factory()
    with d.client(timeout=30) as c:
        assert c.cmd("CREATE big") == "CREATED"
        before = int(c.stats()["loop_max_stall_us"])
        line = fairload.big_line("big", MIB, cmd)
        c.send(line)
        assert len(c.line().split(" ")) > 100000
        stall = int(c.stats()["loop_max_stall_us"])
    print("%s of a 1 MiB line: longest callback %.1f ms (before %.1f)"
          % (cmd, stall / 1000, before / 1000))
    assert stall < (400000 if ASAN else 100000)


def test_trickled_long_lines_bounded(release):
    d = release(["--max-memory", "64M"])
    sel = selectors.DefaultSelector()
    for _ in range(1000):
        s = socket.create_connection((d.host, d.port))
        s.setblocking(False)
        sel.register(s, selectors.EVENT_WRITE, [0])
    chunk = b"CHECK f " + b"x" * (64 * 1024)
    peak, deadline = 0, time.monotonic() + 30
    while sel.get_map() and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.2):
            try:
                key.data[0] += key.fileobj.send(chunk)
            except BlockingIOError:
                continue
            except OSError:
                sel.unregister(key.fileobj)
                key.fileobj.close()
                continue
            if key.data[0] >= MIB - len(chunk):  # the line stays unfinished
                sel.unregister(key.fileobj)
        peak = max(peak, rss(d))
    time.sleep(0.5)
    peak = max(peak, rss(d))
    with d.client() as c:
        st = c.stats()
    print("1000 trickling 1 MiB lines, max_memory 64M: peak RSS %.1f MiB, shed %s, "
          "memory_connections %.1f MiB" % (peak / MIB, st["shed_connections"],
                                          int(st["memory_connections"]) / MIB))
    for key in list(sel.get_map().values()):
        key.fileobj.close()
    assert peak < 128 * MIB
    assert int(st["shed_connections"]) > 0
    assert "max_memory exceeded, closing" in d.log()


def test_non_reading_clients_shed(release):
    d = release(["--max-memory", "16M"])
    with d.client() as c:
        assert c.cmd("CREATE f") == "CREATED"
    line = fairload.big_line("f", 256 * 1024)
    socks = []
    for _ in range(50):
        s = socket.create_connection((d.host, d.port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.setblocking(False)
        socks.append([s, 0])
    peak, deadline = 0, time.monotonic() + 20
    while socks and time.monotonic() < deadline:
        for item in list(socks):
            s, sent = item
            try:
                n = s.send(line[sent % len(line):])
                item[1] += n
            except BlockingIOError:
                pass
            except OSError:
                socks.remove(item)
                continue
            if item[1] >= 40 * len(line):
                socks.remove(item)
        peak = max(peak, rss(d))
        time.sleep(0.001)
    time.sleep(0.5)
    peak = max(peak, rss(d))
    with d.client() as c:
        st = c.stats()
        assert c.cmd("CHECK f a") == "0"
    print("50 non-reading clients, max_memory 16M: peak RSS %.1f MiB, shed %s"
          % (peak / MIB, st["shed_connections"]))
    assert peak < 80 * MIB
    assert int(st["shed_connections"]) > 0


def test_tiny_filters_counted(release):
    d = release(["--max-memory", "1G", "--max-filters", "200000"])
    base = rss(d)
    n = 100000
    with d.client(timeout=60) as c:
        for i in range(0, n, 1000):
            c.send("".join("CREATE t%d capacity=1\r\n" % j for j in range(i, i + 1000)))
            for _ in range(1000):
                assert c.line() == "CREATED"
        st = c.stats()
    grown = rss(d) - base
    counted = int(st["memory_bytes"])
    print("100k tiny filters: RSS grew %.1f MiB, STATS memory_bytes %.1f MiB (filters %.1f, "
          "overhead %.1f), %.0f B per filter" % (grown / MIB, counted / MIB,
                                                 int(st["memory_filters"]) / MIB,
                                                 int(st["memory_filter_overhead"]) / MIB,
                                                 counted / n))
    d.kill()  # a clean stop would write 100k snapshot files first
    assert counted / 2 < grown < counted * 2
    # With a limit, CREATE is refused once what filters cost (overhead included) reaches it.
    d2 = release(["--max-memory", "32M", "--max-filters", "200000"])
    with d2.client(timeout=60) as c:
        made = 0
        for i in range(0, n, 1000):
            c.send("".join("CREATE t%d capacity=1\r\n" % j for j in range(i, i + 1000)))
            replies = [c.line() for _ in range(1000)]
            made += replies.count("CREATED")
            if "SERVER_ERROR out of memory" in replies:
                break
        st = c.stats()
    print("max_memory 32M: %d tiny filters created before refusal, RSS %.1f MiB"
          % (made, rss(d2) / MIB))
    peak = rss(d2)
    d2.kill()
    assert 0 < made < n
    assert int(st["memory_bytes"]) <= 32 * MIB
    assert peak < 96 * MIB
