"""The ``plan-parallel`` command (``main``): ``plan`` runs a planner (``plan``), ``check`` reports on
clonability, ``bench`` measures throughput (``bench``)."""
from plan_parallel.cli.main import main

__all__ = ["main"]
