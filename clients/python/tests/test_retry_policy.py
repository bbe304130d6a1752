"""Which requests are resent after a broken connection: a local listener that reads a
request and hangs up without answering (a server dying mid-request)."""
import socket
import threading
import time
from typing import Iterator, List

import pytest

from bloomd_client import BloomdConnectionError, Client


class HangUp:
    """Accepts connections on 127.0.0.1, reads one chunk from each, closes it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.requests: List[bytes] = []
        self.running = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        deadline = time.monotonic() + 30
        while self.running and time.monotonic() < deadline:
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            with conn:
                conn.settimeout(5)
                self.requests.append(conn.recv(65536))

    def stop(self) -> None:
        self.running = False
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def hangup() -> Iterator[HangUp]:
    h = HangUp()
    yield h
    h.stop()


def client(port: int) -> Client:
    return Client("127.0.0.1", port, timeout=5, retries=2, backoff=0.01, max_backoff=0.02)


def test_check_is_resent_until_retries_run_out(hangup: HangUp) -> None:
    with client(hangup.port) as c:
        with pytest.raises(BloomdConnectionError, match="after 2 retries"):
            c.check("f", ["a", "b"])
    assert hangup.requests == [b"CHECK f a b\r\n"] * 3


def test_empty_batches_need_no_server() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with client(port) as c:
        assert c.check("f", []) == [] and c.checkadd("f", []) == [] and c.add("f", []) == 0


def test_checkadd_is_not_resent(hangup: HangUp) -> None:
    with client(hangup.port) as c:
        with pytest.raises(BloomdConnectionError, match="not retried"):
            c.checkadd("f", ["a", "b"])
        with pytest.raises(BloomdConnectionError, match="not retried"):
            c.create("f")
    assert hangup.requests == [b"CHECKADD f a b\r\n", b"CREATE f\r\n"]


class CutAfter:
    """A bloomd stand-in for CHECK (a key starting with "y" is present): its first
    connection answers `cut` lines and hangs up, later ones answer everything."""

    def __init__(self, cut: int) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.cut = cut
        self.answered: List[int] = []  # replies sent, per connection
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.answered.append(0)
            with conn, conn.makefile("rb") as lines:
                try:
                    for line in lines:
                        if len(self.answered) == 1 and self.answered[0] == self.cut:
                            break
                        keys = line.split()[2:]
                        conn.sendall(b" ".join(b"1" if k.startswith(b"y") else b"0"
                                               for k in keys) + b"\r\n")
                        self.answered[-1] += 1
                except OSError:  # the client closed first
                    pass


def test_pipelined_check_resumes_in_order_after_a_hangup() -> None:
    """The connection breaks with lines in flight: the batch resumes at the first
    unanswered line on a new connection, and every answer lands at its key."""
    server = CutAfter(3)
    keys = [("y%d" if i % 3 == 0 else "n%d") % i for i in range(3000)]
    try:
        with Client("127.0.0.1", server.port, timeout=5, max_line=512, pipeline_depth=4,
                    backoff=0.01) as c:
            assert c.check("f", keys) == [k.startswith("y") for k in keys]
    finally:
        server.sock.close()
    assert len(server.answered) == 2 and server.answered[0] == 3
