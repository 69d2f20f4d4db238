"""plenocal on real optics: each real effect rendered alone and all together, calibrated from raw
images as a user would, against the thin-lens-equivalent truth. Prints JSON (and writes it to
WORK/real_optics.json).

Usage::

    python benchmarks/real_optics.py [--work DIR] [--cases A,B,...] [--preset r12-a] [--rays 16]
                                     [--tilt-scale 1] [--reuse] [--models default,no-exit-pupil,...]

Every case is a dataset rendered by ``plenocal simulate PRESET --lens ...`` (whites at the preset's
f-numbers, the devignetting white, calibration, held-out and translation frames, and held-out
frames beyond the calibrated depths: 30 % nearer than the nearest and 50 % farther than the
farthest calibration frame, :data:`EXTRAPOLATION`), then ``plenocal run`` with default settings,
then ``plenocal calibrate`` + ``plenocal evaluate`` again for each other model option. For each
case and model:

- every intrinsic's error against the thin-lens equivalent (``ground_truth/camera.json``; its exit
  pupil e from ``ground_truth/optics.json``), in % (principal point and e in px / mm) and in units
  of the larger of the Jacobian and frame-resampling σ;
- ε_z over the translation frames, the held-out (u, v) RMSE and its ratio to calibration's, for the
  frames inside the calibrated depths and for the extrapolation frames; for the latter also their
  RMSE with a camera calibrated with them (their own floor, :func:`extrapolation_floor`) and the
  held-out RMSE over it, what extrapolating costs;
- the stages' wall times.

Cases (:data:`CASES`): the thin lens (the paper's camera, with the renderer's natural vignetting:
each sample weighs cos θ_X·cos θ_P/r²), the same weighed by ray fractions as plenocal's thin tracer
draws it (``thin-ray-fractions``: natural vignetting alone is the difference), each real effect
alone — the stop behind / in front of an aberration-free lens (exit pupil off H′), an
aberration-free thick lens, lenslets whose clear aperture is smaller than the pitch, refractive
caps on their substrate, caps without substrate, the double-Gauss with thin lenslets (its
aberrations and pupil without the lenslets') — and every bundled design with real lenslets.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from independent import load, pct, sh  # noqa: E402

CASES: dict[str, dict[str, Any]] = {
    "thin": {"lens": "thin", "lenslets": "thin", "what": "the paper's idealisation (thin lens, stop in its plane, thin lenslets)"},
    "thin-ray-fractions": {"lens": "thin", "lenslets": "thin", "natural_vignetting": False,
                           "what": "the paper's idealisation weighed by ray fractions (the thin tracer's bytes): 'thin' less natural vignetting"},
    "pupil-behind": {"lens": "ideal-stop-behind", "lenslets": "thin", "what": "exit pupil behind H′, no aberration"},
    "pupil-front": {"lens": "ideal-stop-front", "lenslets": "thin", "what": "exit pupil in front of H′, no aberration"},
    "thick-lens": {"lens": "thick-ideal", "lenslets": "thin", "what": "H and H′ apart, no aberration"},
    "clear-aperture": {"lens": "thin", "lenslets": "thin", "clear_fraction": 0.982,
                       "what": "thin lenslets whose clear aperture is 98.2 % of the pitch"},
    "lenslet-caps": {"lens": "thin", "lenslets": "real", "substrate_mm": 0.0,
                     "what": "refractive plano-convex caps, no substrate"},
    "lenslets": {"lens": "thin", "lenslets": "real", "what": "refractive caps on a 0.1 mm substrate"},
    "field-curvature": {"lens": str(ROOT / "benchmarks" / "lenses" / "field-curvature.json"), "lenslets": "thin",
                        "what": "the thin lens with the double-Gauss's field curvature alone"},
    "spherical": {"lens": str(ROOT / "benchmarks" / "lenses" / "spherical.json"), "lenslets": "thin",
                  "what": "the thin lens with the double-Gauss's spherical aberration (best-focus shift) alone"},
    "double-gauss-lens": {"lens": "double-gauss", "lenslets": "thin", "what": "the double-Gauss with thin lenslets"},
    "double-gauss": {"lens": "double-gauss", "lenslets": "real", "what": "double-Gauss, real lenslets: everything"},
    "tessar": {"lens": "tessar", "lenslets": "real", "what": "Tessar, real lenslets"},
    "telephoto": {"lens": "telephoto", "lenslets": "real", "f_number": 5.66,
                  "what": "telephoto, real lenslets, at f/5.66 (an f/5.6 design: `simulate` refuses it at the R12 presets' f/4)"},
    "field-corrector": {"lens": "field-corrector", "lenslets": "real", "what": "Cooke triplet + field corrector, real lenslets"},
}
MODELS = {
    "default": [],
    "chosen": [],  # the defaults again, by calibrate on the run's detections (what --reuse can redo)
    "thin-lens": ["--no-exit-pupil", "--no-depth-distortion"],
    "exit-pupil": ["--exit-pupil", "--no-depth-distortion"],
    "depth-distortion": ["--no-exit-pupil", "--depth-distortion"],
    "real-lens": ["--exit-pupil", "--depth-distortion"],
    "legacy": ["--legacy-model"],
    "lens": [],  # --lens with the case's own prescription: the exit pupil's prior from it (cli/lens.py)
}
FRAMES = "white,devignetting,calibration=10,evaluation=4,translation"
EXTRAPOLATION = (0.7, 1.5)
"""Held-out frames at 0.7× the nearest and 1.5× the farthest calibration depth."""
KEYS = ("F_mm", "D_mm", "d_mm")


def simulate(case: dict[str, Any], ds: Path, *, preset: str, rays: int, tilt_scale: float, seed: int) -> tuple[int, str, float]:
    args = ["simulate", preset, "--lens", case["lens"], "--lenslets", case["lenslets"], "--rays", str(rays),
            "--tilt-scale", str(tilt_scale), "--seed", str(seed), "--quiet", "--frames", FRAMES,
            "--extrapolation", f"{EXTRAPOLATION[0]},{EXTRAPOLATION[1]}", "-o", str(ds)]
    if "substrate_mm" in case:
        args += ["--substrate-mm", str(case["substrate_mm"])]
    if "f_number" in case:
        args += ["--f-number", str(case["f_number"])]
    if not case.get("natural_vignetting", True):
        args += ["--no-natural-vignetting"]
    if "clear_fraction" in case:
        from plenocal.sim.presets import preset as get_preset

        pitch = float(np.mean(get_preset(preset).camera.mla.pitch_mm))
        args += ["--clear-radius-mm", repr(case["clear_fraction"] * pitch / 2.0)]
    return sh(args)


def camera_at_lattice_centre(path: Path) -> dict[str, float]:
    """D and d of a camera at its lattice's centre (the mean of every micro-lens centre; the MLA
    plane is flat, so that is the plane at the centre), where a real-optics truth gives them."""
    from plenocal.io.camera import read_camera
    from plenocal.model.projection import micro_lens_centres

    if not path.is_file():
        return {}
    cam = read_camera(path)
    k, l = cam.mla.lattice.all_indices()
    z = float(micro_lens_centres(cam, k, l)[:, 2].mean())
    return {"D_mm": -z, "d_mm": cam.sensor.distance_mm + z}


def parameters(cal: Path) -> dict[str, dict[str, float]]:
    """name → value, Jacobian σ, frame-resampling σ (and the report's systematic σ: the paraxial
    value's with refractive micro-lenses, F's and D's through the exit pupil) of a calibration
    folder's camera."""
    rep = load(cal / "report.json") or {}
    return {name: {"value": p["value"], "std": p.get("std"), "std_frames": p.get("std_frames"), "std_lenslets": p.get("std_lenslets"),
                   "std_exit_pupil": p.get("std_exit_pupil")}
            for name, p in (rep.get("parameters") or {}).items()}


def errors(params: dict[str, dict[str, float]], truth: dict[str, Any]) -> dict[str, Any]:
    """Every intrinsic against the thin-lens-equivalent truth: % (or px, mm) and z of the larger σ."""
    t = truth["thin"]
    ref = {"F_mm": t["main_lens"]["focal_length_mm"], "D_mm": -t["mla"]["translation_mm"][2],
           "u0_px": t["sensor"]["principal_point_px"][0], "v0_px": t["sensor"]["principal_point_px"][1]}
    ref["d_mm"] = t["sensor"]["distance_mm"] - ref["D_mm"]
    # Types in plenocal's order may differ from the truth's (the R12-B preset's do): matched by rank,
    # shortest with shortest, as benchmarks/independent.py does.
    names = sorted((k for k in params if k[0] == "f" and k.endswith("_mm") and k[1:-3].isdigit()), key=lambda k: params[k]["value"])
    for name, f in zip(names, sorted(t["mla"]["focal_lengths_mm"]), strict=False):
        ref[name] = f
    if truth.get("exit_pupil_mm") is not None:
        ref["exit_pupil_mm"] = truth["exit_pupil_mm"]
    out: dict[str, Any] = {}
    for name, r in ref.items():
        p = params.get(name)
        if p is None:
            continue
        sig = max(s for s in (p["std"], p["std_frames"]) if s is not None and np.isfinite(s))
        err = p["value"] - r
        absolute = name.endswith("_px") or name == "exit_pupil_mm"
        out[name] = {"value": p["value"], "truth": r, ("error" if absolute else "error_percent"): err if absolute else pct(p["value"], r),
                     "z": err / sig if sig > 0 else None, "std": p["std"], "std_frames": p["std_frames"]}
        sys_sd = {k: float(p[k]) for k in ("std_lenslets", "std_exit_pupil") if p.get(k)}
        if sys_sd:  # the report's systematic σ: paraxial d, f_i (refractive lenslets); F, D through e
            out[name] |= sys_sd | {"z_with_systematic_sigma": err / max(sig, *sys_sd.values())}
    return out


def evaluation(ev: Path, cal: Path) -> dict[str, Any]:
    e = load(ev / "report.json") or {}
    c = load(cal / "report.json") or {}
    cal_uv = (c.get("rmse") or {}).get("uv_px")
    out: dict[str, Any] = {"calibration_uv_px": cal_uv}
    tr = e.get("translation") or {}
    if tr.get("epsilon_z_percent"):
        out["epsilon_z_percent"] = tr["epsilon_z_percent"]
    held = e.get("holdout") or {}
    if held.get("rmse"):
        out["held_out_uv_px"] = held["rmse"].get("uv_px")
        out["held_out_ratio"] = held["rmse"]["uv_px"] / cal_uv if cal_uv else None
        per = held.get("per_frame") or {}
        out["held_out_per_frame_uv_px"] = {f: (v.get("rmse") or {}).get("uv_px") for f, v in per.items()}
        out["held_out_per_frame_ratio"] = {f: u / cal_uv if cal_uv and u is not None else None
                                           for f, u in out["held_out_per_frame_uv_px"].items()}
    return out


def extrapolation_frames(ds: Path) -> list[int]:
    """The held-out frames beyond the calibrated depths (``--extrapolation``'s ``eval-near-*`` and
    ``eval-far-*`` images)."""
    manifest = load(ds / "manifest.json") or {}
    return sorted(int(e["frame"]) for e in manifest.get("images", [])
                  if e.get("frame") is not None and ("eval-near" in e.get("path", "") or "eval-far" in e.get("path", "")))


def extrapolation_floor(ds: Path, run: Path, out: Path, *, reuse: bool) -> dict[str, Any]:
    """What the extrapolation frames' held-out RMSE is made of: the same frames evaluated (pose
    refitted, intrinsics fixed, the held-out rule) with a camera calibrated *with* them among its
    frames. Their RMSE then is the frame's own floor — its blur and how far its features reach into
    the lens's field set it, not extrapolation — and held-out / floor is what extrapolating costs.
    The issue's figure, held-out over the calibration's pooled RMSE, is the product of the two."""
    frames = extrapolation_frames(ds)
    obs = run / "detection-pass2" / "observations.npz"
    obs = obs if obs.is_file() else run / "detection" / "observations.npz"
    held = ((load(run / "evaluation" / "report.json") or {}).get("holdout") or {}).get("per_frame") or {}
    frames = [f for f in frames if (held.get(str(f)) or {}).get("rmse")]
    if not frames:
        return {"frames": {}, "note": "no extrapolation frame was evaluated"}
    fds, cal, ev = out / "dataset", out / "calibration", out / "evaluation"
    if not (reuse and (ev / "report.json").is_file()):
        shutil.rmtree(out, ignore_errors=True)
        fds.mkdir(parents=True)
        manifest = load(ds / "manifest.json")
        for e in manifest["images"]:
            if e.get("frame") in frames:
                e["role"] = "calibration"
        (fds / "manifest.json").write_text(json.dumps(manifest, indent=1))
        for sub in ("images", "ground_truth"):
            (fds / sub).symlink_to((ds / sub).resolve())
        code, text, _ = sh(["calibrate", str(fds), "-o", str(cal), "--observations", str(obs), "--initial", str(run / "precalibration")])
        if code not in (0, 3):
            return {"error": f"calibrate: {text.splitlines()[-1] if text else code}"}
        code, text, _ = sh(["evaluate", str(ds), "--camera", str(cal / "camera.json"), "--poses", str(cal / "poses.json"),
                            "--observations", str(obs), "-o", str(ev)])
        if code:
            return {"error": f"evaluate: {text.splitlines()[-1] if text else code}"}
    floor = ((load(ev / "report.json") or {}).get("holdout") or {}).get("per_frame") or {}
    res: dict[str, Any] = {"calibration_uv_px": ((load(cal / "report.json") or {}).get("rmse") or {}).get("uv_px"), "frames": {}}
    for f in frames:
        h, fl = held[str(f)]["rmse"].get("uv_px"), ((floor.get(str(f)) or {}).get("rmse") or {}).get("uv_px")
        res["frames"][str(f)] = {"held_out_uv_px": h, "in_calibration_uv_px": fl,
                                 "held_out_over_floor": h / fl if h and fl else None}
    return res


def run_case(name: str, case: dict[str, Any], work: Path, args: argparse.Namespace) -> dict[str, Any]:
    ds, run = work / name / "dataset", work / name / "run"
    res: dict[str, Any] = {"case": name, "what": case["what"], "lens": case["lens"], "lenslets": case["lenslets"]}
    if not (args.reuse and (ds / "manifest.json").is_file()):
        shutil.rmtree(work / name, ignore_errors=True)
        (work / name).mkdir(parents=True)
        code, text, wall = simulate(case, ds, preset=args.preset, rays=args.rays, tilt_scale=args.tilt_scale, seed=args.seed)
        res["simulate_wall_s"] = wall
        if code:
            return res | {"error": f"simulate: {text.splitlines()[-1] if text else code}"}
    truth = {"thin": load(ds / "ground_truth" / "camera.json"), "optics": load(ds / "ground_truth" / "optics.json")}
    truth["exit_pupil_mm"] = (truth["optics"] or {}).get("exit_pupil_from_h_prime_mm")
    res["truth_exit_pupil_mm"] = truth["exit_pupil_mm"]
    if not (args.reuse and (run / "report.html").is_file()):
        code, text, wall = sh(["run", str(ds), "-o", str(run)])
        res["run_wall_s"] = wall
        if code:
            res["run_error"] = text.splitlines()[-1] if text else str(code)
    pre = load(run / "precalibration" / "precalibration.json") or {}
    det = load(run / "detection" / "detection.json") or {}
    res["precalibration"] = {"grid_rms_px": (pre.get("grid") or {}).get("rms_px"),
                             "type_confidence": (pre.get("types") or {}).get("confidence")}
    res["detection"] = {"n_bap": det.get("n_bap"), "frames_linked": det.get("n_frames_linked"), "frames": det.get("n_frames")}
    res["models"] = {}
    for model in args.models:
        if model == "default":
            cal, ev = run / "calibration", run / "evaluation"
        else:
            cal, ev = work / name / f"calibration-{model}", work / name / f"evaluation-{model}"
            if not (args.reuse and (ev / "report.json").is_file()):
                shutil.rmtree(cal, ignore_errors=True)
                shutil.rmtree(ev, ignore_errors=True)
                code, text, _ = sh(["calibrate", str(ds), "-o", str(cal), "--observations", str(run / "detection" / "observations.npz"),
                                    "--initial", str(run / "precalibration"),
                                    *(["--lens", case["lens"]] if model == "lens" else MODELS[model])])
                if code not in (0, 3):  # 3: written, the verdict says not trustworthy (its figures are read)
                    res["models"][model] = {"error": text.splitlines()[-1] if text else str(code)}
                    continue
                code, text, _ = sh(["evaluate", str(ds), "--camera", str(cal / "camera.json"), "--poses", str(cal / "poses.json"),
                                    "--observations", str(run / "detection" / "observations.npz"), "-o", str(ev)])
                if code:
                    res["models"][model] = {"error": f"evaluate: {text.splitlines()[-1] if text else code}"}
                    continue
        params = parameters(cal)
        rep = load(cal / "report.json") or {}
        errs = errors(params, truth)
        mine, true = params.get("d_centre_mm"), camera_at_lattice_centre(ds / "ground_truth" / "camera.json")
        if mine and true:  # d where most features are: a tilt off by a little moves the origin's
            errs["d_at_lattice_centre"] = {"value": mine["value"], "truth": true["d_mm"], "error_percent": pct(mine["value"], true["d_mm"])}
        res["models"][model] = {"converged": rep.get("converged"), "errors": errs,
                                "model_selection": {k: {"kept": v.get("kept"), "wald": v.get("wald")}
                                                    for k, v in (rep.get("model_selection") or {}).items()},
                                "evaluation": evaluation(ev, cal), "rmse": rep.get("rmse"),
                                "warnings": rep.get("uncertainty_warnings")}
    if "default" in args.models:
        res["models"]["default"]["extrapolation_floor"] = extrapolation_floor(ds, run, work / name / "extrapolation-floor", reuse=args.reuse)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/plenocal-real-optics"))
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--preset", default="r12-a")
    ap.add_argument("--rays", type=int, default=16)
    ap.add_argument("--tilt-scale", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--models", default="default,thin-lens,exit-pupil,depth-distortion,real-lens")
    ap.add_argument("--reuse", action="store_true")
    args = ap.parse_args()
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    args.work.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"preset": args.preset, "rays": args.rays, "tilt_scale": args.tilt_scale, "cases": {}}
    t0 = time.perf_counter()
    for name in (c.strip() for c in args.cases.split(",") if c.strip()):
        out["cases"][name] = run_case(name, CASES[name], args.work, args)
        (args.work / "real_optics.json").write_text(json.dumps(out, indent=1, default=float))
    out["wall_s"] = time.perf_counter() - t0
    text = json.dumps(out, indent=1, default=float)
    (args.work / "real_optics.json").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
