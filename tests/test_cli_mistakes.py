"""A user's mistake at the command line: a short message on stderr, exit code 2, no traceback, no worker started.

Each case runs the real ``plan-parallel`` entry point in a subprocess.
"""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

import plan_parallel as pp

CASES = [
    (["plan", "CartPol-v1"], "Did you mean: `CartPole`?"),
    (["check", "CartPol-v1"], "Did you mean: `CartPole`?"),
    (["plan", "CartPole-v9"], "versioned environments"),
    (["plan", "CartPole-v1", "--kw", "foo=1", "--backend", "inline"], "unexpected keyword argument 'foo'"),
    (["plan", "CartPole-v1", "--kw", "foo=1"], "unexpected keyword argument 'foo'"),
    (["plan", "CartPole-v1", "--kw", "oops"], "key=value"),
    (["plan", "CartPole-v1", "--episodes", "0"], "--episodes must be >= 1"),
    (["plan", "CartPole-v1", "--planner", "beam", "--leaves", "4"], "--leaves does not apply to --planner beam"),
    (["plan", "Pendulum-v1", "--backend", "inline"], "needs a Discrete action space"),
]


def run_cli(*argv: str) -> subprocess.CompletedProcess:
    code = "import sys; from plan_parallel.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)


@pytest.mark.timeout(150)
@pytest.mark.parametrize(("argv", "says"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_a_mistake_is_one_short_line(argv: list[str], says: str) -> None:
    t0 = time.monotonic()
    r = run_cli(*argv)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    errors = [line for line in r.stderr.splitlines() if line.startswith("plan-parallel: error:")]
    assert len(errors) == 1 and says in errors[0], r.stderr
    assert len(r.stderr.splitlines()) <= 2, r.stderr
    if "CartPol-v1" in argv:
        assert time.monotonic() - t0 < 20  # refused before any worker or env was built


@pytest.mark.timeout(60)
def test_version_and_help_defaults() -> None:
    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"plan-parallel {pp.__version__}"
    h = run_cli("plan", "--help").stdout
    assert "(default: mcts)" in h and "(default: process)" in h and "beam" in h
