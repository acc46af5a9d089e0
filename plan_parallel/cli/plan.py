"""``plan-parallel plan``: run a planner on an env, with a progress bar, a summary and an optional recording."""
from __future__ import annotations

import argparse
import math
import os
import statistics
from collections.abc import Sequence
from typing import Any

from plan_parallel.cli.args import parse_env_kwargs, probe_env

__all__ = ["add_plan_arguments", "episode_end", "run_plan", "save_animation", "summarize"]

# option -> planner -> its parameter (an option a planner lacks is refused for it)
_OPTIONS = {
    "budget": {"mcts": "budget", "shooting": "budget", "beam": "width"},
    "dt": {"mcts": "dt", "shooting": "dt", "beam": "dt"},
    "depth": {"mcts": "rollout_depth", "shooting": "horizon", "beam": "depth"},
    "discount": {"mcts": "discount", "shooting": "discount", "beam": "discount"},
    "leaves": {"mcts": "leaves_per_batch"},
    "exploration": {"mcts": "exploration"},
    "iterations": {"shooting": "iterations"},
}
_ANIMATION_SUFFIXES = (".gif", ".mp4")


def add_plan_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = ("A planner option left unset takes the env's preset (CartPole-v1, Acrobot-v1,\n"
                "MountainCar-v0, Pendulum-v1, HalfCheetah-v5, ALE/Pong-v5, ALE/Breakout-v5,\n"
                "ALE/Freeway-v5; the reason for each value: plan_parallel.planners.presets.REASONS),\n"
                "else the planner's default; the first line printed shows the values used.")
    p.add_argument("env", help="gymnasium env id, e.g. CartPole-v1, MountainCar-v0, ALE/Pong-v5")
    p.add_argument("--planner", choices=["mcts", "shooting", "beam"], default="mcts",
                   help="mcts (UCT tree search), shooting (random shooting / CEM) or beam (beam search)")
    p.add_argument("--budget", type=int,
                   help="simulations (mcts) or sequences (shooting) per decision, or beam width (beam) "
                        "(default: the env's preset, else the planner's)")
    p.add_argument("--workers", type=int, default=2, help="worker processes (process and ray backends)")
    p.add_argument("--backend", choices=["inline", "process", "ray"], default="process",
                   help="where the items run: this process, worker processes, or Ray actors")
    p.add_argument("--episodes", type=int, default=1,
                   help="episodes to plan, played together: each round one search batch over all of them")
    p.add_argument("--sequential", action="store_true",
                   help="play the episodes one after the other (same results, one root per search batch)")
    p.add_argument("--seed", type=int, default=0, help="episode e uses seed + e (env reset and planner)")
    p.add_argument("--max-steps", type=int,
                   help="stop an episode after this many env steps (default: the env's time limit)")
    p.add_argument("--dt", type=int, help="action repeat: env steps per decision and per tree/rollout step")
    p.add_argument("--depth", type=int, help="rollout depth (mcts), horizon (shooting) or depth (beam), in dt steps")
    p.add_argument("--leaves", type=int, help="mcts: leaves expanded and rolled out per batch")
    p.add_argument("--exploration", type=float, help="mcts: UCT exploration constant")
    p.add_argument("--iterations", type=int, help="shooting: CEM rounds per decision (1: random shooting)")
    p.add_argument("--discount", type=float, help="per dt steps, in (0, 1]")
    p.add_argument("--kw", action="append", default=[], metavar="KEY=VALUE", help="env kwarg (repeatable)")
    p.add_argument("--record", metavar="FILE", help="save the first episode as an animation (.gif or .mp4)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _planner_params(args: argparse.Namespace) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for option, names in _OPTIONS.items():
        value = getattr(args, option)
        if value is None:
            continue
        if args.planner not in names:
            raise ValueError(f"--{option} does not apply to --planner {args.planner}")
        params[names[args.planner]] = value
    return params


def _check_args(args: argparse.Namespace) -> None:
    for name in ("workers", "episodes"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.seed < 0:
        raise ValueError(f"--seed must be >= 0, got {args.seed}")
    if args.max_steps is not None and args.max_steps < 1:
        raise ValueError(f"--max-steps must be >= 1, got {args.max_steps}")
    if args.record is not None:
        suffix = os.path.splitext(args.record)[1].lower()
        if suffix not in _ANIMATION_SUFFIXES:
            raise ValueError(f"--record must name a {' or '.join(_ANIMATION_SUFFIXES)} file, got {args.record!r}")
        _animation_writer(suffix)


def _animation_writer(suffix: str) -> Any:
    """The imageio module able to write ``suffix``; a clear error naming the extra to install."""
    try:
        import imageio
    except ImportError as e:
        raise ValueError("--record needs imageio: pip install 'plan_parallel[record]'") from e
    if suffix == ".mp4":
        try:
            import imageio_ffmpeg  # noqa: F401
        except ImportError as e:
            raise ValueError("--record FILE.mp4 needs imageio-ffmpeg: pip install 'plan_parallel[record]'") from e
    return imageio


def save_animation(path: str, frames: Sequence[Any], fps: float) -> None:
    """Write RGB frames (H, W, 3 uint8) to a looping GIF or an MP4, chosen by the file suffix."""
    suffix = os.path.splitext(path)[1].lower()
    imageio = _animation_writer(suffix)
    fps = min(50.0, max(1.0, fps))
    if suffix == ".gif":
        imageio.v3.imwrite(path, list(frames), extension=".gif", duration=1000.0 / fps, loop=0)
    else:
        imageio.v2.mimwrite(path, list(frames), fps=fps, macro_block_size=1)


def episode_end(ep: Any) -> str:
    """How an episode ended, in the summary's ``end`` column.

    A step can terminate and reach the time limit at once (e.g. CartPole's pole or cart
    leaving its range on step 500): that is ``term+trunc``, not ``terminated``.
    """
    if ep.terminated and ep.truncated:
        return "term+trunc"
    return "terminated" if ep.terminated else "truncated" if ep.truncated else "max-steps"


def summarize(episodes: Sequence[Any], wall_seconds: float | None = None, env_seconds: float | None = None) -> str:
    """A table of the episodes (return, steps, decisions, end, speed) and their means.

    ``wall_seconds`` and ``env_seconds``: the whole run's, for episodes played
    together (their times overlap); default the sums of the episodes', right when
    they ran one after the other.
    """
    rows = ["episode  seed    return  steps  decisions  end         seconds  decisions/s  transitions/s  env calls"]
    for i, ep in enumerate(episodes):
        end = episode_end(ep)
        rows.append(
            f"{i:7d}  {ep.seed!s:>4}  {ep.episode_return:8.1f}  {ep.steps:5d}  {ep.decisions:9d}  {end:10s}  "
            f"{ep.wall_seconds:7.1f}  {ep.decisions_per_second:11.1f}  {ep.transitions_per_second:13,.0f}  "
            f"{ep.env_share:9.0%}"
        )
    if any(ep.terminated and ep.truncated for ep in episodes):
        rows.append("term+trunc: the last step both ended the episode and reached the time limit (gymnasium says both)")
    blind = _blind_searches(episodes)
    if blind:
        rows.append(blind)
    returns = [ep.episode_return for ep in episodes]
    wall = sum(ep.wall_seconds for ep in episodes) if wall_seconds is None else wall_seconds
    env_s = sum(ep.env_seconds for ep in episodes) if env_seconds is None else env_seconds
    spread = statistics.stdev(returns) if len(returns) > 1 else 0.0
    share = min(1.0, env_s / wall) if wall else 0.0
    rows.append(
        f"mean return {statistics.fmean(returns):.1f} ± {spread:.1f} over {len(episodes)} episode(s); "
        f"{sum(ep.decisions for ep in episodes) / wall if wall else 0:.1f} decisions/s, "
        f"{sum(ep.transitions for ep in episodes) / wall if wall else 0:,.0f} transitions/s; "
        f"time in env calls {share:.0%}, in the planner {1 - share:.0%}"
    )
    return "\n".join(rows)


def _ended(ep: Any, max_steps: int | None) -> bool:
    return bool(ep.terminated or ep.truncated or (max_steps is not None and ep.steps >= max_steps))


def _blind_searches(episodes: Sequence[Any]) -> str:
    """A line on the decisions whose search saw no reward at all (every simulation returned 0), or ''."""
    shares = [s["zero_return_share"] for ep in episodes for s in ep.search if "zero_return_share" in s]
    blind = sum(z == 1.0 for z in shares)
    if not blind:
        return ""
    deepest = max((s.get("lookahead", 0) for ep in episodes for s in ep.search), default=0)
    return (f"{blind} of {len(shares)} decisions ({blind / len(shares):.0%}) saw no reward in any rollout (mean share "
            f"of zero-return rollouts {statistics.fmean(shares):.2f}, looking at most {deepest} env steps ahead): "
            "such a search cannot tell the actions apart; a larger --depth or --dt looks further")


def run_plan(args: argparse.Namespace) -> int:
    """Run ``args.episodes`` planned episodes (together unless ``--sequential``) and print the summary.

    Returns the exit code (130 after Ctrl-C, with the summary of the episodes that ended).
    """
    import time

    from gymnasium import spaces
    from tqdm import tqdm

    import plan_parallel as pp
    from plan_parallel.planners import run_episodes
    from plan_parallel.planners.presets import make_planner

    _check_args(args)
    env_kwargs = parse_env_kwargs(args.kw)
    try:
        planner = make_planner(args.planner, args.env, **_planner_params(args))
    except TypeError as e:
        raise ValueError(str(e)) from e
    action_space = probe_env(args.env, args.kw)  # the id and kwargs tried here, before any worker starts
    if args.planner in ("mcts", "beam") and not isinstance(action_space, spaces.Discrete):
        raise ValueError(f"{args.planner} needs a Discrete action space, {args.env} has {action_space}; "
                         "try --planner shooting")
    n_workers = None if args.backend == "inline" else args.workers
    workers = "" if n_workers is None else f", workers={n_workers}"
    how = "one after the other" if args.sequential or args.episodes == 1 else "together"
    print(f"{planner} on {args.env}, backend={args.backend}{workers}; {args.episodes} episode(s) {how}", flush=True)
    seeds = [args.seed + k for k in range(args.episodes)]
    seen: dict[int, Any] = {}  # seed -> its episode so far
    env = pp.make(args.env, backend=args.backend, n_workers=n_workers, **env_kwargs)
    with env:
        live = None
        if args.record is not None:
            live = pp.make(args.env, backend="inline", render_mode="rgb_array", **env_kwargs)
        try:
            limit = args.max_steps or getattr(env.spec, "max_episode_steps", None)
            cap = math.ceil(limit / planner.dt) if limit else None  # decisions an episode may take
            last = seeds[0] if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]}"
            bar = tqdm(total=cap * len(seeds) if cap else None, desc=f"{len(seeds)} episode(s), seed {last}", unit="decision",
                       disable=args.no_progress)
            frames: list[Any] = []

            def on_decision(ep: Any) -> None:
                seen[ep.seed] = ep
                if live is not None and ep.seed == seeds[0]:  # the live env is at this episode's state now
                    frames.append(live.gym_env.render())
                if ep.decisions:
                    bar.update(1)
                    if _ended(ep, args.max_steps) and cap and bar.total is not None:
                        bar.total -= cap - ep.decisions  # the decisions it will not take
                    done = [e for e in seen.values() if _ended(e, args.max_steps)]
                    bar.set_postfix(running=len(seen) - len(done),
                                    ret=f"{statistics.fmean(e.episode_return for e in seen.values()):.1f}",
                                    refresh=False)

            mark, t0 = planner.meter.mark(), time.perf_counter()
            try:
                with bar:
                    episodes = run_episodes(planner, env, seeds=seeds, max_steps=args.max_steps, live_env=live,
                                            callback=on_decision, together=not args.sequential)
            except KeyboardInterrupt:
                done = [ep for ep in seen.values() if _ended(ep, args.max_steps)]
                print("interrupted" + (": the episodes that ended" if done else ""), flush=True)
                if done:
                    print(summarize(done), flush=True)
                return 130
            wall = time.perf_counter() - t0
            planner_env_s = planner.meter.since(mark)["env_seconds"]
            if live is not None:
                fps = live.gym_env.metadata.get("render_fps") or 30
                save_animation(args.record, frames, fps / planner.dt)
                print(f"recorded episode 0 ({len(frames)} frames) to {args.record}")
        finally:
            if live is not None:
                live.close()
    if args.sequential or len(episodes) == 1:
        print(summarize(episodes), flush=True)
    else:
        print(summarize(episodes, wall_seconds=wall, env_seconds=planner_env_s), flush=True)
    return 0
