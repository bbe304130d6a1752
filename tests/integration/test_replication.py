"""Replication (issue 24) through real daemons: a replica follows every kind of filter and
every change, refuses writes on both protocols, min-replica-acks holds replies and refuses
changes it cannot promise, failover after kill -9 loses no acknowledged key, REPLICAOF at
run time, a primary restart, a damaged stream from a fake primary, AUTH on the link, and
HAProxy health-checking ROLE in front of a primary and its replica.

The interface (issue 24): `--replica-of HOST:PORT`, `REPLICAOF <host> <port>` /
`REPLICAOF NO ONE`, `ROLE` answering `ROLE primary <replicas> <offset>` or
`ROLE replica <host>:<port> <up|sync|down> <offset>`. Heavy loops use BLOOMD_REL_BIN when
it is set (the release build), else the ASan build.
"""

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import BLOOMD_BIN, REPO, Client, Daemon
from ports import free_port

REL_BIN = os.environ.get("BLOOMD_REL_BIN") or BLOOMD_BIN
SYNC_DEADLINE = 60.0  # seconds for a replica to catch up (ASan, a shared 2-core box)
TOKEN = "repl-token-0123456789"



def role(c):
    """ROLE parsed: {'role', 'replicas', 'offset'} or {'role', 'primary', 'link', 'offset'}."""
    words = c.cmd("ROLE").split(" ")
    assert words[0] == "ROLE", words
    if words[1] == "primary":
        assert len(words) == 4, words
        return {"role": "primary", "replicas": int(words[2]), "offset": int(words[3])}
    assert words[1] == "replica" and len(words) == 5, words
    return {"role": "replica", "primary": words[2], "link": words[3], "offset": int(words[4])}


def start(daemon_factory, args=(), binary=None, env=None):
    d = daemon_factory(args=list(args), env=env, start=False)
    if binary is not None:
        d.binary = binary
    return d.start()


def replica_of(daemon_factory, primary, args=(), binary=None, env=None):
    return start(daemon_factory, ["--replica-of", "%s:%d" % (primary.host, primary.port)]
                 + list(args), binary=binary, env=env)


def wait_for(what, pred, deadline=SYNC_DEADLINE, step=0.02):
    """Polls pred() until it returns a true value (returned) or the deadline (fails)."""
    end = time.monotonic() + deadline
    last = None
    while time.monotonic() < end:
        last = pred()
        if last:
            return last
        time.sleep(step)
    raise AssertionError("%s: not within %ss (last: %r)" % (what, deadline, last))


def wait_caught_up(pc, rcs, deadline=SYNC_DEADLINE):
    """Waits until every replica connection in rcs is up at the primary's offset; returns it."""
    state = {}

    def pred():
        p = role(pc)
        rs = [role(rc) for rc in rcs]
        state["last"] = (p, rs)
        if p["role"] == "primary" and all(r["link"] == "up" and r["offset"] == p["offset"]
                                          for r in rs):
            return p
        return None
    try:
        return wait_for("replicas catching up", pred, deadline)
    except AssertionError as e:
        raise AssertionError("%s; ROLE primary/replicas: %r" % (e, state.get("last"))) from None


def keys(prefix, n):
    return ["%s-%d" % (prefix, i) for i in range(n)]


# ---- a replica follows everything ----

def test_replica_follows_every_kind_and_change(daemon_factory):
    p = start(daemon_factory)
    r = replica_of(daemon_factory, p)
    with p.client(timeout=60) as pc, r.client(timeout=60) as rc:
        wait_for("the link up", lambda: role(rc)["link"] == "up")
        assert role(pc)["replicas"] == 1
        # blocked, grown many times; windowed; expandable, expanded; set operations.
        assert pc.cmd("CREATE grown capacity=5000 error=0.01") == "CREATED"
        assert pc.cmd("CREATE win window=1h generations=3 capacity=50000") == "CREATED"
        assert pc.cmd("CREATE exp kind=expandable capacity=2000 error=0.01 seed=0") == "CREATED"
        assert pc.cmd("CREATE s1 capacity=100000") == "CREATED"
        assert pc.cmd("CREATE s2 capacity=100000") == "CREATED"
        assert pc.cmd("CREATE gone") == "CREATED"
        assert pc.cmd("CREATE wiped") == "CREATED"
        sets = {"grown": keys("g", 80000), "win": keys("w", 40000), "exp": keys("e", 50000),
                "s1": keys("a", 15000), "s2": keys("b", 15000)}
        assert sum(len(v) for v in sets.values()) == 200000
        for name, ks in sets.items():
            pc.add(name, ks, chunk=1000)
        pc.add("s2", sets["s1"][:5000], chunk=1000)  # an overlap for INTERSECT
        pc.add("gone", keys("x", 100))
        pc.add("wiped", keys("y", 100))
        assert pc.cmd("UNION u s1 s2") == "OK"
        assert pc.cmd("INTERSECT i s1 s2") == "OK"
        assert pc.cmd("DROP gone") == "DELETED"
        assert pc.cmd("CLEAR wiped") == "OK"
        deleted = sets["exp"][:1000]
        for i in range(0, len(deleted), 500):
            assert pc.cmd("DELETE exp " + " ".join(deleted[i:i + 500])) == "REMOVED 500"
        assert int(pc.stats("INFO grown")["stages"]) > 3
        assert float(pc.stats("INFO exp")["expansions"]) > 0

        top = wait_caught_up(pc, [rc])
        assert top["offset"] > 200
        assert sorted(rc.names()) == sorted(pc.names()) == sorted(
            ["exp", "grown", "i", "s1", "s2", "u", "wiped", "win"])
        for name, ks in sets.items():
            on_r = rc.check(name, ks, chunk=1000)
            if name == "exp":
                # DELETE may take a key sharing a deleted key's fingerprint with it (the
                # documented caveat): the replica must answer exactly as the primary does.
                assert on_r == pc.check(name, ks, chunk=1000)
                assert on_r[1000:].count(False) < 50
                continue
            assert all(on_r), "%s: %d of %d keys missing on the replica" % (
                name, on_r.count(False), len(on_r))
        # The replica holds exactly the primary's filters: same answers for absent keys too.
        probe = keys("never", 20000)
        for name in ("grown", "win", "exp", "u", "i", "wiped"):
            assert rc.check(name, probe, chunk=1000) == pc.check(name, probe, chunk=1000), name
            assert rc.check(name, sets["s1"][:2000]) == pc.check(name, sets["s1"][:2000]), name
        for field in ("stages", "total_capacity", "items", "bytes"):
            assert rc.stats("INFO grown")[field] == pc.stats("INFO grown")[field], field
        assert rc.stats("INFO exp")["entries"] == pc.stats("INFO exp")["entries"]
        assert all(rc.check("u", sets["s1"] + sets["s2"], chunk=1000))
        assert all(rc.check("i", sets["s1"][:5000], chunk=1000))
        assert not any(rc.check("wiped", keys("y", 100)))
        assert rc.cmd("INFO gone") == "NOT_FOUND"
        assert role(rc)["offset"] == role(pc)["offset"]


