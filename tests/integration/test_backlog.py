"""Issue 16 review: connections in the fair backlog (server/net/fair.c, conn.c) at their edges.

A client pipelining more than a quantum is backlogged; these check what can happen to it
there: EOF, QUIT, parked requests (journal `always`), AUTH failures, shedding, timeouts,
memcached data blocks across quanta, a non-reading client (no busy round), and that the
budget's connection and overhead parts come back to their idle values. ASan build; every
load bounded in count and time.
"""

import socket
import threading
import time
from pathlib import Path

import pytest

from conftest import read_until_closed
from ports import free_port

MIB = 1 << 20


def sender(sock, data):
    """Sends data on a thread (the test reads meanwhile); returns the thread."""
    def run():
        try:
            sock.sendall(data)
        except OSError:
            pass
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def read_all(sock, timeout=60.0):
    """Reads until EOF (or reset); returns the bytes."""
    return read_until_closed(sock, timeout)


def exchange(sock, data):
    """Sends data then a FIN from a thread while reading every reply until EOF."""
    def run():
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    out = read_all(sock)
    t.join(10)
    return out


def check_lines(n):
    """n CHECK lines of 1..40 keys, and the replies they must get, in order."""
    lines, replies = [], []
    for i in range(n):
        k = i % 40 + 1
        lines.append("CHECK f " + " ".join("k%d_%d" % (i, j) for j in range(k)))
        replies.append(" ".join(["0"] * k))
    return ("\r\n".join(lines) + "\r\n").encode(), replies


def cpu_seconds(pid):
    fields = Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0


def stats(d):
    with d.client() as c:
        return {k: int(v) for k, v in c.stats().items() if v.isdigit()}


def test_half_close_after_backlog_answers_everything_in_order(daemon_factory):
    d = daemon_factory()
    with d.client() as c:
        assert c.cmd("CREATE f") == "CREATED"
    data, want = check_lines(20000)
    assert len(data) > 20 * 64 * 1024  # many quanta
    s = socket.create_connection((d.host, d.port))
    t = sender(s, data)
    buf, shut = b"", False
    s.settimeout(60)
    while True:
        chunk = s.recv(1 << 16)
        if not chunk:
            break
        buf += chunk
        if not t.is_alive() and not shut:
            s.shutdown(socket.SHUT_WR)
            shut = True
    t.join()
    got = buf.decode().split("\r\n")
    assert got[-1] == ""
    assert got[:-1] == want


