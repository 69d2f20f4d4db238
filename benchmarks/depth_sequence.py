"""Benchmark: ``plenocal depth`` of a sequence of full-scale frames on a local Dask cluster
against one process. Prints JSON.

The visible PRISM set's 5 translation frames (``../shared/validation/prism-r12b``, imported with
``plenocal import-libpleno libpleno-src-trans`` into a temporary folder) are listed ``--frames``
times in all (default 20: each 4 times, under new frame ids) in one manifest, and ``plenocal
depth`` (truth camera in the images' pixel convention, κ 0.72) runs on them once with
the default, in one process (numba's threads over the micro-images) and once with ``--workers N``
(default 2 worker processes of one numba thread each, the frames in parallel). Reported: the
wall time of each (the command's own, cluster start included), seconds per frame, the CPU
seconds of this process and its finished children (the cluster's workers), the speed-up,
whether every PLY and PNG is the same bytes, and the load average before and after (the machine
may be shared).

    python benchmarks/depth_sequence.py [--set PATH] [--frames 20] [--workers 2]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PRISM_R12B, machine

import plenocal
from plenocal.cli.main import main as plenocal_main


def _cpu() -> float:
    """CPU seconds of this process and of its finished children (the local cluster's workers)."""
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def run(argv: list[str]) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (this process and the workers) and the output of one command."""
    buf = io.StringIO()
    c0 = _cpu()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(buf):
        code = plenocal_main(argv)
    if code != 0:
        raise SystemExit(f"plenocal {' '.join(argv)} exited {code}")
    return time.perf_counter() - t0, _cpu() - c0, buf.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", type=Path, default=PRISM_R12B)
    ap.add_argument("--frames", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--kappa", type=float, default=0.72)
    args = ap.parse_args()
    camera = args.set / "camera" / "camera-true-image-index.json"
    with tempfile.TemporaryDirectory(prefix="plenocal-depth-seq-") as tmp:
        ds = Path(tmp) / "ds"
        subprocess.run([sys.executable, "-m", "plenocal", "import-libpleno", str(args.set / "libpleno-src-trans"), "-o", str(ds)],
                       check=True, stdout=subprocess.DEVNULL)
        doc = json.loads((ds / "manifest.json").read_text())
        frames = [e for e in doc["images"] if e.get("frame") is not None]
        others = [e for e in doc["images"] if e.get("frame") is None]
        seq = []
        for n in range(args.frames):
            e = dict(frames[n % len(frames)])
            e["frame"] = 1000 + n
            e.pop("sequence", None)
            e.pop("displacement_mm", None)
            e["role"] = "evaluation"
            seq.append(e)
        doc["images"] = others + seq
        (ds / "manifest.json").write_text(json.dumps(doc, indent=1))
        base = ["depth", str(ds), "--camera", str(camera), "--kappa", str(args.kappa)]
        # warm-up: numba's caches of this tree (both paths load the same)
        _ = run([*base, "-o", str(Path(tmp) / "warm"), "--frames", str(seq[0]["frame"])])
        load0 = os.getloadavg()
        t_one, cpu_one, out_one = run([*base, "-o", str(Path(tmp) / "one")])
        load1 = os.getloadavg()
        t_dask, cpu_dask, out_dask = run([*base, "-o", str(Path(tmp) / "dask"), "--workers", str(args.workers)])
        load2 = os.getloadavg()
        a = sorted((Path(tmp) / "one" / "depth").iterdir())
        b = sorted((Path(tmp) / "dask" / "depth").iterdir())
        same = [p.name for p in a] == [p.name for p in b] and all(x.read_bytes() == y.read_bytes() for x, y in zip(a, b, strict=True))
    print(json.dumps({
        "benchmark": "depth_sequence", "plenocal_version": plenocal.__version__, "machine": machine(),
        "set": str(args.set), "frames": args.frames, "workers": args.workers,
        "single_process": {"seconds": t_one, "seconds_per_frame": t_one / args.frames, "cpu_seconds": cpu_one,
                           "last_line": out_one.strip().splitlines()[-1]},
        "local_cluster": {"seconds": t_dask, "seconds_per_frame": t_dask / args.frames, "cpu_seconds": cpu_dask,
                          "last_line": out_dask.strip().splitlines()[-1]},
        "speed_up": t_one / t_dask,
        "same_bytes": same,
        "load_average_1min": {"before": load0[0], "between": load1[0], "after": load2[0]},
    }, indent=1))


if __name__ == "__main__":
    main()
