"""The RESP listener (issue 28): redis-py's bf() API with the Python types it returns,
Debian's redis-cli one-shot and --pipe, inline commands over a raw socket, pipelined and
split writes, malformed frames, AUTH, HELLO 3, and create-on-first-use.

The server's interface: `--redis-port <n>`; RedisBloom 2.4's BF.* replies and error words.
Only missing optional tools skip (python3-redis, redis-tools), with the reason. Every load
loop is bounded in count and in time.
"""

import shutil
import socket
import subprocess
import time

import pytest

from conftest import REPO
from httputil import free_port, wait_port

redis = pytest.importorskip("redis", reason="python3-redis is not installed")

def resp_daemon(daemon_factory, args=(), env=None):
    """A bloomd with the RESP listener on a free port; returns (daemon, port)."""
    port = free_port()
    d = daemon_factory(args=["--redis-port", str(port)] + list(args), env=env)
    wait_port(port)
    return d, port


def rclient(port, **kw):
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=30, **kw)


class Raw:
    """A raw socket speaking bytes, reading replies by exact length or until a deadline."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def read(self, n, deadline=10.0):
        end = time.monotonic() + deadline
        while len(self.buf) < n and time.monotonic() < end:
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def expect(self, want):
        got = self.read(len(want))
        assert got == want, (got, want)

    def closed(self, deadline=10.0):
        """True if the server closes the connection (after any pending bytes)."""
        self.sock.settimeout(deadline)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
                self.buf += chunk
        except socket.timeout:
            return False

    def close(self):
        self.sock.close()


@pytest.fixture
def resp(daemon_factory):
    return resp_daemon(daemon_factory)


def test_redis_py_bf_round_trip(resp):
    d, port = resp
    r = rclient(port)
    bf = r.bf()
    assert r.ping() is True
    assert bf.create("users", 0.001, 1000) is True
    with pytest.raises(redis.ResponseError, match="item exists"):
        bf.create("users", 0.001, 1000)
    assert bf.add("users", "alice") == 1
    assert bf.add("users", "alice") == 0
    assert bf.madd("users", "alice", "bob", "carol") == [0, 1, 1]
    assert bf.exists("users", "bob") == 1
    assert bf.exists("users", "mallory") == 0
    assert bf.mexists("users", "alice", "mallory", "carol") == [1, 0, 1]
    assert bf.exists("nosuch", "x") == 0
    assert bf.mexists("nosuch", "x", "y") == [0, 0]
    info = bf.info("users")
    assert isinstance(info.capacity, int) and info.capacity >= 1000
    assert isinstance(info.size, int) and info.size > 0
    assert info.filterNum == 1
    assert info.insertedNum == 3
    assert info.expansionRate == 2
    assert r.execute_command("BF.CARD", "users") == 3
    assert r.execute_command("BF.CARD", "nosuch") == 0
    plain = rclient(port)  # bf() installs BF.INFO's parser on r; the selector form has none
    assert plain.execute_command("BF.INFO", "users", "ITEMS") == [3]
    assert plain.execute_command("BF.INFO", "users", "CAPACITY") == [info.capacity]
    with pytest.raises(redis.ResponseError, match="not found"):
        bf.info("nosuch")
    # Binary items, spaces and CRLF inside: bulk strings carry any byte.
    assert bf.madd("users", b"a b", b"\r\n", b"\x00\xff", b"") == [1, 1, 1, 1]
    assert bf.mexists("users", b"a b", b"\r\n", b"\x00\xff", b"", b"a") == [1, 1, 1, 1, 0]


def test_redis_py_insert_and_autocreate(resp):
    d, port = resp
    r = rclient(port)
    bf = r.bf()
    assert bf.insert("ins", ["a", "b", "a"], capacity=500, error=0.01, expansion=4) == [1, 1, 0]
    info = bf.info("ins")
    assert info.expansionRate == 4
    assert info.capacity >= 500
    with pytest.raises(redis.ResponseError, match="not found"):
        bf.insert("missing", ["a"], noCreate=True)
    assert bf.insert("ins", ["c"], noCreate=True) == [1]
    # BF.ADD creates with RedisBloom's defaults: capacity 100, expansion 2.
    assert bf.add("auto", "x") == 1
    info = bf.info("auto")
    assert info.capacity == 100 and info.expansionRate == 2
    # Grows past its capacity with no false negative.
    items = ["k%d" % i for i in range(2000)]
    for i in range(0, len(items), 200):
        assert bf.madd("auto", *items[i:i + 200]).count(1) >= 190
    assert all(v == 1 for v in bf.mexists("auto", *items))
    assert bf.info("auto").filterNum > 1


def refused_adds(bf, name, prefix, n=20):
    """BF.ADDs n keys never added to a full non-scaling filter: each is refused, or reads
    present (a false positive, 1% here, answered 0); returns how many were refused."""
    refused = 0
    for i in range(n):
        try:
            assert bf.add(name, "%s-%d" % (prefix, i)) == 0
        except redis.ResponseError as e:
            assert str(e) == "non scaling filter is full"
            refused += 1
    return refused


def test_redis_py_nonscaling(resp):
    """NONSCALING as RedisBloom's: one stage, full at its capacity; new keys past it get
    'non scaling filter is full', keys it holds still answer 0; it stays so after a restart
    and is CREATE's growth=none on the text port."""
    d, port = resp
    r = rclient(port)
    bf = r.bf()
    assert bf.create("fixed", 0.01, 1000, noScale=True)
    keys = ["k%d" % i for i in range(3000)]
    new = 0
    full_at = None
    for i in range(0, len(keys), 100):
        try:
            new += bf.madd("fixed", *keys[i:i + 100]).count(1)
        except redis.ResponseError as e:
            assert "non scaling filter is full" in str(e)
            full_at = i
            break
    assert full_at is not None and new <= 1000
    assert r.execute_command("BF.CARD", "fixed") == 1000
    assert bf.add("fixed", keys[0]) == 0  # a key it holds: no error
    assert refused_adds(bf, "fixed", "never-added-x") >= 17
    assert bf.info("fixed").expansionRate is None
    raw = Raw(port)  # redis-py parses every BF.INFO reply as the whole map
    raw.send(b"*3\r\n$7\r\nBF.INFO\r\n$5\r\nfixed\r\n$9\r\nEXPANSION\r\n")
    raw.expect(b"*1\r\n$-1\r\n")
    raw.close()
    assert bf.info("fixed").filterNum == 1
    assert all(v == 1 for v in bf.mexists("fixed", *keys[:full_at]))
    with pytest.raises(redis.ResponseError, match="Nonscaling filters cannot expand"):
        r.execute_command("BF.RESERVE", "x", "0.01", "100", "NONSCALING", "EXPANSION", "2")
    with pytest.raises(redis.ResponseError, match="non scaling filter is full"):
        bf.insert("ins", ["i%d" % i for i in range(50)], capacity=10, noScale=True)
    assert r.execute_command("BF.CARD", "ins") == 10
    c = d.client()
    assert "STAT growth none" in c.block("INFO fixed")
    assert c.cmd("CREATE t growth=none capacity=5") == "CREATED"
    replies = [c.cmd("CHECKADD t key%d" % i) for i in range(12)]
    assert "CLIENT_ERROR non scaling filter is full" in replies
    assert "growth=none is for the blocked kind" in c.cmd("CREATE w window=1h growth=none")
    d.restart()
    r = rclient(port)
    assert refused_adds(r.bf(), "fixed", "never-added-y") >= 17
    assert r.execute_command("BF.CARD", "fixed") == 1000
    assert r.bf().info("fixed").expansionRate is None
    # Refused keys are not journaled: after a crash the journal replays cleanly to the
    # same full filter, and a client retrying against it adds nothing to replay.
    refused_adds(r.bf(), "fixed", "retry", n=200)
    d.kill()
    d.start()
    r = rclient(port)
    assert r.execute_command("BF.CARD", "fixed") == 1000
    assert refused_adds(r.bf(), "fixed", "never-added-z") >= 17
    assert " ERROR " not in d.log(), d.log()


