"""Benchmark: per micro-image depth on the PRISM R12-B translation frames, against the truth. Prints JSON.

The visible PRISM set (``../shared/validation/prism-r12b``: frames 100–104, a fronto-parallel
board at 450, 500, …, 650 mm) is imported as a user would (``plenocal import-libpleno
libpleno-src-trans``) into a temporary folder; each frame is devignetted by the white at its
f-number and matched (:func:`plenocal.depth.matching.estimate_virtual_depths`, default
settings) with the given camera (default: the truth in the images' pixel convention,
``camera/camera-true-image-index.json``) and κ (default 0.72: ``plenocal blur`` on the set's
calibration frames with the camera ``plenocal run`` calibrated).

Per frame: the micro-images whose line of sight meets the board's plate (truth pose, 5 mm inside
its edges), of those the textured ones (texture screen), the fraction of them with a depth
(coverage), median and 90th percentile of |z − z_true|/z over them, the signed median, seconds
(wall time of ``depth_map``, the matching and the aggregation as ``plenocal depth`` does them,
images in memory, after a warm-up on the first frame; the per-micro-image figures come from a
second, untimed matching that refines every micro-image), the median's standard error (a block
bootstrap over 10 mm tiles of the board, :func:`median_standard_error`), CPU seconds of all the threads (on a shared machine the wall time tells more
about the other jobs: CPU seconds / cores is the wall time on an idle machine when the work
spreads over them) and the load average; each for the per-micro-image estimates and after the robust aggregation (what
``plenocal depth`` writes). Per pair of consecutive frames: the displacement of the medians of z
against the true 50 mm, with its standard error from the two medians'.

    python benchmarks/depth.py [--set PATH] [--camera CAMERA] [--kappa 0.72] [--frames 100,101]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PRISM_R12B, machine, peak_memory_mb, translation_frames

import plenocal
from plenocal.depth.matching import depth_map, estimate_virtual_depths
from plenocal.depth.metric import points_from_virtual_depth
from plenocal.io.camera import read_camera

BOARD_MARGIN_MM = 5.0


def board_mask(camera, k, l, plate_R, plate_t, plate_size):
    """(N,) bool: micro-image (k, l)'s line of sight meets the plate ≥ BOARD_MARGIN_MM inside its edges."""
    a = points_from_virtual_depth(camera, k, l, np.full(len(k), 4.0))
    b = points_from_virtual_depth(camera, k, l, np.full(len(k), 40.0))
    n = plate_R[:, 2]
    s = ((plate_t - a) @ n) / ((b - a) @ n)
    hit = a + s[:, None] * (b - a)
    loc = (hit - plate_t) @ plate_R
    m = BOARD_MARGIN_MM
    return (loc[:, 0] > m) & (loc[:, 0] < plate_size[0] - m) & (loc[:, 1] > m) & (loc[:, 1] < plate_size[1] - m)


SE_TILE_MM = 10.0
"""Side of the board tiles the median's standard error resamples (the depth errors are correlated
over the checker's squares and the aggregation's 4 rings; the SE still grows from 2 to 10 mm tiles,
so it is a lower bound)."""


