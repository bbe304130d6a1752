"""An old primary that comes back as a replica of the new one loses none of the keys it
acknowledged (issue 24, "Promotion"): before its full sync it sends each of its filters to
the new primary, which merges them in with UNION (or restores one it does not have), so
both end with the union. A windowed filter cannot be merged (logged at WARN), a filter
with another seed is refused by UNION (logged), and neither stops the rest. A replica that
is only re-pointed, or restarted with its replica.state, sends nothing. Links lost in the
middle are retried three times, then the full sync goes ahead.

Only keys that were added are asserted present; none is asserted absent.
"""

import socket
import threading
import time
from pathlib import Path

from test_replication import TOKEN, keys, role, start, wait_caught_up, wait_for

SENDING = "replication: sending this server's"


def all_present(c, name, ks):
    return all(c.check(name, ks, chunk=1000))


def test_old_primary_sends_its_keys_on_replicaof(daemon_factory):
    a = start(daemon_factory)
    b = start(daemon_factory, ["--replica-of", "%s:%d" % (a.host, a.port)])
    c = start(daemon_factory, ["--replica-of", "%s:%d" % (a.host, a.port)])
    both, old, new = keys("both", 3000), keys("old", 3000), keys("new", 3000)
    with a.client() as ac, b.client() as bc, c.client() as cc:
        assert ac.cmd("CREATE f capacity=2000") == "CREATED"  # grows: several stages
        assert ac.cmd("CREATE w window=1h generations=3") == "CREATED"
        assert ac.cmd("CREATE x kind=expandable capacity=2000") == "CREATED"
        assert ac.cmd("CREATE s") == "CREATED"
        for name in ("f", "w", "x", "s"):
            ac.add(name, both)
        wait_caught_up(ac, [bc, cc])

        # B leaves A and is promoted; A, still a primary, acknowledges keys B never gets.
        assert bc.cmd("REPLICAOF NO ONE") == "OK"
        for name in ("f", "w", "x", "s"):
            ac.add(name, old)
        assert ac.cmd("CREATE only_a") == "CREATED"
        ac.add("only_a", old)
        bc.add("f", new)
        assert bc.cmd("DROP s") == "DELETED"
        assert bc.cmd("CREATE s seed=7") == "CREATED"  # UNION refuses other seeds

        # C, a replica, re-pointed at B: it sends nothing.
        assert cc.cmd("REPLICAOF %s %d" % (b.host, b.port)) == "OK"
        wait_caught_up(bc, [cc])

        assert ac.cmd("REPLICAOF %s %d" % (b.host, b.port)) == "OK"
        wait_for("A's filters sent", lambda: "filters to the primary before" in a.log())
        wait_caught_up(bc, [ac, cc])
        for d in (ac, bc, cc):
            assert all_present(d, "f", both + old + new)
            assert all_present(d, "x", both + old)
            assert all_present(d, "only_a", old)
            assert all_present(d, "w", both)
            assert d.names("rejoin-") == []  # the temporary filter was dropped
        assert role(ac)["role"] == "replica"
        assert ac.cmd("ADD f z").startswith("CLIENT_ERROR read-only replica of")
        assert bc.cmd("ADD f after") == "ADDED 1"
        wait_caught_up(bc, [ac, cc])
        assert ac.check("f", ["after"]) == [True]
    log = a.log()
    assert ("sent 3 of 5 filters to the primary before the full sync (2 merged by UNION, "
            "1 restored as new, 1 windowed not merged, 1 failed)") in log, log[-4000:]
    assert "filter w is windowed: UNION cannot merge it" in log, log[-4000:]
    assert ("filter s not merged into the primary's: UNION answered 'CLIENT_ERROR the "
            "filters hash their keys with different seeds") in log, log[-4000:]
    assert "full sync done" in log, log[-4000:]
    assert SENDING not in c.log(), c.log()[-4000:]
    assert SENDING not in b.log(), b.log()[-4000:]


