"""Token authentication (AUTH), protected mode and the HTTP bearer check (issue 17).

Each daemon gets its token from a file (--auth-token-file) or BLOOMD_AUTH_TOKEN, never a
flag. Before a good AUTH only AUTH, HELP, VERSION and QUIT run; a failed AUTH is answered
late (about 250 ms) and the fifth closes the connection. The memcached listener takes
memcached's ASCII authentication (a set whose data is "<username> <token>") the same way.
"""
import os
import selectors
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid

import pytest

from conftest import Client
from httputil import free_port, http_daemon

TOKEN = "s3cret token with spaces"

# Every command, with arguments that would work after AUTH (f exists by then).
GUARDED = ["CREATE g", "ADD f a", "CHECK f a", "CHECKADD f b", "UNION u f", "INTERSECT i f",
           "INFO f", "LIST", "DROP f", "CLEAR f", "FLUSH", "STATS"]
OPEN = ["HELP", "VERSION"]


@pytest.fixture
def token_file(tmp_path):
    p = tmp_path / "token"
    p.write_text(TOKEN + "\n")
    p.chmod(0o600)
    return p


@pytest.fixture
def authd(daemon_factory, token_file):
    return daemon_factory(["--auth-token-file", str(token_file)])


def authed(d):
    c = d.client()
    assert c.cmd("AUTH " + TOKEN) == "OK"
    return c


def reply_of(c, request):
    """The first line of the reply; drains a multi-line block."""
    c.send(request + "\r\n")
    first = c.line()
    if first.startswith(("STAT ", "FILTER ")) or request in ("HELP", "LIST"):
        line = first
        while line != "END":
            line = c.line()
    return first


def test_every_command_refused_before_auth_and_allowed_after(authd):
    with authed(authd) as c:
        assert c.cmd("CREATE f") == "CREATED"
    with authd.client() as c:
        for req in GUARDED:
            assert c.cmd(req) == "CLIENT_ERROR authentication required", req
        for req in OPEN:
            assert not reply_of(c, req).startswith("CLIENT_ERROR"), req
        assert c.cmd("AUTH " + TOKEN) == "OK"
        for req in GUARDED:
            r = reply_of(c, req)
            assert not r.startswith(("CLIENT_ERROR", "ERROR", "SERVER_ERROR")), (req, r)
        c.send("QUIT\r\n")
        assert c.read_until_closed() == b""
    # Nothing ran before AUTH: g exists once (created after), f was dropped after.
    with authed(authd) as c:
        assert "g" in c.names()


def test_refused_requests_do_not_run(authd):
    with authd.client() as c:
        assert c.cmd("CREATE nope") == "CLIENT_ERROR authentication required"
        assert c.cmd("AUTH " + TOKEN) == "OK"
        assert c.names() == []


def test_pipelined_requests_before_auth_are_each_refused(authd):
    with authd.client() as c:
        c.send("CHECK f a\r\n" * 50 + "AUTH %s\r\nCREATE p\r\n" % TOKEN)
        for _ in range(50):
            assert c.line() == "CLIENT_ERROR authentication required"
        assert c.line() == "OK"
        assert c.line() == "CREATED"


@pytest.mark.parametrize("attempt", ["AUTH wrong", "AUTH", "AUTH ", "AUTH " + TOKEN + " ",
                                     "AUTH s3cret", "auth S3CRET TOKEN WITH SPACES"])
def test_wrong_tokens_fail_slowly(authd, attempt):
    with authd.client() as c:
        t0 = time.monotonic()
        assert c.cmd(attempt) == "CLIENT_ERROR invalid token"
        assert time.monotonic() - t0 >= 0.2
        assert c.cmd("LIST") == "CLIENT_ERROR authentication required"
        assert c.cmd("AUTH " + TOKEN) == "OK"
    assert "AUTH failed" in authd.log() and "127.0.0.1:" in authd.log()


def test_requests_behind_a_failed_auth_wait_for_its_reply(authd):
    with authd.client() as c:
        c.send("AUTH bad\r\nAUTH %s\r\nCREATE w\r\n" % TOKEN)
        assert c.line() == "CLIENT_ERROR invalid token"
        assert c.line() == "OK"
        assert c.line() == "CREATED"


