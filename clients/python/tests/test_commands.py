"""Every Client method against a real daemon, including the error replies."""
import threading
from typing import Iterator, List, Union

import pytest

from bloomd_client import (Client, ClientError, FilterSummary, InvalidKey, InvalidName,
                           NotFound)
from daemons import Daemon


@pytest.fixture
def client(daemon: Daemon) -> Iterator[Client]:
    with Client.from_url(daemon.url, timeout=30) as c:
        yield c


def test_version_and_stats(client: Client) -> None:
    version = client.version()
    assert version.count(".") == 2 and all(p.isdigit() for p in version.split("."))
    stats = client.stats()
    assert isinstance(stats["uptime"], int) and stats["uptime"] >= 0


def test_create_exists_and_info(client: Client, fname: str) -> None:
    assert client.create(fname, capacity=5000, error=0.001, growth="linear", scale=2,
                         ratio=0.5) is True
    assert client.create(fname) is False
    info = client.info(fname)
    assert info["name"] == fname
    assert info["capacity"] == 5000
    assert info["error"] == pytest.approx(0.001)
    assert info["growth"] == "linear"
    assert info["items"] == 0


def test_create_bad_parameters_is_client_error(client: Client, fname: str) -> None:
    with pytest.raises(ClientError) as exc:
        client.create(fname, error=1.5)
    assert exc.value.reply.startswith("CLIENT_ERROR") and exc.value.message


def test_add_check_checkadd(client: Client, fname: str) -> None:
    client.create(fname, capacity=1000)
    assert client.add(fname, ["a", b"b", "a"]) == 2
    assert client.add(fname, "c") == 1
    assert client.check(fname, ["a", "b", "c", "zz-absent"]) == [True, True, True, False]
    assert client.check(fname, b"a") is True
    assert client.checkadd(fname, ["d", "a", "d"]) == [False, True, True]
    assert client.checkadd(fname, "e") is False
    assert client.check(fname, []) == []
    assert client.add(fname, iter([])) == 0
    # Non-ASCII str keys are UTF-8 and the same key as their bytes.
    client.add(fname, "caf\u00e9")
    assert client.check(fname, "caf\u00e9".encode()) is True
    assert int(client.info(fname)["items"]) >= 6


def test_missing_filter_is_not_found(client: Client) -> None:
    for call in (lambda: client.add("no-such-filter", "k"),
                 lambda: client.check("no-such-filter", ["k"] * 10),
                 lambda: client.info("no-such-filter"),
                 lambda: client.drop("no-such-filter"),
                 lambda: client.clear("no-such-filter")):
        with pytest.raises(NotFound):
            call()
    # The connection is still in sync after errors.
    assert client.version()


def test_not_found_in_a_long_pipeline(daemon: Daemon) -> None:
    """A missing filter with many lines in flight: every reply is read, one error
    raised, the connection reused."""
    with Client.from_url(daemon.url, max_line=512, pool_size=1) as c:
        with pytest.raises(NotFound):
            c.checkadd("no-such-filter", ["key-%d" % i for i in range(5000)])
        assert c.version()


def test_invalid_keys_and_names_are_refused_before_sending(client: Client, fname: str) -> None:
    client.create(fname)
    bads: List[Union[str, bytes]] = ["a b", "tab\there", "cr\r", "lf\n", b"nul\x00", "", b""]
    for bad in bads:
        with pytest.raises(InvalidKey):
            client.add(fname, ["fine", bad])
    assert client.check(fname, "fine") is False  # nothing of the batch was sent
    for name in ["", ".hidden", "a/b", "x" * 129, "sp ace"]:
        with pytest.raises(InvalidName):
            client.create(name)


def test_union_intersect(client: Client, fname: str) -> None:
    a, b, u, i = (fname + s for s in ("-a", "-b", "-u", "-i"))
    for n in (a, b):
        client.create(n, capacity=1000, error=0.01)
    client.add(a, ["x", "both"])
    client.add(b, ["y", "both"])
    client.union(u, a, b)
    assert client.check(u, ["x", "y", "both"]) == [True, True, True]
    client.create(i, capacity=1000, error=0.01)
    client.add(i, ["x", "y", "both"])
    client.intersect(i, a, b)
    assert client.check(i, "both") is True
    assert client.check(i, ["x", "y"]) == [False, False]


