"""ExternalProcess: one worker process hosting one PlanEnv, and the loop it runs.

The env is built inside the worker from a factory shipped with cloudpickle, so
lambdas and closures work under fork, spawn and forkserver. The parent talks to
the worker over a duplex pipe (typed :class:`Call`/:class:`Reply` messages) and
moves arrays through shared-memory slabs (:mod:`plan_parallel.transport`).

A worker exits when its pipe closes, when it is told to, or when its parent
disappears (checked every second), so a killed parent leaves no orphans.
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import select
import signal
import sys
import time
from multiprocessing.connection import Connection, wait
from typing import Any, Iterator

import numpy as np

from plan_parallel.errors import WorkerCrashedError, WorkerTimeoutError
from plan_parallel.transport import PROTOCOL, ArrayWriter, Slab, pack_infos, pack_states, read_columns, unpack_states
from plan_parallel.workers.base import OPS, Call, Reply, remote_error, reraise

__all__ = ["ExternalProcess", "default_context", "describe_exit", "spin_wait"]


def default_context() -> str:
    """``forkserver`` where it exists (Linux, macOS; Python 3.14's default), else ``spawn``.

    ``fork`` is not the default: forking a parent that runs threads (Ray, a
    GUI, a data loader) can deadlock the child.
    """
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


@contextlib.contextmanager
def _main_not_rerun() -> Iterator[None]:
    """Start processes that do not re-run the user's ``__main__`` (spawn and forkserver would).

    multiprocessing hands a child the path (or module name) of ``__main__`` so it
    can import it again; a script without an ``if __name__ == "__main__":`` guard
    would then start workers from inside its workers. The factory travels
    cloudpickled (functions and classes of ``__main__`` by value), so the workers
    never need ``__main__``: it is hidden while the process starts.
    """
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if main is not None and k in main.__dict__}
    try:
        for k in saved:
            if k == "__spec__":
                main.__spec__ = None  # type: ignore[union-attr]
            else:
                del main.__dict__[k]  # type: ignore[union-attr]
        yield
    finally:
        if main is not None:
            main.__dict__.update(saved)


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


class ExternalProcess:
    """Parent-side proxy of one worker process (implements :class:`~plan_parallel.workers.base.Worker`).

    Args:
        index: the worker's index in its BatchEnv (for messages).
        blob: cloudpickled ``(factory, adapter)``.
        context: multiprocessing start method.
        start_timeout: seconds to wait for the env to be built.

    Raises:
        WorkerCrashedError: the process died while starting.
        WorkerTimeoutError: the env was not built within ``start_timeout``.
        Exception: whatever building the env raised in the worker (its own type).
    """

    def __init__(self, index: int, blob: bytes, context: str, start_timeout: float = 120.0) -> None:
        self.index = index
        ctx = mp.get_context(context)
        self.conn, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(
            target=worker_main, args=(child, blob, index, os.getpid()), daemon=True,
            name=f"plan_parallel-worker-{index}",
        )
        with _main_not_rerun():
            self.process.start()
        child.close()
        self.ready: dict = {}
        self._ready_poll: Any = None
        self._started = time.monotonic()
        self._start_timeout = start_timeout

    def wait_ready(self) -> dict:
        """Block until the worker reports its env is built; returns its spaces and kind."""
        deadline = self._started + self._start_timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise WorkerTimeoutError(
                    f"worker {self.index} (pid {self.pid}) did not build its env within {self._start_timeout:.0f} s"
                )
            for h in wait([self.conn, self.process.sentinel], timeout=left):
                if h is self.conn:
                    try:
                        reply = self.conn.recv()
                    except (EOFError, OSError):
                        # The pipe closed without a reply: the process died (or is dying) while building.
                        self.process.join(1.0)
                        how = self.dead() or "its pipe closed"
                        self.kill()
                        raise WorkerCrashedError(
                            f"worker {self.index} (pid {self.pid}) died with {how} while building its env"
                        ) from None
                    if reply.error is not None:
                        self.close(1.0)
                        raise reraise(reply.error, f"worker {self.index} (pid {self.pid}) building the env")
                    self.ready = reply.value
                    return self.ready
                if self.dead() is not None and not self.conn.poll():
                    raise WorkerCrashedError(
                        f"worker {self.index} (pid {self.pid}) died with {self.dead()} while building its env"
                    )

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def send(self, call: Call) -> None:
        self.conn.send_bytes(pickle.dumps(call, PROTOCOL))

    def send_bytes(self, data: bytes) -> None:
        self.conn.send_bytes(data)

    def handles(self) -> list[Any]:
        return [self.conn, self.process.sentinel]

    def poll(self) -> Reply | None:
        # A select.poll made once: Connection.poll() builds a selector on every call (~20 us).
        if self._ready_poll is None:
            self._ready_poll = select.poll()
            self._ready_poll.register(self.conn.fileno(), select.POLLIN)
        if self._ready_poll.poll(0):
            return pickle.loads(self.conn.recv_bytes())
        return None

    def dead(self) -> str | None:
        code = self.process.exitcode
        return None if code is None else describe_exit(code)

    def kill(self) -> None:
        if self.process.exitcode is None:
            self.process.kill()
        self.process.join(2.0)

    def close(self, timeout: float) -> None:
        if self.process.exitcode is None:
            try:
                self.send(Call(-1, "close"))
            except (OSError, EOFError, ValueError):
                pass  # the pipe is already gone: the join below decides
            self.process.join(timeout)
            if self.process.exitcode is None:
                self.kill()
        self.conn.close()
        self.process.join(0.1)


# ====================================================================== worker side
class _Server:
    """The worker's state: its env, attached slabs, and the op handlers (the allow-list)."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.slabs: dict[str, Slab] = {}
        self._policy_blob: bytes | None = None
        self._policy_obj: Any = None

    def slab(self, name: str | None, size: int) -> Slab | None:
        if name is None:
            return None
        s = self.slabs.get(name)
        if s is None or s.size != size:
            s = self.slabs[name] = Slab(name, size, create=False)
        return s

    def forget(self, names: list[str]) -> None:
        for n in names:
            s = self.slabs.pop(n, None)
            if s is not None:
                s.close()

    # --- ops (names must be in OPS) ----------------------------------------------
    def op_ping(self) -> str:
        return "pong"

    def op_reset(self, seed: Any, options: Any) -> tuple:
        return self.env.reset(seed, options)

    def op_set_state(self, blob: bytes) -> None:
        self.env.set_state(pickle.loads(blob))

    def _read_items(self, req: dict) -> tuple[Slab | None, dict[str, np.ndarray], list | None]:
        """Attach a request's slab and read its input columns and states (``states=None``: the current state)."""
        self.forget(req.get("forget", ()))
        slab = self.slab(req["slab"], req["slab_size"])
        cols = read_columns(slab, req["layout"])
        states = None if req["states"] is None else unpack_states(req["states"], cols, "in_", req["n"])
        return slab, cols, states

    @staticmethod
    def _column(req: dict, cols: dict[str, np.ndarray], name: str) -> Any:
        """Input ``name``: from the slab when it was written there, else from the request (None if absent)."""
        return cols[name] if name in cols else req.get(name)

    @staticmethod
    def _write_items(w: ArrayWriter, reply: dict[str, Any], prefix: str, states: list, obs: list) -> None:
        """Write N result states and observations to the slab (or into the reply when they do not fit).

        States travel without their observation: the parent reattaches the
        ``{prefix}obs`` rows (or ``reply["{prefix}obs"]``) to them.
        """
        reply[prefix + "states"] = pack_states(states, w, prefix, with_obs=False)
        if not w.put_rows(prefix + "obs", obs):
            reply[prefix + "obs"] = obs

    def op_step_batch(self, req: dict) -> dict:
        """Decode a chunk from its slab, run it, write the results back. See plan_parallel.chunks.encode.

        ``req["seeds"]`` (optional; a slab column or the request's value): None or
        N ints, the per-item seeds of ``step_batch``.
        """
        slab, cols, states = self._read_items(req)
        n = req["n"]
        out_states, obs, rewards, terms, truncs, infos = self.env.run_raw(
            states, self._column(req, cols, "actions"), self._column(req, cols, "dt"), self._column(req, cols, "seeds")
        )
        w = ArrayWriter(slab, req["out_offset"])
        reply: dict[str, Any] = {
            "rewards": np.array(rewards, dtype=np.float64),
            "terminations": np.array(terms, dtype=bool),
            "truncations": np.array(truncs, dtype=bool),
            "n_steps": np.fromiter((i.pop("n_steps") for i in infos), dtype=np.int64, count=n),
        }
        self._write_items(w, reply, "", out_states, obs)
        reply["infos"] = pack_infos(infos)
        reply["layout"] = w.layout
        reply["needed"] = w.needed - req["out_offset"]
        return reply

    def _policy(self, blob: bytes | None) -> Any:
        """The policy a request ships (cloudpickled), unpickled once while the same bytes keep coming."""
        if blob is None:
            return None
        if blob != self._policy_blob:
            self._policy_obj = pickle.loads(blob)
            self._policy_blob = blob
        return self._policy_obj

    def op_rollout_batch(self, req: dict) -> dict:
        """Run a chunk of ``rollout_batch`` items (:meth:`PlanEnv.rollout_raw`); results to the slab.

        The request (a dict; as ``step_batch``'s, plus the rollout fields):

        - ``n``: the chunk's item count m; ``first_index``: the batch index of its
          first item (the policy RNG without seeds depends on it, not on the chunk).
        - ``slab``, ``slab_size``: the shared-memory slab (``slab=None``: no slab,
          everything travels in the request and the reply); ``layout``: the input
          columns written to it; ``out_offset``: where the outputs may start;
          ``forget``: slab names to detach first (optional).
        - ``states``: ``pack_states(states, w, "in_", with_obs=...)`` or None (every
          item starts from the worker's current state). Pack with ``with_obs=True``
          when ``actions`` is None: a policy reads the start observation.
        - ``actions``: shape ``(m, T, *action_shape)`` or None (a policy acts); may be
          the slab column ``"actions"`` instead. ``dt``: an int, or m ints (or the
          column ``"dt"``). ``seeds``: None or m ints (or the column ``"seeds"``).
        - ``horizon``: T. ``policy``: ``cloudpickle.dumps(policy)``, or None (given
          actions, or uniform random actions). ``return_all``: bool.

        The reply (a dict): ``rewards`` float64 ``(m, T)``; ``terminations``,
        ``truncations`` bool ``(m,)``; ``n_steps`` int64 ``(m,)``; ``states`` (the
        final states, packed with prefix ``""`` and no observations) and the
        final observations as the slab column ``"obs"`` or ``reply["obs"]`` (a list);
        ``infos`` (``pack_infos``); with ``return_all``, ``all_states`` (the m*T
        states item-major, packed with prefix ``"all_"``) and their observations as
        the column ``"all_obs"`` or ``reply["all_obs"]``; ``layout`` (the output
        columns) and ``needed`` (the output bytes, fitting or not). Reattach each
        observation to its state (``state.obs``), as for ``step_batch``.
        """
        slab, cols, states = self._read_items(req)
        horizon, return_all = req["horizon"], req["return_all"]
        parts = self.env.rollout_raw(
            states, self._column(req, cols, "actions"), self._column(req, cols, "dt"), horizon,
            policy=self._policy(req["policy"]), seeds=self._column(req, cols, "seeds"),
            first_index=req["first_index"], return_all=return_all,
        )
        w = ArrayWriter(slab, req["out_offset"])
        reply: dict[str, Any] = {
            "rewards": parts.rewards,
            "terminations": np.array(parts.terminations, dtype=bool),
            "truncations": np.array(parts.truncations, dtype=bool),
            "n_steps": np.array(parts.n_steps, dtype=np.int64),
        }
        self._write_items(w, reply, "", parts.states, parts.observations)
        if return_all:
            flat_states = [s for row in parts.all_states for s in row]  # type: ignore[union-attr]
            flat_obs = [o for row in parts.all_observations for o in row]  # type: ignore[union-attr]
            self._write_items(w, reply, "all_", flat_states, flat_obs)
        reply["infos"] = pack_infos(parts.infos)
        reply["layout"] = w.layout
        reply["needed"] = w.needed - req["out_offset"]
        return reply


SPIN_SECONDS = 300e-6  # the parent, waiting for replies
WORKER_SPIN_SECONDS = 2e-3  # a worker, waiting for its next call
_yield = getattr(os, "sched_yield", lambda: time.sleep(0))


def spin_wait(poller: Any, seconds: float) -> list:
    """Poll without blocking, yielding the CPU between polls, for up to ``seconds``.

    A blocked reader costs the writer a cross-core wake-up (25-50 us on a small
    VM); a reader that polls and yields answers in a few us without starving
    the other processes (``sched_yield`` lets them run). Returns the ready events.
    """
    end = time.perf_counter() + seconds
    poll = poller.poll
    while True:
        ev = poll(0)
        if ev or time.perf_counter() > end:
            return ev
        _yield()


def _parent_alive(parent_pid: int, first_ppid: int) -> bool:
    """False once the process that created us is gone (we were re-parented, or it no longer exists)."""
    if os.getppid() != first_ppid:
        return False
    try:
        os.kill(parent_pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else (pid reuse is not our parent, but rare)
    return True


def build_server(blob: bytes) -> tuple["_Server", dict]:
    """Build the env from a cloudpickled ``(factory, adapter)``; returns the server and its ready info.

    Shared by every backend's worker (a process here, a Ray actor in :mod:`.ray_actor`).
    """
    factory, adapter = pickle.loads(blob)
    from plan_parallel.env import PlanEnv

    env = PlanEnv(factory, adapter=adapter)
    ready = {
        "observation_space": env.observation_space,
        "action_space": env.action_space,
        "kind": env.kind,
        "spec": env.spec,
        "reseedable": env.reseedable,
        "pid": os.getpid(),
    }
    return _Server(env), ready


def answer(server: "_Server", call: Call, who: str = "worker") -> Reply:
    """Run one call on ``server``: its :class:`Reply` (env errors travel inside it, with their traceback)."""
    fn = getattr(server, "op_" + call.op, None) if call.op in OPS and call.op != "close" else None
    t0 = time.perf_counter()
    if fn is None:
        reply = Reply(call.id, error=remote_error(RuntimeError(
            f"plan_parallel bug: {who} got unknown op {call.op!r}; allowed: {sorted(OPS)}")))
    else:
        try:
            reply = Reply(call.id, fn(*call.args))
        except BaseException as e:  # noqa: BLE001 - env errors travel back with their traceback
            reply = Reply(call.id, error=remote_error(e, getattr(e, "_pp_item", None)))
    reply.env_seconds = time.perf_counter() - t0
    return reply


def serve(server: "_Server", call: Call) -> bytes:
    """:func:`answer`, pickled for the pipe (an unpicklable result becomes an error reply)."""
    reply = answer(server, call)
    try:
        return pickle.dumps(reply, PROTOCOL)
    except Exception as e:  # noqa: BLE001 - an unpicklable result is reported, not fatal
        return pickle.dumps(Reply(call.id, error=remote_error(e)), PROTOCOL)


def worker_main(conn: Connection, blob: bytes, index: int, parent_pid: int) -> None:
    """Entry point of a worker process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    first_ppid = os.getppid()  # the parent, or the forkserver that forked this process
    try:
        server, ready = build_server(blob)
        conn.send_bytes(pickle.dumps(Reply(0, ready), PROTOCOL))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, then exit
        conn.send_bytes(pickle.dumps(Reply(0, error=remote_error(e)), PROTOCOL))
        return
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)
    while True:
        try:
            if not spin_wait(poller, WORKER_SPIN_SECONDS):
                while not poller.poll(1000):
                    if not _parent_alive(parent_pid, first_ppid):
                        return
            call: Call = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return  # the parent closed the pipe or died
        if call.op == "close":
            break
        data = serve(server, call)
        try:
            conn.send_bytes(data)
        except (EOFError, OSError):
            return
    server.forget(list(server.slabs))
    server.env.close()
