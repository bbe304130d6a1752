"""Replay equals live: a script of commands covering every journal record type (CREATE of
each kind, ADD, CHECKADD, DELETE, CLEAR, DROP and CREATE again, UNION and INTERSECT into
existing and missing destinations, windowed adds with their clock records) runs under
`--durability always` with no snapshot timer. Then every filter's answers to CHECK for
every key the script used, and for keys it never used, and its INFO are recorded; the
daemon is stopped (kill -9: replay of the journal alone; FLUSH halfway and kill -9:
snapshots plus the journal after them; SIGTERM: the final snapshot) and started again on
the same data dir, and must give exactly the same answers, false positives included.
A last test cuts the journal's final record off and checks the comparison sees it, so
this one can fail. Every wait is bounded."""

import time

import pytest

from conftest import SANITIZER_MARKS, Daemon

ARGS = ["--durability", "always", "--snapshot-interval", "0"]
PROBES = ["never%d" % i for i in range(2000)]  # keys no command ever names

# INFO fields that follow the clock or the process, not the filter's content.
VOLATILE = {"snapshot_time"}


def keys(prefix, start, stop):
    return ["%s%d" % (prefix, i) for i in range(start, stop)]


def expect(c, request, prefix):
    reply = c.cmd(request)
    assert reply.startswith(prefix), (request[:100], reply)
    return reply


