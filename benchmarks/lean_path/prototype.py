"""A standalone prototype of plan_parallel's lean call path (issue 52): how fast can a small call go in Python?

A call is N CartPole items (state columns: the 4-float ``unwrapped.state``, ``steps_beyond_terminated``
(-1 for None) and the TimeLimit's elapsed steps; an action) split over W worker processes. Each worker
restores each item, steps the full wrapper stack (``env.step``), captures the new state and writes
obs / reward / terminated / truncated / new state into **preallocated shared memory**: one segment for
the pool, fixed columns of ``capacity`` rows, worker k owning rows lo..hi of the call (so the caller
writes each input column once and copies each output column once, whatever W). On the signal path
only a fixed-size header travels (struct-packed call id, op, lo, n; no pickle), and the caller checks
the call id of every reply: a reply that is not the one awaited is counted and dropped, never used.

Variants (``--variants``), named ``signal/caller/worker``:

* signal ``pipe``: the header goes down a pipe (one os.write / os.read of 20 bytes; the reply's 24) and
  comes back up another;
  ``efd``: the header sits in shared memory and an eventfd per worker wakes the worker, one eventfd shared
  by all workers wakes the caller (it waits on one fd whatever W);
* caller ``poll``: poll(0) + sched_yield for up to 300 us, then block; ``block``: block in poll at once;
* worker ``read``: blocks in read(); ``poll``: blocks in poll() then reads (today's worker); ``spin``:
  poll(0) + sched_yield for up to 300 us after each answer, then blocks.

Every wait has a deadline and watches the workers' process sentinels; a worker that dies is replaced
and its chunk sent again unchanged (its inputs are in the parent's segment, which a worker only reads;
``--fault-test`` proves it). Workers get PR_SET_PDEATHSIG. ``LeanPool.vec_step`` is make_vec's case: the
workers keep the sub-envs, only actions go down and obs / reward / flags come back.

Run (figures in README.md)::

    python benchmarks/lean_path/prototype.py --repeats 21           # N=2 table, then N=64/512 (~25 s)
    python benchmarks/lean_path/prototype.py --check --fault-test  # exactness and requeue only
"""
from __future__ import annotations

import argparse
import ctypes
import multiprocessing as mp
import os
import random
import select
import signal
import statistics
import struct
import sys
import time
from collections.abc import Callable
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from plan_parallel.state.families.classic import RESTORED_ZERO

ENV_ID = "CartPole-v1"
OP_STEP, OP_CLOSE, OP_NOP, OP_KEPT = 1, 2, 3, 4
REQ = struct.Struct("<qiii")  # call id, op, lo, n
REP = struct.Struct("<qiiq")  # call id, status (0 ok, 1 error), n, worker ns spent serving
SPIN = 300e-6
SLICE = 0.1  # a blocked wait wakes this often (Ctrl-C, deadline)
_yield = os.sched_yield


RZ = RESTORED_ZERO  # steps_beyond_terminated == 0 restored as plan_parallel's classic family does


