"""Configuration: precedence flags > environment > file > defaults, and clear errors."""

import subprocess

import pytest

from conftest import BLOOMD_BIN, Daemon


def run(args, env=None, timeout=10):
    return subprocess.run([BLOOMD_BIN] + args, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_version_and_help():
    r = run(["--version"])
    assert r.returncode == 0 and r.stdout.startswith("bloomd ")
    r = run(["--help"])
    assert r.returncode == 0
    for opt in ("--port", "--bind", "--data-dir", "--config", "--snapshot-interval",
                "--max-connections", "--max-line", "--max-memory", "--log-level"):
        assert opt in r.stdout


@pytest.mark.parametrize("args,env,option", [
    (["--port", "70000"], {}, "port"),
    (["--port", "abc"], {}, "port"),
    (["--max-memory", "12Q"], {}, "max_memory"),
    (["--log-level", "loud"], {}, "log_level"),
    (["--max-connections", "0"], {}, "max_connections"),
    (["--no-such-option", "1"], {}, "no-such-option"),
    ([], {"BLOOMD_PORT": "-1"}, "port"),
    ([], {"BLOOMD_MAX_LINE": "1x"}, "max_line"),
    (["--port"], {}, "--port"),
])
def test_bad_values_stop_startup(tmp_path, args, env, option):
    r = run(args + ["--data-dir", str(tmp_path / "d")], env=env)
    assert r.returncode == 2
    assert option in r.stderr, r.stderr
    assert not (tmp_path / "d").exists()


def test_bad_config_file(tmp_path):
    conf = tmp_path / "bad.conf"
    conf.write_text("[bloomd]\nport = 1\nmax_line = huge\n")
    r = run(["--config", str(conf)])
    assert r.returncode == 2 and "max_line" in r.stderr and "line 3" in r.stderr, r.stderr
    r = run(["--config", str(tmp_path / "missing.conf")])
    assert r.returncode == 2 and "missing.conf" in r.stderr
    conf.write_text("colour = blue\n")
    r = run(["--config", str(conf)])
    assert r.returncode == 2 and "colour" in r.stderr


def test_precedence(tmp_path):
    conf = tmp_path / "bloomd.conf"
    conf.write_text("[bloomd]\nmax_connections = 3\nidle_timeout = 7\n"
                    "default_capacity = 1234\ndefault_error = 0.2\n")
    # file only
    d = Daemon(tmp_path / "a", ["--config", str(conf)], log_path=tmp_path / "a.log").start()
    try:
        with d.client() as c:
            assert c.cmd("CREATE f") == "CREATED"
            info = c.stats("INFO f")
            assert info["capacity"] == "1234" and float(info["error"]) == pytest.approx(0.2)
    finally:
        d.stop()
    # environment beats file, flags beat environment
    env = {"BLOOMD_CONFIG": str(conf), "BLOOMD_DEFAULT_CAPACITY": "555",
           "BLOOMD_DEFAULT_ERROR": "0.3"}
    d = Daemon(tmp_path / "b", ["--default-error", "0.05"], env=env,
               log_path=tmp_path / "b.log").start()
    try:
        with d.client() as c:
            assert c.cmd("CREATE f") == "CREATED"
            info = c.stats("INFO f")
            assert info["capacity"] == "555"  # env over file
            assert float(info["error"]) == pytest.approx(0.05)  # flag over env
        # max_connections = 3 came from the file named by BLOOMD_CONFIG
        held = [d.client() for _ in range(3)]
        with d.client() as extra:
            assert extra.read_until_closed() == b"SERVER_ERROR too many connections\r\n"
        for c in held:
            c.close()
    finally:
        d.stop()


def test_data_dir_created(tmp_path, daemon_factory):
    d = daemon_factory(data_dir=tmp_path / "x" / "y" / "z")
    assert d.data_dir.is_dir()


def test_ping(daemon_factory, tmp_path):
    d = daemon_factory()
    r = run(["--ping", "--port", str(d.port)])
    assert r.returncode == 0, r.stderr
    r = run(["--ping"], env={"BLOOMD_PORT": str(d.port), "BLOOMD_BIND": "127.0.0.1"})
    assert r.returncode == 0, r.stderr
    d.stop()
    r = run(["--ping", "--port", str(d.port)])
    assert r.returncode == 1


def test_log_file_and_sighup(daemon_factory, tmp_path):
    import os
    import signal
    import time
    log = tmp_path / "bloomd.log"
    d = daemon_factory(["--log-file", str(log), "--log-level", "debug"], start=False)
    d.log_path = log  # the readiness line goes to the log file
    d.start()
    with d.client() as c:
        assert c.cmd("VERSION").startswith("VERSION ")
    os.rename(log, tmp_path / "bloomd.log.1")
    d.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 5
    while not log.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "reopened" in log.read_text()
    assert "connection from" in (tmp_path / "bloomd.log.1").read_text()


def test_sigint_exits_zero(daemon_factory):
    import signal
    d = daemon_factory()
    with d.client() as c:
        assert c.cmd("CREATE f") == "CREATED"
        assert d.stop(signal.SIGINT) == 0


def test_port_in_use_fails_cleanly(daemon_factory, tmp_path):
    d = daemon_factory()
    r = run(["--port", str(d.port), "--data-dir", str(tmp_path / "other")])
    assert r.returncode == 1
    assert "listen on 127.0.0.1:%d" % d.port in r.stderr, r.stderr
    with d.client() as c:
        assert c.cmd("VERSION").startswith("VERSION ")


def test_unusable_log_file_or_data_dir(tmp_path):
    r = run(["--port", "0", "--log-file", str(tmp_path / "no" / "such" / "dir" / "log")])
    assert r.returncode == 2 and "log_file" in r.stderr, r.stderr
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    r = run(["--port", "0", "--data-dir", str(blocker)])
    # Checked before start-up (server/persist/datadir.c), like every other unusable setting: 2.
    assert r.returncode == 2 and "data directory" in r.stderr, r.stderr


def test_sigterm_with_busy_clients_exits_promptly(daemon_factory):
    import time
    d = daemon_factory()
    idle = [d.client() for _ in range(100)]
    with d.client() as busy:
        assert busy.cmd("CREATE f") == "CREATED"
        busy.send("CHECK f a b c\r\n" * 20000)  # unread replies pile up
        t0 = time.monotonic()
        assert d.stop() == 0
        assert time.monotonic() - t0 < 5
    for c in idle:
        assert c.read_until_closed(timeout=5) == b""
        c.close()


def test_unknown_env_warned_one_line_each(daemon_factory):
    """Issue 27: a typo in a container's environment is named at start-up, one WARN line
    per unknown BLOOMD_ variable, with the option it is nearest to; the daemon starts."""
    d = daemon_factory(env={"BLOOMD_MAX_MEMROY": "1G", "BLOOMD_FROBNICATE": "1",
                            "BLOOMD_SNAPSHOT_INTERVL": "5", "BLOOMD_DEFAULT_CAPACITY": "777"})
    lines = [ln for ln in d.log().splitlines() if "unknown environment variable" in ln]
    assert len(lines) == 3, lines
    assert all(" WARN " in ln for ln in lines), lines
    by_var = {ln.split("unknown environment variable ")[1].split(" ")[0]: ln for ln in lines}
    assert by_var["BLOOMD_MAX_MEMROY"].endswith("did you mean BLOOMD_MAX_MEMORY?")
    assert by_var["BLOOMD_SNAPSHOT_INTERVL"].endswith("did you mean BLOOMD_SNAPSHOT_INTERVAL?")
    assert "did you mean" not in by_var["BLOOMD_FROBNICATE"]
    with d.client() as c:  # the known one still applies
        assert c.cmd("CREATE f") == "CREATED"
        assert c.stats("INFO f")["capacity"] == "777"
