"""Benchmark: per-pixel depth on the PRISM R12-B translation frames, against the truth. Prints JSON.

The visible PRISM set (frames 100–104: a fronto-parallel board at 450 … 650 mm) imported as
:mod:`benchmarks.depth` does; each frame is devignetted, matched and aggregated with the defaults
of ``plenocal depth`` (truth camera in the images' pixel convention, κ 0.72), then refined per
pixel (:func:`plenocal.depth.pixel.refine_pixel_depths`, defaults) and screened
(:func:`plenocal.depth.pixel.screen_pixels`), timed after a warm-up: the matching, the
refinement (with its own blur stack) and both together, wall and CPU seconds of all threads, and
the load average.

Per frame, over the pixels of the textured board micro-images (line of sight ≥ 5 mm inside the
plate; the board is fronto-parallel, so every pixel's true z is the board's; each pixel's point
at its own chief-ray offset): the fraction with a depth and the fraction kept, median, 90th
percentile and RMS of |z − z_true|/z and the signed median, for every pixel with a depth, for
the kept ones, and for the kept ones at other thresholds (``--grid``: confidence × texture SNR);
the same for the aggregated micro-image depths they started from.

    python benchmarks/depth_pixel.py [--set PATH] [--frames 100,104] [--kappa 0.72] [--grid]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PRISM_R12B, machine, peak_memory_mb, translation_frames

import plenocal
from depth import board_mask
from plenocal.depth.matching import depth_map
from plenocal.depth.metric import points_from_virtual_depth
from plenocal.depth.pixel import (
    MIN_CONFIDENCE,
    MIN_TEXTURE_SNR,
    pixel_confidence,
    refine_pixel_depths,
    screen_pixels,
    texture_snr,
)
from plenocal.io.camera import read_camera

GRID = ((0.5, 2.0), (0.5, 2.5), (0.6, 1.5), (0.6, 2.0), (0.6, 3.0), (0.67, 2.0), (0.7, 2.0))
"""(confidence, texture SNR) thresholds scored with ``--grid``."""


def errors(z: np.ndarray, z_true: float) -> dict[str, float]:
    rel = (z - z_true) / z_true
    if rel.size == 0:
        return {}
    return {"n": int(rel.size), "median_abs_rel_error_pct": float(100 * np.median(np.abs(rel))),
            "p90_abs_rel_error_pct": float(100 * np.percentile(np.abs(rel), 90)),
            "rms_rel_error_pct": float(100 * np.sqrt(np.mean(rel**2))),
            "signed_median_rel_error_pct": float(100 * np.median(rel))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", type=Path, default=PRISM_R12B)
    ap.add_argument("--kappa", type=float, default=0.72)
    ap.add_argument("--frames", default=None)
    ap.add_argument("--grid", action="store_true", help="also score the kept pixels at the thresholds of GRID")
    args = ap.parse_args()

    truth = json.loads((args.set / "truth.json").read_text())
    camera_path = args.set / "camera" / "camera-true-image-index.json"
    camera = read_camera(camera_path)
    plate_size = truth["checkerboard"]["plate_size_mm"]
    results = []
    settings: dict = {}
    warm = False
    for name, e, dv, weight in translation_frames(args.set, args.frames):
        if not warm:  # numba caches, page faults: a few micro-images
            vd = depth_map(dv, weight, camera, kappa=args.kappa, f_number=e.f_number)
            sub = vd.ok.copy()
            sub[np.flatnonzero(sub)[20:]] = False
            import dataclasses

            refine_pixel_depths(dv, weight, camera, dataclasses.replace(vd, status=np.where(sub, vd.status, 1).astype(np.int8)),
                                kappa=args.kappa, f_number=e.f_number)
            warm = True
        c0, t0 = time.process_time(), time.perf_counter()
        vd = depth_map(dv, weight, camera, kappa=args.kappa, f_number=e.f_number)
        c1, t1 = time.process_time(), time.perf_counter()
        px = refine_pixel_depths(dv, weight, camera, vd, kappa=args.kappa, f_number=e.f_number)
        keep = screen_pixels(px)
        c2, t2 = time.process_time(), time.perf_counter()
        settings = {**px.settings, "min_confidence": MIN_CONFIDENCE, "min_texture_snr": MIN_TEXTURE_SNR}
        info = truth["checkerboards"][name]["plate_in_camera"]
        R, t = np.array(info["R"]), np.array(info["t"])
        z_true = float(t[2])
        onb = board_mask(camera, vd.k, vd.l, R, t, plate_size) & vd.textured
        on_px = onb[px.micro_image]
        ok = on_px & np.isfinite(px.virtual_depth)
        z_px = np.full(len(px.x), np.nan)
        mi = px.micro_image[ok]
        z_px[ok] = points_from_virtual_depth(camera, vd.k[mi], vd.l[mi], px.virtual_depth[ok], offset_px=px.offset_px[ok])[:, 2]
        okm = onb & vd.ok
        z_mi = points_from_virtual_depth(camera, vd.k[okm], vd.l[okm], vd.virtual_depth[okm])[:, 2]
        n_on = max(int(on_px.sum()), 1)
        row = {"frame": e.frame, "image": name, "z_true_mm": z_true, "load_average_1min": os.getloadavg()[0],
               "seconds": {"matching": t1 - t0, "per_pixel": t2 - t1, "together": t2 - t0},
               "cpu_seconds": {"matching": c1 - c0, "per_pixel": c2 - c1, "together": c2 - c0},
               "micro_images_refined": int(px.settings["micro_images"]), "pixels": len(px.x), "pixels_kept": int(keep.sum()),
               "board_pixels": int(on_px.sum()), "board_pixel_coverage": float(ok.sum() / n_on),
               "board_pixels_kept": float((ok & keep).sum() / n_on),
               "per_pixel": errors(z_px[ok], z_true), "per_pixel_kept": errors(z_px[ok & keep], z_true),
               "aggregated_micro_images": errors(z_mi, z_true)}
        if args.grid:
            conf, snr = pixel_confidence(px), texture_snr(px)
            with np.errstate(invalid="ignore"):
                row["grid"] = [{"min_confidence": c, "min_texture_snr": s, "board_pixels_kept": float((k := ok & (conf >= c) & (snr >= s)).sum() / n_on),
                                **errors(z_px[k], z_true)} for c, s in GRID]
        results.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    print(json.dumps({
        "benchmark": "depth_pixel", "plenocal_version": plenocal.__version__, "machine": machine(),
        "set": str(args.set), "camera": str(camera_path), "kappa": args.kappa, "settings": settings,
        "frames": results, "targets": {"seconds_together": 20.0, "kept_median_abs_rel_error_pct": 1.0}, "peak_memory_mb": peak_memory_mb(),
    }, indent=1))


if __name__ == "__main__":
    main()
