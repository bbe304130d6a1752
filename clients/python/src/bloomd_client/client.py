"""Client: every bloomd command on a pool of connections to one server.

Thread-safe: each call borrows a connection for its duration. Multi-key calls encode and
validate all keys first (nothing is sent if one is invalid), split them into lines of
at most max_line bytes and pipeline them; results come back in input order.
"""
import os
import re
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Tuple, Union, overload
import ssl
from urllib.parse import unquote, urlsplit

from .batching import split_lines
from .connection import Connection
from .errors import ProtocolError, error_from_reply
from .keys import Key, KeyEncoder, encode_name
from .transport import Transport

Value = Union[int, float, str]
Keys = Union[Key, Iterable[Key]]

DEFAULT_PORT = 8673
DEFAULT_URL = "bloomd://127.0.0.1:%d" % DEFAULT_PORT
_PREFIX = re.compile(r"[A-Za-z0-9._-]{1,128}\Z", re.ASCII)
_TEXT_FIELDS = ("name", "growth", "version")  # STAT values never read as numbers


class FilterSummary(NamedTuple):
    """One line of LIST."""
    name: str
    items: int
    bytes: int
    capacity: int
    error: float
    window: Optional[float] = None  # seconds, for a windowed filter


class Role(NamedTuple):
    """ROLE: what the server is in replication. `offset` is the records it wrote (a
    primary) or applied (a replica); a caught-up replica's equals its primary's."""
    role: str                       # "primary" or "replica"
    offset: int
    replicas: Optional[int] = None  # a primary: replicas connected and streaming
    primary: Optional[str] = None   # a replica: its primary, "host:port"
    link: Optional[str] = None      # a replica: "up", "sync" (full sync) or "down"


def parse_role(reply: bytes) -> Role:
    """Role of a ROLE reply line (without CRLF); ProtocolError if it is not one."""
    words = reply.decode("ascii", "replace").split(" ")
    try:
        if words[0] == "ROLE" and words[1] == "primary" and len(words) == 4:
            return Role("primary", int(words[3]), replicas=int(words[2]))
        if words[0] == "ROLE" and words[1] == "replica" and len(words) == 5:
            return Role("replica", int(words[4]), primary=words[2], link=words[3])
    except (IndexError, ValueError):
        pass
    raise ProtocolError("unexpected ROLE reply %r" % reply[:80])


def _window_column(row: List[str]) -> Optional[float]:
    """The optional sixth LIST column, "window=<s>s"."""
    for extra in row[5:]:
        if extra.startswith("window=") and extra.endswith("s"):
            return float(extra[7:-1])
    return None


def parse_url(url: str) -> Tuple[str, int]:
    """(host, port) of "bloomd[s]://[:token@]host[:port]" (IPv6 hosts in brackets)."""
    host, port, _, _ = parse_url_auth(url)
    return host, port


def parse_url_auth(url: str) -> Tuple[str, int, Optional[str], bool]:
    """(host, port, token or None, tls) of "bloomd://[:token@]host[:port]"; bloomds://
    is TLS. The token is the URL's password, percent-decoded."""
    parts = urlsplit(url)
    if parts.scheme not in ("bloomd", "bloomds") or not parts.hostname:
        raise ValueError("expected bloomd[s]://[:token@]host[:port], got %r" % (url,))
    token = unquote(parts.password) if parts.password else None
    return parts.hostname, parts.port or DEFAULT_PORT, token, parts.scheme == "bloomds"


def _value(text: str) -> Value:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def _reply(conn: Connection) -> bytes:
    """One reply line; raises the typed exception for an error line."""
    line = conn.read_line()
    error = error_from_reply(line)
    if error is not None:
        raise error
    return line


def _stat_lines(conn: Connection, word: bytes, first: bytes) -> List[List[str]]:
    """The fields of `word ...` lines up to END, `first` being the first line."""
    rows: List[List[str]] = []
    line = first
    while line != b"END":
        fields = line.decode("utf-8", "replace").split(" ")
        if fields[0] != word.decode():
            raise ProtocolError("expected %s or END, got %r" % (word.decode(), line[:80]))
        rows.append(fields[1:])
        line = conn.read_line()
    return rows


