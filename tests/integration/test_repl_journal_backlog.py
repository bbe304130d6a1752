"""The journal as the replication backlog's older part (issue 24, "The stream": "a backlog:
the journal segments where the journal runs, else an in-memory ring"). A replica stopped
while its primary wrote several times what the in-memory ring holds resyncs partially from
the primary's journal segments; once a snapshot truncated those segments past its offset,
the same resync is a full one; a damaged segment cuts the feed (a full resync follows)
instead of sending what it holds.

The primary runs with the smallest ring allowed (--replication-backlog 1M, one 2 MiB
chunk in practice), so a few MiB of records are past it.
"""

import urllib.request
from pathlib import Path

from ports import free_port
from test_replication import REL_BIN, keys, replica_of, role, start, wait_caught_up, wait_for

PRIMARY = ["--durability", "everysec", "--replication-backlog", "1M"]
REPLICA = ["--durability", "everysec"]  # keeps replica.state: a restart resyncs partially


def counters(c):
    s = c.stats()
    return {k: int(s[k]) for k in ("replication_full_syncs", "replication_partial_syncs",
                                   "replication_journal_resyncs")}


def add_many(c, name, ks, chunk=5000, window=8):
    """ADDs ks in requests of chunk keys, window requests in flight; asserts every reply."""
    reqs = ["ADD %s %s\r\n" % (name, " ".join(ks[i:i + chunk])) for i in range(0, len(ks), chunk)]
    for i in range(0, len(reqs), window):
        part = reqs[i:i + window]
        c.send("".join(part))
        for _ in part:
            reply = c.line()
            assert reply.startswith("ADDED"), reply


def segments(data_dir):
    return sorted(p for p in (Path(data_dir) / "journal").glob("*.log"))


def wait_durable(pc):
    """Until the primary's journal has every record it made on disk."""
    wait_for("the journal synced", lambda: int(pc.stats()["journal_durable_pos"])
             >= role(pc)["offset"], deadline=20)


def away_and_back(daemon_factory, n_away, binary=None, while_away=None, during=()):
    """A primary and a replica; the replica stopped while n_away keys are added, then
    while_away(p, pc, replica_offset) runs, then the replica restarts and catches up
    while the keys during are added. Returns (p, r, counters before, counters after, the
    keys)."""
    p = start(daemon_factory, PRIMARY, binary=binary)
    one, two = keys("one", 10000), keys("two", n_away)
    with p.client(timeout=60) as pc:
        # Before the replica: its full sync then has a filter, whose snapshot writes the
        # replica.state a restart resyncs from (a full sync of no filters writes none).
        assert pc.cmd("CREATE f capacity=%d error=0.01" % (2 * n_away)) == "CREATED"
        add_many(pc, "f", one)
    r = replica_of(daemon_factory, p, REPLICA, binary=binary)
    with p.client(timeout=60) as pc, r.client(timeout=60) as rc:
        wait_caught_up(pc, [rc])
        at = role(rc)["offset"]
    wait_for("replica.state written", lambda: (Path(r.data_dir) / "replica.state").exists(),
             deadline=20)
    r.stop()
    with p.client(timeout=60) as pc:
        before = counters(pc)
        add_many(pc, "f", two)
        wait_durable(pc)
        if while_away is not None:
            while_away(p, pc, at)
        r.start()
        add_many(pc, "f", list(during), chunk=1000)
        with r.client(timeout=60) as rc:
            wait_caught_up(pc, [rc])
            after = counters(pc)
            return p, r, before, after, one + two + list(during)


def holds_every_key(r, ks):
    with r.client(timeout=60) as rc:
        got = rc.check("f", ks, chunk=5000)
    missing = [k for k, b in zip(ks, got) if not b]
    assert not missing, "%d keys missing on the replica, e.g. %r" % (len(missing), missing[:5])


def test_replica_away_resyncs_from_the_journal(daemon_factory):
    # 400k keys: 6.4 MB of records, three times the ring; 100k more (1.6 MB) while it
    # catches up, so that the feed goes from the journal to the ring as records come.
    p, r, before, after, ks = away_and_back(daemon_factory, 400000, during=keys("during", 100000))
    assert after["replication_full_syncs"] == before["replication_full_syncs"], (before, after)
    assert after["replication_partial_syncs"] == before["replication_partial_syncs"] + 1
    assert after["replication_journal_resyncs"] == before["replication_journal_resyncs"] + 1
    assert "from the journal" in p.log()
    holds_every_key(r, ks)
    # Once caught up it follows from the ring again, as before.
    with p.client() as pc, r.client() as rc:
        add_many(pc, "f", keys("three", 20000))
        wait_caught_up(pc, [rc])
        assert counters(pc) == after
    holds_every_key(r, keys("three", 20000))


def test_the_journal_resyncs_show_in_metrics(daemon_factory):
    port = free_port()
    p = start(daemon_factory, PRIMARY + ["--http-port", str(port)])
    with p.client() as pc:
        assert pc.stats()["replication_journal_resyncs"] == "0"
    body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read()
    assert b"\nbloomd_replication_journal_resyncs_total 0\n" in body, body[:3000]



def test_truncated_journal_resyncs_in_full(daemon_factory):
    """A segment is 64 MiB: 4.5M keys away (72 MB of records) fill more than one, and FLUSH
    (every filter's snapshot) truncates the first, which held the replica's offset."""
    def truncate(p, pc, at):
        assert len(segments(p.data_dir)) >= 2, segments(p.data_dir)
        assert pc.cmd("FLUSH") == "OK"
        wait_for("the first segment removed", lambda: int(segments(p.data_dir)[0].stem) > at + 1,
                 deadline=20)

    n = 4500000
    p, r, before, after, ks = away_and_back(daemon_factory, n, binary=REL_BIN, while_away=truncate)
    assert after["replication_full_syncs"] == before["replication_full_syncs"] + 1, (before, after)
    assert after["replication_journal_resyncs"] == before["replication_journal_resyncs"], after
    holds_every_key(r, ks[:20000] + ks[-200000:])


def test_damaged_segment_cuts_the_feed(daemon_factory):
    """A flipped byte in the segment, between the replica's offset and the ring: the read
    finds it, the feed is cut before anything of it is sent, and the next resync is full."""
    def damage(p, pc, at):
        seg = segments(p.data_dir)[-1]
        size = seg.stat().st_size
        with open(seg, "r+b") as f:
            f.seek(size * 2 // 5)
            b = f.read(1)
            f.seek(size * 2 // 5)
            f.write(bytes([b[0] ^ 0x20]))

    p, r, before, after, ks = away_and_back(daemon_factory, 400000, while_away=damage)
    assert "reading the journal back for it failed" in p.log(), p.log()[-3000:]
    assert after["replication_journal_resyncs"] == before["replication_journal_resyncs"] + 1
    assert after["replication_full_syncs"] == before["replication_full_syncs"] + 1, (before, after)
    assert "damaged record from the primary" not in r.log()  # nothing of it reached the replica
    holds_every_key(r, ks)
