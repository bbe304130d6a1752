"""The replica resolves its primary's name without blocking its loop (issue 24: evdns on
the loop, reading /etc/resolv.conf and /etc/hosts). A name that does not resolve is
logged, ROLE says down, and the replica tries again with backoff while its clients are
answered at once.

The test that can tell a blocking lookup from one on the loop needs a resolver that is
slow: it runs the replica in its own mount namespace (unshare -m, as root) with an
/etc/resolv.conf naming a DNS server of this test's on a loopback address, which answers
one name, refuses another and never answers a third. Without unshare or the rights for
it, that test skips.
"""
import os
import shutil
import socket
import struct
import subprocess
import threading
import time

import pytest

from test_replication import free_port, keys, role, start, wait_caught_up, wait_for

PRIMARY_NAME = "primary.bloomd.test"
MULTI_NAME = "multi.bloomd.test"  # A 127.0.0.2 (nobody listens there), then A 127.0.0.1
SILENT_NAME = "silent.bloomd.test"  # the server never answers: the lookup times out


def latencies(c, seconds, stop=None):
    """Sends VERSION and CHECK for `seconds` (or until stop() is true); returns each
    request's time in seconds."""
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end and not (stop and stop()):
        t0 = time.monotonic()
        assert c.cmd("VERSION").startswith("VERSION")
        assert c.cmd("CHECK f k") in ("NOT_FOUND", "0", "1")
        out.append(time.monotonic() - t0)
        time.sleep(0.002)
    return out


def p99(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * 0.99))]


def test_unresolvable_primary_is_retried_with_backoff(daemon_factory):
    port = free_port()
    r = start(daemon_factory, ["--replica-of", "no-such-host.invalid:%d" % port])
    needle = "replication: cannot resolve no-such-host.invalid:%d" % port
    with r.client() as rc:
        # Meanwhile its clients are answered; the resolver may be slow to say no (up to
        # its resolv.conf timeouts), so the deadline is generous.
        times = latencies(rc, 60, stop=lambda: r.log().count(needle) >= 2)
        assert r.log().count(needle) >= 2, r.log()[-2000:]
        got = role(rc)
        assert got["link"] == "down" and got["primary"] == "no-such-host.invalid:%d" % port
    assert "(next try in 500 ms)" in r.log() and "(next try in 1000 ms)" in r.log()
    assert p99(times) < 0.05, (p99(times), max(times))
    assert r.alive()


# ---- a DNS server of our own, seen through a private /etc/resolv.conf ----