def test_old_primary_restarted_with_replica_of_sends_its_keys(daemon_factory):
    a = start(daemon_factory, ["--durability", "always"])
    b = start(daemon_factory, ["--replica-of", "%s:%d" % (a.host, a.port)])
    both, old, new = keys("both", 2000), keys("old", 2000), keys("new", 2000)
    with a.client() as ac, b.client() as bc:
        assert ac.cmd("CREATE f capacity=1000") == "CREATED"
        ac.add("f", both)
        wait_caught_up(ac, [bc])
        assert bc.cmd("REPLICAOF NO ONE") == "OK"
        ac.add("f", old)  # acknowledged, on disk under always, never replicated
        assert ac.cmd("CREATE only_a kind=expandable") == "CREATED"
        ac.add("only_a", old)
        bc.add("f", new)
    a.kill()
    a.args = ["--durability", "always", "--replica-of", "%s:%d" % (b.host, b.port)]
    a.start()
    with a.client() as ac, b.client() as bc:
        wait_for("A's filters sent", lambda: "filters to the primary before" in a.log())
        wait_caught_up(bc, [ac])
        for d in (ac, bc):
            assert all_present(d, "f", both + old + new)
            assert all_present(d, "only_a", old)
            assert d.names("rejoin-") == []
    log = a.log()
    assert "2 filters here and no replica.state: they are an old primary's" in log, log[-4000:]
    assert "sent 2 of 2 filters to the primary before the full sync (1 merged by UNION, " \
           "1 restored as new, 0 windowed not merged, 0 failed)" in log, log[-4000:]

    # Once: restarted as the replica it now is (its replica.state written), it sends nothing.
    state = Path(a.data_dir) / "replica.state"
    wait_for("replica.state written", state.exists)
    a.restart()
    with a.client() as ac, b.client() as bc:
        wait_caught_up(bc, [ac])
        assert all_present(ac, "f", both + old + new)
    assert SENDING not in a.log(), a.log()[-4000:]


def test_replica_without_journal_restarted_sends_nothing(daemon_factory):
    """A replica under durability snapshot cannot resume from an offset (no journal), so
    its restart takes a full sync; but its filters are the primary's copy, marked by its
    replica.state, and are not sent back as an old primary's would be."""
    a = start(daemon_factory, ["--durability", "everysec"])
    b = start(daemon_factory, ["--durability", "snapshot", "--replica-of",
                               "%s:%d" % (a.host, a.port)])
    ks = keys("k", 2000)
    with a.client() as ac, b.client() as bc:
        assert ac.cmd("CREATE f capacity=10000") == "CREATED"
        ac.add("f", ks)
        wait_caught_up(ac, [bc])
    state = Path(b.data_dir) / "replica.state"
    wait_for("replica.state written", state.exists)
    b.restart()  # its snapshot at the stop holds f
    with a.client() as ac, b.client() as bc:
        wait_caught_up(ac, [bc])
        assert all_present(bc, "f", ks)
    log = b.log()
    assert "with no journal here: this replica resyncs in full" in log, log[-4000:]
    assert SENDING not in log and "no replica.state" not in log, log[-4000:]


class CuttingPrimary:
    """A loopback server that answers LIST with END and closes each connection at the
    RESTORE that follows (a link lost midway), or with hold stops reading there (a
    primary that hangs), and records each connection's lines."""

    def __init__(self, hold=False):
        self.hold = hold
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.lines = []  # per connection, the request lines it read
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def serve(self, c):
        got, buf = [], b""
        self.lines.append(got)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not self.stop.is_set():
            while b"\r\n" in buf:
                line, _, buf = buf.partition(b"\r\n")
                got.append(line.decode("latin-1"))
                if line == b"LIST":
                    c.sendall(b"END\r\n")
                elif line.startswith((b"RESTORE ", b"PSYNC ")):
                    while self.hold and not self.stop.wait(0.05):
                        pass
                    return
            try:
                chunk = c.recv(1 << 16)
            except socket.timeout:
                continue
            if not chunk:
                return
            buf += chunk

    def run(self):
        while not self.stop.is_set():
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            c.settimeout(0.2)
            try:
                self.serve(c)
            except OSError:
                pass
            finally:
                c.close()

    def close(self):
        self.stop.set()
        self.sock.close()
        self.thread.join(5)


