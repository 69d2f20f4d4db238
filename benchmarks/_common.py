"""Shared helpers for benchmark scripts: machine description, timing (median of runs), a validation set's translation frames."""

from __future__ import annotations

import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

PRISM_R12B = Path(__file__).resolve().parent.parent.parent / "shared" / "validation" / "prism-r12b"
"""The visible PRISM R12-B set (``../shared/validation/prism-r12b``), the depth benchmarks' default."""


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


def emit_json(result: Any, out: Path | None) -> None:
    """Print a benchmark's result as indented JSON (numpy scalars as floats) and write the same
    text to ``out`` when given."""
    import json

    text = json.dumps(result, indent=1, default=float)
    if out is not None:
        out.write_text(text)
    print(text)


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


def translation_frames(set_dir: Path, frames: str | None = None) -> Iterator[tuple[str, Any, Any, Any]]:
    """The translation frames of a validation set (``truth.json``'s order), imported as a user would
    (``plenocal import-libpleno SET/libpleno-src-trans`` into a temporary folder, which lives as long
    as the iteration) and devignetted by the white at their f-number: (image name, manifest entry,
    devignetted image, weight). ``frames``: comma-separated frame ids to keep (default all)."""
    import json

    from plenocal.cli.depth import white_for
    from plenocal.detect.corners import devignette
    from plenocal.io.dataset import read_dataset

    truth = json.loads((set_dir / "truth.json").read_text())
    wanted = None if frames is None else {int(x) for x in frames.split(",")}
    with tempfile.TemporaryDirectory(prefix="plenocal-bench-") as tmp:
        ds_path = Path(tmp) / "ds"
        subprocess.run([sys.executable, "-m", "plenocal", "import-libpleno", str(set_dir / "libpleno-src-trans"), "-o", str(ds_path)],
                       check=True, stdout=subprocess.DEVNULL)
        ds = read_dataset(ds_path)
        by_name = {Path(e.path).name: e for e in ds.manifest.images if e.frame is not None}
        whites: dict[str, Any] = {}
        for name in truth["translation"]["frames"]:
            e = by_name[name]
            if wanted is not None and e.frame not in wanted:
                continue
            w = white_for(ds, e.f_number)
            if w.path not in whites:
                whites[w.path] = ds.read_image(w)
            dv, weight = devignette(ds.read_image(e), whites[w.path])
            yield name, e, dv, weight
