"""Free TCP ports for tests that must name a port before the daemon starts.

A port is taken from below the kernel's ephemeral range (ip_local_port_range), so a
listener opened with port 0 (every daemon's main port in these tests) can never be handed
the same number. A port handed out once is not handed out again in this process.
"""

import random
import socket

_given = set()


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port():
    """A port nothing listens on now and no port-0 listener can take."""
    high = _ephemeral_low()
    low = max(1024, high - 12000)
    for _ in range(2000):
        port = random.randrange(low, high)
        if port not in _given and _bindable(port):
            _given.add(port)
            return port
    raise AssertionError("no free port in [%d, %d)" % (low, high))
