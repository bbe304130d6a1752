"""Fixtures for the bloomd integration tests: start the real daemon on a free port.

`BLOOMD_BIN` names the binary (the Makefile passes the ASan build). A `Daemon` runs one
bloomd process on a given data dir with extra flags; `start()` waits for its
"listening on <host>:<port>" log line, `stop()` sends SIGTERM and checks exit code 0 and
a clean sanitizer report, `kill()` is a SIGKILL crash, `restart()` stops and starts on the
same data dir. `daemon_factory` makes daemons (extra flags such as a snapshot interval go in
`args`) and checks every run's log at teardown. `Client` speaks the text protocol, with
chunked helpers for many keys.

Each fresh data dir the factory makes gets a fixed hash secret (SEED, `TEST_SEED`), so the
false positives of a test's filters are the same on every run: an assertion that a key
never added reads absent passes or fails every time, never one run in three. A test of the
secret itself asks for `pin_seed=False`; `BLOOMD_TEST_SEED=random` turns pinning off for a
whole run (to look for assertions that only hold for one secret).
"""

import os
import pwd
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BLOOMD_BIN = os.environ.get("BLOOMD_BIN", str(REPO / "build" / "asan" / "bloomd"))
LISTEN_RE = re.compile(r"listening on (\S+):(\d+)")
SANITIZER_MARKS = ("AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer",
                   "runtime error:")
START_TIMEOUT = 30.0  # loading big snapshots under ASan on a busy machine takes a while
STOP_TIMEOUT = 20.0
TEST_SEED = 0x5EED0FB100D5EED5


def write_seed_file(data_dir, seed=TEST_SEED):
    """Writes the data dir's SEED file (as the daemon would: 16 hex digits, mode 0600)."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "SEED"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("%016x\n" % seed)


def read_until_closed(sock, timeout, data=b""):
    """Reads sock until the peer closes (or resets); returns data plus what came."""
    sock.settimeout(timeout)
    while True:
        try:
            chunk = sock.recv(1 << 16)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return data


class Client:
    """A blocking line-oriented connection to bloomd."""

    def __init__(self, host, port, timeout=10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""

    def send(self, data):
        if isinstance(data, str):
            data = data.encode()
        self.sock.sendall(data)

    def line(self):
        """Returns the next reply line without its \\r\\n (raises on EOF or timeout)."""
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("connection closed; buffered %r" % self.buf[:200])
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line.decode("latin-1")

    def cmd(self, request):
        """Sends one request line and returns the one-line reply."""
        self.send(request + "\r\n")
        return self.line()

    def block(self, request):
        """Sends a request answered by lines ending in END; returns them without END."""
        self.send(request + "\r\n")
        lines = []
        while True:
            line = self.line()
            if line == "END":
                return lines
            if not lines and not line.startswith(("STAT ", "FILTER ")):
                return [line]  # an error instead of the block
            lines.append(line)

    def stats(self, request="STATS"):
        """INFO/STATS as a dict of field -> string value (asserts a STAT block came back)."""
        out = {}
        for line in self.block(request):
            assert line.startswith("STAT "), (request, line)
            _, field, value = line.split(" ", 2)
            out[field] = value
        return out

    def names(self, prefix=""):
        """Filter names from LIST [prefix]."""
        return [line.split(" ")[1] for line in self.block(("LIST " + prefix).rstrip())]

    def add(self, name, keys, chunk=500):
        """ADDs many keys, chunk per request; asserts each reply is ADDED."""
        for i in range(0, len(keys), chunk):
            reply = self.cmd("ADD %s %s" % (name, " ".join(keys[i:i + chunk])))
            assert reply.startswith("ADDED"), reply

    def check(self, name, keys, chunk=500):
        """CHECKs many keys, chunk per request; returns one bool per key."""
        out = []
        for i in range(0, len(keys), chunk):
            part = keys[i:i + chunk]
            reply = self.cmd("CHECK %s %s" % (name, " ".join(part)))
            bits = reply.split(" ")
            assert len(bits) == len(part) and set(bits) <= {"0", "1"}, reply[:200]
            out += [b == "1" for b in bits]
        return out

    def read_until_closed(self, timeout=10.0):
        """Reads until the server closes; returns everything received."""
        data, self.buf = self.buf, b""
        return read_until_closed(self.sock, timeout, data)

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Daemon:
    """One bloomd process on data_dir, started with --port 0 unless args give a port."""

    def __init__(self, data_dir, args=(), env=None, log_path=None, binary=BLOOMD_BIN):
        self.data_dir = Path(data_dir)
        self.args = list(args)
        self.env = dict(env or {})
        self.binary = binary
        self.log_path = Path(log_path or (self.data_dir.parent / (self.data_dir.name + ".log")))
        self.proc = None
        self.host = None
        self.port = None
        self._log_start = 0
        self.started = None  # time.monotonic() just before the last start's exec
        self.popen_kw = {}  # e.g. user=, group= to run as another user

    def command(self):
        cmd = [self.binary, "--data-dir", str(self.data_dir)]
        if not any(a == "--port" or a.startswith("--port=") for a in self.args):
            cmd += ["--port", "0"]
        return cmd + self.args

    def start(self, timeout=START_TIMEOUT):
        assert self.proc is None, "already running"
        if not os.access(self.binary, os.X_OK):
            pytest.fail("no daemon at %s: run `make build/asan/bloomd`" % self.binary)
        env = {k: v for k, v in os.environ.items() if not k.startswith("BLOOMD_")}
        env.update(self.env)
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        self.started = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log, env=env, **self.popen_kw)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = LISTEN_RE.search(self.log())
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
                return self
            if self.proc.poll() is not None:
                raise RuntimeError("bloomd exited with %s:\n%s" % (self.proc.returncode,
                                                                   self.log()))
            time.sleep(0.02)
        self.proc.kill()
        self.proc.wait()
        self.proc = None
        raise RuntimeError("bloomd did not start listening within %ss:\n%s"
                           % (timeout, self.log()))

    def log(self):
        """This run's stderr/log output so far."""
        with open(self.log_path, "rb") as f:
            f.seek(self._log_start)
            return f.read().decode("utf-8", "replace")

    def client(self, timeout=10.0):
        return Client(self.host, self.port, timeout)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=STOP_TIMEOUT, check=True):
        """Signals the daemon, waits, and (check) asserts exit 0 and no sanitizer report."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            raise AssertionError("bloomd did not exit within %ss of %s:\n%s"
                                 % (timeout, sig, self.log()))
        self.proc = None
        if check:
            out = self.log()
            assert not any(m in out for m in SANITIZER_MARKS), out
            assert rc == 0, "bloomd exited with %s:\n%s" % (rc, out)
        return rc

    def kill(self):
        """SIGKILL, no checks (a crash)."""
        return self.stop(signal.SIGKILL, check=False)

    def restart(self, args=None, env=None):
        """Stops (checked) and starts again on the same data dir, optionally with new args."""
        self.stop()
        if args is not None:
            self.args = list(args)
        if env is not None:
            self.env = dict(env)
        return self.start()


def nobody_user():
    """For a test run as root that needs a user root's rights do not cover: the passwd entry
    of 'nobody'. Fails when there is no daemon to run; skips, saying why, when there is no
    such user or it cannot reach the daemon's binary."""
    try:
        user = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("running as root and there is no user 'nobody' to drop to")
    if not os.access(BLOOMD_BIN, os.X_OK):
        pytest.fail("no daemon at %s: run `make build/asan/bloomd`" % BLOOMD_BIN)
    if any(not (os.stat(p).st_mode & 0o001) for p in Path(BLOOMD_BIN).parents):
        pytest.skip("%s is not reachable by 'nobody'" % BLOOMD_BIN)
    return user