def test_full_sync_and_streaming_replicas(daemon_factory):
    p = start(daemon_factory)
    early = replica_of(daemon_factory, p)  # attached before any data: streamed
    with p.client(timeout=60) as pc, early.client() as ec:
        wait_for("the early link up", lambda: role(ec)["link"] == "up")
        before = keys("before", 30000)
        assert pc.cmd("CREATE f capacity=10000") == "CREATED"
        assert pc.cmd("CREATE e kind=expandable capacity=5000") == "CREATED"
        pc.add("f", before, chunk=1000)
        pc.add("e", before, chunk=1000)
        wait_caught_up(pc, [ec])
        late = replica_of(daemon_factory, p)  # started after the data: a full sync
        with late.client() as lc:
            wait_caught_up(pc, [ec, lc])
            after = keys("after", 5000)
            pc.add("f", after, chunk=1000)
            pc.add("e", after, chunk=1000)
            wait_caught_up(pc, [ec, lc])
            assert role(pc)["replicas"] == 2
            for c in (ec, lc):
                assert sorted(c.names()) == ["e", "f"]
                for name in ("e", "f"):
                    assert all(c.check(name, before + after, chunk=1000)), name
        log = p.log()
        assert log.count("replication: full sync of 2 filters") == 1, log[-3000:]
        assert "full sync done: 2 filters" in late.log()
        assert "full sync done" in early.log() and "full sync done: 0 filters" in early.log()


# ---- writes refused on a replica ----

def test_replica_refuses_writes_on_both_protocols(daemon_factory):
    pytest.importorskip("pymemcache", reason="python3-pymemcache is not installed")
    from pymemcache.client.base import Client as McClient
    from pymemcache.exceptions import MemcacheServerError
    p = start(daemon_factory)
    with p.client() as pc:
        assert pc.cmd("CREATE f") == "CREATED"
        assert pc.cmd("CREATE e kind=expandable") == "CREATED"
        assert pc.cmd("ADD f k1") == "ADDED 1"
        assert pc.cmd("ADD e k1") == "ADDED 1"
    mport = free_port()
    r = replica_of(daemon_factory, p, ["--memcache-port", str(mport)])
    ro = "CLIENT_ERROR read-only replica of %s:%d" % (p.host, p.port)
    with r.client() as rc, p.client() as pc:
        wait_caught_up(pc, [rc])
        for req in ("CREATE g", "CREATE f", "ADD f k2", "CHECKADD f k2", "UNION u f",
                    "UNION f e", "INTERSECT f f", "DROP f", "CLEAR f", "DELETE e k1",
                    "ADD nope k"):
            assert rc.cmd(req) == ro, req
        # Reads work, and nothing changed.
        assert rc.cmd("CHECK f k1 k2") == "1 0"
        assert rc.stats("INFO f")["items"] == "1"
        assert sorted(rc.names()) == ["e", "f"]
        assert len(rc.stats()) > 10
        # memcached port: pymemcache sees a failure, never "seen".
        mc = McClient(("127.0.0.1", mport), default_noreply=False, connect_timeout=10, timeout=10)
        for op in (lambda: mc.add("f:new", b"1"), lambda: mc.set("f:new", b"1"),
                   lambda: mc.add("f:k1", b"1"), lambda: mc.add("brandnew:k", b"1")):
            with pytest.raises(MemcacheServerError, match="read-only replica"):
                op()
        assert mc.get("f:k1") == b"1"
        assert mc.get("f:new") is None
        mc.close()
        with socket.create_connection(("127.0.0.1", mport), timeout=10) as s:
            s.sendall(b"add f:raw 0 0 1\r\nx\r\nset f:raw 0 0 1\r\nx\r\nget f:k1 f:raw\r\n")
            got = b""
            end = time.monotonic() + 10
            while got.count(b"\r\n") < 4 and time.monotonic() < end:
                got += s.recv(4096)
        assert got.split(b"\r\n")[:4] == [b"SERVER_ERROR read-only replica",
                                          b"SERVER_ERROR read-only replica",
                                          b"VALUE f:k1 0 1", b"1"], got
        assert rc.cmd("CHECK f raw new") == "0 0"
        assert "brandnew" not in rc.names()


# ---- min-replica-acks ----

def test_min_replica_acks_refuses_without_replicas_and_holds_with_one(daemon_factory):
    p = start(daemon_factory, ["--min-replica-acks", "1"])
    need = "SERVER_ERROR not enough replicas (have 0, need 1)"
    with p.client() as pc:
        for req in ("CREATE f", "ADD f k", "CHECKADD f k", "UNION u f", "DROP f"):
            assert pc.cmd(req) == need, req
        assert pc.names() == []
        assert role(pc) == {"role": "primary", "replicas": 0, "offset": 0}
        r = replica_of(daemon_factory, p)
        with r.client() as rc:
            wait_for("the replica counted", lambda: role(pc)["replicas"] == 1)
            assert pc.cmd("CREATE f capacity=20000") == "CREATED"
            assert rc.names() == ["f"]  # acknowledged: already on the replica
            ks = keys("k", 20000)
            for i in range(0, len(ks), 500):
                part = ks[i:i + 500]
                bits = pc.cmd("CHECKADD f " + " ".join(part)).split(" ")
                assert len(bits) == len(part) and bits.count("0") > len(part) - 25, bits
                # Every acknowledged key is on the replica the moment its reply came.
                assert all(rc.check("f", part)), i
            assert role(rc)["offset"] == role(pc)["offset"]


# ---- failover ----

def _writer(host, port, prefix, acked, stop):
    try:
        c = Client(host, port, timeout=5)
    except OSError:
        return
    i = 0
    try:
        while not stop.is_set() and i < 100000:
            batch = ["%s-%d" % (prefix, i + j) for j in range(5)]
            reply = c.cmd("CHECKADD f " + " ".join(batch))
            if reply.startswith(("0", "1")):
                acked.extend(batch)
            elif not reply.startswith("SERVER_ERROR"):
                raise AssertionError(reply)
            i += 5
    except (OSError, ConnectionError):
        pass  # the primary died under us
    finally:
        c.close()