def run_script(c, flush_at_half=False):
    """The commands; returns every key they named. The filters that exist at the end
    hold a mix of all record types; `gone` is dropped for good."""
    used = []

    def add(name, ks, verb="ADD"):
        used.extend(ks)
        for i in range(0, len(ks), 400):
            part = ks[i:i + 400]
            reply = c.cmd("%s %s %s" % (verb, name, " ".join(part)))
            if verb == "ADD":
                assert reply.startswith("ADDED "), (name, reply)
            else:
                assert len(reply.split(" ")) == len(part), (name, reply[:100])
                assert set(reply.split(" ")) <= {"0", "1"}, (name, reply[:100])

    def delete(name, ks):
        used.extend(ks)
        assert c.cmd("DELETE %s %s" % (name, " ".join(ks))) == "REMOVED %d" % len(ks)

    # Blocked filters, grown past their capacity, exponential and linear.
    expect(c, "CREATE b_exp capacity=500 error=0.01", "CREATED")
    add("b_exp", keys("b", 0, 2000))
    add("b_exp", keys("b", 1500, 2500), "CHECKADD")  # half present, half new
    expect(c, "CREATE b_lin capacity=500 error=0.02 growth=linear scale=1.5 ratio=0.7",
           "CREATED")
    add("b_lin", keys("l", 0, 1800))
    # Expandable: grown, some keys deleted, some of those added again. seed=0 (a fixed hash):
    # the exact REMOVED count holds only where no two deleted keys share a fingerprint.
    expect(c, "CREATE e kind=expandable capacity=500 error=0.01 seed=0", "CREATED")
    add("e", keys("e", 0, 3000))
    delete("e", keys("e", 0, 300))
    add("e", keys("e", 200, 400), "CHECKADD")
    # Windowed (a window no test outlives): adds with the window's clock journaled.
    expect(c, "CREATE w window=366d generations=3 capacity=500 error=0.01", "CREATED")
    add("w", keys("w", 0, 300))
    time.sleep(0.06)  # past the 50 ms between clock records
    add("w", keys("w", 200, 700), "CHECKADD")
    # CLEAR, then new keys.
    expect(c, "CREATE c capacity=1000", "CREATED")
    add("c", keys("c", 0, 500))
    assert c.cmd("CLEAR c") == "OK"
    add("c", keys("c", 400, 600))
    if flush_at_half:
        assert c.cmd("FLUSH") == "OK"
    # DROP, then CREATE again with other parameters (and once with another kind).
    expect(c, "CREATE d capacity=1000", "CREATED")
    add("d", keys("d", 0, 100))
    assert c.cmd("DROP d") == "DELETED"
    expect(c, "CREATE d capacity=2000 error=0.001", "CREATED")
    add("d", keys("d", 50, 150))
    expect(c, "CREATE k capacity=300", "CREATED")
    add("k", keys("k", 0, 50))
    assert c.cmd("DROP k") == "DELETED"
    expect(c, "CREATE k kind=expandable capacity=300 error=0.01 seed=0", "CREATED")
    add("k", keys("k", 25, 75))
    expect(c, "CREATE gone capacity=100", "CREATED")
    add("gone", keys("g", 0, 10))
    assert c.cmd("DROP gone") == "DELETED"
    # UNION and INTERSECT of blocked filters, into existing and missing destinations.
    for name, prefix in (("s1", "s1_"), ("s2", "s2_"), ("s3", "s3_"), ("ia", "ia"),
                         ("ib", "ib"), ("idst", "id")):
        expect(c, "CREATE %s capacity=1000 error=0.01" % name, "CREATED")
        add(name, keys(prefix, 0, 300))
    for name in ("ia", "ib", "idst"):
        add(name, keys("common", 0, 150))
    assert c.cmd("UNION s3 s1 s2") == "OK"
    assert c.cmd("UNION unew s1 s2 s1") == "OK"
    add("s1", keys("late", 0, 100))  # after the unions
    assert c.cmd("INTERSECT idst ia ib") == "OK"
    assert c.cmd("INTERSECT inew ia ib") == "OK"
    add("ia", keys("late", 100, 200))
    # UNION of expandable filters, into an existing and a missing destination, and a
    # DELETE from each result.
    expect(c, "CREATE e2 kind=expandable capacity=500 error=0.01 seed=0", "CREATED")
    add("e2", keys("f", 0, 400))
    assert c.cmd("UNION e2 e") == "OK"
    assert c.cmd("UNION enew e") == "OK"
    delete("e2", keys("e", 1000, 1100))
    delete("enew", keys("e", 1000, 1100))
    add("enew", keys("n", 0, 100))
    # A background INTERSECT (1 MiB of bits or more) with an ADD to its dst while it runs
    # (pipelined behind it): the ADD is journaled as it comes and again, as a plain ADD
    # record, after the INTERSECT record.
    for name in ("bigd", "bigs"):
        expect(c, "CREATE %s capacity=500000 error=0.01" % name, "CREATED")
        add(name, keys("bc", 0, 200))
    add("bigd", keys("bd", 0, 200))
    late = keys("bl", 0, 100)
    used.extend(late)
    c.send("INTERSECT bigd bigs\r\nADD bigd %s\r\n" % " ".join(late))
    assert (c.line(), c.line()) == ("OK", "ADDED 100")
    # The last record: new keys (the cut test drops it).
    add("b_lin", keys("tail", 0, 60))
    return sorted(set(used))


def snapshot_state(c, universe):
    """{filter: (INFO without volatile fields, CHECK answer for every key)}."""
    state = {}
    for name in sorted(c.names()):
        info = c.stats("INFO %s" % name)
        info = {k: v for k, v in info.items() if k not in VOLATILE}
        state[name] = (info, c.check(name, universe, chunk=1000))
    return state


def differences(universe, live, again):
    """Human-readable differences between two states; empty if equal."""
    out = []
    for name in sorted(set(live) | set(again)):
        if name not in again:
            out.append("%s: missing after restart" % name)
            continue
        if name not in live:
            out.append("%s: exists only after restart" % name)
            continue
        (i1, b1), (i2, b2) = live[name], again[name]
        for field in sorted(set(i1) | set(i2)):
            if i1.get(field) != i2.get(field):
                out.append("%s: INFO %s live %r, after restart %r"
                           % (name, field, i1.get(field), i2.get(field)))
        flipped = [k for k, x, y in zip(universe, b1, b2) if x != y]
        if flipped:
            lost = [k for k, x, y in zip(universe, b1, b2) if x and not y]
            out.append("%s: %d CHECK answers differ (%d present live, absent after), e.g. %s"
                       % (name, len(flipped), len(lost), flipped[:5]))
    return out


