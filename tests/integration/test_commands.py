"""Every command of proto/PROTOCOL.md and its errors, over a real connection."""

import re
import time

import pytest

from conftest import REPO


def test_version(client):
    assert client.cmd("VERSION").startswith("VERSION ")
    assert client.cmd("version") == client.cmd("VERSION")


def test_create_and_options(client):
    assert client.cmd("CREATE f1") == "CREATED"
    assert client.cmd("CREATE f1") == "EXISTS"
    assert client.cmd("create f2 capacity=5000 error=0.001 growth=linear scale=3 ratio=0.5") \
        == "CREATED"
    info = client.stats("INFO f2")
    assert info["name"] == "f2"
    assert info["capacity"] == "5000"
    assert float(info["error"]) == pytest.approx(0.001)
    assert info["growth"] == "linear"
    assert float(info["scale"]) == 3
    assert float(info["ratio"]) == 0.5
    for field in ("stages", "bytes", "items", "estimated_items", "estimated_error"):
        assert field in info


@pytest.mark.parametrize("request_line", [
    "CREATE bad error=0", "CREATE bad error=1", "CREATE bad error=abc",
    "CREATE bad capacity=0", "CREATE bad capacity=-1", "CREATE bad growth=cubic",
    "CREATE bad scale=0.5", "CREATE bad scale=1000", "CREATE bad ratio=1",
    "CREATE bad nonsense=1", "CREATE bad capacity=10 capacity=20", "CREATE",
])
def test_create_bad_arguments(client, request_line):
    assert client.cmd(request_line).startswith("CLIENT_ERROR ")
    assert client.cmd("INFO bad") == "NOT_FOUND"
    assert client.cmd("VERSION").startswith("VERSION ")  # still usable


def test_add_check_checkadd(client):
    assert client.cmd("CREATE f") == "CREATED"
    assert client.cmd("ADD f a b c") == "ADDED 3"
    assert client.cmd("ADD f a b d") == "ADDED 1"
    assert client.cmd("CHECK f a b c d e") == "1 1 1 1 0"
    assert client.cmd("CHECKADD f e e a z") == "0 1 1 0"
    assert client.cmd("CHECK f e z") == "1 1"
    info = client.stats("INFO f")
    assert info["items"] == "6"


def test_many_keys_one_line(client):
    assert client.cmd("CREATE big capacity=100000") == "CREATED"
    keys = ["key%d" % i for i in range(5000)]
    assert client.cmd("ADD big " + " ".join(keys)) == "ADDED 5000"
    reply = client.cmd("CHECK big " + " ".join(keys + ["never%d" % i for i in range(1000)]))
    bits = reply.split(" ")
    assert bits[:5000] == ["1"] * 5000
    assert bits[5000:].count("1") < 50


def test_binary_keys(client):
    assert client.cmd("CREATE bin") == "CREATED"
    key = bytes(range(33, 256)).decode("latin-1")
    client.send(("ADD bin %s\r\n" % key).encode("latin-1"))
    assert client.line() == "ADDED 1"
    client.send(("CHECK bin %s x\r\n" % key).encode("latin-1"))
    assert client.line() == "1 0"


def test_missing_filter(client):
    for req in ("ADD nope a", "CHECK nope a", "CHECKADD nope a", "INFO nope", "DROP nope",
                "CLEAR nope", "UNION x nope", "INTERSECT x nope"):
        assert client.cmd(req) == "NOT_FOUND", req


def test_union_intersect(client):
    assert client.cmd("CREATE a") == "CREATED"
    assert client.cmd("CREATE b") == "CREATED"
    assert client.cmd("ADD a 1 2 3") == "ADDED 3"
    assert client.cmd("ADD b 3 4") == "ADDED 2"
    assert client.cmd("UNION u a b") == "OK"  # u created from a's parameters
    assert client.cmd("CHECK u 1 2 3 4 5") == "1 1 1 1 0"
    assert client.cmd("UNION a b") == "OK"
    assert client.cmd("CHECK a 4") == "1"
    assert client.cmd("CREATE c") == "CREATED"
    assert client.cmd("ADD c 3 9") == "ADDED 2"
    assert client.cmd("INTERSECT c b") == "OK"
    assert client.cmd("CHECK c 3 4 9") == "1 0 0"
    assert client.cmd("INTERSECT i a c") == "OK"
    assert client.cmd("CHECK i 3 1 4") == "1 0 0"
    assert client.cmd("CREATE other capacity=10") == "CREATED"
    assert client.cmd("UNION other a").startswith("CLIENT_ERROR incompatible")
    assert client.cmd("INTERSECT a other").startswith("CLIENT_ERROR incompatible")
    assert client.cmd("UNION a b nope") == "NOT_FOUND"
    assert client.cmd("UNION a").startswith("CLIENT_ERROR")


