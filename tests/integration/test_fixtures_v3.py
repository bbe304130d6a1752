"""Files written by earlier releases load in the daemon under test (BLOOMD_BIN).

tests/fixtures/v3/{snapshots,journal,killed}/ are data directories written by bloomd
0.1.0 at commit 37718af (tests/fixtures/v3/README.md; make_fixtures.py writes them). Each
is copied into a temporary data dir, the daemon starts on it, and everything its
expect.json lists is checked: exactly the filters listed exist (and the dropped ones do
not), every key listed as present reads 1 (multi-key CHECK), keys that semantics say are
gone mostly read 0, and the INFO figures match. Then the daemon stops (SIGTERM rewrites
what it loaded in its own format) and starts again, and the same checks hold. The v2
snapshots of tests/fixtures/v2/ (bloomd 0.1.0's first format) get the same treatment.
"""

import json
import shutil
import time

import pytest

from conftest import REPO

V3 = REPO / "tests" / "fixtures" / "v3"
V2 = REPO / "tests" / "fixtures" / "v2"
SET_ASIDE = (".corrupt-", ".unsupported-", ".toobig-")


def keys(spec):
    return ["%s%d" % (spec["prefix"], i) for i in range(spec["from"], spec["to"])]


def load_expect(name):
    return json.loads((V3 / name / "expect.json").read_text())


def copy_fixture(src, data):
    shutil.copytree(src, data, ignore=shutil.ignore_patterns("expect.json"))
    return data


def problems(c, name, e, info, now):
    """What filter name gets wrong of expectations e (present, mostly_absent, info,
    timed: sections that apply only before until_ms / from from_ms on)."""
    out = []
    for spec in e.get("present", []):
        got = c.check(name, keys(spec), chunk=1000)
        if not all(got):
            missing = [k for k, ok in zip(keys(spec), got) if not ok]
            out.append("%s: %d keys absent, e.g. %s" % (name, len(missing), missing[:5]))
    for spec in e.get("mostly_absent", []):
        n = sum(c.check(name, keys(spec), chunk=1000))
        if n > spec["max_present"]:
            out.append("%s: %d of %s%d..%d present (at most %d expected)"
                       % (name, n, spec["prefix"], spec["from"], spec["to"] - 1,
                          spec["max_present"]))
    for field, want in e.get("info", {}).items():
        if info.get(field) != want:
            out.append("%s: INFO %s %r, expected %r" % (name, field, info.get(field), want))
    for t in e.get("timed", []):
        if t.get("until_ms", now + 1) > now >= t.get("from_ms", 0):
            out += problems(c, name, {k: t[k] for k in ("present", "info") if k in t}, info,
                            now)
    return out


def check_all(c, expect, section=None):
    """Problems of every filter of expect; with section, only of that sub-section."""
    out = []
    names = c.names()
    if section is None and sorted(names) != sorted(expect["filters"]):
        out.append("filters %s, expected %s" % (sorted(names), sorted(expect["filters"])))
    for name in expect.get("absent_filters", []):
        if c.block("INFO %s" % name) != ["NOT_FOUND"]:
            out.append("%s: exists, but was dropped" % name)
    now = int(time.time() * 1000)
    for name, e in expect["filters"].items():
        if section is not None:
            e = e.get(section)
            if e is None:
                continue
        if name not in names:
            out.append("%s: missing" % name)
            continue
        out += problems(c, name, e, c.stats("INFO %s" % name), now)
    return out


def set_aside(data):
    return sorted(str(p.relative_to(data)) for p in data.rglob("*")
                  if any(m in p.name for m in SET_ASIDE))


def errors_in(log):
    return [line for line in log.splitlines() if " ERROR " in line]


@pytest.mark.parametrize("fixture", ["snapshots", "journal", "killed"])
def test_v3_fixture_loads(daemon_factory, tmp_path, fixture):
    expect = load_expect(fixture)
    data = copy_fixture(V3 / fixture, tmp_path / "fixture")
    t0 = time.monotonic()
    d = daemon_factory(data_dir=data, args=["--snapshot-interval", "0"])
    with d.client(30) as c:
        bad = check_all(c, expect)
    assert not bad, "%s as loaded:\n%s" % (fixture, "\n".join(bad))
    assert not set_aside(data), set_aside(data)
    assert not errors_in(d.log()), d.log()
    # Saved again by the daemon under test, it loads the same.
    d.restart()
    with d.client(30) as c:
        bad = check_all(c, expect)
    assert not bad, "%s after a SIGTERM and a restart:\n%s" % (fixture, "\n".join(bad))
    assert not set_aside(data), set_aside(data)
    print("%s: %d filters checked twice in %.1f s" % (fixture, len(expect["filters"]),
                                                      time.monotonic() - t0))


def test_v3_journal_union_into_missing_expandable_dst(daemon_factory, tmp_path):
    """The state exp_u had live: its fingerprints once, the keys deleted after the UNION
    gone (all but a few false positives)."""
    expect = load_expect("journal")
    assert any("replay_bug" in e for e in expect["filters"].values())
    data = copy_fixture(V3 / "journal", tmp_path / "fixture")
    d = daemon_factory(data_dir=data, args=["--snapshot-interval", "0"])
    with d.client(30) as c:
        bad = check_all(c, expect, section="replay_bug")
    assert not bad, "\n".join(bad)


def test_v3_fixtures_are_small_and_named():
    """The fixtures stay small, and say who wrote them."""
    total = sum(p.stat().st_size for p in V3.rglob("*") if p.is_file())
    assert total < 3 << 20, total
    for name in ("snapshots", "journal", "killed"):
        written = load_expect(name)["written_by"]
        assert len(written["commit"]) == 40 and written["version"].startswith("bloomd "), written


V2_FILES = ("v2plain.bloom", "v2grown.bloom", "v2empty.bloom")


def check_v2(c):
    """What bloomd 0.1.0 put in the v2 files (tests/unit/server/test_recover.c)."""
    assert sorted(c.names()) == ["v2empty", "v2grown", "v2plain"]
    plain = ["key%d" % i for i in range(500)]
    assert all(c.check("v2plain", plain))
    assert sum(c.check("v2plain", ["other%d" % i for i in range(500)])) < 25  # 1%
    assert all(c.check("v2grown", ["g%d" % i for i in range(400)]))
    assert sum(c.check("v2grown", ["x%d" % i for i in range(400)])) < 10  # 0.1%
    assert not any(c.check("v2empty", plain))  # no bit is set: no false positive either
    grown = c.stats("INFO v2grown")
    assert grown["capacity"] == "100" and grown["growth"] == "linear", grown
    assert int(grown["stages"]) > 1, grown
    assert c.stats("INFO v2empty")["items"] == "0"
    assert c.stats("INFO v2plain")["items"] == "500"


def test_v2_fixtures_load_and_are_rewritten(daemon_factory, tmp_path):
    data = tmp_path / "v2data"
    data.mkdir()
    for name in V2_FILES:
        shutil.copy(V2 / name, data / name)
        assert (data / name).read_bytes()[:8] == b"BLOOMSBF"
    d = daemon_factory(data_dir=data, args=["--snapshot-interval", "0"])
    with d.client(30) as c:
        check_v2(c)
    assert not set_aside(data) and not errors_in(d.log()), d.log()
    d.restart()  # the final snapshot writes them in the current format
    for name in V2_FILES:
        assert (data / name).read_bytes()[:8] != b"BLOOMSBF", name
    with d.client(30) as c:
        check_v2(c)
    assert not set_aside(data), set_aside(data)