def median_standard_error(z: np.ndarray, board_xy: np.ndarray, *, tile_mm: float = SE_TILE_MM, draws: int = 200,
                          seed: int = 0) -> float:
    """Block-bootstrap standard error (mm) of the median of ``z`` over points at board coordinates
    ``board_xy`` (N, 2): tiles of ``tile_mm`` resampled with Poisson(1) weights."""
    key = np.floor(board_xy / tile_mm).astype(np.int64)
    _, inv = np.unique(key, axis=0, return_inverse=True)
    inv = inv.ravel()
    rng = np.random.default_rng(seed)
    n_tiles = int(inv.max()) + 1 if len(inv) else 0
    meds = [np.median(np.repeat(z, rng.poisson(1.0, n_tiles)[inv])) for _ in range(draws)]
    return float(np.std(meds))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", type=Path, default=PRISM_R12B)
    ap.add_argument("--camera", type=Path, default=None)
    ap.add_argument("--kappa", type=float, default=0.72)
    ap.add_argument("--frames", default=None)
    args = ap.parse_args()

    truth = json.loads((args.set / "truth.json").read_text())
    camera_path = args.camera or args.set / "camera" / "camera-true-image-index.json"
    camera = read_camera(camera_path)
    plate_size = truth["checkerboard"]["plate_size_mm"]
    frames = list(translation_frames(args.set, args.frames))
    if frames:  # warm-up (numba caches, page faults)
        _, e0, dv0, w0 = frames[0]
        sub = np.zeros(camera.grid.lattice.width * camera.grid.lattice.height, dtype=bool)
        sub[:: 97] = True
        estimate_virtual_depths(dv0, w0, camera, kappa=args.kappa, f_number=e0.f_number, subset=sub)
    results = []
    medians = {}
    for name, e, dv, weight in frames:
        # timed: what plenocal depth does (depth_map: the unconfident micro-images, which the
        # aggregation does not use, are not refined); the per-micro-image figures from every
        # micro-image refined (untimed)
        c0, t0 = time.process_time(), time.perf_counter()
        agg = depth_map(dv, weight, camera, kappa=args.kappa, f_number=e.f_number)
        c2, t2 = time.process_time(), time.perf_counter()
        raw = estimate_virtual_depths(dv, weight, camera, kappa=args.kappa, f_number=e.f_number)
        info = truth["checkerboards"][name]["plate_in_camera"]
        R, t = np.array(info["R"]), np.array(info["t"])
        z_true = float(t[2])
        onb = board_mask(camera, raw.k, raw.l, R, t, plate_size)
        tex = onb & raw.textured
        row = {"frame": e.frame, "image": name, "z_true_mm": z_true, "board_micro_images": int(onb.sum()),
               "textured": int(tex.sum()), "seconds": t2 - t0, "cpu_seconds": c2 - c0, "load_average_1min": os.getloadavg()[0]}
        for label, vd in (("per_micro_image", raw), ("aggregated", agg)):
            ok = tex & vd.ok
            pts = points_from_virtual_depth(camera, vd.k[ok], vd.l[ok], vd.virtual_depth[ok])
            # the plate is fronto-parallel (R = I): the true depth of every board point is t_z
            rel = (pts[:, 2] - z_true) / z_true
            conf = vd.confidence[ok]
            board_xy = ((pts - t) @ R)[:, :2]
            se = median_standard_error(pts[:, 2], board_xy)
            medians.setdefault(label, {})[e.frame] = (float(np.median(pts[:, 2])), z_true, se)
            row[label] = {
                "with_depth": int(ok.sum()), "coverage": float(ok.sum() / max(tex.sum(), 1)),
                "median_abs_rel_error_pct": float(100 * np.median(np.abs(rel))),
                "p90_abs_rel_error_pct": float(100 * np.percentile(np.abs(rel), 90)),
                "signed_median_rel_error_pct": float(100 * np.median(rel)),
                "median_standard_error_pct": float(100 * se / z_true),
                "median_confidence": float(np.median(conf)),
                "counts": vd.counts(),
            }
        results.append(row)
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    pairs = []
    for label, med in medians.items():
        ids = sorted(med)
        for a, b in itertools.pairwise(ids):
            d_est = med[b][0] - med[a][0]
            d_true = med[b][1] - med[a][1]
            pairs.append({"estimate": label, "frames": [a, b], "displacement_true_mm": d_true, "displacement_mm": d_est,
                          "error_pct": float(100 * abs(d_est - d_true) / abs(d_true)),
                          "standard_error_pct": float(100 * np.hypot(med[a][2], med[b][2]) / abs(d_true))})
    settings = agg.settings if frames else {}
    print(json.dumps({
        "benchmark": "depth", "plenocal_version": plenocal.__version__, "machine": machine(),
        "set": str(args.set), "camera": str(camera_path), "kappa": args.kappa, "settings": settings,
        "frames": results, "pairs": pairs,
        "targets": {"median_abs_rel_error_pct": 0.5, "displacement_error_pct": 0.5, "coverage": 0.8, "seconds": 3.0},
        "peak_memory_mb": peak_memory_mb(),
    }, indent=1))


if __name__ == "__main__":
    main()
