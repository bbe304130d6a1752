"""TLS from a replica to its primary's --tls-port (issue 24): --replica-tls with
--replica-tls-ca-file verifies the primary's certificate and that it names the host of
--replica-of (SNI for a name, the IP address otherwise); REPLICAOF at run time uses the
same settings. A wrong CA or a certificate for another name gives no link (ROLE ... down,
one clear log line per try) and no crash; --replica-tls-insecure links anyway. The CA and
certificates are made with openssl(1) here, as test_tls.py does.
"""
import shutil
import socket
import ssl
import subprocess
import threading

import pytest

from test_replication import doc_block, free_port, keys, role, start, wait_caught_up, wait_for
from test_tls import CA, tls_daemon

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl(1)")


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return CA(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory):
    return CA(tmp_path_factory.mktemp("other_ca"))


def tls_replica(daemon_factory, host, port, *args):
    return start(daemon_factory, ["--replica-of", "%s:%d" % (host, port), "--replica-tls",
                                  *args])


def stays_down(r, needle, tries=2, deadline=30.0):
    """Waits until the replica's log has said needle on `tries` link attempts; asserts the
    link never came up meanwhile and the daemon still answers."""
    wait_for("%d failed link attempts" % tries, lambda: r.log().count(needle) >= tries,
             deadline)
    with r.client() as rc:
        got = role(rc)
        assert got["link"] == "down", got
        assert rc.names() == []  # nothing came over
        assert rc.cmd("VERSION").startswith("VERSION")
    assert "replication: connected to primary" not in r.log()
    assert r.alive()


def test_replica_over_tls_follows(daemon_factory, ca):
    p, tls_port = tls_daemon(daemon_factory, *ca.issue("server"))
    r = tls_replica(daemon_factory, "127.0.0.1", tls_port, "--replica-tls-ca-file", str(ca.cert))
    with p.client() as pc, r.client() as rc:
        assert pc.cmd("CREATE f capacity=50000") == "CREATED"
        pc.add("f", keys("k", 20000), chunk=1000)
        wait_caught_up(pc, [rc])
        assert role(rc)["primary"] == "127.0.0.1:%d" % tls_port
        assert all(rc.check("f", keys("k", 20000), chunk=1000))
        # Records streamed after the sync arrive over the same link.
        assert pc.cmd("CREATE g") == "CREATED"
        assert pc.cmd("ADD g later") == "ADDED 1"
        wait_caught_up(pc, [rc])
        assert rc.check("g", ["later"]) == [True]
    assert "replication: connected to primary 127.0.0.1:%d over TLSv1." % tls_port in r.log()
    # The primary saw a TLS client: the plain port was not used.
    assert "TLS handshake with" not in p.log(), p.log()[-2000:]


def test_replicaof_at_run_time_uses_tls_and_the_name(daemon_factory, ca):
    """REPLICAOF localhost <tls-port> on a primary started with the replica_tls settings
    (from BLOOMD_ variables): the name is sent as SNI and checked against the
    certificate's DNS name."""
    p, tls_port = tls_daemon(daemon_factory, *ca.issue("server"))
    # The environment's names, this time (flags in the other tests).
    b = start(daemon_factory, env={"BLOOMD_REPLICA_TLS": "yes",
                                   "BLOOMD_REPLICA_TLS_CA_FILE": str(ca.cert)})
    with p.client() as pc, b.client() as bc:
        assert pc.cmd("CREATE f") == "CREATED"
        pc.add("f", keys("a", 3000))
        assert role(bc)["role"] == "primary"
        assert bc.cmd("REPLICAOF localhost %d" % tls_port) == "OK"
        wait_caught_up(pc, [bc])
        assert role(bc)["primary"] == "localhost:%d" % tls_port
        assert all(bc.check("f", keys("a", 3000)))
    assert "over TLSv1." in b.log()


def test_wrong_ca_gives_no_link_and_insecure_links(daemon_factory, ca, other_ca):
    p, tls_port = tls_daemon(daemon_factory, *ca.issue("server"))
    with p.client() as pc:
        assert pc.cmd("CREATE f") == "CREATED"
        assert pc.cmd("ADD f a b c") == "ADDED 3"
    r = tls_replica(daemon_factory, "127.0.0.1", tls_port,
                    "--replica-tls-ca-file", str(other_ca.cert))
    stays_down(r, "TLS: the primary's certificate: unable to get local issuer certificate "
                  "(verified against %s)" % other_ca.cert)
    # The same replica, told not to verify, links (and says so at WARN).
    r.restart(args=["--replica-of", "127.0.0.1:%d" % tls_port, "--replica-tls",
                    "--replica-tls-insecure"])
    with p.client() as pc, r.client() as rc:
        wait_caught_up(pc, [rc])
        assert rc.check("f", ["a", "b", "c"]) == [True] * 3
    assert "without verifying its certificate (replica_tls_insecure)" in r.log()


