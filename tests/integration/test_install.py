"""Installing: `make install` into a DESTDIR gives a working binary, a man page that
lints clean and lists every --help option, the example config and a systemd unit with
the installation's paths; `make uninstall` takes them away again. The Python client
installs offline into a fresh venv with the documented command, and with
`make install-python`, and works against the daemon.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO

DEB_PYTHON = "/usr/bin/python3"  # Debian's, not whatever python3 is first on PATH
WHEELS = Path("/usr/share/python-wheels")


def make(*args, timeout=600):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    r = subprocess.run(["make", "-C", str(REPO), "--no-print-directory"] + list(args),
                       env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r


def files_under(root):
    return sorted(str(p.relative_to(root)) for p in Path(root).rglob("*") if not p.is_dir())


def test_install_and_uninstall(tmp_path):
    stage = tmp_path / "stage"
    make("install", "DESTDIR=%s" % stage, "PREFIX=/usr/local")
    usr = stage / "usr" / "local"
    installed = files_under(stage)
    for f in ["usr/local/bin/bloomd", "usr/local/share/man/man1/bloomd.1",
              "usr/local/share/man/man7/bloomd-protocol.7",
              "usr/local/etc/bloomd/bloomd.conf", "usr/local/etc/bloomd/bloomd.conf.example",
              "usr/local/lib/systemd/system/bloomd.service",
              "usr/local/share/doc/bloomd/PROTOCOL.md", "usr/local/share/doc/bloomd/LICENSE"]:
        assert f in installed, installed

    # `bloomd --help` on the PATH, as after a real install.
    env = dict(os.environ, PATH="%s:/usr/bin:/bin" % (usr / "bin"))
    usage = subprocess.run(["bloomd", "--help"], env=env, capture_output=True, text=True)
    assert usage.returncode == 0 and usage.stdout.startswith("usage: bloomd")
    r = subprocess.run(["bloomd", "--version"], env=env, capture_output=True, text=True)
    assert r.stdout.strip() == "bloomd " + re.search(
        r"^VERSION := (\S+)", (REPO / "Makefile").read_text(), re.M).group(1)

    # The man page: no groff warnings, every option of --help documented.
    page = usr / "share" / "man" / "man1" / "bloomd.1"
    lint = subprocess.run(["groff", "-ww", "-man", "-z", str(page)], capture_output=True,
                          text=True)
    assert lint.returncode == 0 and lint.stderr == "", lint.stderr
    text = page.read_text().replace("\\-", "-")
    for opt in re.findall(r"^  (?:-\w, )?(--[a-z-]+)", usage.stdout, re.M):
        assert opt in text, "%s is not in the man page" % opt
    if shutil.which("man"):
        shown = subprocess.run(["man", "-l", str(page)], capture_output=True, text=True,
                               env=dict(os.environ, MANPAGER="cat", MANWIDTH="80"))
        assert shown.returncode == 0 and "EXIT STATUS" in shown.stdout, shown.stderr
    assert "/usr/local/etc/bloomd/bloomd.conf" in text
    # bloomd-protocol(7): lints clean and lists every command HELP lists.
    proto_page = usr / "share" / "man" / "man7" / "bloomd-protocol.7"
    lint = subprocess.run(["groff", "-ww", "-man", "-z", str(proto_page)], capture_output=True,
                          text=True)
    assert lint.returncode == 0 and lint.stderr == "", lint.stderr
    ptext = proto_page.read_text()
    fmt = (REPO / "proto" / "format.c").read_text()
    help_block = fmt[fmt.index("help_lines[]"):fmt.index("};", fmt.index("help_lines[]"))]
    for cmd in re.findall(r'"\(?([A-Z]+) ', help_block) + re.findall(r'"([A-Z]+)",', help_block):
        assert cmd in ptext, "%s is not in bloomd-protocol(7)" % cmd

    unit = (usr / "lib" / "systemd" / "system" / "bloomd.service").read_text()
    assert "@BINDIR@" not in unit and "@SYSCONFDIR@" not in unit, unit
    assert "ExecStart=/usr/local/bin/bloomd --config /usr/local/etc/bloomd/bloomd.conf" in unit
    if shutil.which("systemd-analyze"):
        # verify wants the binary at its real path: install under a private PREFIX.
        prefix = tmp_path / "prefix"
        make("install", "PREFIX=%s" % prefix)
        v = subprocess.run(["systemd-analyze", "verify", "--man=no",
                            str(prefix / "lib" / "systemd" / "system" / "bloomd.service")],
                           capture_output=True, text=True)
        assert v.returncode == 0, v.stderr

    # An edited config survives a reinstall and an uninstall; everything else goes.
    conf = usr / "etc" / "bloomd" / "bloomd.conf"
    conf.write_text("[bloomd]\nport = 9999\n")
    make("install", "DESTDIR=%s" % stage)
    assert conf.read_text() == "[bloomd]\nport = 9999\n"
    make("uninstall", "DESTDIR=%s" % stage)
    assert files_under(stage) == ["usr/local/etc/bloomd/bloomd.conf"]


def use_client(python, daemon, pythonpath=None):
    env = {"PATH": "/usr/bin:/bin"}
    if pythonpath:
        env["PYTHONPATH"] = str(pythonpath)
    code = ("import sys, importlib.metadata as m\n"
            "from bloomd_client import Client\n"
            "assert 'site-packages' in sys.modules['bloomd_client'].__file__ or "
            "'dist-packages' in sys.modules['bloomd_client'].__file__\n"
            "with Client('%s', %d) as c:\n"
            "    assert c.create('venv', capacity=1000)\n"
            "    assert c.checkadd('venv', ['a', 'b', 'a']) == [False, False, True]\n"
            "print(m.version('bloomd-client'))\n" % (daemon.host, daemon.port))
    r = subprocess.run([str(python), "-c", code], env=env, capture_output=True, text=True,
                       cwd="/", timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_python_client_offline_venv(tmp_path, bloomd):
    if not os.access(DEB_PYTHON, os.X_OK):
        pytest.skip("no %s (Debian's python3)" % DEB_PYTHON)
    r = subprocess.run([DEB_PYTHON, "-c", "import ensurepip"], capture_output=True)
    if r.returncode != 0:
        pytest.skip("Debian's python3-venv is not installed")
    missing = [p for p, w in [("python3-setuptools-whl", "setuptools-*.whl"),
                              ("python3-wheel-whl", "wheel-*.whl")] if not list(WHEELS.glob(w))]
    if missing:
        pytest.skip("apt-get install %s (wheels for an offline build)" % " ".join(missing))
    src = tmp_path / "python"  # a copy: the build leaves build/ behind in the tree it reads
    shutil.copytree(REPO / "clients" / "python", src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    venv = tmp_path / "venv"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PIP_CONFIG_FILE": os.devnull}
    for cmd in ([DEB_PYTHON, "-m", "venv", str(venv)],
                # The command clients/python/README.md documents; --no-index: never the net.
                [str(venv / "bin" / "pip"), "install", "--no-index", "--find-links",
                 str(WHEELS), str(src)]):
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert use_client(venv / "bin" / "python", bloomd) == "0.1.0"


def test_make_install_python(tmp_path, bloomd):
    stage = tmp_path / "stage"
    make("install-python", "DESTDIR=%s" % stage, "PREFIX=/usr/local", "PYTHON=%s" % DEB_PYTHON)
    site = list(stage.glob("usr/local/lib/python3.*/dist-packages"))
    assert len(site) == 1, files_under(stage)
    assert use_client(DEB_PYTHON, bloomd, pythonpath=site[0]) == "0.1.0"
    make("uninstall-python", "DESTDIR=%s" % stage, "PREFIX=/usr/local", "PYTHON=%s" % DEB_PYTHON)
    assert files_under(stage) == []