def test_redis_py_errors(resp):
    d, port = resp
    r = rclient(port)
    with pytest.raises(redis.ResponseError, match="^unknown command 'NOSUCH'"):
        r.execute_command("NOSUCH", "a")
    with pytest.raises(redis.ResponseError,
                       match="wrong number of arguments for 'bf.add' command"):
        r.execute_command("BF.ADD", "f")
    with pytest.raises(redis.ResponseError, match="bad error rate"):
        r.execute_command("BF.RESERVE", "f", "x", "100")
    with pytest.raises(redis.ResponseError, match="invalid filter name"):
        r.execute_command("BF.ADD", "../etc", "x")
    with pytest.raises(redis.ResponseError, match="DB index is out of range"):
        r.execute_command("SELECT", "1")
    assert r.execute_command("SELECT", "0") in (True, b"OK")
    assert r.execute_command("BF.ADD", "f", "x") == 1  # the connection still serves


def test_keyspace_commands(resp):
    d, port = resp
    r = rclient(port)
    for name in ("a1", "a2", "b1"):
        r.bf().add(name, "x")
    assert r.dbsize() == 3
    assert r.exists("a1", "a2", "zz") == 2
    assert r.type("a1") == b"MBbloom--"
    assert r.type("zz") == b"none"
    assert sorted(r.keys("a*")) == [b"a1", b"a2"]
    assert sorted(r.scan_iter(match="*1", count=1)) == [b"a1", b"b1"]
    assert r.delete("a1", "zz") == 1
    assert r.unlink("a2") == 1
    assert r.delete("a2") == 0
    assert r.dbsize() == 1
    info = r.info()
    assert info["redis_mode"] == "standalone"
    assert info["connected_clients"] >= 1
    assert info["role"] == "master"
    assert info["db0"]["keys"] == 1
    assert "used_memory" in r.info("memory")
    assert r.client_setname("worker-1") is True
    assert r.client_getname() in ("worker-1", b"worker-1")
    assert isinstance(r.client_id(), int)
    assert r.echo("hi") == b"hi"
    assert r.command_count() > 10