def test_certificate_for_another_name_gives_no_link(daemon_factory, ca):
    crt, key = ca.issue("elsewhere", san="DNS:elsewhere.example")
    p, tls_port = tls_daemon(daemon_factory, crt, key)
    r = tls_replica(daemon_factory, "127.0.0.1", tls_port, "--replica-tls-ca-file", str(ca.cert))
    stays_down(r, "TLS: the primary's certificate does not name 127.0.0.1")
    with r.client() as rc:
        assert rc.cmd("REPLICAOF localhost %d" % tls_port) == "OK"
    stays_down(r, "TLS: the primary's certificate does not name localhost")


def test_replica_tls_towards_a_plain_port(daemon_factory, ca):
    """A TLS replica pointed at the primary's plain port: no link, a log line that says
    why, no crash, and the primary is unharmed."""
    p = start(daemon_factory)
    r = tls_replica(daemon_factory, p.host, p.port, "--replica-tls-ca-file", str(ca.cert))
    wait_for("a failed TLS link", lambda: r.log().count("replication: link to") >= 2)
    with r.client() as rc:
        assert role(rc)["link"] == "down"
    assert "TLS" in r.log().split("replication: link to", 1)[1].split("\n", 1)[0]
    with p.client() as pc:
        assert role(pc)["replicas"] == 0
        assert pc.cmd("VERSION").startswith("VERSION")


def test_retries_back_off(daemon_factory, ca, other_ca):
    """Failed attempts are spaced 0.5, 1, 2, 4 s ... (at most 5 s), not every 0.5 s."""
    p, tls_port = tls_daemon(daemon_factory, *ca.issue("server"))
    r = tls_replica(daemon_factory, "127.0.0.1", tls_port,
                    "--replica-tls-ca-file", str(other_ca.cert))
    needle = "replication: link to"
    wait_for("4 failed attempts", lambda: r.log().count(needle) >= 4, 30)
    stamps = [line.split(" ", 1)[0] for line in r.log().splitlines() if needle in line][:4]

    def secs(s):  # 2026-12-02T02:12:55.119Z
        h, m, rest = s.split("T", 1)[1].rstrip("Z").split(":")
        return int(h) * 3600 + int(m) * 60 + float(rest)
    gaps = [secs(b) - secs(a) for a, b in zip(stamps, stamps[1:])]
    assert gaps[0] >= 0.4 and gaps[1] >= 0.9 and gaps[2] >= 1.9, gaps


@pytest.mark.parametrize("args, why", [
    (["--replica-tls-ca-file", "/nonexistent"], "replica_tls_ca_file needs replica_tls"),
    (["--replica-tls-insecure"], "replica_tls_insecure needs replica_tls"),
    (["--replica-tls-cert-file", "/nonexistent"], "replica_tls_cert_file needs replica_tls"),
])
def test_options_without_replica_tls_are_refused(daemon_factory, tmp_path, args, why):
    d = daemon_factory(start=False)
    out = subprocess.run(d.command() + args, capture_output=True, text=True, timeout=30)
    assert out.returncode != 0
    assert why in out.stderr + out.stdout


def test_unreadable_ca_file_is_logged_and_retried(daemon_factory, ca, tmp_path):
    """A CA file that cannot be read does not stop the daemon: the link stays down, says
    why, and takes the file once it is there (read again at each attempt until it loads)."""
    p, tls_port = tls_daemon(daemon_factory, *ca.issue("server"))
    later = tmp_path / "later-ca.pem"
    r = tls_replica(daemon_factory, "127.0.0.1", tls_port, "--replica-tls-ca-file", str(later))
    wait_for("the CA file named", lambda: str(later) in r.log())
    with r.client() as rc:
        assert role(rc)["link"] == "down"
    shutil.copy(ca.cert, later)
    with p.client() as pc, r.client() as rc:
        wait_caught_up(pc, [rc], deadline=30)
    assert r.alive()


