"""The TLS listener (--tls-port): handshake and commands from Python's ssl with a CA the
test makes with openssl, client certificates, wrong-protocol bytes on either port, an
expired certificate, and SIGHUP reloading a new certificate.
"""
import shutil
import signal
import socket
import ssl
import subprocess
import time

import pytest

from conftest import read_until_closed
from httputil import free_port

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl(1)")


def _run(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


class CA:
    """A throwaway CA that signs server and client certificates for 127.0.0.1."""

    def __init__(self, d):
        self.d = d
        self.key, self.cert = d / "ca.key", d / "ca.pem"
        _run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(self.key),
             "-out", str(self.cert), "-days", "2", "-subj", "/CN=bloomd test CA")

    def issue(self, name, days=2, server=True, expired=False,
              san="IP:127.0.0.1,DNS:localhost"):
        key, csr, crt = (self.d / (name + s) for s in (".key", ".csr", ".pem"))
        ext = self.d / (name + ".ext")
        ext.write_text("subjectAltName=%s\n" % san if server else
                       "extendedKeyUsage=clientAuth\n")
        _run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
             "-subj", "/CN=" + name)
        sign = ["x509", "-req", "-in", str(csr), "-CA", str(self.cert), "-CAkey",
                str(self.key), "-CAcreateserial", "-out", str(crt), "-extfile", str(ext)]
        if expired:
            # Valid yesterday only: openssl x509 cannot backdate, so -not_before/-not_after
            # (OpenSSL 3) or a negative -days; fall back to a 1-second certificate.
            try:
                _run(*sign, "-not_before", "20200101000000Z", "-not_after", "20200102000000Z")
            except subprocess.CalledProcessError:
                _run(*sign, "-days", "-1")
        else:
            _run(*sign, "-days", str(days))
        return crt, key


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return CA(tmp_path_factory.mktemp("ca"))


def tls_daemon(daemon_factory, crt, key, ca_file=None):
    port = free_port()
    args = ["--tls-port", str(port), "--tls-cert-file", str(crt), "--tls-key-file", str(key)]
    if ca_file:
        args += ["--tls-ca-file", str(ca_file)]
    d = daemon_factory(args)
    deadline = time.monotonic() + 10
    while ":%d (TLS bloomd" % port not in d.log() and time.monotonic() < deadline:
        time.sleep(0.02)
    # The listener's own line says TLS; the plain one does not.
    assert "listening on 127.0.0.1:%d (TLS bloomd protocol)" % port in d.log(), d.log()
    assert "(bloomd protocol)" in d.log()
    return d, port


def context(ca, cert=None):
    ctx = ssl.create_default_context(cafile=str(ca.cert))
    if cert:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    return ctx


class TLSClient:
    def __init__(self, port, ctx, timeout=10):
        raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        self.buf = b""

    def cmd(self, line):
        self.sock.sendall(line.encode() + b"\r\n")
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        out, _, self.buf = self.buf.partition(b"\r\n")
        return out.decode()

    def close(self):
        self.sock.close()


def test_handshake_and_commands(daemon_factory, ca):
    d, port = tls_daemon(daemon_factory, *ca.issue("server"))
    c = TLSClient(port, context(ca))
    assert c.sock.version() in ("TLSv1.2", "TLSv1.3")
    assert c.cmd("CREATE t") == "CREATED"
    keys = " ".join("k%d" % i for i in range(100))
    assert c.cmd("CHECKADD t " + keys) == " ".join(["0"] * 100)
    assert c.cmd("CHECK t " + keys) == " ".join(["1"] * 100)
    c.close()
    # The plain port serves the same filters side by side.
    with d.client() as p:
        assert p.cmd("CHECK t k1") == "1"
    assert d.alive()


def test_pipelined_burst_over_tls(daemon_factory, ca):
    d, port = tls_daemon(daemon_factory, *ca.issue("server"))
    c = TLSClient(port, context(ca))
    assert c.cmd("CREATE t") == "CREATED"
    keys = " ".join("k%d" % i for i in range(100))
    n = 3000
    c.sock.sendall(("CHECKADD t " + keys + "\r\n").encode() * n)
    want = len(keys.split())
    got = 0
    while got < n:
        while b"\r\n" not in c.buf:
            c.buf += c.sock.recv(1 << 16)
        line, _, c.buf = c.buf.partition(b"\r\n")
        assert len(line.split()) == want
        got += 1
    assert c.cmd("VERSION").startswith("VERSION")
    c.close()
    assert d.alive()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_tls_1_1_refused(daemon_factory, ca):
    d, port = tls_daemon(daemon_factory, *ca.issue("server"))
    ctx = context(ca)
    ctx.minimum_version = ssl.TLSVersion.TLSv1
    ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises((ssl.SSLError, OSError)):
        TLSClient(port, ctx)
    assert d.alive()