# ----------------------------------------------------------------------------- the segment
class Columns:
    """Fixed columns in one shared segment; ``hdr`` (W, 8) int64 holds the efd variant's headers."""

    SPEC = [("in_sim", "f8", (4,)), ("in_sbt", "i8", ()), ("in_el", "i8", ()), ("in_act", "i8", ()),
            ("obs", "f4", (4,)), ("rew", "f8", ()), ("term", "?", ()), ("trunc", "?", ()),
            ("sim", "f8", (4,)), ("sbt", "i8", ()), ("el", "i8", ())]

    def __init__(self, buf: Any, capacity: int, w: int) -> None:
        off = 0
        for name, dt, shape in self.SPEC:
            dt = np.dtype(dt)
            n = dt.itemsize * capacity * int(np.prod(shape, dtype=int))
            if buf is not None:
                setattr(self, name, np.ndarray((capacity, *shape), dt, buf, off))
            off += -(-n // 64) * 64
        if buf is not None:
            self.hdr = np.ndarray((w, 8), np.int64, buf, off)
        off += w * 64
        self.size = off


# ----------------------------------------------------------------------------- the worker
def _tie_to_parent() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def make_env() -> Any:
    import gymnasium as gym

    return gym.make(ENV_ID)


def serve_step(env: Any, c: Columns, lo: int, n: int) -> None:
    """Restore, step, capture items lo..lo+n; results into the output columns."""
    u = env.unwrapped
    step = env.step
    hi = lo + n
    sims = c.in_sim[lo:hi]
    sbts = c.in_sbt[lo:hi].tolist()
    els = c.in_el[lo:hi].tolist()
    acts = c.in_act[lo:hi].tolist()
    obs, rew, term, trunc, new, nsbt, nel = [], [], [], [], [], [], []
    for j in range(n):
        u.state = sims[j]  # CartPole assigns a fresh array each step and never writes into this one
        s = sbts[j]
        u.steps_beyond_terminated = None if s < 0 else (RZ if s == 0 else s)
        env._elapsed_steps = els[j]  # the TimeLimit is the outermost wrapper
        o, r, te, tr, _ = step(acts[j])
        obs.append(o)
        rew.append(r)
        term.append(te)
        trunc.append(tr)
        new.append(u.state)
        v = u.steps_beyond_terminated
        nsbt.append(-1 if v is None else int(v))
        nel.append(env._elapsed_steps)
    c.obs[lo:hi] = obs
    c.rew[lo:hi] = rew
    c.term[lo:hi] = term
    c.trunc[lo:hi] = trunc
    c.sim[lo:hi] = new
    c.sbt[lo:hi] = nsbt
    c.el[lo:hi] = nel


def serve_kept(kept: list, c: Columns, lo: int, n: int) -> None:
    """A vector env's step: the worker's own sub-envs lo..lo+n (kept here, made on first use) step their
    actions; SAME_STEP autoreset in the worker (the prototype drops the final obs gymnasium puts in infos;
    the design ships them in the reply's tail on such steps only). Only actions in, obs/reward/flags out."""
    while len(kept) < n:
        e = make_env()
        e.reset(seed=lo + len(kept))
        kept.append(e)
    acts = c.in_act[lo:lo + n].tolist()
    obs, rew, term, trunc = [], [], [], []
    for j in range(n):
        e = kept[j]
        o, r, te, tr, _ = e.step(acts[j])
        if te or tr:
            o, _ = e.reset()
        obs.append(o)
        rew.append(r)
        term.append(te)
        trunc.append(tr)
    c.obs[lo:lo + n] = obs
    c.rew[lo:lo + n] = rew
    c.term[lo:lo + n] = term
    c.trunc[lo:lo + n] = trunc


def worker_main(k: int, shm_name: str, capacity: int, w: int, fds: tuple, signal_kind: str, wait_kind: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _tie_to_parent()
    shm = shared_memory.SharedMemory(shm_name)  # attached, not created: the parent unlinks it
    c = Columns(shm.buf, capacity, w)
    env = make_env()
    env.reset(seed=k)
    req_fd, rep_fd = fds
    hdr = c.hdr[k]
    poller = select.poll()
    poller.register(req_fd, select.POLLIN)
    kept: list = []
    pack, unpack, perf = REP.pack, REQ.unpack, time.perf_counter_ns
    one = (1).to_bytes(8, sys.byteorder)
    hdr[4] = -2  # ready (efd); a pipe's ready is the header below
    os.write(rep_fd, REP.pack(0, 0, 0, 0) if signal_kind == "pipe" else one)
    spin_until = 0.0
    try:
        while True:
            if wait_kind == "spin" and spin_until:
                end = time.perf_counter() + SPIN
                while not poller.poll(0) and time.perf_counter() < end:
                    _yield()
            if wait_kind != "read":
                while not poller.poll(1000):
                    if os.getppid() == 1:
                        return
            data = os.read(req_fd, REQ.size if signal_kind == "pipe" else 8)
            if not data:
                return
            if signal_kind == "pipe":
                cid, op, lo, n = unpack(data)
            else:
                cid, op, lo, n = (int(x) for x in hdr[:4])
            if op == OP_CLOSE:
                return
            t0 = perf()
            try:
                if op == OP_STEP:
                    serve_step(env, c, lo, n)
                elif op == OP_KEPT:
                    serve_kept(kept, c, lo, n)
                status = 0
            except Exception:
                status = 1
            if signal_kind == "pipe":
                os.write(rep_fd, pack(cid, status, n, perf() - t0))
            else:
                hdr[4:8] = (cid, status, n, perf() - t0)  # the reply header, then the wake-up
                os.write(rep_fd, one)
            spin_until = 1.0
    finally:
        del c, hdr
        shm.close()


# ----------------------------------------------------------------------------- the parent
class WorkerDied(RuntimeError):
    pass


class LeanPool:
    """W workers over one shared segment; ``step`` is one synchronous call (see the module docstring)."""

    def __init__(self, w: int, capacity: int, variant: str = "pipe/poll/read", context: str = "fork") -> None:
        self.signal, self.caller_wait, self.worker_wait = variant.split("/")
        self.w, self.capacity = w, capacity
        self.ctx = mp.get_context(context)
        size = Columns(None, capacity, w).size
        self.shm = shared_memory.SharedMemory(create=True, size=size)
        self.c = Columns(self.shm.buf, capacity, w)
        self.next_id = 1
        self.stray = 0
        self.served = [0, 0]  # replies, and the ns the workers spent serving them (their own clock)
        self.procs: list[Any] = [None] * w
        self.req_w: list[int] = [-1] * w  # parent's write end / eventfd per worker
        self.rep_r: list[int] = [-1] * w  # parent's read end per worker (pipe)
        self.rep_efd = os.eventfd(0, os.EFD_CLOEXEC) if self.signal == "efd" else -1
        self._splits: dict[int, list[tuple[int, int]]] = {}
        for k in range(w):
            self._start(k)
        for k in range(w):
            self._wait_ready(k)
        self._build_poller()

    # --- lifecycle
    def _start(self, k: int) -> None:
        if self.signal == "pipe":
            req_r, req_w = os.pipe()
            rep_r, rep_w = os.pipe()
            child_fds, self.req_w[k], self.rep_r[k] = (req_r, rep_w), req_w, rep_r
        else:
            efd = os.eventfd(0, os.EFD_CLOEXEC)
            child_fds, self.req_w[k] = (efd, self.rep_efd), efd
            self.c.hdr[k, 4] = 0
        p = self.ctx.Process(target=worker_main, daemon=True,
                             args=(k, self.shm.name, self.capacity, self.w, child_fds, self.signal, self.worker_wait))
        p.start()
        if self.signal == "pipe":
            os.close(child_fds[0])
            os.close(child_fds[1])
        self.procs[k] = p

    def _wait_ready(self, k: int) -> None:
        fd = self.rep_r[k] if self.signal == "pipe" else self.rep_efd
        deadline = time.monotonic() + 60
        while True:
            if self.signal == "efd" and self.c.hdr[k, 4] == -2:
                return
            r, _, _ = select.select([fd, self.procs[k].sentinel], [], [], 1)
            if self.procs[k].sentinel in r or time.monotonic() > deadline:
                raise WorkerDied(f"worker {k} did not start")
            if fd in r:
                os.read(fd, REP.size if self.signal == "pipe" else 8)
                if self.signal == "pipe":
                    return

    def _build_poller(self) -> None:
        self.poller = select.poll()
        self.fd_owner: dict[int, int] = {}
        self.sentinel_owner: dict[int, int] = {}
        if self.signal == "pipe":
            for k in range(self.w):
                self.poller.register(self.rep_r[k], select.POLLIN)
                self.fd_owner[self.rep_r[k]] = k
        else:
            self.poller.register(self.rep_efd, select.POLLIN)
        for k, p in enumerate(self.procs):
            self.poller.register(p.sentinel, select.POLLIN)
            self.sentinel_owner[p.sentinel] = k

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def close(self) -> None:
        for k in range(self.w):
            try:
                if self.signal == "pipe":
                    os.write(self.req_w[k], REQ.pack(0, OP_CLOSE, 0, 0))
                else:
                    self.c.hdr[k, :4] = (0, OP_CLOSE, 0, 0)
                    os.eventfd_write(self.req_w[k], 1)
            except OSError:
                pass
        for p in self.procs:
            p.join(1.0)
            if p.exitcode is None:
                p.kill()
                p.join(1.0)
        for fd in self.req_w + self.rep_r + [self.rep_efd]:
            if fd >= 0:
                os.close(fd)
        self.c = None  # type: ignore[assignment]
        self.shm.close()
        self.shm.unlink()

    # --- a call
    def _split(self, n: int) -> list[tuple[int, int]]:
        s = self._splits.get(n)
        if s is None:
            k = min(n, self.w)
            b = [round(i * n / k) for i in range(k + 1)]
            s = self._splits[n] = [(b[i], b[i + 1] - b[i]) for i in range(k)]
        return s

    def _send(self, k: int, cid: int, lo: int, n: int, op: int = OP_STEP) -> None:
        try:
            if self.signal == "pipe":
                os.write(self.req_w[k], REQ.pack(cid, op, lo, n))
            else:
                self.c.hdr[k, :4] = (cid, op, lo, n)
                os.eventfd_write(self.req_w[k], 1)
        except OSError:
            pass  # gone: the wait sees its sentinel and sends the call again to its replacement

    def step(self, sim: np.ndarray, sbt: np.ndarray, el: np.ndarray, actions: np.ndarray,
             timeout: float | None = 10.0) -> tuple[np.ndarray, ...]:
        n = len(actions)
        if n > self.capacity:
            raise ValueError("a call larger than the segment's capacity (the general path takes it)")
        c = self.c
        c.in_sim[:n] = sim
        c.in_sbt[:n] = sbt
        c.in_el[:n] = el
        c.in_act[:n] = actions
        chunks = self._split(n)
        first = self.next_id
        self.next_id += len(chunks)
        due = {}  # worker -> (call id, lo, n): unanswered
        for k, (lo, m) in enumerate(chunks):
            self._send(k, first + k, lo, m)
            due[k] = (first + k, lo, m)
        self._wait(due, timeout)
        return (c.obs[:n].copy(), c.rew[:n].copy(), c.term[:n].copy(), c.trunc[:n].copy(),
                c.sim[:n].copy(), c.sbt[:n].copy(), c.el[:n].copy())

    def vec_step(self, actions: np.ndarray, timeout: float | None = 10.0) -> tuple[np.ndarray, ...]:
        """A vector env's step over sub-envs the workers keep (make_vec's case): only actions travel."""
        n = len(actions)
        self.c.in_act[:n] = actions
        first = self.next_id
        chunks = self._split(n)
        self.next_id += len(chunks)
        due = {}
        for k, (lo, m) in enumerate(chunks):
            self._send(k, first + k, lo, m, OP_KEPT)
            due[k] = (first + k, lo, m, OP_KEPT)
        self._wait(due, timeout)
        c = self.c
        return c.obs[:n].copy(), c.rew[:n].copy(), c.term[:n].copy(), c.trunc[:n].copy()

    def nop(self, timeout: float | None = 10.0) -> None:
        """A call that does nothing on every worker: the transport's round trip, headers and ids included."""
        first = self.next_id
        self.next_id += self.w
        due = {}
        for k in range(self.w):
            self._send(k, first + k, 0, 0, OP_NOP)
            due[k] = (first + k, 0, 0, OP_NOP)
        self._wait(due, timeout)

    def _wait(self, due: dict[int, tuple[int, int, int]], timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        poll = self.poller.poll
        spin = self.caller_wait == "poll"
        efd = self.signal == "efd"
        while due:
            events = poll(0)
            if not events and spin:
                end = time.perf_counter() + SPIN
                while not events and time.perf_counter() < end:
                    _yield()
                    events = poll(0)
            if not events:
                left = SLICE if deadline is None else min(SLICE, deadline - time.monotonic())
                if left <= 0:
                    raise TimeoutError("a worker missed its deadline (the lean path kills and replaces it)")
                events = poll(int(left * 1000) + 1)
            for fd, _ in events:
                k = self.fd_owner.get(fd)
                if k is not None:  # a pipe reply
                    data = os.read(fd, REP.size)
                    if data:
                        cid, status, _m, ns = REP.unpack(data)
                        self._answered(due, k, cid, status, ns)
                    elif k in due:  # EOF: the worker is gone; its sentinel says so now or at once
                        self.procs[k].join(1.0)
                        self._requeue(k, due[k])
                elif fd == self.rep_efd:
                    os.eventfd_read(fd)
                else:
                    k = self.sentinel_owner.get(fd)
                    if k is not None and k in due and self.procs[k].exitcode is not None:
                        self._requeue(k, due[k])
            if efd:  # the reply headers, after any wake-up (a requeue's wait may have eaten one)
                hdr = self.c.hdr
                for k in list(due):
                    if hdr[k, 4] == due[k][0]:
                        self._answered(due, k, due[k][0], int(hdr[k, 5]), int(hdr[k, 7]))

    def _answered(self, due: dict, k: int, cid: int, status: int, ns: int = 0) -> None:
        if k not in due or cid != due[k][0]:
            self.stray += 1  # an interrupted call's late reply: never used
            return
        del due[k]
        self.served[0] += 1
        self.served[1] += ns
        if status:
            raise RuntimeError(f"worker {k} raised on call {cid} (the real path ships the error)")

    def _requeue(self, k: int, call: tuple[int, int, int]) -> None:
        """Worker k died with ``call`` unanswered: replace it and send the same call again (inputs untouched)."""
        self.procs[k].join(1.0)
        if self.signal == "pipe":
            os.close(self.req_w[k])
            os.close(self.rep_r[k])
        else:
            os.close(self.req_w[k])
        self._start(k)
        self._wait_ready(k)
        self._build_poller()
        self._send(k, *call)


# ----------------------------------------------------------------------------- references
def reference_step(env: Any, sim: np.ndarray, sbt: np.ndarray, el: np.ndarray, actions: np.ndarray,
                   c: Columns | None = None) -> tuple:
    """The same work in this process (the exactness oracle; with preallocated ``c``, the in-process floor)."""
    if c is None:
        c = Columns(bytearray(Columns(None, len(actions), 1).size), len(actions), 1)
    n = len(actions)
    c.in_sim[:n] = sim
    c.in_sbt[:n] = sbt
    c.in_el[:n] = el
    c.in_act[:n] = actions
    serve_step(env, c, 0, n)
    return c.obs[:n], c.rew[:n], c.term[:n], c.trunc[:n], c.sim[:n], c.sbt[:n], c.el[:n]


def random_states(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    sim = rng.uniform(-0.25, 0.25, (n, 4))
    sim[::7, 0] = 2.45  # some step over the edge
    sbt = np.where(rng.random(n) < 0.1, rng.integers(0, 3, n), -1).astype(np.int64)
    el = rng.integers(0, 500, n).astype(np.int64)  # some hit the time limit
    return sim, sbt, el, rng.integers(0, 2, n).astype(np.int64)


def check(variants: list[str], w: int) -> None:
    env = make_env()
    env.reset(seed=0)
    for v in variants:
        pool = LeanPool(w, 512, v)
        try:
            for n, seed in ((1, 1), (2, 2), (3, 3), (64, 4), (512, 5)):
                args = random_states(n, seed)
                got, want = pool.step(*args), reference_step(env, *args)
                for g, x in zip(got, want):
                    assert g.dtype == x.dtype and np.array_equal(g, x), (v, n)
        finally:
            pool.close()
    print(f"exact: {len(variants)} variants x N in 1,2,3,64,512 equal the in-process step, bit for bit")
    check_against_plan_parallel(w)


def to_columns(states: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """plan_parallel CartPole States as the lane's columns (sim, steps_beyond_terminated, elapsed)."""
    sim = np.array([x.sim for x in states], dtype=np.float64)
    sbt = np.array([-1 if x.extra is None else int(x.extra) for x in states], dtype=np.int64)
    el = np.array([x.wrappers[0] for x in states], dtype=np.int64)
    return sim, sbt, el


def check_against_plan_parallel(w: int) -> None:
    """The lane's results equal plan_parallel's inline step_batch on its own states (terminal and
    time-limited ones included), field for field."""
    import plan_parallel as pp

    inline = pp.make(ENV_ID, backend="inline")
    pool = LeanPool(w, 256, "pipe/poll/read")
    try:
        rng = np.random.default_rng(0)
        states = [inline.reset(seed=0)[0]] * 256
        flags = 0
        for _ in range(60):
            acts = rng.integers(0, 2, 256)
            want = inline.step_batch(acts, states)
            got = pool.step(*to_columns(states), acts)
            sim, sbt, el = to_columns(list(want.states))
            for g, x in zip(got, (want.observations, want.rewards, want.terminations, want.truncations, sim, sbt, el)):
                assert np.array_equal(g, np.asarray(x)), "lane != plan_parallel inline"
            flags += int(np.sum(want.terminations)) + int(np.sum(want.truncations))
            states = list(want.states)
        print(f"exact: 60 steps of 256 items equal plan_parallel's inline step_batch ({flags} terminal/truncated)")
    finally:
        pool.close()
        inline.close()


def fault_test(w: int) -> None:
    env = make_env()
    env.reset(seed=0)
    pool = LeanPool(w, 512, "pipe/poll/read")
    try:
        args = random_states(512, 9)
        want = reference_step(env, *args)
        victim = pool.procs[0]
        victim.kill()  # dead before the call: the write to it fails, its sentinel and EOF say so, it is replaced
        victim.join(1.0)
        got = pool.step(*args)
        assert pool.procs[0] is not victim, "the victim was replaced"
        assert all(np.array_equal(g, x) for g, x in zip(got, want))
        # an interrupted call (sent, never waited for): its late reply is dropped by its id, and the next
        # call's result is its own (the worker serves calls in pipe order, so its outputs are written last)
        pool._send(0, 10**9, 0, 2)
        got = pool.step(*random_states(2, 3))
        assert np.array_equal(got[0], reference_step(env, *random_states(2, 3))[0])
        print(f"fault test: a dead worker was replaced and its chunk re-sent, result exact; "
              f"stray replies dropped by id: {pool.stray}")
    finally:
        pool.close()


# ----------------------------------------------------------------------------- timing
def cpu_of(pids: list[int]) -> float:
    t = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/schedstat") as f:
                t += int(f.read().split()[0]) / 1e9
        except (OSError, ValueError):
            pass
    return t


def measure(fns: dict[str, tuple[Callable[[], Any], list[int]]], repeats: int, sample: float = 0.02) -> dict:
    """Alternating samples (order shuffled each repeat); medians of wall and caller CPU per call; worker CPU per call."""
    per = {}
    for k, (f, _) in fns.items():
        end = time.perf_counter() + 0.3
        while time.perf_counter() < end:
            f()
        t0 = time.perf_counter()
        f()
        per[k] = max(1, min(2000, round(sample / max(time.perf_counter() - t0, 1e-6))))
    walls: dict = {k: [] for k in fns}
    cpus: dict = {k: [] for k in fns}
    wcpu = dict.fromkeys(fns, 0.0)
    order = random.Random(0)
    for _ in range(repeats):
        for k in order.sample(list(fns), len(fns)):
            f, pids = fns[k]
            n = per[k]
            w0 = cpu_of(pids)
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(n):
                f()
            walls[k].append((time.perf_counter() - t0) / n)
            cpus[k].append((time.process_time() - c0) / n)
            wcpu[k] += cpu_of(pids) - w0
    return {k: (statistics.median(walls[k]), statistics.median(cpus[k]), wcpu[k] / (repeats * per[k]), walls[k])
            for k in fns}


def bench(variants: list[str], w: int, repeats: int, with_pp: bool, big: list[int]) -> None:
    import gymnasium as gym

    opened: list[Callable[[], Any]] = []
    try:
        env = make_env()
        env.reset(seed=0)
        sim2, sbt2, el2, act2 = random_states(2, 0)
        sim2[:] = env.unwrapped.state  # the same state twice, as the latency suite's [s, s]
        sbt2[:] = -1
        el2[:] = 0
        act2[:] = 0
        fns: dict[str, tuple[Callable[[], Any], list[int]]] = {}
        pools = {}
        for v in variants:
            pool = pools[f"lean {v}"] = LeanPool(w, max(big + [2]), v)
            opened.append(pool.close)
            fns[f"lean {v}"] = ((lambda p=pool: p.step(sim2, sbt2, el2, act2)), pool.pids())
        if w > 1:
            one = pools[f"lean {variants[0]} W=1"] = LeanPool(1, 2, variants[0])
            opened.append(one.close)
            fns[f"lean {variants[0]} W=1"] = ((lambda: one.step(sim2, sbt2, el2, act2)), one.pids())
        same = gym.vector.AutoresetMode.SAME_STEP
        asyn = gym.vector.AsyncVectorEnv([make_env] * 2, shared_memory=True, autoreset_mode=same)
        opened.append(asyn.close)
        asyn.reset(seed=0)
        a2 = np.zeros(2, dtype=np.int64)
        fns["AsyncVectorEnv x2 step"] = ((lambda: asyn.step(a2)), [p.pid for p in asyn.processes])
        kpool = pools[f"lean {variants[0]} kept x2 step (make_vec's case)"] = LeanPool(w, 2, variants[0])
        opened.append(kpool.close)
        fns[f"lean {variants[0]} kept x2 step (make_vec's case)"] = ((lambda: kpool.vec_step(a2)), kpool.pids())
        if with_pp:
            import plan_parallel as pp

            ppenv = pp.make(ENV_ID, execution=pp.ExecutionPolicy(n_workers=w, placement="workers"))
            opened.append(ppenv.close)
            s = ppenv.reset(seed=0)[0]
            fns["plan_parallel step_batch 2"] = ((lambda: ppenv.step_batch(a2, [s, s])), list(ppenv.pids))
            ppvec = pp.make_vec(ENV_ID, 2, execution=pp.ExecutionPolicy(n_workers=w, placement="workers"),
                                autoreset_mode=same)
            opened.append(ppvec.close)
            ppvec.reset(seed=0)
            fns["plan_parallel make_vec x2 step"] = ((lambda: ppvec.step(a2)), list(ppvec.plan_env.pids))
        cols = Columns(bytearray(Columns(None, max(big + [2]), 1).size), max(big + [2]), 1)
        fns["in-process serve of 2 (the work alone)"] = (
            (lambda: reference_step(env, sim2, sbt2, el2, act2, cols)), [])
        nop_pool = LeanPool(w, 2, variants[0])
        opened.append(nop_pool.close)
        fns[f"lean {variants[0]} no-op (transport)"] = (nop_pool.nop, nop_pool.pids())
        t = measure(fns, repeats)
        ref = t["AsyncVectorEnv x2 step"][3]
        print(f"\nN=2 CartPole items a call, W={w}; medians of {repeats} alternating samples")
        print(f"{'call':<44} {'wall us':>8} {'caller cpu':>10} {'workers cpu':>11} {'x Async':>8} {'(q1-q3)':>11}")
        for k, (wall, cpu, wc, walls) in t.items():
            q = statistics.quantiles([a / b for a, b in zip(walls, ref)], n=4)
            print(f"{k:<44} {wall * 1e6:>8.0f} {cpu * 1e6:>10.0f} {wc * 1e6:>11.0f} {q[1]:>8.2f} {q[0]:>5.2f}-{q[2]:<5.2f}")
        print("a worker's serve of its chunk, its own clock (mean us): "
              + ", ".join(f"{k[5:]} {p.served[1] / max(1, p.served[0]) / 1e3:.1f}" for k, p in pools.items()))
        if not big:
            return
        best = LeanPool(w, max(big), variants[0])
        opened.append(best.close)
        fns = {}
        for n in big:
            args = random_states(n, n)
            fns[f"lean {variants[0]} N={n}"] = ((lambda a=args: best.step(*a)), best.pids())
            fns[f"in-process serve N={n}"] = ((lambda a=args: reference_step(env, *a, cols)), [])
            if with_pp:
                inline = pp.make(ENV_ID, backend="inline")
                opened.append(inline.close)
                s0 = inline.reset(seed=0)[0]
                rng = np.random.default_rng(n)
                states = list(inline.step_batch(rng.integers(0, 2, n), [s0] * n).states)
                acts = rng.integers(0, 2, n)
                fns[f"plan_parallel step_batch N={n}"] = ((lambda st=states, a=acts: ppenv.step_batch(a, st)),
                                                           list(ppenv.pids))
        t = measure(fns, max(3, repeats // 2), sample=0.05)
        print(f"\nlarge calls, W={w}: per item (us)")
        print(f"{'call':<44} {'wall/item':>9} {'caller cpu/item':>15} {'workers cpu/item':>16}")
        for k, (wall, cpu, wc, _) in t.items():
            n = int(k.rsplit("=", 1)[1])
            print(f"{k:<44} {wall * 1e6 / n:>9.2f} {cpu * 1e6 / n:>15.2f} {wc * 1e6 / n:>16.2f}")
    finally:
        for close in reversed(opened):
            close()


ALL = ["pipe/poll/read", "pipe/block/read", "efd/poll/read", "efd/block/read", "pipe/poll/poll", "pipe/poll/spin",
       "efd/poll/spin"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--variants", default=",".join(ALL))
    ap.add_argument("--big", default="64,512", help="N of the per-item rows ('' for none)")
    ap.add_argument("--no-pp", action="store_true", help="leave plan_parallel out")
    ap.add_argument("--check", action="store_true", help="exactness only")
    ap.add_argument("--fault-test", action="store_true", help="requeue on a worker's death only")
    a = ap.parse_args()
    variants = a.variants.split(",")
    if a.check or a.fault_test:
        if a.check:
            check(variants, a.workers)
        if a.fault_test:
            fault_test(a.workers)
        return
    bench(variants, a.workers, a.repeats, not a.no_pp, [int(x) for x in a.big.split(",") if x])


if __name__ == "__main__":
    main()