def failover_round(make, tmp, rnd, durability="always", write_s=0.4, binary=REL_BIN):
    """One round: primary (min-replica-acks 1) + replica, 4 CHECKADD writers, kill -9, data
    dir deleted, REPLICAOF NO ONE. Returns (acknowledged, missing, seconds)."""
    t0 = time.monotonic()
    p = make(["--min-replica-acks", "1", "--durability", durability], binary)
    r = make(["--replica-of", "%s:%d" % (p.host, p.port)], binary)
    with p.client() as pc, r.client() as rc:
        wait_for("the replica counted", lambda: role(pc)["replicas"] == 1, 30)
        assert pc.cmd("CREATE f capacity=1000000") == "CREATED"
    acked = [[] for _ in range(4)]
    stop = threading.Event()
    threads = [threading.Thread(target=_writer, args=(p.host, p.port, "r%d-t%d" % (rnd, t),
                                                     acked[t], stop), daemon=True)
               for t in range(4)]
    for t in threads:
        t.start()
    time.sleep(write_s)
    p.kill()  # kill -9 while the writers run
    stop.set()
    for t in threads:
        t.join(10)
        assert not t.is_alive()
    shutil.rmtree(p.data_dir)
    with r.client() as rc:
        assert rc.cmd("REPLICAOF NO ONE") == "OK"
        assert role(rc)["role"] == "primary"
        all_acked = [k for a in acked for k in a]
        missing = 0
        for i in range(0, len(all_acked), 1000):
            missing += rc.check("f", all_acked[i:i + 1000], chunk=1000).count(False)
        assert rc.cmd("CHECKADD f after-%d" % rnd) == "0"
        assert rc.cmd("CREATE new%d" % rnd) == "CREATED"
    r.stop()
    return len(all_acked), missing, time.monotonic() - t0


def test_failover_loses_no_acknowledged_key(daemon_factory, tmp_path):
    rounds, total, start_t = 20, 0, time.monotonic()

    def make(args, binary):
        return start(daemon_factory, args, binary=binary)
    for rnd in range(rounds):
        n, missing, _ = failover_round(make, tmp_path, rnd,
                                       durability="always" if rnd % 2 == 0 else "everysec",
                                       write_s=0.3)
        assert n > 0, "round %d: no key was acknowledged" % rnd
        assert missing == 0, "round %d: %d of %d acknowledged keys missing" % (rnd, missing, n)
        total += n
        assert time.monotonic() - start_t < 150, "too slow: %d rounds" % rnd
    assert total > rounds * 20


# ---- REPLICAOF at run time ----

def test_replicaof_at_run_time_and_sibling_repointed(daemon_factory):
    a = start(daemon_factory)
    b = start(daemon_factory)
    with a.client() as ac, b.client() as bc:
        assert ac.cmd("CREATE fa") == "CREATED"
        ac.add("fa", keys("a", 3000))
        assert bc.cmd("CREATE fb") == "CREATED"
        assert bc.cmd("REPLICAOF %s %d" % (a.host, a.port)) == "OK"
        wait_caught_up(ac, [bc])
        assert role(bc)["primary"] == "%s:%d" % (a.host, a.port)
        # It was a primary: its own filters went to A first, then A's replaced them.
        assert bc.names() == ["fa", "fb"] and ac.names() == ["fa", "fb"]
        assert all(bc.check("fa", keys("a", 3000)))
        assert bc.cmd("ADD fa z").startswith("CLIENT_ERROR read-only replica of")
        assert bc.cmd("REPLICAOF bogus").startswith("CLIENT_ERROR")

    # A promoted replica's sibling re-pointed to it resyncs partially.
    p = start(daemon_factory)
    r1 = replica_of(daemon_factory, p)
    r2 = replica_of(daemon_factory, p)
    with p.client() as pc, r1.client() as c1, r2.client() as c2:
        wait_caught_up(pc, [c1, c2])
        assert pc.cmd("CREATE f capacity=50000") == "CREATED"
        pc.add("f", keys("k", 20000), chunk=1000)
        wait_caught_up(pc, [c1, c2])
    p.kill()
    with r1.client() as c1, r2.client() as c2:
        assert c1.cmd("REPLICAOF NO ONE") == "OK"
        assert c1.cmd("ADD f promoted") == "ADDED 1"
        assert c2.cmd("REPLICAOF %s %d" % (r1.host, r1.port)) == "OK"
        wait_caught_up(c1, [c2])
        assert all(c2.check("f", keys("k", 20000) + ["promoted"], chunk=1000))
        assert c1.cmd("ADD f later") == "ADDED 1"
        wait_caught_up(c1, [c2])
        assert c2.check("f", ["later"]) == [True]
    log = r1.log()
    assert "replication: partial resync from offset" in log, log[-3000:]
    assert "replication: full sync of" not in log, log[-3000:]


# ---- a primary restart ----

def test_primary_restart_is_survived(daemon_factory):
    p = start(daemon_factory, ["--durability", "everysec", "--port", str(free_port())])
    r = replica_of(daemon_factory, p)
    with p.client() as pc, r.client() as rc:
        assert pc.cmd("CREATE f capacity=50000") == "CREATED"
        pc.add("f", keys("one", 10000), chunk=1000)
        assert pc.cmd("FLUSH") == "OK"
        wait_caught_up(pc, [rc])
    p.restart()
    with p.client() as pc, r.client() as rc:
        wait_caught_up(pc, [rc])
        pc.add("f", keys("two", 10000), chunk=1000)
        assert pc.cmd("CREATE g") == "CREATED"
        wait_caught_up(pc, [rc])
        assert sorted(rc.names()) == ["f", "g"]
        assert all(rc.check("f", keys("one", 10000) + keys("two", 10000), chunk=1000))
    assert "replication: link to" in r.log() and "dropped" in r.log()


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.2])
def test_primary_stopped_mid_full_sync(daemon_factory, delay):
    """SIGTERM while a replica's full sync is encoding a large filter (before, during and
    after the encoding): the primary exits 0 with no sanitizer report, the replica keeps
    running."""
    p = start(daemon_factory, ["--snapshot-interval", "0"])
    with p.client(timeout=60) as pc:
        assert pc.cmd("CREATE big capacity=20000000 error=0.01") == "CREATED"
        pc.add("big", keys("k", 2000), chunk=1000)
    r = replica_of(daemon_factory, p)
    wait_for("the primary's full sync starting",
             lambda: "full sync of" in p.log(), deadline=20, step=0.005)
    time.sleep(delay)
    p.stop()  # asserts exit 0 and a clean sanitizer report
    with r.client() as rc:
        assert rc.cmd("ROLE").startswith("ROLE replica")


