"""Connecting to Ray: join the user's connection or cluster, or start a private instance on loopback.

Imported only for ``backend="ray"``: importing plan_parallel never imports ray.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from typing import Any

from plan_parallel.workers.cores import available_cpus

__all__ = ["connect", "import_ray", "is_private"]


def import_ray() -> Any:
    """The ray module, or an ImportError that says how to install it."""
    try:
        import ray
    except ImportError as e:  # tested by test_ray_backend_without_ray_says_how_to_install_it
        raise ImportError(
            'backend="ray" needs Ray: install it with pip install -e ".[ray]" (or pip install ray)'
        ) from e
    return ray


def is_private() -> bool:
    """True once this process runs plan_parallel's own private local instance."""
    return _PRIVATE


# True once plan_parallel started a private local instance: its actors then ask for
# no CPU (the instance is ours; how many run is n_workers' business), where on a
# cluster each asks for one, so Ray spreads them over the nodes.
_PRIVATE = False
# Quiet, CI-friendly settings for an instance plan_parallel starts itself.
_QUIET_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


def connect(address: str | None) -> bool:
    """Make sure this process is connected to Ray; True when plan_parallel made the connection.

    * Already connected (the user called ``ray.init``): that connection is used
      as it is, and plan_parallel never shuts it down. A process holds one Ray
      connection: asking for a cluster while plan_parallel's own private instance
      is the connection raises ``ConnectionError`` rather than silently running there.
    * ``address`` given (``"auto"``, ``"host:port"``, ``"ray://..."``): join that cluster.
      A ``host:port`` where nothing listens fails within seconds (Ray itself
      retries for minutes).
    * Neither (or ``address="local"``): start a private local instance on loopback (never attach
      to a cluster found through ``RAY_ADDRESS``) with no dashboard, no usage
      stats, worker logs kept out of the driver, and actors at normal priority
      (Ray's default is nice 15). It is shut down when the
      interpreter exits, so several envs share one instance.

    Raises:
        ConnectionError: no Ray cluster answers at ``address``, or this process is
            already connected to plan_parallel's private instance.
        ValueError: ``address`` is malformed (Ray's own message, naming the address).
        ImportError: Ray is not installed.
    """
    global _PRIVATE
    ray = import_ray()
    if address == "local":
        address = None
    if ray.is_initialized():
        if address is not None and _PRIVATE:
            raise ConnectionError(
                f'backend="ray" with address={address!r}: this process is already connected to the private '
                "local Ray instance plan_parallel started for an earlier env (address=None), and a process "
                "holds one Ray connection. Use address=None here, or join the cluster from a fresh process."
            )
        return False
    for k, v in _QUIET_ENV.items():
        os.environ.setdefault(k, v)
    if address is not None:
        _probe(address)
        try:
            ray.init(address=address, log_to_driver=False, logging_level="ERROR")
        except (ConnectionError, ValueError) as e:
            raise type(e)(f'backend="ray" could not join the Ray cluster at address={address!r}: {e}') from e
    else:
        temp_dir = tempfile.mkdtemp(prefix="rt-", dir="/tmp")  # short: socket paths < 107 bytes
        atexit.register(shutil.rmtree, temp_dir, ignore_errors=True)  # runs after _shutdown (LIFO)
        with _loopback_only(ray):
            ray.init(
                address="local", num_cpus=available_cpus(), num_gpus=0,
                include_dashboard=False, log_to_driver=False,
                logging_level="ERROR", object_store_memory=256 * 2**20,
                _temp_dir=temp_dir,
                # Ray runs workers at nice 15; the actors are the compute here (as process
                # workers, which run at nice 0), and on a shared machine nice 15 starves them.
                _system_config={"worker_niceness": 0},
            )
        _PRIVATE = True
    atexit.register(_shutdown)
    return True


@contextlib.contextmanager
def _loopback_only(ray: Any) -> Iterator[None]:
    """Start Ray's processes bound to 127.0.0.1: nothing outside this machine can join and run code.

    On Linux Ray binds its servers to the machine's outward address and turns
    ``_node_ip_address="127.0.0.1"`` into that address; only with "clusters
    disabled" (its macOS/Windows default, ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``)
    does it bind loopback. The switch is read by the processes Ray starts (from
    the environment) and by this one (a constant set when ray was imported), so
    both are set for the start and restored after. Tested by
    ``test_private_ray_instance_listens_on_loopback_only``.
    """
    from ray._private import ray_constants  # the only way to set it once ray is imported

    var = ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR
    saved_env, saved_flag = os.environ.get(var), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[var] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_flag
        if saved_env is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = saved_env


def _probe(address: str, timeout: float = 5.0) -> None:
    """Fail fast when nothing listens at a ``host:port`` address (Ray would retry for minutes)."""
    if "://" in address or address == "auto":
        return
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        return  # Ray names the malformed address itself
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as e:
        raise ConnectionError(
            f'backend="ray" could not join the Ray cluster at address={address!r}: nothing answers there '
            f"({e}). Start a head with `ray start --head --port={port}`, or pass address=None for a "
            "private local instance."
        ) from e


def _shutdown() -> None:
    ray = import_ray()
    if ray.is_initialized():
        ray.shutdown()


