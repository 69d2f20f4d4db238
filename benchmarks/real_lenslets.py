"""What real micro-lenses do to plenocal's observations and calibration, per lenslet design
(``docs/model.md``, "Real micro-lenses"). Prints JSON (and writes it to --out).

Usage::

    python benchmarks/real_lenslets.py [--designs A,B,...] [--out FILE] [--run DIR]

For each lenslet design (:data:`DESIGNS`) on the R12-A camera of ``tests/data/r12a`` (f/4):

1. **chief-ray map** (:func:`plenocal.sim.optics.spots.chief_ray_map`): per type, how far from the
   lenslet axis the centroid of an unvignetted spot lies against the thin model's image (β, %),
   at virtual depths 2.2–15, on axis and 12 mm off it, and the fit β = β0 + β1/υ + β2·C²
   (C the lens's distance from the main axis, mm);
2. **white radius law**: m and q'_i of the variance law (4σ² = R_a² + R_b², :mod:`plenocal.precalib.radii`)
   measured on real-optics renders of white micro-images (windows of ~50 micro-images on axis and
   8 mm off it, f/5.66–16, 64 rays, no noise), relative to the same measurement on thin lenslets of
   full pitch (which the thin model describes: their estimator bias cancels);
3. **what calibration makes of it**: the camera's own noise-free BAP features of the 16 poses
   (detection-like noise added: uv 0.15 px, ρ 0.02 px, MIC 0.05 px), the (u, v) moved by the
   design's chief-ray map about each lens's axis, ρ re-derived as detection does (eq:radiusfinal
   from the moved disparities, i.e. 1/υ × (1 + β), and the whites' q'_i), calibrated with the
   default options: F, D, d, f_i against the truth, and the (u, v) RMSE against the unmoved
   observations' (how much of the departure the thin model absorbs). For the validation set's
   caps also β0 alone and the rest alone.

With ``--run DIR`` (a ``plenocal run`` output whose ``dataset`` sits beside it, ``DIR/../dataset``,
with ground truth) it also calibrates that run's detections with each observation swapped for the
truth camera's (uv, ρ, MICs, Ω's q'_i): which observation carries which bias.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import emit_json  # noqa: E402

from plenocal.calib.calibrate import DEFAULT_RHO_FORM, CalibrationOptions, calibrate  # noqa: E402
from plenocal.calib.synthetic import NoiseLevels, synthetic_observations  # noqa: E402
from plenocal.io import read_camera_file, read_manifest, read_observations, read_poses  # noqa: E402
from plenocal.model import micro_image_centres  # noqa: E402
from plenocal.model.camera import Distortion, MainLens, RhoForm  # noqa: E402
from plenocal.model.observations import BapFeatures, MicroImageCentres, Observations  # noqa: E402
from plenocal.model.projection import micro_lens_centres, project_bap  # noqa: E402
from plenocal.model.white import internal_parameters, radius_law_at  # noqa: E402
from plenocal.precalib.radii import windowed_moments  # noqa: E402
from plenocal.sim.optics import load_lens  # noqa: E402
from plenocal.sim.optics.camera import real_optics_camera  # noqa: E402
from plenocal.sim.optics.lenslets import DEFAULT_CLEAR_FRACTION, LensletDesign, LensletKind, lenslet_types  # noqa: E402
from plenocal.sim.optics.render import render_real  # noqa: E402
from plenocal.sim.optics.spots import chief_ray_map, displaced_features, lenslet_bench  # noqa: E402
from plenocal.sim.scene import WhiteDiffuser  # noqa: E402

DATA = ROOT / "tests" / "data" / "r12a"
VIRTUAL_DEPTHS = (2.2, 2.6, 3.2, 4.5, 7.0, 15.0)
FIELDS_MM = (0.0, 6.0, 12.0)
WHITE_F_NUMBERS = (5.66, 8.0, 11.31, 16.0)
WHITE_FIELDS_MM = (0.0, 8.0)
NOISE = NoiseLevels(0.15, 0.02, 0.05)

DESIGNS: dict[str, dict[str, Any]] = {
    "thin": {"kind": "thin", "what": "thin lenslets, full-pitch aperture (the paper's)"},
    "thin-clear": {"kind": "thin", "clear": DEFAULT_CLEAR_FRACTION, "what": "thin lenslets, clear aperture 0.982 × pitch"},
    "caps-no-substrate": {"substrate": 0.0, "what": "fused-silica caps, no substrate, clear aperture 0.982"},
    "caps": {"what": "fused-silica caps on 0.1 mm (the real-optics renders' and validation set's lenslets)"},
    "caps-full-pitch": {"clear": 1.0, "what": "fused-silica caps on 0.1 mm, clear aperture = pitch"},
    "caps-substrate-0.3": {"substrate": 0.3, "what": "fused-silica caps on 0.3 mm (air gap 0.05 mm)"},
    "caps-bk7": {"index": 1.5168, "what": "N-BK7 caps on 0.1 mm"},
    "caps-n1.8": {"index": 1.8, "what": "n 1.8 caps on 0.1 mm (flatter caps)"},
    "caps-clear-0.7": {"clear": 0.7, "what": "fused-silica caps on 0.1 mm, clear aperture 0.7 × pitch (slower lenslets)"},
}


def design_of(spec: dict[str, Any], pitch: float) -> LensletDesign:
    kind = LensletKind.THIN if spec.get("kind") == "thin" else LensletKind.REAL
    clear = spec.get("clear")
    kw: dict[str, Any] = {"clear_radius_mm": None if clear is None else clear * pitch / 2.0}
    if kind is LensletKind.REAL:
        kw.update(index=spec.get("index", 1.45846), substrate_mm=spec.get("substrate", 0.1))
    return LensletDesign(kind, **kw)


def chief_ray_law(camera, design: LensletDesign) -> dict[str, Any]:
    """Per type: β_t, β_s (%) at each (υ, C), and the fits β = β0 + β1/υ + β2·C²."""
    mla = camera.mla
    pitch = 0.5 * (mla.pitch_mm[0] + mla.pitch_mm[1])
    F = camera.main_lens.focal_length_mm
    out = []
    for kind in lenslet_types(design, mla.focal_lengths_mm, pitch):
        bench = lenslet_bench(design, kind, d_mm=camera.d_mm, D_mm=camera.D_mm, pupil_radius_mm=F / (2.0 * camera.main_lens.f_number))
        rows = []
        for C in FIELDS_MM:
            for v in VIRTUAL_DEPTHS:
                m = chief_ray_map(bench, v, field_mm=C)
                if m is not None:
                    rows.append((v, C, m.beta_t, m.beta_s, m.offset_mm))
        a = np.array(rows)
        X = np.stack([np.ones(len(a)), 1.0 / a[:, 0], a[:, 1] ** 2], axis=1)
        ft = np.linalg.lstsq(X, a[:, 2], rcond=None)[0]
        fs = np.linalg.lstsq(X, a[:, 3], rcond=None)[0]
        fo = np.linalg.lstsq(a[:, 1:2] ** 2, a[:, 4], rcond=None)[0]
        out.append({
            "focal_length_mm": kind.focal_length_mm,
            "sag_um": 1e3 * kind.sag_mm,
            "principal_gap_um": 1e3 * kind.principal_gap_mm,
            "beta_percent": {f"C{C:g}mm": {f"u{v:g}": [round(100 * b, 3) for b in (bt, bs)] for v, c_, bt, bs, _ in rows if c_ == C}
                             for C in FIELDS_MM},
            "fit_tangential": {"beta0_percent": 100 * ft[0], "beta1_percent": 100 * ft[1], "beta2_percent_per_mm2": 100 * ft[2]},
            "fit_sagittal": {"beta0_percent": 100 * fs[0], "beta1_percent": 100 * fs[1], "beta2_percent_per_mm2": 100 * fs[2]},
            "offset_um_per_mm2": 1e3 * fo[0],
            "coefficients": {"t": ft.tolist(), "s": fs.tolist(), "c0": float(fo[0])},
        })
    return {"types": out}


def white_law(camera, design: LensletDesign, thin_reference: dict | None) -> dict[str, Any]:
    """m, q_i, q'_i of the variance law on white renders, relative to the thin-lenslet measurement."""
    rc = real_optics_camera(camera, load_lens("thin"), lenslets=design)
    thin = rc.thin
    k, l = thin.mla.lattice.all_indices()
    mic = micro_image_centres(thin, k, l)
    types = thin.mla.types.type_of(k, l)
    u0, v0 = thin.sensor.principal_point_px
    s = thin.sensor.pixel_size_mm
    dc = thin.micro_image_pitch_mm
    res = {}
    for fm in WHITE_FIELDS_MM:
        cu, cv = u0 + fm / s / np.sqrt(2.0), v0 + fm / s / np.sqrt(2.0)
        roi = (int(cu - 90), int(cv - 90), int(cu + 90), int(cv + 90))
        inside = (mic[:, 0] > roi[0] + 13) & (mic[:, 0] < roi[2] - 13) & (mic[:, 1] > roi[1] + 13) & (mic[:, 1] < roi[3] - 13)
        y, X = [], []
        for N in WHITE_F_NUMBERS:
            img = render_real(rc, WhiteDiffuser(), f_number=N, rays=64, roi=roi, seed=1)
            m = windowed_moments(img, k[inside], l[inside], mic[inside], thin.grid.diameter_px / 2.0 - 0.5)
            t = types[inside]
            row = np.zeros((len(m.k), 4))
            row[:, 0] = 1.0 / N**2
            row[np.arange(len(m.k)), 1 + t] = 1.0
            X.append(row)
            y.append(4.0 * (m.variance_px2 - 1.0 / 12.0) * s * s)
        sol = np.linalg.lstsq(np.concatenate(X), np.concatenate(y), rcond=None)[0]
        m_abs, q_abs = float(np.sqrt(sol[0])), np.sqrt(sol[1:])
        res[f"{fm:g}mm"] = {"m_mm": m_abs, "q_mm": q_abs.tolist(), "q_prime_mm": (dc / 2.0 - q_abs).tolist()}
        _, qt = radius_law_at(thin, k[inside], l[inside])
        res[f"{fm:g}mm"]["thin_model_q_prime_mm"] = [float(dc / 2.0 - np.mean(np.abs(qt[types[inside] == i]))) for i in range(3)]
    if thin_reference is not None:
        for key, r in res.items():
            ref = thin_reference[key]
            r["m_percent"] = 100.0 * (r["m_mm"] / ref["m_mm"] - 1.0)
            r["q_percent"] = [100.0 * (a / b - 1.0) for a, b in zip(r["q_mm"], ref["q_mm"], strict=True)]
            r["q_prime_percent"] = [100.0 * (a / b - 1.0) for a, b in zip(r["q_prime_mm"], ref["q_prime_mm"], strict=True)]
    return res


