"""Benchmark: the matcher's bias in w = 1/υ with the TRUE camera, by baseline and lens-type pair. Prints JSON.

The PRISM R12-B translation frames (``../shared/validation/prism-r12b``, a fronto-parallel board at
450 … 650 mm; imported as :mod:`benchmarks.depth` does) are matched with the truth camera in the
images' pixel convention, once with every neighbour (what ``plenocal depth`` does) and once per
class of neighbours (:func:`plenocal.depth.matching.select_neighbours`): the first ring (1 pitch,
always another lens type on the R12 grids), √3 pitches (the same type), 2 pitches (another), 3
(the same); every neighbour with κ = 0 (no blur equalisation); every neighbour with the coarse
grid shifted by half its step, and both with the refinement's vertex through the grid's own
samples (``REFINE_VARYING``, the refinement before the re-centring): a grid-locked estimate moves. Per frame and variant: the
median of (w − w_true)/w_true over the confident (≥ 0.3) per micro-image estimates whose line of
sight meets the plate ≥ 5 mm inside its edges (w_true: the lens' own 1/υ of that point,
:func:`plenocal.depth.metric.virtual_depth_of_points`), also per lens type of the micro-image;
for the default variant the aggregated board's signed median |z − z_true|/z.

    python benchmarks/depth_bias.py [--set PATH] [--kappa 0.72] [--frames 100,104] [--variants all,same-sqrt3]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PRISM_R12B, machine, translation_frames

import plenocal
from depth import board_mask
from plenocal.depth.matching import (
    COARSE_STEP_PX,
    MIN_SUPPORT_CONFIDENCE,
    REFINE_VARYING,
    aggregate_virtual_depths,
    default_distance_range_mm,
    estimate_virtual_depths,
    inverse_depth_range,
    matching_lambda,
)
from plenocal.depth.metric import points_from_virtual_depth, virtual_depth_of_points
from plenocal.io.camera import read_camera

VARIANTS = {
    "all": {},
    "ring1-other-type": {"baselines": (0.9, 1.1)},
    "sqrt3-same-type": {"baselines": (1.6, 1.9)},
    "two-other-type": {"baselines": (1.9, 2.1)},
    "three-same-type": {"baselines": (2.9, 3.1)},
    "all-kappa0": {"kappa": 0.0},
    "all-grid-half-step": {"grid_phase": 0.5},
    "all-vertex-on-grid": {"refine_common": REFINE_VARYING},
    "all-vertex-on-grid-half-step": {"refine_common": REFINE_VARYING, "grid_phase": 0.5},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", type=Path, default=PRISM_R12B)
    ap.add_argument("--kappa", type=float, default=0.72)
    ap.add_argument("--frames", default=None)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args()
    truth = json.loads((args.set / "truth.json").read_text())
    camera = read_camera(args.set / "camera" / "camera-true-image-index.json")
    plate_size = truth["checkerboard"]["plate_size_mm"]
    rows = []
    for name, e, dv, weight in translation_frames(args.set, args.frames):
        info = truth["checkerboards"][name]["plate_in_camera"]
        R, t = np.array(info["R"]), np.array(info["t"])
        row = {"frame": e.frame, "z_true_mm": float(t[2])}
        for label in args.variants.split(","):
            opts = {"kappa": args.kappa, **VARIANTS[label]}
            phase = opts.pop("grid_phase", 0.0)
            if phase:  # the default search interval and coarse step, shifted by a fraction of the step
                lo, hi = inverse_depth_range(camera, default_distance_range_mm(camera))
                step = COARSE_STEP_PX / (matching_lambda(camera) * camera.grid.diameter_px)
                step = (hi - lo) / (max(int(np.ceil((hi - lo) / step)) + 1, 3) - 1)
                opts["w_range"] = (lo + phase * step, hi + phase * step)
            vd = estimate_virtual_depths(dv, weight, camera, f_number=e.f_number, refine_min_confidence=MIN_SUPPORT_CONFIDENCE, **opts)
            onb = board_mask(camera, vd.k, vd.l, R, t, plate_size)
            # the lens' own true w of the point its line of sight meets on the (fronto-parallel) plate
            a = points_from_virtual_depth(camera, vd.k, vd.l, np.full(len(vd.k), 4.0))
            b = points_from_virtual_depth(camera, vd.k, vd.l, np.full(len(vd.k), 40.0))
            s = (t[2] - a[:, 2]) / (b[:, 2] - a[:, 2])
            w_true = 1.0 / virtual_depth_of_points(camera, a + s[:, None] * (b - a), vd.k, vd.l)
            sel = onb & vd.ok & (vd.confidence >= MIN_SUPPORT_CONFIDENCE)
            rel = (1.0 / vd.virtual_depth - w_true) / w_true
            out = {"estimates": int(sel.sum()), "w_signed_median_pct": float(100 * np.median(rel[sel])),
                   "by_type_pct": [float(100 * np.median(rel[sel & (vd.types == ty)])) for ty in range(camera.n_types)],
                   "w_true_median": float(np.median(w_true[sel]))}
            if label.startswith("all"):
                ag = aggregate_virtual_depths(vd, camera)
                ok = onb & vd.textured & ag.ok
                z = points_from_virtual_depth(camera, ag.k[ok], ag.l[ok], ag.virtual_depth[ok])[:, 2]
                out["aggregated_z_signed_median_pct"] = float(100 * np.median((z - t[2]) / t[2]))
            row[label] = out
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    print(json.dumps({"benchmark": "depth_bias", "plenocal_version": plenocal.__version__, "machine": machine(),
                      "set": str(args.set), "kappa": args.kappa, "frames": rows}, indent=1))


if __name__ == "__main__":
    main()
