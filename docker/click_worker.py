#!/usr/bin/env python3
"""click_worker.py - example click-ingest worker: drops duplicate clicks using bloomd.

Reads click events as JSON lines (each with a "click_id") from stdin, or makes up
--demo N of them (about one in five a repeat), asks its bloomd sidecar which ids were
seen before (CHECKADD, --batch ids per call) and writes only first-seen events to
stdout. bloomd comes from $BLOOMD_URL (default bloomd://127.0.0.1:8673, the sidecar).
"""
import argparse
import itertools
import json
import random
import sys
from typing import Dict, Iterable, Iterator, List

from bloomd_client import Client, ClientError

Event = Dict[str, object]


def demo_clicks(n: int, seed: int) -> Iterator[Event]:
    rng = random.Random(seed)
    for i in range(n):
        cid = rng.randrange(i) if i and rng.random() < 0.2 else i
        yield {"click_id": "c-%d-%d" % (seed, cid), "ad": "ad-%d" % (cid % 97)}


def read_clicks(lines: Iterable[str]) -> Iterator[Event]:
    """The events of JSON lines; raises ValueError naming the first bad line."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError as exc:
            raise ValueError("line %d: not JSON: %s" % (number, exc)) from None
        if not isinstance(event, dict) or "click_id" not in event:
            raise ValueError("line %d: not an object with a click_id" % number)
        yield event


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1, not %d" % value)
    return value


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--filter", default="clicks", help="bloomd filter name")
    ap.add_argument("--capacity", type=int, default=10_000_000)
    ap.add_argument("--error", type=float, default=0.001)
    ap.add_argument("--batch", type=positive, default=1000, help="click ids per CHECKADD")
    ap.add_argument("--demo", type=positive, metavar="N",
                    help="make up N clicks instead of stdin")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    clicks = demo_clicks(args.demo, args.seed) if args.demo else read_clicks(sys.stdin)
    total = dups = 0
    # Generous retries: the sidecar may still be starting when the worker does.
    with Client.from_url(retries=8, max_backoff=2.0) as bloomd:
        try:
            bloomd.create(args.filter, capacity=args.capacity, error=args.error)
        except ClientError as exc:  # another worker made it first, with other parameters
            if "filter exists" not in str(exc):
                raise
            print("click_worker: using the existing filter: %s" % exc, file=sys.stderr)
        bad = None
        while bad is None:
            batch: List[Event] = []
            try:
                for event in itertools.islice(clicks, args.batch):
                    batch.append(event)
            except ValueError as exc:  # the events before the bad line still count
                bad = exc
            if not batch:
                break
            seen = bloomd.checkadd(args.filter, [str(e["click_id"]) for e in batch])
            for event, dup in zip(batch, seen):
                if not dup:
                    sys.stdout.write(json.dumps(event) + "\n")
            total += len(batch)
            dups += sum(seen)
    print("processed %d clicks: %d first seen, %d duplicates" % (total, total - dups, dups),
          file=sys.stderr)
    if bad is not None:
        print("click_worker: stdin %s" % bad, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