def test_inline_and_pipelined_raw(resp):
    d, port = resp
    s = Raw(port)
    s.send(b"PING\r\n")
    s.expect(b"+PONG\r\n")
    s.send(b"BF.MADD f a b\r\nBF.MEXISTS f a c\n")
    s.expect(b"*2\r\n:1\r\n:1\r\n*2\r\n:1\r\n:0\r\n")
    # 300 pipelined one-key BF.ADDs of one filter (merged into runs), then each split
    # write: one byte at a time. The filter is sized so that no fresh key of the 150 reads
    # "may exist" (at BF.ADD's default of 1% in 100, one run in four had one).
    s.send(b"BF.RESERVE g 0.000001 1000\r\n")
    s.expect(b"+OK\r\n")
    req = b"".join(b"*3\r\n$6\r\nBF.ADD\r\n$1\r\ng\r\n$%d\r\n%s\r\n" % (len(k), k)
                   for k in (b"k%d" % (i % 150) for i in range(300)))
    s.send(req)
    s.expect(b":1\r\n" * 150 + b":0\r\n" * 150)
    frame = b"*3\r\n$9\r\nBF.EXISTS\r\n$1\r\ng\r\n$3\r\nk10\r\n"
    for i in range(len(frame)):
        s.send(frame[i:i + 1])
        time.sleep(0.001)
    s.expect(b":1\r\n")
    s.send(b"*1\r\n$4\r\nQUIT\r\n")
    s.expect(b"+OK\r\n")
    assert s.closed()
    s.close()


@pytest.mark.parametrize("frame,why", [
    (b"*1\r\n$-5\r\n", b"invalid bulk length"),
    (b"*1\r\n$1000000000\r\n", b"invalid bulk length"),
    (b"*1\r\n*1\r\n$1\r\na\r\n", b"expected '$'"),
    (b"*x\r\n", b"invalid multibulk length"),
    (b"*3000000\r\n", b"invalid multibulk length"),
])
def test_malformed_frames_close(resp, frame, why):
    d, port = resp
    s = Raw(port)
    s.send(b"PING\r\n" + frame)
    s.expect(b"+PONG\r\n")
    assert s.closed()
    assert s.buf.startswith(b"-ERR Protocol error: " + why), s.buf
    s.close()
    assert rclient(port).ping() is True  # the daemon lives on


