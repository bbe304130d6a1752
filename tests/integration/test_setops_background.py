"""UNION and INTERSECT of large filters run on the job thread (issue 16): the loop keeps
answering other clients during a 1 MiB UNION/INTERSECT line (its longest stall is
measured as CHECK round trips and printed), keys added to the destination meanwhile are
kept, DROP of the destination or a source during the job gives a sane answer, and after
kill -9 and a restart the membership is the same under each durability mode. Sizes are
small enough for the sanitizer build; every loop is bounded in count and time."""

import os
import threading
import time

import pytest

from conftest import BLOOMD_BIN

NSRC = 8
CAPACITY = 3_000_000  # ~3.6 MB of bits each: far above the 1 MiB background threshold
KEYS = 300
# The target (issue 16) is 100 ms on the optimised build; the sanitizer build is slower.
STALL_LIMIT = 0.1 if "asan" not in BLOOMD_BIN else 1.0


def src_keys(i):
    return ["s%d-%d" % (i, j) for j in range(KEYS)]


COMMON = ["common-%d" % j for j in range(KEYS)]


def make_sources(c, prefix="s"):
    for i in range(NSRC):
        name = "%s%d" % (prefix, i)
        assert c.cmd("CREATE %s capacity=%d" % (name, CAPACITY)) == "CREATED"
        c.add(name, src_keys(i) + COMMON)


def busy_job_thread(d, c):
    """Queues a long snapshot write on the job thread, so that an operation posted next
    waits behind it: adds made meanwhile are made during the operation. c reads the
    FLUSH's reply later."""
    if c.cmd("CREATE slow capacity=20000000") == "CREATED":
        c.add("slow", ["slow-%d" % j for j in range(30000)], chunk=2000)
    else:
        assert c.cmd("ADD slow again-%f" % time.monotonic()).startswith("ADDED")
    c.send("FLUSH slow\r\n")


def long_line(cmd, dst, names, size=1 << 20):
    """A request line of about size bytes naming the sources over and over."""
    unit = " ".join(names)
    parts, n = [], len(cmd) + len(dst) + 1
    while n + len(unit) + 1 < size - 2:
        parts.append(unit)
        n += len(unit) + 1
    return "%s %s %s" % (cmd, dst, " ".join(parts))


class Pinger:
    """A polite client: CHECK round trips on its own filter until stopped."""

    def __init__(self, d):
        self.c = d.client(timeout=30)
        assert self.c.cmd("CREATE ping capacity=1000") in ("CREATED", "EXISTS")
        self.lat = []
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run)

    def run(self):
        i = 0
        while not self.stop.is_set() and i < 100000:
            t = time.monotonic()
            assert self.c.cmd("CHECK ping k") == "0"
            self.lat.append(time.monotonic() - t)
            time.sleep(0.002)
            i += 1

    def __enter__(self):
        self.t.start()
        time.sleep(0.1)
        return self

    def __exit__(self, *exc):
        time.sleep(0.05)
        self.stop.set()
        self.t.join(30)
        self.c.close()


def test_long_lines_do_not_stall_the_loop(daemon_factory):
    d = daemon_factory(args=["--snapshot-interval", "0", "--max-memory", "2G"])
    with d.client(timeout=120) as c:
        make_sources(c)
        names = ["s%d" % i for i in range(NSRC)]
        for cmd in ("UNION", "INTERSECT"):
            line = long_line(cmd, "d" + cmd, names)
            with Pinger(d) as p:
                t = time.monotonic()
                assert c.cmd(line) == "OK"
                took = time.monotonic() - t
            stall_ms = int(c.stats()["loop_max_stall_us"]) / 1000.0  # since start-up
            print("\n%s of %d sources in a %d-byte line: %.2f s; %d CHECKs meanwhile, "
                  "longest %.1f ms; the loop's longest callback so far %.1f ms"
                  % (cmd, NSRC, len(line), took, len(p.lat), 1000 * max(p.lat), stall_ms))
            assert len(p.lat) > 3
            assert max(p.lat) < STALL_LIMIT
        # The results are those of the immediate path.
        for i in range(NSRC):
            assert all(c.check("dUNION", src_keys(i)))
        assert all(c.check("dUNION", COMMON))
        assert all(c.check("dINTERSECT", COMMON))
        only = [k for i in range(NSRC) for k in src_keys(i)]
        assert sum(c.check("dINTERSECT", only)) < len(only) * 0.05


