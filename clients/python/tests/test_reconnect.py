"""Reconnecting: the daemon restarts (same port) under a client that keeps its pool."""
import threading
import time
from typing import Callable

import pytest

from bloomd_client import BloomdConnectionError, Client
from daemons import Daemon, free_port


def test_client_reconnects_after_a_restart(make_daemon: Callable[..., Daemon],
                                           fname: str) -> None:
    d = make_daemon(free_port())
    with Client.from_url(d.url, pool_size=2) as c:
        c.create(fname, capacity=1000)
        c.add(fname, "before")
        assert d.stop() == 0
        d.start(d.port)
        # The pooled connections are dead; the next calls reconnect transparently.
        c.create(fname, capacity=1000)
        assert c.checkadd(fname, ["after", "after"]) == [False, True]
        assert c.check(fname, "after") is True


def test_restart_keeps_flushed_filters(make_daemon: Callable[..., Daemon],
                                       fname: str) -> None:
    d = make_daemon(free_port())
    keys = ["k%d" % i for i in range(5000)]
    with Client.from_url(d.url) as c:
        c.create(fname, capacity=1000, error=0.001)
        c.add(fname, keys)
        c.flush(fname)
        c.add(fname, "after-flush")  # written by the snapshot SIGTERM triggers
        assert d.stop() == 0
        d.start(d.port)
        assert c.check(fname, keys + ["after-flush"]) == [True] * (len(keys) + 1)
        assert c.info(fname)["capacity"] == 1000


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


def test_call_waits_for_a_server_coming_back(make_daemon: Callable[..., Daemon]) -> None:
    d = make_daemon(free_port())
    with Client.from_url(d.url, retries=10, backoff=0.1, max_backoff=1.0) as c:
        assert c.version()
        assert d.stop() == 0
        restarter = threading.Timer(0.3, d.start, args=(d.port,))
        restarter.start()
        try:
            assert c.version()  # refused at first, then answered once bloomd is back
        finally:
            restarter.join(30)
