"""The pupil-vignetting calibration from many perturbed starts: does it always reach the truth?

Synthetic R12-A observations generated WITH the pupil-vignetting shift (the camera of
``tests/data/r12a`` in the ρ form under test, the frames of ``tests/calib/test_vignetting.py``,
noise 0.3 px (u, v), 0.05 px ρ, 0.1 px centres, one noise seed per start), calibrated with
``pupil_vignetting=True`` from the ±3 % / ±50 px perturbed camera of each start seed, for every
combination of one / two pitches, legacy / virtual-depth ρ and linear / Huber loss, with the
shift's radii as white images measure them (``--radii white``, what ``plenocal calibrate`` uses
when it has Ω) or from the camera's radius law (``--radii law``, which moves with Θ). A start
"reaches the truth" when it converges, every key intrinsic is within 4 Jacobian σ of the truth
and the (u, v) noise estimate is within 5 % of 0.3 px. Prints JSON: per combination, how many
starts reach the truth, the worst |z| over the starts and the slowest calibration.

Usage: python benchmarks/vignetting_starts.py [--starts 20] [--first-seed 0] [--radii white|law]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine

from plenocal.calib.calibrate import CalibrationOptions, calibrate
from plenocal.calib.residuals import MeasuredPupilRadii
from plenocal.calib.synthetic import perturbed_camera, synthetic_observations
from plenocal.io import read_camera_file, read_manifest
from plenocal.io.poses import read_poses
from plenocal.model.camera import RhoForm
from plenocal.model.white import InternalParameters, radius_law

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "r12a"
FRAMES = (0, 2, 4, 7, 9, 12)
KEY = ("F_mm", "D_mm", "d_mm", "u0_px", "v0_px", "f1_mm", "f2_mm", "f3_mm")
Z_MAX = 4.0
"""A key intrinsic further than this many Jacobian σ from the truth is a wrong answer."""
NOISE_UV_PX = 0.3
SIGMA_TOLERANCE = 0.05
"""The (u, v) noise estimate within this relative error of the truth's 0.3 px: the model fits."""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--starts", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--radii", choices=("white", "law"), default="white")
    args = ap.parse_args()
    base = read_camera_file(DATA / "camera.json").camera
    board = read_manifest(DATA / "manifest.json").target
    poses = {f: p for f, p in read_poses(DATA / "poses.json").items() if f in FRAMES}
    seeds = range(args.first_seed, args.first_seed + args.starts)
    out = []
    t_all = time.perf_counter()
    for rho_form, two_pitches, loss in itertools.product(("legacy", "virtual-depth"), (False, True), ("linear", "huber")):
        truth = base.replace(rho_form=RhoForm(rho_form))
        radii = None
        if args.radii == "white":  # the truth's law, uniform as the synthetic shift has it
            m, q = radius_law(truth)
            radii = MeasuredPupilRadii(InternalParameters(m, q, truth.micro_image_pitch_mm, lambda_=truth.lambda_,
                                                          f_number=truth.main_lens.f_number,
                                                          pixel_size_mm=truth.sensor.pixel_size_mm), truth.grid)
        failures, worst_z, times, iterations = [], 0.0, [], []
        for seed in seeds:
            obs, _ = synthetic_observations(truth, poses, board, seed=1000 + seed, pupil_vignetting=True)
            opt = CalibrationOptions(pupil_vignetting=True, two_pitches=two_pitches, loss=loss, rho_form=rho_form,
                                     frame_resampling=False)
            t0 = time.perf_counter()
            r = calibrate(obs, perturbed_camera(base, seed=seed), board, options=opt, pupil_radii=radii)
            times.append(time.perf_counter() - t0)
            iterations.append(sum(int(s.get("iterations", 0)) for s in r.stages.values()))
            xt = r.layout.pack(truth, poses)
            idx = [r.layout.index[n] for n in KEY]
            z = (r.x[idx] - xt[idx]) / r.std[idx]
            worst_z = max(worst_z, float(np.max(np.abs(z))))
            sigma_ok = abs(r.sigma["uv"] / NOISE_UV_PX - 1.0) < SIGMA_TOLERANCE
            if not (r.converged and np.all(np.abs(z) < Z_MAX) and sigma_ok):
                failures.append({"seed": seed, "converged": r.converged, "termination": r.solver.termination,
                                 "sigma_uv_px": r.sigma["uv"], "z": dict(zip(KEY, np.round(z, 2).tolist(), strict=True))})
        out.append({
            "rho_form": rho_form, "two_pitches": two_pitches, "loss": loss,
            "starts": len(seeds), "reached_truth": len(seeds) - len(failures), "worst_abs_z": round(worst_z, 2),
            "calibrate_s_median": float(np.median(times)), "calibrate_s_max": float(np.max(times)),
            "iterations_median": float(np.median(iterations)), "failures": failures,
        })
        print(json.dumps(out[-1]), file=sys.stderr)
    print(json.dumps({
        "benchmark": "vignetting-perturbed-starts",
        "radii": args.radii,
        "frames": FRAMES,
        "z_max": Z_MAX,
        "combinations": out,
        "all_reached_truth": all(c["reached_truth"] == c["starts"] for c in out),
        "wall_s": time.perf_counter() - t_all,
        "machine": machine(),
    }, indent=2))


if __name__ == "__main__":
    main()
