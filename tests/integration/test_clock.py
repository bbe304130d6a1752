"""Windowed filters across steps of the wall clock (issue 27), under libfaketime with
the monotonic clocks untouched: a step forward makes no key younger than the window read
absent, a step back does not keep keys past window*g/(g-1), live or across a restart,
and a step is logged. The window is short (BLOOMD_FAKETIME_WINDOW seconds, 4 by
default; the issue's figures are for 10) and the steps scale with it: +W/2 and -6W.
Every wait is bounded."""

import os
import re
import time
from pathlib import Path

import pytest

LIBFAKETIME = next((p for p in ("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
                                "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
                                "/usr/lib/faketime/libfaketime.so.1")
                    if os.path.exists(p)), None)
pytestmark = pytest.mark.skipif(LIBFAKETIME is None,
                                reason="libfaketime not installed (scripts/deps.sh test)")

W = int(os.environ.get("BLOOMD_FAKETIME_WINDOW", "4"))
TICK = 0.25  # the worker's rotation tick


def faked(daemon_factory, rc: Path, args=(), data_dir=None):
    """A daemon whose wall clock is offset by the seconds written to rc."""
    rc.write_text("+0\n")
    asan = os.environ.get("ASAN_OPTIONS", "")
    env = {"LD_PRELOAD": LIBFAKETIME, "FAKETIME_TIMESTAMP_FILE": str(rc),
           "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1",
           # libfaketime comes before the ASan runtime in the library list
           "ASAN_OPTIONS": (asan + ":" if asan else "") + "verify_asan_link_order=0"}
    return daemon_factory(args=list(args), env=env, data_dir=data_dir)


def step(rc: Path, offset_s: float):
    rc.write_text("%+d\n" % int(offset_s))


def logged_step(log):
    """The step the daemon logged, in seconds (None if none)."""
    m = re.search(r"WARN clock: the wall clock stepped by ([-+][0-9.]+) s", log)
    return float(m.group(1)) if m else None


def sleep_until(t):
    time.sleep(max(0.0, t - time.monotonic()))


def test_step_forward_keeps_every_key_younger_than_the_window(daemon_factory, tmp_path):
    """Keys are added every W/16 for 1.5 W; then the wall clock jumps W/2 forward, past a
    span boundary by the wall clock. Every batch younger than the window is still there
    (by the wall clock the oldest of them would be W/2 older, and dropped)."""
    rc = tmp_path / "faketime.rc"
    d = faked(daemon_factory, rc)
    batches = []  # (monotonic time added, keys)
    with d.client() as c:
        assert c.cmd("CREATE w window=%ds generations=2" % int(W)) == "CREATED"
        t0 = time.monotonic()
        for b in range(24):  # one batch every W/16 for 1.5 W
            sleep_until(t0 + b * W / 16)
            keys = ["f%d-%d" % (b, j) for j in range(50)]
            c.add("w", keys)
            batches.append((time.monotonic(), keys))
        sleep_until(t0 + 1.55 * W)
        step(rc, W // 2)  # by the wall clock the third span (at 2 W) has begun
        time.sleep(2 * TICK)  # a tick rotates by it
        now = time.monotonic()
        young = [(t, keys) for t, keys in batches if now - t < W - 0.3]
        assert len(young) >= 10
        absent = [(round(now - t, 2), 50 - sum(c.check("w", keys))) for t, keys in young]
        absent = [a for a in absent if a[1] > 0]
        assert not absent, "keys younger than the window read absent (age s, keys): %s" % absent
    assert logged_step(d.log()) == pytest.approx(W // 2, abs=0.1), d.log()[-2000:]


def test_step_back_forgets_on_time(daemon_factory, tmp_path):
    """After the wall clock jumps 6 W back, keys added before and after the step are
    present within the window and forgotten by window*g/(g-1) (plus a tick)."""
    rc = tmp_path / "faketime.rc"
    d = faked(daemon_factory, rc)
    before = ["b%d" % i for i in range(200)]
    after = ["a%d" % i for i in range(200)]
    with d.client() as c:
        assert c.cmd("CREATE w window=%ds generations=2" % int(W)) == "CREATED"
        t0 = time.monotonic()
        c.add("w", before)
        time.sleep(W / 8)
        step(rc, -6 * W)
        time.sleep(2 * TICK)
        t1 = time.monotonic()
        c.add("w", after)
        sleep_until(t1 + W - 0.5)
        assert all(c.check("w", after)), "absent within the window"
        sleep_until(t0 + 2 * W + 2 * TICK + 0.3)
        assert sum(c.check("w", before)) <= 3, "not forgotten after a step back"
        sleep_until(t1 + 2 * W + 2 * TICK + 0.3)
        assert sum(c.check("w", after)) <= 3, "not forgotten after a step back"
    assert logged_step(d.log()) == pytest.approx(-6 * W, abs=0.1), d.log()[-2000:]


def test_step_back_while_down_forgets_on_time(daemon_factory, tmp_path):
    """The wall clock is the only link to the time before a restart. If it went 6 W back
    while the daemon was down, windows go on from where they were, by elapsed time: keys
    are forgotten within window*g/(g-1) plus one span and the downtime, not 6 W later."""
    rc = tmp_path / "faketime.rc"
    d = faked(daemon_factory, rc)
    keys = ["r%d" % i for i in range(200)]
    with d.client() as c:
        assert c.cmd("CREATE w window=%ds generations=2" % int(W)) == "CREATED"
        t0 = time.monotonic()
        c.add("w", keys)
    d.stop()  # SIGTERM: snapshotted
    step(rc, -6 * W)
    down = time.monotonic() - t0
    d.start()
    with d.client() as c:
        assert all(c.check("w", keys)), "lost across the restart"
        deadline = t0 + 2 * W + W + down + 2 * TICK + 1.0  # + one span + the downtime
        while time.monotonic() < deadline and sum(c.check("w", keys)) > 3:
            time.sleep(0.1)
        left = sum(c.check("w", keys))
        assert left <= 3, "%d keys kept %.1f s after they were added" % (
            left, time.monotonic() - t0)