# ---- a damaged stream ----

def capture_frames(daemon_factory):
    """Real frames from a real primary: a raw PSYNC ? 0, then CREATE + ADD on the primary.
    Returns (CREATE frame, ADD frame)."""
    p = start(daemon_factory)
    s = socket.create_connection((p.host, p.port), timeout=10)
    s.sendall(b"PSYNC ? 0\r\n")
    buf = b""
    while b"\r\n" not in buf:
        buf += s.recv(4096)
    line, _, buf = buf.partition(b"\r\n")
    # (a later protocol may add fields after these)
    assert re.fullmatch(rb"FULLSYNC [0-9a-f]{40} 0 0( \d+)?", line), line
    with p.client() as pc:
        assert pc.cmd("CREATE damaged") == "CREATED"
        assert pc.cmd("ADD damaged k1 k2") == "ADDED 2"
    frames = []
    while len(frames) < 2:
        while len(buf) < 4 or len(buf) < 32 + int.from_bytes(buf[:4], "little"):
            chunk = s.recv(4096)
            assert chunk, "the primary closed the stream"
            buf += chunk
        n = 32 + int.from_bytes(buf[:4], "little")
        frames.append(buf[:n])
        buf = buf[n:]
    s.close()
    assert frames[0][4] == 2 and frames[1][4] in (1, 9), frames  # CREATE, then ADD
    assert int.from_bytes(frames[0][8:16], "little") == 1
    return frames


class FakePrimary:
    """A loopback server answering each connection's PSYNC with CONTINUE <id> 0 and then the
    bytes script(n) gives for the n-th connection (0-based)."""

    def __init__(self, script):
        self.script = script
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.psyncs = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            c.settimeout(5)
            self.conns.append(c)
            buf = b""
            try:
                while b"\r\n" not in buf:
                    chunk = c.recv(4096)
                    if not chunk:
                        break
                    buf += chunk
                self.psyncs.append(buf.split(b"\r\n")[0])
                c.sendall(b"CONTINUE " + b"ab" * 20 + b" 0\r\n" + self.script(len(self.conns) - 1))
            except OSError:
                pass

    def close(self):
        self.stop.set()
        self.sock.close()
        self.thread.join(5)
        for c in self.conns:
            c.close()


@pytest.mark.parametrize("where", ["name", "trailer", "header"])
def test_damaged_stream_is_not_applied_and_the_link_resyncs(daemon_factory, where):
    create, add = capture_frames(daemon_factory)
    at = {"name": 26, "trailer": len(create) - 3, "header": 9}[where]
    bad = bytearray(create)
    bad[at] ^= 0x40
    fake = FakePrimary(lambda n: bytes(bad) if n == 0 else create + add)
    try:
        r = start(daemon_factory, ["--replica-of", "127.0.0.1:%d" % fake.port])
        with r.client() as rc:
            # The damaged frame is dropped with its link, and the replica connects again;
            # the second connection's intact frames then apply (the test can tell).
            # (Its PSYNC line, not its accept: the fake lists the connection before it
            # has read that line.)
            wait_for("a second connection", lambda: len(fake.psyncs) >= 2, 20)
            assert fake.psyncs[1].startswith(b"PSYNC "), fake.psyncs
            wait_for("the intact frames applied", lambda: rc.names() == ["damaged"], 20)
            assert rc.cmd("CHECK damaged k1 k2 k3") == "1 1 0"
            assert role(rc)["offset"] == 2
        log = r.log()
        assert "a damaged record from the primary (it is not applied)" in log, log[-3000:]
        # Nothing of the damaged frame was applied before: CREATE ran once.
        assert log.count("dropped") >= 1
    finally:
        fake.close()


def test_damaged_frame_never_creates(daemon_factory):
    create, _ = capture_frames(daemon_factory)
    bad = bytearray(create)
    bad[26] ^= 0x01
    fake = FakePrimary(lambda n: bytes(bad))
    try:
        r = start(daemon_factory, ["--replica-of", "127.0.0.1:%d" % fake.port])
        with r.client() as rc:
            wait_for("three connections", lambda: len(fake.conns) >= 3, 20)
            assert rc.names() == []
            assert role(rc)["offset"] == 0
    finally:
        fake.close()


# ---- AUTH ----

def test_replica_authenticates_to_a_primary_with_a_token(daemon_factory, tmp_path):
    tok = tmp_path / "token"
    tok.write_text(TOKEN + "\n")
    tok.chmod(0o600)
    p = start(daemon_factory, ["--auth-token-file", str(tok)])
    good = replica_of(daemon_factory, p, ["--auth-token-file", str(tok)])
    bad = replica_of(daemon_factory, p)
    wrong_file = tmp_path / "wrong"
    wrong_file.write_text("not-the-token\n")
    wrong_file.chmod(0o600)
    wrong = replica_of(daemon_factory, p, ["--auth-token-file", str(wrong_file)])
    with p.client() as pc, good.client() as gc, bad.client() as bc, wrong.client() as wc:
        assert pc.cmd("AUTH " + TOKEN) == "OK"
        assert gc.cmd("AUTH " + TOKEN) == "OK"
        assert wc.cmd("AUTH not-the-token") == "OK"
        assert pc.cmd("CREATE f") == "CREATED"
        assert pc.cmd("ADD f k") == "ADDED 1"
        wait_caught_up(pc, [gc])
        assert gc.cmd("CHECK f k") == "1"
        time.sleep(1.5)  # several retries of the refused links
        for c in (bc, wc):
            rl = role(c)
            assert rl["link"] == "down" and rl["offset"] == 0, rl
            assert c.names() == []
        assert role(pc)["replicas"] == 1


# ---- HAProxy in front ----

DOC = REPO / "docs" / "more-than-one-machine.md"
K8S = REPO / "docker" / "k8s-statefulset-replica.yaml"


def doc_block(lang, needle):
    """The docs' fenced block of language lang that contains needle."""
    for m in re.finditer(r"```%s\n(.*?)```" % lang, DOC.read_text(), re.S):
        if needle in m.group(1):
            return m.group(1)
    raise AssertionError("no ```%s block with %r in %s" % (lang, needle, DOC))


