"""Frames of a sequence mapped over a Dask cluster or in this process, results as they complete.

Depth frames are independent: :func:`map_frames` runs one task per frame on a
``distributed.LocalCluster`` of worker processes, on an existing
cluster given by its scheduler's address, or one after the other in this process. The tasks are
deterministic (the numba kernels give the same bytes whatever the thread count), so every path
gives the same results. ``distributed`` is imported only when a cluster is asked for.

Each task's function and its arguments must be picklable (a module-level function; paths rather
than open files): with ``scheduler`` the workers must see the same paths.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from plenocal.errors import UsageError

T = TypeVar("T")
R = TypeVar("R")

CONNECT_TIMEOUT_S = 10.0
"""Seconds to wait for the scheduler given by address before saying it does not answer."""


def available_cores() -> int:
    """Cores this process may run on (the affinity mask where the system has one)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # pragma: no cover - not Linux
        return max(os.cpu_count() or 1, 1)


def map_frames(
    fn: Callable[[T], R],
    jobs: Sequence[T],
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    local: bool = False,
) -> Iterator[tuple[int, R]]:
    """``(index, fn(jobs[index]))`` for every job, in the order they complete.

    Parameters
    ----------
    fn : module-level function of one job (pickled to the workers).
    jobs : the jobs (picklable).
    scheduler : address of an existing Dask scheduler (``tcp://host:8786``): run there.
    workers : worker processes of the local cluster (default: one per core, at most one per job).
    local : run in this process, one job after the other (``scheduler`` and ``workers`` ignored).

    Leaving the iteration early (an exception, Ctrl-C in the caller) cancels the remaining tasks
    and closes the client and the local cluster.
    """
    if local or not jobs:
        for i, job in enumerate(jobs):
            yield i, fn(job)
        return
    from dask.distributed import Client, LocalCluster, as_completed

    cluster: Any = None
    client: Any = None
    futures: list[Any] = []
    try:
        if scheduler is not None:
            try:
                client = Client(scheduler, timeout=f"{CONNECT_TIMEOUT_S:g}s")
            except (OSError, TimeoutError, ValueError) as exc:
                raise UsageError(f"--scheduler {scheduler}: no Dask scheduler answered within {CONNECT_TIMEOUT_S:g} s ({exc})") from None
        else:
            n = max(1, min(workers if workers is not None else available_cores(), len(jobs)))
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None,
                                   silence_logs=logging.CRITICAL)
            client = Client(cluster)
        futures = client.map(fn, list(jobs), pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        for fut in as_completed(futures):
            yield index[fut.key], fut.result()
    finally:
        if client is not None and futures:
            client.cancel(futures)
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
