"""Running requests on pooled connections, with bounded reconnects and pipelining.

A request that cannot get a connection (refused, pooled socket found closed) is retried
with exponential backoff. A request that broke after it was sent is retried only when
the caller says resending is harmless (everything but CHECKADD); a pipelined batch then
resumes from the first line whose reply was not read.
"""
import random
import ssl
import time
from typing import Callable, Iterator, List, Optional, TypeVar

from .connection import Connection
from .errors import BloomdConnectionError, ServerReplyError, error_from_reply
from .pool import Pool

T = TypeVar("T")


class _Progress:
    """How far a pipelined batch got, kept across reconnects."""

    def __init__(self) -> None:
        self.done = 0  # lines whose reply was read
        self.error: Optional[ServerReplyError] = None  # first error reply


class Transport:
    def __init__(self, host: str, port: int, timeout: Optional[float],
                 connect_timeout: Optional[float], pool_size: int,
                 pool_wait: Optional[float], retries: int, backoff: float,
                 max_backoff: float, token: Optional[str] = None,
                 ssl_context: Optional[ssl.SSLContext] = None) -> None:
        if retries < 0 or backoff < 0 or max_backoff < 0:
            raise ValueError("retries, backoff and max_backoff must be >= 0")
        self.address = ("[%s]:%d" if ":" in host else "%s:%d") % (host, port)
        self._retries = retries
        self._backoff = backoff
        self._max_backoff = max_backoff
        # Every (re)connect authenticates again: AUTH is a connection's state.
        self._pool = Pool(lambda: Connection(host, port, timeout, connect_timeout, token,
                                             ssl_context), pool_size, pool_wait)

    def _delays(self) -> Iterator[float]:
        for attempt in range(self._retries):
            yield min(self._max_backoff, self._backoff * 2 ** attempt) * random.uniform(0.5, 1)

    def _pause(self, delays: Iterator[float], exc: BaseException) -> None:
        delay = next(delays, None)
        if delay is None:
            raise BloomdConnectionError("bloomd at %s: %s (after %d retries)"
                                        % (self.address, exc, self._retries)) from exc
        time.sleep(delay)

    def call(self, work: Callable[[Connection], T], resend: bool) -> T:
        """Runs work(conn) on a pooled connection and returns its result. work must read
        every reply line it caused before it returns or raises a ServerReplyError."""
        delays = self._delays()
        while True:
            try:
                conn = self._pool.acquire()
            except OSError as exc:
                self._pause(delays, exc)
                continue
            reusable = False
            try:
                result = work(conn)
                reusable = True
                return result
            except ServerReplyError:
                reusable = True
                raise
            except OSError as exc:
                if not resend:
                    raise BloomdConnectionError(
                        "bloomd at %s: %s; not retried: the request may have been applied"
                        % (self.address, exc)) from exc
                failure = exc
            finally:
                self._pool.release(conn, reusable)
            self._pause(delays, failure)

    def pipeline(self, lines: List[bytes], on_reply: Callable[[int, bytes], None],
                 depth: int, resend: bool) -> None:
        """Sends lines keeping at most `depth` unanswered, calls on_reply(i, reply) for
        each success reply in order; after an error reply sends nothing more, reads the
        replies still due and raises the first error."""
        if not lines:  # nothing to send: no connection needed
            return
        progress = _Progress()

        def work(conn: Connection) -> None:
            sent = progress.done
            while progress.done < len(lines):
                limit = len(lines) if progress.error is None else sent
                while sent < limit and sent - progress.done < depth:
                    conn.send(lines[sent])
                    sent += 1
                if progress.done >= sent:
                    break
                reply = conn.read_line()
                error = error_from_reply(reply)
                if error is not None:
                    progress.error = progress.error or error
                elif progress.error is None:
                    on_reply(progress.done, reply)
                progress.done += 1

        self.call(work, resend)
        if progress.error is not None:
            raise progress.error

    def close(self, goodbye: Optional[bytes] = None) -> None:
        self._pool.close(goodbye)
