"""Issue 27, the HTTP part: the pages over every filter are rendered off the loop and shared
among concurrent scrapes, HTTP connections are capped with /healthz still answered, and
response bodies count in the memory budget.

The scrape-under-load test runs the release build (BLOOMD_REL_BIN, as test_hardening.py
does: RSS and latency under ASan mean little); tests/soak/http_scrape.py is the longer run.
Every load is bounded in count and time.
"""

import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import BLOOMD_BIN, REPO, Daemon
from httputil import free_port, http_daemon, http_port_of, request

sys.path.insert(0, str(REPO / "tests" / "soak"))
import http_scrape  # noqa: E402

REL_BIN = os.environ.get("BLOOMD_REL_BIN", str(REPO / "build" / "bloomd"))


def text(d, line):
    with d.client() as c:
        return c.cmd(line)


def stats(d):
    with d.client() as c:
        return c.stats()


def test_concurrent_scrapes_share_one_rendering(daemon_factory):
    """20 scrapes at once get the very same bytes (one rendering: even process_cpu_seconds
    agrees), which stay counted in the budget while they may be reused, then are let go."""
    d, hp = http_daemon(daemon_factory)
    http_scrape.create_filters(d.port, 2000)
    status, _, _ = request(hp, "/metrics")  # the first tick has seen every filter
    assert status == 200
    time.sleep(1.2)  # past the reuse window of that one
    base = int(stats(d)["memory_connections"])
    out = [None] * 20
    ts = [threading.Thread(target=lambda i=i: out.__setitem__(i, request(hp, "/metrics")))
          for i in range(20)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    held = int(stats(d)["memory_connections"]) - base
    elapsed = time.monotonic() - t0
    assert all(o is not None and o[0] == 200 for o in out), [o and o[0] for o in out]
    bodies = [o[2] for o in out]
    assert b'bloomd_filter_items{filter="f001999"}' in bodies[0]
    # Requests that come while one rendering is under way, or within 1 s of it, share it;
    # threads started over a few ms can straddle at most one boundary.
    assert len(set(bodies)) <= 2, len(set(bodies))
    if elapsed < 0.8:  # still inside the reuse window: the cached body is counted
        assert held >= len(bodies[0]), (held, len(bodies[0]))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        held = int(stats(d)["memory_connections"]) - base
        if held < 4096:
            break
        time.sleep(0.2)
    assert held < 4096, "the rendering is still counted after its reuse window: %d" % held
    # /api/filters renders the same way, samples included.
    status, headers, body = request(hp, "/api/filters")
    assert status == 200 and headers["content-type"] == "application/json"
    assert body.count(b'"name":"f0') == 2000


def test_dropped_filters_and_renders_racing(daemon_factory):
    """Filters dropped and created while renderings run: every scrape is whole, and the
    renders hold references, so nothing is read after it is freed (ASan would say)."""
    d, hp = http_daemon(daemon_factory)
    http_scrape.create_filters(d.port, 500)
    stop = threading.Event()
    errors = []

    def churn():
        t = http_scrape.Text(d.port)
        i = 0
        while not stop.is_set() and i < 5000:
            r = t.cmd("DROP f%06d" % (i % 500))
            if r not in ("DELETED", "NOT_FOUND"):
                errors.append(r)
            t.cmd("CREATE f%06d capacity=1000 error=0.01" % (i % 500))
            i += 1
        t.s.close()

    th = threading.Thread(target=churn)
    th.start()
    try:
        end = time.monotonic() + 4
        n = 0
        while time.monotonic() < end:
            for path in ("/metrics", "/api/filters"):
                status, _, body = request(hp, path)
                assert status == 200, body[:200]
                if path == "/metrics":
                    assert b"process_start_time_seconds " in body
                else:
                    assert body.endswith(b"]}\n")
                n += 1
            time.sleep(0.3)
    finally:
        stop.set()
        th.join(30)
    assert not errors, errors[:5]
    assert n >= 4


def test_idle_connections_leave_text_port_and_healthz(daemon_factory):
    """Under prlimit --nofile=1024, 1,500 idle HTTP connections: a fresh text client gets
    VERSION and /healthz answers 200; the rest are refused 503, counted, logged once."""
    if shutil.which("prlimit") is None:
        pytest.skip("no prlimit(1) (util-linux)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 1500 + 200
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip("the test process may open only %d descriptors, needs %d" % (hard, need))
    if soft != resource.RLIM_INFINITY and soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    hp = free_port()
    d = daemon_factory(args=["--http-port", str(hp)], start=False)
    plain = d.command
    d.command = lambda: ["prlimit", "--nofile=1024:1024", "--"] + plain()
    d.start()
    http_port_of(d)
    idle = []
    try:
        t0 = time.monotonic()
        for _ in range(1500):
            if time.monotonic() - t0 > 60:
                break
            try:
                idle.append(socket.create_connection(("127.0.0.1", hp), timeout=5))
            except OSError:
                pass  # a full backlog: the connection never got in
        assert len(idle) >= 1400, len(idle)
        time.sleep(0.3)
        assert text(d, "VERSION").startswith("VERSION ")
        status, _, body = request(hp, "/healthz")
        assert (status, body) == (200, b"ok\n")
        status, headers, body = request(hp, "/metrics")
        assert status == 503 and headers.get("retry-after") == "1", (status, body)
        assert b"http_max_connections 64" in body
        st = stats(d)
        assert int(st["http_connections"]) <= 64 + 8, st["http_connections"]
        assert int(st["http_rejected_connections"]) >= len(idle) - 64 - 8
    finally:
        for s in idle:
            s.close()
    # Closed connections give their slots back (swept within a fraction of a second).
    deadline = time.monotonic() + 10
    status = None
    while time.monotonic() < deadline:
        status, _, _ = request(hp, "/metrics")
        if status == 200:
            break
        time.sleep(0.2)
    assert status == 200
    warns = [ln for ln in d.log().splitlines() if "http_max_connections (64) reached" in ln]
    assert 1 <= len(warns) <= 3, warns
    assert "Too many open files" not in d.log()


def test_http_max_connections_option(daemon_factory):
    """--http-max-connections 2: a third connection is refused while two are open."""
    d, hp = http_daemon(daemon_factory, env={"BLOOMD_HTTP_MAX_CONNECTIONS": "2"})
    held = [socket.create_connection(("127.0.0.1", hp), timeout=5) for _ in range(2)]
    try:
        time.sleep(0.3)
        status, _, body = request(hp, "/readyz")
        assert status == 503 and b"http_max_connections 2" in body, (status, body)
        assert request(hp, "/healthz")[0] == 200
    finally:
        for s in held:
            s.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and request(hp, "/readyz")[0] != 200:
        time.sleep(0.2)
    assert request(hp, "/readyz")[0] == 200
    bad = subprocess.run([BLOOMD_BIN, "--data-dir", str(d.data_dir.parent / "bad"),
                          "--http-max-connections", "0"], capture_output=True, timeout=30)
    assert bad.returncode == 2 and b"http_max_connections" in bad.stderr, bad


@pytest.fixture
def release(tmp_path):
    """Release-build daemons; skips without a release build unless BLOOMD_REL_BIN is set."""
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


def test_40_scrapes_over_10000_filters(release):
    """Issue 27's bar: 40 concurrent /metrics over 10,000 filters under --max-memory 512M all
    complete, a text client's CHECK p99 stays <= 100 ms, peak RSS <= 576 MiB."""
    hp = free_port()
    d = release(["--http-port", str(hp), "--max-memory", "512M", "--max-filters", "10100",
                 "--durability", "snapshot", "--snapshot-interval", "0"])
    http_port_of(d)
    http_scrape.create_filters(d.port, 10000)
    time.sleep(1.2)
    stop = threading.Event()
    lat, peak = [], [0]
    side = [threading.Thread(target=http_scrape.checker, args=(d.port, stop, lat)),
            threading.Thread(target=http_scrape.sampler, args=(d.proc.pid, stop, peak))]
    for t in side:
        t.start()
    results = []
    try:
        for _ in range(2):
            out = [None] * 40
            ts = [threading.Thread(target=http_scrape.scrape, args=(hp, "/metrics", 60, out, i))
                  for i in range(40)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(90)
            results.append(out)
            time.sleep(0.5)
    finally:
        stop.set()
        for t in side:
            t.join(30)
        # Not its last snapshot: 10,000 files with an fsync each can outlast the stop's
        # 20 s on a busy disk, and this test is about the scrapes.
        d.kill()
    lat.sort()
    p99 = lat[int(len(lat) * 0.99)]
    print("40 scrapes x2 over 10,000 filters: CHECK p99 %.1f ms (max %.1f, %d), peak RSS %d MiB"
          % (p99 * 1000, lat[-1] * 1000, len(lat), peak[0] // 1024))
    for out in results:
        assert all(o is not None and o[3] for o in out), [o and o[:2] for o in out]
    assert len(lat) > 50 and p99 <= 0.100, (p99, len(lat))
    assert peak[0] <= 576 * 1024, peak[0]


def fill_budget(t, between=None):
    """CREATEs filters of capacity 1000, 100 a batch, until one gets SERVER_ERROR (the
    memory budget is full); calls between() after each batch that fit. Returns how many
    were created."""
    made = 0
    for _ in range(200):
        t.s.sendall(b"".join(b"CREATE f%06d capacity=1000 error=0.01\r\n" % (made + i)
                             for i in range(100)))
        replies = [t.line() for _ in range(100)]
        made += sum(r == "CREATED" for r in replies)
        if any(r.startswith("SERVER_ERROR") for r in replies):
            return made
        if between is not None:
            between()
    pytest.fail("max_memory 8M never filled")


def test_rendering_past_the_budget_is_503(daemon_factory):
    """A rendering that does not fit max_memory is refused with a 503 saying so, and the
    same page renders again once memory is back."""
    d, hp = http_daemon(daemon_factory, args=["--max-memory", "8M", "--max-filters", "100000"])
    t = http_scrape.Text(d.port)
    try:
        made = fill_budget(t, between=lambda: request(hp, "/healthz"))
    finally:
        t.s.close()
    st = stats(d)
    free = int(st["memory_limit"]) - int(st["memory_bytes"])
    # Each filter is at least 300 bytes of /metrics; what is left fits far fewer.
    assert free < made * 300, (free, made)
    status, _, body = request(hp, "/metrics")
    assert status == 503 and b"does not fit max_memory" in body, (status, body[:200])
    status, _, body = request(hp, "/api/filters")
    assert status == 503 and b"does not fit max_memory" in body, (status, body[:200])
    assert request(hp, "/healthz")[0] == 200
    with d.client() as c:
        for i in range(made):
            c.cmd("DROP f%06d" % i)
    deadline = time.monotonic() + 20
    status = None
    while time.monotonic() < deadline:
        status, _, body = request(hp, "/metrics")
        if status == 200:
            break
        time.sleep(0.3)
    assert status == 200 and b"process_start_time_seconds " in body


def test_scrape_waiting_for_the_lane_at_sigterm_is_answered(daemon_factory):
    """A scrape whose rendering is on the long lane when SIGTERM comes gets its reply: the
    rendering's done() step is skipped while stopping, and its requests must not be left
    unanswered through the last snapshot and dropped at the exit."""
    d, hp = http_daemon(daemon_factory)
    http_scrape.create_filters(d.port, 600)  # past RENDER_INLINE_FILTERS: the lane renders
    assert request(hp, "/metrics")[0] == 200
    time.sleep(1.2)  # past the reuse window: the next scrape posts a rendering
    socks = []
    try:
        for _ in range(4):
            s = socket.create_connection(("127.0.0.1", hp), timeout=20)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            socks.append(s)
        time.sleep(0.002)  # the loop reads them and posts the rendering
        d.proc.send_signal(signal.SIGTERM)
        for s in socks:
            got = b""
            while b"\r\n" not in got:
                b = s.recv(4096)
                if not b:
                    break
                got += b
            assert got.startswith(b"HTTP/1.1 "), "no reply before the exit: %r" % got[:80]
    finally:
        for s in socks:
            s.close()
    d.stop()


def test_healthz_answers_with_the_budget_past_its_limit(daemon_factory):
    """/healthz (and /readyz) say 200 while max_memory is full and idle clients, which are
    never shed, hold it past its limit: a liveness probe must not fail for want of the
    few bytes of its reply."""
    d, hp = http_daemon(daemon_factory, args=["--max-memory", "8M", "--max-filters", "100000"])
    t = http_scrape.Text(d.port)
    idle = []
    try:
        fill_budget(t)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(idle) < 400:
            idle.append(socket.create_connection(("127.0.0.1", d.port), timeout=10))
            if len(idle) % 50 == 0:
                st = stats(d)
                if int(st["memory_bytes"]) > int(st["memory_limit"]) + 4096:
                    break
        st = stats(d)
        assert int(st["memory_bytes"]) > int(st["memory_limit"]), st
        status, _, body = request(hp, "/healthz")
        assert status == 200 and body == b"ok\n", (status, body)
        assert request(hp, "/readyz")[0] == 200
    finally:
        for s in idle:
            s.close()
        t.s.close()