def test_intersect_refuses_grown_filters(client):
    # A key may sit in different stages of two grown filters: a stage-by-stage AND would
    # lose it, so the server refuses and changes nothing.
    assert client.cmd("CREATE g capacity=10") == "CREATED"
    assert client.cmd("CREATE h capacity=10") == "CREATED"
    keys = " ".join("k%d" % i for i in range(50))
    assert client.cmd("ADD g " + keys).startswith("ADDED ")
    assert client.cmd("ADD h k1 k2") == "ADDED 2"
    assert client.stats("INFO g")["stages"] != "1"
    for req in ("INTERSECT g h", "INTERSECT h g", "INTERSECT new g h"):
        assert client.cmd(req) == "CLIENT_ERROR cannot intersect grown filters (more than one stage)"
    assert client.cmd("CHECK g " + keys) == " ".join(["1"] * 50)
    assert client.cmd("CHECK h k1 k2 k3") == "1 1 0"
    assert client.cmd("INFO new") == "NOT_FOUND"


def test_list(client):
    assert client.block("LIST") == []
    for name in ("web-2", "web-10", "api", "web.x"):
        assert client.cmd("CREATE %s capacity=1000" % name) == "CREATED"
    assert client.cmd("ADD api a b") == "ADDED 2"
    lines = client.block("LIST")
    names = [line.split(" ")[1] for line in lines]
    assert names == sorted(names) == ["api", "web-10", "web-2", "web.x"]
    fields = lines[0].split(" ")
    assert fields[0] == "FILTER" and fields[2] == "2" and int(fields[3]) > 0
    assert float(fields[5]) == pytest.approx(0.01)
    assert [line.split(" ")[1] for line in client.block("LIST web")] == \
        ["web-10", "web-2", "web.x"]
    assert client.block("LIST zzz") == []


def test_drop_and_clear(client):
    assert client.cmd("CREATE f capacity=1000 error=0.05") == "CREATED"
    assert client.cmd("ADD f a b") == "ADDED 2"
    assert client.cmd("CLEAR f") == "OK"
    assert client.cmd("CHECK f a b") == "0 0"
    info = client.stats("INFO f")
    assert info["capacity"] == "1000" and float(info["error"]) == pytest.approx(0.05)
    assert info["items"] == "0"
    assert client.cmd("DROP f") == "DELETED"
    assert client.cmd("CHECK f a") == "NOT_FOUND"
    assert client.cmd("DROP f") == "NOT_FOUND"
    assert client.cmd("CREATE f") == "CREATED"


def test_flush(client, bloomd):
    assert client.cmd("FLUSH") == "OK"  # nothing to write is still durable
    assert client.cmd("CREATE fl") == "CREATED"
    assert client.cmd("FLUSH fl") == "OK"
    assert (bloomd.data_dir / "fl.bloom").is_file()
    assert client.cmd("FLUSH nope") == "NOT_FOUND"


def test_stats_counters(client, bloomd):
    assert client.cmd("CREATE s") == "CREATED"
    assert client.cmd("ADD s a b c") == "ADDED 3"
    assert client.cmd("CHECK s a q") == "1 0"
    assert client.cmd("CHECKADD s a q") == "1 0"
    st = client.stats()
    assert st["curr_connections"] == "1"
    assert st["total_connections"] == "1"  # this client; readiness is read from the log
    assert st["keys_added"] == "4"
    assert st["keys_checked"] == "4"
    assert st["filters"] == "1"
    assert int(st["memory_bytes"]) > 0
    assert int(st["commands"]) == 5
    with bloomd.client() as other:
        st = other.stats()
        assert st["curr_connections"] == "2" and st["total_connections"] == "2"


def test_uptime_counts_whole_seconds_since_start(client, bloomd):
    first = client.stats()["uptime"]
    assert first.isdigit(), first
    time.sleep(1.2)
    second = client.stats()["uptime"]
    assert second.isdigit(), second
    # Whole seconds of the daemon's monotonic clock, started after our exec: at least one
    # more after 1.2 s, and never more than the time since we launched it (+1 s rounding).
    assert int(second) >= int(first) + 1, (first, second)
    assert int(second) <= time.monotonic() - bloomd.started + 1, (second, bloomd.started)


def test_errors_leave_connection_usable(client):
    assert client.cmd("NOSUCHCOMMAND x") == "ERROR unknown command 'NOSUCHCOMMAND'"
    assert client.cmd("ADD").startswith("CLIENT_ERROR")
    assert client.cmd("CHECK").startswith("CLIENT_ERROR")
    assert client.cmd("INFO").startswith("CLIENT_ERROR")
    assert client.cmd("VERSION extra").startswith("CLIENT_ERROR")
    client.send(b"CREATE k\r\nADD k a\x00b\r\n")
    assert client.line() == "CREATED"
    assert client.line().startswith("CLIENT_ERROR")
    client.send(b"\r\n   \r\nVERSION\n")  # blank lines get no reply; \n alone works
    assert client.line().startswith("VERSION ")


