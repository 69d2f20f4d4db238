"""What moves the exit pupil e (and with it F): a render's features replaced, one observation at a
time, by what the main lens alone makes of them, traced without an image or a detector
(``docs/model.md``, "What moves the exit pupil"). Prints JSON (and writes it to --out).

Usage::

    python benchmarks/exit_pupil_trace.py --dataset DIR --run RUN [--lens NAME] [--out FILE]

``DIR`` is a real-optics render written by ``plenocal simulate --lens`` (its ``ground_truth``
holds the thin-lens-equivalent camera, the poses and ``optics.json``), ``RUN`` a ``plenocal run``
of it (its ``precalibration`` and its detections, ``detection-pass2`` or ``detection``). Every
linked calibration feature of a frame with absolute node ids is kept, and observations are built:

- **model**: (u, v), ρ and the micro-image centres (MICs) of the thin-lens-equivalent truth with
  its exit pupil e (the paper's camera exactly: calibration must return the truth);
- **traced, model's ρ and MICs**: the (u, v) of each feature's real chief ray through the
  prescription (:func:`plenocal.sim.optics.chief.feature_chief_rays_px`: the ray from the object
  point to the lenslet's centre, ideal thin lenslets), with ρ and MICs of the truth — where the
  lens puts its points is all that differs from the model;
- **apparent points, smooth part**: per (frame, node), the point the traced rays come from
  (least squares over the node's lenslets), and the model's own distortion family (Brown radial
  Q1–Q3, a depth offset, Z1·r′² + Z2·r′⁴) fitted to all of them: features from that fit;
- **+ conjugate terms**: the same family with the depth terms (z′ − z̄) and (z′ − z̄)·r′², which
  the model does not have (a field curvature and focus that change with the object distance);
- **apparent points**: features from each node's own apparent point (what is left beyond it is
  each lenslet's pupil zone's aberration);
- **traced, real MICs** and **traced, real ρ and MICs**: the detected MICs and ρ put back;
- **detected**: the run's observations.

ρ of the synthetic cases comes from the point each feature is predicted from, through the
truth's blur law, so that only (u, v) departs. Each is calibrated with ``plenocal calibrate``
three ways: the defaults; both real-lens terms forced (``--exit-pupil --depth-distortion``: the
model at its fullest, whatever the data would choose); and e held at the truth (a prior of
±0.05 mm) with the depth distortion forced: e, F, D, d, f_i and the principal point against the
truth, the (u, v) RMSE, whether the solve converged, the real-lens terms kept.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from plenocal.io.camera import read_camera
from plenocal.io.dataset import read_manifest
from plenocal.io.poses import read_poses
from plenocal.model.projection import (
    micro_image_centres,
    micro_lens_centres,
    project_bap,
    virtual_points,
    virtual_points_bap,
)
from plenocal.sim.optics.camera import real_optics_camera
from plenocal.sim.optics.chief import feature_chief_rays_px
from plenocal.sim.optics.lenslets import LensletDesign, LensletKind
from plenocal.sim.optics.library import load_lens

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit_json, machine
from independent import pct

MIN_LENSES_PER_NODE = 6
"""A node's apparent point is fitted from at least this many lenslets' rays."""
E_PRIOR_STD_MM = 0.05


def truth_of(dataset: Path) -> dict[str, Any]:
    gt = dataset / "ground_truth"
    thin = read_camera(gt / "camera.json")
    optics = json.loads((gt / "optics.json").read_text())
    par = optics["paraxial_by_f_number"][f"{thin.main_lens.f_number:g}"]
    e = float(par["exit_pupil_z"] - par["h_prime_z"])
    return {"thin": thin, "e": e, "with_e": thin.replace(main_lens=dataclasses.replace(thin.main_lens, exit_pupil_mm=e)),
            "lens": optics["main_lens"]["name"], "poses": read_poses(gt / "poses.json"),
            "board": read_manifest(dataset / "manifest.json").target}


def features_with_truth(obs: dict[str, np.ndarray], truth: dict[str, Any]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The observations' features of frames with a true pose and absolute node ids, and their
    object points (camera frame)."""
    relative = set(np.asarray(obs.get("relative_frames", np.zeros(0))).tolist())
    frame, node = obs["bap_frame"], obs["bap_node"]
    keep = (node >= 0) & np.isin(frame, [f for f in truth["poses"] if f not in relative])
    out = {k: (v[keep] if k.startswith("bap_") else v) for k, v in obs.items()}
    P = np.zeros((int(keep.sum()), 3))
    for f in np.unique(out["bap_frame"]):
        sel = out["bap_frame"] == f
        P[sel] = truth["poses"][int(f)].apply(truth["board"].node_points(out["bap_node"][sel]))
    return out, P