class FakeDNS:
    """A UDP DNS server on a loopback address: PRIMARY_NAME has A 127.0.0.1, MULTI_NAME
    A 127.0.0.2 and 127.0.0.1 in that order (neither has AAAA), SILENT_NAME is never
    answered, anything else is NXDOMAIN."""
    ADDRS = {PRIMARY_NAME: ["127.0.0.1"], MULTI_NAME: ["127.0.0.2", "127.0.0.1"]}

    def __init__(self, addr):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((addr, 53))
        self.sock.settimeout(0.2)
        self.queries = []
        self.done = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def answer(self, q):
        i, labels = 12, []
        while q[i]:
            labels.append(q[i + 1:i + 1 + q[i]])
            i += 1 + q[i]
        name = b".".join(labels).decode("ascii", "replace").lower()
        qtype, = struct.unpack(">H", q[i + 1:i + 3])
        question = q[12:i + 5]  # evdns mixes the case of the name: echo it as sent
        self.queries.append((name, qtype))
        if name == SILENT_NAME:
            return None
        addrs = self.ADDRS.get(name)
        rcode = 0 if addrs is not None else 3
        addrs = addrs if qtype == 1 else []
        answers = b"".join(b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 5, 4) +
                           socket.inet_aton(a) for a in addrs or [])
        header = q[:2] + struct.pack(">HHHHH", 0x8180 | rcode, 1, len(addrs or []), 0, 0)
        return header + question + answers

    def serve(self):
        while not self.done:
            try:
                q, peer = self.sock.recvfrom(512)
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                a = self.answer(q)
            except (IndexError, struct.error):
                continue
            if a is not None:
                self.sock.sendto(a, peer)

    def close(self):
        self.done = True
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def private_resolver(tmp_path):
    """(wrap, dns): wrap(daemon) makes the daemon start in a mount namespace whose
    /etc/resolv.conf names dns, a FakeDNS (timeout 1 s, one attempt)."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1)")
    addr = "127.%d.%d.53" % (os.getpid() % 200 + 20, int(time.time()) % 250 + 1)
    conf = tmp_path / "resolv.conf"
    conf.write_text("nameserver %s\noptions timeout:1 attempts:1\n" % addr)
    probe = subprocess.run(["unshare", "-m", "sh", "-c",
                            'mount --bind "$0" /etc/resolv.conf && cat /etc/resolv.conf',
                            str(conf)], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0 or addr not in probe.stdout:
        pytest.skip("cannot give a process its own /etc/resolv.conf (unshare -m needs root): "
                    + probe.stderr.strip()[:200])
    try:
        dns = FakeDNS(addr)
    except OSError as e:
        pytest.skip("cannot serve DNS on %s:53: %s" % (addr, e))

    def wrap(d):
        inner = d.command

        def command():
            return ["unshare", "-m", "sh", "-c",
                    'mount --bind "$0" /etc/resolv.conf && exec "$@"', str(conf)] + inner()
        d.command = command
        return d
    yield wrap, dns
    dns.close()


def test_a_resolver_that_never_answers_does_not_stall_clients(daemon_factory,
                                                              private_resolver):
    """The DNS server never answers: each lookup takes its 1 s timeout. A lookup on the
    loop (getaddrinfo) would stall every client for that second at each retry; evdns keeps
    them answered. Then the same replica is pointed at a name the server does answer (A
    127.0.0.1), connects to the primary there and follows it."""
    wrap, dns = private_resolver
    p = start(daemon_factory)
    r = wrap(daemon_factory(args=["--replica-of", "%s:%d" % (SILENT_NAME, p.port)],
                            start=False)).start()
    needle = "replication: cannot resolve %s:%d" % (SILENT_NAME, p.port)
    with r.client() as rc:
        times = latencies(rc, 30, stop=lambda: r.log().count(needle) >= 2)
        assert r.log().count(needle) >= 2, r.log()[-2000:]
        assert role(rc)["link"] == "down"
    assert any(name == SILENT_NAME for name, _ in dns.queries), dns.queries
    # A blocking lookup stalls for its whole 1 s timeout; 0.5 s leaves room for a busy box.
    assert max(times) < 0.5, max(times)
    assert p99(times) < 0.05, (p99(times), max(times))

    with p.client() as pc, r.client() as rc:
        assert pc.cmd("CREATE f") == "CREATED"
        pc.add("f", keys("k", 2000))
        assert rc.cmd("REPLICAOF %s %d" % (PRIMARY_NAME, p.port)) == "OK"
        wait_caught_up(pc, [rc])
        assert role(rc)["primary"] == "%s:%d" % (PRIMARY_NAME, p.port)
        assert all(rc.check("f", keys("k", 2000)))
    assert (PRIMARY_NAME, 1) in dns.queries
    assert r.alive()


def test_nxdomain_from_the_resolver_is_logged_and_retried(daemon_factory, private_resolver):
    wrap, dns = private_resolver
    r = wrap(daemon_factory(args=["--replica-of", "gone.bloomd.test:1"], start=False)).start()
    wait_for("two failed lookups",
             lambda: r.log().count("cannot resolve gone.bloomd.test:1") >= 2, 30)
    with r.client() as rc:
        assert role(rc)["link"] == "down"
    assert sum(1 for name, _ in dns.queries if name == "gone.bloomd.test") >= 2


def test_link_replaced_and_stopped_while_a_lookup_is_under_way(daemon_factory,
                                                               private_resolver):
    """REPLICAOF, and then SIGTERM, each while a lookup waits for its answer: the old
    lookup's late end (evdns answers failed requests from the loop) reaches no freed
    link; the daemon exits 0 with a clean sanitizer report (checked by stop())."""
    wrap, dns = private_resolver
    r = wrap(daemon_factory(args=["--replica-of", "%s:1" % SILENT_NAME], start=False)).start()

    def asked(port_name, n):
        return lambda: sum(1 for name, _ in dns.queries if name == port_name) >= n
    wait_for("the first lookup", asked(SILENT_NAME, 1), 10, step=0.005)
    with r.client() as rc:
        assert rc.cmd("REPLICAOF silent.bloomd.test 2") == "OK"
        wait_for("the second lookup", asked(SILENT_NAME, 3), 10, step=0.005)
        assert rc.cmd("REPLICAOF NO ONE") == "OK"
        assert role(rc)["role"] == "primary"
        assert rc.cmd("REPLICAOF %s 3" % SILENT_NAME) == "OK"
        wait_for("the third lookup", asked(SILENT_NAME, 5), 10, step=0.005)
    r.stop()
    assert "cannot resolve" not in r.log()  # none of them got to its timeout


def test_every_address_of_the_name_is_tried(daemon_factory, private_resolver):
    """The name's first address refuses (nobody listens on 127.0.0.2): the next one is
    tried at once, not after a backoff and a new lookup."""
    wrap, dns = private_resolver
    p = start(daemon_factory)
    with p.client() as pc:
        assert pc.cmd("CREATE f") == "CREATED"
        assert pc.cmd("ADD f a") == "ADDED 1"
    r = wrap(daemon_factory(args=["--replica-of", "%s:%d" % (MULTI_NAME, p.port)],
                            start=False)).start()
    with p.client() as pc, r.client() as rc:
        wait_caught_up(pc, [rc])
        assert rc.check("f", ["a"]) == [True]
    log = r.log()
    assert "link to %s:%d at 127.0.0.2 failed" % (MULTI_NAME, p.port) in log, log[-2000:]
    assert "trying its next address" in log
    assert "dropped" not in log and "next try in" not in log, log[-2000:]
