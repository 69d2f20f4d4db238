"""What the boards' pose diversity does to the principal point and the scale, and whether the
calibration's σ says so. Prints JSON.

Usage::

    python benchmarks/pose_diversity.py

Synthetic R12-A observations (``tests/data/r12a``: the reference's camera and 16 poses, detection-
like noise with the ρ errors shared per cluster) of subsets of the poses: fronto-parallel boards
only, boards tilted about one axis, tilted about both, all 16; each calibrated from a perturbed
camera with the paper's lens. Per subset: the tilt diversity (the square root of the smaller
eigenvalue of the covariance of the board normals' (n_x, n_y): 0 when every board faces the
camera or all tilt about one axis), and the principal point's and F's and d's errors with the
larger σ (Jacobian or frame jackknife) and the error in that σ.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

SUBSETS = {"fronto-parallel": [0, 5, 7, 8, 13, 14, 15], "one tilt axis": [0, 1, 2, 5, 6, 10],
           "one tilt axis, depths apart": [1, 2, 6, 10, 15, 14], "two tilt axes": [1, 2, 3, 4, 11, 12],
           "two tilt axes, 8 frames": [0, 1, 2, 3, 4, 11, 12, 15], "all 16": list(range(16))}


def tilt_diversity(poses) -> float:
    """√(smaller eigenvalue) of the covariance of the board normals' (n_x, n_y), radians."""
    n = np.array([p.rotation[:, 2] for p in poses])
    return float(np.sqrt(max(np.linalg.eigvalsh(np.cov(n[:, :2].T, bias=True))[0], 0.0)))


def main() -> int:
    from plenocal.calib.calibrate import DEFAULT_RHO_FORM, CalibrationOptions, calibrate
    from plenocal.calib.synthetic import perturbed_camera, synthetic_observations
    from plenocal.io import read_camera_file, read_manifest, read_poses
    from plenocal.model.camera import RhoForm

    data = ROOT / "tests" / "data" / "r12a"
    cam = read_camera_file(data / "camera.json").camera.replace(rho_form=RhoForm(DEFAULT_RHO_FORM))
    poses = read_poses(data / "poses.json")
    board = read_manifest(data / "manifest.json").target
    truth = {"u0_px": cam.principal_point_px[0], "v0_px": cam.principal_point_px[1],
             "F_mm": cam.main_lens.focal_length_mm, "d_mm": cam.d_mm}
    out = {}
    for name, frames in SUBSETS.items():
        sub = {f: poses[f] for f in frames}
        obs, _ = synthetic_observations(cam, sub, board, seed=3, rho_per_cluster=True)
        res = calibrate(obs, perturbed_camera(cam, seed=1), board,
                        options=CalibrationOptions(exit_pupil=False, depth_distortion=False))
        p = {q.name: q for q in res.parameters()}
        out[name] = {"frames": frames, "tilt_diversity_rad": tilt_diversity(sub.values()), "converged": res.converged,
                     **{n: {"error": p[n].value - t, "sigma": p[n].std_max, "z": (p[n].value - t) / p[n].std_max,
                            **({"error_percent": 100 * (p[n].value / t - 1), "sigma_percent": 100 * p[n].std_max / t}
                               if n.endswith("_mm") else {})}
                        for n, t in truth.items()}}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
