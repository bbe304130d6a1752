#!/usr/bin/env python3
"""soak_failover.py - the failover round of tests/integration/test_replication.py, many
times: a primary with --min-replica-acks 1 and one replica, 4 writer threads running
CHECKADD of distinct keys and recording every acknowledged key, kill -9 of the primary,
its data dir deleted, REPLICAOF NO ONE on the replica, then every acknowledged key checked
there and a write taken. Durability alternates always / everysec. Exits 1 at the first
round that lost a key (its daemons' logs are kept), 0 after all rounds.

    /usr/bin/python3 bench/soak_failover.py [--rounds 200] [--write-seconds 0.5] [--bin PATH]

The binary defaults to $BLOOMD_REL_BIN, else build/bloomd. Not part of `make test`.
"""
import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from conftest import Daemon  # noqa: E402
from test_replication import failover_round  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--write-seconds", type=float, default=0.5)
    ap.add_argument("--bin", default=os.environ.get("BLOOMD_REL_BIN") or str(REPO / "build" / "bloomd"))
    ap.add_argument("--deadline", type=float, default=3600.0, help="seconds for all rounds")
    opts = ap.parse_args()
    if not os.access(opts.bin, os.X_OK):
        sys.exit("no daemon at %s: run `make build/bloomd`" % opts.bin)
    t0 = time.monotonic()
    total = 0
    worst = 0.0
    for rnd in range(opts.rounds):
        tmp = Path(tempfile.mkdtemp(prefix="soak-failover-"))
        daemons = []

        def make(args, binary):
            n = len(daemons)
            d = Daemon(tmp / ("data%d" % n), args, log_path=tmp / ("bloomd%d.log" % n),
                       binary=binary)
            daemons.append(d)
            return d.start()
        try:
            n, missing, secs = failover_round(
                make, tmp, rnd, durability="always" if rnd % 2 == 0 else "everysec",
                write_s=opts.write_seconds, binary=opts.bin)
        finally:
            for d in daemons:
                if d.alive():
                    d.kill()
        worst = max(worst, secs)
        total += n
        print("round %d: %d acknowledged, %d missing, %.2f s" % (rnd, n, missing, secs),
              flush=True)
        if missing or n == 0:
            print("FAILED in round %d; logs in %s" % (rnd, tmp))
            return 1
        shutil.rmtree(tmp, ignore_errors=True)
        if time.monotonic() - t0 > opts.deadline:
            print("deadline reached after %d rounds" % (rnd + 1))
            break
    print("%d rounds, %d acknowledged keys, 0 missing; %.1f s in all, slowest round %.2f s"
          % (rnd + 1, total, time.monotonic() - t0, worst))
    return 0


if __name__ == "__main__":
    sys.exit(main())
