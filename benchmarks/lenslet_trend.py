"""Do the white images tell refractive micro-lenses from thin ones? Prints JSON.

For each combination of main lens (thin, the real-optics set's ``field-corrector``) and lenslets
(thin, fused-silica caps on 0.1 mm), plenocal's real-optics tracer renders the R12-B preset's
whites (full scale, the paper's MLA tilt, ``--rays``), ``plenocal precalibrate`` runs on them as a
user would, and the whites' micro-lens blur-disc change at 5 mm from the centre
(``lenslet_trend``, :func:`plenocal.precalib.internals.lenslet_field_trend`) is reported with the
decision of :func:`plenocal.calib.lenslets.refractive_lenslets`. ``--datasets`` adds plenocal
datasets made elsewhere (e.g. ``plenocal import-libpleno`` of the PRISM and real-optics sets).

    python benchmarks/lenslet_trend.py [--work DIR] [--rays 16] [--datasets DS ...] [--skip-render]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine

CASES = {
    "thin main lens, thin lenslets": ["--lens", "thin", "--lenslets", "thin"],
    "field corrector, thin lenslets": ["--lens", "field-corrector", "--lenslets", "thin"],
    "thin main lens, caps on 0.1 mm": ["--lens", "thin", "--lenslets", "real"],
    "field corrector, caps on 0.1 mm": ["--lens", "field-corrector", "--lenslets", "real"],
}


def precalibrated_trend(dataset: Path, out: Path) -> dict[str, Any]:
    """``plenocal precalibrate`` on ``dataset`` into ``out``: its lenslet trend, the decision, seconds."""
    from plenocal.calib.lenslets import refractive_lenslets
    from plenocal.io.camera import read_camera_file

    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "plenocal", "precalibrate", str(dataset), "-o", str(out)],
                       capture_output=True, text=True)
    row: dict[str, Any] = {"dataset": str(dataset), "exit_code": p.returncode, "seconds": time.perf_counter() - t0}
    if p.returncode != 0:
        return row | {"error": p.stderr.strip().splitlines()[-1:]}
    omega = read_camera_file(out / "camera.json").internal_parameters
    trend = omega.lenslet_trend if omega is not None else None
    return row | {"trend": None if trend is None else trend.to_dict(), "refractive": refractive_lenslets(trend)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/plenocal-lenslet-trend"))
    ap.add_argument("--rays", type=int, default=16)
    ap.add_argument("--datasets", type=Path, nargs="*", default=[])
    ap.add_argument("--skip-render", action="store_true", help="only the --datasets")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"machine": machine(), "rays": args.rays, "cases": {}}
    if not args.skip_render:
        for i, (name, opts) in enumerate(CASES.items()):
            ds = args.work / f"case-{i}"
            if not (ds / "manifest.json").is_file():
                cmd = [sys.executable, "-m", "plenocal", "simulate", "r12-b", "-o", str(ds), "--frames", "white,devignetting",
                       "--rays", str(args.rays), "--tilt-scale", "1", "--quiet", *opts]
                t0 = time.perf_counter()
                subprocess.run(cmd, check=True)
                render_s = time.perf_counter() - t0
            else:
                render_s = None
            result["cases"][name] = precalibrated_trend(ds, args.work / f"pre-{i}") | {"render_s": render_s}
    for ds in args.datasets:
        result["cases"][str(ds)] = precalibrated_trend(ds, args.work / f"pre-{ds.parent.name}-{ds.name}")
    print(json.dumps(result, indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