def test_five_failures_close_the_connection(authd):
    with authd.client() as c:
        for i in range(4):
            assert c.cmd("AUTH guess%d" % i) == "CLIENT_ERROR invalid token"
        c.send("AUTH guess4\r\nAUTH %s\r\n" % TOKEN)
        rest = c.read_until_closed()
        assert rest == b"CLIENT_ERROR invalid token; too many failures, closing\r\n"
    with authed(authd):
        pass


def test_one_mib_token_line(authd):
    with authd.client() as c:
        c.send("AUTH " + "x" * (1 << 20) + "\r\n")
        out = c.read_until_closed()
        assert out.startswith(b"CLIENT_ERROR line too long"), out[:100]
    with authed(authd) as c:
        assert c.cmd("VERSION").startswith("VERSION")


def test_token_from_environment(daemon_factory):
    d = daemon_factory(env={"BLOOMD_AUTH_TOKEN": "envtok"})
    with d.client() as c:
        assert c.cmd("LIST") == "CLIENT_ERROR authentication required"
        assert c.cmd("AUTH envtok") == "OK"


def test_token_is_never_a_flag(daemon_factory, tmp_path):
    from conftest import BLOOMD_BIN
    r = subprocess.run([BLOOMD_BIN, "--data-dir", str(tmp_path / "d"), "--auth-token", "x"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "cannot be a flag" in r.stderr
    help_text = subprocess.run([BLOOMD_BIN, "--help"], capture_output=True, text=True).stdout
    assert "--auth-token-file" in help_text and "--auth-token " not in help_text


@pytest.mark.parametrize("content", ["", "\n", "a\nb\n"])
def test_bad_token_file_stops_start_up(tmp_path, content):
    from conftest import BLOOMD_BIN
    p = tmp_path / "tok"
    p.write_text(content)
    r = subprocess.run([BLOOMD_BIN, "--data-dir", str(tmp_path / "d"), "--auth-token-file",
                        str(p)], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "auth token file" in r.stderr, r.stderr


def test_auth_without_a_configured_token(bloomd):
    with bloomd.client() as c:
        assert c.cmd("AUTH x") == "CLIENT_ERROR no auth_token is configured"
        assert c.cmd("LIST") == "END"


def memcache_daemon(daemon_factory, token_file, extra=()):
    port = free_port()
    d = daemon_factory(["--auth-token-file", str(token_file), "--memcache-port", str(port),
                        *extra])
    deadline = time.monotonic() + 10
    while "memcached protocol" not in d.log() and time.monotonic() < deadline:
        time.sleep(0.02)
    return d, port


def test_memcached_ascii_auth(daemon_factory, token_file):
    """memcached 1.5.15's convention: `set <any key> ...` with "<user> <token>" as its data."""
    pymemcache = pytest.importorskip("pymemcache", reason="python3-pymemcache is not installed")
    from pymemcache.exceptions import MemcacheClientError
    d, port = memcache_daemon(daemon_factory, token_file)
    c = pymemcache.client.base.Client(("127.0.0.1", port), timeout=10, default_noreply=False)
    for refused in (lambda: c.add("f:a", "1"), lambda: c.set("f:a", "1", noreply=True) and
                    c.get("f:a"), lambda: c.version(), lambda: c.stats()):
        with pytest.raises(MemcacheClientError, match="unauthenticated"):
            refused()
    start = time.monotonic()
    with pytest.raises(MemcacheClientError, match="authentication failure"):
        c.set("auth", "user wrong-token")
    assert time.monotonic() - start >= 0.2  # a failure is answered late
    with pytest.raises(MemcacheClientError, match="unauthenticated"):
        c.add("f:a", "1")
    assert c.set("auth", "anyone " + TOKEN) is True  # any user; the token has spaces
    assert c.add("f:a", "1") is True
    assert c.add("f:a", "1") is False
    assert c.get("f:a") == b"1"
    assert c.set("f:b", "1") is True  # after authentication a set is a set again
    assert c.get("f:b") == b"1"
    c.close()
    # pymemcache's defaults (noreply sets), as an application would write it.
    c = pymemcache.client.base.Client(("127.0.0.1", port), timeout=10)
    c.set("auth", "app " + TOKEN)
    assert c.add("f:c", "1", noreply=False) is True
    assert c.get("f:c") == b"1"
    c.close()
    # Nothing ran before authentication: the refused add and set did not add f:a.
    with authed(d) as b:
        assert b.cmd("CHECK f a b c zz") == "1 1 1 0"
    assert "AUTH failed" in d.log()


def test_memcached_auth_raw(daemon_factory, token_file):
    """The bytes on the wire, pipelined: a request before the set is refused, not run."""
    d, port = memcache_daemon(daemon_factory, token_file)
    tok = TOKEN.encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        data = b"u " + tok
        s.sendall(b"add f:k 0 0 1\r\nx\r\nset k 0 0 %d\r\n%s\r\nadd f:k 0 0 1\r\nx\r\n"
                  % (len(data), data))
        want = b"CLIENT_ERROR unauthenticated\r\nSTORED\r\nSTORED\r\n"
        got = b""
        while len(got) < len(want):
            chunk = s.recv(4096)
            assert chunk, got
            got += chunk
        assert got == want


def test_memcached_auth_failures_close(daemon_factory, token_file):
    d, port = memcache_daemon(daemon_factory, token_file)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"set k 0 0 3\r\nu x\r\n" * 5)
        got = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
    assert got == b"CLIENT_ERROR authentication failure\r\n" * 5


def _get(port, path, token=None):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path))
    if token is not None:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


