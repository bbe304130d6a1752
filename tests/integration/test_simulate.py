"""The page's simulator tab (/simulate, in headless chromium: its grid against the page's
hash computed here) and the server's planner (/api/plan: the bytes it promises are the
bytes INFO reports after the same CREATE, as created and once grown). The browser tests
skip, saying why, only if chromium cannot start."""

import json
import math
import re
import urllib.parse

import pytest

from conftest import REPO
from httputil import http_daemon, request
from test_page import browser, chromium  # noqa: F401 (browser is a fixture)


# ---- the page's hash, as server/http/page/simulate.html computes it ----

def hash32(data):
    """FNV-1a 32, then murmur3's fmix32."""
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


def positions(word, m, k):
    b = word.encode()
    h1, h2 = hash32(b), hash32(b + b"#") | 1
    return [(h1 + i * h2) % m for i in range(k)]


def bits_of(words, m, k):
    return {p for w in words for p in positions(w, m, k)}


def dom_of(port, query):
    r = chromium("--dump-dom", "http://127.0.0.1:%d/simulate?%s" % (port, query))
    cells = re.findall(r'<span class="cell[^"]*" data-index="(\d+)" data-bit="([01])"', r.stdout)
    checks = dict(re.findall(r'<li class="check" data-word="([^"]*)" data-result="([a-z-]+)"',
                             r.stdout))
    return r.stdout, cells, checks


def test_grid_lights_the_added_words_bits(daemon_factory, browser):  # noqa: F811
    _, port = http_daemon(daemon_factory)
    page, cells, checks = dom_of(port, "m=64&k=3&add=apple,banana&check=cherry")
    assert len(cells) == 64, page[:2000]
    want = bits_of(["apple", "banana"], 64, 3)
    lit = {int(i) for i, bit in cells if bit == "1"}
    assert lit == want, (sorted(lit), sorted(want))
    assert page.count('data-bit="1"') == len(want)
    cherry = positions("cherry", 64, 3)
    expect = "false-positive" if set(cherry) <= want else "absent"
    assert checks == {"cherry": expect}, checks
    assert ('data-word="apple" data-positions="%s"' % ",".join(map(str, positions("apple", 64, 3)))
            in page)
    # The three rates: predicted (1 - e^(-kn/m))^k for n = 2 words.
    predicted = (1 - math.exp(-3 * 2 / 64)) ** 3
    m = re.search(r'id="fpr-predicted" data-value="([^"]+)"', page)
    assert m and abs(float(m.group(1)) - predicted) < 1e-12, page[:3000]
    shot = REPO / "build" / "simulate.png"
    r = chromium("--screenshot=%s" % shot, "--window-size=1280,1000",
                 "http://127.0.0.1:%d/simulate?m=64&k=3&add=apple,banana&check=cherry" % port)
    assert shot.exists() and shot.stat().st_size > 10000, r.stderr[-500:]


def test_a_false_positive_is_shown_as_one(daemon_factory, browser):  # noqa: F811
    _, port = http_daemon(daemon_factory)
    m, k = 32, 2
    added = ["w%d" % i for i in range(8)]
    lit = bits_of(added, m, k)
    fp = next("x%d" % i for i in range(100000)
              if set(positions("x%d" % i, m, k)) <= lit)
    absent = next("y%d" % i for i in range(100000)
                  if not set(positions("y%d" % i, m, k)) <= lit)
    q = urllib.parse.urlencode({"m": m, "k": k, "add": ",".join(added),
                                "check": ",".join([fp, "w3", absent])})
    page, cells, checks = dom_of(port, q)
    assert checks == {fp: "false-positive", "w3": "present", absent: "absent"}, checks
    assert "FALSE POSITIVE" in page
    assert "(1 of 2)" in page  # measured over the words checked that were never added
    zero = next(p for p in positions(absent, m, k) if p not in lit)
    assert "definitely absent: bit %d is 0" % zero in page


