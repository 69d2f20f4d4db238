"""Benchmark: the all-in-focus image of the PRISM R12-B translation frames, against the board's texture. Prints JSON.

The visible PRISM set (``../shared/validation/prism-r12b``, frames 100–104: a fronto-parallel
board at 450 … 650 mm) is imported as :mod:`benchmarks.depth` does; each frame is devignetted,
matched and aggregated with the defaults of ``plenocal depth`` (camera: the truth in the images'
pixel convention; κ 0.72), then rendered (:func:`plenocal.depth.render.render_all_in_focus`,
defaults: 1/4 of the sensor's size).

Per frame: seconds of the rendering (median of ``--runs`` after a warm-up; CPU seconds of all
threads; the load average), and the normalised cross-correlation (NCC) of the image with the
board's texture (PRISM's ``scene/texture-board-r12b.png``, texel centres at multiples of
0.0625 mm on the plate) over the plate points ≥ 5 mm inside its edges on a 0.25 mm grid, each
sampled where the truth camera's central view puts it
(:func:`plenocal.model.projection.central_view_px`); the same for the micro-images' mean grey
levels on the same cells (``frame-<id>-central.png``) and for the image rendered with the
depths × 1.3 and ÷ 1.3. ``--out DIR`` writes the images as PNG.

    python benchmarks/depth_render.py [--set PATH] [--frames 100,104] [--runs 3] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PRISM_R12B, machine, peak_memory_mb, translation_frames

import plenocal
from plenocal.cli.depth import cell_image, grey_png
from plenocal.depth.matching import depth_map
from plenocal.depth.render import render_all_in_focus
from plenocal.detect.corners import bilinear
from plenocal.io.camera import read_camera
from plenocal.model.projection import central_view_px

MARGIN_MM = 5.0
GRID_MM = 0.25
TEXEL_MM = 0.0625
EDGE_BAND_MM = 1.5
"""The ``*_edges`` scores use only the plate points within this distance of a square's edge (the
squares' insides are flat: they dominate the NCC and say nothing of sharpness)."""


def ncc(a: np.ndarray, b: np.ndarray) -> float:
    a = a - a.mean()
    b = b - b.mean()
    return float(np.sum(a * b) / np.sqrt(np.sum(a * a) * np.sum(b * b)))


def score(image: np.ndarray, scale: int, X: np.ndarray, truth: np.ndarray, use: np.ndarray | None = None) -> tuple[float, int]:
    """NCC of ``image`` sampled at central-view positions X with ``truth``, over the finite samples (of ``use``)."""
    u = (X[:, 0] + 0.5) / scale - 0.5
    v = (X[:, 1] + 0.5) / scale - 0.5
    h, w = image.shape
    inside = (u >= 0) & (u <= w - 1) & (v >= 0) & (v <= h - 1)
    vals = bilinear(np.nan_to_num(image), u, v)
    ok = inside & (bilinear(np.isfinite(image).astype(np.float64), u, v) > 0.999)
    if use is not None:
        ok &= use
    return ncc(vals[ok], truth[ok]), int(ok.sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", type=Path, default=PRISM_R12B)
    ap.add_argument("--kappa", type=float, default=0.72)
    ap.add_argument("--frames", default=None)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    truth = json.loads((args.set / "truth.json").read_text())
    camera_path = args.set / "camera" / "camera-true-image-index.json"
    camera = read_camera(camera_path)
    tex = cv2.imread(str(args.set / "scene" / truth["checkerboard"]["texture"]), cv2.IMREAD_GRAYSCALE).astype(np.float64) / 255.0
    plate_w, plate_h = truth["checkerboard"]["plate_size_mm"]
    gx, gy = np.meshgrid(np.arange(MARGIN_MM, plate_w - MARGIN_MM, GRID_MM), np.arange(MARGIN_MM, plate_h - MARGIN_MM, GRID_MM))
    plate_pts = np.column_stack([gx.ravel(), gy.ravel(), np.zeros(gx.size)])
    tex_vals = bilinear(tex, plate_pts[:, 0] / TEXEL_MM, plate_pts[:, 1] / TEXEL_MM)
    square = truth["checkerboard"]["square_mm"]
    to_edge = np.minimum(np.abs((plate_pts[:, :2] + 0.5 * square) % square - 0.5 * square), 0.5 * square).min(axis=1)
    edges = to_edge < EDGE_BAND_MM
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
    results = []
    warm = False
    for name, e, dv, weight in translation_frames(args.set, args.frames):
        vd = depth_map(dv, weight, camera, kappa=args.kappa, f_number=e.f_number)
        if not warm:  # numba caches, page faults
            render_all_in_focus(dv, weight, camera, vd.virtual_depth, kappa=args.kappa, f_number=e.f_number)
            warm = True
        walls, cpus = [], []
        for _ in range(max(args.runs, 1)):
            c0, t0 = time.process_time(), time.perf_counter()
            af = render_all_in_focus(dv, weight, camera, vd.virtual_depth, kappa=args.kappa, f_number=e.f_number)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        info = truth["checkerboards"][name]["plate_in_camera"]
        R, t = np.array(info["R"]), np.array(info["t"])
        X = central_view_px(camera, plate_pts @ R.T + t)
        row = {"frame": e.frame, "image": name, "z_true_mm": float(t[2]), "seconds": float(np.median(walls)),
               "seconds_all": walls, "cpu_seconds": float(np.median(cpus)), "load_average_1min": os.getloadavg()[0],
               "drawn": af.drawn, "filled": af.filled, "undrawn_fraction": float(np.mean(~np.isfinite(af.image))),
               "median_virtual_depth": float(np.nanmedian(vd.virtual_depth))}
        row["ncc"], row["board_samples"] = score(af.image, af.scale, X, tex_vals)
        row["ncc_edges"], row["edge_samples"] = score(af.image, af.scale, X, tex_vals, edges)
        means = cell_image(camera, vd.grey, scale=af.scale)
        row["ncc_micro_image_means"], _ = score(means, af.scale, X, tex_vals)
        row["ncc_edges_micro_image_means"], _ = score(means, af.scale, X, tex_vals, edges)
        for label, f in (("depth_x1.3", 1.3), ("depth_div1.3", 1 / 1.3)):
            wrong = render_all_in_focus(dv, weight, camera, vd.virtual_depth * f, kappa=args.kappa, f_number=e.f_number)
            row[f"ncc_{label}"], _ = score(wrong.image, wrong.scale, X, tex_vals)
            row[f"ncc_edges_{label}"], _ = score(wrong.image, wrong.scale, X, tex_vals, edges)
        if args.out is not None:
            (args.out / f"frame-{e.frame}-allfocus.png").write_bytes(grey_png(af.image))
            (args.out / f"frame-{e.frame}-central.png").write_bytes(grey_png(means))
        results.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    print(json.dumps({
        "benchmark": "depth_render", "plenocal_version": plenocal.__version__, "machine": machine(),
        "set": str(args.set), "camera": str(camera_path), "kappa": args.kappa,
        "settings": af.settings if results else {}, "frames": results, "peak_memory_mb": peak_memory_mb(),
    }, indent=1))


if __name__ == "__main__":
    main()
