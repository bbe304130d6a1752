"""dump() and restore() against real daemons: round trip, EXISTS, replace, a damaged dump."""
from typing import Callable

import pytest

from bloomd_client import Client, ClientError, NotFound
from daemons import Daemon


def test_dump_restore_round_trip(make_daemon: Callable[..., Daemon]) -> None:
    a, b = make_daemon(), make_daemon()
    keys = ["k%d" % i for i in range(5000)]
    with Client.from_url(a.url, timeout=30) as ca, Client.from_url(b.url, timeout=30) as cb:
        ca.create("f", capacity=2000, error=0.001)
        ca.add("f", keys)
        data = ca.dump("f")
        assert data[:6] == b"BLOOMD"
        assert cb.restore("f", data) is True
        assert all(cb.check("f", keys))
        assert cb.info("f")["items"] == ca.info("f")["items"]
        # EXISTS without replace, then replace swaps in the other filter's bits.
        assert cb.restore("f", data) is False
        ca.create("g")
        ca.add("g", ["only-in-g"])
        assert cb.restore("f", ca.dump("g"), replace=True) is True
        assert cb.check("f", "only-in-g") is True
        assert cb.info("f")["items"] == 1


def test_dump_missing_and_bad_restore(make_daemon: Callable[..., Daemon]) -> None:
    a = make_daemon()
    with Client.from_url(a.url, timeout=30) as c:
        with pytest.raises(NotFound):
            c.dump("nope")
        c.create("f")
        c.add("f", ["x"])
        data = bytearray(c.dump("f"))
        data[len(data) // 2] ^= 0x40
        with pytest.raises(ClientError) as exc:
            c.restore("g", bytes(data))
        assert "bad dump" in exc.value.message
        assert [s.name for s in c.list()] == ["f"]
        # The connection is still in step after a refusal.
        assert c.check("f", "x") is True
