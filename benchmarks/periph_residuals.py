"""Why a real lens's peripheral clusters are rejected (issue 23): residuals against the white's shape.

Reads a finished ``plenocal run`` folder (default: the real-optics R12-B run) and prints JSON:

1. **Measure.** Re-runs the calibration in-process with the run's inputs and defaults (to know which
   features it rejects; its F is checked against the run's report), computes every calibration
   feature's residuals (u, v split into radial and tangential about the principal point, ρ) with
   the calibrated camera and poses, and sets them against statistics of the feature's micro-image
   in the white at the checkerboards' f-number, recomputed with
   :func:`plenocal.precalib.radii.micro_image_moments` and :func:`plenocal.precalib.conformity.conformity`:
   the field radius, the anisotropy (magnitude and its radial component, < 0 for a micro-image
   compressed radially), the lit mass relative to the centre's, the white centroid's radial offset
   from the grid node, and the dark / anisotropic / off-lattice flags. For each statistic: the area
   under the ROC curve (AUC) with which it separates rejected from kept features and rejected from
   kept clusters (a cluster is rejected when most of its features are), and per 1 mm ring the
   medians.
2. **Fix tried.** Observations whose micro-image the white shows strongly anisotropic or dark are
   dropped (every frame), then ``plenocal calibrate`` and ``plenocal evaluate`` run with defaults;
   F, D, d, f_i against the set's ``thin_lens_equivalent`` truth, rejections, ε_z, held-out RMSE and
   the report's verdict, against the unfiltered run re-evaluated the same way.

Usage::

    PYTHONPATH=src python benchmarks/periph_residuals.py [RUN_OUT] [--set SET] [--work DIR]
        [--anisotropy 0.05 0.02 ...]

Needs ``../shared`` (the set's truth) and the run folder; about 35 s on 2 cores (two calibrations).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
RUN = Path("/work/runs/indep5/realoptics-r12b/out")
SET = SHARED / "validation" / "realoptics-r12b"

FILTER_ANISOTROPY = (0.05, 0.02)
"""Anisotropy |a| (less the central micro-images' median) of a micro-image in the checkerboards'
white beyond which its features are dropped, for each variant of the fix tried: 0.05 is reached at
≈ 8 mm from the axis on R12-B (the issue's ring where clusters start to be rejected), 0.02 at
≈ 6.5 mm. Every variant also drops the white's dark micro-images (conformity's rule 1)."""
RING_MM = 1.0
"""Width of the rings of the per-radius table (mm from the principal point)."""


def sh(args: list[str]) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "plenocal", *args], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    return p.returncode, (p.stdout + p.stderr).strip(), time.perf_counter() - t0


def auc(score: np.ndarray, positive: np.ndarray) -> float | None:
    """P(score of a random positive > score of a random negative), ties half (Mann–Whitney)."""
    ok = np.isfinite(score)
    s, y = score[ok], positive[ok]
    n1, n0 = int(y.sum()), int((~y).sum())
    if n1 == 0 or n0 == 0:
        return None
    from scipy.stats import rankdata

    r = rankdata(s)
    return float((r[y].sum() - n1 * (n1 + 1) / 2.0) / (n1 * n0))


def stratified_auc(score: np.ndarray, positive: np.ndarray, stratum: np.ndarray) -> float | None:
    """AUC within each stratum (rings of field radius), pooled with weights n₊·n₋: what a
    statistic tells about rejection beyond the radius it grows with (0.5: nothing)."""
    num = den = 0.0
    for q in np.unique(stratum):
        s = (stratum == q) & np.isfinite(score)
        n1, n0 = int(positive[s].sum()), int((~positive[s]).sum())
        a = auc(score[s], positive[s])
        if a is not None:
            num += a * n1 * n0
            den += n1 * n0
    return num / den if den else None


def spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    from scipy.stats import spearmanr

    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 10:
        return None
    return float(spearmanr(a[ok], b[ok]).statistic)


def calibrate_in_process(run: Path):
    """The run's calibration, again, in-process (defaults): the result and its inputs."""
    from plenocal.calib.calibrate import calibrate
    from plenocal.cli.calibrate import options_from_args, read_inputs
    from plenocal.cli.main import build_parser

    argv = ["calibrate", str(run.parent / "dataset"), "-o", "/nonexistent", "--observations",
            str(run / "detection-pass2" / "observations.npz"), "--initial", str(run / "precalibration")]
    args = build_parser().parse_args(argv)
    inputs = read_inputs(args)
    opt = options_from_args(args, inputs.camera, positions=inputs.observations.positions)
    res = calibrate(inputs.observations, inputs.camera, inputs.dataset.manifest.target, options=opt, frames=inputs.frames)
    return res, inputs


def white_statistics(dataset, grid, pp: tuple[float, float], n_cb: float):
    """Per micro-image of the white at ``n_cb``: (k, l) → row of the returned arrays."""
    from plenocal.cli.precalibrate import load_whites
    from plenocal.precalib.centres import clean_image, envelope, flatten_by
    from plenocal.precalib.conformity import central, conformity
    from plenocal.precalib.pipeline import _sample
    from plenocal.precalib.radii import micro_image_moments

    white = min(load_whites(dataset), key=lambda w: abs(w.f_number - n_cb))
    img = clean_image(white.image)
    env = envelope(img, grid.diameter_px)
    k_all, l_all = grid.lattice.all_indices()
    m = micro_image_moments(flatten_by(img, env), grid, k_all, l_all)
    mass = m.mean_intensity * _sample(env, m.centre_px)
    conf = conformity(m, mass, grid.lattice, img.shape[:2], f_number=white.f_number)
    ref = central(m.centre_px, img.shape[:2])
    a = np.nan_to_num(m.anisotropy, nan=1.0) - np.median(m.anisotropy[ref], axis=0)
    node = grid.centres(m.k, m.l)
    d = node - np.asarray(pp)
    theta = np.arctan2(d[:, 1], d[:, 0])
    rhat = np.stack([np.cos(theta), np.sin(theta)], axis=1)
    # a = ((σxx − σyy), 2σxy)/(σxx + σyy) is a spin-2 vector: its component along (cos 2θ, sin 2θ)
    # is (σ_rr − σ_tt)/(σ_rr + σ_tt), > 0 elongated radially, < 0 compressed radially.
    a_rad = a[:, 0] * np.cos(2 * theta) + a[:, 1] * np.sin(2 * theta)
    shift = m.centre_px - node
    mass_rel = mass / np.median(mass[ref])
    stats = {"anisotropy": np.hypot(a[:, 0], a[:, 1]), "anisotropy_radial": a_rad,
             "mass_relative": mass_rel, "centroid_shift_radial_px": np.sum(shift * rhat, axis=1),
             "dark": conf.dark, "anisotropic": conf.anisotropic, "off_lattice": conf.off_lattice}
    index = {(int(k), int(l)): i for i, (k, l) in enumerate(zip(m.k, m.l, strict=True))}
    return stats, index, white.f_number, conf.summary()


def measure(run: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    from plenocal.cli.precalibrate import checkerboard_f_number
    from plenocal.evaluate.metrics import compute_residuals
    from plenocal.model.observations import Observations

    t0 = time.perf_counter()
    res, inputs = calibrate_in_process(run)
    rep = json.loads((run / "calibration" / "report.json").read_text())
    cam = res.camera
    obs = inputs.observations
    frames = np.asarray(inputs.frames)
    in_cal = np.isin(obs.bap.frame, frames) & (obs.bap.node >= 0)
    sub = Observations(obs.bap.select(in_cal), obs.mic, obs.positions)
    r = compute_residuals(cam, res.poses, inputs.dataset.manifest.target, sub)
    b = sub.bap.select(r.bap_index)
    rej = res.rejected_features
    rejected_keys = set(zip(rej.frame.tolist(), rej.k.tolist(), rej.l.tolist(), rej.node.tolist(), strict=True))
    rejected = np.array([key in rejected_keys for key in zip(b.frame.tolist(), b.k.tolist(), b.l.tolist(),
                                                               b.node.tolist(), strict=True)])
    pp = cam.principal_point_px
    px_mm = cam.sensor.pixel_size_mm
    node = inputs.camera.grid.centres(b.k, b.l)
    d = node - np.asarray(pp)
    radius_mm = np.hypot(d[:, 0], d[:, 1]) * px_mm
    rhat = d / np.maximum(np.hypot(d[:, 0], d[:, 1]), 1e-9)[:, None]
    e_rad = np.sum(r.uv * rhat, axis=1)
    e_tan = rhat[:, 0] * r.uv[:, 1] - rhat[:, 1] * r.uv[:, 0]
    e_rho = r.rho
    sig = res.sigma
    n_cb = float(checkerboard_f_number(inputs.dataset))
    wstats, windex, n_white, conf_line = white_statistics(inputs.dataset, inputs.camera.grid, pp, n_cb)
    rows = np.array([windex.get((int(k), int(l)), -1) for k, l in zip(b.k, b.l, strict=True)])
    have = rows >= 0
    feat: dict[str, np.ndarray] = {"radius_mm": radius_mm}
    for name, v in wstats.items():
        x = np.full(len(rows), np.nan)
        x[have] = np.asarray(v, dtype=np.float64)[rows[have]]
        feat[name] = x
    # Depth of each feature's board node in the camera frame (mm, from H).
    pw = inputs.dataset.manifest.target.node_points(b.node)
    fr = sorted(res.poses)
    Rz = np.array([res.poses[f].rotation[2] for f in fr])
    tz = np.array([res.poses[f].translation[2] for f in fr])
    at = np.searchsorted(fr, b.frame)
    depth = np.einsum("nj,nj->n", Rz[at], pw) + tz[at]
    # Scores oriented so that "larger = more suspect".
    scores = {"radius_mm": radius_mm, "anisotropy": feat["anisotropy"], "minus_anisotropy_radial": -feat["anisotropy_radial"],
              "mass_deficit": 1.0 - feat["mass_relative"], "centroid_shift_radial_px": feat["centroid_shift_radial_px"],
              "depth_mm": depth, "minus_abs_rho_observed_px": -np.abs(b.rho),
              "flag_dark": feat["dark"], "flag_anisotropic": feat["anisotropic"], "flag_off_lattice": feat["off_lattice"],
              "abs_residual_radial_px": np.abs(e_rad), "abs_residual_tangential_px": np.abs(e_tan),
              "abs_residual_rho_px": np.abs(e_rho)}
    # Clusters: (frame, detector cluster); rejected when most of its features are.
    ckey = b.frame.astype(np.int64) * 100000 + b.cluster.astype(np.int64)
    uc, inv = np.unique(ckey, return_inverse=True)
    c_rej = np.bincount(inv, weights=rejected.astype(float)) / np.bincount(inv) > 0.5

    def cmed(x: np.ndarray) -> np.ndarray:
        return np.array([np.nanmedian(x[inv == i]) if np.any(np.isfinite(x[inv == i])) else np.nan for i in range(len(uc))])

    ring = np.floor(radius_mm / RING_MM).astype(int)
    predictors = {}
    for name, s in scores.items():
        s = np.asarray(s, dtype=np.float64)
        predictors[name] = {"auc_features": auc(s, rejected), "auc_clusters": auc(cmed(s), c_rej),
                            "auc_features_within_rings": stratified_auc(s, rejected, ring)}
    table = []
    for q in range(int(ring.max()) + 1):
        s = ring == q
        if not s.any():
            continue

        def med(x: np.ndarray, s: np.ndarray = s) -> float | None:
            return float(np.nanmedian(x[s])) if np.any(np.isfinite(x[s])) else None
        table.append({"ring_mm": [q * RING_MM, (q + 1) * RING_MM], "n": int(s.sum()), "n_rejected": int(rejected[s].sum()),
                      "median_residual_radial_px": med(e_rad), "median_residual_tangential_px": med(e_tan),
                      "median_residual_rho_px": med(e_rho),
                      "median_residual_rho_px_rho_negative": float(np.median(e_rho[s & (b.rho < 0)])) if np.any(s & (b.rho < 0)) else None,
                      "median_residual_rho_px_rho_positive": float(np.median(e_rho[s & (b.rho > 0)])) if np.any(s & (b.rho > 0)) else None,
                      "rms_residual_radial_px": float(np.sqrt(np.mean(e_rad[s] ** 2))),
                      "rms_residual_tangential_px": float(np.sqrt(np.mean(e_tan[s] ** 2))),
                      "rms_residual_rho_px": float(np.sqrt(np.nanmean(e_rho[s] ** 2))),
                      "median_anisotropy": med(feat["anisotropy"]), "median_anisotropy_radial": med(feat["anisotropy_radial"]),
                      "median_mass_relative": med(feat["mass_relative"]),
                      "median_centroid_shift_radial_px": med(feat["centroid_shift_radial_px"]),
                      "n_flag_dark": int(np.nansum(feat["dark"][s])), "n_flag_anisotropic": int(np.nansum(feat["anisotropic"][s])),
                      "n_flag_off_lattice": int(np.nansum(feat["off_lattice"][s]))})
    rho_over = np.abs(e_rho) / sig["rho"]
    uv_over = np.hypot(*r.uv.T) / sig["uv"]
    out = {
        "rerun_check": {"F_mm_rerun": cam.main_lens.focal_length_mm, "F_mm_run": rep["parameters"]["F_mm"]["value"],
                        "rejected_bap_rerun": int(res.rejected["bap"]), "rejected_bap_run": rep["rejected"]["bap"]},
        "white": {"f_number": n_white, "conformity": conf_line},
        "n_features": len(b), "n_rejected": int(rejected.sum()), "n_features_without_white_moments": int((~have).sum()),
        "n_clusters": len(uc), "n_clusters_rejected": int(c_rej.sum()),
        "sigma_px": {k: float(v) for k, v in sig.items()},
        "rejected_why": {"rho_beyond_uv": int(np.sum(rejected & (rho_over > uv_over))),
                         "uv_beyond_rho": int(np.sum(rejected & (rho_over <= uv_over)))},
        "spearman_vs_abs_rho_residual": {n: spearman(np.asarray(scores[n], float), np.abs(e_rho)) for n in
                                         ("radius_mm", "anisotropy", "minus_anisotropy_radial", "mass_deficit",
                                          "centroid_shift_radial_px")},
        "predictors": dict(sorted(predictors.items(), key=lambda kv: -(kv[1]["auc_features"] or 0))),
        "by_ring": table,
        "beyond_7mm_by_frame": {int(f): {"n": int(np.sum((b.frame == f) & (radius_mm >= 7))),
                                         "n_rejected": int(np.sum((b.frame == f) & (radius_mm >= 7) & rejected)),
                                         "median_depth_mm": float(np.median(depth[(b.frame == f) & (radius_mm >= 7)]))
                                         if np.any((b.frame == f) & (radius_mm >= 7)) else None,
                                         "median_abs_rho_px": float(np.median(np.abs(b.rho[(b.frame == f) & (radius_mm >= 7)])))
                                         if np.any((b.frame == f) & (radius_mm >= 7)) else None}
                                for f in np.unique(b.frame)},
        "wall_s": time.perf_counter() - t0,
    }
    keep_info = {"white_stats": wstats, "white_index": windex}
    return out, keep_info


# --- the fix ---------------------------------------------------------------------------------
def verdict_of(folder: Path) -> dict[str, Any]:
    from plenocal.viz.report import collect
    from plenocal.viz.verdict import assemble

    c = collect(folder)
    v = assemble({k: d for k, (_, d) in c.documents.items()}, notes=c.notes)
    return {"status": v.status, "reasons": [f.text for f in v.reasons], "headline": v.headline}


def truth_errors(cal_dir: Path, truth: dict[str, Any]) -> dict[str, Any]:
    rep = json.loads((cal_dir / "report.json").read_text())
    p = rep["parameters"]
    tle = truth["thin_lens_equivalent"]

    def err(name: str, true: float) -> dict[str, Any]:
        q = p[name]
        s = max(q["std"], q.get("std_frames") or 0.0)
        return {"value": q["value"], "error_percent": 100.0 * (q["value"] / true - 1.0), "z_larger_sigma": (q["value"] - true) / s}

    fi = sorted((k for k in p if k.startswith("f") and k.endswith("_mm") and k[1:-3].isdigit()), key=lambda k: p[k]["value"])
    out = {"F": err("F_mm", tle["F_mm"]), "D": err("D_mm", tle["D_Hp_to_lenslet_H_mm_mean"]),
           "d": err("d_mm", tle["d_effective_mm_mean"]),
           "f": {k: err(k, t) for k, t in zip(fi, sorted(tle["lenslet_f_mm"]), strict=False)},
           "u0_px": p["u0_px"]["value"] - tle["principal_point_px"][0], "v0_px": p["v0_px"]["value"] - tle["principal_point_px"][1],
           "rejected": rep["rejected"], "n_bap": rep["n_bap"], "rmse": rep["rmse"], "converged": rep["converged"],
           "model_selection": {k: v.get("kept") for k, v in (rep.get("model_selection") or {}).items()}}
    return out


def run_variant(run: Path, work: Path, obs_path: Path, truth: dict[str, Any], *, calibrate_again: bool) -> dict[str, Any]:
    """A run-like folder: the run's pre-calibration and detections, a calibration (again, or the
    run's), an evaluation without depth; its figures and the report's verdict."""
    for w in (work, work.parent / (work.name + "-evaluation-all")):
        shutil.rmtree(w, ignore_errors=True)
    work.mkdir(parents=True)
    for stage in ("precalibration", "detection", "detection-pass2"):
        (work / stage).symlink_to(run / stage)
    ds = run.parent / "dataset"
    if calibrate_again:
        code, text, _ = sh(["calibrate", str(ds), "-o", str(work / "calibration"), "--observations", str(obs_path),
                               "--initial", str(run / "precalibration")])
        if code:
            return {"error": text.splitlines()[-3:]}
    else:
        (work / "calibration").symlink_to(run / "calibration")
    code, text, _ = sh(["evaluate", str(ds), "--camera", str(work / "calibration" / "camera.json"), "--poses",
                        str(work / "calibration" / "poses.json"), "--observations", str(obs_path), "-o", str(work / "evaluation")])
    if code:
        return {"error": text.splitlines()[-3:]}
    ev = json.loads((work / "evaluation" / "report.json").read_text())
    out = truth_errors(work / "calibration", truth)
    out["evaluation"] = {"rmse_uv_px": ev["rmse"]["uv_px"], "held_out_rmse_uv_px": (ev.get("holdout") or {}).get("rmse", {}).get("uv_px"),
                         "held_out_n_bap": (ev.get("holdout") or {}).get("n_bap"),
                         "epsilon_z_percent": (ev.get("translation") or {}).get("epsilon_z_percent")}
    out["verdict"] = verdict_of(work)
    if calibrate_again:
        # The same camera on every observation, the peripheral ones included (not in the verdict).
        all_obs = run / "detection-pass2" / "observations.npz"
        code, text, _ = sh(["evaluate", str(ds), "--camera", str(work / "calibration" / "camera.json"), "--poses",
                            str(work / "calibration" / "poses.json"), "--observations", str(all_obs), "-o",
                            str(work.parent / (work.name + "-evaluation-all"))])
        if not code:
            ev = json.loads((work.parent / (work.name + "-evaluation-all") / "report.json").read_text())
            out["evaluation_on_unfiltered_observations"] = {
                "rmse_uv_px": ev["rmse"]["uv_px"], "held_out_rmse_uv_px": (ev.get("holdout") or {}).get("rmse", {}).get("uv_px"),
                "held_out_n_bap": (ev.get("holdout") or {}).get("n_bap"),
                "epsilon_z_percent": (ev.get("translation") or {}).get("epsilon_z_percent")}
    return out


def filtered_observations(run: Path, work: Path, white: dict[str, Any], threshold: float) -> tuple[Path, dict[str, int]]:
    from plenocal.io.observations import read_observations, write_observations
    from plenocal.model.observations import Observations

    obs = read_observations(run / "detection-pass2" / "observations.npz")
    stats, index = white["white_stats"], white["white_index"]
    rows = np.array([index.get((int(k), int(l)), -1) for k, l in zip(obs.bap.k, obs.bap.l, strict=True)])
    bad = np.zeros(len(rows), dtype=bool)
    have = rows >= 0
    bad[have] = (stats["anisotropy"][rows[have]] > threshold) | stats["dark"][rows[have]]
    bad |= ~have
    out = work / f"observations-aniso{threshold:g}.npz"
    work.mkdir(parents=True, exist_ok=True)
    write_observations(out, Observations(obs.bap.select(~bad), obs.mic, obs.positions))
    linked = obs.bap.node >= 0
    return out, {"dropped_features": int(bad.sum()), "dropped_linked": int((bad & linked).sum()), "kept_linked": int((~bad & linked).sum())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", nargs="?", type=Path, default=RUN, help="a plenocal run's output folder")
    ap.add_argument("--set", type=Path, default=SET, help="the set (its truth.json)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/periph_residuals"))
    ap.add_argument("--anisotropy", type=float, nargs="*", default=list(FILTER_ANISOTROPY))
    a = ap.parse_args()
    truth = json.loads((a.set / "truth.json").read_text())
    report, white = measure(a.run)
    fix: dict[str, Any] = {"unfiltered": run_variant(a.run, a.work / "unfiltered", a.run / "detection-pass2" / "observations.npz",
                                                     truth, calibrate_again=False)}
    for thr in a.anisotropy:
        path, counts = filtered_observations(a.run, a.work, white, thr)
        fix[f"anisotropy>{thr:g} or dark dropped"] = {**counts, **run_variant(a.run, a.work / f"aniso{thr:g}", path, truth,
                                                                               calibrate_again=True)}
    report["fix"] = fix
    print(json.dumps(report, indent=1, default=lambda x: x.item() if hasattr(x, "item") else str(x)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
