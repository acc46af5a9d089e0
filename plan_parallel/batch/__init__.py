"""The parallel backends: BatchEnv over a WorkerPool, decided by a Tuner."""
from plan_parallel.batch.batch_env import BatchEnv
from plan_parallel.batch.future import BatchFuture
from plan_parallel.batch.tuner import Tuner
from plan_parallel.wire.codec import split_by_cost

__all__ = ["BatchEnv", "BatchFuture", "Tuner", "split_by_cost"]
