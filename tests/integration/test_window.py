"""Windowed filters (issue 11) against the real daemon with real time and short windows:
present before the window ends, gone by window*g/(g-1) plus a rotation tick, the same
across kill -9 (after FLUSH) and SIGTERM; INFO, LIST, refused set operations, CREATE
mismatch. Every wait is bounded."""

import json
import socket
import time

import pytest

from httputil import free_port, http_daemon, request

KEYS = ["k%d" % i for i in range(200)]
OTHER = ["o%d" % i for i in range(2000)]


def forgotten_by(window_s, g):
    return window_s * g / (g - 1)


def wait_until(pred, deadline):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def test_present_in_window_then_forgotten(client):
    assert client.cmd("CREATE w window=2s generations=2") == "CREATED"
    t0 = time.monotonic()
    client.add("w", KEYS)
    assert all(client.check("w", KEYS))
    # Still there a little before the window ends.
    time.sleep(max(0.0, 1.6 - (time.monotonic() - t0)))
    if time.monotonic() - t0 < 2.0:
        assert all(client.check("w", KEYS))
    # Forgotten by window*g/(g-1) = 4 s (plus a tick and slack), barring false positives.
    time.sleep(max(0.0, forgotten_by(2, 2) + 0.5 - (time.monotonic() - t0)))
    assert sum(client.check("w", KEYS)) <= 3
    # A repeat does not extend a key's life: CHECKADD after forgetting adds it anew.
    assert client.cmd("CHECKADD w " + " ".join(KEYS[:10])).count("0") >= 8


def test_checkadd_counts_first_sighting(client):
    assert client.cmd("CREATE c window=3s generations=3") == "CREATED"
    assert client.cmd("CHECKADD c a b") == "0 0"
    assert client.cmd("CHECKADD c a b x") == "1 1 0"


def test_info_list_and_refusals(client):
    assert client.cmd("CREATE w window=1h generations=4 capacity=10000 error=0.01") == "CREATED"
    info = client.stats("INFO w")
    assert info["window"] == "3600000" and info["generations"] == "4"
    assert int(info["generation_span"]) == 1200000
    assert "gen0_start" in info and "gen0_items" in info
    rows = client.block("LIST w")
    assert rows and rows[0].split()[1] == "w" and rows[0].endswith("window=3600s"), rows
    assert client.cmd("CREATE p") == "CREATED"
    assert client.block("LIST p")[0].count(" ") == 5  # plain filters keep five columns
    for line in ("UNION w p", "UNION p w", "INTERSECT p w"):
        reply = client.cmd(line)
        assert reply.startswith("CLIENT_ERROR UNION and INTERSECT do not apply to windowed"), reply
    assert client.cmd("CREATE w window=1h generations=4") == "EXISTS"
    reply = client.cmd("CREATE w window=2h")
    assert reply == ("CLIENT_ERROR window: exists 1h, asked 2h; filter exists with other "
                     "parameters (capacity=10000 error=0.01 growth=exponential scale=2 ratio=0.5 "
                     "window=1h generations=4)"), reply
    assert client.cmd("CREATE w window=1h generations=3").startswith(
        "CLIENT_ERROR generations: exists 4, asked 3;")
    assert client.cmd("CREATE w window=60m capacity=5").startswith(
        "CLIENT_ERROR capacity: exists 10000, asked 5;")  # 60m is 1h: the window matches
    # Over a plain filter, the README's case: window is named, and the filter has none.
    assert client.cmd("CREATE p window=1h").startswith(
        "CLIENT_ERROR window: exists without, asked 1h; filter exists")
    assert client.cmd("CREATE w kind=blocked").startswith(
        "CLIENT_ERROR kind: exists window, asked blocked;")
    assert client.cmd("CREATE x window=1h kind=expandable").startswith("CLIENT_ERROR")


def test_one_capacity_everywhere(daemon_factory, tmp_path):
    """The capacity the user gave (keys per window) is the one INFO, LIST, /api, /metrics
    and a template-made filter show; per-generation figures are named as such."""
    conf = tmp_path / "bloomd.conf"
    conf.write_text("[filter clicks*]\ncapacity = 10M\nerror = 0.001\nwindow = 1h\n"
                    "generations = 4\n")
    mc = free_port()
    d, hp = http_daemon(daemon_factory, args=["--config", str(conf), "--memcache-port", str(mc)])
    with socket.create_connection(("127.0.0.1", mc), timeout=10) as s:  # first use: template
        s.sendall(b"add clicks:u1 0 0 1\r\n1\r\n")
        assert s.recv(64) == b"STORED\r\n"
    with d.client() as c:
        assert c.cmd("CREATE w window=1h generations=4 capacity=100000") == "CREATED"
        for name, cap in (("w", 100000), ("clicks", 10000000)):
            info = c.stats("INFO " + name)
            assert int(info["capacity"]) == cap, info
            assert "total_capacity" not in info, info
            assert int(info["generation_capacity"]) == -(-cap // 3), info  # g - 1 = 3 spans
            assert int(info["gen0_capacity"]) >= int(info["generation_capacity"]), info
            row = c.block("LIST " + name)[0].split()
            assert row[1] == name and int(row[4]) == cap, row
            st, _, body = request(hp, "/api/filters/" + name)
            assert st == 200 and json.loads(body)["capacity"] == cap, body[:300]
        st, _, body = request(hp, "/api/filters")
        caps = {f["name"]: f["capacity"] for f in json.loads(body)["filters"]}
        assert caps == {"w": 100000, "clicks": 10000000}, caps
        st, _, body = request(hp, "/metrics")
        assert b'bloomd_filter_capacity{filter="w"} 100000' in body


@pytest.mark.parametrize("how", ["kill", "term"])
def test_restart_keeps_window(daemon_factory, how):
    d = daemon_factory(args=["--snapshot-interval", "0"])
    with d.client() as c:
        assert c.cmd("CREATE w window=3s generations=3") == "CREATED"
        t0 = time.monotonic()
        c.add("w", KEYS)
        assert c.cmd("FLUSH w") == "OK"
    if how == "kill":
        d.kill()
    else:
        d.stop()
    d.start()
    with d.client() as c:
        if time.monotonic() - t0 < 2.5:
            assert all(c.check("w", KEYS)), "lost inside the window across a restart"
        # Gone after window*g/(g-1) = 4.5 s, also across the restart.
        time.sleep(max(0.0, forgotten_by(3, 3) + 0.5 - (time.monotonic() - t0)))
        assert sum(c.check("w", KEYS)) <= 3


def test_downtime_longer_than_window_empties_it(daemon_factory):
    d = daemon_factory(args=["--snapshot-interval", "0"])
    with d.client() as c:
        assert c.cmd("CREATE w window=1s generations=2") == "CREATED"
        c.add("w", KEYS)
    d.stop()
    time.sleep(2.5)
    d.start()
    with d.client() as c:
        assert sum(c.check("w", KEYS)) <= 3
        assert int(c.stats("INFO w")["items"]) == 0


def test_memory_comes_back_without_requests(client):
    """The worker's tick rotates a filter nobody touches: its bytes shrink back."""
    assert client.cmd("CREATE m window=1s generations=2 capacity=1000") == "CREATED"
    for i in range(0, 20000, 500):  # a burst: generations grow beyond their plan
        client.add("m", ["b%d" % j for j in range(i, i + 500)])
    grown = int(client.stats()["memory_bytes"])
    # STATS touches no filter (INFO would rotate it on access): only the tick can free.
    assert wait_until(lambda: int(client.stats()["memory_bytes"]) < grown, 6.0), grown
