"""Turning user keys and filter names into protocol bytes, or refusing them.

Keys may be str (sent as UTF-8) or bytes. The protocol carries any byte except space,
tab, CR, LF and NUL. With hash_keys="auto" a key the protocol cannot carry, or one longer
than the threshold, is replaced by its digest; with "always" every key is. The digest is
"#" + 32 hex digits of BLAKE2b-128: stable across processes and machines.
"""
import hashlib
import re
from typing import Iterable, List, Union

from .errors import InvalidKey, InvalidName

Key = Union[str, bytes]

HASH_MODES = ("never", "auto", "always")
MAX_NAME = 128

_BAD_KEY_BYTE = re.compile(rb"[ \t\r\n\x00]")
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,%d}\Z" % (MAX_NAME - 1), re.ASCII)


def hashed_key(data: bytes) -> bytes:
    """The digest form of a key: b"#" + 32 lowercase hex digits of BLAKE2b-128."""
    return b"#" + hashlib.blake2b(data, digest_size=16).hexdigest().encode("ascii")


def encode_name(name: str) -> bytes:
    """Checks a filter name and returns it as bytes; raises InvalidName."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidName(
            "invalid filter name %r: need 1-%d of [A-Za-z0-9._-], not starting with '.'"
            % (name, MAX_NAME))
    return name.encode("ascii")


class KeyEncoder:
    """Encodes keys under one hashing policy and a maximum encoded length."""

    def __init__(self, hash_keys: str = "never", hash_threshold: int = 256) -> None:
        if hash_keys not in HASH_MODES:
            raise ValueError("hash_keys must be one of %s, not %r" % (HASH_MODES, hash_keys))
        if hash_threshold < 1:
            raise ValueError("hash_threshold must be >= 1")
        self.mode = hash_keys
        self.threshold = hash_threshold

    def encode(self, key: Key, max_len: int) -> bytes:
        """One key as protocol bytes, at most max_len long; raises InvalidKey."""
        if isinstance(key, str):
            try:
                data = key.encode("utf-8")
            except UnicodeEncodeError:
                data = key.encode("utf-8", "surrogatepass")
                if self.mode == "never":
                    raise InvalidKey("key %r is not encodable as UTF-8" % (key,)) from None
        elif isinstance(key, (bytes, bytearray, memoryview)):
            data = bytes(key)
        else:
            raise InvalidKey("keys must be str or bytes, not %s" % type(key).__name__)
        if self.mode == "always":
            return hashed_key(data)
        bad = not data or _BAD_KEY_BYTE.search(data) is not None
        if self.mode == "auto" and (bad or len(data) > min(self.threshold, max_len)):
            return hashed_key(data)
        if bad:
            raise InvalidKey("key %r is empty or holds space, tab, CR, LF or NUL "
                             "(hash_keys='auto' would send its digest)" % (data[:64],))
        if len(data) > max_len:
            raise InvalidKey("key of %d bytes does not fit in a %d-byte key slot "
                             "(hash_keys='auto' would send its digest)" % (len(data), max_len))
        return data

    def encode_all(self, keys: Iterable[Key], max_len: int) -> List[bytes]:
        """Every key of an iterable, in order; raises InvalidKey before returning any."""
        encode = self.encode
        return [encode(k, max_len) for k in keys]