@pytest.mark.parametrize("name", ["../x", "a/b", ".hidden", "x" * 300, "a\\b", "..", "a*b"])
def test_hostile_names(client, name, bloomd):
    assert client.cmd("CREATE " + name).startswith("CLIENT_ERROR")
    assert client.cmd("ADD %s k" % name).startswith("CLIENT_ERROR")
    assert client.block("LIST") == []
    assert sorted(p.name for p in bloomd.data_dir.iterdir()) == ["LOCK", "SEED", "journal"]  # no file for the name


def test_quit(client):
    client.send("VERSION\r\nQUIT\r\nVERSION\r\n")
    data = client.read_until_closed().decode()
    assert data.startswith("VERSION ") and data.count("VERSION") == 1, data


@pytest.mark.parametrize("request_line,reply", [
    ("ADD", "CLIENT_ERROR wrong number of arguments: no filter name"),
    ("CHECK f", "CLIENT_ERROR wrong number of arguments: no keys"),
    ("UNION dst", "CLIENT_ERROR wrong number of arguments: no source filters"),
    ("INFO f g", "CLIENT_ERROR wrong number of arguments 'g'"),
    ("STATS x", "CLIENT_ERROR wrong number of arguments 'x'"),
    ("ADD ../etc k", "CLIENT_ERROR invalid filter name '../etc'"),
    ("INFO .hidden", "CLIENT_ERROR invalid filter name '.hidden'"),
    ("ADD f a\tb", "CLIENT_ERROR invalid key (NUL, tab or CR) 'a\\x09b'"),
    ("CREATE f capacity=1.5", "CLIENT_ERROR bad number '1.5'"),
    ("CREATE f capacity=1e-3", "CLIENT_ERROR bad number '1e-3'"),
    ("CREATE f error=nan", "CLIENT_ERROR bad number 'nan'"),
    ("CREATE f size=10", "CLIENT_ERROR unknown option (valid: capacity error growth scale ratio "
                         "window generations kind seed) 'size'"),
    ("CREATE f error=0.1 error=0.2", "CLIENT_ERROR repeated option 'error'"),
    ("CREATE f 1000", "CLIENT_ERROR option must be key=value '1000'"),
    ("CREATE f capacity=0", "CLIENT_ERROR capacity must be in 1..2^40 '0'"),
    ("CREATE f error=1", "CLIENT_ERROR error must be in (0, 1) '1'"),
    ("CREATE f ratio=1", "CLIENT_ERROR ratio must be in (0, 1) '1'"),
    ("CREATE f scale=0", "CLIENT_ERROR scale must be between 1 and 64 '0'"),
    ("CREATE f scale=0.5", "CLIENT_ERROR scale must be between 1 and 64 '0.5'"),
    ("CREATE f growth=fast", "CLIENT_ERROR growth must be exponential, linear or none 'fast'"),
    ("FOO", "ERROR unknown command 'FOO'"),
    ("CREAT x", "ERROR unknown command 'CREAT'"),
    ("DELETE f", "CLIENT_ERROR wrong number of arguments: no keys"),
    ("DELET f", "ERROR unknown command 'DELET'"),
])
def test_protocol_error_table(client, request_line, reply):
    """The reasons of PROTOCOL.md's error table, end to end; the line is not executed."""
    assert client.cmd(request_line) == reply
    assert client.cmd("INFO f") == "NOT_FOUND"


def test_pipeline_then_eof_answers_everything_in_order(bloomd):
    """Like `printf ... | nc -q1`: the client half-closes after sending; a FLUSH in the
    middle (answered later, from the snapshot thread) keeps its place in the order."""
    import socket
    with bloomd.client() as c:
        c.send("CREATE e\r\nADD e x y\r\nFLUSH e\r\nCHECK e x z\r\nFLUSH\r\nVERSION\r\n"
               "CHECK e y")  # the last line has no terminator: never executed
        c.sock.shutdown(socket.SHUT_WR)
        lines = c.read_until_closed().decode().split("\r\n")
    assert lines[:5] == ["CREATED", "ADDED 2", "OK", "1 0", "OK"], lines
    assert lines[5].startswith("VERSION ") and lines[6:] == [""], lines