@pytest.mark.parametrize("token", [False, True])
def test_haproxy_follows_the_promoted_replica(daemon_factory, tmp_path, token):
    """The documented HAProxy config (ports changed; with a token, the two AUTH lines the
    docs give put before ROLE): clients reach the primary, then the promoted replica."""
    haproxy = shutil.which("haproxy") or (os.path.exists("/usr/sbin/haproxy")
                                          and "/usr/sbin/haproxy")
    if not haproxy:
        pytest.skip("haproxy is not installed (Debian package haproxy; scripts/deps.sh test)")
    args = []
    if token:
        tok = tmp_path / "token"
        tok.write_text(TOKEN + "\n")
        tok.chmod(0o600)
        args = ["--auth-token-file", str(tok)]
    p = start(daemon_factory, args)
    r = replica_of(daemon_factory, p, args)
    port = free_port()
    cfg = tmp_path / "haproxy.cfg"
    text = doc_block("haproxy", "ROLE primary")  # the documented config, its ports changed
    for old, new in (("127.0.0.1:8690", port), ("127.0.0.1:8673", p.port),
                     ("127.0.0.1:8683", r.port)):
        assert old in text, old
        text = text.replace(old, "127.0.0.1:%d" % new)
    if token:
        doc = DOC.read_text()
        lines = re.findall(r'`(tcp-check (?:send "AUTH <token>\\r\\n"|expect string "OK"))`', doc)
        assert len(lines) == 2, lines
        auth = "".join("    %s\n" % l.replace("<token>", TOKEN) for l in lines)
        text = text.replace('    tcp-check send "ROLE', auth + '    tcp-check send "ROLE', 1)
    cfg.write_text(text)

    def client(at, timeout):
        c = Client("127.0.0.1", at, timeout=timeout)
        if token:
            assert c.cmd("AUTH " + TOKEN) == "OK"
        return c
    log = open(tmp_path / "haproxy.log", "wb")
    hp = subprocess.Popen([haproxy, "-db", "-f", str(cfg)], stdout=log, stderr=log,
                          stdin=subprocess.DEVNULL)
    try:
        def through():
            try:
                c = client(port, 3)
            except (OSError, ConnectionError, AssertionError):
                return None
            try:
                return role(c)
            except (OSError, ConnectionError, AssertionError):
                return None
            finally:
                c.close()
        with client(r.port, 10) as rc, client(p.port, 10) as pc:
            wait_caught_up(pc, [rc])
        # haproxy starts every server as up: the replica leaves once its first check fails.
        wait_for("haproxy marking the replica down",
                 lambda: "bloomd_primary/b is DOWN" in (tmp_path / "haproxy.log").read_text(), 10)
        assert "bloomd_primary/a is DOWN" not in (tmp_path / "haproxy.log").read_text()
        # Clients through haproxy reach the primary, every time.
        for _ in range(10):
            assert through()["role"] == "primary"
        with client(port, 5) as c:
            assert c.cmd("CREATE f") == "CREATED"
            assert c.cmd("ADD f before") == "ADDED 1"
        with client(r.port, 10) as rc, client(p.port, 10) as pc:
            wait_caught_up(pc, [rc])
        p.kill()
        with client(r.port, 10) as rc:
            assert rc.cmd("REPLICAOF NO ONE") == "OK"
        t0 = time.monotonic()

        def writes():
            try:
                with client(port, 2) as c:
                    return c.cmd("ADD f after") == "ADDED 1" and c.cmd("CHECK f before") == "1"
            except (OSError, ConnectionError, AssertionError):
                return False
        wait_for("writes through haproxy after promotion", writes, 10, step=0.1)
        took = time.monotonic() - t0
        assert took < 5, took
        print("haproxy: writes reach the promoted replica %.2f s after REPLICAOF NO ONE" % took)
        assert through()["role"] == "primary"
    finally:
        hp.send_signal(signal.SIGTERM)
        try:
            hp.wait(10)
        except subprocess.TimeoutExpired:
            hp.kill()
            hp.wait()
        log.close()


def test_promoted_full_synced_replica_continues_the_stream(daemon_factory):
    """Replicas that came in by full sync hold the primary's offset, not their own journal's
    count: after a promotion the offset goes on from there, and a sibling re-pointed to the
    new primary gets every later change."""
    p = start(daemon_factory)
    with p.client() as pc:
        assert pc.cmd("CREATE f capacity=50000") == "CREATED"
        pc.add("f", keys("k", 5000), chunk=100)
        top = role(pc)["offset"]
        assert top >= 50
    r1 = replica_of(daemon_factory, p)
    r2 = replica_of(daemon_factory, p)
    with p.client() as pc, r1.client() as c1, r2.client() as c2:
        wait_caught_up(pc, [c1, c2])
    p.kill()
    with r1.client() as c1, r2.client() as c2:
        assert c1.cmd("REPLICAOF NO ONE") == "OK"
        assert role(c1)["offset"] == top
        assert c1.cmd("ADD f one") == "ADDED 1"
        assert role(c1)["offset"] == top + 1
        assert c2.cmd("REPLICAOF %s %d" % (r1.host, r1.port)) == "OK"
        wait_caught_up(c1, [c2])
        assert c1.cmd("ADD f two") == "ADDED 1"
        wait_caught_up(c1, [c2])
        assert c2.check("f", ["one", "two"] + keys("k", 5000)[:100]) == [True] * 102


# ---- the documentation's examples ----

def test_ha_doc_commands_run_as_pasted(tmp_path):
    """The docs' primary and replica command lines, their ports and dirs changed, answer
    ROLE as the comments say."""
    block = doc_block("sh", "--replica-of 127.0.0.1:8673")
    lines = [l for l in block.splitlines() if l.startswith("build/bloomd ")]
    roles = re.findall(r"# (ROLE .*)", block)
    assert len(lines) == 2 and len(roles) == 2, block
    ports = {"8673": free_port(), "8683": free_port()}
    daemons = []
    try:
        for line in lines:
            words = line.rstrip(" &").split()[1:]
            for k, v in ports.items():
                words = [w.replace(k, str(v)) for w in words]
            i = words.index("--data-dir")
            data_dir = tmp_path / Path(words[i + 1]).name
            del words[i:i + 2]
            d = Daemon(data_dir, words, log_path=tmp_path / (data_dir.name + ".log"))
            daemons.append(d.start())
        for d, want in zip(daemons, roles):
            for k, v in ports.items():
                want = want.replace(k, str(v))
            with d.client() as c:
                wait_for("ROLE as documented", lambda: c.cmd("ROLE") == want, 20)
        with daemons[0].client() as c:
            assert c.cmd("CREATE f") == "CREATED"  # min-replica-acks 1 with the replica up
    finally:
        for d in daemons:
            d.stop()