@pytest.mark.parametrize("cmd", ["UNION", "INTERSECT"])
def test_adds_during_the_job_are_kept(daemon_factory, cmd):
    d = daemon_factory(args=["--snapshot-interval", "0", "--max-memory", "2G"])
    with d.client(timeout=120) as c, d.client(timeout=120) as w:
        make_sources(c)
        assert c.cmd("CREATE dst capacity=%d" % CAPACITY) == "CREATED"
        c.add("dst", COMMON + ["before-%d" % j for j in range(KEYS)])
        line = long_line(cmd, "dst", ["s%d" % i for i in range(NSRC)], size=4096)
        with d.client(timeout=120) as f:
            busy_job_thread(d, f)
            c.send(line + "\r\n")
            time.sleep(0.1)  # accepted: the adds below come after it
            during = ["during-%d" % j for j in range(2000)]
            w.add("dst", during, chunk=50)  # while the job runs (and after: both must hold)
            assert c.line() == "OK"
            assert f.line() == "OK"
        assert all(c.check("dst", during))
        assert all(c.check("dst", COMMON))
        if cmd == "UNION":
            assert all(c.check("dst", src_keys(3)))
        else:
            before = ["before-%d" % j for j in range(KEYS)]
            assert sum(c.check("dst", before)) < KEYS * 0.05


def test_drop_during_the_job(daemon_factory):
    d = daemon_factory(args=["--snapshot-interval", "0", "--max-memory", "2G"])
    with d.client(timeout=120) as c, d.client(timeout=120) as w:
        make_sources(c)
        names = ["s%d" % i for i in range(NSRC)]
        for victim in ("dst", "s2"):
            assert c.cmd("CREATE dst capacity=%d" % CAPACITY) in ("CREATED", "EXISTS")
            with d.client(timeout=120) as f:
                busy_job_thread(d, f)
                c.send(long_line("UNION", "dst", names, size=4096) + "\r\n")
                time.sleep(0.1)
                assert w.cmd("DROP %s" % victim) == "DELETED"
                r = c.line()
                assert f.line() == "OK"
            print("\nUNION with %s dropped meanwhile: %s" % (victim, r))
            if victim == "dst":
                assert r == "OK"  # started again: UNION into a missing dst creates it
                assert all(c.check("dst", src_keys(5)))
            else:
                assert r in ("NOT_FOUND", "OK"), r
            assert c.cmd("DROP dst") == "DELETED"
        # Another operation, then stop with the job possibly still running: no leak.
        c.send(long_line("INTERSECT", "dst", names[:1] + names[3:], size=4096) + "\r\n")
        assert c.line() == "OK"
        c.send(long_line("UNION", "late", names[3:], size=4096) + "\r\n")
    d.stop()


@pytest.mark.parametrize("mode", ["snapshot", "everysec", "always"])
def test_restart_after_a_background_operation(daemon_factory, mode):
    d = daemon_factory(args=["--durability", mode, "--snapshot-interval", "0",
                             "--max-memory", "2G"])
    with d.client(timeout=120) as c, d.client(timeout=120) as w:
        make_sources(c)
        assert c.cmd("CREATE dst capacity=%d" % CAPACITY) == "CREATED"
        c.add("dst", COMMON)
        names = ["s%d" % i for i in range(NSRC)]
        with d.client(timeout=120) as f:
            busy_job_thread(d, f)
            c.send(long_line("UNION", "u", names, size=4096) + "\r\n")
            c.send(long_line("INTERSECT", "dst", names, size=4096) + "\r\n")
            time.sleep(0.1)
            during = ["during-%d" % j for j in range(500)]
            w.add("dst", during, chunk=50)
            assert c.line() == "OK"
            assert c.line() == "OK"
            assert f.line() == "OK"
        probe = during + COMMON + src_keys(1)
        want = {n: c.check(n, probe) for n in ("u", "dst")}
        if mode == "snapshot":
            assert c.cmd("FLUSH") == "OK"
        elif mode == "everysec":
            time.sleep(1.5)
    d.kill()
    d.start()
    with d.client(timeout=120) as c:
        got = {n: c.check(n, probe) for n in ("u", "dst")}
    for n in want:
        lost = [k for k, a, b in zip(probe, want[n], got[n]) if a and not b]
        assert not lost, (mode, n, lost[:5])
    assert all(got["dst"][:len(during)])


def test_expandable_union_with_delete_meanwhile(daemon_factory):
    d = daemon_factory(args=["--snapshot-interval", "0", "--max-memory", "2G"])
    with d.client(timeout=120) as c, d.client(timeout=120) as w:
        for name in ("e0", "e1", "e2"):
            assert c.cmd("CREATE %s kind=expandable capacity=1000000" % name) == "CREATED"
        c.add("e0", ["gone", "kept"])
        c.add("e1", src_keys(1))
        c.add("e2", src_keys(2))
        with d.client(timeout=120) as f:
            busy_job_thread(d, f)
            c.send("UNION e0 e1 e2\r\n")
            time.sleep(0.1)
            assert w.cmd("DELETE e0 gone") == "REMOVED 1"
            assert c.line() == "OK"
            assert f.line() == "OK"
        assert c.cmd("CHECK e0 gone kept") == "0 1"
        assert all(c.check("e0", src_keys(1) + src_keys(2)))