def test_help_lists_every_command(client):
    client.send("HELP\r\n")
    lines = []
    while (line := client.line()) != "END":
        assert len(lines) < 100
        lines.append(line)
    words = [line.split()[0] for line in lines]
    for cmd in ["CREATE", "ADD", "CHECK", "CHECKADD", "UNION", "INTERSECT", "INFO", "LIST",
                "DROP", "CLEAR", "FLUSH", "STATS", "VERSION", "HELP", "QUIT"]:
        assert cmd in words, lines
    assert client.cmd("HELP me").startswith("CLIENT_ERROR")
    # Every doc that lists the commands lists them all (HELP's first words are the truth).
    man1 = (REPO / "man/bloomd.1").read_text()
    lists = {
        "man/bloomd.1": re.search(r"The protocol \(\\fB(.*?)\\fR\)", man1, re.S).group(1).split(),
        "man/bloomd-protocol.7": re.findall(r'^\.BI? "?([A-Z]+)\b',
                                            (REPO / "man/bloomd-protocol.7").read_text(), re.M),
        "proto/PROTOCOL.md": re.findall(r"^\| `([A-Z]+)\b",
                                        (REPO / "proto/PROTOCOL.md").read_text(), re.M),
    }
    for path, listed in lists.items():
        assert not [w for w in words if w not in listed], (path, sorted(set(words) - set(listed)))


def test_create_existing_with_other_parameters(client):
    assert client.cmd("CREATE p capacity=1000 error=0.01") == "CREATED"
    assert client.cmd("CREATE p") == "EXISTS"
    assert client.cmd("CREATE p capacity=1000") == "EXISTS"
    assert client.cmd("CREATE p error=0.01 capacity=1000") == "EXISTS"
    reply = client.cmd("CREATE p capacity=10")
    assert reply == ("CLIENT_ERROR capacity: exists 1000, asked 10; filter exists with other "
                     "parameters (capacity=1000 error=0.01 growth=exponential scale=2 "
                     "ratio=0.8)"), reply
    # The differing option first, whichever it is; the ones that match are not named.
    assert client.cmd("CREATE p growth=linear").startswith(
        "CLIENT_ERROR growth: exists exponential, asked linear; filter exists")
    assert client.cmd("CREATE p capacity=1000 error=0.02").startswith(
        "CLIENT_ERROR error: exists 0.01, asked 0.02;")
    assert client.cmd("CREATE p scale=4").startswith("CLIENT_ERROR scale: exists 2, asked 4;")
    assert client.cmd("CREATE p ratio=0.5").startswith("CLIENT_ERROR ratio: exists 0.8, asked 0.5;")
    assert client.cmd("CREATE p kind=expandable").startswith(
        "CLIENT_ERROR kind: exists blocked, asked expandable;")
    assert client.block("INFO p")[1] == "STAT capacity 1000"


@pytest.mark.parametrize("value,want", [("1000000", 1000000), ("1e6", 1000000), ("1M", 1000000),
                                        ("1000k", 1000000), ("2.5k", 2500)])
def test_capacity_count_forms(client, value, want):
    assert client.cmd("CREATE n capacity=%s" % value) == "CREATED"
    assert "STAT capacity %d" % want in client.block("INFO n")


def test_set_operation_sources_deduplicated_and_capped(client):
    """One line naming a filter thousands of times costs one pass (issue 16); more than 64
    distinct sources are refused before anything changes."""
    import time
    assert client.cmd("CREATE s capacity=1000000") == "CREATED"
    client.add("s", ["a", "b"])
    t0 = time.monotonic()
    assert client.cmd("INTERSECT dst " + " ".join(["s"] * 20000)) == "OK"
    assert client.cmd("UNION dst2 " + " ".join(["s"] * 20000)) == "OK"
    assert time.monotonic() - t0 < 5
    assert client.check("dst", ["a", "b"]) == [True, True]
    for i in range(65):
        assert client.cmd("CREATE m%d capacity=1000" % i) == "CREATED"
    assert client.cmd("UNION u " + " ".join("m%d" % i for i in range(64))) == "OK"
    reply = client.cmd("UNION u2 " + " ".join("m%d" % i for i in range(65)))
    assert reply == "CLIENT_ERROR too many source filters (at most 64 distinct)", reply
    assert client.cmd("INFO u2") == "NOT_FOUND"


def test_union_into_nonscaling_filter(client):
    """growth=none refuses a UNION that would take it past its capacity, as it refuses the
    key past it, and keeps what it had; one that fits goes in."""
    for name in ("a", "b", "c"):
        assert client.cmd("CREATE %s growth=none capacity=2000" % name) == "CREATED"
    a_keys = ["a%d" % i for i in range(900)]
    b_keys = ["b%d" % i for i in range(900)]
    c_keys = ["c%d" % i for i in range(1400)]
    client.add("a", a_keys)
    client.add("b", b_keys)
    client.add("c", c_keys)
    assert client.cmd("UNION a b") == "OK"  # 1800 of 2000
    assert all(client.check("a", a_keys + b_keys))
    assert client.cmd("UNION a c") == "CLIENT_ERROR non scaling filter is full"
    assert sum(client.check("a", c_keys)) < 28  # false positives only (1% promised)
    assert all(client.check("a", a_keys + b_keys))
