"""Benchmark of the calibration core on synthetic R12-A-sized observations; prints JSON.

Usage: ``python benchmarks/bench_calibrate.py [--runs 5] [--seeds 0]``

- timing: warm-up, then the median wall time (and per phase) of ``--runs`` calibrations from the
  ±3 % / ±50 px perturbed camera (~18 000 BAP features, 26 752 MICs, 16 frames);
- with ``--seeds N``: σ honesty — over N seeds, for F, D, d, each f_i and the principal point,
  the spread of the estimates divided by the mean reported σ (should lie in [0.7, 1.4]), and the
  largest |estimate − truth|/σ.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / ".." / "shared" / "fixtures" / "libpleno-r12a-configs"
KEY = ("F_mm", "D_mm", "d_mm", "f1_mm", "f2_mm", "f3_mm", "u0_px", "v0_px")


def _fixture():
    from plenocal.io.libpleno import camera_from_intrinsics, read_poses, read_scene

    return (camera_from_intrinsics(FIX / "intrinsics.js"), read_poses(FIX / "poses.js"), read_scene(FIX / "scene.js"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seeds", type=int, default=0)
    args = ap.parse_args(argv)
    from plenocal.calib.calibrate import calibrate
    from plenocal.calib.synthetic import perturbed_camera, synthetic_observations

    cam, poses, board = _fixture()
    obs, _ = synthetic_observations(cam, poses, board, seed=1)
    start = perturbed_camera(cam, seed=1)
    calibrate(obs, start, board)  # warm-up
    walls, phases, results = [], [], []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        res = calibrate(obs, start, board)
        walls.append(time.perf_counter() - t0)
        phases.append(res.timings_s)
        results.append(res)
    out: dict[str, object] = {
        "benchmark": "calibrate-r12a-synthetic",
        "n_bap": len(obs.bap),
        "n_mic": len(obs.mic),
        "n_frames": len(poses),
        "runs": args.runs,
        "wall_s_median": statistics.median(walls),
        "wall_s_all": walls,
        "phases_s_median": {k: statistics.median(p[k] for p in phases) for k in phases[0]},
        "converged": all(r.converged for r in results),
        "iterations_final_stage": results[-1].solver.iterations,
        "termination": results[-1].solver.termination,
        "stages": {k: {"iterations": v["iterations"], "termination": v["termination"]}
                   for k, v in results[-1].stages.items()},
        "machine": {"python": sys.version.split()[0], "platform": platform.platform(),
                    "cpus": os.cpu_count(), "numpy": np.__version__,
                    "load_average": os.getloadavg()},
    }
    if args.seeds:
        xt = None
        est, sds, zmax = [], [], 0.0
        for seed in range(args.seeds):
            o, _ = synthetic_observations(cam, poses, board, seed=1000 + seed)
            r = calibrate(o, perturbed_camera(cam, seed=1000 + seed), board)
            idx = [r.layout.index[n] for n in KEY]
            xt = r.layout.pack(cam, poses)
            est.append(r.x[idx])
            sds.append(r.std[idx])
            n_int = r.layout.n_intrinsics
            zmax = max(zmax, float(np.max(np.abs((r.x[:n_int] - xt[:n_int]) / r.std[:n_int]))))
        e, s = np.array(est), np.array(sds)
        ratio = e.std(axis=0, ddof=1) / s.mean(axis=0)
        out["sigma_honesty"] = {
            "seeds": args.seeds,
            "spread_over_mean_sigma": dict(zip(KEY, ratio.round(3).tolist(), strict=True)),
            "max_abs_error_in_sigma_all_intrinsics": zmax,
        }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
