"""libmemcached's command-line tools (Debian's libmemcached-tools: memccp, memccat, memcstat,
memcping, memcrm, memcexist, memcflush, memcdump, memcslap, memctouch) against bloomd's
memcached listener, as a user would run them. Each tool runs with a time limit and
bounded work; the module skips, saying why, where the tools are not installed.
"""

import shutil
import subprocess
import time

import pytest

from httputil import free_port

TOOLS = ("memccp", "memccat", "memcstat", "memcping", "memcrm", "memcexist", "memcflush",
         "memcdump", "memcslap", "memctouch")
pytestmark = pytest.mark.skipif(
    any(shutil.which(t) is None for t in TOOLS),
    reason="libmemcached-tools is not installed (apt-get install libmemcached-tools)")

TOOL_TIMEOUT = 30


def mc_daemon(daemon_factory, args=()):
    """A bloomd with the memcached listener on a free port; returns (daemon, port)."""
    port = free_port()
    d = daemon_factory(args=["--memcache-port", str(port)] + list(args))
    deadline = time.monotonic() + 30
    while "(memcached protocol)" not in d.log():
        assert time.monotonic() < deadline, d.log()
        time.sleep(0.02)
    return d, port


def tool(port, name, *args, cwd=None):
    return subprocess.run([name, "--servers=127.0.0.1:%d" % port] + list(args), cwd=cwd,
                          capture_output=True, text=True, timeout=TOOL_TIMEOUT)


def test_memccp_stores_and_memccat_reads_the_one_byte_value(daemon_factory, tmp_path):
    d, port = mc_daemon(daemon_factory)
    report = tmp_path / "reports:2026-12-01.csv"   # the key is the basename: filter:key
    report.write_text("id,clicks\n1,2\n")
    r = tool(port, "memccp", str(report))          # set: ADD
    assert r.returncode == 0, r.stderr
    with d.client() as c:
        assert c.cmd("CHECK reports 2026-12-01.csv") == "1"
    r = tool(port, "memccat", "reports:2026-12-01.csv")  # get: CHECK
    assert (r.returncode, r.stdout) == (0, "1\n"), r
    r = tool(port, "memccat", "reports:never.csv")
    assert r.returncode != 0 and r.stdout == "", r

    # --add is the dedup question: the first copy is STORED, the second NOT_STORED.
    fresh = tmp_path / "reports:fresh.csv"
    fresh.write_text("x")
    assert tool(port, "memccp", "--add", str(fresh)).returncode == 0
    again = tool(port, "memccp", "--add", str(fresh))
    assert again.returncode != 0 and "NOT STORED" in again.stderr, again


def test_memcstat_and_memcping(daemon_factory):
    d, port = mc_daemon(daemon_factory)
    r = tool(port, "memcping")
    assert r.returncode == 0, r.stderr
    r = tool(port, "memcstat")
    assert r.returncode == 0, r.stderr
    assert "pid: %d" % d.proc.pid in r.stdout and "curr_connections:" in r.stdout, r.stdout
    assert "limit_maxbytes:" in r.stdout, r.stdout
    closed = tool(free_port(), "memcping")
    assert closed.returncode != 0


def test_refused_tools_say_why(daemon_factory, tmp_path):
    d, port = mc_daemon(daemon_factory)
    (tmp_path / "k").write_text("v")
    assert tool(port, "memccp", str(tmp_path / "k")).returncode == 0
    r = tool(port, "memcrm", "k")
    assert r.returncode != 0 and "delete is not supported: a Bloom filter cannot forget" \
        in r.stderr, r
    r = tool(port, "memcflush")
    assert r.returncode != 0 and "flush_all is disabled" in r.stderr, r
    r = tool(port, "memcdump")
    assert r.returncode != 0 and "stats takes no group" in r.stderr, r
    # touch gets CLIENT_ERROR too; libmemcached reports it as a generic read error.
    assert tool(port, "memctouch", "k").returncode != 0
    with d.client() as c:
        assert c.cmd("CHECK default k") == "1"   # nothing above removed it