def live_then_restart(d, how, tamper=None):
    """Runs the script on d; returns (universe, live state, state after the restart)."""
    d.start()
    with d.client(30) as c:
        universe = run_script(c, flush_at_half=how == "flush_then_kill9") + PROBES
        live = snapshot_state(c, universe)
    if how == "sigterm":
        d.stop()
    else:
        d.kill()
    if tamper is not None:
        tamper(d.data_dir)
    t0 = time.monotonic()
    d.start()
    with d.client(30) as c:
        again = snapshot_state(c, universe)
    took = time.monotonic() - t0
    log = d.log()
    d.stop()
    return universe, live, again, took, log


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """runs(how): the script run once per way of stopping (cached for the module)."""
    cache, made = {}, []

    def get(how):
        if how not in cache:
            base = tmp_path_factory.mktemp(how)
            d = Daemon(base / "data", ARGS, log_path=base / "bloomd.log")
            made.append(d)
            cache[how] = live_then_restart(d, how, cut_last_record if how == "cut" else None)
        return cache[how]

    yield get
    errors = []
    for d in made:
        try:
            d.stop()
        except AssertionError as e:
            errors.append(str(e))
        log = d.log_path.read_text(errors="replace") if d.log_path.exists() else ""
        if any(m in log for m in SANITIZER_MARKS):
            errors.append("sanitizer report in %s:\n%s" % (d.log_path, log[-5000:]))
    assert not errors, "\n".join(errors)


def check_live_state(live):
    """The script did what it says (so an equal state is not a trivial one)."""
    assert "gone" not in live
    for name in ("b_exp", "b_lin", "e", "w", "c", "d", "k", "s1", "s2", "s3", "unew", "ia",
                 "ib", "idst", "inew", "e2", "enew", "bigd", "bigs"):
        assert name in live, name
        assert any(live[name][1]), name
    assert int(live["b_exp"][0]["stages"]) > 1 and int(live["b_lin"][0]["stages"]) > 1
    assert live["d"][0]["capacity"] == "2000" and "fingerprint_bits" in live["k"][0]


def only(state, names, keep=True):
    return {n: v for n, v in state.items() if (n in names) == keep}


# UNION into a missing expandable destination has a test of its own (below): 37718af
# replayed it with the first source merged twice; the others leave that filter out.
UNION_NEW_EXPANDABLE = {"enew"}


@pytest.mark.parametrize("how", ["kill9", "flush_then_kill9", "sigterm"])
def test_restart_answers_as_live(runs, how):
    universe, live, again, took, _ = runs(how)
    check_live_state(live)
    diff = differences(universe, only(live, UNION_NEW_EXPANDABLE, False),
                       only(again, UNION_NEW_EXPANDABLE, False))
    assert not diff, "after %s the daemon answers otherwise:\n%s" % (how, "\n".join(diff))
    print("%s: %d filters x %d keys the same after restart (%.1f s)"
          % (how, len(live), len(universe), took))


@pytest.mark.parametrize("how", ["kill9", "flush_then_kill9", "sigterm"])
def test_union_into_missing_expandable_dst_replays_as_live(runs, how):
    """UNION enew e (enew missing, e expandable), then DELETE e1000..e1099 from enew."""
    universe, live, again, _, _ = runs(how)
    diff = differences(universe, only(live, UNION_NEW_EXPANDABLE),
                       only(again, UNION_NEW_EXPANDABLE))
    assert not diff, "after %s:\n%s" % (how, "\n".join(diff))


