"""Workers: one small interface (:class:`~plan_parallel.workers.base.Worker`), several backends."""
from plan_parallel.workers.base import Call, Reply, Worker, remote_error, reraise

__all__ = ["Call", "Reply", "Worker", "remote_error", "reraise"]