def test_auth(daemon_factory):
    d, port = resp_daemon(daemon_factory, env={"BLOOMD_AUTH_TOKEN": "s3cret"})
    r = rclient(port)
    with pytest.raises(redis.AuthenticationError):
        r.bf().add("f", "x")
    # Redis 7's word for a bad password; this redis-py maps it to a plain ResponseError.
    with pytest.raises((redis.AuthenticationError, redis.ResponseError), match="WRONGPASS"):
        rclient(port, password="wrong").ping()
    r = rclient(port, password="s3cret")
    assert r.bf().add("f", "x") == 1
    r = rclient(port, username="default", password="s3cret")
    assert r.bf().exists("f", "x") == 1
    s = Raw(port)
    s.send(b"HELLO 3\r\n")
    assert s.read(7) == b"-NOAUTH"


def test_hello3_maps(resp):
    d, port = resp
    s = Raw(port)
    s.send(b"HELLO 3\r\n")
    head = s.read(2)
    assert head == b"%7", head  # a RESP3 map
    s.buf = b""
    s.sock.settimeout(2)
    s.send(b"BF.ADD f x\r\nBF.INFO f\r\n")
    time.sleep(0.3)
    data = s.sock.recv(65536)
    assert data.startswith(b":1\r\n%5\r\n$8\r\nCapacity\r\n:100\r\n"), data
    s.close()


def redis_cli():
    path = shutil.which("redis-cli")
    if path is None:
        pytest.skip("redis-cli is not installed (Debian redis-tools)")
    return path


