"""The HTTP pages: /metrics parsed by prometheus_client against STATS, the probes through
start-up, serving and shutdown (a shim holds the snapshot files so each phase lasts as
long as the test wants), the JSON API, bad requests, read-only-ness, JSON logs, and
systemd's notifications through a fake NOTIFY_SOCKET."""

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from httputil import free_port, http_daemon, http_port_of, raw, request


def metrics(port):
    status, headers, body = request(port, "/metrics")
    assert status == 200
    assert headers["content-type"].startswith("text/plain; version=0.0.4")
    return {f.name: f for f in text_string_to_metric_families(body.decode())}, body.decode()


def sample(fams, family, **labels):
    for s in fams[family].samples:
        if all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise KeyError((family, labels))


def workload(c):
    assert c.cmd("CREATE small capacity=1000") == "CREATED"
    assert c.cmd("CREATE wide capacity=50000 error=0.001") == "CREATED"
    c.add("small", ["k%d" % i for i in range(5000)])  # grows: several stages
    c.add("wide", ["w%d" % i for i in range(300)])
    assert c.check("wide", ["w1", "nope"])[0]
    assert c.cmd("CHECKADD small k1 fresh1 fresh2").split() == ["1", "0", "0"]
    assert c.cmd("BOGUS").startswith("ERROR")


