"""Test envs added with the Ray backend's tests (importable, so actors and workers unpickle them by reference).

Ray is imported inside the methods that need it: importing this module never imports ray.
"""
from __future__ import annotations

import os
import time
from typing import Any

from tests.envs import FaultyEnv
from tests.envs_faults import SlowEnv

__all__ = ["BigStateEnv", "NodeEnv", "RayKillEnv"]


class RayKillEnv(FaultyEnv):
    """A :class:`FaultyEnv` whose fault is ``ray.kill`` of its own actor's handle, mid-call.

    Triggered like ``FaultyEnv`` (``phase``, ``trigger_action``, ``once_file``);
    the handle comes from ``ray.get_runtime_context().current_actor``, so the
    kill goes through Ray (GCS) exactly as a ``ray.kill(handle)`` from the driver.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(fault="sigkill", **kwargs)  # any killing fault: _fire below replaces it

    def _fire(self, where: str) -> Any:
        if not self._armed():
            return None
        import ray

        ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
        time.sleep(60)  # the kill arrives asynchronously
        raise AssertionError("ray.kill did not kill the actor within 60 s")


class NodeEnv(SlowEnv):
    """A :class:`SlowEnv` that records which Ray node hosts it.

    At construction it writes the node id into ``<record_dir>/<pid>``, so a
    test maps ``env.pids`` to nodes through the public API only. Built outside an
    actor in a process connected to Ray (the driver), it appends the pid to
    ``<record_dir>/outside-actors``; outside Ray nothing is written.
    """

    def __init__(self, record_dir: str, delay: float = 0.0, horizon: int = 1000) -> None:
        super().__init__(delay=delay, horizon=horizon)
        import ray

        if ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None:  # inside an actor
            with open(os.path.join(record_dir, str(os.getpid())), "w") as f:
                f.write(ray.get_runtime_context().get_node_id())
        elif ray.is_initialized():
            with open(os.path.join(record_dir, "outside-actors"), "a") as f:
                f.write(f"{os.getpid()}\n")


class BigStateEnv(SlowEnv):
    """A :class:`SlowEnv` (1 ms steps) whose state carries ``blob_bytes`` opaque bytes (pickled, never a slab array)."""

    def __init__(self, blob_bytes: int = 400_000, delay: float = 0.001) -> None:
        super().__init__(delay=delay, horizon=10**6)
        self.blob = bytes(blob_bytes)

    def get_state(self) -> tuple:
        return (*super().get_state(), self.blob)

    def set_state(self, state: tuple) -> None:
        super().set_state(state[:3])
        self.blob = state[3]
