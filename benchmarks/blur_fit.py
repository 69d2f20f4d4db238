"""How well a corner is fitted where the camera predicts it, against its blur: the evidence for
``plenocal.detect.nodes.RESOLVABLE_BLUR_FRACTION`` (issue 24). Prints JSON.

Small r12-a renders (``--rays`` per pixel) of a 5 × 4 board at fractions of the distance z_c whose
image falls on the MLA (0.94–0.975 z_c: each node in one to three micro-images, its blur |ρ| from
a fifth to twice the acceptance disc's radius), four poses each. Every view the true camera and
pose predict is fitted (:func:`plenocal.detect.nodes.detect_board_nodes`, the blur bound lifted),
started ``--start-offset`` px off the predicted corner in a random direction. Per bin of |ρ| over
the acceptance disc (usable radius − border margin): the views predicted, the fits accepted, their
distance to the model's apparent corner (the true camera's, pupil vignetting included); and the
nodes' BAP features (nodes fitted in two or more views): their chief-ray (u, v) and ρ against
the truth.

    python benchmarks/blur_fit.py [--fractions 0.94,0.95,…] [--rays 24] [--start-offset 1.0]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine

import plenocal.detect.nodes as nodes
from plenocal.detect.nodes import micro_image_index
from plenocal.detect.pipeline import BORDER_MARGIN_PX, detect_frame, frame_micro_images
from plenocal.model.geometry import Pose, rodrigues
from plenocal.model.observations import BapFeatures
from plenocal.model.profile import mla_to_object_mm
from plenocal.model.projection import project_bap
from plenocal.model.target import Checkerboard
from plenocal.model.white import internal_parameters
from plenocal.sim.presets import preset
from plenocal.sim.scene import CheckerboardPlate, Scene, WhiteDiffuser
from plenocal.sim.tracer import render

DEFAULT_BOUND = nodes.RESOLVABLE_BLUR_FRACTION
BOARD = Checkerboard(5, 4, 4.0, border_mm=4.0)
F_NUMBER = 4.0
POSES = ((5.0, 0.0, 3.0), (0.0, 8.0, -4.0), (-6.0, 3.0, 10.0), (3.0, -7.0, 20.0))
"""(tilt about x, tilt about y, roll), degrees."""
BINS = (0.0, 0.3, 0.45, 0.6, 0.75, 0.9, 1.2, 2.0, 5.0)
"""Bins of |ρ| over the acceptance disc's radius."""


def board_pose(fraction: float, zc: float, which: int) -> Pose:
    tx, ty, roll = np.radians(POSES[which])
    R = rodrigues(roll * np.array([0.0, 0.0, 1.0])) @ rodrigues(tx * np.array([1.0, 0.0, 0.0])) @ rodrigues(ty * np.array([0.0, 1.0, 0.0]))
    centre = np.array([(BOARD.columns - 1) * BOARD.square_mm / 2, (BOARD.rows - 1) * BOARD.square_mm / 2, 0.0])
    return Pose(R, np.array([0.5 + 0.37 * which, -0.3 * which, fraction * zc]) - R @ centre)