def test_k8s_statefulset_replica_example(daemon_factory, tmp_path):
    yaml = pytest.importorskip("yaml", reason="python3-yaml is not installed")
    docs = list(yaml.safe_load_all(K8S.read_text()))
    kinds = {d["kind"]: d for d in docs if d["kind"] != "Service"}
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    assert set(kinds) == {"ConfigMap", "StatefulSet"} and set(services) == {"bloomd",
                                                                           "bloomd-primary"}
    assert services["bloomd"]["spec"]["publishNotReadyAddresses"] is True
    primary = kinds["ConfigMap"]["data"]["primary"]
    sts = kinds["StatefulSet"]
    assert sts["spec"]["serviceName"] == "bloomd" and sts["spec"]["replicas"] >= 2
    labels = sts["spec"]["template"]["metadata"]["labels"]
    for svc in services.values():
        assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items())
    ctr = sts["spec"]["template"]["spec"]["containers"][0]
    assert ctr["command"] == ["/bin/sh", "-c"]
    # The start script: the named pod is the primary, any other its replica.
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "bloomd").write_text("#!/bin/sh\necho \"$@\"\n")
    (fake / "bloomd").chmod(0o755)
    for pod, want in ((primary, "--memcache-port 11211 --min-replica-acks 1"),
                      ("bloomd-1", "--memcache-port 11211 --min-replica-acks 1 "
                                   "--replica-of %s.bloomd:8673" % primary)):
        env = {"PATH": "%s:/usr/bin:/bin" % fake, "POD_NAME": pod, "PRIMARY_POD": primary}
        out = subprocess.run(ctr["command"] + ctr["args"], env=env, capture_output=True,
                             text=True, timeout=10)
        assert out.stdout.strip() == want, (pod, out)
    # The readiness probe, run against a real primary and a real replica.
    probe = ctr["readinessProbe"]["exec"]["command"]
    if not shutil.which(probe[0]):
        pytest.skip("%s is not installed" % probe[0])
    p = start(daemon_factory)
    r = replica_of(daemon_factory, p)
    with p.client() as pc, r.client() as rc:
        wait_caught_up(pc, [rc])
    def on(d, cmd):
        return [w.replace("127.0.0.1:8673", "127.0.0.1:%d" % d.port) for w in cmd]
    for d, ready in ((p, 0), (r, 1)):
        assert subprocess.run(on(d, probe), timeout=10).returncode == ready, d.port
    # With a token: the probe sends AUTH from BLOOMD_AUTH_TOKEN_FILE first.
    tok = tmp_path / "token"
    tok.write_text(TOKEN + "\n")
    tok.chmod(0o600)
    t = start(daemon_factory, ["--auth-token-file", str(tok)])
    env = dict(os.environ, BLOOMD_AUTH_TOKEN_FILE=str(tok))
    assert subprocess.run(on(t, probe), env=env, timeout=10).returncode == 0
    assert subprocess.run(on(t, probe), timeout=10).returncode == 1  # no AUTH: not ready
    # The documented failover by hand (kubectl exec's command, run here on the replica).
    block = doc_block("sh", "kubectl exec bloomd-1")
    line = block.split("kubectl exec bloomd-1 -- ", 1)[1].split("\nkubectl")[0]
    words = shlex.split(line.replace("\\\n", " "))
    out = subprocess.run(on(r, words), capture_output=True, text=True, timeout=10)
    assert out.stdout.strip() == "OK", out
    assert subprocess.run(on(r, probe), timeout=10).returncode == 0  # promoted: ready


# ---- a link that drops in the middle of a full sync ----

def capture_full_sync(daemon_factory):
    """A real primary's full sync of two filters, as bytes after the FULLSYNC line:
    returns (FULLSYNC line, [(FILTER line, data)]) and the keys in them."""
    p = start(daemon_factory)
    ks = keys("fs", 3000)
    with p.client() as pc:
        assert pc.cmd("CREATE one capacity=10000") == "CREATED"
        assert pc.cmd("CREATE two kind=expandable capacity=10000") == "CREATED"
        pc.add("one", ks)
        pc.add("two", ks)
    s = socket.create_connection((p.host, p.port), timeout=10)
    s.sendall(b"PSYNC ? 0\r\n")
    buf = b""

    def line():
        nonlocal buf
        while b"\r\n" not in buf:
            buf += s.recv(65536)
        out, _, buf = buf.partition(b"\r\n")
        return out
    head = line()
    # (a later protocol may add fields after these)
    assert re.fullmatch(rb"FULLSYNC [0-9a-f]{40} \d+ 2( \d+)?", head), head
    filters = []
    for _ in range(2):
        fl = line()
        n = int(fl.split()[2])
        while len(buf) < n:
            buf += s.recv(65536)
        filters.append((fl, buf[:n]))
        buf = buf[n:]
    s.close()
    p.stop()
    return head, filters, ks


def test_link_dropped_mid_full_sync_starts_over(daemon_factory):
    head, filters, ks = capture_full_sync(daemon_factory)
    whole = head + b"\r\n" + b"".join(fl + b"\r\n" + data for fl, data in filters)
    cut_at = len(whole) - len(filters[1][1]) // 2  # inside the second filter's bytes

    class FakeSync(FakePrimary):
        def run(self):
            while not self.stop.is_set():
                try:
                    c, _ = self.sock.accept()
                except socket.timeout:
                    continue
                except OSError:
                    return
                self.conns.append(c)
                buf = b""
                while b"\r\n" not in buf:
                    chunk = c.recv(4096)
                    if not chunk:
                        break
                    buf += chunk
                self.psyncs.append(buf.split(b"\r\n")[0])
                try:
                    if len(self.conns) == 1:
                        c.sendall(whole[:cut_at])
                        time.sleep(0.3)
                        c.close()  # the link drops in the middle of the second filter
                    else:
                        c.sendall(whole)
                except OSError:
                    pass
    fake = FakeSync(None)
    try:
        r = start(daemon_factory, ["--replica-of", "127.0.0.1:%d" % fake.port])
        with r.client() as rc:
            wait_for("a second connection", lambda: len(fake.psyncs) >= 2, 20)
            # After half a full sync the replica asks for a full one again.
            assert fake.psyncs[1].startswith(b"PSYNC ? "), fake.psyncs
            wait_for("the second sync done", lambda: role(rc)["link"] == "up", 20)
            assert sorted(rc.names()) == ["one", "two"]
            assert all(rc.check("one", ks)) and all(rc.check("two", ks))
            assert role(rc)["offset"] == int(head.split()[2])
    finally:
        fake.close()