def test_intersect_of_grown_filters_is_refused(client: Client, fname: str) -> None:
    grown, small = fname + "-g", fname + "-s"
    for n in (grown, small):
        client.create(n, capacity=100, error=0.01)
    client.add(grown, ["k%d" % i for i in range(1000)])
    client.add(small, "k1")
    assert int(client.info(grown)["stages"]) > 1
    with pytest.raises(ClientError, match="grown"):
        client.intersect(small, grown)
    assert client.check(small, "k1") is True  # nothing changed


def test_union_incompatible_is_client_error(client: Client, fname: str) -> None:
    client.create(fname + "-1", capacity=1000, error=0.01)
    client.create(fname + "-2", capacity=7777, error=0.001)
    with pytest.raises(ClientError):
        client.union(fname + "-1", fname + "-2")


def test_list_drop_clear(client: Client, fname: str) -> None:
    client.create(fname + "-x", capacity=2000, error=0.01)
    client.create(fname + "-y")
    client.add(fname + "-x", ["1", "2", "3"])
    listed = {f.name: f for f in client.list(fname)}
    assert set(listed) == {fname + "-x", fname + "-y"}
    x = listed[fname + "-x"]
    assert isinstance(x, FilterSummary) and x.capacity == 2000 and x.items == 3
    assert x.bytes > 0 and x.error == pytest.approx(0.01)
    assert fname + "-x" in {f.name for f in client.list()}
    client.clear(fname + "-x")
    assert client.check(fname + "-x", ["1", "2", "3"]) == [False, False, False]
    assert client.info(fname + "-x")["capacity"] == 2000
    client.drop(fname + "-y")
    assert [f.name for f in client.list(fname)] == [fname + "-x"]
    with pytest.raises(NotFound):
        client.check(fname + "-y", "1")


def test_flush(client: Client, fname: str) -> None:
    client.create(fname)
    client.flush(fname)
    client.flush()
    with pytest.raises(NotFound):
        client.flush(fname + "-missing")


def test_threads_share_one_client(daemon: Daemon, fname: str) -> None:
    """8 threads, 4 pooled connections: each thread's answers are its own."""
    errors = []
    with Client.from_url(daemon.url, pool_size=4, timeout=30) as c:
        c.create(fname, capacity=100_000)

        def worker(t: int) -> None:
            try:
                for r in range(20):
                    keys = ["t%d-r%d-%d" % (t, r, i) for i in range(200)]
                    assert c.checkadd(fname, keys) == [False] * 200
                    assert c.check(fname, keys) == [True] * 200
            except BaseException as exc:  # reported below, in the test thread
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
    assert not errors, errors[0]


def test_windowed_filter(client: Client) -> None:
    assert client.create("win", window="1h", generations=4, capacity=1000) is True
    assert client.create("win", window="1h") is False
    assert client.add("win", ["a", "b"]) == 2
    info = client.info("win")
    assert info["window"] == 3600000 and info["generations"] == 4
    (row,) = client.list("win")
    assert row.name == "win" and row.window == 3600.0
    assert client.create("plain") is True
    assert [r.window for r in client.list("plain")] == [None]


def test_delete_from_an_expandable_filter(client: Client, fname: str) -> None:
    assert client.create(fname, kind="expandable", capacity=1000, error=0.01) is True
    assert client.info(fname)["capacity"] == 1000
    keys = ["k%d" % i for i in range(500)]
    assert client.add(fname, keys) == 500
    assert client.delete(fname, keys[:200]) == 200       # spans lines like add()
    assert client.delete(fname, "k200") == 1
    got = client.check(fname, keys)
    assert got[201:] == [True] * 299                      # no false negatives for the rest
    assert sum(got[:201]) <= 5                            # gone, barring false positives
    assert client.delete(fname, []) == 0
    client.create(fname + "-blocked")
    with pytest.raises(ClientError) as exc:
        client.delete(fname + "-blocked", "k")
    assert "expandable" in exc.value.message
    with pytest.raises(NotFound):
        client.delete("no-such-filter", "k")