def frame_rows(cam, omega, white, pose: Pose, *, rays: int, seed: int, offset_px: float) -> tuple[list, list]:
    """(views, features) of one render: per view (|ρ|/disc, distance of the accepted fit to the
    model's corner or NaN); per feature (|ρ|/disc, (u, v) error, ρ error)."""
    img = render(cam, Scene((CheckerboardPlate(BOARD, pose),), background=0.0), f_number=F_NUMBER, rays=rays, seed=seed, image_id=seed)
    det = detect_frame(img, white, grid=cam.grid, omega=omega, layout=cam.mla.types, frame=0)
    dv, micro = frame_micro_images(img, white, grid=cam.grid, omega=omega, layout=cam.mla.types)
    views = nodes.predict_node_views(cam, pose, BOARD, micro=micro)
    angle = np.random.default_rng(seed).uniform(0.0, 2.0 * np.pi, len(views.node))
    views = dataclasses.replace(views, appear=views.appear + offset_px * np.stack([np.cos(angle), np.sin(angle)], axis=1))
    bound = det.rms_bound if np.isfinite(det.rms_bound) else np.inf
    nd = nodes.detect_board_nodes(dv, micro, camera=cam, cam_from_world=pose, board=BOARD, known=BapFeatures.empty(),
                                  rms_bound=bound, pitch_px=cam.grid.diameter_px, views=views)
    fresh = nodes.views_to_fit(views, micro, BapFeatures.empty())
    model = project_bap(cam, pose.apply(BOARD.node_points(fresh.node)), micro.k[fresh.index], micro.l[fresh.index], pupil_vignetting=True)
    ratio = np.abs(model[:, 2]) / (micro.usable[fresh.index] - BORDER_MARGIN_PX)
    fitted = {(int(n), int(i)): uv for n, i, uv in zip(nd.fitted_node, nd.fitted_index, nd.fitted_uv, strict=True)}
    view_rows = [(float(r), float(np.hypot(*(fitted[key] - m[:2]))) if (key := (int(n), int(i))) in fitted else np.nan)
                 for r, m, n, i in zip(ratio, model, fresh.node, fresh.index, strict=True)]
    f = nd.features
    truth = project_bap(cam, pose.apply(BOARD.node_points(f.node)), f.k, f.l)
    idx = micro_image_index(micro.k, micro.l, f.k, f.l)
    f_ratio = np.abs(truth[:, 2]) / (micro.usable[idx] - BORDER_MARGIN_PX)
    feature_rows = list(zip(f_ratio.tolist(), np.hypot(f.u - truth[:, 0], f.v - truth[:, 1]).tolist(), (f.rho - truth[:, 2]).tolist(), strict=True))
    return view_rows, feature_rows


def by_bin(rows: np.ndarray, what: str) -> list[dict]:
    out = []
    for lo, hi in itertools.pairwise(BINS):
        m = (rows[:, 0] >= lo) & (rows[:, 0] < hi) if len(rows) else np.zeros(0, dtype=bool)
        if not m.any():
            continue
        sel = rows[m]
        if what == "views":
            ok = np.isfinite(sel[:, 1])
            e = sel[ok, 1]
            out.append({"ratio": [lo, hi], "views": int(m.sum()), "fitted": int(ok.sum()),
                        "error_median_px": float(np.median(e)) if ok.any() else None,
                        "error_p90_px": float(np.percentile(e, 90)) if ok.any() else None})
        else:
            out.append({"ratio": [lo, hi], "features": int(m.sum()), "uv_error_median_px": float(np.median(sel[:, 1])),
                        "uv_error_p90_px": float(np.percentile(sel[:, 1], 90)), "rho_error_median_px": float(np.median(sel[:, 2])),
                        "rho_abs_error_median_px": float(np.median(np.abs(sel[:, 2])))})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fractions", default="0.94,0.945,0.95,0.955,0.96,0.965,0.97,0.975")
    ap.add_argument("--rays", type=int, default=24)
    ap.add_argument("--start-offset", type=float, default=1.0, help="px between the fit's start and the predicted corner")
    args = ap.parse_args()
    t0 = time.perf_counter()
    cam = preset("r12-a", small=True).camera
    omega = internal_parameters(cam)
    white = render(cam, WhiteDiffuser(), f_number=F_NUMBER, rays=args.rays, seed=5, image_id=99)
    zc = float(mla_to_object_mm(cam, 0.0))
    nodes.RESOLVABLE_BLUR_FRACTION = BINS[-1]  # every predicted view fitted
    views, feats = [], []
    for i, fraction in enumerate(float(x) for x in args.fractions.split(",")):
        for which in range(len(POSES)):
            v, f = frame_rows(cam, omega, white, board_pose(fraction, zc, which), rays=args.rays, seed=10 * i + which + 1,
                              offset_px=args.start_offset)
            views += v
            feats += f
    print(json.dumps({
        "benchmark": "blur_fit", "machine": machine(), "fractions_of_zc": args.fractions, "rays": args.rays,
        "start_offset_px": args.start_offset, "resolvable_blur_fraction": DEFAULT_BOUND,
        "views": by_bin(np.array(views).reshape(-1, 2), "views"),
        "features": by_bin(np.array(feats).reshape(-1, 3), "features"),
        "wall_s": time.perf_counter() - t0,
    }, indent=1))


if __name__ == "__main__":
    main()
