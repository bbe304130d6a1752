"""The live page in a real browser: Debian's chromium, headless, loads / from a running
daemon with three filters (one grown, one linear, one plain) and the test reads the DOM
after the page's scripts ran: every filter's name and stage count, and with ?key= the
per-stage present/absent answers, which must match /api/.../key. Saves build/page.png.
Skips, saying why, only if chromium cannot start."""

import html.parser
import json
import re
import shutil
import subprocess
import urllib.parse

import pytest

from conftest import REPO
from httputil import http_daemon, request

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--virtual-time-budget=8000", "--hide-scrollbars"]


def chromium(*args, timeout=120):
    return subprocess.run([CHROMIUM] + FLAGS + list(args), capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (scripts/deps.sh test installs it)")
    try:
        r = chromium("--dump-dom", "data:text/html,<p id=x>ok</p>", timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip("chromium cannot start: %s" % e)
    if 'id="x"' not in r.stdout:
        pytest.skip("chromium cannot start: %s" % r.stderr.strip()[-300:])
    return CHROMIUM


class Dom(html.parser.HTMLParser):
    """Collects the filter sections and the probe rows inside each."""

    def __init__(self):
        super().__init__()
        self.filters = {}
        self.current = None
        self.in_name = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = a.get("class", "")
        if tag == "section" and "filter" in cls.split():
            self.current = {"stages": int(a["data-stages"]), "name_text": "", "probes": {},
                            "verdict": None}
            self.filters[a["data-name"]] = self.current
        elif self.current is not None and tag == "span" and cls == "name":
            self.in_name = True
        elif self.current is not None and tag == "li" and "probe" in cls.split():
            if "data-stage" in a:
                self.current["probes"][int(a["data-stage"])] = a["data-answer"]
        elif self.current is not None and "data-verdict" in a:
            self.current["verdict"] = a["data-verdict"]

    def handle_endtag(self, tag):
        if tag == "span":
            self.in_name = False

    def handle_data(self, data):
        if self.in_name:
            self.current["name_text"] += data


def setup_filters(d, port):
    with d.client() as c:
        assert c.cmd("CREATE grown capacity=1000") == "CREATED"
        assert c.cmd("CREATE linear capacity=1000 growth=linear scale=1") == "CREATED"
        assert c.cmd("CREATE plain capacity=100000") == "CREATED"
        assert c.cmd("CREATE win window=1h generations=4 capacity=3000") == "CREATED"
        c.add("grown", ["k%d" % i for i in range(6000)])
        c.add("linear", ["k%d" % i for i in range(3500)])
        c.add("plain", ["k%d" % i for i in range(2000)])
        c.add("win", ["k%d" % i for i in range(2500)])
        out = {n: int(c.stats("INFO " + n)["stages"]) for n in ("grown", "linear", "plain")}
        # A windowed filter's parts are the stages of its live generations.
        st, _, body = request(port, "/api/filters/win")
        out["win"] = len(json.loads(body)["parts"])
        return out


def test_page_renders_filters(daemon_factory, browser):
    d, port = http_daemon(daemon_factory)
    stages = setup_filters(d, port)
    assert stages["grown"] > 2 and stages["linear"] > 2 and stages["plain"] == 1
    assert stages["win"] >= 1
    url = "http://127.0.0.1:%d/" % port
    r = chromium("--dump-dom", url)
    dom = Dom()
    dom.feed(r.stdout)
    assert set(dom.filters) == {"grown", "linear", "plain", "win"}, r.stdout[:2000]
    assert "generation 0" in r.stdout, "the windowed filter's generations are not shown"
    for name, n in stages.items():
        assert dom.filters[name]["name_text"] == name
        assert dom.filters[name]["stages"] == n
    assert "never says" in r.stdout and "absent" in r.stdout
    # One capacity: a windowed filter shows the one it was created with (per window).
    caps = dict(re.findall(r'data-name="(\w+)".*?data-capacity="(\d+)"', r.stdout, re.S))
    assert caps["win"] == "3000" and caps["plain"] == "100000", caps
    assert "capacity per window" in r.stdout


def test_page_explains_a_key(daemon_factory, browser):
    d, port = http_daemon(daemon_factory)
    stages = setup_filters(d, port)
    for key in ("k42", "not-there"):
        url = "http://127.0.0.1:%d/?key=%s" % (port, urllib.parse.quote(key))
        r = chromium("--dump-dom", url)
        dom = Dom()
        dom.feed(r.stdout)
        for name, n in stages.items():
            st, _, body = request(port, "/api/filters/%s/key?k=%s" % (name, key))
            want = json.loads(body)
            probes = dom.filters[name]["probes"]
            assert len(probes) == n, (name, probes)
            for p in want["parts"]:
                assert probes[p["part"]] == ("present" if p["present"] else "absent"), (name, p)
            verdict = "present" if want["present"] else "absent"
            assert dom.filters[name]["verdict"] == verdict
            if key == "k42":
                assert verdict == "present"  # held keys are never absent
    shot = REPO / "build" / "page.png"
    shot.parent.mkdir(exist_ok=True)
    r = chromium("--screenshot=%s" % shot, "--window-size=1280,1400",
                 "http://127.0.0.1:%d/?key=k42" % port)
    assert shot.exists() and shot.stat().st_size > 10000, r.stderr[-500:]
