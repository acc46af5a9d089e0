"""A bug of the process backend (fixed), found by the Ray benchmark (Pong RGB fs1, B=512, dt=4): a pipe deadlock.

``BatchEnv._send`` (plan_parallel/batch.py) writes a chunk with a blocking
``ExternalProcess.send_bytes`` -> ``Connection.send_bytes`` (plan_parallel/workers/process.py).
``_dispatch`` / ``_feed`` queue up to two chunks per worker. When the queued
chunk is larger than the socket buffer (~208 KiB: states that are pickled, not
slab arrays, e.g. ALE states), the parent blocks in that write until the worker
reads it; the worker first finishes the previous chunk and blocks writing its
reply, also larger than the buffer, until the parent reads it. Each waits for
the other, forever: no ``timeout`` applies (the parent never gets back to its
wait loop) and ``close()`` would block on the same pipe.

Fixed: BatchEnv._write holds back a call larger than PIPE_SAFE_BYTES until the
worker is idle (reading), so neither side can block on a full pipe.
"""
from __future__ import annotations

import os
import signal
from typing import Any

import numpy as np
import pytest

import plan_parallel as pp
from tests.deadline import call_with_deadline
from tests.envs_ray import BigStateEnv

pytestmark = pytest.mark.usefixtures("no_leaks_module", "no_leaks")


@pytest.mark.timeout(60)
def test_large_pickled_states_with_queued_chunks_do_not_deadlock() -> None:
    env: Any = pp.make(BigStateEnv, backend="process", n_workers=2, small_batch_inline=False, timeout=2.0)
    try:
        s0 = env.reset(seed=0)[0]
        acts = np.zeros(24, dtype=np.int64)
        env.step_batch(acts, states=[s0] * 24)  # learns the step time: later batches go 3 chunks per worker
        # 4 items of 400 KB per chunk each way; a fixed env returns in ~0.1 s, and `timeout` is 2 s.
        call_with_deadline(lambda: env.step_batch(acts, states=[s0] * 24), 6.0, "step_batch of 24 large states")
    finally:
        for pid in env.pids:  # a deadlocked parent cannot close its pipes: free it first
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        env.close()
