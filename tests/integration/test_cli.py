"""bloomd-cli against the real daemon: one-shot commands and their exit codes, bulk add of
2M keys, dedup compared exactly with the first occurrences, check, bad keys with their line
numbers, a server that goes away, --pipe with garbage, --stat, AUTH, BLOOMD_URL and TLS,
the interactive prompt driven through tmux (replies, history across restarts, Tab
completion, reconnection), and make install of the binary and its man page.

`BLOOMD_CLI` names the binary (default build/asan/bloomd-cli, the ASan build).
"""

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import REPO
from httputil import free_port

CLI = os.environ.get("BLOOMD_CLI", str(REPO / "build" / "asan" / "bloomd-cli"))
TIMEOUT = 120


@pytest.fixture(autouse=True)
def need_cli():
    if not os.access(CLI, os.X_OK):
        pytest.fail("no bloomd-cli at %s: run `make build/asan/bloomd-cli`" % CLI)


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLOOMD_")}
    env.update(extra)
    return env


def cli(d, *args, input=None, env=None, timeout=TIMEOUT, port=True):
    """Runs bloomd-cli against daemon d (-p its port unless port is False)."""
    cmd = [CLI] + (["-p", str(d.port)] if port and d is not None else []) + list(args)
    return subprocess.run(cmd, input=input, capture_output=True, timeout=timeout,
                          env=clean_env(**(env or {})))


def text(b):
    return b.decode("utf-8", "replace")


def pipelined_check(d, name, keys, chunk=1000):
    """CHECKs keys over one raw socket, all requests sent before reading: a check that does
    not go through bloomd-cli. Returns the number of keys present."""
    s = socket.create_connection((d.host, d.port), timeout=60)
    lines = [("CHECK %s %s\r\n" % (name, " ".join(keys[i:i + chunk]))).encode()
             for i in range(0, len(keys), chunk)]
    s.sendall(b"".join(lines))
    buf, present, got = b"", 0, 0
    while got < len(lines):
        data = s.recv(1 << 20)
        assert data, "closed"
        buf += data
        *done, buf = buf.split(b"\r\n")
        for line in done:
            present += line.count(b"1")
            got += 1
    s.close()
    return present


# ---- one-shot ----

def test_one_shot_version_and_exit_codes(bloomd):
    r = cli(bloomd, "VERSION")
    assert r.returncode == 0 and re.fullmatch(rb"VERSION \d+\.\d+\.\d+\n", r.stdout), r
    r = cli(bloomd, "CREATE", "f", "capacity=1000")
    assert (r.returncode, r.stdout) == (0, b"CREATED\n")
    r = cli(bloomd, "CHECKADD", "f", "a", "b", "a")
    assert (r.returncode, r.stdout) == (0, b"0 0 1\n")
    r = cli(bloomd, "INFO", "f")  # a block, printed whole
    assert r.returncode == 0 and r.stdout.startswith(b"STAT name f\n") and \
        r.stdout.endswith(b"END\n"), r.stdout
    r = cli(bloomd, "INFO", "nosuch")  # NOT_FOUND is an answer, not an error
    assert (r.returncode, r.stdout) == (0, b"NOT_FOUND\n")
    r = cli(bloomd, "FOO")
    assert r.returncode == 1 and r.stdout.startswith(b"ERROR unknown command"), r
    r = cli(bloomd, "CREATE", "g", "capacity=0")
    assert r.returncode == 1 and r.stdout.startswith(b"CLIENT_ERROR"), r
    # Nothing listens on a fresh free port: exit 2 and a clear message.
    r = cli(None, "-p", str(free_port()), "VERSION")
    assert r.returncode == 2 and b"cannot connect to 127.0.0.1:" in r.stderr and \
        b"Connection refused" in r.stderr, r
    # A script of commands on stdin: every reply, pipelined.
    r = cli(bloomd, input=b"VERSION\nCHECK f a c\n\nLIST\nQUIT\n")
    assert r.returncode == 0, r
    out = text(r.stdout).splitlines()
    assert len(out) == 4 and out[0].startswith("VERSION ") and out[1] == "1 0", out
    assert out[2].startswith("FILTER f 2 ") and out[3] == "END", out
    r = cli(None, "--version", port=False)
    assert r.returncode == 0 and r.stdout.startswith(b"bloomd-cli ")
    r = cli(None, "--no-such-option", port=False)
    assert r.returncode == 1
    r = cli(bloomd, "dump", "nosuch", "-")
    assert r.returncode == 1 and r.stdout == b"" and b"NOT_FOUND" in r.stderr, r
    r = cli(bloomd, "DUMP", "f")  # a binary block: the dump mode's job, not a reply to print
    assert r.returncode == 1 and r.stdout == b"" and b"use bloomd-cli dump" in r.stderr, r


