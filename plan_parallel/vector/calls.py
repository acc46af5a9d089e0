"""What a vector env has in flight: its one async state, a submitted step, and what ``recv`` returns.

:class:`AsyncState` is the shape of gymnasium's: a :class:`~plan_parallel.vector.PlanVectorEnv` waits for
nothing, for the ``step_wait`` of a ``step_async``, or for the ``recv`` of sub-envs it sent; a call that needs it
idle is refused, naming what it waits for (:func:`refuse_unless_idle`).
"""
from __future__ import annotations

from enum import Enum
from typing import Any, NamedTuple

import numpy as np
from gymnasium.error import AlreadyPendingCallError

__all__ = ["AsyncState", "Received", "Step", "refuse_unless_idle"]


class AsyncState(Enum):
    """What a vector env waits for (``PlanVectorEnv.async_state``)."""

    DEFAULT = "default"  #: nothing: any call may start
    WAITING_STEP = "step"  #: a step_async's step: step_wait (or reset, which drops it) comes next
    WAITING_RECV = "recv"  #: sub-envs sent and not all received: recv (or reset, which drops them) comes next


def refuse_unless_idle(state: AsyncState, what: str, busy: list[int]) -> None:
    """Refuse call ``what`` unless ``state`` is DEFAULT (``busy``: the sub-envs sent and not received).

    Raises:
        AlreadyPendingCallError: the env waits for a step_wait or a recv.
    """
    if state is AsyncState.WAITING_STEP:
        raise AlreadyPendingCallError(f"{what}: a step_async is pending; call step_wait() first "
                                      "(or reset(), which drops it)", "step")
    if state is AsyncState.WAITING_RECV:
        raise AlreadyPendingCallError(f"{what}: sub-envs {busy} were sent and not yet received; "
                                      "call recv() first (or reset(), which drops them)", "send")


class Received(NamedTuple):
    """What :meth:`PlanVectorEnv.recv` returns: k sub-envs' results, in the order of ``env_ids``.

    Fields as in ``VectorEnv.step`` for a batch of k (infos merged with ``_key``
    masks over the k positions), plus ``env_ids``: int64 ``(k,)``, which sub-env each row is.
    """

    observations: Any
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    infos: dict
    env_ids: np.ndarray


class Step(NamedTuple):
    """One submitted step of some sub-envs: ``fut`` steps ``ids`` (in order); ``resets`` are done already."""

    fut: Any
    ids: np.ndarray
    resets: dict