def _truth_setup():
    cam = read_camera_file(DATA / "camera.json").camera
    cam = cam.replace(distortion=Distortion(), main_lens=MainLens(cam.main_lens.focal_length_mm, 4.0), mia=None,
                      rho_form=RhoForm(DEFAULT_RHO_FORM))
    poses = read_poses(DATA / "poses.json")
    board = read_manifest(DATA / "manifest.json").target
    return cam, poses, board


def _errors(c, truth) -> dict[str, Any]:
    return {
        "F_percent": 100 * (c.main_lens.focal_length_mm / truth.main_lens.focal_length_mm - 1),
        "D_percent": 100 * (c.D_mm / truth.D_mm - 1),
        "d_percent": 100 * (c.d_mm / truth.d_mm - 1),
        "f_percent": [100 * (a / b - 1) for a, b in zip(c.mla.focal_lengths_mm, truth.mla.focal_lengths_mm, strict=True)],
    }


def moved_observations(truth, clean: BapFeatures, law: dict[str, Any] | None, dq_prime: list[float], *,
                       parts: str = "all") -> BapFeatures:
    """The truth's BAP features through lenslets with the design's chief-ray law
    (:func:`plenocal.sim.optics.spots.displaced_features`, β per feature from the fit at its type,
    1/υ and field) and the whites' q'_i off by ``dq_prime`` (%, per type) in ρ. ``parts``: "all",
    "beta0" (the constant term only) or "rest" (all but it)."""
    b = clean
    s = truth.sensor.pixel_size_mm
    types = truth.mla.types.type_of(b.k, b.l)
    omega = internal_parameters(truth)
    half = omega.micro_lens_pitch_mm / 2.0 / s
    q_prime = np.asarray(omega.q_prime_mm)[types] / s
    if law is not None:
        inverse_depth = (b.rho - q_prime + half) / half  # eq:radiusfinal solved for 1/υ
        C = micro_lens_centres(truth, b.k, b.l)
        r2 = C[:, 0] ** 2 + C[:, 1] ** 2
        coef = law["types"]
        ct = np.array([coef[i]["coefficients"]["t"] for i in types])
        cs = np.array([coef[i]["coefficients"]["s"] for i in types])
        c0 = np.array([coef[i]["coefficients"]["c0"] for i in types])
        X = np.stack([np.ones(len(b)), inverse_depth, r2], axis=1)
        mask = np.array({"all": (1, 1, 1), "beta0": (1, 0, 0), "rest": (0, 1, 1)}[parts], dtype=float)
        b = displaced_features(truth, b, np.sum(X * ct * mask, axis=1), np.sum(X * cs * mask, axis=1),
                               0.0 if parts == "beta0" else c0 * r2)
    rho = b.rho + np.asarray(dq_prime)[types] / 100.0 * q_prime
    return BapFeatures(frame=b.frame, k=b.k, l=b.l, u=b.u, v=b.v, rho=rho, node=b.node, cluster=b.cluster)


