"""The execution policy: where and how fast batches run, in one printable object.

:class:`ExecutionPolicy` owns every such decision of a :class:`~plan_parallel.batch.batch_env.BatchEnv`
(and so of :func:`plan_parallel.make_vec`, which runs on one): the worker count, where a batch runs
(in this process or on the workers), and any setting of the host (CPU pinning, the workers' scheduling
policy, the calling thread's affinity). The defaults change nothing outside the library; the tuned
settings measured on one 2-core machine are one opt-in profile, :meth:`ExecutionPolicy.tuned`
(``docs/measurements.md`` holds what each gained there).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from plan_parallel.workers.cores import available_cpus

__all__ = ["HERE_BELOW_SECONDS", "MAX_CHUNKS_PER_WORKER", "PLACEMENTS", "ExecutionPolicy"]

#: The default threshold of the ``"rule"`` placement, the cost of a call to the workers: a batch for which they
#: would save less time than this runs in the calling process. A call of 2 tiny items on process workers costs the
#: caller 0.3-0.7 ms of wall time and 0.2-0.4 ms of CPU (``plan-parallel bench --suite process``, 2-core VM).
HERE_BELOW_SECONDS = 1e-3
#: Where batches run: ``"rule"`` (the default: see :class:`ExecutionPolicy`), ``"workers"`` (every batch),
#: ``"here"`` (every batch in the calling process: for debugging) or ``"adaptive"`` (measured: the tuned profile).
PLACEMENTS = ("rule", "workers", "here", "adaptive")
#: The default of ``max_chunks_per_worker``: chunks a worker at most, for balance.
MAX_CHUNKS_PER_WORKER = 3


def _check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")


@dataclass(frozen=True, repr=False)
class ExecutionPolicy:
    """Where and how fast a :class:`~plan_parallel.batch.batch_env.BatchEnv`'s batches run.

    Pass one to :func:`plan_parallel.make` or :func:`plan_parallel.make_vec` as ``execution=``;
    ``env.execution`` is the one in force, with its worker count filled in. Its ``repr`` says what it does.

    Args:
        n_workers: worker processes (or Ray actors). None: the CPUs this process may use
            (:func:`~plan_parallel.workers.cores.available_cpus`: its affinity, its container's CPU quota, or
            the ``PLAN_PARALLEL_WORKERS`` environment variable).
        placement: where a batch runs; one of :data:`PLACEMENTS`. ``"rule"`` (default): a batch its caller
            waits for runs in the calling process when the time W workers would save it, its env time times
            (1 - 1/W), is under ``here_below`` seconds (its env time estimated from the workers' own measured
            time per env step); any other batch runs on the workers, and so does every batch until they have
            measured a step, with a ``timeout``, on workers on other machines, and every ``*_async`` future.
            With one worker nothing is saved: such batches run here.
            ``"workers"``: every batch on the workers (for env code that may crash or hang the calling
            process). ``"here"``: every batch in the calling process. ``"adaptive"``: each batch where the
            times measured of earlier ones say it runs fastest (here, on the workers, or shared between
            them): the choice depends on timings, so it may change from run to run. Both build the env in
            the calling process (on a Ray cluster, the driver then needs the env's dependencies).
        here_below: the ``"rule"`` placement's threshold: what a call to the workers costs, in seconds.
        pin_workers: (process) keep worker i on the i-th CPU this process may use.
        batch_scheduling: (process) run the workers under Linux's ``SCHED_BATCH`` policy (a woken worker
            waits for a free core instead of preempting the calling process).
        move_caller: (process, with ``pin_workers``) while the calling thread blocks for replies, move it
            off the cores of the workers in flight (its affinity is narrowed, then restored).
        max_chunks_per_worker: a batch on the workers is split in one chunk a worker, or up to this many when
            each still holds 10 ms of env time (250 ms on Ray) and writing them all costs this process under
            5 % of a worker's part: more chunks balance a worker slowed by its neighbours. 1: one chunk each.
        lane: (process) a ``step_batch``, or a ``rollout_batch`` of given actions, that its caller waits for,
            with one int ``dt``, no seeds, and observations that are arrays of one form, runs through one shared
            segment and a header a chunk instead of the general path's chunks (:mod:`plan_parallel.batch.lane`;
            the same results): states as columns where their family has a fixed row
            (:meth:`~plan_parallel.state.Adapter.row_extra`: classic control and MuJoCo whose step draws
            nothing, ALE, user envs whose ``get_state`` value is a float64 array or a tuple of floats, ints and
            bools), else pickled when an observation is at most 16 KB. False: every batch takes the general
            path.

    Raises:
        ValueError, TypeError: an option out of range or of the wrong type (named in the message).
    """

    n_workers: int | None = None
    placement: str = "rule"
    here_below: float = HERE_BELOW_SECONDS
    pin_workers: bool = False
    batch_scheduling: bool = False
    move_caller: bool = False
    max_chunks_per_worker: int = MAX_CHUNKS_PER_WORKER
    lane: bool = True

    def __post_init__(self) -> None:
        n = self.n_workers
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
            raise ValueError(f"n_workers must be an integer >= 1 or None, got {n!r}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, got {self.placement!r}")
        below = self.here_below
        if not isinstance(below, (int, float)) or isinstance(below, bool) or not below >= 0:
            raise ValueError(f"here_below must be a number of seconds >= 0, got {below!r}")
        chunks = self.max_chunks_per_worker
        if not isinstance(chunks, int) or isinstance(chunks, bool) or chunks < 1:
            raise ValueError(f"max_chunks_per_worker must be an integer >= 1, got {chunks!r}")
        for name in ("pin_workers", "batch_scheduling", "move_caller", "lane"):
            _check_bool(name, getattr(self, name))
        if self.move_caller and not self.pin_workers:
            raise ValueError("move_caller moves the calling thread off pinned workers' cores: it needs "
                             "pin_workers=True")

    @classmethod
    def tuned(cls, **changes: Any) -> ExecutionPolicy:
        """The opt-in profile tuned on a 2-core VM: adaptive placement, pinned workers under ``SCHED_BATCH``,
        and the calling thread moved off busy workers' cores while it waits (``changes`` override any of it).

        It changes the host: the workers' CPU affinity and scheduling policy (and those of any process an env
        starts), and the calling thread's affinity during waits. What each part gained, all on one 2-core VM
        with W=2 (``docs/measurements.md``): pinning 1.03-1.10x on batches of CartPole B=512 and Pong or
        HalfCheetah B=64 run on the workers; ``SCHED_BATCH`` 1.09-1.43x on an async batch whose caller works
        meanwhile, 0.94-0.96x on back-to-back Pong B=64 calls; moving the caller 1.01-1.11x; the adaptive
        placement 1.11x AsyncVectorEnv's speed on make_vec's 8 Pongs against 0.99x for the default rule.
        Whether any of it pays on a machine with more cores was not measured.
        """
        tuned = {"placement": "adaptive", "pin_workers": True, "batch_scheduling": True, "move_caller": True}
        return cls(**{**tuned, **changes})

    def replace(self, **changes: Any) -> ExecutionPolicy:
        """This policy with ``changes`` (checked as a new one)."""
        return dataclasses.replace(self, **changes)

    def with_options(self, n_workers: int | None = None, small_batch_inline: bool | None = None,
                     pin_workers: bool | None = None, timeout: float | None = None) -> ExecutionPolicy:
        """This policy with :func:`plan_parallel.make`'s shorthands applied and the worker count filled in.

        ``n_workers`` and ``pin_workers`` set those fields; ``small_batch_inline=False`` is
        ``placement="workers"``; a ``timeout`` sends every batch to the workers, where it can act.

        Raises:
            ValueError: a shorthand that contradicts a field this policy sets to other than its default
                (both named), or ``placement="here"`` with a timeout.
        """
        changes: dict[str, Any] = {}
        default = ExecutionPolicy()
        for name, value in (("n_workers", n_workers), ("pin_workers", pin_workers)):
            if value is not None:
                mine = getattr(self, name)
                if mine != getattr(default, name) and mine != value:
                    raise ValueError(f"{name}={value!r} contradicts the execution policy's {name}={mine!r}")
                changes[name] = value
        if small_batch_inline is not None:
            _check_bool("small_batch_inline", small_batch_inline)
            fits = ("rule", "here", "adaptive") if small_batch_inline else ("rule", "workers")
            if self.placement not in fits:
                raise ValueError(f"small_batch_inline={small_batch_inline} contradicts the execution policy's "
                                 f"placement={self.placement!r}")
            if not small_batch_inline:
                changes["placement"] = "workers"
        policy = self.replace(**changes) if changes else self
        if timeout is not None:
            if policy.placement == "here":
                raise ValueError("a timeout cannot act on items run in this process: give timeout=None with "
                                 "placement='here'")
            policy = policy.replace(placement="workers")
        return policy if policy.n_workers is not None else policy.replace(n_workers=available_cpus())

    def __repr__(self) -> str:
        n = "the CPUs this process may use" if self.n_workers is None else str(self.n_workers)
        where = {
            "rule": f"here when the workers would save a batch under {self.here_below * 1e3:g} ms (its env "
                    "time by their step time, x (1 - 1/W)), else on the workers",
            "workers": "every batch on the workers",
            "here": "every batch in this process",
            "adaptive": "where earlier batches ran fastest (measured)",
        }[self.placement]
        host = [name for name in ("pin_workers", "batch_scheduling", "move_caller") if getattr(self, name)]
        return (f"ExecutionPolicy(n_workers={n}; placement={self.placement!r}: {where}; up to "
                f"{self.max_chunks_per_worker} chunks a worker; {'' if self.lane else 'no '}lane; host settings: "
                f"{', '.join(host) if host else 'none'})")