def _stats(conn: Connection) -> Dict[str, Value]:
    rows = _stat_lines(conn, b"STAT", _reply(conn))
    return {r[0]: " ".join(r[1:]) if r[0] in _TEXT_FIELDS else _value(" ".join(r[1:]))
            for r in rows if r}


def _key_list(keys: Keys) -> Tuple[bool, Iterable[Key]]:
    """(True, [key]) for one str/bytes key, else (False, keys)."""
    if isinstance(keys, (str, bytes, bytearray, memoryview)):
        return True, [keys]
    return False, keys


class Client:
    """A bloomd server. `timeout` bounds each socket operation; a dropped connection is
    re-made up to `retries` times with exponential backoff (from `backoff` to
    `max_backoff` seconds). `hash_keys`: "never" (invalid keys raise InvalidKey), "auto"
    (keys the protocol cannot carry or longer than `hash_threshold` bytes are sent as
    their BLAKE2b-128 digest), "always" (every key is). `token`: sent as AUTH on every
    new connection. `ssl_context`: speak TLS (to the server's tls_port)."""

    def __init__(self, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                 timeout: Optional[float] = 10.0, *, connect_timeout: Optional[float] = None,
                 pool_size: int = 8, retries: int = 5, backoff: float = 0.05,
                 max_backoff: float = 1.0, hash_keys: str = "never",
                 hash_threshold: int = 256, max_line: int = 64 << 10,
                 pipeline_depth: int = 8, token: Optional[str] = None,
                 ssl_context: Optional[ssl.SSLContext] = None) -> None:
        if max_line < 512 or pipeline_depth < 1:
            raise ValueError("max_line must be >= 512 and pipeline_depth >= 1")
        self._transport = Transport(
            host, port, timeout, timeout if connect_timeout is None else connect_timeout,
            pool_size, timeout, retries, backoff, max_backoff, token, ssl_context)
        self._keys = KeyEncoder(hash_keys, hash_threshold)
        self._max_line = max_line
        # Room for one key after "CHECKADD <longest name> " and before "\r\n".
        self._max_key = max_line - len(b"CHECKADD  \r\n") - 128
        self._depth = pipeline_depth
        self.address = self._transport.address

    @classmethod
    def from_url(cls, url: Optional[str] = None, **options: Any) -> "Client":
        """A client for "bloomd://[:token@]host:port" (bloomds:// for TLS, with the
        system's CAs unless ssl_context= is given); without a url, $BLOOMD_URL, else
        bloomd://127.0.0.1:8673. Options are Client's keyword arguments."""
        host, port, token, tls = parse_url_auth(url or os.environ.get("BLOOMD_URL")
                                                or DEFAULT_URL)
        if token is not None:
            options.setdefault("token", token)
        if tls and options.get("ssl_context") is None:
            options["ssl_context"] = ssl.create_default_context()
        return cls(host, port, **options)

    # ---- plumbing ----
    def _one(self, line: bytes, resend: bool) -> bytes:
        def work(conn: Connection) -> bytes:
            conn.send(line)
            return _reply(conn)
        return self._transport.call(work, resend)

    def _batch(self, command: bytes, name: str, args: List[bytes],
               on_reply: Callable[[bytes, int], None], resend: bool) -> None:
        lines, counts = split_lines(command + b" " + encode_name(name), args, self._max_line)
        self._transport.pipeline(lines, lambda i, reply: on_reply(reply, counts[i]),
                                 self._depth, resend)

    def encode_keys(self, keys: Iterable[Key]) -> List[bytes]:
        """The bytes this client sends for each key (validated, hashed per hash_keys);
        raises InvalidKey."""
        return self._keys.encode_all(keys, self._max_key)

    def _bits(self, command: bytes, name: str, keys: Keys) -> Union[bool, List[bool]]:
        single, many = _key_list(keys)
        results = self._bits_encoded(command, name, self.encode_keys(many))
        return results[0] if single else results

    def _bits_encoded(self, command: bytes, name: str, encoded: List[bytes]) -> List[bool]:
        """CHECK or CHECKADD of keys already encoded."""
        results: List[bool] = []

        def on_reply(reply: bytes, count: int) -> None:
            tokens = reply.split(b" ")
            if len(tokens) != count or not set(tokens) <= {b"0", b"1"}:
                raise ProtocolError("expected %d bits, got %r" % (count, reply[:80]))
            results.extend([t == b"1" for t in tokens])

        self._batch(command, name, encoded, on_reply, resend=command == b"CHECK")
        return results

    # ---- commands ----
    def create(self, name: str, *, capacity: Optional[int] = None,
               error: Optional[float] = None, growth: Optional[str] = None,
               scale: Optional[float] = None, ratio: Optional[float] = None,
               window: Optional[Union[str, int]] = None, generations: Optional[int] = None,
               kind: Optional[str] = None) -> bool:
        """Creates a filter; True if created, False if it already existed with the options
        given (ClientError if it exists with others). Unset options take the server's
        defaults. window ("90s", "15m", "1h", "7d", or seconds as an int) makes a windowed
        filter that forgets keys older than the window; generations (2..16) how finely.
        Like drop(), not resent if the connection breaks after sending."""
        parts = [b"CREATE", encode_name(name)]
        if capacity is not None:
            parts.append(b"capacity=%d" % int(capacity))
        if error is not None:
            parts.append(b"error=" + repr(float(error)).encode())
        if growth is not None:
            if growth not in ("exponential", "linear", "none"):
                raise ValueError("growth must be 'exponential', 'linear' or 'none'")
            parts.append(b"growth=" + growth.encode())
        if scale is not None:
            parts.append(b"scale=" + repr(float(scale)).encode())
        if ratio is not None:
            parts.append(b"ratio=" + repr(float(ratio)).encode())
        if window is not None:
            text = "%ds" % window if isinstance(window, int) else str(window)
            if not text or not all(c.isalnum() for c in text):
                raise ValueError("window must look like 90s, 15m, 1h or 7d")
            parts.append(b"window=" + text.encode())
        if generations is not None:
            parts.append(b"generations=%d" % int(generations))
        if kind is not None:
            parts.append(b"kind=" + encode_name(kind))
        reply = self._one(b" ".join(parts) + b"\r\n", resend=False)
        if reply not in (b"CREATED", b"EXISTS"):
            raise ProtocolError("unexpected CREATE reply %r" % reply[:80])
        return reply == b"CREATED"

    def add(self, name: str, keys: Keys) -> int:
        """Adds one key or an iterable of keys; returns how many were new (if the
        connection broke and the batch was resent, keys of the first try count as old)."""
        return self._add_encoded(name, self.encode_keys(_key_list(keys)[1]))

    def _add_encoded(self, name: str, encoded: List[bytes]) -> int:
        added = [0]

        def on_reply(reply: bytes, count: int) -> None:
            word, _, n = reply.partition(b" ")
            if word != b"ADDED" or not n.isdigit() or int(n) > count:
                raise ProtocolError("unexpected ADD reply %r" % reply[:80])
            added[0] += int(n)

        self._batch(b"ADD", name, encoded, on_reply, resend=True)
        return added[0]

    def delete(self, name: str, keys: Keys) -> int:
        """Removes one key or an iterable of keys from an expandable filter
        (create(kind="expandable")); returns how many were removed. Any other kind raises
        ClientError. Delete only keys you added: a key never added can share a fingerprint
        with one that was, which then reads absent. Not resent if the connection breaks
        after sending (a second removal could take another key's fingerprint)."""
        return self._delete_encoded(name, self.encode_keys(_key_list(keys)[1]))

    def _delete_encoded(self, name: str, encoded: List[bytes]) -> int:
        removed = [0]

        def on_reply(reply: bytes, count: int) -> None:
            word, _, n = reply.partition(b" ")
            if word != b"REMOVED" or not n.isdigit() or int(n) > count:
                raise ProtocolError("unexpected DELETE reply %r" % reply[:80])
            removed[0] += int(n)

        self._batch(b"DELETE", name, encoded, on_reply, resend=False)
        return removed[0]

    @overload  # a str is also an Iterable[str]: the single-key form wins
    def check(self, name: str, keys: Key) -> bool: ...  # type: ignore[misc]
    @overload
    def check(self, name: str, keys: Iterable[Key]) -> List[bool]: ...

    def check(self, name: str, keys: Keys) -> Union[bool, List[bool]]:
        """Whether each key may be in the filter (False is certain, True is probable):
        a bool for one key, a list in input order for an iterable."""
        return self._bits(b"CHECK", name, keys)

    @overload  # a str is also an Iterable[str]: the single-key form wins
    def checkadd(self, name: str, keys: Key) -> bool: ...  # type: ignore[misc]
    @overload
    def checkadd(self, name: str, keys: Iterable[Key]) -> List[bool]: ...

    def checkadd(self, name: str, keys: Keys) -> Union[bool, List[bool]]:
        """Adds the keys and says which were (probably) there before, like check().
        Not retried once sent: a broken connection raises BloomdConnectionError, and
        some keys may then have been added."""
        return self._bits(b"CHECKADD", name, keys)

    def _combine(self, command: bytes, dst: str, srcs: Iterable[str]) -> None:
        names = [encode_name(s) for s in srcs]
        if not names:
            raise ValueError("%s needs at least one source filter" % command.decode())

        def on_reply(reply: bytes, count: int) -> None:
            if reply != b"OK":
                raise ProtocolError("unexpected %s reply %r" % (command.decode(), reply[:80]))

        self._batch(command, dst, names, on_reply, resend=True)

    def union(self, dst: str, *srcs: str) -> None:
        """dst becomes dst | srcs (created with the first source's parameters if
        missing). Raises ClientError if the filters' parameters differ."""
        self._combine(b"UNION", dst, srcs)

    def intersect(self, dst: str, *srcs: str) -> None:
        """dst becomes dst & srcs, like union(). Raises ClientError, changing nothing, if
        a filter has grown (INFO stages > 1): a key may sit in different stages."""
        self._combine(b"INTERSECT", dst, srcs)

    def info(self, name: str) -> Dict[str, Value]:
        """The filter's STAT fields (name, capacity, error, items, bytes, ...)."""
        line = b"INFO " + encode_name(name) + b"\r\n"

        def work(conn: Connection) -> Dict[str, Value]:
            conn.send(line)
            return _stats(conn)
        return self._transport.call(work, resend=True)

    def list(self, prefix: str = "") -> List[FilterSummary]:
        """The filters whose names start with prefix (all by default)."""
        if prefix and not _PREFIX.match(prefix):
            raise ValueError("invalid name prefix %r" % (prefix,))
        line = (b"LIST " + prefix.encode() if prefix else b"LIST") + b"\r\n"

        def work(conn: Connection) -> List[FilterSummary]:
            conn.send(line)
            rows = _stat_lines(conn, b"FILTER", _reply(conn))
            try:
                return [FilterSummary(r[0], int(r[1]), int(r[2]), int(r[3]), float(r[4]),
                                      _window_column(r))
                        for r in rows]
            except (IndexError, ValueError) as exc:
                raise ProtocolError("bad LIST reply: %s" % exc) from None
        return self._transport.call(work, resend=True)

    def _expect_ok(self, line: bytes, want: bytes, resend: bool = True) -> None:
        reply = self._one(line, resend)
        if reply != want:
            raise ProtocolError("expected %r, got %r" % (want, reply[:80]))

    def drop(self, name: str) -> None:
        """Deletes the filter and its snapshot. Raises NotFound if it does not exist,
        ServerError if the snapshot file could not be removed (the filter is gone from
        memory, but the next start would load it again)."""
        self._expect_ok(b"DROP " + encode_name(name) + b"\r\n", b"DELETED", resend=False)

    def clear(self, name: str) -> None:
        """Empties the filter, keeping its parameters."""
        self._expect_ok(b"CLEAR " + encode_name(name) + b"\r\n", b"OK")

    def flush(self, name: Optional[str] = None) -> None:
        """Returns once the filter's (or every filter's) snapshot is durably on disk."""
        line = b"FLUSH " + encode_name(name) if name is not None else b"FLUSH"
        self._expect_ok(line + b"\r\n", b"OK")

    def dump(self, name: str) -> bytes:
        """The filter's snapshot, byte for byte its `<name>.bloom` file (after a FLUSH of
        it): feed it to restore() on any server, or copy it into a data dir. Raises
        NotFound, or ServerError if the snapshot could not be written or read."""
        def work(conn: Connection) -> bytes:
            conn.send(b"DUMP " + encode_name(name) + b"\r\n")
            head = _reply(conn)
            if not head.startswith(b"DUMP "):
                raise ProtocolError("unexpected DUMP reply %r" % head[:80])
            try:
                n = int(head[5:])
            except ValueError:
                raise ProtocolError("bad DUMP reply %r" % head[:80]) from None
            data = conn.read_exact(n + 2)
            if data[n:] != b"\r\n":
                raise ProtocolError("DUMP data block not ended by CRLF")
            return data[:n]
        return self._transport.call(work, resend=True)

    def restore(self, name: str, data: bytes, replace: bool = False) -> bool:
        """Installs a filter from dump() bytes under name: True if restored, False if
        a filter by that name exists and replace is False (nothing changed). With
        replace, it takes the place of the filter of that name. Raises ClientError for a
        damaged dump ("bad dump (...)"; nothing is created) and ServerError when it does
        not fit the server's max_memory. Returns once the restored filter's snapshot is
        on disk. Not resent if the connection breaks after sending."""
        data = bytes(data)
        line = b"RESTORE %s %d%s\r\n" % (encode_name(name), len(data),
                                          b" replace" if replace else b"")

        def work(conn: Connection) -> bool:
            conn.send(line)
            conn.send(data)
            conn.send(b"\r\n")
            reply = _reply(conn)
            if reply not in (b"RESTORED", b"EXISTS"):
                raise ProtocolError("unexpected RESTORE reply %r" % reply[:80])
            return reply == b"RESTORED"
        return self._transport.call(work, resend=False)

    def stats(self) -> Dict[str, Value]:
        """The server's STAT fields (uptime, connections, commands, keys, memory, ...)."""
        def work(conn: Connection) -> Dict[str, Value]:
            conn.send(b"STATS\r\n")
            return _stats(conn)
        return self._transport.call(work, resend=True)

    def role(self) -> Role:
        """The server's replication role (ROLE): a primary with its connected replicas,
        or a replica with its primary and the link's state; both with the offset."""
        return parse_role(self._one(b"ROLE\r\n", resend=True))

    def replicaof(self, host: Optional[str], port: int = 0) -> None:
        """REPLICAOF host port: the server becomes a replica of host:port (its filters are
        replaced by the primary's). host None: REPLICAOF NO ONE, a replica is promoted."""
        if host is None:
            line = b"REPLICAOF NO ONE\r\n"
        else:
            if not host or any(c in host for c in " \t\r\n") or not 0 < port < 65536:
                raise ValueError("REPLICAOF needs a host and a port in 1..65535")
            line = b"REPLICAOF %s %d\r\n" % (host.encode("ascii"), port)
        self._expect_ok(line, b"OK", resend=False)

    def version(self) -> str:
        """The server's version, "x.y.z"."""
        reply = self._one(b"VERSION\r\n", resend=True)
        if not reply.startswith(b"VERSION "):
            raise ProtocolError("unexpected VERSION reply %r" % reply[:80])
        return reply[8:].decode("ascii", "replace")

    def close(self) -> None:
        """Sends QUIT on the idle connections and closes them; the client is then
        unusable. Safe to call twice."""
        self._transport.close(b"QUIT\r\n")

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
