"""The client's token (token=, bloomd://:token@host) and TLS (ssl_context=, bloomds://)
against a daemon that requires AUTH: every new connection authenticates, reconnects too."""
import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Iterator, Tuple

import pytest

from bloomd_client import AuthenticationError, Client, parse_url, parse_url_auth
from daemons import Daemon, free_port

TOKEN = "py token/with:odd chars"


@pytest.fixture
def authd(tmp_path: Path) -> Iterator[Daemon]:
    tok = tmp_path / "token"
    tok.write_text(TOKEN + "\n")
    d = Daemon(tmp_path / "data", tmp_path / "bloomd.log", ["--auth-token-file", str(tok)])
    d.start()
    yield d
    assert d.stop() == 0, d.log.read_text(errors="replace")[-3000:]


def test_url_forms() -> None:
    assert parse_url_auth("bloomd://:s3cret@h:1") == ("h", 1, "s3cret", False)
    assert parse_url_auth("bloomds://:a%20b%40c@[::1]:2") == ("::1", 2, "a b@c", True)
    assert parse_url_auth("bloomd://h") == ("h", 8673, None, False)
    assert parse_url("bloomd://:x@h:3") == ("h", 3)


def test_token_parameter(authd: Daemon) -> None:
    with Client("127.0.0.1", authd.port, token=TOKEN) as c:
        c.create("f")
        assert c.checkadd("f", ["a", "b", "a"]) == [False, False, True]


def test_token_in_url(authd: Daemon) -> None:
    from urllib.parse import quote
    url = "bloomd://:%s@127.0.0.1:%d" % (quote(TOKEN, safe=""), authd.port)
    with Client.from_url(url) as c:
        c.create("g")
        assert c.list()


def test_wrong_or_missing_token(authd: Daemon) -> None:
    with Client("127.0.0.1", authd.port, token="nope", retries=0) as c:
        with pytest.raises(AuthenticationError):
            c.list()
    with Client("127.0.0.1", authd.port, retries=0) as c:
        with pytest.raises(Exception, match="authentication required"):
            c.list()


def test_reconnect_authenticates_again(authd: Daemon) -> None:
    with Client("127.0.0.1", authd.port, token=TOKEN, pool_size=1) as c:
        c.create("r")
        port = authd.port
        authd.stop()
        authd.start(port)
        c.create("r2")  # a new connection: AUTH again, transparently
        assert {f.name for f in c.list()} >= {"r2"}


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl(1)")
def test_tls(tmp_path: Path) -> None:
    key, crt = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    str(key), "-out", str(crt), "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True,
                   capture_output=True, timeout=60)
    tok = tmp_path / "tok"
    tok.write_text(TOKEN)
    tls_port = free_port()
    d = Daemon(tmp_path / "data", tmp_path / "log", [
        "--tls-port", str(tls_port), "--tls-cert-file", str(crt), "--tls-key-file", str(key),
        "--auth-token-file", str(tok)])
    d.start()
    try:
        ctx = ssl.create_default_context(cafile=str(crt))
        with Client("127.0.0.1", tls_port, token=TOKEN, ssl_context=ctx) as c:
            c.create("t")
            assert c.checkadd("t", ["x", "x"]) == [False, True]
        with Client.from_url("bloomds://:%s@127.0.0.1:%d" % ("x", tls_port), retries=0,
                             ssl_context=ctx) as c:
            with pytest.raises(AuthenticationError):
                c.list()
    finally:
        assert d.stop() == 0
