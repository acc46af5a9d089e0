"""A user's mistake at the command line: a short message on stderr, exit code 2, no traceback, nothing run.

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
    (["plan", "Pendulum-v1"], "needs a Discrete action space"),
    (["check", "CartPole-v1", "--kw", "foo=1"], "unexpected keyword argument 'foo'"),
]


def run_cli(*argv: str) -> subprocess.CompletedProcess:
    code = "import sys; from plan_parallel.cli.main import main; sys.exit(main(sys.argv[1:]))"
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
    assert r.stdout == "", r.stdout  # refused before the planner's line: no worker started, no episode
    if "CartPol-v1" in argv:
        assert time.monotonic() - t0 < 20  # refused before any worker or env was built


TYPOS = [
    (["bnch"], "did you mean 'bench'?"),
    (["bench", "--suite", "proces"], "did you mean 'process'?"),
    (["plan", "CartPole-v1", "--planner", "mtcs"], "did you mean 'mcts'?"),
    (["plan", "CartPole-v1", "--planer", "mcts"], "did you mean --planner?"),
    (["plan", "CartPole-v1", "--episods=2"], "did you mean --episodes?"),
    (["check", "CartPole-v1", "--sed", "3"], "did you mean --seed?"),
    (["check", "CartPole-v1", "--no-progress"], "--no-progress is an option of 'plan', not of 'check'"),
    (["check", "CartPole-v1", "--planner=mcts"], "--planner is an option of 'plan', not of 'check'"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("argv", "says"), TYPOS, ids=[" ".join(a) for a, _ in TYPOS])
def test_a_misspelt_command_choice_or_option_is_answered_with_the_nearest_one(argv: list[str], says: str) -> None:
    r = run_cli(*argv)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stdout == "", r.stderr[-2000:]
    last = r.stderr.strip().splitlines()[-1]
    assert ": error: " in last and last.endswith(says), r.stderr


@pytest.mark.timeout(60)
def test_an_argument_the_subcommand_does_not_know_is_refused_with_the_subcommands_usage() -> None:
    err = run_cli("check", "CartPole-v1", "--no-progress").stderr
    assert err.startswith("usage: plan-parallel check ") and "did you mean --no-progress" not in err, err


@pytest.mark.timeout(60)
def test_a_word_like_no_option_gets_no_suggestion() -> None:
    last = run_cli("plan", "CartPole-v1", "--xyz").stderr.strip().splitlines()[-1]
    assert last.endswith("unrecognized arguments: --xyz"), last


@pytest.mark.timeout(60)
def test_version_and_help_defaults() -> None:
    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"plan-parallel {pp.__version__}"
    h = run_cli("plan", "--help").stdout
    assert "(default: mcts)" in h and "(default: process)" in h and "beam" in h
    assert "(default: None)" not in h and "the env's preset" in h and "the env's time limit" in h


def undescribed(help_text: str) -> list[str]:
    """Options in ``--help`` output with no help text (on their line after two spaces, or on the next line)."""
    lines = help_text.splitlines()
    out = []
    for line, after in zip(lines, [*lines[1:], ""]):
        if line.startswith("  -"):
            same_line = "  " in line.strip()
            next_line = after.startswith("    ") and not after.lstrip().startswith("-")
            if not (same_line or next_line):
                out.append(line.strip())
    return out


@pytest.mark.timeout(60)
def test_every_option_and_suite_is_described() -> None:
    from plan_parallel.cli.bench.suites import SUITES

    for command in ("plan", "check", "bench"):
        h = run_cli(command, "--help").stdout
        assert "  --" in h and undescribed(h) == [], (command, undescribed(h))
    h = run_cli("bench", "--help").stdout
    for suite in SUITES:
        assert f"  {suite}:" in h, (suite, h)