def test_changes_made_while_a_full_sync_is_sent_land_once(daemon_factory):
    """A full sync is encoded filter by filter after its offset, and the records after the
    offset follow: changes made in between must end up exactly as on the primary. The big
    first filter (names sort) holds the sync back while the others change; the stream is
    captured by a raw replica, then replayed to a real one by a fake primary."""
    p = start(daemon_factory, binary=REL_BIN)
    with p.client(timeout=60) as pc:
        assert pc.cmd("CREATE aaa capacity=10000000") == "CREATED"
        pc.add("aaa", keys("big", 300000), chunk=1000)
        for req in ("CREATE zu capacity=1000", "CREATE za capacity=1000",
                    "CREATE zi capacity=1000", "CREATE zd capacity=1000",
                    "CREATE ze kind=expandable capacity=1000"):
            assert pc.cmd(req) == "CREATED", req
        for req in ("ADD za x", "ADD zi x w", "ADD zd old", "ADD ze k1 k2 k3"):
            assert pc.cmd(req).startswith("ADDED"), req
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
        s.connect((p.host, p.port))
        s.sendall(b"PSYNC ? 0\r\n")
        got = b""
        while b"\r\n" not in got:
            got += s.recv(1)
        for req, want in (("UNION zu za", "OK"), ("INTERSECT zi za", "OK"),
                          ("CLEAR za", "OK"), ("ADD za y", "ADDED 1"),
                          ("DROP zd", "DELETED"), ("CREATE zd capacity=500", "CREATED"),
                          ("ADD zd new", "ADDED 1"), ("DELETE ze k2", "REMOVED 1"),
                          ("ADD ze k4", "ADDED 1")):
            assert pc.cmd(req) == want, req
        top = role(pc)["offset"]
        probe = ["x", "y", "w", "old", "new", "k1", "k2", "k3", "k4"]
        want = {n: pc.cmd("CHECK %s %s" % (n, " ".join(probe))) for n in
                ("zu", "za", "zi", "zd", "ze")}
        want_info = pc.stats("INFO zd")["capacity"]
    s.settimeout(2)  # the primary sends nothing more once the records are out
    try:
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            got += chunk
    except socket.timeout:
        pass
    s.close()
    assert got.startswith(b"FULLSYNC ")
    fake = FakePrimary(lambda n: b"")  # its own accept loop stopped: run() below answers

    def run():
        c, _ = fake.sock.accept()
        fake.conns.append(c)
        c.recv(4096)
        c.sendall(got)
    fake.stop.set()
    fake.thread.join(5)
    fake.sock.settimeout(20)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        r = start(daemon_factory, ["--replica-of", "127.0.0.1:%d" % fake.port])
        with r.client() as rc:
            wait_for("the replica at the primary's offset",
                     lambda: role(rc) == {"role": "replica", "primary": "127.0.0.1:%d" % fake.port,
                                          "link": "up", "offset": top}, 30)
            for n, w in want.items():
                assert rc.cmd("CHECK %s %s" % (n, " ".join(probe))) == w, n
            assert rc.stats("INFO zd")["capacity"] == want_info
    finally:
        t.join(10)
        fake.close()


def test_replica_restart_catches_up(daemon_factory):
    p = start(daemon_factory)
    r = replica_of(daemon_factory, p)
    with p.client() as pc, r.client() as rc:
        assert pc.cmd("CREATE f capacity=50000") == "CREATED"
        pc.add("f", keys("one", 10000), chunk=1000)
        wait_caught_up(pc, [rc])
    r.stop()
    with p.client() as pc:
        pc.add("f", keys("two", 10000), chunk=1000)  # while the replica is away
        r.start()
        with r.client() as rc:
            wait_caught_up(pc, [rc])
            assert all(rc.check("f", keys("one", 10000) + keys("two", 10000), chunk=1000))
            assert rc.cmd("ADD f x").startswith("CLIENT_ERROR read-only replica of")


def test_min_replica_acks_holds_memcached_replies(daemon_factory):
    pytest.importorskip("pymemcache", reason="python3-pymemcache is not installed")
    from pymemcache.client.base import Client as McClient
    from pymemcache.exceptions import MemcacheServerError
    mport = free_port()
    p = start(daemon_factory, ["--min-replica-acks", "1", "--memcache-port", str(mport)])
    mc = McClient(("127.0.0.1", mport), default_noreply=False, connect_timeout=10, timeout=10)
    with pytest.raises(MemcacheServerError, match="not enough replicas"):
        mc.add("f:a", b"1")
    r = replica_of(daemon_factory, p)
    with p.client() as pc, r.client() as rc:
        wait_for("the replica counted", lambda: role(pc)["replicas"] == 1)
        assert pc.cmd("CREATE f") == "CREATED"
        for i in range(300):
            assert mc.add("f:k%d" % i, b"1") is True
            assert rc.cmd("CHECK f k%d" % i) == "1", i  # on the replica when acknowledged
        # Pipelined raw adds: every STORED reply is on the replica when read.
        with socket.create_connection(("127.0.0.1", mport), timeout=10) as s:
            s.sendall(b"".join(b"add f:p%d 0 0 1\r\nx\r\n" % i for i in range(200)))
            got = b""
            end = time.monotonic() + 20
            while got.count(b"\r\n") < 200 and time.monotonic() < end:
                got += s.recv(65536)
        assert got.split(b"\r\n")[:200] == [b"STORED"] * 200, got[:200]
        assert rc.check("f", ["p%d" % i for i in range(200)]) == [True] * 200
    mc.close()


def test_an_ack_beyond_what_was_sent_does_not_count(daemon_factory):
    """min-replica-acks counts a replica for a record only once the record was sent to it:
    a feed acknowledging an offset it was never sent (a confused or hostile peer) must not
    release a reply."""
    p = start(daemon_factory, ["--min-replica-acks", "1", "--replica-ack-timeout", "300"])
    s = socket.create_connection((p.host, p.port), timeout=10)
    s.sendall(b"PSYNC ? 0\r\n")
    buf = b""
    while b"\r\n" not in buf:
        buf += s.recv(4096)
    assert buf.startswith(b"FULLSYNC "), buf
    with p.client() as pc:
        wait_for("the raw feed counted", lambda: role(pc)["replicas"] == 1)
        s.sendall(b"REPLCONF ACK 1000000\r\n")
        time.sleep(0.2)
        assert pc.cmd("CREATE f").startswith(
            "SERVER_ERROR not enough replicas acknowledged the change in time"), p.log()[-2000:]
        # An honest acknowledgement of what it was sent releases the next reply.
        t = threading.Timer(0.1, lambda: s.sendall(b"REPLCONF ACK 2\r\n"))
        t.start()
        assert pc.cmd("ADD f k") == "ADDED 1"
        t.join()
    s.close()