def test_client_certificate_required(daemon_factory, ca):
    d, port = tls_daemon(daemon_factory, *ca.issue("server"), ca_file=ca.cert)
    good = TLSClient(port, context(ca, ca.issue("client", server=False)))
    assert good.cmd("LIST") == "END"
    good.close()
    with pytest.raises((ssl.SSLError, OSError)):
        c = TLSClient(port, context(ca))
        c.cmd("LIST")  # TLS 1.3: the refusal arrives with the first read
    assert d.alive()
    assert "TLS handshake with" in d.log() or "certificate" in d.log()


def test_plaintext_to_tls_port(daemon_factory, ca):
    """Plain text on the TLS port gets one plain line saying so and a close at once (issue
    27), not a silent reset; the filters are untouched and real TLS clients still work."""
    d, port = tls_daemon(daemon_factory, *ca.issue("server"))
    for request in (b"VERSION\r\n", b"LIST\r\n", b"get f:k\r\n" * 50):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            t0 = time.monotonic()
            s.sendall(request)
            data = read_until_closed(s, timeout=5)
            took = time.monotonic() - t0
        assert data == b"CLIENT_ERROR this port speaks TLS\r\n", (request[:20], data)
        assert took < 1.0, took
    assert "TLS handshake with 127.0.0.1" in d.log()
    assert "plain text, not TLS" in d.log()
    # A client that says nothing is still given the handshake's deadline, and a TLS client
    # whose first bytes come slowly is not mistaken for plain text.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        time.sleep(0.3)
        c = TLSClient.__new__(TLSClient)
        c.sock, c.buf = context(ca).wrap_socket(raw, server_hostname="127.0.0.1"), b""
        assert c.cmd("VERSION").startswith("VERSION")
    c = TLSClient(port, context(ca))
    assert c.cmd("LIST") == "END"
    c.close()
    with d.client() as p:
        assert p.cmd("LIST") == "END"
    assert d.alive()


def test_plaintext_client_that_keeps_sending(daemon_factory, ca):
    """A plain client that keeps writing to the TLS port after the line is cut off within
    seconds (its input is drained 64 KiB at most), and costs the daemon nothing after."""
    d, port = tls_daemon(daemon_factory, *ca.issue("server"))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"VERSION\r\n")
        got, t0, closed = b"", time.monotonic(), False
        while time.monotonic() - t0 < 10 and not closed:
            try:
                s.sendall(b"x" * 4096)
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            s.settimeout(0.01)
            try:
                chunk = s.recv(4096)
                got += chunk
                closed = chunk == b""
            except socket.timeout:
                pass
            except ConnectionResetError:
                closed = True
        assert closed, "still open after %.1f s" % (time.monotonic() - t0)
        assert time.monotonic() - t0 < 5
    assert got.startswith(b"CLIENT_ERROR this port speaks TLS\r\n") or got == b"", got[:80]
    with d.client() as p:
        assert p.cmd("VERSION").startswith("VERSION")
    assert d.alive()


def test_tls_to_plain_port(daemon_factory, ca):
    d, port = tls_daemon(daemon_factory, *ca.issue("server"))
    with pytest.raises((ssl.SSLError, OSError)):
        TLSClient(d.port, context(ca), timeout=5)
    assert "TLS handshake on the plain port" in d.log()
    with d.client() as p:
        assert p.cmd("LIST") == "END"


def test_expired_certificate(daemon_factory, ca):
    d, port = tls_daemon(daemon_factory, *ca.issue("old", expired=True))
    assert "has expired" in d.log()
    with pytest.raises(ssl.SSLCertVerificationError):
        TLSClient(port, context(ca))
    assert d.alive()


def test_sighup_reloads_the_certificate(daemon_factory, ca, tmp_path):
    crt, key = ca.issue("first")
    live_crt, live_key = tmp_path / "live.pem", tmp_path / "live.key"
    shutil.copy(crt, live_crt)
    shutil.copy(key, live_key)
    d, port = tls_daemon(daemon_factory, live_crt, live_key)
    c = TLSClient(port, context(ca))
    assert c.sock.getpeercert()["subject"] == ((("commonName", "first"),),)
    new_crt, new_key = ca.issue("second")
    shutil.copy(new_crt, live_crt)
    shutil.copy(new_key, live_key)
    d.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "TLS certificate reloaded" not in d.log() and time.monotonic() < deadline:
        time.sleep(0.02)
    c2 = TLSClient(port, context(ca))
    assert c2.sock.getpeercert()["subject"] == ((("commonName", "second"),),)
    assert c.cmd("LIST") == "END"  # the old connection lives on
    # A broken file keeps the old certificate.
    live_key.write_text("garbage")
    d.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "not reloaded" not in d.log() and time.monotonic() < deadline:
        time.sleep(0.02)
    c3 = TLSClient(port, context(ca))
    assert c3.cmd("LIST") == "END"
    for x in (c, c2, c3):
        x.close()