def apparent_points(obs: dict[str, np.ndarray], uv: np.ndarray, camera) -> np.ndarray:
    """Per feature, the point its node's rays come from: (x, y, z) minimising the rays' lateral
    misses at their own depth, in the model's image space; NaN for nodes seen by fewer than
    :data:`MIN_LENSES_PER_NODE` lenslets."""
    S, s = camera.sensor.distance_mm, camera.sensor.pixel_size_mm
    u0, v0 = camera.sensor.principal_point_px
    C = micro_lens_centres(camera, obs["bap_k"], obs["bap_l"])
    X = np.column_stack([(u0 - uv[:, 0]) * s, (v0 - uv[:, 1]) * s])
    g = (X - C[:, :2]) / (-S - C[:, 2])[:, None]
    key = obs["bap_frame"].astype(np.int64) * 1_000_000 + obs["bap_node"]
    nodes, inverse = np.unique(key, return_inverse=True)
    points = np.full((len(nodes), 3), np.nan)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(nodes) + 1))
    for j in range(len(nodes)):  # one small least-squares problem per node (~1 000 nodes)
        sel = order[bounds[j]:bounds[j + 1]]
        if len(sel) < MIN_LENSES_PER_NODE:
            continue
        A = np.zeros((2 * len(sel), 3))
        A[: len(sel), 0] = 1.0
        A[len(sel):, 1] = 1.0
        A[:, 2] = -np.concatenate([g[sel, 0], g[sel, 1]])
        b = np.concatenate([C[sel, 0] - g[sel, 0] * C[sel, 2], C[sel, 1] - g[sel, 1] * C[sel, 2]])
        points[j] = np.linalg.lstsq(A, b, rcond=None)[0]
    return points[inverse]


def smooth_family(paraxial: np.ndarray, apparent: np.ndarray, *, conjugate: bool) -> tuple[np.ndarray, dict[str, Any]]:
    """The model's distortion family (Q1–Q3 on r′, a depth offset, Z1, Z2; with ``conjugate`` also
    (z′ − z̄) and (z′ − z̄)·r′²) fitted to apparent points against the paraxial ones; the fitted
    points and the coefficients with the fit's RMS residuals (mm)."""
    ok = np.isfinite(apparent[:, 0])
    x, y, z = paraxial[:, 0], paraxial[:, 1], paraxial[:, 2]
    r2 = x * x + y * y
    zc = z - np.median(z[ok])
    radial = np.column_stack([r2, r2 * r2, r2 ** 3])
    A = np.concatenate([x[ok, None] * radial[ok], y[ok, None] * radial[ok]])
    b = np.concatenate([apparent[ok, 0] - x[ok], apparent[ok, 1] - y[ok]])
    q = np.linalg.lstsq(A, b, rcond=None)[0]
    cols = [np.ones_like(r2), r2, r2 * r2] + ([zc, zc * r2] if conjugate else [])
    Z = np.column_stack(cols)
    c = np.linalg.lstsq(Z[ok], apparent[ok, 2] - z[ok], rcond=None)[0]
    fitted = np.column_stack([x * (1 + radial @ q), y * (1 + radial @ q), z + Z @ c])
    lateral = np.concatenate([fitted[ok, 0] - apparent[ok, 0], fitted[ok, 1] - apparent[ok, 1]])
    names = ["offset_mm", "Z1", "Z2"] + (["dz_per_mm", "dz_r2_per_mm"] if conjugate else [])
    return fitted, {"Q": [float(v) for v in q], "depth": dict(zip(names, (float(v) for v in c), strict=True)),
                    "rms_lateral_mm": float(np.sqrt(np.mean(lateral ** 2))),
                    "rms_depth_mm": float(np.sqrt(np.mean((fitted[ok, 2] - apparent[ok, 2]) ** 2)))}


