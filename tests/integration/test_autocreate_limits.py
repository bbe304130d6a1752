"""Create-on-first-use limits (issue 27): memcached clients that may not CREATE cannot
crowd out those who do. --max-filters bounds every filter, --memcache-max-auto-filters
the ones made on first use, and first use never takes the last tenth of max_memory, so
an explicit CREATE still works; every refusal says why."""
import socket

from httputil import free_port, wait_port


def sets(port, names, timeout=60.0):
    """One memcached `set <name>:k` per name, pipelined; returns the reply lines."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(b"".join(b"set %s:k 0 0 1\r\n1\r\n" % n.encode() for n in names))
    buf, lines = b"", []
    while len(lines) < len(names):
        chunk = s.recv(1 << 16)
        assert chunk, "closed after %d replies" % len(lines)
        buf += chunk
        *done, buf = buf.split(b"\r\n")
        lines += [x.decode() for x in done]
    s.close()
    return lines


def test_first_use_keeps_room_for_create(daemon_factory):
    """The issue's case scaled down (256M holds 1,371 default filters, and the ASan build's
    shutdown snapshot of them all outlasts the stop deadline): 3,000 first-use filters."""
    port = free_port()
    d = daemon_factory(["--memcache-port", str(port), "--max-memory", "48M",
                        "--memcache-max-auto-filters", "100000", "--max-filters", "100000"])
    wait_port(port)
    replies = sets(port, ["p%d" % i for i in range(3000)])
    stored = sum(r == "STORED" for r in replies)
    refused = [r for r in replies if r != "STORED"]
    assert stored > 0 and refused, (stored, refused[:3])
    assert all(r.startswith("SERVER_ERROR out of memory for a filter created on first use")
               for r in refused), refused[:3]
    with d.client() as c:
        assert c.cmd("CREATE explicit capacity=100000") == "CREATED"
        stats = c.stats()
        assert int(stats["memory_bytes"]) <= int(stats["memory_limit"])


def test_auto_filters_bounded(daemon_factory):
    port = free_port()
    d = daemon_factory(["--memcache-port", str(port), "--memcache-max-auto-filters", "50",
                        "--default-capacity", "1000"])
    wait_port(port)
    replies = sets(port, ["a%d" % i for i in range(80)])
    assert replies[:50] == ["STORED"] * 50, replies[:50]
    assert all(r.startswith("SERVER_ERROR too many filters created on first use (50")
               for r in replies[50:]), replies[50:53]
    with d.client() as c:
        assert c.cmd("CREATE mine capacity=1000") == "CREATED"  # explicit CREATE is not bound
        assert c.cmd("DROP a0") == "DELETED"
    assert sets(port, ["fresh"]) == ["STORED"]  # a dropped one makes room again


def test_max_filters_bounds_every_create(daemon_factory):
    d = daemon_factory(["--max-filters", "3", "--default-capacity", "1000"])
    with d.client() as c:
        for n in ("x", "y", "z"):
            assert c.cmd("CREATE " + n) == "CREATED"
        reply = c.cmd("CREATE w")
        assert reply.startswith("SERVER_ERROR too many filters (3 of max_filters 3"), reply
        assert c.cmd("CREATE x") == "EXISTS"  # an existing name is no new filter
        assert c.cmd("DROP z") == "DELETED"
        assert c.cmd("CREATE w") == "CREATED"