def test_capacity_and_error_decide_m_and_k(daemon_factory, browser):  # noqa: F811
    _, port = http_daemon(daemon_factory)
    page, cells, _ = dom_of(port, "capacity=20&error=0.1&add=a,b,c")
    m = math.ceil(-20 * math.log(0.1) / math.log(2) ** 2)
    k = round(m / 20 * math.log(2))
    assert (m, k) == (96, 3)
    assert len(cells) == m and "m = ⌈−n·ln p / (ln 2)²⌉ = 96, k = round(m/n · ln 2) = 3" in page
    assert {int(i) for i, b in cells if b == "1"} == bits_of(["a", "b", "c"], m, k)
    # The planner answered the sizing panel (its first figure is CREATE's bytes).
    assert re.search(r'data-plan-bytes="\d+"', page), page[-3000:]


# ---- /api/plan against CREATE and INFO ----

PLANS = [
    "capacity=1000000&error=0.01",
    "capacity=1e6&error=0.001&growth=linear",
    "capacity=5000&error=0.05&scale=4&ratio=0.5",
    "window=1h&capacity=100000&generations=4",
    "window=90s&capacity=3000&error=0.001",
    "kind=expandable&capacity=1000000&error=0.01",
    "capacity=20000&error=0.01&growth=none",
]


def test_plan_bytes_are_what_create_then_reports(daemon_factory):
    d, port = http_daemon(daemon_factory)
    with d.client() as c:
        for i, q in enumerate(PLANS):
            st, _, body = request(port, "/api/plan?" + q)
            assert st == 200, body
            plan = json.loads(body)
            opts = " ".join(q.split("&"))
            assert c.cmd("CREATE p%d %s" % (i, opts)) == "CREATED"
            info = c.stats("INFO p%d" % i)
            assert plan["plan"]["bytes"] == int(info["bytes"]), (q, plan["plan"], info)
            assert plan["plan"]["capacity"] == int(info["capacity"]), (q, info)
            kinds = {k["kind"]: k for k in plan["kinds"]}
            assert set(kinds) == {"blocked", "window", "expandable"}
            assert kinds[plan["plan"]["kind"]] == plan["plan"]


def test_plan_of_grown_filters_matches_the_filter_grown(daemon_factory):
    d, port = http_daemon(daemon_factory)
    st, _, body = request(port, "/api/plan?capacity=1000&error=0.01")
    grown = {g["factor"]: g for g in json.loads(body)["plan"]["grown"]}
    with d.client() as c:
        assert c.cmd("CREATE g capacity=1000 error=0.01") == "CREATED"
        done = 0
        for factor in (1, 10, 100):
            keys = ["k%d" % i for i in range(done, 1000 * factor)]
            c.add("g", keys)
            done = 1000 * factor
            info = c.stats("INFO g")
            # Each stage takes its capacity before the next is made: as planned.
            assert int(info["stages"]) == grown[factor]["stages"], (factor, info, grown)
            assert int(info["bytes"]) == grown[factor]["bytes"], (factor, info, grown)


def test_plan_refuses_what_create_refuses(daemon_factory):
    _, port = http_daemon(daemon_factory)
    for q, why in [("cap=1", "unknown option (valid: capacity error growth"),
                   ("capacity=0", "capacity must be in 1..2^40"),
                   ("kind=nope", "unknown filter kind 'nope' (kinds: blocked window expandable)"),
                   ("capacity=%zz", "bad %-escape"),
                   ("capacity=", "needs a value"),
                   ("growth=none&window=1h", "growth=none is for the blocked kind"),
                   ("growth=none&kind=expandable", "growth=none is for the blocked kind")]:
        st, _, body = request(port, "/api/plan?" + q)
        assert st == 400 and why in json.loads(body)["error"], (q, body)
    # An expandable filter out of its kind's range: the same words as CREATE's refusal.
    st, _, body = request(port, "/api/plan?capacity=1000&error=0.00001")
    kinds = {k["kind"]: k for k in json.loads(body)["kinds"]}
    assert st == 200 and kinds["expandable"]["fits"] is False, body
    assert kinds["expandable"]["refused"] == ("an expandable filter takes error 0.0001 to 0.5 "
                                              "and capacity up to 1099511627776"), body
    # Past max_memory: blocked says it does not fit; expandable is not even built.
    st, _, body = request(port, "/api/plan?capacity=1099511627776")
    kinds = {k["kind"]: k for k in json.loads(body)["kinds"]}
    assert st == 200 and kinds["blocked"]["fits"] is False
    assert kinds["expandable"]["bytes"] is None and "max_memory" in kinds["expandable"]["refused"]