def calibrate_moved(truth, poses, board, law, dq_prime, *, parts: str = "all") -> dict[str, Any]:
    """Calibrate the truth's noise-free features moved by ``law`` and ``dq_prime`` (module
    docstring): the bias, and the RMSE left (what the thin model cannot absorb; 0 if it absorbs
    everything)."""
    _, clean = synthetic_observations(truth, poses, board, noise=NoiseLevels(0.0, 0.0, 0.0), seed=1)
    moved = moved_observations(truth, clean.bap, law, dq_prime, parts=parts)
    t0 = time.perf_counter()
    r = calibrate(Observations(moved, clean.mic), truth, board, options=CalibrationOptions(frame_resampling=False, loss="linear"))
    out = _errors(r.camera, truth)
    out["rmse_px"] = {k_: float(v_) for k_, v_ in r.rmse.items()}
    out["n_bap"] = len(moved)
    out["seconds"] = time.perf_counter() - t0
    return out


def noise_sigma(truth, poses, board) -> dict[str, Any]:
    """Jacobian σ (%) of F, D, d, f_i with detection-like noise (:data:`NOISE`), the scale against
    which the biases are read."""
    noisy, _ = synthetic_observations(truth, poses, board, noise=NOISE, seed=1)
    r = calibrate(noisy, truth, board, options=CalibrationOptions(frame_resampling=False))
    idx = r.layout.index
    rel = {"F_mm": truth.main_lens.focal_length_mm, "D_mm": truth.D_mm, "d_mm": truth.d_mm}
    out = {f"{k}_percent": 100 * float(r.std[idx[k]]) / v for k, v in rel.items() if k in idx}
    out["f_percent"] = [100 * float(r.std[idx[f"f{i + 1}_mm"]]) / f for i, f in enumerate(truth.mla.focal_lengths_mm) if f"f{i + 1}_mm" in idx]
    out["noise_px"] = {"uv": NOISE.uv_px, "rho": NOISE.rho_px, "mic": NOISE.mic_px}
    return out


