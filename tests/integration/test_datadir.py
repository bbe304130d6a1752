"""The data directory at start-up: one daemon per directory (an flock on <dir>/LOCK; a
second one exits 2 naming the first's pid), a stale lock from a crash does not block a
restart, and a directory bloomd cannot write stops start-up with exit 2 and a message
saying what to chown, instead of failing at the first FLUSH.
"""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import BLOOMD_BIN, nobody_user


def run(args, timeout=20, **kw):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLOOMD_")}
    return subprocess.run([BLOOMD_BIN, "--port", "0"] + args, env=env, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL, **kw)


def test_second_daemon_on_same_dir_exits_2(daemon_factory, tmp_path):
    first = daemon_factory(data_dir=tmp_path / "shared")
    with first.client() as c:
        assert c.cmd("CREATE kept capacity=1000") == "CREATED"
        assert c.cmd("ADD kept a b") == "ADDED 2"
    r = run(["--data-dir", str(tmp_path / "shared")])
    assert r.returncode == 2, r.stderr
    assert "in use by another bloomd (pid %d" % first.proc.pid in r.stderr, r.stderr
    assert "listening" not in r.stderr
    # The first is untouched and keeps serving.
    assert first.alive()
    with first.client() as c:
        assert c.cmd("CHECK kept a b") == "1 1"
    assert (tmp_path / "shared" / "LOCK").read_text().strip() == str(first.proc.pid)
    # Once it has stopped, the directory is free again.
    first.stop()
    second = daemon_factory(data_dir=tmp_path / "shared")
    with second.client() as c:
        assert c.cmd("CHECK kept a b") == "1 1"


def test_lock_of_a_killed_daemon_does_not_block(daemon_factory, tmp_path):
    first = daemon_factory(data_dir=tmp_path / "d")
    first.kill()  # SIGKILL: the LOCK file stays, the kernel drops the flock
    assert (tmp_path / "d" / "LOCK").exists()
    daemon_factory(data_dir=tmp_path / "d")


def test_data_dir_that_is_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    r = run(["--data-dir", str(tmp_path / "f")])
    assert r.returncode == 2 and "data directory %s" % (tmp_path / "f") in r.stderr, r.stderr


@pytest.fixture
def unwritable_dir():
    """A data dir bloomd cannot write and the user bloomd will run as (None = us).

    As root: a root-owned 0755 directory, with bloomd run as `nobody` (root writes
    anywhere). Otherwise: a 0555 directory of our own.
    """
    top = Path(tempfile.mkdtemp(prefix="bloomd-unwritable-"))
    data = top / "data"
    try:  # removed also when a check below skips
        os.chmod(top, 0o755)
        data.mkdir()
        user = None
        if os.geteuid() == 0:
            user = nobody_user()
        else:
            os.chmod(data, 0o555)
            if os.access(data, os.W_OK):
                pytest.skip("0555 does not stop this user writing (CAP_DAC_OVERRIDE?)")
        yield data, user
    finally:
        if data.exists():
            os.chmod(data, 0o755)
        shutil.rmtree(top)


def test_unwritable_data_dir_stops_startup(unwritable_dir):
    data, user = unwritable_dir
    kw = {}
    if user is not None:
        kw = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
    r = run(["--data-dir", str(data)], **kw)
    uid = user.pw_uid if user is not None else os.geteuid()
    assert r.returncode == 2, r.stderr
    assert "data directory %s is not writable" % data in r.stderr, r.stderr
    assert "uid %d" % uid in r.stderr and "chown" in r.stderr, r.stderr
    assert "listening" not in r.stderr
    assert os.listdir(data) == []  # no LOCK, no probe left behind


def test_unwritable_parent_stops_startup(unwritable_dir):
    data, user = unwritable_dir
    kw = {}
    if user is not None:
        kw = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
    r = run(["--data-dir", str(data / "sub" / "dir")], **kw)
    assert r.returncode == 2, r.stderr
    assert "is not writable: cannot create" in r.stderr, r.stderr
