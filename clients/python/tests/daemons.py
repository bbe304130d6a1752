"""Real bloomd daemons for the client tests (the fixtures are in conftest.py).

The binary is $BLOOMD_BIN (default <repo>/build/asan/bloomd). Each daemon listens on
127.0.0.1 (port 0 unless a test needs a fixed one) with a temporary data dir and no
snapshot timer; readiness is its "listening on" log line, awaited with a deadline; it is
stopped with SIGTERM and must exit 0.
"""
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests" / "integration"))
from ports import free_port  # noqa: E402,F401  (one free-port rule for every test tree)
BLOOMD_BIN = os.environ.get("BLOOMD_BIN", str(REPO / "build" / "asan" / "bloomd"))
START_DEADLINE = 15.0
STOP_DEADLINE = 15.0
_LISTENING = re.compile(r"listening on [0-9.]+:(\d+)")



TEST_SEED = 0x5EED0FB100D5EED5


class Daemon:
    """One bloomd process; start() and stop() may be repeated (same data dir)."""

    def __init__(self, data_dir: Path, log: Path, args: Sequence[str] = ()) -> None:
        self.args = list(args)  # extra flags, e.g. --auth-token-file
        self.data_dir = data_dir
        self.log = log
        self.port = 0
        self.proc: Optional["subprocess.Popen[bytes]"] = None

    @property
    def url(self) -> str:
        return "bloomd://127.0.0.1:%d" % self.port

    def start(self, port: int = 0) -> None:
        if not os.access(BLOOMD_BIN, os.X_OK):
            pytest.fail("no daemon at %s: run `make build/asan/bloomd` or set BLOOMD_BIN"
                        % BLOOMD_BIN)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        seed = self.data_dir / "SEED"
        if not seed.exists() and os.environ.get("BLOOMD_TEST_SEED") != "random":
            # A fixed hash secret, so each run's false positives are the same (as in
            # tests/integration/conftest.py; BLOOMD_TEST_SEED=random turns it off).
            fd = os.open(seed, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write("%016x\n" % TEST_SEED)
        offset = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [BLOOMD_BIN, "--port", str(port), "--bind", "127.0.0.1",
                 "--data-dir", str(self.data_dir), "--snapshot-interval", "0", *self.args],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        deadline = time.monotonic() + START_DEADLINE
        while time.monotonic() < deadline:
            found = _LISTENING.search(self.log.read_bytes()[offset:].decode("utf-8", "replace"))
            if found:
                self.port = int(found.group(1))
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.kill()
        pytest.fail("bloomd did not start:\n" + self.log.read_text(errors="replace")[-3000:])

    def stop(self) -> int:
        """SIGTERM, wait, return the exit status (the process is killed on timeout)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(STOP_DEADLINE)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail("bloomd did not exit within %s s of SIGTERM" % STOP_DEADLINE)
        finally:
            self.proc = None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

