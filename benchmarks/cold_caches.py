"""What a small call costs right after a pause of this process: a developers' measurement (issue 52).

Times an inline ``step_batch`` of 2 CartPole items run right after each gap of ``--gaps`` milliseconds in
which this process spun on the clock (touching nothing of the call's code and data); gap 0 is the call back
to back with itself. It explains a worker call's round trip, not what a user's machine can do: a worker call
runs this way on both sides (the worker slept until the call came, and the caller's reply path waited for
the worker), so each side pays the caches' refill. That is why the execution policy runs small batches in
the calling process by default (``docs/guides/performance.md``, ``docs/measurements.md``).

On the project's shared 2-core VM the same call took 38 us back to back, 73 us after 0.3 ms and 258 us after
3 ms in one run, 25, 29 and 76 us in another (spinning or sleeping alike): the call's code and data leave the
caches while other tenants' work runs, more or less of it by the minute.

It was the last line of ``plan-parallel bench --suite process`` until issue 54 moved it here: a user sizing
a machine reads the suites' throughput, not this. Run it from the repository (plan_parallel installed)::

    python benchmarks/cold_caches.py                 # gaps 0, 0.3 and 3 ms, 300 calls each (~1.5 s)
    python benchmarks/cold_caches.py --calls 50 --gaps 0 2
"""
from __future__ import annotations

import argparse
import statistics
import time

import plan_parallel as pp
from plan_parallel.cli.bench.common import make_workload

__all__ = ["GAPS", "cold_work", "main"]

GAPS = (0.0, 3e-4, 3e-3)  # seconds of other work before each timed call


def cold_work(gaps: tuple[float, ...] = GAPS, calls: int = 300) -> list[float]:
    """Median seconds of an inline ``step_batch`` of 2 CartPole items run right after each gap of ``gaps``
    seconds of spinning on the clock (``calls`` timed calls a gap)."""
    env = pp.make("CartPole-v1", backend="inline")
    try:
        states, actions = make_workload(env, 2)
        out = []
        for gap in gaps:
            times = []
            for _ in range(calls):
                end = time.perf_counter() + gap
                while time.perf_counter() < end:
                    pass
                t0 = time.perf_counter()
                env.step_batch(actions, states, 1)
                times.append(time.perf_counter() - t0)
            out.append(statistics.median(times))
        return out
    finally:
        env.close()


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--calls", type=int, default=300, help="timed calls a gap (median)")
    p.add_argument("--gaps", type=float, nargs="+", default=[g * 1e3 for g in GAPS], help="milliseconds of other work")
    args = p.parse_args(argv)
    gaps = tuple(g / 1e3 for g in args.gaps)
    line = ("the same work after a pause (the caches forget it): an inline step_batch of 2 CartPole items takes "
            + ", ".join(f"{t * 1e6:.0f} us " + (f"after {g * 1e3:g} ms of other work" if g else "back to back")
                        for g, t in zip(gaps, cold_work(gaps, args.calls))))
    print(line, flush=True)
    return line


if __name__ == "__main__":
    main()