def cut_last_record(data_dir):
    """Cuts the newest journal segment inside its last record (a torn write)."""
    segs = sorted((data_dir / "journal").glob("*.log"))
    assert segs, "no journal segment"
    seg = segs[-1]
    data = seg.read_bytes()
    end = len(data.rstrip(b"\0"))
    assert end > 64, (seg, end)
    with open(seg, "r+b") as f:
        f.truncate(end - 40)


def test_comparison_catches_a_lost_record(runs):
    """Without the last record (ADD b_lin tail0..tail59) the restarted daemon must differ,
    and only in b_lin: the comparison above would catch a replay that skips records."""
    universe, live, again, _, log = runs("cut")
    diff = differences(universe, only(live, UNION_NEW_EXPANDABLE, False),
                       only(again, UNION_NEW_EXPANDABLE, False))
    assert diff, "a lost record went unnoticed"
    assert all(line.startswith("b_lin:") for line in diff), diff
    assert any("CHECK answers differ" in line for line in diff), diff
    assert "ended mid-record" in log, log


# ---- set operations whose sources change after them ----

K = ["k%d" % i for i in range(300)]
LATE = ["late%d" % i for i in range(300)]

def segments(data):
    return sorted(p.name for p in (data / "journal").glob("*.log"))


def onto_new_segment(c, data, probe, timeout=20.0):
    """Makes commits (probe: a journaled write that changes nothing) until the journal
    moves to a new segment, as it does once its spare is ready under always; a later
    snapshot round then deletes the old one. False if it did not within timeout."""
    before = len(segments(data))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert c.cmd(probe) == "OK"
        if len(segments(data)) > before:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("case", ["union_then_drop_src", "union_then_clear_flush_src",
                                  "union_then_delete_flush_src", "union_then_add_flush_src",
                                  "intersect_then_clear_flush_src"])
def test_setop_replay_with_source_changed_later(daemon_factory, case):
    d = daemon_factory(args=ARGS)
    op = "INTERSECT" if case.startswith("intersect") else "UNION"
    kind = "kind=expandable " if "delete" in case else ""
    with d.client(30) as c:
        for name in ("src", "dst"):
            # seed=0: a fixed hash, so the exact DELETE counts below hold (keys sharing a
            # fingerprint were stored once).
            assert c.cmd("CREATE %s %scapacity=1000 error=0.01 seed=0" % (name, kind)) == "CREATED"
        c.add("src", K)
        if op == "INTERSECT":
            c.add("dst", K[:150] + LATE[:150])
        if case.endswith("drop_src"):
            assert c.cmd("CREATE probe capacity=10") == "CREATED"
            if not onto_new_segment(c, d.data_dir, "CLEAR probe"):
                pytest.skip("the journal made no spare segment (little free disk?)")
        assert c.cmd("FLUSH") == "OK"  # all snapshotted: the older segments are deleted
        assert c.cmd("%s dst src" % op) == "OK"
        if "drop" in case:
            assert c.cmd("DROP src") == "DELETED"
        elif "clear" in case:
            assert c.cmd("CLEAR src") == "OK"
        elif "delete" in case:
            assert c.cmd("DELETE src %s" % " ".join(K[:100])) == "REMOVED 100"
        else:
            c.add("src", LATE)
        if case.endswith("flush_src"):
            assert c.cmd("FLUSH src") == "OK"  # src's snapshot is newer than the record
        live = (c.check("dst", K + LATE), c.stats("INFO dst")["items"])
    d.kill()
    d.start()
    with d.client(30) as c:
        again = (c.check("dst", K + LATE), c.stats("INFO dst")["items"])
    lost = [k for k, x, y in zip(K + LATE, live[0], again[0]) if x and not y]
    gained = [k for k, x, y in zip(K + LATE, live[0], again[0]) if y and not x]
    assert (lost, gained, again[1]) == ([], [], live[1]), (
        "%s: %d keys dst had live are absent after replay (e.g. %s), %d appeared (e.g. %s); "
        "items live %s, after %s" % (case, len(lost), lost[:3], len(gained), gained[:3],
                                     live[1], again[1]))
