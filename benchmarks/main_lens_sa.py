"""What the main lens's spherical aberration does to a thin-lens calibration, on the camera's own
features moved by the aberration's law (``docs/model.md``, "Spherical aberration of the main
lens"). Prints JSON.

Usage::

    python benchmarks/main_lens_sa.py [--designs spherical,double-gauss,field-corrector] [--out FILE]

**The law.** A micro-lens k sees a board point through the small zone of the main lens's pupil
that its own aperture selects: the zone whose rays, converging on the point's image, pass through
k. With longitudinal spherical aberration ΔL(h) (the axial crossing of the rays through pupil
height h, relative to the paraxial image; < 0 nearer the lens) those rays converge on a point
ΔL(h_k) from the paraxial virtual point p_u along the main lens's chief ray, and the ray through
the lens centre C_k, which places the feature, comes from there:

    p′_k = p_u · (1 − ΔL(h_k)/z_u),   h_k = |p_u + t·(C_k − p_u)|_xy,   t = −z_u/(C_z − z_u)

(camera frame, z_u < 0 behind the lens, so ΔL < 0 brings p′ nearer; h_k the height of the ray
from p_u through C_k in the lens plane, where the thin lens's pupil is),

the feature (u, v) is the sensor point of the line from p′_k through C_k, and ρ the blur of p′ at
the cluster's mean depth (detection's ρ comes from one υ per cluster). Exact to first order in ΔL
for the chief-ray features of a thin micro-lens.

**The profiles** ΔL(h): the bundled ``spherical`` test lens (the thin lens with A·f²·y², 0.156 mm
nearer at f/4's margin; ``benchmarks/lenses/spherical.json``, which ``docs/model.md`` rendered
alone), and the double-Gauss and field-corrector designs traced (:func:`traced_profile`: real rays
from an on-axis point, their axial crossing against the paraxial image, as a polynomial in the
squared fraction of the exit pupil's radius).

**Calibration**: the noise-free features of the 16 poses of ``tests/data/r12a`` (R12-A, f/4)
moved by each profile, calibrated by :func:`plenocal.calib.calibrate.calibrate` with the exit pupil
and the depth distortion held off (the paper's lens) and chosen by the data (the default):
F, D, d, f_i against the truth, the (u, v) RMSE left (what the thin model cannot absorb) and e.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import emit_json  # noqa: E402
from real_lenslets import _errors, _truth_setup  # noqa: E402

from plenocal.calib.calibrate import CalibrationOptions, calibrate  # noqa: E402
from plenocal.calib.synthetic import NoiseLevels, synthetic_observations  # noqa: E402
from plenocal.model.observations import BapFeatures, Observations  # noqa: E402
from plenocal.model.projection import _sensor_uv, blur_radius_px, micro_lens_centres, virtual_points  # noqa: E402
from plenocal.sim.optics import load_lens  # noqa: E402
from plenocal.sim.optics._kernels import surface_table, trace_rays  # noqa: E402
from plenocal.sim.optics.paraxial import image_of_plane, paraxial_data  # noqa: E402

FloatArray = np.ndarray

SPHERICAL_A = 1.6e-6
"""``benchmarks/lenses/spherical.json``'s coefficient (mm⁻³): ΔL = −A·f²·h² (to first order)."""
OBJECT_MM = 400.0
"""Object distance of the traced profiles (the R12-A poses' middle)."""
ZONES = np.linspace(0.05, 1.0, 20)


def traced_profile(design: str, *, f_number: float, object_mm: float = OBJECT_MM) -> dict[str, Any]:
    """ΔL (mm) against the squared fraction of the exit pupil's radius of ``design`` scaled to 50
    mm at ``f_number``: real meridional rays from an on-axis point ``object_mm`` in front of H
    through the entrance pupil's zones (:func:`plenocal.sim.optics._kernels.trace_rays`), their
    axial crossing less the paraxial image's (:func:`image_of_plane`); a cubic in frac²."""
    p = load_lens(design, efl_mm=50.0)
    pd = paraxial_data(p, f_number)
    z_img, _ = image_of_plane(p, object_mm)
    h_ep = ZONES * pd.epd_mm / 2.0
    pts = np.zeros((ZONES.size, 3))
    pts[:, 2] = pd.h_z - object_mm
    dirs = np.stack([np.zeros_like(h_ep), h_ep, np.full_like(h_ep, pd.entrance_pupil_z - pts[0, 2])], axis=1)
    ok, P, D = trace_rays(surface_table(p), pts, dirs, True)
    crossing = P[:, 2] - P[:, 1] / D[:, 1] * D[:, 2]
    dL = crossing - z_img
    poly = np.polyfit(ZONES**2, dL, 3)
    return {"poly_frac2": poly.tolist(), "marginal_mm": float(dL[-1]), "all_traced": bool(ok.all()),
            "xpd_mm": float(pd.xpd_mm)}


