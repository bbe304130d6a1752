"""The memcached listener (issue 13): pymemcache against bloomd directly, raw-socket framing
and errors, and three daemons behind Debian's nutcracker (twemproxy) with 300,000 keys.

The server's interface: `--memcache-port <n>`, keys `<filter>:<key>`, filters created on
first use through that port. Only missing optional tools skip (pymemcache, nutcracker),
with the reason; a daemon that does not start or answer fails. Every load loop is bounded
in count and in time.
"""

import os
import shutil
import signal
import socket
import subprocess
import time

import pytest

from conftest import BLOOMD_BIN
from ports import free_port

pymemcache = pytest.importorskip("pymemcache", reason="python3-pymemcache is not installed")
from pymemcache.client.base import Client as McClient  # noqa: E402
from pymemcache.exceptions import MemcacheClientError  # noqa: E402


KEYS = 300_000
BATCH = 1000                 # keys per pipelined request batch
PASS_DEADLINE = 240.0        # seconds per pass over all keys (ASan daemons, a shared box)
CONNECT_DEADLINE = 20.0



def wait_port(port, deadline=CONNECT_DEADLINE):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("nothing listens on 127.0.0.1:%d after %ss" % (port, deadline))


def mc_daemon(daemon_factory, args=()):
    """A bloomd with the memcached listener on a free port; returns (daemon, port)."""
    port = free_port()
    d = daemon_factory(args=["--memcache-port", str(port)] + list(args))
    wait_port(port)
    return d, port


def mc_client(port):
    # default_noreply=False: pymemcache's default (True) would hide STORED/NOT_STORED.
    return McClient(("127.0.0.1", port), default_noreply=False, connect_timeout=10,
                    timeout=30)


