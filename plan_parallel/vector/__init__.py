"""The gymnasium ``VectorEnv`` face: :func:`make_vec` and :class:`PlanVectorEnv` (``vector_env``), built on
``core`` (construction, resets, states), ``calls`` (what is in flight: the async state), ``groups`` (one
planning env per env recipe), ``partial`` (send / recv of some sub-envs), ``residents`` (resident envs here),
``attrs``, ``infos``, ``inputs`` and ``fns``."""
from plan_parallel.vector.calls import AsyncState, Received
from plan_parallel.vector.vector_env import PlanVectorEnv, make_vec

__all__ = ["AsyncState", "PlanVectorEnv", "Received", "make_vec"]