@pytest.mark.parametrize("metrics_auth", [False, True])
def test_http_bearer(daemon_factory, token_file, metrics_auth):
    args = ["--auth-token-file", str(token_file)]
    if metrics_auth:
        args += ["--http-auth-metrics", "yes"]
    d, port = http_daemon(daemon_factory, args)
    for path in ("/api/filters", "/"):
        assert _get(port, path) == 401
        assert _get(port, path, "nope") == 401
        assert _get(port, path, TOKEN) == 200
    for path in ("/metrics", "/healthz", "/readyz"):
        assert _get(port, path) == (401 if metrics_auth else 200)
        assert _get(port, path, TOKEN) == 200


# ---- protected mode ----

def _non_loopback_ipv4():
    """An IPv4 address of this machine that is not loopback, or None."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks a route
        addr = s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()
    return None if addr.startswith("127.") else addr


def test_protected_mode_allows_loopback(daemon_factory):
    d = daemon_factory(["--bind", "0.0.0.0"])
    assert "protected mode" in d.log()
    with Client("127.0.0.1", d.port) as c:
        assert c.cmd("LIST") == "END"


def test_protected_mode_refuses_a_non_loopback_peer(daemon_factory, token_file):
    addr = _non_loopback_ipv4()
    if addr is None:
        pytest.skip("this machine has no non-loopback IPv4 address to connect from")
    d = daemon_factory(["--bind", "0.0.0.0"])
    with Client(addr, d.port) as c:
        out = c.read_until_closed()
    assert out == b"SERVER_ERROR protected mode: set auth_token or protected_mode no\r\n"
    assert d.alive()
    # Turned off, or with a token, the same peer is served.
    off = daemon_factory(["--bind", "0.0.0.0", "--protected-mode", "no"])
    assert "protected mode:" not in off.log()
    with Client(addr, off.port) as c:
        assert c.cmd("LIST") == "END"
    tok = daemon_factory(["--bind", "0.0.0.0", "--auth-token-file", str(token_file)])
    with Client(addr, tok.port) as c:
        assert c.cmd("LIST") == "CLIENT_ERROR authentication required"
        assert c.cmd("AUTH " + TOKEN) == "OK"


def test_guessing_is_bounded_server_wide(authd):
    """Failed AUTHs are answered at most about 20 a second across the whole server (each
    connection's own delay alone let 500 connections guess 1,864 times a second); a good
    token is answered at once meanwhile."""
    sel = selectors.DefaultSelector()
    socks = []
    for _ in range(100):
        s = socket.create_connection((authd.host, authd.port), timeout=10)
        s.sendall(b"AUTH wrong-guess\r\n")
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        socks.append(s)
    replies, end = 0, time.monotonic() + 3.0
    while time.monotonic() < end:
        for key, _ in sel.select(0.05):
            try:
                data = key.fileobj.recv(4096)
            except (BlockingIOError, ConnectionResetError):
                continue
            if not data:
                sel.unregister(key.fileobj)
                continue
            replies += data.count(b"\r\n")
            try:
                key.fileobj.sendall(b"AUTH wrong-guess\r\n")
            except OSError:
                pass
    t0 = time.monotonic()
    authed(authd).close()  # asserts OK
    assert time.monotonic() - t0 < 1.0
    for s in socks:
        s.close()
    assert replies <= 3.0 * 20 + 20, replies  # the rate, and the first of each burst