def test_bloomd_url_and_auth(daemon_factory, tmp_path):
    tok = tmp_path / "token"
    tok.write_text("s3cret-token+/=\n")
    d = daemon_factory(["--auth-token-file", str(tok)])
    url = "bloomd://127.0.0.1:%d" % d.port
    # BLOOMD_URL picks the server; without a token, commands are refused.
    r = cli(d, "CREATE", "a", env={"BLOOMD_URL": url}, port=False)
    assert r.returncode == 1 and b"authentication required" in r.stdout, r
    r = cli(d, "--token-file", str(tok), "CREATE", "a", env={"BLOOMD_URL": url}, port=False)
    assert (r.returncode, r.stdout) == (0, b"CREATED\n"), r
    r = cli(d, "CHECK", "a", "x", env={"BLOOMD_AUTH_TOKEN": "s3cret-token+/="})
    assert (r.returncode, r.stdout) == (0, b"0\n"), r
    # The password of BLOOMD_URL is the token, percent-decoded, '+' kept (as in Python).
    r = cli(d, "CHECK", "a", "x", port=False,
            env={"BLOOMD_URL": "bloomd://:s3cret-token+%%2F%%3D@127.0.0.1:%d" % d.port})
    assert (r.returncode, r.stdout) == (0, b"0\n"), r
    # A wrong token: exit 1 (not 2: retrying will not help), and a clear message.
    r = cli(d, "VERSION", env={"BLOOMD_AUTH_TOKEN": "wrong"})
    assert r.returncode == 1 and b"authentication failed: CLIENT_ERROR invalid token" in \
        r.stderr, r
    # Never a token on the command line.
    r = cli(d, "-u", "bloomd://:s3cret@127.0.0.1:%d" % d.port, "VERSION", port=False)
    assert r.returncode == 1 and b"--token-file" in r.stderr, r
    r = cli(d, "AUTH", "s3cret-token+/=")
    assert r.returncode == 1 and b"--token-file" in r.stderr, r
    # Bulk modes authenticate too.
    r = cli(d, "add", "a", env={"BLOOMD_AUTH_TOKEN": "s3cret-token+/="}, input=b"k1\nk2\n")
    assert r.returncode == 0 and r.stderr == b"2 keys, 2 new\n", r
    r = cli(d, "-u", "bloomd://127.0.0.1:%d/x" % d.port, "VERSION", port=False)
    assert r.returncode == 1 and b"unexpected path" in r.stderr


# ---- bulk ----

def test_bulk_add_2m_keys_all_present(bloomd, tmp_path):
    n = 2_000_000
    keys = ["https://site%d.example/page/%d" % (i % 997, i) for i in range(n)]
    path = tmp_path / "keys.txt"
    path.write_text("\n".join(keys) + "\n")
    r = cli(bloomd, "add", "crawl", str(path), "--create", "capacity=2M error=0.001",
            timeout=600)
    assert r.returncode == 0, r
    m = re.fullmatch(rb"(\d+) keys, (\d+) new\n", r.stderr)
    assert m, r.stderr
    assert int(m.group(1)) == n
    # A key already present (a false positive among earlier keys) is not new again.
    assert n - 100 < int(m.group(2)) <= n
    assert pipelined_check(bloomd, "crawl", keys) == n
    # check --absent through the CLI agrees: nothing absent.
    r = cli(bloomd, "check", "crawl", str(path), "--absent", timeout=600)
    assert r.returncode == 0 and r.stdout == b"", r.stderr
    assert r.stderr == b"%d keys, %d present\n" % (n, n)
    # Adding them again: nothing new.
    r = cli(bloomd, "add", "crawl", str(path), timeout=600)
    assert r.returncode == 0 and r.stderr == b"%d keys, 0 new\n" % n


