"""max_memory 0 in a memory cgroup: the daemon sizes its budget to 75% of the cgroup's
limit (not the host's RAM), logs the figure and its source, and refuses a CREATE that
would not fit with SERVER_ERROR instead of being killed by the kernel.

Needs a memory cgroup this test may create a child in (root, cgroup v1's memory
controller or v2 with memory delegated); it skips and says why otherwise.
"""

import os
import re
import time
import uuid
from pathlib import Path

import pytest

from conftest import BLOOMD_BIN, Daemon

LIMIT = 256 << 20


def own_memory_cgroup():
    """(version, directory of our memory cgroup) or a skip with the reason."""
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    entries = [line.split(":", 2) for line in lines]
    v1 = [p for _, ctl, p in entries if "memory" in ctl.split(",")]
    v2 = [p for hid, ctl, p in entries if hid == "0" and ctl == ""]
    version, path = (1, v1[0]) if v1 else (2, v2[0]) if v2 else (0, None)
    if not version:
        pytest.skip("no memory cgroup in /proc/self/cgroup")
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        before, _, after = line.partition(" - ")
        fields, (fstype, _src, sup) = before.split(), after.split()[:3]
        root, mount = fields[3], fields[4].replace("\\040", " ")
        if (version == 1 and fstype == "cgroup" and "memory" in sup.split(",")) or \
                (version == 2 and fstype == "cgroup2"):
            rel = path[len(root):] if root != "/" and path.startswith(root) else path
            if root != "/" and not path.startswith(root):
                rel = ""
            return version, Path(mount + rel)
    pytest.skip("the memory cgroup hierarchy is not mounted")


@pytest.fixture
def limited_cgroup():
    """A child memory cgroup limited to LIMIT bytes; yields its cgroup.procs path."""
    if os.geteuid() != 0:
        pytest.skip("making a memory cgroup needs root")
    version, parent = own_memory_cgroup()
    limit_file = "memory.limit_in_bytes" if version == 1 else "memory.max"
    if version == 2 and "memory" not in (parent / "cgroup.subtree_control").read_text().split():
        pytest.skip("cgroup v2: memory is not delegated to children of %s" % parent)
    child = parent / ("bloomd-test-%s" % uuid.uuid4().hex[:8])
    try:
        child.mkdir()
    except OSError as e:
        pytest.skip("cannot create a cgroup under %s: %s" % (parent, e))
    try:
        (child / limit_file).write_text(str(LIMIT))
        yield version, child
    finally:
        for _ in range(50):  # the daemon has exited; its cgroup empties asynchronously
            try:
                child.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def test_max_memory_follows_the_cgroup_limit(limited_cgroup, tmp_path):
    version, cg = limited_cgroup
    # The daemon enters the cgroup before exec, through a wrapper the fixture can run.
    wrapper = tmp_path / "in-cgroup"
    wrapper.write_text('#!/bin/sh\necho $$ > "%s/cgroup.procs" || exit 99\nexec "%s" "$@"\n'
                       % (cg, BLOOMD_BIN))
    wrapper.chmod(0o755)
    d = Daemon(tmp_path / "data", log_path=tmp_path / "bloomd.log", binary=str(wrapper))
    d.start()
    try:
        m = re.search(r"max_memory 0: using (\d+) bytes, 75% of the cgroup v(\d) memory limit "
                      r"(\d+) \((\S+)\)", d.log())
        assert m, d.log()
        budget = int(m.group(1))
        assert int(m.group(2)) == version and int(m.group(3)) == LIMIT
        assert budget == LIMIT - LIMIT // 4
        assert m.group(4).startswith(str(cg))
        with d.client() as c:
            assert c.stats()["memory_limit"] == str(budget)
            # About 517 MB of filter at 1%: more than the whole cgroup allows.
            reply = c.cmd("CREATE big capacity=430000000 error=0.01")
            assert reply == "SERVER_ERROR out of memory", reply
            assert c.cmd("CREATE small capacity=1000000 error=0.01") == "CREATED"
            assert c.cmd("ADD small a b c") == "ADDED 3"
        assert d.alive()
    finally:
        d.stop()


def test_set_max_memory_is_kept(daemon_factory):
    d = daemon_factory(args=["--max-memory", "64M"])
    with d.client() as c:
        assert c.stats()["memory_limit"] == str(64 << 20)
    assert "max_memory 0:" not in d.log()


def test_default_is_logged(daemon_factory):
    d = daemon_factory()
    m = re.search(r"max_memory 0: using (\d+) bytes, 75% of (physical memory|the cgroup)",
                  d.log())
    assert m, d.log()
    with d.client() as c:
        assert c.stats()["memory_limit"] == m.group(1)