def test_metrics_match_stats(daemon_factory):
    d, port = http_daemon(daemon_factory)
    with d.client() as c:
        workload(c)
        fams, text = metrics(port)
        st = c.stats()
        info = {n: c.stats("INFO " + n) for n in ("small", "wide")}
    # Every family has HELP and TYPE lines (the parser fills documentation from HELP).
    for name, fam in fams.items():
        wire = name + "_total" if fam.type == "counter" else name
        assert "# TYPE %s %s\n" % (wire, fam.type) in text, name
        assert fam.documentation, name
    types = {
        "bloomd_up": "gauge", "bloomd_ready": "gauge", "bloomd_build_info": "gauge",
        "bloomd_uptime_seconds": "gauge", "bloomd_connected_clients": "gauge",
        "bloomd_connections": "counter", "bloomd_rejected_connections": "counter",
        "bloomd_commands": "counter", "bloomd_keys_added": "counter",
        "bloomd_keys_checked": "counter", "bloomd_memory_used_bytes": "gauge",
        "bloomd_memory_max_bytes": "gauge", "bloomd_filter_bytes": "gauge",
        "bloomd_filter_items": "gauge", "bloomd_filter_stages": "gauge",
        "bloomd_filter_promised_fpr_ratio": "gauge",
        "bloomd_filter_estimated_fpr_ratio": "gauge",
        "bloomd_last_snapshot_timestamp_seconds": "gauge",
        "bloomd_snapshot_duration_seconds": "gauge", "bloomd_snapshot_failures": "counter",
        "process_resident_memory_bytes": "gauge", "process_cpu_seconds": "counter",
        "process_open_fds": "gauge", "process_start_time_seconds": "gauge",
        # Every STATS figure has its own family (server/core/stat.h), none a fallback.
        "bloomd_keys_stored": "counter", "bloomd_keys_present": "counter",
        "bloomd_keys_absent": "counter", "bloomd_journal_records": "counter",
        "bloomd_journal_bytes": "counter", "bloomd_journal_syncs": "counter",
        "bloomd_journal_failures": "counter", "bloomd_journal_sync_max_seconds": "gauge",
        "bloomd_journal_buffered_bytes": "gauge", "bloomd_journal_broken": "gauge",
        "bloomd_journal_durable_position": "gauge", "bloomd_durability_info": "gauge",
        "bloomd_items": "gauge", "bloomd_threads": "gauge",
    }
    for name, typ in types.items():
        assert name in fams, (name, sorted(fams))
        assert fams[name].type == typ, (name, fams[name].type)
    # Counter samples carry the _total suffix on the wire.
    assert "bloomd_connections_total " in text and "bloomd_commands_total{" in text
    assert sample(fams, "bloomd_up") == 1 and sample(fams, "bloomd_ready") == 1
    assert sample(fams, "bloomd_build_info", version=st["version"]) == 1
    # STATS ran after the scrape: it counts one more STATS and its own bytes.
    assert sample(fams, "bloomd_commands", cmd="stats") == int(st["cmd_stats"]) - 1
    for cmd in ("create", "add", "check", "checkadd", "info", "union", "drop"):
        assert sample(fams, "bloomd_commands", cmd=cmd) == int(st["cmd_" + cmd]), cmd
    same = {
        "bloomd_connected_clients": "curr_connections",
        "bloomd_connections": "total_connections",
        "bloomd_rejected_connections": "rejected_connections",
        "bloomd_protocol_errors": "protocol_errors",
        "bloomd_keys_added": "keys_added", "bloomd_keys_checked": "keys_checked",
        "bloomd_filters": "filters", "bloomd_memory_max_bytes": "memory_limit",
        "bloomd_snapshot_failures": "snapshot_failures",
    }
    same.update({
        "bloomd_journal_records": "journal_records", "bloomd_journal_bytes": "journal_bytes",
        "bloomd_journal_failures": "journal_failures", "bloomd_threads": "threads",
    })
    for fam, stat in same.items():
        assert sample(fams, fam) == int(st[stat]), (fam, stat)
    # The scrape's body is counted in the budget while it may still be reused (about 1 s).
    held = int(st["memory_bytes"]) - sample(fams, "bloomd_memory_used_bytes")
    assert 0 <= held <= len(text.encode()) + 1024, (held, len(text))
    assert sample(fams, "bloomd_durability_info", mode=st["durability"]) == 1
    assert not [f for f in fams if f in ("bloomd_pid", "bloomd_time")]  # not figures to chart
    assert "sbf" not in text  # one kind, one name: kind=blocked everywhere
    assert 5000 * 0.9 < sample(fams, "bloomd_keys_added") <= 5000 + 300 + 2  # minus FPs
    assert sample(fams, "bloomd_protocol_errors") == 1
    assert abs(sample(fams, "bloomd_uptime_seconds") - int(st["uptime"])) <= 1
    for name in ("small", "wide"):
        assert sample(fams, "bloomd_filter_items", filter=name) == int(info[name]["items"])
        assert sample(fams, "bloomd_filter_bytes", filter=name) == int(info[name]["bytes"])
        assert sample(fams, "bloomd_filter_stages", filter=name) == int(info[name]["stages"])
        assert sample(fams, "bloomd_filter_promised_fpr_ratio", filter=name) == float(
            info[name]["error"])
        assert sample(fams, "bloomd_filter_info", filter=name, kind="blocked") == 1
        # Per filter: new keys are its items; new + seen is every key written to it.
        assert sample(fams, "bloomd_keys", filter=name, result="new") == int(info[name]["items"])
    new = sum(sample(fams, "bloomd_keys", filter=n, result="new") for n in ("small", "wide"))
    seen = sum(sample(fams, "bloomd_keys", filter=n, result="seen") for n in ("small", "wide"))
    assert new + seen == int(st["keys_stored"]), (new, seen, st["keys_stored"])
    assert fams["bloomd_keys"].type == "counter"
    assert int(info["small"]["stages"]) > 1
    assert sample(fams, "process_resident_memory_bytes") > 1 << 20
    assert sample(fams, "process_open_fds") >= 4
    assert abs(sample(fams, "process_start_time_seconds") - time.time()) < 120
    # The popcount figures come from the job thread: they appear within a sampling period.
    deadline = time.monotonic() + 30
    while True:
        fams, _ = metrics(port)
        est = [s for s in fams["bloomd_filter_estimated_fpr_ratio"].samples]
        if len(est) == 2:
            break
        assert time.monotonic() < deadline, "no estimated_fpr after 30 s"
        time.sleep(0.5)
    for name in ("small", "wide"):
        e = sample(fams, "bloomd_filter_estimated_fpr_ratio", filter=name)
        assert 0 <= e < float(info[name]["error"]), (name, e)
        assert 0 < sample(fams, "bloomd_filter_fill_ratio", filter=name) < 1


