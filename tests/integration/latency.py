"""Latency helpers for the large-filter tests: free memory, CHECK round trips timed by a
thread beside the work being measured, and their 99th percentile."""

import time
from pathlib import Path

GIB = 1 << 30


def mem_available():
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def time_checks(d, stop, out):
    """CHECK round trips on d until stop is set; their durations in ms go to out."""
    with d.client(timeout=30) as c:
        while not stop.is_set() and len(out) < 200000:
            t0 = time.monotonic()
            assert c.cmd("CHECK probe k1") == "1"
            out.append((time.monotonic() - t0) * 1000)
            time.sleep(0.002)


def p99(samples):
    s = sorted(samples)
    return s[int(len(s) * 0.99)] if s else 0.0
