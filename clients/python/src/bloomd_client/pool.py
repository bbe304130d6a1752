"""A thread-safe pool of connections to one server.

At most `size` connections exist at once; a caller that finds them all busy waits up to
`wait` seconds. Idle connections are reused last-in first-out and checked for staleness
(closed by a restarted server) before they are handed out.
"""
import threading
from typing import Callable, List, Optional

from .connection import Connection
from .errors import BloomdError


class PoolClosed(BloomdError):
    """The client was closed."""


class Pool:
    def __init__(self, connect: Callable[[], Connection], size: int,
                 wait: Optional[float]) -> None:
        if size < 1:
            raise ValueError("pool size must be >= 1")
        self._connect = connect
        self._wait = wait
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._idle: List[Connection] = []
        self._closed = False

    def acquire(self) -> Connection:
        """A connection for the caller's exclusive use; return it with release().
        Raises OSError when a new connection cannot be made, BloomdError when the pool is
        closed or no slot frees up in time."""
        if not self._slots.acquire(timeout=self._wait):
            raise BloomdError("no free connection within %s s" % self._wait)
        try:
            while True:
                with self._lock:
                    if self._closed:
                        raise PoolClosed("client is closed")
                    conn = self._idle.pop() if self._idle else None
                if conn is None:
                    return self._connect()
                if not conn.is_stale():
                    return conn
                conn.close()
        except BaseException:
            self._slots.release()
            raise

    def release(self, conn: Connection, reusable: bool) -> None:
        """Gives a connection back; one that is not reusable (broken, out of sync) is
        closed."""
        with self._lock:
            keep = reusable and not self._closed
            if keep:
                self._idle.append(conn)
        if not keep:
            conn.close()
        self._slots.release()

    def close(self, goodbye: Optional[bytes] = None) -> None:
        """Closes the idle connections (sending `goodbye` first, best effort); busy ones
        are closed when released."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            if goodbye:
                try:
                    conn.send(goodbye)
                except OSError:
                    pass
            conn.close()
