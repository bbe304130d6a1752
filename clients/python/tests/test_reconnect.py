"""Reconnecting: the daemon restarts under a client that keeps its pool."""
import threading
import time
from typing import Callable

import pytest

from bloomd_client import BloomdConnectionError, Client
from conftest import Daemon, free_port


def test_client_survives_a_restart_and_sees_the_snapshot(
        make_daemon: Callable[..., Daemon], fname: str) -> None:
    d = make_daemon(free_port())
    with Client.from_url(d.url, pool_size=2) as c:
        c.create(fname, capacity=1000)
        keys = ["k%d" % i for i in range(500)]
        c.add(fname, keys)
        assert d.stop() == 0  # SIGTERM writes the final snapshot
        d.start(d.port)
        # The pooled connection is dead; the next calls reconnect transparently.
        assert c.check(fname, keys) == [True] * len(keys)
        assert c.checkadd(fname, "new-after-restart") is False
        assert c.version()


def test_retries_are_bounded_when_the_server_is_gone(
        make_daemon: Callable[..., Daemon], fname: str) -> None:
    d = make_daemon(free_port())
    with Client.from_url(d.url, retries=3, backoff=0.05, max_backoff=0.1) as c:
        c.create(fname)
        assert d.stop() == 0
        started = time.monotonic()
        with pytest.raises(BloomdConnectionError):
            c.check(fname, "k")
        assert time.monotonic() - started < 2.0


def test_call_waits_for_a_server_coming_back(
        make_daemon: Callable[..., Daemon], fname: str) -> None:
    d = make_daemon(free_port())
    with Client.from_url(d.url, retries=10, backoff=0.1, max_backoff=1.0) as c:
        c.create(fname)
        c.add(fname, "kept")
        assert d.stop() == 0
        restarter = threading.Timer(0.3, d.start, args=(d.port,))
        restarter.start()
        try:
            assert c.check(fname, "kept") is True
        finally:
            restarter.join(30)