def test_memcexist_asks_with_add_so_it_adds(daemon_factory):
    """libmemcached's exist sends `add`: bloomd's answer is the dedup answer, so a key
    that was absent is reported missing once and is present afterwards."""
    d, port = mc_daemon(daemon_factory)
    first = tool(port, "memcexist", "seen:k1")
    assert first.returncode != 0, first
    assert tool(port, "memcexist", "seen:k1").returncode == 0
    with d.client() as c:
        assert c.cmd("CHECK seen k1") == "1"


def test_memcflush_when_enabled_clears_every_filter(daemon_factory, tmp_path):
    d, port = mc_daemon(daemon_factory, ["--memcache-flush-all", "yes"])
    (tmp_path / "a:k").write_text("v")
    assert tool(port, "memccp", str(tmp_path / "a:k")).returncode == 0
    r = tool(port, "memcflush")
    assert r.returncode == 0, r.stderr
    with d.client() as c:
        assert c.cmd("CHECK a k") == "0"


def test_memcslap_set_then_get(daemon_factory):
    d, port = mc_daemon(daemon_factory)
    for test in ("set", "get"):
        r = tool(port, "memcslap", "--concurrency=2", "--execute-number=200",
                 "--test=%s" % test)
        assert r.returncode == 0, r.stdout + r.stderr
    with d.client() as c:
        stats = c.stats()
    assert int(stats["keys_stored"]) >= 400 and int(stats["keys_checked"]) >= 400, stats


# memccapable -a, test by test: those that pass, and those that cannot by design (each
# needs a stored value read back, a key forgotten, or a value changed: PROTOCOL.md,
# "memccapable").
CAPABLE_PASS = ("version", "quit", "verbosity", "set", "set noreply", "add", "add noreply",
                "stat")
CAPABLE_BY_DESIGN = ("get", "gets", "mget", "flush", "flush noreply", "replace",
                     "replace noreply", "cas", "cas noreply", "delete", "delete noreply",
                     "incr", "incr noreply", "decr", "decr noreply", "append",
                     "append noreply", "prepend", "prepend noreply")


def capable_verdicts(out):
    """memccapable's stdout: each test's name padded to 40 columns, then "[pass]\n" if it
    passed (a failure's "[FAIL]" goes to stderr). Returns {name: "pass" | "FAIL"}."""
    verdict, pos = {}, 0
    while out.startswith("ascii ", pos):
        name = out[pos:pos + 40].strip()[len("ascii "):]
        pos += 40
        verdict[name] = "pass" if out.startswith("[pass]\n", pos) else "FAIL"
        pos += 7 if verdict[name] == "pass" else 0
    return verdict


@pytest.mark.skipif(shutil.which("memccapable") is None,
                    reason="memccapable is not installed (apt-get install libmemcached-tools)")
def test_memccapable_ascii(daemon_factory):
    """Debian's memcached conformance test, as a user runs it (-a: the ASCII protocol).
    Every test first checks `version` (also `version foo bar` and `version noreply`,
    which memcached 1.6 answers), and quit's test trusts that version; eight must pass."""
    d, port = mc_daemon(daemon_factory)
    r = subprocess.run(["memccapable", "-h", "127.0.0.1", "-p", str(port), "-t", "10", "-a"],
                       capture_output=True, text=True, timeout=TOOL_TIMEOUT * 4)
    verdict = capable_verdicts(r.stdout)
    assert set(verdict) == set(CAPABLE_PASS + CAPABLE_BY_DESIGN), (r.stdout, r.stderr)
    assert {n: verdict[n] for n in CAPABLE_PASS} == {n: "pass" for n in CAPABLE_PASS}, verdict
    # The others fail because bloomd keeps no values; if one passes, PROTOCOL.md is wrong.
    assert {n: verdict[n] for n in CAPABLE_BY_DESIGN} == \
        {n: "FAIL" for n in CAPABLE_BY_DESIGN}, verdict
    assert "%d of 27 tests failed" % len(CAPABLE_BY_DESIGN) in r.stderr, r.stderr
    assert d.proc.poll() is None, d.log()