def test_doc_example_links(daemon_factory, ca, tmp_path):
    """The High availability docs' TLS command lines, their host, ports and files
    replaced, link as described."""
    block = doc_block("sh", "--replica-tls")
    lines = [l.split()[1:] for l in block.splitlines() if l.startswith("bloomd ")]
    assert len(lines) == 2, block
    crt, key = ca.issue("server")
    subst = {"/etc/bloomd/primary.pem": str(crt), "/etc/bloomd/primary.key": str(key),
             "/etc/bloomd/ca.pem": str(ca.cert), "primary.example": "localhost"}
    tls_port = free_port()
    subst["8676"] = str(tls_port)

    def fix(words):
        out = []
        for w in words:
            for k, v in subst.items():
                w = w.replace(k, v)
            out.append(w)
        return out
    p = start(daemon_factory, fix(lines[0]))
    r = start(daemon_factory, fix(lines[1]))
    with p.client() as pc, r.client() as rc:
        assert pc.cmd("CREATE f") == "CREATED"
        assert pc.cmd("ADD f x") == "ADDED 1"
        wait_caught_up(pc, [rc])
        assert rc.check("f", ["x"]) == [True]
        assert role(rc)["primary"] == "localhost:%d" % tls_port


class SNIRecorder:
    """A TLS server (Python's ssl) that records the server name each client sends (None
    without SNI), then closes: enough to see what the replica's handshake carries."""

    def __init__(self, crt, key):
        self.names = []
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(crt), str(key))
        ctx.sni_callback = lambda sock, name, c: self.names.append(name)
        self.ctx = ctx
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.done = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while not self.done:
            try:
                raw, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            raw.settimeout(5)
            try:
                with self.ctx.wrap_socket(raw, server_side=True) as s:
                    s.recv(100)
            except (ssl.SSLError, OSError):
                pass

    def close(self):
        self.done = True
        self.thread.join(5)
        self.sock.close()


def test_sni_is_the_name_and_never_an_address(daemon_factory, ca):
    srv = SNIRecorder(*ca.issue("server"))
    try:
        r = tls_replica(daemon_factory, "localhost", srv.port, "--replica-tls-ca-file",
                        str(ca.cert))
        wait_for("a handshake with SNI", lambda: "localhost" in srv.names)
        with r.client() as rc:
            assert rc.cmd("REPLICAOF 127.0.0.1 %d" % srv.port) == "OK"
            n = len(srv.names)
            wait_for("a handshake without SNI", lambda: None in srv.names[n:])
        assert set(srv.names) <= {"localhost", None}, srv.names
    finally:
        srv.close()


def test_client_certificate_for_a_primary_that_requires_one(daemon_factory, ca):
    """A primary with --tls-ca-file takes replicas that show a certificate its CA signed
    (--replica-tls-cert-file/--replica-tls-key-file); one without gets no link."""
    p, tls_port = tls_daemon(daemon_factory, *ca.issue("server"), ca_file=ca.cert)
    with p.client() as pc:
        assert pc.cmd("CREATE f") == "CREATED"
        assert pc.cmd("ADD f a") == "ADDED 1"
    bare = tls_replica(daemon_factory, "127.0.0.1", tls_port, "--replica-tls-ca-file",
                       str(ca.cert))
    crt, key = ca.issue("replica", server=False)
    r = tls_replica(daemon_factory, "127.0.0.1", tls_port, "--replica-tls-ca-file",
                    str(ca.cert), "--replica-tls-cert-file", str(crt),
                    "--replica-tls-key-file", str(key))
    with p.client() as pc, r.client() as rc:
        wait_caught_up(pc, [rc])
        assert rc.check("f", ["a"]) == [True]
    wait_for("the bare replica refused twice",
             lambda: bare.log().count("replication: link to") >= 2)
    # The replica reads the primary's alert ("certificate required"), or a reset if the
    # primary's close overtook it; the primary says why either way.
    assert "peer did not return a certificate" in p.log()
    with bare.client() as bc:
        assert role(bc)["link"] == "down" and bc.names() == []


def test_certificate_without_its_key_is_refused(daemon_factory, ca):
    crt, _ = ca.issue("replica", server=False)
    d = daemon_factory(start=False)
    out = subprocess.run(d.command() + ["--replica-tls", "--replica-tls-cert-file", str(crt)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode != 0
    assert "replica_tls_cert_file and replica_tls_key_file go together" in out.stderr + out.stdout