def test_bulk_add_several_files_and_stdin(bloomd, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("x1\nx2\n")
    b.write_text("x3\r\nx2")  # CRLF and no final newline
    assert cli(bloomd, "CREATE", "m").returncode == 0
    r = cli(bloomd, "add", "m", str(a), "-", str(b), input=b"x4\nx1\n")
    assert (r.returncode, r.stderr) == (0, b"6 keys, 4 new\n"), r
    assert cli(bloomd, "CHECK", "m", "x1", "x2", "x3", "x4", "x5").stdout == b"1 1 1 1 0\n"
    # Without --create a missing filter is a clear error.
    r = cli(bloomd, "add", "nosuch", str(a))
    assert r.returncode == 1 and b"NOT_FOUND: no filter 'nosuch' (--create OPTS" in r.stderr
    r = cli(bloomd, "add", "m", str(tmp_path / "missing"))
    assert r.returncode == 1 and b"No such file" in r.stderr
    r = cli(bloomd, "add", "bad name")
    assert r.returncode == 1 and b"invalid filter name" in r.stderr


def test_dedup_500k_lines_first_occurrences(bloomd, tmp_path):
    rng = random.Random(2024)
    values = ["user-%d@mail.example" % i for i in range(300_000)]
    lines = values + [rng.choice(values) for _ in range(200_000)]
    rng.shuffle(lines)
    seen, want = set(), []
    for line in lines:
        if line not in seen:
            seen.add(line)
            want.append(line)
    path = tmp_path / "log.txt"
    path.write_text("\n".join(lines) + "\n")
    r = cli(bloomd, "dedup", "seen", str(path), "--create", "capacity=300000 error=1e-6",
            timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stderr == b"500000 keys, 300000 new\n"
    got = text(r.stdout).split("\n")
    assert got[-1] == ""
    assert got[:-1] == want  # exactly the first occurrences, in input order
    # A second run remembers: nothing is new.
    r = cli(bloomd, "dedup", "seen", str(path), timeout=600)
    assert (r.returncode, r.stdout, r.stderr) == (0, b"", b"500000 keys, 0 new\n")


def test_dedup_field_delimiter_and_streaming(bloomd):
    r = cli(bloomd, "dedup", "ips", "--field", "2", "--delimiter", ",", "--create",
            "capacity=1000", input=b"t1,10.0.0.1,GET\nt2,10.0.0.2,GET\nt3,10.0.0.1,PUT\n")
    assert r.returncode == 0, r
    assert r.stdout == b"t1,10.0.0.1,GET\nt2,10.0.0.2,GET\n"
    # Default delimiter for --field: tab.
    r = cli(bloomd, "dedup", "ips", "--field", "1", "-q", input=b"10.0.0.3\tx\n10.0.0.1\ty\n")
    assert (r.returncode, r.stdout, r.stderr) == (0, b"10.0.0.3\tx\n", b"")
    # Streaming: a line comes out before the input ends.
    p = subprocess.Popen([CLI, "-p", str(bloomd.port), "dedup", "ips"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env())
    try:
        p.stdin.write(b"new-one\n")
        p.stdin.flush()
        assert p.stdout.readline() == b"new-one\n"
        p.stdin.write(b"new-one\nnew-two\n")
        p.stdin.flush()
        assert p.stdout.readline() == b"new-two\n"
        p.stdin.close()
        assert p.wait(TIMEOUT) == 0
        assert p.stderr.read() == b"3 keys, 2 new\n"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_check_present_absent(bloomd):
    assert cli(bloomd, "CREATE", "c").returncode == 0
    assert cli(bloomd, "ADD", "c", "a", "c").returncode == 0
    r = cli(bloomd, "check", "c", input=b"a\nb\nc\n")
    assert (r.returncode, r.stdout, r.stderr) == (0, b"1\n0\n1\n", b"3 keys, 2 present\n")
    r = cli(bloomd, "check", "c", "--present", input=b"a\nb\nc\n")
    assert r.stdout == b"a\nc\n"
    r = cli(bloomd, "check", "c", "--absent", input=b"a\nb\nc\n")
    assert r.stdout == b"b\n"
    r = cli(bloomd, "dedup", "c", "--present", input=b"a\n")
    assert r.returncode == 1 and b"options of check" in r.stderr


def test_bad_keys_line_numbers(bloomd, tmp_path):
    assert cli(bloomd, "CREATE", "b").returncode == 0
    path = tmp_path / "k.txt"
    path.write_bytes(b"ok1\nok2\nhas space\nok3\nt\tab\n\nnul\0x\ncr\rx\nok4\n")
    r = cli(bloomd, "add", "b", str(path))
    assert r.returncode == 1
    assert b"%s:3: the key has a space (--skip-bad skips such lines)" % bytes(path) in r.stderr
    assert b"2 keys, 2 new" in r.stderr  # the lines before it were added
    r = cli(bloomd, "add", "b", str(path), "--skip-bad")
    assert (r.returncode, r.stderr) == (0, b"4 keys, 2 new, 5 bad lines skipped\n"), r
    for line, why in [(2, b"the key has a tab"), (3, b"empty key"), (4, b"a NUL byte"),
                      (5, b"a carriage return")]:
        bad = [b"ok"] * 6
        bad[line - 1] = {b"the key has a tab": b"a\tb", b"empty key": b"",
                         b"a NUL byte": b"a\0b", b"a carriage return": b"a\rb"}[why]
        r = cli(bloomd, "dedup", "b", input=b"\n".join(bad) + b"\n")
        assert r.returncode == 1 and b"stdin:%d: " % line in r.stderr and why in r.stderr, \
            (line, r.stderr)
    r = cli(bloomd, "dedup", "b", "--field", "3", "--delimiter", ",", input=b"a,b,c\na,b\n")
    assert r.returncode == 1 and b"stdin:2: the line has too few fields" in r.stderr


def test_server_goes_away(daemon_factory):
    d = daemon_factory()
    assert cli(d, "CREATE", "g").returncode == 0
    p = subprocess.Popen([CLI, "-p", str(d.port), "add", "g"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env())
    try:
        p.stdin.write(b"".join(b"k%d\n" % i for i in range(1000)))
        p.stdin.flush()
        deadline = time.monotonic() + 30
        with d.client() as c:  # wait until those keys are in
            while c.check("g", ["k999"]) != [True] and time.monotonic() < deadline:
                time.sleep(0.05)
        d.kill()
        for i in range(200):  # more keys: the CLI finds the connection gone
            try:
                p.stdin.write(b"more%d\n" % i)
                p.stdin.flush()
            except BrokenPipeError:
                break
            time.sleep(0.01)
        try:
            p.stdin.close()
        except BrokenPipeError:
            pass
        assert p.wait(TIMEOUT) == 2
        err = p.stderr.read()
        assert re.search(rb"127\.0\.0\.1:\d+: connection lost after \d+ keys: ", err), err
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    # A one-shot against the dead server: exit 2.
    r = cli(d, "VERSION")
    assert r.returncode == 2 and b"cannot connect" in r.stderr


# ---- raw mode ----

def test_pipe_counts_replies_and_errors(bloomd):
    rng = random.Random(5)
    lines = [b"CREATE p", b"ADD p a b", b"", b"   ", b"CHECK p a z", b"INFO p", b"LIST",
             b"STATS", b"HELP", b"INFO nosuch", b"INFO", b"\r"]
    errors = 1  # INFO without a name
    for _ in range(3000):  # garbage: random bytes, never a newline
        g = bytes(rng.choice(b"ABCxyz \t\0\x01\xff\r:=") for _ in range(rng.randint(1, 40)))
        lines.append(g)
    data = b"\n".join(lines) + b"\n"

    def blank(line):
        return line[:-1].strip(b" ") == b"" if line.endswith(b"\r") else line.strip(b" ") == b""
    want = sum(1 for line in lines if not blank(line))
    r = cli(bloomd, "--pipe", input=data, timeout=60)
    m = re.fullmatch(rb"replies: (\d+), errors: (\d+)\n", r.stdout)
    assert m, r
    assert int(m.group(1)) == want
    garbage_errors = sum(1 for line in lines[12:] if not blank(line))
    assert int(m.group(2)) == errors + garbage_errors  # every garbage line is an error
    assert r.returncode == 1
    assert b"line 11: CLIENT_ERROR" in r.stderr  # errors are shown with their input line
    # All good lines: exit 0; a last line without '\n' still gets its reply.
    r = cli(bloomd, "--pipe", input=b"ADD p c\nCHECK p c")
    assert (r.returncode, r.stdout) == (0, b"replies: 2, errors: 0\n")
    # QUIT ends it: nothing after it is sent.
    r = cli(bloomd, "--pipe", input=b"VERSION\nQUIT\nVERSION\n")
    assert (r.returncode, r.stdout) == (0, b"replies: 1, errors: 0\n")


def test_pipe_line_too_long_does_not_hang(bloomd):
    data = b"VERSION\n" + b"ADD p " + b"x" * (3 << 20) + b"\nVERSION\n"
    r = cli(bloomd, "--pipe", input=data, timeout=60)
    assert r.returncode == 2, r
    assert b"connection lost" in r.stderr
    assert r.stdout.startswith(b"replies: ")


# ---- --stat ----

def test_stat_lines(bloomd):
    r = cli(bloomd, "--stat", "0.2", "--count", "3", timeout=60)
    assert r.returncode == 0, r
    rows = text(r.stdout).splitlines()
    assert rows[0].split() == ["keys/s", "conns", "memory", "filters", "items", "journal"]
    assert len(rows) == 4
    assert rows[1].split()[0] == "-"
    for row in rows[2:]:
        cells = row.split()
        assert len(cells) == 6 and float(cells[0]) >= 0 and int(cells[1]) >= 1, row


# ---- TLS ----

def test_tls(daemon_factory, tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("needs openssl(1)")
    from test_tls import CA, tls_daemon
    ca = CA(tmp_path)
    d, port = tls_daemon(daemon_factory, *ca.issue("server"))
    r = cli(d, "-p", str(port), "--tls", "--cacert", str(ca.cert), "VERSION", port=False)
    assert r.returncode == 0 and r.stdout.startswith(b"VERSION"), r
    r = cli(d, "-u", "bloomds://127.0.0.1:%d" % port, "--cacert", str(ca.cert), "add", "t",
            "--create", "capacity=1000", input=b"a\nb\n", port=False)
    assert (r.returncode, r.stderr) == (0, b"2 keys, 2 new\n"), r
    # The system's CAs do not know the test CA: a connection failure, exit 2.
    r = cli(d, "-p", str(port), "--tls", "VERSION", port=False)
    assert r.returncode == 2 and b"certificate verify failed" in r.stderr, r
    r = cli(d, "-p", str(port), "--tls", "--insecure", "CHECK", "t", "a", port=False)
    assert (r.returncode, r.stdout) == (0, b"1\n"), r
    # dump and restore through TLS: a few MB each way, in pieces.
    r = cli(d, "add", "big", "--create", "capacity=2000000 error=0.001",
            input=b"".join(b"k%d\n" % i for i in range(1000)))
    assert r.returncode == 0, r
    tls = ["-p", str(port), "--tls", "--cacert", str(ca.cert)]
    r = cli(d, *tls, "dump", "big", str(tmp_path / "big.dump"), port=False)
    assert r.returncode == 0 and (tmp_path / "big.dump").stat().st_size > 2 << 20, r
    r = cli(d, *tls, "restore", "big2", str(tmp_path / "big.dump"), port=False)
    assert (r.returncode, r.stdout) == (0, b"RESTORED\n"), r
    r = cli(d, *tls, "dump", "big2", "-", port=False)  # the same bits; the 40-byte header
    assert r.returncode == 0, r.stderr                 # holds the copy's journal position
    assert r.stdout[40:] == (tmp_path / "big.dump").read_bytes()[40:]


# ---- interactive, through tmux ----

class Tmux:
    """One tmux server on its own socket running bloomd-cli in a pane."""

    made = 0

    def __init__(self, tmp_path, home, args, after=""):
        Tmux.made += 1  # a socket of its own (a killed server may still be going away),
        self.sock = str(tmp_path / ("tmux%d" % Tmux.made))  # under tmp_path: none left behind
        self.home = home
        self.args = args
        self.after = after  # shell commands run after the CLI exits (the pane stays)
        self.base = ["tmux", "-S", self.sock, "-f", "/dev/null"]
        self.started = False

    def start(self):
        cmd = " ".join([CLI] + self.args) + self.after
        env = "env -u BLOOMD_URL HOME=%s TERM=xterm " % self.home
        subprocess.run(self.base + ["new-session", "-d", "-s", "t", "-x", "160", "-y", "50",
                                    env + cmd], check=True, timeout=30)
        self.started = True

    def keys(self, *keys):
        subprocess.run(self.base + ["send-keys", "-t", "t"] + list(keys), check=True, timeout=30)

    def screen(self):
        r = subprocess.run(self.base + ["capture-pane", "-p", "-J", "-t", "t", "-S", "-200"],
                           capture_output=True, timeout=30)
        # -J keeps the trailing spaces of a redrawn line: drop them.
        return "\n".join(line.rstrip(" ") for line in text(r.stdout).split("\n"))

    def wait_for(self, pattern, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.screen()
            if re.search(pattern, s, re.M):
                return s
            time.sleep(0.1)
        raise AssertionError("%r not on the screen:\n%s" % (pattern, self.screen()))

    def stop(self):
        if self.started:
            subprocess.run(self.base + ["kill-server"], timeout=30, capture_output=True)
            self.started = False


@pytest.fixture
def tmux_cli(tmp_path):
    if shutil.which("tmux") is None:
        pytest.skip("needs tmux (scripts/deps.sh test)")
    made = []

    def make(args, after=""):
        home = tmp_path / "home"
        home.mkdir(exist_ok=True)
        t = Tmux(tmp_path, home, args, after)
        made.append(t)
        t.start()
        return t

    yield make
    for t in made:
        t.stop()


def test_interactive_commands_history_completion(bloomd, tmux_cli):
    t = tmux_cli(["-p", str(bloomd.port)])
    prompt = r"127\.0\.0\.1:%d>" % bloomd.port
    t.wait_for(prompt + "$")
    t.keys("CREATE visits capacity=1000", "Enter")
    t.wait_for(r"^CREATED$")
    t.keys("CHECKADD visits u1 u2 u1", "Enter")
    t.wait_for(r"^0 0 1$")
    t.keys("FOO", "Enter")
    t.wait_for(r"^ERROR unknown command 'FOO'$")
    # Tab completes a command, then a filter name (through LIST).
    t.keys("che")
    t.keys("Tab")
    t.wait_for(prompt + r" check$")
    t.keys("C-u")
    t.keys("INFO vis")
    t.keys("Tab")
    t.wait_for(prompt + r" INFO visits$")
    t.keys("Enter")
    t.wait_for(r"^STAT name visits$")
    t.wait_for(r"^END$")
    t.keys("help checkadd", "Enter")
    t.wait_for(r"^CHECKADD <name> <key>\.\.\.$")
    t.keys("quit", "Enter")
    hist = t.home / ".bloomd_history"
    deadline = time.monotonic() + 10
    while "CHECKADD" not in (hist.read_text() if hist.exists() else "") and \
            time.monotonic() < deadline:
        time.sleep(0.1)
    t.stop()
    assert "CHECKADD" in hist.read_text(errors="replace")
    # A new CLI: Up brings back the last commands of the previous one.
    t2 = tmux_cli(["-p", str(bloomd.port)])
    t2.wait_for(prompt + "$")
    t2.keys("Up")
    t2.wait_for(prompt + r" help checkadd$")
    t2.keys("Up")
    t2.wait_for(prompt + r" INFO visits$")
    t2.keys("Up", "Up")
    t2.wait_for(prompt + r" CHECKADD visits u1 u2 u1$")
    t2.keys("Enter")
    t2.wait_for(r"^1 1 1$")


def test_interactive_reconnects_after_restart(daemon_factory, tmux_cli):
    port = free_port()
    d = daemon_factory(["--port", str(port)])
    t = tmux_cli(["-p", str(port)])
    t.wait_for(r"127\.0\.0\.1:%d>$" % port)
    t.keys("CREATE r", "Enter")
    t.wait_for(r"^CREATED$")
    d.restart()
    t.keys("CHECKADD r k", "Enter")
    t.wait_for(r"^\(reconnected to 127\.0\.0\.1:%d\)$" % port)
    t.wait_for(r"^0$")
    d.stop()
    t.keys("VERSION", "Enter")
    t.wait_for(r"cannot connect to 127\.0\.0\.1:%d: Connection refused" % port)
    t.wait_for(r"\(not connected\)>$")


def test_progress_line_on_a_tty(bloomd, tmux_cli, tmp_path):
    path = tmp_path / "keys.txt"
    path.write_text("".join("p%d\n" % i for i in range(100_000)))
    # One key per request, one in flight: slow enough to see the progress line.
    t = tmux_cli(["-p", str(bloomd.port), "add", "prog", str(path), "--batch", "1",
                  "--depth", "1", "--create", "capacity=100000"], after="; echo EXIT=$?; sleep 120")
    t.wait_for(r"^\d+ keys, [\d.]+k? keys/s, \d+\.\d%$", timeout=60)
    s = t.wait_for(r"^EXIT=0$", timeout=TIMEOUT)
    assert re.search(r"^100000 keys, \d+ new$", s, re.M), s
    assert "keys/s" not in s  # the progress line was cleared


# ---- dump and restore ----

DUMP_KINDS = {
    # name: (CREATE options, keys): each grows past its first stage or table
    "grown": ("capacity=2000 error=0.01", 20000),
    "linear": ("capacity=3000 error=0.001 growth=linear", 12000),
    "windowed": ("capacity=5000 window=1h generations=3", 8000),
    "expandable": ("capacity=2000 kind=expandable", 15000),
}


def filter_info(c, name):
    """INFO without the fields naming the filter or its last snapshot; estimates rounded to
    12 digits (the expandable kind sums its estimated_error again after a decode)."""
    out = c.stats("INFO " + name)
    for k in ("name", "snapshot_time"):
        out.pop(k, None)
    for k, v in out.items():
        if "." in v or "e-" in v:
            try:
                out[k] = "%.12g" % float(v)
            except ValueError:
                pass
    return out


def test_dump_restore_every_kind_through_files(daemon_factory, tmp_path):
    a, b = daemon_factory(), daemon_factory()
    with a.client() as ca, b.client() as cb:
        for name, (opts, n) in DUMP_KINDS.items():
            keys = ["%s-%d" % (name, i) for i in range(n)]
            assert ca.cmd("CREATE %s %s" % (name, opts)) == "CREATED"
            ca.add(name, keys)
            path = tmp_path / (name + ".dump")
            r = cli(a, "dump", name, str(path))
            assert (r.returncode, r.stdout, r.stderr) == (0, b"", b""), r
            assert not Path(str(path) + ".tmp").exists()
            assert path.read_bytes()[:8] == b"BLOOMD\0\0"
            r = cli(b, "restore", name, str(path))
            assert (r.returncode, r.stdout) == (0, b"RESTORED\n"), (name, r)
            assert all(cb.check(name, keys)), name
            assert filter_info(cb, name) == filter_info(ca, name), name
        # Onto an existing name: EXISTS and exit 1 without --replace; --replace takes its place.
        r = cli(b, "restore", "linear", str(tmp_path / "grown.dump"))
        assert (r.returncode, r.stdout) == (1, b"EXISTS\n"), r
        assert filter_info(cb, "linear") == filter_info(ca, "linear")
        r = cli(b, "restore", "--replace", "linear", str(tmp_path / "grown.dump"))
        assert (r.returncode, r.stdout) == (0, b"RESTORED\n"), r
        assert filter_info(cb, "linear") == filter_info(ca, "grown")
        # '-': the dump on stdout is the file's bytes; restore from a pipe (spooled to a
        # temporary file first) and from stdin redirected from a file.
        data = (tmp_path / "windowed.dump").read_bytes()
        r = cli(a, "dump", "windowed", "-")
        assert r.returncode == 0 and r.stdout == data, (r.returncode, r.stderr)
        r = cli(b, "restore", "piped", "-", input=data)
        assert (r.returncode, r.stdout) == (0, b"RESTORED\n"), r
        with open(tmp_path / "windowed.dump", "rb") as f:
            r = subprocess.run([CLI, "-p", str(b.port), "restore", "redirected", "-"], stdin=f,
                               capture_output=True, timeout=TIMEOUT, env=clean_env())
        assert (r.returncode, r.stdout) == (0, b"RESTORED\n"), r
        keys = ["windowed-%d" % i for i in range(DUMP_KINDS["windowed"][1])]
        for name in ("piped", "redirected"):
            assert all(cb.check(name, keys)), name
            assert filter_info(cb, name) == filter_info(ca, "windowed"), name
    # Usage errors and an unreachable server.
    r = cli(a, "dump", "grown")
    assert r.returncode == 1 and b"usage: bloomd-cli dump FILTER FILE|-" in r.stderr, r
    r = cli(a, "dump", "grown", str(tmp_path / "x"), "--replace")
    assert r.returncode == 1 and not (tmp_path / "x").exists(), r
    r = cli(a, "restore", "grown", str(tmp_path / "missing.dump"))
    assert r.returncode == 1 and b"No such file" in r.stderr, r
    r = cli(None, "-p", str(free_port()), "restore", "g", str(tmp_path / "grown.dump"))
    assert r.returncode == 2 and b"Connection refused" in r.stderr, r
    r = cli(None, "-p", str(free_port()), "dump", "g", str(tmp_path / "y"))
    assert r.returncode == 2 and not (tmp_path / "y").exists(), r


def test_dump_file_loads_from_a_data_dir(daemon_factory, tmp_path):
    a = daemon_factory()
    keys = ["k%d" % i for i in range(5000)]
    with a.client() as ca:
        assert ca.cmd("CREATE src capacity=1000") == "CREATED"
        ca.add("src", keys)
        want = filter_info(ca, "src")
    d = tmp_path / "copy"
    d.mkdir()
    r = cli(a, "dump", "src", str(d / "copied.bloom"))
    assert r.returncode == 0, r
    assert (d / "copied.bloom").read_bytes() == (a.data_dir / "src.bloom").read_bytes()
    c = daemon_factory(data_dir=d)
    with c.client() as cc:
        assert cc.names() == ["copied"]
        assert all(cc.check("copied", keys))
        assert filter_info(cc, "copied") == want


def test_restore_flipped_byte_is_refused(daemon_factory, tmp_path):
    a, b = daemon_factory(), daemon_factory()
    with a.client() as ca:
        assert ca.cmd("CREATE f capacity=5000") == "CREATED"
        ca.add("f", ["k%d" % i for i in range(3000)])
    path = tmp_path / "f.dump"
    assert cli(a, "dump", "f", str(path)).returncode == 0
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))
    r = cli(b, "restore", "f", str(path))
    assert r.returncode == 1 and r.stdout.startswith(b"CLIENT_ERROR bad dump ("), r
    with b.client() as cb:
        assert cb.names() == []


def test_dump_restore_stream_in_bounded_memory(daemon_factory, tmp_path):
    """A ~36 MB dump and its restore through the release build: the client's peak RSS stays
    far below the dump's size (it reads and writes in chunks)."""
    rel = REPO / "build" / "bloomd-cli"
    if not os.access(rel, os.X_OK):
        pytest.skip("needs the release build/bloomd-cli (make build/bloomd-cli)")
    a, b = daemon_factory(), daemon_factory()
    with a.client() as ca:
        assert ca.cmd("CREATE big capacity=20000000 error=0.001") == "CREATED"
        ca.add("big", ["k%d" % i for i in range(20000)])

    def run(*args):
        """Runs the release cli; returns (exit status, stdout, stderr, seconds, peak RSS kB).
        The peak is VmHWM of /proc/PID/status, sampled while it runs (wait4's ru_maxrss
        would count the forked pytest before the exec)."""
        t0 = time.monotonic()
        with open(tmp_path / "out", "wb+") as out, open(tmp_path / "err", "wb+") as err:
            p = subprocess.Popen([str(rel)] + list(args), stdout=out, stderr=err,
                                 env=clean_env())
            deadline = t0 + TIMEOUT
            hwm = 0
            while True:
                try:
                    m = re.search(r"^VmHWM:\s+(\d+) kB",
                                  Path("/proc/%d/status" % p.pid).read_text(), re.M)
                    hwm = max(hwm, int(m.group(1))) if m else hwm
                except OSError:
                    pass
                pid, status = os.waitpid(p.pid, os.WNOHANG)
                if pid == p.pid:
                    break
                if time.monotonic() > deadline:
                    p.kill()
                    os.waitpid(p.pid, 0)
                    pytest.fail("bloomd-cli %s took over %d s" % (args, TIMEOUT))
                time.sleep(0.005)
            p.returncode = os.waitstatus_to_exitcode(status)
            out.seek(0)
            err.seek(0)
            return p.returncode, out.read(), err.read(), time.monotonic() - t0, hwm

    path = tmp_path / "big.dump"
    rc, _, err, dump_s, dump_kb = run("-p", str(a.port), "dump", "big", str(path))
    assert rc == 0, err
    size = path.stat().st_size
    assert size > 30 << 20
    rc, out, err, restore_s, restore_kb = run("-p", str(b.port), "restore", "big2", str(path))
    assert (rc, out) == (0, b"RESTORED\n"), err
    print("\ndump of %.1f MB: dump %.2f s, peak RSS %d kB; restore %.2f s, peak RSS %d kB" %
          (size / 1e6, dump_s, dump_kb, restore_s, restore_kb))
    assert 0 < dump_kb < 16 << 10 and 0 < restore_kb < 16 << 10, (dump_kb, restore_kb)
    with b.client() as cb:
        assert cb.check("big2", ["k0", "k19999"]) == [True, True]


def test_dump_progress_line_on_a_tty(bloomd, tmux_cli, tmp_path):
    with bloomd.client() as c:
        assert c.cmd("CREATE prog capacity=2000000 error=0.001") == "CREATED"
        c.add("prog", ["k%d" % i for i in range(1000)])
    want = cli(bloomd, "dump", "prog", "-").stdout
    assert len(want) > 2 << 20
    # stdout into a reader taking ~1 MB/s, so that the dump lasts seconds; stderr is the pane.
    reader = tmp_path / "slow_reader.py"
    reader.write_text("import sys, time\n"
                      "out = open(sys.argv[1], 'wb')\n"
                      "while True:\n"
                      "    b = sys.stdin.buffer.read(64 << 10)\n"
                      "    if not b:\n"
                      "        break\n"
                      "    out.write(b)\n"
                      "    time.sleep(0.06)\n"
                      "out.close()\n"
                      "print('READER_DONE')\n")
    got = tmp_path / "got.dump"
    t = tmux_cli(["-p", str(bloomd.port), "dump", "prog", "-", "|", "/usr/bin/python3",
                  str(reader), str(got)], after="; sleep 120")
    t.wait_for(r"^\d+ of %d bytes dumped, \d+\.\d%%, [\d.]+ MB/s$" % len(want), timeout=60)
    s = t.wait_for(r"^READER_DONE$", timeout=TIMEOUT)
    assert "bytes dumped" not in s  # the progress line was cleared
    assert got.read_bytes() == want


# ---- installing ----

def test_install_cli_and_man_page(tmp_path):
    stage = tmp_path / "stage"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    r = subprocess.run(["make", "-C", str(REPO), "--no-print-directory", "install-cli",
                        "DESTDIR=%s" % stage, "PREFIX=/usr/local"], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    binary = stage / "usr/local/bin/bloomd-cli"
    page = stage / "usr/local/share/man/man1/bloomd-cli.1"
    assert binary.exists() and page.exists()
    usage = subprocess.run([str(binary), "--help"], capture_output=True, text=True)
    assert usage.returncode == 0 and usage.stdout.startswith("usage: bloomd-cli")
    lint = subprocess.run(["groff", "-ww", "-man", "-z", str(page)], capture_output=True,
                          text=True)
    assert lint.returncode == 0 and lint.stderr == "", lint.stderr
    man = page.read_text().replace("\\-", "-")
    opts = re.findall(r"^ +(?:-\w, )?(--[a-z-]+)", usage.stdout, re.M)
    assert len(opts) >= 20
    for opt in opts:
        assert opt in man, "%s is not in the man page" % opt
    for word in ("BLOOMD_URL", "BLOOMD_AUTH_TOKEN", ".bloomd_history", "EXIT STATUS"):
        assert word in man
    r = subprocess.run(["make", "-C", str(REPO), "--no-print-directory", "uninstall-cli",
                        "DESTDIR=%s" % stage, "PREFIX=/usr/local"], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0
    assert not binary.exists() and not page.exists()
