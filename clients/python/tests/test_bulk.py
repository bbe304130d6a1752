"""1,000,000 keys through CHECKADD in batches, compared with an exact set.

The filter starts at 100,000 keys so it grows through several stages. Never a false
negative; the false-positive fraction among new keys stays under the promised rate
plus a margin (1.5x: the filter promises the compound rate for the final filter, and the
rate while filling is lower).
"""
import random
import time

from bloomd_client import Client
from daemons import Daemon

TOTAL = 1_000_000
BATCH = 50_000
ERROR = 0.01


def test_million_keys_checkadd_matches_exact_set(daemon: Daemon, fname: str) -> None:
    rng = random.Random(20261129)
    with Client.from_url(daemon.url, timeout=60) as c:
        assert c.create(fname, capacity=100_000, error=ERROR)
        exact = set()
        false_negatives = false_positives = new = 0
        started = time.monotonic()
        for first in range(0, TOTAL, BATCH):
            # About one key in five repeats an earlier one.
            keys = ["click-%x" % (rng.randrange(first) if first and rng.random() < 0.2
                                  else first + i) for i in range(BATCH)]
            got = c.checkadd(fname, keys)
            assert len(got) == len(keys)
            for key, seen in zip(keys, got):
                if key in exact:
                    false_negatives += not seen
                else:
                    new += 1
                    false_positives += seen
                    exact.add(key)
        elapsed = time.monotonic() - started
        assert false_negatives == 0
        assert false_positives <= 1.5 * ERROR * new, (false_positives, new)
        # Every key ever added is still present.
        sample = rng.sample(sorted(exact), 100_000)
        assert all(c.check(fname, sample))
        info = c.info(fname)
        assert int(info["stages"]) > 1
        print("\n%d keys (%d new) in %.1f s: %d false positives (%.4f%%)"
              % (TOTAL, new, elapsed, false_positives, 100 * false_positives / new))
