"""Keyed hashing (issue 27): every filter hashes its keys with a 64-bit seed kept in its
snapshot and its journal records; new filters take the data dir's secret (SEED, made at
first start) unless CREATE says seed=<n>; files of the unseeded format load with seed 0
and answer as before; set operations need one seed."""
import json
import shutil
import stat
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "v3"


def keys(prefix, n):
    return ["%s%d" % (prefix, i) for i in range(n)]


def test_secret_made_once_and_kept(daemon_factory):
    d = daemon_factory(pin_seed=False)
    seed_file = Path(d.data_dir) / "SEED"
    secret = seed_file.read_text()
    assert len(secret) == 17 and secret.endswith("\n"), secret
    int(secret, 16)
    assert stat.S_IMODE(seed_file.stat().st_mode) == 0o600
    c = d.client()
    assert c.cmd("CREATE f capacity=10000") == "CREATED"
    c.add("f", keys("k", 2000))
    c.close()
    d.restart()
    assert seed_file.read_text() == secret
    c = d.client()
    assert all(c.check("f", keys("k", 2000)))
    # A second filter of the same daemon combines with the first.
    assert c.cmd("CREATE g capacity=10000") == "CREATED"
    assert c.cmd("UNION g f") == "OK"
    assert all(c.check("g", keys("k", 2000)))
    c.close()


def test_union_needs_one_seed(client):
    assert client.cmd("CREATE a capacity=1000") == "CREATED"
    assert client.cmd("CREATE b capacity=1000 seed=7") == "CREATED"
    assert client.cmd("CREATE c capacity=1000 seed=7") == "CREATED"
    client.add("b", keys("b", 100))
    reply = client.cmd("UNION a b")
    assert reply.startswith("CLIENT_ERROR") and "different seeds" in reply, reply
    assert client.cmd("INTERSECT b a").startswith("CLIENT_ERROR")
    assert client.cmd("UNION c b") == "OK"
    assert all(client.check("c", keys("b", 100)))
    # The same name with another seed= is another filter; its own seed is not shown.
    reply = client.cmd("CREATE b capacity=1000 seed=8")
    assert reply.startswith("CLIENT_ERROR seed: exists another, asked 8"), reply
    assert client.cmd("CREATE b capacity=1000 seed=7") == "EXISTS"
    assert client.cmd("CREATE d seed=x").startswith("CLIENT_ERROR")
    info = "\n".join(client.block("INFO b"))
    assert "seed" not in info  # never shown: it keys where the keys go


def test_same_seed_on_two_daemons_combines(daemon_factory):
    """seed=<n> makes filters of separate daemons union-compatible: the bits of one copied
    into a file of the other's data dir UNION with the other's filter."""
    one = daemon_factory()
    two = daemon_factory()
    with one.client() as c:
        assert c.cmd("CREATE part capacity=5000 seed=42") == "CREATED"
        c.add("part", keys("one", 1000))
        assert c.cmd("FLUSH part") == "OK"
    with two.client() as c:
        assert c.cmd("CREATE whole capacity=5000 seed=42") == "CREATED"
        c.add("whole", keys("two", 1000))
    two.stop()
    shutil.copy(Path(one.data_dir) / "part.bloom", Path(two.data_dir) / "part.bloom")
    two.start()
    with two.client() as c:
        assert c.cmd("UNION whole part") == "OK"
        assert all(c.check("whole", keys("one", 1000) + keys("two", 1000)))


def test_seeded_create_replays_from_the_journal(daemon_factory):
    d = daemon_factory(["--durability", "always", "--snapshot-interval", "0"])
    with d.client() as c:
        assert c.cmd("CREATE j capacity=10000 seed=99") == "CREATED"
        c.add("j", keys("j", 3000))
    d.kill()  # nothing but the journal holds j
    d.start()
    with d.client() as c:
        assert all(c.check("j", keys("j", 3000)))
        assert c.cmd("CREATE k capacity=10000 seed=99") == "CREATED"
        assert c.cmd("UNION k j") == "OK"  # j kept seed 99 through the replay
        assert all(c.check("k", keys("j", 3000)))


def test_unseeded_files_answer_as_before(daemon_factory, tmp_path):
    """The v3 fixtures (unseeded) load with seed 0: their keys are there, a new default
    filter does not combine with them, and one made with seed=0 does."""
    data = tmp_path / "v3"
    shutil.copytree(FIXTURES / "snapshots", data)
    d = daemon_factory(data_dir=data)
    with d.client() as c:
        expect = json.loads((FIXTURES / "snapshots" / "expect.json").read_text())
        for r in expect["filters"]["grown_exp"]["present"]:
            ks = ["%s%d" % (r["prefix"], i) for i in range(r["from"], r["to"])]
            assert all(c.check("grown_exp", ks))
        assert c.cmd("CREATE fresh capacity=1000") == "CREATED"
        assert c.cmd("UNION fresh empty").startswith("CLIENT_ERROR")
        assert c.cmd("CREATE zero capacity=1000 seed=0") == "CREATED"
        assert c.cmd("UNION zero empty") == "OK"