@pytest.fixture
def daemon_factory(tmp_path):
    """Makes Daemon objects: factory(args=(), env=None, data_dir=None, start=True,
    pin_seed=True). A data dir the factory names itself starts with SEED = TEST_SEED.

    Every daemon still running at the end of the test is stopped and checked, and every
    run's log (runs ended by kill() too) must be free of sanitizer reports.
    """
    made = []

    random_seeds = os.environ.get("BLOOMD_TEST_SEED") == "random"

    def make(args=(), env=None, data_dir=None, start=True, pin_seed=True):
        n = len(made)
        if data_dir is None and pin_seed and not random_seeds:
            write_seed_file(tmp_path / ("data%d" % n))
        d = Daemon(data_dir or tmp_path / ("data%d" % n), args, env,
                   log_path=tmp_path / ("bloomd%d.log" % n))
        made.append((d, d.log_path))
        if start:
            d.start()
        return d

    yield make
    errors = []
    for d, log_path in made:
        try:
            d.stop()
        except AssertionError as e:
            errors.append(str(e))
        for path in {log_path, d.log_path}:
            log = path.read_text(errors="replace") if path.exists() else ""
            if any(m in log for m in SANITIZER_MARKS):
                errors.append("sanitizer report in %s:\n%s" % (path, log[-5000:]))
    assert not errors, "\n".join(errors)


@pytest.fixture
def bloomd(daemon_factory):
    """A running daemon with default options."""
    return daemon_factory()


@pytest.fixture
def client(bloomd):
    """A connection to the default daemon."""
    with bloomd.client() as c:
        yield c


@pytest.fixture
def small_fs(tmp_path):
    """A 6 MB tmpfs (full disks: ENOSPC); skips, saying why, where mount is not allowed."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mnt)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root and CAP_SYS_ADMIN): "
                    + res.stderr.strip())
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
