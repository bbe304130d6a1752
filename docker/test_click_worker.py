"""click_worker.py's input checks (no daemon needed): bad options and bad event lines
give a clear error instead of a silent empty run or a traceback.

    /usr/bin/python3 -m pytest -q docker/test_click_worker.py
"""
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "clients" / "python" / "src")]

from click_worker import demo_clicks, read_clicks  # noqa: E402


def run_worker(*args: str, stdin: str = "") -> "subprocess.CompletedProcess[str]":
    env = {"PYTHONPATH": str(HERE.parent / "clients" / "python" / "src"),
           "BLOOMD_URL": "bloomd://127.0.0.1:1"}
    return subprocess.run([sys.executable, str(HERE / "click_worker.py"), *args], env=env,
                          input=stdin, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("args", [["--batch", "0"], ["--batch", "-5"], ["--demo", "0"]])
def test_non_positive_counts_are_usage_errors(args: List[str]) -> None:
    run = run_worker(*args)
    assert run.returncode == 2 and "must be >= 1" in run.stderr


def test_read_clicks_names_the_bad_line() -> None:
    good = '{"click_id": "a"}\n\n{"click_id": 7, "ad": "x"}\n'
    assert list(read_clicks(good.splitlines(True))) == [{"click_id": "a"},
                                                        {"click_id": 7, "ad": "x"}]
    for bad, why in [('{"click_id": "a"}\nnot json\n', "line 2: not JSON"),
                     ('{"ad": "x"}\n', "line 1: not an object with a click_id"),
                     ('[1, 2]\n', "line 1: not an object with a click_id")]:
        with pytest.raises(ValueError, match=why):
            list(read_clicks(bad.splitlines(True)))


def test_demo_clicks_repeat_about_one_in_five() -> None:
    ids = [e["click_id"] for e in demo_clicks(10_000, 7)]
    assert ids == [e["click_id"] for e in demo_clicks(10_000, 7)]
    assert 0.15 < 1 - len(set(ids)) / len(ids) < 0.25
