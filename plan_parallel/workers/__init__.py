"""Workers: the Worker Protocol, the op server they share, and one module per backend."""
from plan_parallel.workers.base import Worker

__all__ = ["Worker"]