def through_points(camera, obs: dict[str, np.ndarray], points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(u, v) and ρ of each feature predicted from its point (model image space) through its lens."""
    bap = virtual_points_bap(camera, points, obs["bap_k"], obs["bap_l"])
    return bap[:, :2], bap[:, 2]


def with_features(obs: dict[str, np.ndarray], uv: np.ndarray, rho: np.ndarray | None, mic: np.ndarray | None) -> dict[str, np.ndarray]:
    keep = np.isfinite(uv[:, 0]) & (np.isfinite(rho) if rho is not None else True)
    out = {k: (v[keep] if k.startswith("bap_") else v) for k, v in obs.items()}
    out["bap_u"], out["bap_v"] = uv[keep, 0], uv[keep, 1]
    if rho is not None:
        out["bap_rho"] = rho[keep]
    if mic is not None:
        out["mic_u"], out["mic_v"] = mic[:, 0], mic[:, 1]
    return out


def calibrate_case(dataset: Path, initial: Path, obs: dict[str, np.ndarray], truth: dict[str, Any], work: Path, name: str) -> dict[str, Any]:
    path = work / f"{name}.npz"
    np.savez(path, **obs)
    out: dict[str, Any] = {"features": len(obs["bap_u"])}
    for mode, extra in (("defaults", []), ("both_terms", ["--exit-pupil", "--depth-distortion"]),
                        ("e_at_truth", ["--depth-distortion", "--prior", f"exit_pupil_mm={truth['e']:.4f}±{E_PRIOR_STD_MM}"])):
        folder = work / f"{name}-{mode}"
        cmd = [sys.executable, "-m", "plenocal", "calibrate", str(dataset), "-o", str(folder), "--observations", str(path),
               "--initial", str(initial), "--allow-failed-checks", *extra]
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True)
        rep_path = folder / "report.json"
        if not rep_path.exists():
            out[mode] = {"exit_code": p.returncode, "error": p.stderr.strip().splitlines()[-1:]}
            continue
        cam = read_camera(folder / "camera.json")
        rep = json.loads(rep_path.read_text())
        t = truth["thin"]
        out[mode] = {
            "exit_code": p.returncode, "converged": bool(rep.get("converged")), "wall_s": round(time.perf_counter() - t0, 1),
            "e_mm": cam.main_lens.exit_pupil_mm, "e_truth_mm": truth["e"],
            "F_percent": pct(cam.main_lens.focal_length_mm, t.main_lens.focal_length_mm),
            "D_percent": pct(cam.D_mm, t.D_mm), "d_percent": pct(cam.d_mm, t.d_mm),
            "f_percent": [pct(a, b) for a, b in zip(cam.mla.focal_lengths_mm, t.mla.focal_lengths_mm, strict=True)],
            "principal_point_px": [a - b for a, b in zip(cam.sensor.principal_point_px, t.sensor.principal_point_px, strict=True)],
            "uv_rmse_px": rep["rmse"]["uv_px"],
            "kept": sorted(k for k, v in rep.get("model_selection", {}).items() if v.get("kept")),
            "checks_failed": rep.get("checks", {}).get("failed", []),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", type=Path, required=True)
    ap.add_argument("--run", type=Path, required=True)
    ap.add_argument("--lens", default=None, help="bundled design or prescription file (default: optics.json's name)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    truth = truth_of(args.dataset)
    thin, cam_e = truth["thin"], truth["with_e"]
    det = args.run / "detection-pass2" / "observations.npz"
    det = det if det.exists() else args.run / "detection" / "observations.npz"
    raw = dict(np.load(det, allow_pickle=False))
    obs, P = features_with_truth(raw, truth)
    real = real_optics_camera(thin, load_lens(args.lens or truth["lens"], efl_mm=thin.main_lens.focal_length_mm),
                              lenslets=LensletDesign(kind=LensletKind.THIN))
    t0 = time.perf_counter()
    traced, ok, vignetted = feature_chief_rays_px(real, P, obs["bap_k"], obs["bap_l"])
    traced[~ok] = np.nan
    trace_s = time.perf_counter() - t0
    model = project_bap(cam_e, P, obs["bap_k"], obs["bap_l"])
    mic_model = micro_image_centres(cam_e, raw["mic_k"], raw["mic_l"])
    paraxial = virtual_points(cam_e, P)
    apparent = apparent_points(obs, traced, cam_e)
    fam, fam_fit = smooth_family(paraxial, apparent, conjugate=False)
    conj, conj_fit = smooth_family(paraxial, apparent, conjugate=True)
    uv_fam, rho_fam = through_points(cam_e, obs, fam)
    uv_conj, rho_conj = through_points(cam_e, obs, conj)
    uv_app, rho_app = through_points(cam_e, obs, apparent)
    sel = ok & np.isfinite(apparent[:, 0])
    detected = np.column_stack([obs["bap_u"], obs["bap_v"]])
    cases = {
        "model": with_features(obs, model[:, :2], model[:, 2], mic_model),
        "apparent_points_smooth_part": with_features(obs, np.where(sel[:, None], uv_fam, np.nan), rho_fam, mic_model),
        "plus_conjugate_terms": with_features(obs, np.where(sel[:, None], uv_conj, np.nan), rho_conj, mic_model),
        "apparent_points": with_features(obs, np.where(sel[:, None], uv_app, np.nan), rho_app, mic_model),
        "traced_model_rho_and_mics": with_features(obs, np.where(sel[:, None], traced, np.nan), rho_app, mic_model),
        "traced_real_mics": with_features(obs, np.where(sel[:, None], traced, np.nan), rho_app, None),
        "traced_real_rho_and_mics": with_features(obs, traced, None, None),
        "detected": obs,
    }
    # the real MICs against the model's: radial about the principal point, a·r + b·r³ (r in mm)
    d_mic = np.column_stack([raw["mic_u"], raw["mic_v"]]) - mic_model
    rel = mic_model - np.asarray(thin.sensor.principal_point_px)
    r_px = np.hypot(rel[:, 0], rel[:, 1])
    radial = np.sum(d_mic * rel, axis=1) / np.maximum(r_px, 1e-9)
    r_mm = r_px * thin.sensor.pixel_size_mm
    mic_law = np.linalg.lstsq(np.column_stack([r_mm, r_mm ** 3]), radial, rcond=None)[0]
    result: dict[str, Any] = {
        "mics_real_minus_model": {"radial_px_per_mm": float(mic_law[0]), "radial_px_per_mm3": float(mic_law[1]),
                                  "at_max_radius_px": float(mic_law[0] * r_mm.max() + mic_law[1] * r_mm.max() ** 3),
                                  "max_radius_mm": float(r_mm.max())},
        "machine": machine(), "dataset": str(args.dataset), "run": str(args.run), "lens": real.lens.name,
        "e_truth_mm": truth["e"],
        "features": len(P), "traced": int(ok.sum()), "vignetted_chief_rays": int(vignetted.sum()), "trace_s": round(trace_s, 2),
        "traced_minus_model_rms_px": float(np.sqrt(np.nanmean(np.sum((traced - model[:, :2]) ** 2, axis=1)))),
        "detected_minus_traced_rms_px": float(np.sqrt(np.nanmean(np.sum((detected - traced) ** 2, axis=1)))),
        "apparent_points_fit": {"model_family": fam_fit, "with_conjugate_terms": conj_fit},
        "cases": {},
    }
    with tempfile.TemporaryDirectory(prefix="plenocal-epx-") as tmp:
        for name, case in cases.items():
            result["cases"][name] = calibrate_case(args.dataset, args.run / "precalibration", case, truth, Path(tmp), name)
            print(f"{name}: {json.dumps(result['cases'][name]['both_terms'])[:160]}", file=sys.stderr)
    emit_json(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