def run_decomposition(run: Path) -> dict[str, Any]:
    """Swap each of a real run's observations for the truth camera's and calibrate (module docstring)."""
    ds = run.parent / "dataset"
    obs = read_observations(run / "detection" / "observations.npz")
    pf = read_camera_file(run / "precalibration" / "camera.json")
    pre, om = pf.camera, pf.internal_parameters
    board = read_manifest(ds / "manifest.json").target
    tf = read_camera_file(ds / "ground_truth" / "camera.json")
    truth, omt = tf.camera, tf.internal_parameters
    poses = read_poses(ds / "ground_truth" / "poses.json")
    bap = obs.bap.select((obs.bap.frame < 100) & (obs.bap.node >= 0))
    P = np.zeros((len(bap), 3))
    for f in np.unique(bap.frame):
        sel = bap.frame == f
        X = poses[int(f)].apply(board.node_points(bap.node[sel]))
        P[sel] = project_bap(truth, X, bap.k[sel], bap.l[sel])
    types = truth.mla.types.type_of(bap.k, bap.l)
    s = om.pixel_size_mm
    A2, A2t = om.micro_lens_pitch_mm / 2.0, omt.micro_lens_pitch_mm / 2.0
    qp, qpt = np.asarray(om.q_prime_mm)[types], np.asarray(omt.q_prime_mm)[types]
    ups = A2 / (bap.rho * s - qp + A2)
    rho_truth_omega = (A2t / ups + qpt - A2t) / s
    mt = micro_image_centres(truth, bap.k, bap.l)
    e = P[:, :2] - mt
    x = e.reshape(-1)
    y = np.stack([bap.u - P[:, 0], bap.v - P[:, 1]], axis=1).reshape(-1)
    rng = np.random.default_rng(0)
    mic_t = micro_image_centres(truth, obs.mic.k, obs.mic.l)
    mic_truth = MicroImageCentres(k=obs.mic.k, l=obs.mic.l, u=mic_t[:, 0] + NOISE.mic_px * rng.standard_normal(len(mic_t)),
                                  v=mic_t[:, 1] + NOISE.mic_px * rng.standard_normal(len(mic_t)))
    nu = NOISE.uv_px * rng.standard_normal((2, len(bap)))

    def feats(u=None, v=None, rho=None) -> BapFeatures:
        return BapFeatures(frame=bap.frame, k=bap.k, l=bap.l, u=bap.u if u is None else u, v=bap.v if v is None else v,
                           rho=bap.rho if rho is None else rho, node=bap.node, cluster=bap.cluster)

    cases = {
        "detected": (feats(), obs.mic),
        "rho with the truth's q'_i": (feats(rho=rho_truth_omega), obs.mic),
        "rho of the truth": (feats(rho=P[:, 2] + NOISE.rho_px * rng.standard_normal(len(bap))), obs.mic),
        "uv of the truth": (feats(u=P[:, 0] + nu[0], v=P[:, 1] + nu[1]), obs.mic),
        "uv of the truth, rho with the truth's q'_i": (feats(u=P[:, 0] + nu[0], v=P[:, 1] + nu[1], rho=rho_truth_omega), obs.mic),
        "MICs of the truth": (feats(), mic_truth),
    }
    out: dict[str, Any] = {
        "omega": {"m_percent": 100 * (om.m_mm / omt.m_mm - 1),
                  "q_prime_percent": [100 * (a / b - 1) for a, b in zip(om.q_prime_mm, omt.q_prime_mm, strict=True)]},
        "uv_minus_truth_per_offset_from_mic": float(np.dot(x, y) / np.dot(x, x)),
        "inverse_virtual_depth_ratio_median": float(np.median((1.0 / ups) / ((P[:, 2] * s - qpt + A2t) / A2t))),
        "cases": {},
    }
    for name, (b, m) in cases.items():
        r = calibrate(Observations(b, m), pre, board, options=CalibrationOptions(frame_resampling=False))
        out["cases"][name] = _errors(r.camera, truth)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--designs", default=",".join(DESIGNS))
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--run", type=Path, default=None)
    args = ap.parse_args(argv)
    truth, poses, board = _truth_setup()
    pitch = 0.5 * sum(truth.mla.pitch_mm)
    result: dict[str, Any] = {"camera": "tests/data/r12a (R12-A), f/4", "noise_sigma": noise_sigma(truth, poses, board), "designs": {}}
    names = ["thin"] + [n for n in args.designs.split(",") if n != "thin"]
    thin_ref = None
    for name in names:
        spec = DESIGNS[name]
        design = design_of(spec, pitch)
        t0 = time.perf_counter()
        law = chief_ray_law(truth, design)
        white = white_law(truth, design, thin_ref)
        if name == "thin":
            thin_ref = white
        entry: dict[str, Any] = {"what": spec["what"], "chief_ray": law, "white": white}
        dq = white["0mm"].get("q_prime_percent", [0.0, 0.0, 0.0])
        entry["calibration"] = {
            "chief_ray_map": calibrate_moved(truth, poses, board, law, [0.0, 0.0, 0.0]),
            "chief_ray_map_and_whites_q_prime_on_axis": calibrate_moved(truth, poses, board, law, dq),
        }
        if name == "caps":
            b0 = calibrate_moved(truth, poses, board, law, [0.0, 0.0, 0.0], parts="beta0")
            # If β0 were a parameter: the (u, v) residual it leaves once every other parameter has
            # absorbed what it can, per unit β0, sets its Gauss–Newton σ (β0 of the types ~equal).
            beta0 = float(np.mean([t["coefficients"]["t"][0] for t in law["types"]]))
            per_unit = b0["rmse_px"]["uv_px"] / abs(beta0)
            b0["beta0"] = beta0
            b0["sigma_beta0_if_estimated"] = NOISE.uv_px / (per_unit * np.sqrt(2.0 * b0["n_bap"]))
            entry["calibration"]["beta0_only"] = b0
            entry["calibration"]["all_but_beta0"] = calibrate_moved(truth, poses, board, law, [0.0, 0.0, 0.0], parts="rest")
            entry["calibration"]["whites_q_prime_8mm_only"] = calibrate_moved(truth, poses, board, None, white["8mm"]["q_prime_percent"])
        entry["seconds"] = time.perf_counter() - t0
        result["designs"][name] = entry
        print(f"{name}: done in {entry['seconds']:.0f} s", file=sys.stderr, flush=True)
    if args.run is not None:
        result["run_decomposition"] = run_decomposition(args.run)
    emit_json(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
