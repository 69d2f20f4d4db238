"""Benchmark: depth of a scene with two planes and a sphere, full scale, against the exact truth. Prints JSON.

plenocal's thin-lens tracer renders the R12-A preset (4080 × 3068 px, ~27 000 micro-images; or
``--small``: 1000 × 800 px, the test's scene) looking at a fronto-parallel checkerboard plate at
345 mm (υ 4.3), a plate tilted 20° about the vertical at ~300 mm (υ 7–11) and, in front of both,
a sphere centred at 318 mm (radius 32 mm full scale, 8 mm small) wrapped in ~2.5 mm blocks of random
grey; the devignetting white at the same f-number. Depth as ``plenocal depth`` computes it
(:func:`plenocal.depth.matching.estimate_virtual_depths` then the robust aggregation) with the
truth camera and κ (default 0.63, the small R12-A renders' κ). Each point's truth is where its line
of sight first meets the scene (:func:`plenocal.sim.scene.first_hit`). A micro-image sees a ~4 mm
patch of the scene at these depths, so along a silhouette it mixes two surfaces: points whose truth
changes by more than 2 % within 0.5 mm of their line of sight are "silhouette" points, reported
apart. Per surface and overall: RMS, median and 90th percentile of |z − z_true|/z, the number of
points and the coverage (micro-images with a depth); render and depth wall times.

With ``--per-pixel``, also the per-pixel depths (:func:`plenocal.depth.pixel.refine_pixel_depths`
from the aggregated ones, each pixel's point at its chief-ray offset) scored the same way: every
pixel with a depth, the pixels the screen keeps (:func:`plenocal.depth.pixel.screen_pixels`), and
the micro-images' own depths on the kept pixels' lines of sight (each pixel's offset at its
micro-image's υ), so that the two are compared on the same silhouettes.

    python benchmarks/depth_scene.py [--small] [--rays 16] [--kappa 0.63] [--seed 0] [--per-pixel [--window 2]]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, peak_memory_mb

from plenocal.depth.matching import aggregate_virtual_depths, estimate_virtual_depths
from plenocal.depth.metric import points_from_virtual_depth
from plenocal.depth.pixel import WINDOW_RADIUS_PX
from plenocal.detect.corners import devignette
from plenocal.model.geometry import Pose
from plenocal.model.target import Checkerboard
from plenocal.sim.presets import preset
from plenocal.sim.scene import CheckerboardPlate, Scene, TexturedSphere, WhiteDiffuser, depth_truth, first_hit
from plenocal.sim.tracer import build_optics, render


def scene(scale: float) -> tuple[Scene, tuple[str, ...]]:
    """The test scene (tests/depth/test_scene_depth.py) with its lateral sizes × ``scale``."""
    rng = np.random.default_rng(1)
    radius = 8.0 * scale
    blocks = (max(4, round(np.pi * radius / 2.5)), max(8, round(2 * np.pi * radius / 2.5)))
    texture = rng.uniform(0.05, 0.95, blocks).repeat(8, 0).repeat(8, 1)
    board = Checkerboard(12, 10, 2.5 * scale, 1.25 * scale)
    c, s = np.cos(np.radians(20.0)), np.sin(np.radians(20.0))
    tilted = np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])
    plates = (CheckerboardPlate(board, Pose(np.eye(3), np.array([-19.0 * scale, -14.0 * scale, 345.0]))),
              CheckerboardPlate(board, Pose(tilted, np.array([2.0 * scale, -14.0 * scale, 300.0]))),
              TexturedSphere(texture, Pose(np.eye(3), np.array([-1.0 * scale, 1.0 * scale, 318.0])), radius))
    return Scene(plates, background=0.3), ("plane 345 mm", "plane tilted 20°", "sphere")


def stats(rel: np.ndarray) -> dict[str, float | int]:
    a = np.abs(rel)
    return {"n": len(rel), "rms_pct": float(100 * np.sqrt(np.mean(rel**2))) if len(rel) else None,
            "median_pct": float(100 * np.median(a)) if len(rel) else None,
            "p90_pct": float(100 * np.quantile(a, 0.9)) if len(rel) else None,
            "signed_median_pct": float(100 * np.median(rel)) if len(rel) else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="the small preset and the test's scene")
    ap.add_argument("--rays", type=int, default=16)
    ap.add_argument("--kappa", type=float, default=0.63)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-pixel", action="store_true", help="also score the per-pixel depths")
    ap.add_argument("--window", type=int, default=WINDOW_RADIUS_PX, help="the per-pixel cost's window radius, px")
    args = ap.parse_args()
    camera = preset("r12-a", small=args.small).camera
    sc, names = scene(1.0 if args.small else 4.0)
    t0 = time.perf_counter()
    optics = build_optics(camera)
    white = render(camera, WhiteDiffuser(), rays=2 * args.rays, seed=0, image_id=999, optics=optics)
    image = render(camera, sc, rays=args.rays, seed=args.seed, image_id=1, optics=optics)
    t_render = time.perf_counter() - t0
    dv, weight = devignette(image, white)
    t0 = time.perf_counter()
    vd = estimate_virtual_depths(dv, weight, camera, kappa=args.kappa)
    t_match = time.perf_counter() - t0
    ag = aggregate_virtual_depths(vd, camera)
    t_depth = time.perf_counter() - t0
    X = points_from_virtual_depth(camera, ag.k[ag.ok], ag.l[ag.ok], ag.virtual_depth[ag.ok],
                                  offset_px=ag.texture_offset_px[ag.ok])  # as plenocal depth places them
    z_true, silhouette = depth_truth(sc, X)
    sight = X / np.linalg.norm(X, axis=1, keepdims=True)
    origin = np.zeros_like(X)
    surface = np.argmin(np.stack([first_hit(Scene((p,)), origin, sight) for p in sc.plates]), axis=0)
    rel = (X[:, 2] - z_true) / z_true
    seen = np.isfinite(rel)
    out = {
        "benchmark": "depth_scene", "machine": machine(), "preset": "r12-a" + (" small" if args.small else ""),
        "rays": args.rays, "kappa": args.kappa, "seed": args.seed,
        "micro_images": len(vd.ok), "with_depth": int(ag.ok.sum()), "coverage": float(ag.ok.mean()),
        "counts": ag.counts(),
        "points_off_every_surface": int((~seen).sum()),
        "all": stats(rel[seen]), "off_silhouettes": stats(rel[seen & ~silhouette]),
        "silhouettes": stats(rel[seen & silhouette]),
        "by_surface_off_silhouettes": {name: stats(rel[seen & ~silhouette & (surface == i)]) for i, name in enumerate(names)},
        "seconds": {"render": t_render, "matching": t_match, "matching_and_aggregation": t_depth},
        "peak_memory_mb": peak_memory_mb(),
    }
    if args.per_pixel:
        out["per_pixel"] = score_pixels(sc, camera, dv, weight, ag, args.kappa, args.window)
    print(json.dumps(out, indent=1))
    return 0


def score_pixels(sc: Scene, camera, dv: np.ndarray, weight: np.ndarray, ag, kappa: float, window_radius_px: int) -> dict:
    """Per-pixel depths refined from ``ag`` and screened, against the truth (see the module's text)."""
    from plenocal.depth.pixel import refine_pixel_depths, screen_pixels

    t0 = time.perf_counter()
    px = refine_pixel_depths(dv, weight, camera, ag, kappa=kappa, window_radius_px=window_radius_px)
    keep = screen_pixels(px)
    seconds = time.perf_counter() - t0
    ok = np.isfinite(px.virtual_depth)
    out: dict = {"pixels": len(px.x), "with_depth": int(ok.sum()), "pixels_kept": int(keep.sum()), "seconds": seconds,
                 "settings": px.settings}
    for name, sel, ups in (("all_with_depth", ok, px.virtual_depth), ("kept", keep, px.virtual_depth),
                           ("micro_images_on_kept_lines_of_sight", keep, ag.virtual_depth[px.micro_image])):
        mi = px.micro_image[sel]
        X = points_from_virtual_depth(camera, ag.k[mi], ag.l[mi], ups[sel], offset_px=px.offset_px[sel])
        z_true, silhouette = depth_truth(sc, X)
        rel = (X[:, 2] - z_true) / z_true
        seen = np.isfinite(rel)
        out[name] = {"all": stats(rel[seen]), "off_silhouettes": stats(rel[seen & ~silhouette]),
                     "silhouettes": stats(rel[seen & silhouette])}
    return out


if __name__ == "__main__":
    raise SystemExit(main())
