"""ShardedClient across 3 daemons, and the routing properties its docs promise."""
import random
from typing import Callable, List

from bloomd_client import Client, ShardedClient
from bloomd_client.sharding import Rendezvous
from daemons import Daemon

N = 30_000


def test_keys_spread_over_three_daemons(make_daemon: Callable[..., Daemon], fname: str) -> None:
    daemons = [make_daemon() for _ in range(3)]
    urls = [d.url for d in daemons]
    keys = ["user-%d" % i for i in range(N)]
    with ShardedClient(urls) as sc:
        assert sc.create(fname, capacity=20_000, error=0.001) is True
        assert sc.create(fname) is False
        assert sc.checkadd(fname, keys[:N // 2]) == [False] * (N // 2)
        assert sc.add(fname, keys) == N - N // 2
        assert sc.check(fname, keys) == [True] * N
        assert sc.check(fname, "user-absent") is False
        owner = [sc.shard_for(k).address for k in keys]
        items = {addr: int(info["items"]) for addr, info in sc.info(fname).items()}
        assert set(items) == {c.address for c in sc.shards}
        for addr in items:
            share = owner.count(addr)
            assert 0.25 * N < share < 0.42 * N  # an even spread, within a wide margin
            assert abs(items[addr] - share) <= 0.01 * share  # items are estimates
        assert set(sc.version()) == set(items)
        assert all(len(v) == 1 for v in sc.list(fname).values())
        # Each key is on its owner only (another server answers no but for rare
        # false positives).
        for c in sc.shards:
            mine = [k for k, o in zip(keys, owner) if o == c.address]
            others = [k for k, o in zip(keys, owner) if o != c.address]
            direct = Client.from_url("bloomd://" + c.address)
            assert all(direct.check(fname, mine))
            assert sum(direct.check(fname, others)) <= 0.005 * len(others)
            direct.close()
        sc.drop(fname)
        assert all(not v for v in sc.list(fname).values())


def _owners(ids: List[str], keys: List[bytes]) -> List[str]:
    r = Rendezvous(ids)
    return [ids[r.pick(k)] for k in keys]


def test_rendezvous_moves_few_keys_when_servers_change() -> None:
    rng = random.Random(1)
    keys = [b"%x" % rng.getrandbits(64) for _ in range(20_000)]
    three = ["10.0.0.1:8673", "10.0.0.2:8673", "10.0.0.3:8673"]
    before = _owners(three, keys)
    # Reordering moves nothing.
    assert _owners(three[::-1], keys) == before
    # Adding a fourth moves about a quarter of the keys, all to the new server.
    after = _owners(three + ["10.0.0.4:8673"], keys)
    moved = [a for b, a in zip(before, after) if a != b]
    assert set(moved) == {"10.0.0.4:8673"}
    assert 0.2 < len(moved) / len(keys) < 0.3
    # Removing one moves only that server's keys.
    two = _owners(three[:2], keys)
    assert all(t == b for b, t in zip(before, two) if b != three[2])


def test_sharded_delete(make_daemon: Callable[..., Daemon], fname: str) -> None:
    daemons = [make_daemon() for _ in range(2)]
    keys = ["user-%d" % i for i in range(2000)]
    with ShardedClient([d.url for d in daemons]) as sc:
        # The smallest error the kind takes: a key of the 2000 reading "seen" on its first
        # add (a shared fingerprint) is rare, and the pinned secret (daemons.py) has none.
        assert sc.create(fname, kind="expandable", capacity=5000, error=0.0002) is True
        assert sc.add(fname, keys) == 2000
        assert sc.delete(fname, keys[:1000]) == 1000     # each key on its own server
        assert sc.check(fname, keys[1000:]) == [True] * 1000
        assert sum(sc.check(fname, keys[:1000])) <= 20
