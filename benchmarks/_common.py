"""Shared helpers for benchmark scripts: machine description and timing (median of runs)."""

from __future__ import annotations

import os
import platform
import resource
import statistics
import time
from collections.abc import Callable
from typing import Any


def machine() -> dict[str, Any]:
    import numpy

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
    }
    try:
        import numba

        info["numba"] = numba.__version__
        info["numba_threads"] = numba.config.NUMBA_NUM_THREADS
    except ImportError:  # pragma: no cover
        pass
    return info


def peak_memory_mb() -> float:
    """Peak resident set size of this process, MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def time_runs(fn: Callable[[], Any], *, runs: int = 5, warmup: int = 1) -> dict[str, float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times), "runs": runs}