class Raw:
    """A raw socket speaking memcached bytes, for framing tests."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed; buffered %r" % self.buf[:200])
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def close(self):
        self.sock.close()


# ---- one daemon, pymemcache ----

def test_help_lists_memcache_port():
    r = subprocess.run([BLOOMD_BIN, "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "--memcache-port" in r.stdout, r.stdout


def test_add_set_get_with_pymemcache(daemon_factory):
    _, port = mc_daemon(daemon_factory)
    c = mc_client(port)
    try:
        assert c.add("clicks:u1", b"x") is True          # STORED: new
        assert c.add("clicks:u1", b"y") is False         # NOT_STORED: seen
        assert c.add("u1", b"x") is True                 # the default filter is another one
        assert c.set("clicks:u2", b"anything") is True
        assert c.add("clicks:u2", b"x") is False
        assert c.get("clicks:u1") == b"1"
        assert c.get("clicks:never") is None
        assert c.gets("clicks:u2") == (b"1", b"0")
        got = c.get_many(["clicks:u1", "other:u1", "u1", "clicks:u2", "clicks:u3"])
        assert got == {"clicks:u1": b"1", "u1": b"1", "clicks:u2": b"1"}
        assert c.version()
        stats = c.stats()
        for name in (b"pid", b"uptime", b"curr_connections", b"total_connections",
                     b"cmd_get", b"get_hits", b"get_misses"):
            assert name in stats, (name, sorted(stats))
        with pytest.raises(MemcacheClientError, match="windowed"):
            c.delete("clicks:u1", noreply=False)
        with pytest.raises(MemcacheClientError):
            c.incr("clicks:u1", 1, noreply=False)
        assert c.get("clicks:u1") == b"1"                # nothing was forgotten
    finally:
        c.close()


def test_filter_created_on_first_use_is_visible_to_bloomd_protocol(daemon_factory):
    d, port = mc_daemon(daemon_factory)
    c = mc_client(port)
    try:
        for i in range(100):
            assert c.add("seen:k%d" % i, b"1") is True
    finally:
        c.close()
    with d.client() as bc:
        assert bc.check("seen", ["k%d" % i for i in range(100)]) == [True] * 100
        assert bc.check("seen", ["nope"]) == [False]


# ---- framing and errors, byte for byte ----

def test_raw_framing_errors_and_resync(daemon_factory):
    _, port = mc_daemon(daemon_factory)
    r = Raw(port)
    try:
        # A bad data chunk takes exactly <bytes>+2 bytes, as memcached does: here "abc\r",
        # and the "\n" left over is an empty line (ERROR); then the stream is in step.
        r.send(b"add f:k 0 0 2\r\nabc\r\nget f:k\r\n")
        assert r.line() == b"CLIENT_ERROR bad data chunk"
        assert r.line() == b"ERROR"
        assert r.line() == b"END"
        # noreply: no reply at all, errors included (the bad chunk of f:b is silent; only
        # its leftover "\n" answers ERROR); mn answers MN.
        r.send(b"add f:a 0 0 1 noreply\r\nx\r\ndelete f:a noreply\r\n"
               b"add f:b 0 0 1 noreply\r\nxy\r\nmn\r\n")
        assert r.line() == b"ERROR"
        assert r.line() == b"MN"
        r.send(b"get f:a f:b g:a\r\ngets f:a\r\n")
        assert r.line() == b"VALUE f:a 0 1"
        assert r.line() == b"1"
        assert r.line() == b"END"
        assert r.line() == b"VALUE f:a 0 1 0"
        assert r.line() == b"1"
        assert r.line() == b"END"
        r.send(b"bogus\r\nGET f:a\r\nverbosity 1\r\nversion\r\n")
        assert r.line() == b"ERROR"
        assert r.line() == b"ERROR"
        assert r.line() == b"OK"
        assert r.line().startswith(b"VERSION ")
        r.send(b"get " + b"k" * 251 + b"\r\nget .x:k\r\nadd f:k 1 2 three\r\n")
        assert r.line().startswith(b"CLIENT_ERROR key longer than 250 bytes")
        assert r.line().startswith(b"CLIENT_ERROR invalid filter name")
        assert r.line().startswith(b"CLIENT_ERROR bad command line format")
        r.send(b"flush_all\r\n")
        assert r.line().startswith((b"OK", b"CLIENT_ERROR"))   # refused unless enabled
        r.send(b"quit\r\n")
        r.sock.settimeout(10)
        assert r.sock.recv(100) == b""
    finally:
        r.close()


def test_pipelined_adds_merge_into_runs_in_order(daemon_factory):
    """One write of many add/set requests: the server merges those of one filter into one
    batch; every reply must still be the one of that request, in order (a key repeated
    inside a run is NOT_STORED, noreply stays silent, a bad chunk ends a run). Sent whole,
    then (on fresh filters) 7 bytes at a time, so runs also end where a read ends."""
    _, port = mc_daemon(daemon_factory)
    r = Raw(port)

    def script(f, g, d):
        reqs = [b"add %s:a 0 0 1\r\nx\r\n" % f, b"add %s:b 0 0 1\r\nx\r\n" % f,
                b"add %s:a 0 0 1\r\nx\r\n" % f, b"set %s:c 0 0 1\r\nx\r\n" % f,
                b"add %s:c 0 0 1\r\nx\r\n" % f, b"add %s:d 0 0 1 noreply\r\nx\r\n" % f,
                b"add %s:d 0 0 1\r\nx\r\n" % f, b"add %s:a 0 0 1\r\nx\r\n" % g,
                b"add %s:e 0 0 2\r\nabc\r\n" % f, b"add %s 0 0 1\r\nx\r\n" % d,
                b"add %s 0 0 1\r\nx\r\n" % d, b"get %s:a %s:e %s:a\r\n" % (f, f, g)]
        want = [b"STORED", b"STORED", b"NOT_STORED", b"STORED", b"NOT_STORED",
                b"NOT_STORED", b"STORED", b"CLIENT_ERROR bad data chunk", b"ERROR",
                b"STORED", b"NOT_STORED", b"VALUE %s:a 0 1" % f, b"1",
                b"VALUE %s:a 0 1" % g, b"1", b"END"]
        return b"".join(reqs), want

    try:
        data, want = script(b"f", b"g", b"a")
        r.send(data)
        assert [r.line() for _ in want] == want
        data, want = script(b"p", b"q", b"z")
        for i in range(0, len(data), 7):
            r.send(data[i:i + 7])
            time.sleep(0.001)
        assert [r.line() for _ in want] == want
    finally:
        r.close()


# ---- three daemons behind nutcracker ----

NUTCRACKER_CONF = """\
bloomd:
  listen: 127.0.0.1:{listen}
  hash: fnv1a_64
  distribution: ketama
  auto_eject_hosts: false
  timeout: 10000
  preconnect: true
  server_connections: 1
  servers:
{servers}
"""


@pytest.fixture
def nutcracker(tmp_path, daemon_factory):
    """Three bloomd daemons and nutcracker in front: yields (proxy port, daemons)."""
    binary = shutil.which("nutcracker") or "/usr/sbin/nutcracker"
    if not os.access(binary, os.X_OK):
        pytest.skip("nutcracker is not installed (scripts/deps.sh test installs it)")
    daemons = [mc_daemon(daemon_factory) for _ in range(3)]
    listen, stats = free_port(), free_port()
    servers = "\n".join("    - 127.0.0.1:%d:1 bloomd-%d" % (port, i)
                        for i, (_, port) in enumerate(daemons))
    conf = tmp_path / "nutcracker.yml"
    conf.write_text(NUTCRACKER_CONF.format(listen=listen, servers=servers))
    log = tmp_path / "nutcracker.log"
    proc = subprocess.Popen([binary, "-c", str(conf), "-o", str(log), "-s", str(stats),
                             "-a", "127.0.0.1"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        wait_port(listen)
        yield listen, [d for d, _ in daemons]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def add_many(client, keys):
    """Pipelined adds of many keys in one write: {key: True if STORED}. pymemcache has no
    public add_many; _store_cmd is what its set_many uses (stable in Debian's 3.5)."""
    return client._store_cmd(b"add", {k: b"1" for k in keys}, 0, False)


def test_300000_keys_through_nutcracker(nutcracker):
    port, daemons = nutcracker
    keys = ["clicks:%08d" % i for i in range(KEYS)]
    c = mc_client(port)
    try:
        # Pass 1: every key is new, except the filter's false positives.
        stored = 0
        start = time.monotonic()
        for i in range(0, KEYS, BATCH):
            assert time.monotonic() - start < PASS_DEADLINE, "pass 1 too slow at %d" % i
            res = add_many(c, keys[i:i + BATCH])
            assert len(res) == len(keys[i:i + BATCH])
            stored += sum(1 for v in res.values() if v)
        false_pos = KEYS - stored
        assert false_pos <= 0.02 * KEYS, "%d false positives of %d" % (false_pos, KEYS)

        # Pass 2: every key was seen. No false negatives, ever.
        start = time.monotonic()
        for i in range(0, KEYS, BATCH):
            assert time.monotonic() - start < PASS_DEADLINE, "pass 2 too slow at %d" % i
            res = add_many(c, keys[i:i + BATCH])
            new = [k for k, v in res.items() if v]
            assert not new, "STORED on the second pass: %s" % new[:5]

        # get_many (multi-key gets the proxy splits by shard) finds every key.
        start = time.monotonic()
        for i in range(0, KEYS, BATCH):
            assert time.monotonic() - start < PASS_DEADLINE, "get pass too slow at %d" % i
            part = keys[i:i + BATCH]
            got = c.get_many(part)
            missing = [k for k in part if k not in got]
            assert not missing, "get_many missed %s" % missing[:5]
    finally:
        c.close()

    # Fair share: each daemon's part of `clicks` holds about a third of the keys (ketama
    # with 160 points per server; the bound leaves room for its spread).
    items = []
    for d in daemons:
        with d.client() as bc:
            info = bc.stats("INFO clicks")
            items.append(int(info["items"]))
    assert sum(items) <= KEYS
    assert sum(items) >= KEYS - false_pos
    for n in items:
        assert 0.22 * KEYS <= n <= 0.45 * KEYS, items