def test_half_close_right_after_pipelining(daemon_factory):
    """The FIN arrives while the input is still backlogged: all answered, then closed."""
    d = daemon_factory()
    with d.client() as c:
        assert c.cmd("CREATE f") == "CREATED"
    data, want = check_lines(20000)
    s = socket.create_connection((d.host, d.port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    out = exchange(s, data)
    assert out.decode().split("\r\n")[:-1] == want


def test_quit_in_the_middle_of_a_backlog(daemon_factory):
    d = daemon_factory()
    with d.client() as c:
        assert c.cmd("CREATE f") == "CREATED"
    first, want = check_lines(8000)
    rest, _ = check_lines(8000)
    s = socket.create_connection((d.host, d.port))
    t = sender(s, first + b"QUIT\r\n" + rest)
    out = read_all(s)
    t.join(10)
    assert out.decode().split("\r\n") == want + [""]  # QUIT: no reply, nothing after it


@pytest.mark.parametrize("mode", ["always", "everysec"])
def test_parked_writes_while_backlogged(daemon_factory, mode):
    """ADDs held for the journal among a backlog: every reply, in order, then the close."""
    d = daemon_factory(["--durability", mode, "--snapshot-interval", "0"])
    with d.client() as c:
        assert c.cmd("CREATE f") == "CREATED"
    lines, want = [], []
    for i in range(6000):
        if i % 3 == 0:
            lines.append("ADD f a%d" % i)
            want.append("ADDED 1")
        else:
            k = i % 30 + 1
            lines.append("CHECK f " + " ".join("z%d_%d" % (i, j) for j in range(k)))
            want.append(" ".join(["0"] * k))
    s = socket.create_connection((d.host, d.port))
    out = exchange(s, ("\r\n".join(lines) + "\r\n").encode()).decode().split("\r\n")
    assert out[:-1][:len(want)] == want[:len(out) - 1]
    assert out[:-1] == want


def test_flush_parked_while_backlogged(daemon_factory):
    d = daemon_factory(["--snapshot-interval", "0"])
    with d.client() as c:
        assert c.cmd("CREATE f") == "CREATED"
    data, want = check_lines(6000)
    payload = data + b"FLUSH f\r\n" + data
    s = socket.create_connection((d.host, d.port))
    out = exchange(s, payload).decode().split("\r\n")
    assert out[:-1] == want + ["OK"] + want


def test_failed_auth_while_backlogged(daemon_factory, tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret-token-for-tests\n")
    token.chmod(0o600)
    d = daemon_factory(["--auth-token-file", str(token)])
    with d.client() as c:
        assert c.cmd("AUTH s3cret-token-for-tests") == "OK"
        assert c.cmd("CREATE f") == "CREATED"
    data, want = check_lines(4000)
    s = socket.create_connection((d.host, d.port))
    out = exchange(s, b"AUTH s3cret-token-for-tests\r\n" + data + b"AUTH wrong\r\n" + data
                   + b"AUTH s3cret-token-for-tests\r\n" + data).decode().split("\r\n")
    deny = [l for l in out[len(want) + 2:2 * len(want) + 2]]
    assert out[0] == "OK"
    assert out[1:len(want) + 1] == want
    assert out[len(want) + 1].startswith("CLIENT_ERROR invalid token")
    assert all(l.startswith("CLIENT_ERROR") for l in deny), deny[:3]
    assert out[2 * len(want) + 2] == "OK"
    assert out[2 * len(want) + 3:-1] == want


def test_non_reading_pipeliners_leave_the_loop_idle(daemon_factory):
    d = daemon_factory(["--max-output", "64K"])
    with d.client() as c:
        assert c.cmd("CREATE f") == "CREATED"
    data, want = check_lines(2000)
    data += b"STATS\r\n" * 3000000  # ~2 KB of replies each: far more than kernel buffers take
    socks = []
    for _ in range(20):
        s = socket.create_connection((d.host, d.port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
        s.setblocking(False)
        socks.append([s, 0])
    deadline, still = time.monotonic() + 15, 0
    while time.monotonic() < deadline and still < 5:  # push until every socket is full
        moved = 0
        for item in socks:
            try:
                n = item[0].send(data[item[1]:item[1] + MIB])
                item[1] += n
                moved += n
            except BlockingIOError:
                pass
        still = still + 1 if moved == 0 else 0
        if moved == 0:
            time.sleep(0.1)
    assert all(sent < len(data) for _, sent in socks)  # all stuck, none finished
    # Once what the kernel buffered is executed (the output is then full), nothing runs.
    end, used = time.monotonic() + 30, 1.0
    while time.monotonic() < end and used >= 0.2:
        c0 = cpu_seconds(d.proc.pid)
        time.sleep(2.0)
        used = cpu_seconds(d.proc.pid) - c0
        print("CPU %.2f s in 2 s" % used)
    print("20 stuck non-reading pipeliners: daemon CPU %.2f s in 2 s" % used)
    assert used < 0.4, used
    # They resume once they read: the first client's replies come, in order.
    s = socks[0][0]
    s.setblocking(True)
    head = want
    buf = read_until(s, len("\r\n".join(head)) + 2)
    assert buf.decode().split("\r\n")[:len(head)] == head
    for item in socks:
        item[0].close()


def read_until(s, nbytes, timeout=60.0):
    s.settimeout(timeout)
    buf = b""
    while len(buf) < nbytes:
        chunk = s.recv(1 << 16)
        if not chunk:
            break
        buf += chunk
    return buf


def test_connection_memory_returns_to_idle(daemon_factory):
    d = daemon_factory(["--max-output", "64K"])
    with d.client() as c:
        assert c.cmd("CREATE f") == "CREATED"
    time.sleep(0.2)
    idle = stats(d)["memory_connections"]
    data, want = check_lines(4000)
    for cycle in range(8):
        socks = []
        for _ in range(10):
            s = socket.create_connection((d.host, d.port))
            s.sendall(data[:200000] if cycle % 2 else data)
            socks.append(s)
        time.sleep(0.3)
        for i, s in enumerate(socks):
            if i % 2:
                s.shutdown(socket.SHUT_WR)
                read_all(s, 30)
            s.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        st = stats(d)
        if st["curr_connections"] == 1 and st["memory_connections"] == idle:
            break
        time.sleep(0.2)
    print("memory_connections idle %d, after cycles %d (%d connections)"
          % (idle, st["memory_connections"], st["curr_connections"]))
    assert st["memory_connections"] == idle
    assert st["memory_connections"] < 1 << 40  # no underflow


def test_create_drop_overhead_released(daemon_factory):
    d = daemon_factory()
    with d.client(timeout=60) as c:
        before = {k: int(v) for k, v in c.stats().items() if v.isdigit()}
        for i in range(0, 10000, 500):
            c.send("".join("CREATE t%d capacity=1\r\nDROP t%d\r\n" % (j, j)
                           for j in range(i, i + 500)))
            for _ in range(500):
                assert c.line() == "CREATED"
                assert c.line() == "DELETED"
        time.sleep(1.5)
        after = {k: int(v) for k, v in c.stats().items() if v.isdigit()}
    print("overhead before %d after %d; filters before %d after %d"
          % (before["memory_filter_overhead"], after["memory_filter_overhead"],
             before["memory_filters"], after["memory_filters"]))
    assert after["memory_filter_overhead"] <= before["memory_filter_overhead"] + 4096
    assert after["memory_filters"] == before["memory_filters"]


def test_memcached_blocks_across_quanta(daemon_factory):
    import random
    port = free_port()
    d = daemon_factory(["--memcache-port", str(port)])
    deadline = time.monotonic() + 20
    while "memcached protocol" not in d.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    rng = random.Random(7)
    parts, want = [], []
    total = 0
    i = 0
    while total < 3 * MIB:
        size = rng.choice([1, 5, 100, 4000, 65536 - 40, 30000])
        if i % 7 == 6:
            parts.append(b"get " + b" ".join(b"m:k%d" % j for j in range(i - 5, i)) + b"\r\n")
            want.append(None)
        elif i % 5 == 4:
            parts.append(b"add m:k%d 0 0 %d noreply\r\n" % (i, size) + b"v" * size + b"\r\n")
        else:
            parts.append(b"add m:k%d 0 0 %d\r\n" % (i, size) + b"v" * size + b"\r\n")
            want.append(b"STORED")
        total += len(parts[-1])
        i += 1
    s = socket.create_connection(("127.0.0.1", port))
    payload = b"".join(parts)
    out = exchange(s, payload)
    stored = out.count(b"STORED\r\n")
    assert b"ERROR" not in out, out[:300]
    assert stored == want.count(b"STORED")
    assert out.endswith(b"END\r\n") or out.endswith(b"STORED\r\n")



@pytest.mark.parametrize("mode", ["always", "everysec"])
def test_commit_not_starved_by_backlog(daemon_factory, mode):
    """50 pipeliners (their ADDs held for the journal too) backlogged: a polite client's
    ADD is answered promptly, so the commit runs every pass."""
    d = daemon_factory(["--durability", mode, "--snapshot-interval", "0"])
    with d.client() as c:
        assert c.cmd("CREATE f") == "CREATED"
        assert c.cmd("CREATE g") == "CREATED"
    data, _ = check_lines(20000)
    data = data.replace(b"CHECK f k1", b"ADD f k1") * 3  # one object shared by the senders
    socks = []
    for _ in range(50):
        s = socket.create_connection((d.host, d.port))
        socks.append(s)
        sender(s, data)
    drain_stop = threading.Event()

    def drain():
        while not drain_stop.is_set():
            for s in socks:
                try:
                    s.setblocking(False)
                    s.recv(1 << 20)
                except (BlockingIOError, OSError):
                    pass
            time.sleep(0.001)
    dt = threading.Thread(target=drain, daemon=True)
    dt.start()
    time.sleep(1.0)
    worst = 0.0
    with d.client(timeout=30) as c:
        for i in range(10):
            t0 = time.monotonic()
            assert c.cmd("ADD g p%d" % i) == "ADDED 1"
            worst = max(worst, time.monotonic() - t0)
        st = {k: int(v) for k, v in c.stats().items() if v.isdigit()}
    drain_stop.set()
    for s in socks:
        s.close()
    print("%s ADD with 50 pipeliners: worst %.3f s, %d connections"
          % (mode, worst, st["curr_connections"]))
    assert st["curr_connections"] == 51
    assert worst < 1.5, worst


@pytest.mark.parametrize("mode", ["snapshot", "always"])
def test_shed_while_backlogged_or_parked(daemon_factory, mode):
    """Pipeliners in the backlog (and holding parked writes) are shed; polite ones are not."""
    d = daemon_factory(["--max-memory", "6M", "--durability", mode, "--snapshot-interval", "0"])
    with d.client() as c:
        assert c.cmd("CREATE f capacity=10000") == "CREATED"
    lines = []
    for i in range(30000):
        lines.append("ADD f w%d" % i if i % 2 else
                     "CHECK f " + " ".join("q%d_%d" % (i, j) for j in range(i % 30 + 1)))
    data = ("\r\n".join(lines) + "\r\n").encode()
    polite = [d.client() for _ in range(5)]
    socks = []
    for i in range(40):
        s = socket.create_connection((d.host, d.port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096 if i % 2 else 1 << 20)
        socks.append(s)
        sender(s, data)
    deadline = time.monotonic() + 12
    rounds = 0
    while time.monotonic() < deadline:
        for j, p in enumerate(polite):
            assert p.cmd("CHECK f polite%d" % j) in ("0", "1")
        for i, s in enumerate(socks):
            if i % 4 == 0:  # a few read a little: their turns go on
                try:
                    s.setblocking(False)
                    s.recv(8192)
                except (BlockingIOError, OSError):
                    pass
        rounds += 1
        if stats(d)["shed_connections"] > 10 and rounds > 20:
            break
        time.sleep(0.02)
    st = stats(d)
    print("mode %s: shed %d, memory_connections %d, rounds %d"
          % (mode, st["shed_connections"], st["memory_connections"], rounds))
    assert st["shed_connections"] > 0
    for s in socks:
        s.close()
    for j, p in enumerate(polite):
        assert p.cmd("CHECK f polite%d" % j) in ("0", "1")
        p.close()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and stats(d)["curr_connections"] > 1:
        time.sleep(0.2)
    st = stats(d)
    assert st["curr_connections"] == 1
    assert st["memory_connections"] < 4096, st["memory_connections"]


def test_idle_and_write_timeouts_while_backlogged(daemon_factory):
    d = daemon_factory(["--idle-timeout", "1", "--max-output", "64K"])
    with d.client() as c:
        assert c.cmd("CREATE f") == "CREATED"
    data, _ = check_lines(20000)
    big = data * 8  # more replies than the kernel buffers take; shared by the senders
    socks = []
    for i in range(10):
        s = socket.create_connection((d.host, d.port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        socks.append(s)
        sender(s, big)
    time.sleep(4)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and stats(d)["curr_connections"] > 1:
        time.sleep(0.2)
    st = stats(d)
    for s in socks:
        s.close()
    assert st["curr_connections"] == 1
    assert "has not read its replies" in d.log()


def test_memcached_skip_and_big_blocks_while_backlogged(daemon_factory):
    """An oversized block (swallowed), a 900 KB block and a 20k-key get among a backlog."""
    port = free_port()
    d = daemon_factory(["--memcache-port", str(port)])
    deadline = time.monotonic() + 20
    while "memcached protocol" not in d.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    small = b"".join(b"add m:s%d 0 0 3\r\nabc\r\n" % i for i in range(20000))
    keys = b" ".join(b"m:s%d" % i for i in range(0, 20000, 1))
    payload = (small + b"set m:huge 0 0 %d\r\n" % (2 * MIB) + b"x" * (2 * MIB) + b"\r\n"
               + b"add m:big 0 0 900000\r\n" + b"y\n" * 450000 + b"\r\n"
               + b"get " + keys + b"\r\n" + small)
    s = socket.create_connection(("127.0.0.1", port))
    out = exchange(s, payload)
    lines = out.split(b"\r\n")
    assert lines[:20000] == [b"STORED"] * 20000
    assert lines[20000].startswith(b"SERVER_ERROR object too large"), lines[20000]
    assert lines[20001] == b"STORED"
    values = lines[20002:20002 + 2 * 20000]
    assert len([v for v in values if v.startswith(b"VALUE m:s")]) == 20000
    assert lines[20002 + 40000] == b"END"
    assert lines[20003 + 40000:-1] == [b"NOT_STORED"] * 20000


def test_shed_picks_the_largest_and_spares_small(daemon_factory):
    d = daemon_factory(["--max-memory", "3M", "--max-line", "8M"])
    with d.client() as c:
        assert c.cmd("CREATE f capacity=1000") == "CREATED"
    idle = [d.client() for _ in range(20)]
    small = socket.create_connection((d.host, d.port))
    small.sendall(b"CHECK f " + b"s" * (40 * 1024))  # unfinished, < 64 KiB
    b = socket.create_connection((d.host, d.port))
    b.sendall(b"CHECK f " + b"b" * (600 * 1024))  # unfinished, under the limit
    time.sleep(0.5)
    assert stats(d)["shed_connections"] == 0
    a = socket.create_connection((d.host, d.port))
    t = sender(a, b"CHECK f " + b"a" * (3 * MIB))
    out = read_all(a, 20)
    t.join(10)
    assert out.startswith(b"SERVER_ERROR out of memory"), out[:100]
    st = stats(d)
    assert st["shed_connections"] == 1
    for c in idle:
        assert c.cmd("CHECK f x") == "0"
        c.close()
    b.sendall(b"\r\n")
    small.sendall(b"\r\n")
    assert read_until(b, 2).startswith(b"0")
    assert read_until(small, 2).startswith(b"0")


def test_chaos_backlog_shed_parked_auth(daemon_factory, tmp_path):
    """Random pipeliners (FLUSH, failed AUTH, QUIT, half-close, reset, no reading) with
    shedding and the journal `always`: the daemon survives with a clean ASan report."""
    import random
    token = tmp_path / "token"
    token.write_text("chaos-token-0123456789\n")
    token.chmod(0o600)
    d = daemon_factory(["--max-memory", "4M", "--durability", "always", "--max-output", "128K",
                        "--snapshot-interval", "0", "--auth-token-file", str(token),
                        "--idle-timeout", "2"])
    with d.client() as c:
        assert c.cmd("AUTH chaos-token-0123456789") == "OK"
        assert c.cmd("CREATE f capacity=1000") == "CREATED"
    rng = random.Random(16)
    body, _ = check_lines(3000)
    pieces = [b"AUTH chaos-token-0123456789\r\n", b"AUTH nope\r\n", b"FLUSH f\r\n",
              b"ADD f " + b" ".join(b"c%d" % i for i in range(50)) + b"\r\n", b"QUIT\r\n",
              b"CHECK f " + b"z" * 300000 + b"\r\n"]
    deadline = time.monotonic() + 15
    live = []
    n = 0
    while time.monotonic() < deadline and n < 300:
        n += 1
        s = socket.create_connection((d.host, d.port))
        if rng.random() < 0.5:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        parts = [pieces[0]]
        for _ in range(rng.randint(1, 6)):
            parts.append(body[:rng.randint(1000, len(body))].rsplit(b"\r\n", 1)[0] + b"\r\n")
            parts.append(rng.choice(pieces))
        payload = b"".join(parts)
        mode = rng.choice(["halfclose", "reset", "noread", "read"])

        def run(s=s, payload=payload, mode=mode):
            try:
                s.sendall(payload)
                if mode == "halfclose":
                    s.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        t = threading.Thread(target=run, daemon=True)
        t.start()
        live.append((s, mode, t, time.monotonic()))
        for item in list(live):
            s2, m2, t2, born = item
            age = time.monotonic() - born
            try:
                s2.setblocking(False)
                if m2 in ("read", "halfclose"):
                    s2.recv(1 << 20)
            except (BlockingIOError, OSError):
                pass
            if age > rng.uniform(0.1, 3.0):
                if m2 == "reset":
                    s2.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
                s2.close()
                live.remove(item)
        time.sleep(0.01)
    for s, _, _, _ in live:
        s.close()
    time.sleep(3)
    with d.client() as c:
        assert c.cmd("AUTH chaos-token-0123456789") == "OK"
        assert c.cmd("CHECK f c1") == "1"
        end = time.monotonic() + 20
        while True:
            st = {k: int(v) for k, v in c.stats().items() if v.isdigit()}
            if st["curr_connections"] == 1 or time.monotonic() > end:
                break
            time.sleep(0.2)
    print("chaos: %d connections, shed %d, memory_connections %d left (%d connections)"
          % (n, st["shed_connections"], st["memory_connections"], st["curr_connections"]))
    assert st["curr_connections"] == 1
    assert st["memory_connections"] < 4096
