"""The ``plan-parallel`` command: ``plan`` (run a planner), ``check`` (clonability report) and ``bench`` (throughput)."""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from plan_parallel.cli.args import parse_env_kwargs, probe_env
from plan_parallel.cli.parser import Parser

__all__ = ["build_parser", "main"]


def _cmd_check(args: argparse.Namespace) -> int:
    from plan_parallel.state.check import check_clonable

    for env_id in args.env:  # every id and the kwargs, before the first check runs
        probe_env(env_id, args.kw)
    kwargs = parse_env_kwargs(args.kw)
    code = 0
    for env_id in args.env:
        report = check_clonable(
            env_id, seed=args.seed, steps=args.steps, fresh_process=not args.no_fresh_process, **kwargs
        )
        print(report, flush=True)
        code = code or (0 if report.ok else 1)
    return code


def _cmd_bench(args: argparse.Namespace) -> int:
    from plan_parallel.cli.bench.suites import run_bench

    return run_bench(args)


def _cmd_plan(args: argparse.Namespace) -> int:
    from plan_parallel.cli.plan import run_plan

    return run_plan(args)


_BENCH_SUITES = """\
suites (--suite; all runs each, in this order):
  inline:  the inline backend against a hand-written loop of gymnasium calls and
           the family's native state calls
  process: the process backend (--workers workers) against inline, and
           gymnasium's AsyncVectorEnv as a reference
  latency: small calls (2 CartPole items, every batch on the workers):
           step_batch and make_vec against gymnasium's AsyncVectorEnv, wall
           and CPU per call on each side
  rollout: rollout_batch (each item's sequence in one worker) against one
           step_batch call per depth
  vector:  make_vec against gymnasium's SyncVectorEnv and AsyncVectorEnv
  mcts:    MCTS decisions/s on Pong, inline against the process backend; then
           8 roots in one plan_many on W workers against 8 single-root
           searches inline (Pong, CartPole, an env whose steps sleep: W 1-32)
  scale:   W workers (1-64) on an env whose steps sleep: speedup, efficiency and
           the calling process's CPU an item and a call; and each real env's
           Amdahl bound (workers' CPU an item ÷ the caller's)
  ray:     the Ray backend (--workers actors) against inline and the process
           backend (skipped without Ray)
Every figure is the median of --repeats alternating runs; ratios compare runs
made side by side."""


class _DefaultsFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Defaults in ``--help``, except an unset option's (None, off, empty): its help says what unset means."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or action.default == []:
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    from plan_parallel import __version__

    p = Parser(prog="plan-parallel", description="Parallel (state, action, dt) rollouts of gymnasium envs.")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    from plan_parallel.cli.plan import add_plan_arguments

    pl = sub.add_parser("plan", formatter_class=_DefaultsFormatter,
                        help="run a planner (MCTS, random shooting, beam search) on an env; report returns and speed")
    add_plan_arguments(pl)
    pl.set_defaults(func=_cmd_plan)

    c = sub.add_parser("check", formatter_class=_DefaultsFormatter, help="prove or refute bit-identical replay from saved states")
    c.add_argument("env", nargs="+", help="gymnasium env id(s), e.g. CartPole-v1 ALE/Pong-v5")
    c.add_argument("--kw", action="append", default=[], metavar="KEY=VALUE", help="env kwarg (repeatable)")
    c.add_argument("--seed", type=int, default=0, help="reset seed of the checked episodes (others derive from it)")
    c.add_argument("--steps", type=int, default=32, help="length of the replayed action sequence")
    c.add_argument("--no-fresh-process", action="store_true", help="skip the check in a new process")
    c.set_defaults(func=_cmd_check)

    from plan_parallel.cli.bench.suites import add_bench_arguments

    b = sub.add_parser("bench", formatter_class=_DefaultsFormatter,
                       help="throughput of the backends against a hand-written loop",
                       description=_BENCH_SUITES)
    add_bench_arguments(b)
    b.set_defaults(func=_cmd_bench)
    return p


def _frames_offscreen() -> None:
    """Frames rendered only to a file (``--record``) with no display: SDL (pygame) gets its dummy video
    driver, whose start prints nothing (its probe of a display printed ``error: XDG_RUNTIME_DIR is invalid
    or not set``). The command's own process only; a driver the user chose stays."""
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; a user's mistake is one line on stderr and exit code 2, Ctrl-C exit code 130."""
    import gymnasium as gym

    args = build_parser().parse_args(argv)
    if getattr(args, "record", None) is not None:
        _frames_offscreen()
    try:
        return int(args.func(args))
    except (ValueError, gym.error.Error) as e:
        print(f"plan-parallel: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("plan-parallel: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