def test_api_json(daemon_factory):
    d, port = http_daemon(daemon_factory)
    with d.client() as c:
        workload(c)
        st, _, body = request(port, "/api/filters")
        assert st == 200
        data = json.loads(body)
        assert data["server"]["phase"] == "ready"
        assert [f["name"] for f in data["filters"]] == ["small", "wide"]
        small = data["filters"][0]
        info = c.stats("INFO small")
        assert len(small["parts"]) == int(info["stages"])
        assert sum(p["items"] for p in small["parts"]) == int(info["items"])
        assert sum(p["bytes"] for p in small["parts"]) == int(info["bytes"])
        assert small["kind"] == "blocked"
        # INFO's fields now; their estimates once the job thread counted the bits.
        deadline = time.monotonic() + 30
        while True:
            st, _, body = request(port, "/api/filters/small")
            one = json.loads(body)
            if one["figures_age_s"] is not None:
                break
            assert one["info"]["estimated_items"] is None
            assert time.monotonic() < deadline
            time.sleep(0.5)
        assert one["info"]["capacity"] == 1000 and one["info"]["stages"] == int(info["stages"])
        assert one["info"]["items"] == int(info["items"])
        # The cached estimate is the one INFO counts itself for a small filter.
        assert abs(one["info"]["estimated_items"] - float(info["estimated_items"])) < 1e-6 * int(
            info["items"])
        assert all(p["fill"] is not None and 0 < p["fill"] < 1 for p in one["parts"])
        # A held key is present: some stage has every bit set. The answer matches CHECK.
        for key in ["k1", "k4999", "fresh1", "never-added", 'q"uo\\te', "caf\u00e9"]:
            st, _, body = request(port, "/api/filters/small/key?k=" +
                                  __import__("urllib.parse").parse.quote(key))
            assert st == 200, body
            ans = json.loads(body)
            assert ans["key"] == (key if key.isascii() else key.encode().decode("latin-1"))
            assert len(ans["parts"]) == int(info["stages"])
            for p in ans["parts"]:
                assert p["present"] == all(bit for _, bit in p["bits"])
                assert all(0 <= pos < 512 for pos, _ in p["bits"])
            assert ans["present"] == any(p["present"] for p in ans["parts"])
            if " " not in key:
                assert ans["present"] == c.check("small", [key])[0], key
            if key in ("k1", "k4999", "fresh1"):
                assert ans["present"]
        # '+' is a space in a query: not a key the text protocol could hold.
        assert request(port, "/api/filters/small/key?k=a+b")[0] == 400


def test_kinds_by_their_create_names(daemon_factory):
    """One kind, one name: what CREATE takes is what /metrics, /api and the page show; an
    expandable filter's rate (cheap to know) is there at once, without a count."""
    d, port = http_daemon(daemon_factory)
    with d.client() as c:
        assert c.cmd("CREATE b kind=blocked capacity=1000") == "CREATED"
        assert c.cmd("CREATE w window=1h capacity=1000") == "CREATED"
        assert c.cmd("CREATE x kind=expandable capacity=1000") == "CREATED"
        c.add("x", ["k%d" % i for i in range(500)])
        info = c.stats("INFO x")
        fams, text = metrics(port)
        for name, kind in (("b", "blocked"), ("w", "window"), ("x", "expandable")):
            assert sample(fams, "bloomd_filter_info", filter=name, kind=kind) == 1
            _, _, body = request(port, "/api/filters/" + name)
            assert json.loads(body)["kind"] == kind
        assert "sbf" not in text
        assert sample(fams, "bloomd_filter_estimated_fpr_ratio", filter="x") == float(
            info["estimated_error"])
        _, _, body = request(port, "/api/filters/x")
        one = json.loads(body)
        rate = float(info["estimated_error"])  # JSON carries 9 significant digits
        assert rate > 0 and one["estimated_error"] == pytest.approx(rate, rel=1e-8)
        assert one["info"]["estimated_error"] == pytest.approx(rate, rel=1e-8)