def moved_features(truth, poses, board, clean: BapFeatures, delta_l) -> tuple[BapFeatures, FloatArray]:
    """The truth's features through the aberrated main lens (module docstring); ``delta_l`` maps
    h (mm, lens plane) to ΔL (mm)."""
    b = clean
    X = np.zeros((len(b), 3))
    for f in np.unique(b.frame):
        m = b.frame == f
        X[m] = poses[int(f)].apply(board.node_points(b.node[m]))
    P = virtual_points(truth, X)
    C = micro_lens_centres(truth, b.k, b.l)
    t = -P[:, 2] / (C[:, 2] - P[:, 2])
    h = np.hypot(P[:, 0] + t * (C[:, 0] - P[:, 0]), P[:, 1] + t * (C[:, 1] - P[:, 1]))
    Pk = P * (1.0 - delta_l(h) / P[:, 2])[:, None]  # ΔL < 0: nearer the lens, |z| smaller
    ts = (-truth.sensor.distance_mm - C[:, 2]) / (Pk[:, 2] - C[:, 2])
    u, v = _sensor_uv(truth, C[:, 0] + ts * (Pk[:, 0] - C[:, 0]), C[:, 1] + ts * (Pk[:, 1] - C[:, 1]))
    _, cluster = np.unique(b.frame * 1_000_000 + b.node, return_inverse=True)
    Pc = Pk.copy()
    Pc[:, 2] = (np.bincount(cluster, Pk[:, 2]) / np.bincount(cluster))[cluster]
    rho = blur_radius_px(truth, Pc, C, truth.mla.types.type_of(b.k, b.l))
    moved = BapFeatures(frame=b.frame, k=b.k, l=b.l, u=u, v=v, rho=rho, node=b.node, cluster=b.cluster)
    return moved, np.hypot(u - b.u, v - b.v)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--designs", default="spherical,double-gauss,field-corrector")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    truth, poses, board = _truth_setup()
    F, N = truth.main_lens.focal_length_mm, truth.main_lens.f_number
    h_m = F / (2.0 * N)
    _, clean = synthetic_observations(truth, poses, board, noise=NoiseLevels(0.0, 0.0, 0.0), seed=1)
    out: dict[str, Any] = {"camera": "tests/data/r12a (R12-A, f/4), 16 poses, noise-free", "designs": {}}
    models = {"paper's lens": {"exit_pupil": False, "depth_distortion": False}, "default": {}}
    for name in (d.strip() for d in args.designs.split(",") if d.strip()):
        if name == "spherical":
            prof = {"law": "ΔL = −A·f²·h²", "A_per_mm3": SPHERICAL_A, "marginal_mm": -SPHERICAL_A * F * F * h_m * h_m}

            def delta_l(h, a=SPHERICAL_A * F * F):
                return -a * h * h
        else:
            prof = traced_profile(name, f_number=N)
            poly = np.asarray(prof["poly_frac2"])

            def delta_l(h, poly=poly):  # the traced profile over the pupil, held at its margin beyond
                return np.polyval(poly, np.minimum((h / h_m) ** 2, 1.0))
        moved, shift = moved_features(truth, poses, board, clean.bap, delta_l)
        res: dict[str, Any] = {"profile": prof, "shift_px": {"median": float(np.median(shift)), "p95": float(np.percentile(shift, 95))},
                               "models": {}}
        for label, flags in models.items():
            r = calibrate(Observations(moved, clean.mic), truth, board,
                          options=CalibrationOptions(frame_resampling=False, loss="linear", **flags))
            e = _errors(r.camera, truth)
            e["uv_rmse_left_px"] = float(r.rmse["uv_px"])
            e["exit_pupil_mm"] = float(r.camera.main_lens.exit_pupil_mm)
            e["model_selection"] = {k: bool(v.get("kept")) for k, v in (r.model_selection or {}).items()}
            res["models"][label] = e
        out["designs"][name] = res
        print(name, json.dumps(res["models"]), file=sys.stderr, flush=True)
    emit_json(out, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