@pytest.mark.parametrize("durability", ["everysec", "always"])
def test_every_change_waits_for_the_replica(daemon_factory, durability):
    """With min-replica-acks 1 and the replica stopped (SIGSTOP), no change is answered as
    done: each one gets the ack timeout's SERVER_ERROR, DROP included; reads answer at once."""
    p = start(daemon_factory, ["--min-replica-acks", "1", "--replica-ack-timeout", "200",
                               "--durability", durability])
    r = replica_of(daemon_factory, p)
    late = "SERVER_ERROR not enough replicas acknowledged the change in time"
    with p.client() as pc, r.client() as rc:
        wait_for("the replica counted", lambda: role(pc)["replicas"] == 1)
        for req in ("CREATE a", "CREATE b", "CREATE c", "CREATE e kind=expandable",
                    "ADD a x", "ADD b x", "ADD e x y"):
            assert not pc.cmd(req).startswith("SERVER_ERROR"), req
        wait_caught_up(pc, [rc])
        r.proc.send_signal(signal.SIGSTOP)
        try:
            for req in ("CREATE d", "ADD a k", "CHECKADD a k2", "UNION u a", "INTERSECT a b",
                        "CLEAR b", "DELETE e x", "DROP c"):
                t0 = time.monotonic()
                assert pc.cmd(req).startswith(late), req
                assert time.monotonic() - t0 >= 0.15, req
            t0 = time.monotonic()
            assert pc.cmd("CHECK a x") == "1" and time.monotonic() - t0 < 0.15
        finally:
            r.proc.send_signal(signal.SIGCONT)
        wait_caught_up(pc, [rc])
        assert pc.cmd("DROP a") == "DELETED"
        assert "a" not in rc.names()  # acknowledged: gone on the replica too


def test_a_replica_of_a_replica_follows(daemon_factory):
    p = start(daemon_factory)
    r1 = replica_of(daemon_factory, p)
    with r1.client() as c1:
        wait_for("the first link up", lambda: role(c1)["link"] == "up")
    r2 = replica_of(daemon_factory, r1)  # chained: r1 feeds r2 what it applies
    with p.client() as pc, r1.client() as c1, r2.client() as c2:
        wait_for("the chained link up", lambda: role(c2)["link"] == "up")
        assert role(c1)["role"] == "replica"
        assert pc.cmd("CREATE f capacity=20000") == "CREATED"
        pc.add("f", keys("k", 5000))
        wait_caught_up(pc, [c1, c2])
        assert all(c2.check("f", keys("k", 5000)))
        assert c2.cmd("ADD f x") == "CLIENT_ERROR read-only replica of %s:%d" % (r1.host, r1.port)
        # The middle one promoted: the chain keeps following it.
        assert c1.cmd("REPLICAOF NO ONE") == "OK"
        assert c1.cmd("ADD f after") == "ADDED 1"
        wait_caught_up(c1, [c2])
        assert c2.check("f", ["after"]) == [True]


def test_old_primary_back_as_replica_takes_the_new_primarys_filters(daemon_factory):
    """What the docs say: the old primary, back with --replica-of the new one, sends its
    filters to the new one first (a key it acknowledged that never reached a replica is
    merged in), then takes the new primary's filters in a full sync (test_repl_rejoin.py
    has the rest)."""
    p = start(daemon_factory, ["--durability", "always"])
    r = replica_of(daemon_factory, p)
    with p.client() as pc, r.client() as rc:
        assert pc.cmd("CREATE f") == "CREATED"
        assert pc.cmd("ADD f both") == "ADDED 1"
        wait_caught_up(pc, [rc])
    r.stop()
    with p.client() as pc:
        assert pc.cmd("ADD f only-old") == "ADDED 1"  # acknowledged, on disk, not replicated
    p.kill()
    r.start()
    with r.client() as rc:
        assert rc.cmd("CHECK f both only-old") == "1 0"
        assert rc.cmd("REPLICAOF NO ONE") == "OK"
        assert rc.cmd("ADD f only-new") == "ADDED 1"
    p.args = ["--durability", "always", "--replica-of", "%s:%d" % (r.host, r.port)]
    p.start()  # same data dir: it still holds only-old until the full sync
    with p.client() as pc, r.client() as rc:
        wait_caught_up(rc, [pc])
        assert pc.cmd("CHECK f both only-new only-old") == "1 1 1"
        assert rc.cmd("CHECK f only-old") == "1"
    assert "full sync done" in p.log()


def test_ipv6_primary(daemon_factory):
    try:
        socket.socket(socket.AF_INET6).bind(("::1", 0))
    except OSError as e:
        pytest.skip("no IPv6 loopback here: %s" % e)
    p = start(daemon_factory, ["--bind", "::1"])
    r = start(daemon_factory, ["--replica-of", "[::1]:%d" % p.port])
    with Client("::1", p.port) as pc, r.client() as rc:
        assert pc.cmd("CREATE f") == "CREATED"
        wait_caught_up(pc, [rc])
        assert role(rc)["primary"] == "[::1]:%d" % p.port
        assert rc.cmd("ADD f k") == "CLIENT_ERROR read-only replica of [::1]:%d" % p.port
        assert rc.cmd("REPLICAOF ::1 %d" % p.port) == "OK"
        wait_caught_up(pc, [rc])
        assert role(rc)["primary"] == "[::1]:%d" % p.port


def test_restore_reaches_the_replica(daemon_factory):
    """A RESTORE record names the filter, not its bits: the primary cuts its replicas off
    and they take the restored filter in a full sync."""
    from test_dump_restore import dump, restore
    src = start(daemon_factory)
    with src.client() as sc:
        assert sc.cmd("CREATE moved capacity=20000") == "CREATED"
        sc.add("moved", ["m%d" % i for i in range(5000)])
        data = dump(sc, "moved")
    p = start(daemon_factory)
    r = replica_of(daemon_factory, p)
    with p.client() as pc, r.client() as rc:
        wait_caught_up(pc, [rc])
        assert restore(pc, "moved", data) == "RESTORED"
        pc.add("moved", ["after%d" % i for i in range(100)])
        wait_caught_up(pc, [rc])
        assert all(rc.check("moved", ["m%d" % i for i in range(5000)]))
        assert all(rc.check("moved", ["after%d" % i for i in range(100)]))