def test_bad_requests(daemon_factory):
    d, port = http_daemon(daemon_factory)
    with d.client() as c:
        assert c.cmd("CREATE f") == "CREATED"
    cases = [
        ("GET", "/api/filters/..x", 400), ("GET", "/api/filters/.hidden", 400),
        ("GET", "/api/filters/a%2Fb", 400), ("GET", "/api/filters/" + "n" * 200, 400),
        ("GET", "/api/filters/nosuch", 404), ("GET", "/api/filters/nosuch/key?k=a", 404),
        ("GET", "/api/filters/f/key", 400), ("GET", "/api/filters/f/key?k=", 400),
        ("GET", "/api/filters/f/key?k=%zz", 400), ("GET", "/api/filters/f/key?k=a%09b", 400),
        ("GET", "/api/filters/f/key?k=a%00", 400), ("GET", "/api/filters/f/key?k=a%0d", 400),
        ("GET", "/api/filters/f/key?k=" + "x" * 1900, 200),
        ("GET", "/api/filters/f/other", 404), ("GET", "/nope", 404),
        ("GET", "/metrics/x", 404), ("GET", "/" + "a" * 3000, 414),
        ("POST", "/api/filters/f", 405), ("PUT", "/metrics", 405),
        ("DELETE", "/api/filters/f", 405), ("OPTIONS", "/", 405),
    ]
    for method, path, want in cases:
        status, headers, body = request(port, path, method)
        assert status == want, (method, path[:60], status, body[:200])
        if path.startswith("/api/") and status not in (200, 405):
            assert "error" in json.loads(body)
    # Longer than the header limit, junk methods and junk bytes: a 4xx or a closed
    # connection, never a crash.
    first = raw(port, b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert first == b"" or first.split()[1].startswith(b"4"), first
    for junk in (b"\x00\x01\x02\r\n\r\n", b"GET\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n"):
        first = raw(port, junk)
        assert first == b"" or first.split()[1].startswith(b"4"), (junk, first)
    # A method token HTTP does not define: libevent 2.1 answers 501 before any callback
    # (RFC 9110 15.6.2: "method not recognized"); the known ones above get our 405.
    assert raw(port, b"FOO / HTTP/1.1\r\n\r\n").split()[1] in (b"501", b"405")
    assert request(port, "/healthz")[0] == 200
    with d.client() as c:
        assert c.cmd("VERSION").startswith("VERSION")


def test_http_only_reads(daemon_factory):
    d, port = http_daemon(daemon_factory)
    with d.client() as c:
        workload(c)
        before = {n: c.stats("INFO " + n)["items"] for n in ("small", "wide")}
        st0 = c.stats()
        for path in ["/", "/metrics", "/api/filters", "/api/filters/small",
                     "/api/filters/small/key?k=brand-new", "/api/filters/wide/key?k=x2"]:
            for method in ("GET", "HEAD", "POST", "DELETE"):
                request(port, path, method)
        after = {n: c.stats("INFO " + n)["items"] for n in ("small", "wide")}
        assert before == after
        assert c.check("small", ["brand-new"]) == [False]
        st = c.stats()
        for cmd in ("cmd_add", "cmd_checkadd", "cmd_clear", "cmd_drop", "cmd_create"):
            assert st[cmd] == st0[cmd], cmd


SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* Holds openat() of gate.bloom / gate.bloom.tmp while the file $GATE exists (<= 120 s). */
static void wait_gate(const char *path)
{
    const char *gate = getenv("GATE");
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (gate == NULL || strncmp(base, "gate.bloom", 10) != 0)
        return;
    for (int i = 0; i < 12000 && access(gate, F_OK) == 0; i++)
        usleep(10000);
}
int openat(int dirfd, const char *path, int flags, ...)
{
    static int (*real)(int, const char *, int, ...);
    if (!real)
        real = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, "openat");
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = va_arg(ap, mode_t);
        va_end(ap);
    }
    wait_gate(path);
    return real(dirfd, path, flags, mode);
}
"""


@pytest.fixture
def gate_shim(tmp_path):
    src = tmp_path / "gate.c"
    so = tmp_path / "gate.so"
    src.write_text(SHIM)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(so), str(src), "-ldl"],
                   check=True)
    return so


def wait_for(fn, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError("timed out waiting for " + what)


def test_probes_through_start_and_stop(daemon_factory, gate_shim, tmp_path):
    # A first run writes gate.bloom.
    hp = free_port()
    d = daemon_factory(args=["--http-port", str(hp)])
    with d.client() as c:
        assert c.cmd("CREATE gate capacity=10000") == "CREATED"
        c.add("gate", ["g%d" % i for i in range(2000)])
    d.stop()
    assert (d.data_dir / "gate.bloom").exists()

    gate = tmp_path / "gate.hold"
    gate.write_text("hold")
    asan = os.environ.get("ASAN_OPTIONS", "")
    d.env = {"LD_PRELOAD": str(gate_shim), "GATE": str(gate),
             "ASAN_OPTIONS": (asan + ":" if asan else "") + "verify_asan_link_order=0"}
    # Start without waiting for the client listener: loading is held at gate.bloom.
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLOOMD_")}
    env.update(d.env)
    d._log_start = d.log_path.stat().st_size
    with open(d.log_path, "ab") as log:
        d.proc = subprocess.Popen(d.command(), stdin=subprocess.DEVNULL, stdout=log,
                                  stderr=log, env=env)
    assert http_port_of(d) == hp
    for _ in range(5):
        st, _, body = request(hp, "/readyz")
        assert (st, body) == (503, b"starting: loading snapshots\n")
        assert request(hp, "/healthz")[0] == 200
        time.sleep(0.1)
    fams = {f.name: f for f in text_string_to_metric_families(request(hp, "/metrics")[2].decode())}
    assert fams["bloomd_ready"].samples[0].value == 0
    assert "bloomd_filter_items" not in fams
    assert request(hp, "/api/filters/gate")[0] == 503
    assert "listening on" not in d.log()

    gate.unlink()  # let the load finish
    wait_for(lambda: request(hp, "/readyz")[0] == 200, what="ready")
    m = wait_for(lambda: __import__("re").search(r"listening on (\S+):(\d+)", d.log()),
                 what="listener")
    d.host, d.port = m.group(1), int(m.group(2))
    with d.client() as c:
        assert c.check("gate", ["g1", "g1999"]) == [True, True]
        c.add("gate", ["h%d" % i for i in range(100)])  # dirty: the final snapshot writes it

    gate.write_text("hold")  # hold the shutdown's write of gate.bloom.tmp
    d.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "SIGTERM: shutting down" in d.log(), what="shutdown")
    for _ in range(5):
        st, _, body = request(hp, "/readyz")
        assert (st, body) == (503, b"stopping: writing the last snapshot\n")
        assert request(hp, "/healthz")[0] == 200
        time.sleep(0.1)
    with pytest.raises(OSError):
        d.client(timeout=2).cmd("VERSION")  # clients are closed, listeners gone
    gate.unlink()
    assert d.stop() == 0
    d.env = {}
    d.start()
    with d.client() as c:
        assert c.check("gate", ["h0", "h99"]) == [True, True]


def test_json_logs(daemon_factory):
    d, port = http_daemon(daemon_factory, args=["--log-format", "json"])
    with d.client() as c:
        assert c.cmd("CREATE j") == "CREATED"
        assert c.cmd("FLUSH j") == "OK"
    d.restart()
    lines = [line for line in d.log_path.read_text().splitlines() if line.strip()]
    objs = [json.loads(line) for line in lines]
    assert all({"ts", "level", "msg"} <= set(o) for o in objs)
    assert all(o["level"] in ("debug", "info", "warn", "error") for o in objs)
    loaded = [o for o in objs if "loaded filter" in o["msg"]]
    assert loaded and loaded[0]["filter"] == "j" and loaded[0]["bytes"] > 0
    http = [o for o in objs if o["msg"].startswith("http on ")]
    assert http and http[0]["url"].startswith("http://127.0.0.1:")


def test_http_options(daemon_factory):
    port = free_port()
    d = daemon_factory(env={"BLOOMD_HTTP_PORT": str(port), "BLOOMD_HTTP_BIND": "127.0.0.1"})
    assert http_port_of(d) == port
    assert request(port, "/healthz")[0] == 200
    d2 = daemon_factory()  # default: off
    assert "http on" not in d2.log()
    out = subprocess.run([d.binary, "--help"], capture_output=True, text=True).stdout
    assert "--http-port" in out and "--http-bind" in out and "--log-format" in out


def test_systemd_notify(daemon_factory, tmp_path):
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(30)
    d = daemon_factory(env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "400000"})
    got = []

    def until(word):
        while not any(word in m for m in got):
            got.append(sock.recv(4096).decode())
    until("READY=1")
    assert any("STATUS=loading snapshots" in m for m in got), got
    ready = next(m for m in got if "READY=1" in m)
    assert "STATUS=serving 0 filters" in ready
    until("WATCHDOG=1")
    d.proc.send_signal(signal.SIGTERM)
    until("STOPPING=1")
    d.stop()
    sock.close()
