"""Free TCP ports for tests that must name a port before the daemon starts.

A port is taken from below the kernel's ephemeral range (ip_local_port_range), so a
listener opened with port 0 (every daemon's main port in these tests) can never be handed
the same number. A port handed out once is not handed out again in this process.
"""

import random
import socket

_given = set()


def _bindable(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _range():
    """[low, high): up to 12,000 ports below the ephemeral range, or above it when it
    starts too low to leave room."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            first, last = (int(v) for v in f.read().split()[:2])
    except (OSError, ValueError):
        first, last = 32768, 60999
    if first - 1024 >= 2000:
        return max(1024, first - 12000), first
    if 65535 - last >= 2000:
        return last + 1, 65536
    return None  # no room outside it: the kernel's choice (port 0), as before


def free_port():
    """A port nothing listens on now and no port-0 listener can take."""
    span = _range()
    if span is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    low, high = span
    for _ in range(2000):
        port = random.randrange(low, high)
        if port not in _given and _bindable(port):
            _given.add(port)
            return port
    raise AssertionError("no free port in [%d, %d)" % (low, high))
