"""Key encoding and hashing, URLs and $BLOOMD_URL (client-side; one round trip)."""
from typing import List, Union

import pytest

from bloomd_client import Client, InvalidKey, hashed_key, parse_url
from bloomd_client.batching import split_lines
from bloomd_client.keys import KeyEncoder
from daemons import Daemon


def test_never_mode_refuses_what_the_protocol_cannot_carry() -> None:
    enc = KeyEncoder("never")
    assert enc.encode("caf\u00e9", 100) == "caf\u00e9".encode()
    assert enc.encode(b"\xff\x01", 100) == b"\xff\x01"
    for bad in ["a b", "\t", "\r", "\n", "\x00", "", "\ud800"]:
        with pytest.raises(InvalidKey):
            enc.encode(bad, 100)
    with pytest.raises(InvalidKey):
        enc.encode("x" * 101, 100)
    with pytest.raises(InvalidKey):
        enc.encode(42, 100)  # type: ignore[arg-type]


def test_auto_mode_hashes_only_long_or_unsendable_keys() -> None:
    enc = KeyEncoder("auto", hash_threshold=16)
    assert enc.encode("short", 100) == b"short"
    long_key = "y" * 17
    assert enc.encode(long_key, 100) == hashed_key(long_key.encode())
    assert enc.encode(b"a b\x00", 100) == hashed_key(b"a b\x00")
    digest = hashed_key(b"anything")
    assert len(digest) == 33 and digest.startswith(b"#")
    assert KeyEncoder("always").encode("short", 100) == hashed_key(b"short")


def test_hashed_keys_round_trip(daemon: Daemon, fname: str) -> None:
    keys: List[Union[str, bytes]] = [b"binary \x00\r\n key", "x" * 5000, "plain"]
    with Client.from_url(daemon.url, hash_keys="auto", hash_threshold=64) as c:
        c.create(fname)
        assert c.checkadd(fname, keys) == [False, False, False]
        assert c.check(fname, keys) == [True, True, True]
    with Client.from_url(daemon.url) as plain:
        assert plain.check(fname, [hashed_key(b"binary \x00\r\n key"), "plain"]) == [True, True]


def test_split_lines_bounds_every_line() -> None:
    args = [b"k%d" % i for i in range(10_000)]
    lines, counts = split_lines(b"CHECK f", args, 600)
    assert sum(counts) == len(args) and len(lines) == len(counts)
    assert all(len(line) <= 600 and line.endswith(b"\r\n") for line in lines)
    rebuilt = [a for line in lines for a in line[:-2].split(b" ")[2:]]
    assert rebuilt == args
    assert split_lines(b"CHECK f", [], 600) == ([], [])


def test_urls_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_url("bloomd://example.org:9000") == ("example.org", 9000)
    assert parse_url("bloomd://10.1.2.3") == ("10.1.2.3", 8673)
    assert parse_url("bloomd://[::1]:7000") == ("::1", 7000)
    with pytest.raises(ValueError):
        parse_url("http://example.org")
    v6 = Client.from_url("bloomd://[::1]:7000")
    assert v6.address == "[::1]:7000" and parse_url("bloomd://" + v6.address) == ("::1", 7000)
    v6.close()
    monkeypatch.setenv("BLOOMD_URL", "bloomd://127.0.0.9:1234")
    c = Client.from_url()
    assert c.address == "127.0.0.9:1234"
    c.close()
