"""One TCP connection to a bloomd server: send bytes, read reply lines.

Not thread-safe: the pool hands a connection to one caller at a time. Any OSError
(including a timeout or the server closing the socket) leaves the connection unusable;
the caller must close it.
"""
import select
import socket
import ssl
from typing import Optional

from .errors import AuthenticationError, error_from_reply

# Longest reply line accepted: a CHECK reply is 2 bytes a key, and request lines are
# at most 1 MiB by default, so this is generous without letting a bad peer exhaust memory.
MAX_REPLY_LINE = 16 << 20
_RECV_SIZE = 256 << 10


class ConnectionClosed(ConnectionResetError):
    """The server closed the connection (EOF) before a full reply line arrived."""


class Connection:
    """A blocking socket with a receive buffer split into lines."""

    def __init__(self, host: str, port: int, timeout: Optional[float],
                 connect_timeout: Optional[float], token: Optional[str] = None,
                 ssl_context: Optional[ssl.SSLContext] = None) -> None:
        sock = socket.create_connection((host, port), timeout=connect_timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if ssl_context is not None:
                sock = ssl_context.wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._sock.settimeout(timeout)
        self._timeout = timeout
        self._buf = bytearray()
        self._scan = 0  # bytes of _buf already searched for a newline
        if token is not None:
            self._auth(token)

    def _auth(self, token: str) -> None:
        """AUTH on a fresh connection; a refusal raises AuthenticationError (not retried)."""
        data = token.encode("utf-8")
        if not data or b"\n" in data or b"\r" in data:
            self.close()
            raise ValueError("a token is 1..256 bytes without CR or LF")
        try:
            self.send(b"AUTH " + data + b"\r\n")
            reply = self.read_line()
        except BaseException:
            self.close()
            raise
        if reply != b"OK":
            self.close()
            error = error_from_reply(reply)
            raise AuthenticationError(reply.decode("utf-8", "replace"),
                                      error.message if error is not None else "")

    def send(self, data: bytes) -> None:
        self._sock.sendall(data)

    def read_line(self) -> bytes:
        """The next reply line without its "\\r\\n"; raises OSError/ConnectionClosed."""
        buf = self._buf
        while True:
            end = buf.find(b"\n", self._scan)
            if end >= 0:
                line = bytes(buf[:end - 1] if end and buf[end - 1] == 13 else buf[:end])
                del buf[:end + 1]
                self._scan = 0
                return line
            if len(buf) > MAX_REPLY_LINE:
                raise ConnectionClosed("reply line longer than %d bytes" % MAX_REPLY_LINE)
            self._scan = len(buf)
            chunk = self._sock.recv(_RECV_SIZE)
            if not chunk:
                raise ConnectionClosed("server closed the connection")
            buf += chunk

    def read_exact(self, n: int) -> bytes:
        """Exactly n bytes (a DUMP's data block); raises OSError/ConnectionClosed."""
        buf = self._buf
        while len(buf) < n:
            chunk = self._sock.recv(max(_RECV_SIZE, min(n - len(buf), 4 << 20)))
            if not chunk:
                raise ConnectionClosed("server closed the connection inside a data block")
            buf += chunk
        data = bytes(buf[:n])
        del buf[:n]
        self._scan = 0
        return data

    def is_stale(self) -> bool:
        """True when the idle connection cannot be reused: the server closed it, it
        failed, or it holds bytes nobody asked for. Never blocks."""
        if self._buf:
            return True
        if isinstance(self._sock, ssl.SSLSocket):
            # No MSG_PEEK through TLS: anything readable (a record, close_notify, EOF)
            # on an idle connection means it cannot be reused.
            try:
                readable, _, _ = select.select([self._sock], [], [], 0)
            except (OSError, ValueError):
                return True
            return bool(readable) or self._sock.pending() > 0
        try:
            self._sock.setblocking(False)
            try:
                # Anything but "would block" means EOF, an error or unsolicited bytes.
                self._sock.recv(1, socket.MSG_PEEK)
                return True
            finally:
                self._sock.settimeout(self._timeout)
        except BlockingIOError:
            return False
        except OSError:
            return True

    def close(self) -> None:
        self._sock.close()