def test_tls_with_auth(daemon_factory, ca, tmp_path):
    tok = tmp_path / "tok"
    tok.write_text("tlstoken\n")
    crt, key = ca.issue("server")
    port = free_port()
    d = daemon_factory(["--tls-port", str(port), "--tls-cert-file", str(crt), "--tls-key-file",
                        str(key), "--auth-token-file", str(tok)])
    deadline = time.monotonic() + 10
    while ":%d (TLS bloomd" % port not in d.log() and time.monotonic() < deadline:
        time.sleep(0.02)
    c = TLSClient(port, context(ca))
    assert c.cmd("LIST") == "CLIENT_ERROR authentication required"
    assert c.cmd("AUTH tlstoken") == "OK"
    assert c.cmd("LIST") == "END"
    c.close()


def read_to_end(sock, timeout=20):
    """Everything until the server closes (close_notify or a bare FIN both end it)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while True:
            chunk = sock.recv(1 << 16)
            if not chunk:
                return data
            data += chunk
    except (ssl.SSLError, ConnectionResetError):
        return data


def test_half_close_still_gets_every_reply(daemon_factory, ca):
    """The client sends a burst and ends its side (TCP FIN under TLS): every reply still
    arrives, more than the transport buffers at once, then the server closes."""
    d, port = tls_daemon(daemon_factory, *ca.issue("server"))
    c = TLSClient(port, context(ca))
    assert c.cmd("CREATE t") == "CREATED"
    keys = " ".join("k%d" % i for i in range(100))
    n = 4000  # ~800 KB of replies
    c.sock.sendall(("CHECKADD t " + keys + "\r\n").encode() * n)
    socket.socket.shutdown(c.sock, socket.SHUT_WR)  # TCP only: the SSL object stays usable
    lines = (c.buf + read_to_end(c.sock)).split(b"\r\n")
    assert lines[-1] == b""
    assert len(lines) - 1 == n
    assert all(len(x.split()) == 100 for x in lines[:-1])
    c.close()
    assert d.alive()


def test_quit_over_tls(daemon_factory, ca):
    d, port = tls_daemon(daemon_factory, *ca.issue("server"))
    c = TLSClient(port, context(ca))
    c.sock.sendall(b"VERSION\r\nQUIT\r\nVERSION\r\n")
    data = read_to_end(c.sock)
    assert data.startswith(b"VERSION ") and data.count(b"\r\n") == 1, data
    c.close()
    assert d.alive()


def test_idle_timeout_over_tls(daemon_factory, ca):
    crt, key = ca.issue("server")
    port = free_port()
    d = daemon_factory(["--tls-port", str(port), "--tls-cert-file", str(crt), "--tls-key-file",
                        str(key), "--idle-timeout", "1"])
    deadline = time.monotonic() + 10
    while ":%d (TLS bloomd" % port not in d.log() and time.monotonic() < deadline:
        time.sleep(0.02)
    idle = TLSClient(port, context(ca))
    busy = TLSClient(port, context(ca))
    for _ in range(6):
        time.sleep(0.3)
        assert busy.cmd("VERSION").startswith("VERSION ")
    assert read_to_end(idle.sock, timeout=5) == b""
    assert busy.cmd("VERSION").startswith("VERSION ")
    idle.close()
    busy.close()
    assert "idle for 1 s" in d.log()


def test_tls_sessions_count_in_the_memory_budget(daemon_factory, ca):
    """A TLS client's session and transport buffers are part of memory_connections."""
    d, port = tls_daemon(daemon_factory, *ca.issue("server"))
    plain = d.client()
    plain.stats()  # the asking client's own reply buffer, kept from here on
    before = int(plain.stats()["memory_connections"])
    clients = [TLSClient(port, context(ca)) for _ in range(20)]
    for c in clients:
        assert c.cmd("VERSION").startswith("VERSION ")
    during = int(plain.stats()["memory_connections"])
    for c in clients:
        c.close()
    deadline = time.monotonic() + 10
    after = during
    while time.monotonic() < deadline:
        after = int(plain.stats()["memory_connections"])
        if after <= before:
            break
        time.sleep(0.05)
    # Each session is charged at least its OpenSSL share (40 KiB), and all of it comes back.
    assert during - before >= 20 * 40 * 1024, (before, during)
    assert after <= before, (before, during, after)
    assert d.alive()


@pytest.mark.parametrize("missing", ["cert", "key"])
def test_missing_certificate_file_is_a_config_error(tmp_path, ca, missing):
    """A TLS certificate or key that cannot be loaded stops start-up with exit status 2,
    as any bad configuration does (bloomd(1)), and the log says which file."""
    from conftest import BLOOMD_BIN
    crt, key = ca.issue("localhost")
    files = {"cert": str(crt), "key": str(key)}
    files[missing] = str(tmp_path / "nosuch.pem")
    r = subprocess.run([BLOOMD_BIN, "--bind", "127.0.0.1", "--port", "0", "--data-dir",
                        str(tmp_path / "d"), "--tls-port", str(free_port()),
                        "--tls-cert-file", files["cert"], "--tls-key-file", files["key"]],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "nosuch.pem" in r.stderr, r.stderr