def test_links_lost_midway_give_up_after_three_then_psync(daemon_factory):
    fake = CuttingPrimary()
    try:
        a = start(daemon_factory)
        with a.client() as ac:
            assert ac.cmd("CREATE f") == "CREATED"
            ac.add("f", keys("k", 100))
            assert ac.cmd("REPLICAOF 127.0.0.1 %d" % fake.port) == "OK"
            wait_for("a fourth connection's PSYNC",
                     lambda: len(fake.lines) >= 4 and fake.lines[3], 30)
            assert role(ac)["role"] == "replica"
            assert all_present(ac, "f", keys("k", 100))  # no full sync came: still its own
        for got in fake.lines[:3]:
            assert got[0] == "LIST" and got[1].startswith("RESTORE f "), fake.lines
        assert fake.lines[3][0].startswith("PSYNC "), fake.lines
        log = a.log()
        assert log.count("replication: sending this server's 1 filters to the primary") == 3, \
            log[-4000:]
        assert "gave up sending filters to the primary after 3 links lost midway" in log, \
            log[-4000:]
    finally:
        fake.close()


def test_stopped_while_a_big_filter_is_sent(daemon_factory):
    """The daemon stops while its filter's encoding waits unsent in the link's output (the
    primary stopped reading): it exits cleanly, nothing leaked (the sanitizer says)."""
    fake = CuttingPrimary(hold=True)
    try:
        a = start(daemon_factory)
        with a.client(timeout=60) as ac:
            assert ac.cmd("CREATE big capacity=4000000") == "CREATED"
            ac.add("big", keys("k", 100000), chunk=2000)  # bits on every page: ~5 MB
            assert ac.cmd("REPLICAOF 127.0.0.1 %d" % fake.port) == "OK"
            wait_for("the RESTORE line",
                     lambda: fake.lines and any(x.startswith("RESTORE big ")
                                                for x in fake.lines[0]), 30)
            n = int(next(x for x in fake.lines[0] if x.startswith("RESTORE ")).split()[2])
            assert n > 4 << 20, n
        a.stop()
    finally:
        fake.close()


def test_old_primary_sends_its_keys_after_auth(daemon_factory, tmp_path):
    tok = tmp_path / "token"
    tok.write_text(TOKEN + "\n")
    tok.chmod(0o600)
    a = start(daemon_factory, ["--auth-token-file", str(tok)])
    b = start(daemon_factory, ["--auth-token-file", str(tok),
                               "--replica-of", "%s:%d" % (a.host, a.port)])
    with a.client() as ac, b.client() as bc:
        assert ac.cmd("AUTH " + TOKEN) == "OK" and bc.cmd("AUTH " + TOKEN) == "OK"
        assert ac.cmd("CREATE f") == "CREATED"
        ac.add("f", keys("both", 500))
        wait_caught_up(ac, [bc])
        assert bc.cmd("REPLICAOF NO ONE") == "OK"
        ac.add("f", keys("old", 500))
        assert ac.cmd("REPLICAOF %s %d" % (b.host, b.port)) == "OK"
        wait_for("A's filters sent", lambda: "filters to the primary before" in a.log())
        wait_caught_up(bc, [ac])
        for d in (ac, bc):
            assert all_present(d, "f", keys("both", 500) + keys("old", 500))
    assert "(1 merged by UNION, 0 restored as new, 0 windowed not merged, 0 failed)" in a.log()
