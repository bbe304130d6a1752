"""role() and replicaof() against real daemons: a primary, a replica of it, a promotion."""
import time
from pathlib import Path
from typing import Callable, Iterator, List, Sequence

import pytest

from bloomd_client import Client, ClientError, ProtocolError, Role, parse_role
from daemons import Daemon

DEADLINE = 30.0


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    """start(args) runs a daemon with extra flags; every one is stopped (exit 0) at the end."""
    daemons: List[Daemon] = []

    def make(args: Sequence[str] = ()) -> Daemon:
        n = len(daemons)
        d = Daemon(tmp_path / ("data%d" % n), tmp_path / ("bloomd%d.log" % n), args)
        daemons.append(d)
        d.start()
        return d

    yield make
    for d in daemons:
        if d.proc is not None:
            assert d.stop() == 0, d.log.read_text(errors="replace")[-3000:]


def wait_role(c: Client, pred: Callable[[Role], bool]) -> Role:
    end = time.monotonic() + DEADLINE
    while True:
        r = c.role()
        if pred(r) or time.monotonic() > end:
            assert pred(r), r
            return r
        time.sleep(0.02)


def test_parse_role() -> None:
    assert parse_role(b"ROLE primary 2 17") == Role("primary", 17, replicas=2)
    assert parse_role(b"ROLE replica 10.0.0.1:8673 sync 5") == Role(
        "replica", 5, primary="10.0.0.1:8673", link="sync")
    for bad in (b"ROLE", b"ROLE primary x 1", b"ROLE leader 1 2", b"OK", b"ROLE replica a up"):
        with pytest.raises(ProtocolError):
            parse_role(bad)


def test_role_of_a_primary_a_replica_and_a_promotion(start: Callable[..., Daemon]) -> None:
    p = start()
    with Client.from_url(p.url, timeout=30) as pc:
        assert pc.role() == Role("primary", 0, replicas=0)
        r = start(["--replica-of", "127.0.0.1:%d" % p.port])
        with Client.from_url(r.url, timeout=30) as rc:
            up = wait_role(rc, lambda x: x.link == "up")
            assert up.role == "replica" and up.primary == "127.0.0.1:%d" % p.port
            assert up.replicas is None
            pc.create("f")
            pc.add("f", ["a", "b"])
            top = pc.role()
            assert top.role == "primary" and top.replicas == 1 and top.offset >= 2
            wait_role(rc, lambda x: x.offset == top.offset)
            assert rc.check("f", ["a", "b", "c"]) == [True, True, False]
            with pytest.raises(ClientError) as exc:
                rc.add("f", ["d"])
            assert "read-only replica" in exc.value.reply
            rc.replicaof(None)
            promoted = rc.role()
            assert promoted.role == "primary" and promoted.offset == top.offset
            assert rc.add("f", ["d"]) == 1
            # And back: a replica of the old primary again. A primary that becomes a
            # replica first sends its filters over (d, which only it had, is merged into the
            # old primary's f), then takes the primary's.
            rc.replicaof("127.0.0.1", p.port)
            again = wait_role(rc, lambda x: x.link == "up")
            assert again.role == "replica"
            assert pc.check("f", ["a", "d"]) == [True, True]
            wait_role(rc, lambda x: x.offset == pc.role().offset)
            assert rc.check("f", ["a", "d"]) == [True, True]
            with pytest.raises(ValueError):
                rc.replicaof("127.0.0.1", 0)
            with pytest.raises(ValueError):
                rc.replicaof("bad host", 1)
