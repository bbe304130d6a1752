"""Fixtures of the client tests: daemons started per test or per module (daemons.py)."""
import re
from pathlib import Path
from typing import Callable, Iterator, List

import pytest

from daemons import Daemon


@pytest.fixture
def make_daemon(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    """Returns a function that starts a new daemon; all are stopped (exit 0) at teardown."""
    daemons: List[Daemon] = []

    def make(port: int = 0) -> Daemon:
        n = len(daemons)
        d = Daemon(tmp_path / ("data%d" % n), tmp_path / ("bloomd%d.log" % n))
        daemons.append(d)
        d.start(port)
        return d

    yield make
    for d in daemons:
        if d.proc is not None:
            assert d.stop() == 0, d.log.read_text(errors="replace")[-3000:]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A daemon shared by a test module; tests use distinct filter names."""
    base = tmp_path_factory.mktemp("bloomd")
    d = Daemon(base / "data", base / "bloomd.log")
    d.start()
    yield d
    assert d.stop() == 0, d.log.read_text(errors="replace")[-3000:]


@pytest.fixture
def fname(request: pytest.FixtureRequest) -> str:
    """A filter name unique to the test."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", request.node.name)[:100]