def test_redis_cli_one_shot_and_pipe(resp, tmp_path):
    d, port = resp
    cli = redis_cli()
    out = subprocess.run([cli, "-p", str(port), "BF.ADD", "f", "x"], capture_output=True,
                         timeout=30, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "1", out
    out = subprocess.run([cli, "-p", str(port), "BF.EXISTS", "f", "x"], capture_output=True,
                         timeout=30, text=True)
    assert out.stdout.strip() == "1", out
    n = 100_000
    path = tmp_path / "mass.resp"
    with open(path, "wb") as f:
        for i in range(n):
            k = b"m%d" % i
            f.write(b"*3\r\n$6\r\nBF.ADD\r\n$4\r\nmass\r\n$%d\r\n%s\r\n" % (len(k), k))
    with open(path, "rb") as f:
        out = subprocess.run([cli, "-p", str(port), "--pipe"], stdin=f, capture_output=True,
                             timeout=240, text=True)
    assert out.returncode == 0, out
    assert "errors: 0, replies: %d" % n in out.stdout, out.stdout
    assert rclient(port).execute_command("BF.CARD", "mass") >= n * 0.99


def test_replica_refuses_writes_with_readonly(daemon_factory):
    primary = daemon_factory()
    d, port = resp_daemon(daemon_factory,
                          env={"BLOOMD_REPLICA_OF": "127.0.0.1:%d" % primary.port})
    r = rclient(port)
    with pytest.raises(redis.ReadOnlyError):
        r.bf().add("f", "x")  # the auto-create is the refused change
    with pytest.raises(redis.ReadOnlyError):
        r.bf().create("g", 0.01, 100)
    with pytest.raises(redis.ReadOnlyError):
        r.bf().loadchunk("h", 1, b"bloomdSC\1\0\0\0\0\0\0\0" + (4096).to_bytes(8, "little"))
    assert r.bf().exists("f", "x") == 0  # reads are served
    s = Raw(port)
    s.send(b"BF.MADD f a\r\n")
    s.expect(b"-READONLY You can't write against a read only replica.\r\n")
    info = r.info("replication")
    assert info["role"] == "slave"
    assert info["master_port"] == primary.port


def loadgen():
    import os
    path = os.environ.get("LOADGEN", str(REPO / "build" / "rel" / "bench" / "loadgen"))
    if not os.access(path, os.X_OK):
        pytest.skip("no load generator at %s (make build/rel/bench/loadgen)" % path)
    return path


@pytest.mark.parametrize("command,batch", [("BF.MADD", 100), ("BF.ADD", 1)])
def test_loadgen_checks_every_reply(resp, command, batch):
    """bench/loadgen's RESP mode against the daemon: every reply checked, no false negative
    (it exits 1 on one), pipelined runs and growth past the first stage included."""
    d, port = resp
    out = subprocess.run([loadgen(), "--proto", "redis", "--command", command, "--port",
                          str(port), "--batch", str(batch), "--keys", "60000", "--conns", "2",
                          "--depth", "16", "--name", "lg", "--duration", "60"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr + out.stdout
    assert "complete=1" in out.stdout and " fn=0 " in out.stdout, out.stdout


def test_replies_held_for_the_journal(daemon_factory):
    """durability always: every change's reply waits for its record on disk (parked), and
    pipelined replies still come back in order with their own shapes."""
    d, port = resp_daemon(daemon_factory, args=["--durability", "always"])
    r = rclient(port)
    p = r.pipeline(transaction=False)
    p.execute_command("BF.RESERVE", "j", "0.01", "1000")
    p.execute_command("BF.ADD", "j", "a")
    p.execute_command("BF.MADD", "j", "a", "b")
    p.execute_command("BF.EXISTS", "j", "b")
    p.execute_command("BF.INSERT", "j2", "ITEMS", "x")
    p.execute_command("DEL", "j2")
    p.execute_command("BF.ADD", "j", "c")
    assert p.execute() == [b"OK", 1, [0, 1], 1, [1], 1, 1]
    d.restart()
    assert rclient(port).bf().mexists("j", "a", "b", "c", "z") == [1, 1, 1, 0]


# ---- BF.SCANDUMP / BF.LOADCHUNK ----

SCAN_KINDS = {
    # name: (CREATE options, keys): each grows past its first stage or table
    "grown": ("capacity=2000 error=0.01", 20000),
    "windowed": ("capacity=5000 window=1h generations=3", 8000),
    "expandable": ("capacity=2000 kind=expandable", 15000),
}


def scandump(r, key, max_calls=100000, deadline=120.0):
    """redis-py's documented dump loop: the (iter, data) chunks, header first."""
    it, chunks, end = 0, [], time.monotonic() + deadline
    for _ in range(max_calls):
        assert time.monotonic() < end, "BF.SCANDUMP %s did not end" % key
        it, data = r.bf().scandump(key, it)
        if it == 0:
            assert data in (b"", None), data
            return chunks
        chunks.append((it, data))
    raise AssertionError("BF.SCANDUMP %s gave more than %d chunks" % (key, max_calls))


def all_present(r, key, keys, batch=5000):
    """BF.MEXISTS of every key, in batches under max_line."""
    return all(all(r.bf().mexists(key, *keys[i:i + batch])) for i in range(0, len(keys), batch))


def loadchunks(r, key, chunks):
    for it, data in chunks:
        assert r.bf().loadchunk(key, it, data) in (True, b"OK", "OK")


def add_keys(d, name, opts, keys):
    with d.client() as c:
        assert c.cmd("CREATE %s %s" % (name, opts)) == "CREATED"
        c.add(name, keys)


def test_scandump_loadchunk_every_kind(daemon_factory):
    (a, pa), (b, pb) = resp_daemon(daemon_factory), resp_daemon(daemon_factory)
    ra, rb = rclient(pa), rclient(pb)
    for name, (opts, n) in SCAN_KINDS.items():
        keys = ["%s-%d" % (name, i) for i in range(n)]
        add_keys(a, name, opts, keys)
        chunks = scandump(ra, name)
        assert len(chunks) >= 2, name  # the header, then the file
        assert chunks[0][0] == 1 and chunks[0][1][:8] == b"bloomdSC"
        # iter is the byte offset + 1 after each chunk: the file's bytes, in order.
        at = 1
        for it, data in chunks[1:]:
            assert it == at + len(data), (name, it, at, len(data))
            at = it
        loadchunks(rb, name + "-copy", chunks)
        assert all_present(rb, name + "-copy", keys), name
        assert rb.execute_command("BF.CARD", name + "-copy") == ra.execute_command("BF.CARD", name)
        # The copy is a filter like any other.
        assert rb.bf().add(name + "-copy", "fresh-key") == 1
    # LOADCHUNK's header on an existing key: RedisBloom's words.
    chunks = scandump(ra, "grown")
    with pytest.raises(redis.ResponseError, match="item exists"):
        rb.bf().loadchunk("grown-copy", 1, chunks[0][1])
    with pytest.raises(redis.ResponseError, match="not found"):
        ra.bf().scandump("missing", 0)


def test_scandump_bigger_than_one_chunk(daemon_factory):
    """A filter of several MB with max_line 1 MiB: many chunks, each under max_line."""
    (a, pa), (b, pb) = resp_daemon(daemon_factory), resp_daemon(daemon_factory)
    ra, rb = rclient(pa), rclient(pb)
    keys = ["big-%d" % i for i in range(50000)]
    add_keys(a, "big", "capacity=4000000 error=0.001", keys)
    chunks = scandump(ra, "big")
    total = int.from_bytes(chunks[0][1][16:24], "little")
    sizes = [len(d) for _, d in chunks[1:]]
    assert total > 3 * (1 << 20), total
    assert sum(sizes) == total and len(sizes) >= 4, sizes
    assert max(sizes) <= (1 << 20) - 1024, max(sizes)
    loadchunks(rb, "big", chunks)
    assert all_present(rb, "big", keys)
    # The same bytes DUMP gives on the text port.
    with a.client() as c:
        head = c.cmd("DUMP big")
        assert head == "DUMP %d" % total, head


def test_loadchunk_corrupted_installs_nothing(daemon_factory):
    (a, pa), (b, pb) = resp_daemon(daemon_factory), resp_daemon(daemon_factory)
    ra, rb = rclient(pa), rclient(pb)
    keys = ["k-%d" % i for i in range(20000)]
    add_keys(a, "f", "capacity=2000 error=0.01", keys)
    chunks = scandump(ra, "f")
    assert len(chunks) >= 2

    def load_fails(key, bad):
        with pytest.raises(redis.ResponseError) as e:
            for it, data in bad:
                rb.bf().loadchunk(key, it, data)
        assert rb.exists(key) == 0 and rb.execute_command("BF.CARD", key) == 0, key
        return str(e.value)

    # One byte flipped in the middle of the file: the decode refuses it at the last chunk.
    it, data = chunks[-1]
    mid = len(data) // 2
    flipped = chunks[:-1] + [(it, data[:mid] + bytes([data[mid] ^ 0x40]) + data[mid + 1:])]
    assert "bad dump" in load_fails("flipped", flipped)
    # A chunk cut short, out of order, or without its header.
    it, data = chunks[1]
    assert "bad data chunk" in load_fails("short", [chunks[0], (it, data[:-1])])
    assert "bad data chunk" in load_fails("skipped", [chunks[0], (it + 5, data)])
    assert "bad data chunk" in load_fails("headless", chunks[1:])
    assert "bad data chunk" in load_fails("notheader", [(1, b"x" * 24)])
    # A header over max_memory is refused before any byte of it is reserved.
    huge = b"bloomdSC\1\0\0\0\0\0\0\0" + (1 << 50).to_bytes(8, "little")
    assert "dump too large" in load_fails("huge", [(1, huge)])
    # After all that, a good load of the same chunks installs.
    loadchunks(rb, "flipped", chunks)
    assert all_present(rb, "flipped", keys)


def test_loadchunk_restarts_and_limits(daemon_factory):
    # A small max_line on the dumping side: 15 KiB chunks, several of them.
    (a, pa) = resp_daemon(daemon_factory, args=["--max-line", "16384"])
    (b, pb) = resp_daemon(daemon_factory)
    ra, rb = rclient(pa), rclient(pb)
    keys = ["k-%d" % i for i in range(20000)]
    add_keys(a, "f", "capacity=2000 error=0.01", keys)
    chunks = scandump(ra, "f")
    assert len(chunks) >= 4 and max(len(d) for _, d in chunks) <= 16384 - 1024
    # Past the end: RedisBloom's end of iteration.
    last_it, _ = chunks[-1]
    assert ra.bf().scandump("f", last_it + 1000) == [0, b""]
    # A header again starts the key's load over; the abandoned half is dropped.
    rb.bf().loadchunk("g", *chunks[0])
    rb.bf().loadchunk("g", *chunks[1])
    loadchunks(rb, "g", chunks)
    assert all_present(rb, "g", keys)
    # At most 8 loads at once: the ninth header is refused until one ends.
    for i in range(8):
        rb.bf().loadchunk("p%d" % i, *chunks[0])
    with pytest.raises(redis.ResponseError, match="too many BF.LOADCHUNK loads"):
        rb.bf().loadchunk("p8", *chunks[0])
    loadchunks(rb, "p0", chunks[1:])  # completes p0's load: its slot is free again
    loadchunks(rb, "p8", chunks)
    assert all_present(rb, "p0", keys) and all_present(rb, "p8", keys)
    assert rb.exists("p1") == 0  # a load in progress is not a key yet
