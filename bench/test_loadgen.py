"""bench/loadgen against fake bloomd servers: it must fail (exit 1, promptly) whenever a
reply is wrong, missing or late, and pass against an exact one. `--tls` is tested against
the real daemon (BLOOMD, default build/bloomd) with a certificate made by openssl(1).

    make REL=build/rel build/rel/bench/loadgen
    LOADGEN=build/rel/bench/loadgen /usr/bin/python3 -m pytest -q bench/test_loadgen.py
"""
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator, List, Set

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
from ports import free_port  # noqa: E402  (one free-port rule for every test tree)
LOADGEN = os.environ.get("LOADGEN", str(REPO / "build" / "rel" / "bench" / "loadgen"))
BLOOMD = os.environ.get("BLOOMD", str(REPO / "build" / "bloomd"))


class FakeBloomd:
    """Answers CREATE and CHECKADD exactly (a set), unless told to misbehave:
    mode "silent" never answers, "forget" answers every key as new, "hangup" closes each
    connection after 10 replies; "idle" closes the second connection after its first
    reply and answers the others slowly (an idle timeout hitting a finished client)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.seen: Set[bytes] = set()
        self.lock = threading.Lock()
        self.conns: List[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn, len(self.conns)),
                             daemon=True).start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        try:
            self._answer(conn, number)
        except OSError:  # loadgen gave up first
            pass

    def _answer(self, conn: socket.socket, number: int) -> None:
        replies = 0
        with conn, conn.makefile("rb") as lines:
            for line in lines:
                if self.mode == "silent":
                    continue
                if self.mode == "hangup" and replies == 10:
                    return
                if self.mode == "idle" and number != 2:
                    time.sleep(0.3)
                words = line.split()
                if words[0] == b"CREATE":
                    conn.sendall(b"CREATED\r\n")
                else:
                    bits = []
                    with self.lock:
                        for key in words[2:]:
                            bits.append(b"1" if key in self.seen and self.mode != "forget"
                                        else b"0")
                            self.seen.add(key)
                    conn.sendall(b" ".join(bits) + b"\r\n")
                replies += 1
                if self.mode == "idle" and number == 2:
                    return

    def close(self) -> None:
        self.sock.close()
        for conn in self.conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@pytest.fixture
def fake(request: pytest.FixtureRequest) -> Iterator[FakeBloomd]:
    if not os.access(LOADGEN, os.X_OK):
        pytest.fail("no loadgen at %s: build it or set LOADGEN" % LOADGEN)
    f = FakeBloomd(request.param)
    yield f
    f.close()


def loadgen(port: int, *args: str) -> "subprocess.CompletedProcess[str]":
    return subprocess.run([LOADGEN, "--port", str(port), "--keys", "20000", "--timeout", "2",
                           "--batch", "10", "--depth", "4", *args],
                          capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("fake", ["exact"], indirect=True)
def test_exact_server_passes(fake: FakeBloomd) -> None:
    run = loadgen(fake.port, "--create", "capacity=1000")
    assert run.returncode == 0, run.stderr
    assert " fp=0 " in run.stdout and " fn=0 " in run.stdout and "complete=1" in run.stdout


@pytest.mark.parametrize("fake", ["silent"], indirect=True)
def test_create_without_reply_times_out(fake: FakeBloomd) -> None:
    run = loadgen(fake.port, "--create", "capacity=1000")
    assert run.returncode == 1
    assert "CREATE: no reply within 2.0s" in run.stderr


@pytest.mark.parametrize("fake", ["silent"], indirect=True)
def test_missing_replies_time_out(fake: FakeBloomd) -> None:
    run = loadgen(fake.port)
    assert run.returncode == 1 and "no reply within" in run.stderr


@pytest.mark.parametrize("fake", ["forget"], indirect=True)
def test_false_negatives_fail(fake: FakeBloomd) -> None:
    run = loadgen(fake.port)
    assert run.returncode == 1 and "FALSE NEGATIVE" in run.stderr


@pytest.mark.parametrize("fake", ["hangup"], indirect=True)
def test_closed_connection_fails(fake: FakeBloomd) -> None:
    run = loadgen(fake.port)
    assert run.returncode == 1
    assert "server closed the connection" in run.stderr or "reset by peer" in run.stderr


@pytest.mark.parametrize("fake", ["idle"], indirect=True)
def test_server_closing_a_finished_connection_is_no_failure(fake: FakeBloomd) -> None:
    """--keys 3 over 2 connections: the second has one key; once it is answered the
    server closes it while the first still waits for its replies."""
    run = subprocess.run([LOADGEN, "--port", str(fake.port), "--keys", "3", "--conns", "2",
                          "--repeat", "0", "--depth", "1"],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    assert "complete=1" in run.stdout


def test_zero_timeout_is_bad_usage() -> None:
    run = subprocess.run([LOADGEN, "--timeout", "0"], capture_output=True, text=True,
                         timeout=30)
    assert run.returncode == 2



@pytest.fixture
def tls_daemon(tmp_path: Path) -> Iterator[int]:
    """A real bloomd with a TLS listener on a self-signed certificate; yields its port."""
    if shutil.which("openssl") is None:
        pytest.skip("needs openssl(1) to make a test certificate")
    if not os.access(BLOOMD, os.X_OK) or not os.access(LOADGEN, os.X_OK):
        pytest.fail("no daemon at %s or loadgen at %s: build them" % (BLOOMD, LOADGEN))
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(tmp_path / "key.pem"),
                    "-out", str(tmp_path / "cert.pem"), "-days", "1", "-subj", "/CN=127.0.0.1"],
                   check=True, capture_output=True, timeout=30)
    port, tls_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLOOMD_")}
    with open(tmp_path / "log", "wb") as log:
        daemon = subprocess.Popen(
            [BLOOMD, "--bind", "127.0.0.1", "--port", str(port), "--tls-port", str(tls_port),
             "--tls-cert-file", str(tmp_path / "cert.pem"),
             "--tls-key-file", str(tmp_path / "key.pem"), "--data-dir", str(tmp_path / "data"),
             "--snapshot-interval", "0"], stdout=log, stderr=log, env=env)
    try:
        deadline = time.monotonic() + 10
        while ":%d (TLS bloomd" % tls_port not in (tmp_path / "log").read_text():
            assert daemon.poll() is None and time.monotonic() < deadline, \
                (tmp_path / "log").read_text()
            time.sleep(0.05)
        yield tls_port
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)


def test_tls_against_bloomd(tls_daemon: int) -> None:
    """Long lines (requests span TLS records) and single keys deeply pipelined: every
    reply is checked, so a lost, stalled or misread byte fails."""
    for args in (["--batch", "300", "--depth", "8"], ["--batch", "1", "--depth", "64"]):
        name = "tls%s" % args[1]
        run = subprocess.run([LOADGEN, "--tls", "--port", str(tls_daemon), "--keys", "30000",
                              "--timeout", "5", "--name", name, "--create", "capacity=100000",
                              *args], capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        assert " fn=0 " in run.stdout and "complete=1" in run.stdout, run.stdout


@pytest.mark.parametrize("fake", ["silent"], indirect=True)
def test_tls_handshake_without_reply_times_out(fake: FakeBloomd) -> None:
    run = subprocess.run([LOADGEN, "--tls", "--port", str(fake.port), "--timeout", "1"],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 1 and "TLS handshake" in run.stderr, run.stderr
