"""Benchmark: κ calibration on 16 full-scale ray-traced R12-A frames (paper §5.3). Prints JSON.

Renders 16 free-hand checkerboard frames of the full R12-A preset (4080 × 3068 px) and a
devignetting white, takes the true BAP features (FeatureOracle), and times
:func:`plenocal.calib.kappa.calibrate_kappa` (images in memory; warm-up, then the median of
``--runs``) with the default central-feature selection and with every feature. Also reports κ, its
spread across frames, and the pair counts.

    python benchmarks/bench_kappa.py [--frames 16] [--rays 32] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np

import plenocal
from plenocal.calib.kappa import calibrate_kappa, central_features, default_max_offset_px
from plenocal.model.observations import BapFeatures
from plenocal.sim.groundtruth import FeatureOracle
from plenocal.sim.poses import random_poses
from plenocal.sim.presets import preset
from plenocal.sim.scene import CheckerboardPlate, Scene, WhiteDiffuser
from plenocal.sim.tracer import build_optics, render


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="r12-a")
    ap.add_argument("--frames", type=int, default=16)
    ap.add_argument("--rays", type=int, default=32)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    p = preset(args.preset)
    camera = p.camera
    oracle = FeatureOracle(camera)
    poses = random_poses(camera, p.plan.board, args.frames, distance_range_mm=p.plan.calibration_range_mm,
                         rng=np.random.default_rng(args.seed), oracle=oracle)
    optics = build_optics(camera)
    t0 = time.perf_counter()
    white = render(camera, WhiteDiffuser(), rays=4 * args.rays, seed=args.seed, image_id=999, optics=optics)
    lit = white > 0.02
    images, feats = {}, []
    for frame, pose in enumerate(poses):
        img = render(camera, Scene((CheckerboardPlate(p.plan.board, pose),), background=0.3), rays=args.rays,
                     seed=args.seed, image_id=frame, optics=optics)
        images[frame] = np.where(lit, img / np.where(lit, white, 1.0), 0.0).astype(np.float32)
        feats.append(oracle.board_features(p.plan.board, pose, frame=frame))
    render_s = time.perf_counter() - t0
    features = BapFeatures.concatenate(feats)
    eligible = central_features(camera, features, default_max_offset_px(camera))

    out: dict[str, object] = {
        "benchmark": "kappa", "preset": args.preset, "frames": args.frames, "rays": args.rays,
        "image_size_px": [camera.sensor.width_px, camera.sensor.height_px], "n_features": len(features),
        "render_s": render_s,
    }
    for label, mask in (("central", eligible), ("all", None)):
        calibrate_kappa(images, features, camera.mla.types, eligible=mask)  # warm-up
        times, res = [], None
        for _ in range(args.runs):
            t = time.perf_counter()
            res = calibrate_kappa(images, features, camera.mla.types, eligible=mask)
            times.append(time.perf_counter() - t)
        assert res is not None
        out[label] = {
            "median_s": statistics.median(times), "runs_s": times, "kappa": res.kappa, "n_pairs": res.n_pairs,
            "n_frames_with_pairs": len(res.per_frame), "spread": res.spread, "at_bound": res.at_bound,
            "cost_ratio": res.cost / res.cost_no_blur,
        }
    out["machine"] = {"python": platform.python_version(), "numpy": np.__version__, "plenocal": plenocal.__version__,
                      "cpus": os.cpu_count(), "platform": platform.platform()}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
