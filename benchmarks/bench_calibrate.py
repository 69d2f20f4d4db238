"""Benchmark of the calibration core on R12-A-sized problems; prints JSON.

Usage::

    python benchmarks/bench_calibrate.py [--runs 3] [--data synthetic real] [--loss huber linear]
        [--model chief-ray pupil-vignetting] [--cli] [--no-reference] [--jackknife-check] [--seeds N]
        [--ablation] [--vignetting]

Problems (``--data``):

- ``synthetic``: the R12-A camera, poses and board of ``tests/data/r12a``, observations from
  :func:`plenocal.calib.synthetic.synthetic_observations` (seed 1; ~18 000 BAP features, 26 752
  micro-image centres, 16 frames), calibrated from the ±3 % / ±50 px perturbed camera;
- ``real``: libpleno's BAP features and centres detected in the real R12-A images
  (``../shared/fixtures/libpleno-r12a-observations``, 14 569 features, 26 676 centres, 16 frames)
  with the configuration files beside them (``../shared/fixtures/libpleno-r12a-configs``,
  ``images.js`` excluded), imported with ``plenocal import-libpleno`` into a temporary folder and
  calibrated as ``plenocal calibrate`` does (initial camera: the dataset's). Skipped when absent.

For each problem and loss (``--loss``): a warm-up calibration (numba's cached kernels load on
first use), then ``--runs`` calibrations with the default options; medians of the phases
(``CalibrationResult.timings_s``). ``solve_s`` is the optimisation (stages mla, poses, robust,
final), ``jackknife_s`` the leave-one-frame-out σ, ``per_iteration_ms`` the solve time over its
iterations (all stages). Then once each, for reference (``--no-reference`` skips them): the same
calibration with the finite-difference Jacobian and Gauss–Newton steps only (the solver before
the analytic Jacobian) and with the analytic Jacobian and Gauss–Newton only; their final costs
against the default's (relative difference) and their solve times.

``--model``: the (u, v) models to time (default ``chief-ray``); ``pupil-vignetting`` is timed on
the real observations only (the synthetic ones hold no shift), with the white images' radii
(Ω of the imported ``params.js``) as ``plenocal calibrate --pupil-vignetting`` has them.
``--cli``: ``plenocal calibrate`` on the imported real dataset as a user runs it (a new process:
reading, numba's cache, the jackknife, writing), wall time over ``--runs`` runs after a warm-up,
for each model of ``--model``.

``--jackknife-check``: per problem (default loss), the jackknife in 1 and in all available
worker processes (time, identical estimates), and the first-order jackknife — one Gauss–Newton
step from the full solution per left-out frame, the cheap alternative to re-solving — against
the full re-solves (ratio of σ per intrinsic, largest shift of one estimate in σ).

``--seeds N`` (σ honesty over N synthetic seeds), ``--ablation`` (paper Table ablation and NOUR)
and ``--vignetting`` (observations with the pupil-vignetting shift, fitted with and without it)
as before. The machine load average is recorded before, between and after the timed runs (the
machine is shared: figures are only comparable at similar load).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import machine  # noqa: E402

R12A = ROOT / "tests" / "data" / "r12a"
SHARED = ROOT / ".." / "shared" / "fixtures"
REAL_OBSERVATIONS = SHARED / "libpleno-r12a-observations"
REAL_CONFIGS = SHARED / "libpleno-r12a-configs"
KEY = ("F_mm", "D_mm", "d_mm", "f1_mm", "f2_mm", "f3_mm", "u0_px", "v0_px")
SOLVE_STAGES = ("mla", "poses", "robust", "final")


# --- problems ------------------------------------------------------------------------------------
def synthetic_problem() -> dict[str, Any]:
    from plenocal.calib.calibrate import DEFAULT_RHO_FORM
    from plenocal.calib.synthetic import perturbed_camera, synthetic_observations
    from plenocal.io import read_camera_file, read_manifest, read_poses
    from plenocal.model.camera import RhoForm

    camera = read_camera_file(R12A / "camera.json").camera.replace(rho_form=RhoForm(DEFAULT_RHO_FORM))
    poses = read_poses(R12A / "poses.json")
    board = read_manifest(R12A / "manifest.json").target
    obs, _ = synthetic_observations(camera, poses, board, seed=1)
    return {"observations": obs, "camera": perturbed_camera(camera, seed=1), "board": board, "frames": None,
            "truth": (camera, poses)}


def real_problem(workdir: Path) -> dict[str, Any] | None:
    """The real R12-A observations imported as ``plenocal import-libpleno`` does, read as
    ``plenocal calibrate`` does; None when the fixtures are absent."""
    if not (REAL_OBSERVATIONS.is_dir() and REAL_CONFIGS.is_dir()):
        return None
    from plenocal.cli.calibrate import read_inputs, register
    from plenocal.cli.main import main as cli

    src = workdir / "libpleno-r12a"
    src.mkdir()
    for folder in (REAL_CONFIGS, REAL_OBSERVATIONS):
        for p in folder.iterdir():
            if p.suffix in (".js", ".csv") and p.name != "images.js":
                shutil.copy(p, src / p.name)
    dataset = workdir / "dataset"
    with contextlib.redirect_stdout(sys.stderr):
        if cli(["import-libpleno", str(src), "-o", str(dataset)]) != 0:
            raise RuntimeError("plenocal import-libpleno failed")
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    inputs = read_inputs(parser.parse_args(["calibrate", str(dataset), "-o", str(workdir / "out")]))
    from plenocal.calib.residuals import MeasuredPupilRadii

    radii = None if inputs.omega is None else MeasuredPupilRadii(inputs.omega, inputs.camera.grid)
    return {"observations": inputs.observations, "camera": inputs.camera, "board": inputs.dataset.manifest.target,
            "frames": inputs.frames, "truth": None, "pupil_radii": radii, "dataset": dataset}


def _calibrate(problem: dict[str, Any], options: Any) -> Any:
    from plenocal.calib.calibrate import calibrate

    return calibrate(problem["observations"], problem["camera"], problem["board"], options=options,
                     frames=problem["frames"], pupil_radii=problem.get("pupil_radii") if options.pupil_vignetting else None)


@contextlib.contextmanager
def former_solver(*, jacobian: str) -> Iterator[None]:
    """Calibrate with Gauss–Newton steps only (no quasi-Newton step) and the given Jacobian."""
    import plenocal.calib.calibrate as cal
    import plenocal.calib.resampling as rs
    from plenocal.calib.residuals import Residuals
    from plenocal.calib.solver import levenberg_marquardt

    gn_only = functools.partial(levenberg_marquardt, quasi_newton=False)
    with mock.patch.object(Residuals, "default_jacobian_method", property(lambda self: jacobian)), \
            mock.patch.object(cal, "levenberg_marquardt", gn_only), mock.patch.object(rs, "levenberg_marquardt", gn_only):
        yield


# --- measurements --------------------------------------------------------------------------------
def _iterations(result: Any) -> dict[str, int]:
    return {k: int(v["iterations"]) for k, v in result.stages.items()}


def time_calibration(problem: dict[str, Any], options: Any, runs: int) -> dict[str, Any]:
    _calibrate(problem, options)  # warm-up: numba's cached kernels load on first use
    results, walls = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        results.append(_calibrate(problem, options))
        walls.append(time.perf_counter() - t0)
    last = results[-1]
    phases = {k: statistics.median(r.timings_s.get(k, 0.0) for r in results) for k in last.timings_s}
    solve = [sum(r.timings_s.get(k, 0.0) for k in SOLVE_STAGES) for r in results]
    its = sum(_iterations(last).values())
    fr = last.frame_resampling
    out = {
        "n_bap": int(last.n_bap), "n_mic": int(last.n_mic), "n_frames": len(last.poses), "runs": runs,
        "solve_s_median": statistics.median(solve), "solve_s_all": solve,
        "iterations_per_stage": _iterations(last), "iterations_total": its,
        "per_iteration_ms": 1e3 * statistics.median(solve) / max(its, 1),
        "final_stage": {"iterations": last.solver.iterations, "quasi_newton_steps": last.solver.quasi_newton_steps,
                        "s": phases.get("final"), "termination": last.solver.termination},
        "jackknife_s_median": phases.get("frame_resampling"),
        "jackknife": None if fr is None else {"workers": fr.workers, "iterations": fr.iterations.tolist(),
                                               "converged": bool(fr.converged.all())},
        "wall_s_median": statistics.median(walls), "wall_s_all": walls,
        "phases_s_median": phases,
        "final_cost": float(last.solver.cost_history[-1]),
        "converged": all(r.converged for r in results),
        "load_average_after": os.getloadavg(),
    }
    return out


def cli_wall(dataset: Path, workdir: Path, model: str, runs: int) -> dict[str, Any]:
    """``plenocal calibrate DATASET`` in a new process (``--pupil-vignetting`` for that model):
    wall times after one warm-up run, the calibration's own phases from report.json."""
    import subprocess

    argv = [sys.executable, "-m", "plenocal", "calibrate", str(dataset), "-o", str(workdir / f"cli-{model}")]
    argv += ["--pupil-vignetting"] if model == "pupil-vignetting" else ["--no-pupil-vignetting"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    walls = []
    for i in range(runs + 1):
        t0 = time.perf_counter()
        subprocess.run(argv, env=env, check=True, capture_output=True)
        if i:
            walls.append(time.perf_counter() - t0)
    rep = json.loads((workdir / f"cli-{model}" / "report.json").read_text())
    return {"wall_s_median": statistics.median(walls), "wall_s_all": walls, "pupil": rep.get("pupil"),
            "phases_s": rep.get("timings_s"), "load_average_after": os.getloadavg()}


def reference_costs(problem: dict[str, Any], options: Any, default_cost: float) -> dict[str, Any]:
    """The same calibration with the former solvers, once each (no jackknife)."""
    import dataclasses

    opt = dataclasses.replace(options, frame_resampling=False)
    out = {}
    for name, jac in (("finite_differences_gauss_newton", "fd"), ("analytic_gauss_newton", "analytic")):
        with former_solver(jacobian=jac):
            t0 = time.perf_counter()
            r = _calibrate(problem, opt)
            wall = time.perf_counter() - t0
        cost = float(r.solver.cost_history[-1])
        out[name] = {"solve_s": sum(r.timings_s.get(k, 0.0) for k in SOLVE_STAGES), "wall_s": wall,
                     "iterations_per_stage": _iterations(r), "final_cost": cost,
                     "cost_relative_to_default": (default_cost - cost) / cost, "converged": r.converged}
    return out


def first_order_jackknife(res: Any, x: np.ndarray, sigma: dict[str, float], active: np.ndarray) -> np.ndarray:
    """Intrinsics after one undamped Gauss–Newton step from the full solution without each frame,
    shape (n_frames, n_intrinsics)."""
    from plenocal.calib.resampling import without_frame
    from plenocal.calib.solver import Units, gauss_newton_system

    n_int = res.layout.n_intrinsics
    out = []
    for i in range(len(res.layout.frames)):
        res_i, x_i, act_i = without_frame(res, x, active, i)
        r = res_i.residuals(x_i)
        _, w, _ = Units(res_i, sigma).cost_and_weights(r, "linear", 2.0, act_i)
        H, g, pose_cols = gauss_newton_system(res_i, x_i, r, w)
        d = -np.linalg.solve(H, g)
        lay = res_i.layout
        free = lay.free_mask
        free_int = np.flatnonzero(free[:n_int])
        step = np.zeros(lay.size)
        step[free_int] = d[: free_int.size]
        step[n_int + pose_cols] = d[free_int.size :]
        xi = x_i.copy()
        xi[free] += (step * lay.scale)[free]
        out.append(xi[:n_int])
    return np.array(out)


def jackknife_check(problem: dict[str, Any], options: Any) -> dict[str, Any]:
    """Workers 1 vs all, and the first-order jackknife against the full re-solves."""
    import dataclasses

    from threadpoolctl import threadpool_limits

    from plenocal.calib.resampling import available_workers, frame_jackknife
    from plenocal.calib.residuals import Residuals

    result = _calibrate(problem, dataclasses.replace(options, frame_resampling=False))
    res = Residuals(result.layout, result.kept_bap, result.kept_mic, problem["board"],
                    pupil_vignetting=options.pupil_vignetting)
    x = result.x
    active = np.ones(res.n_rows)
    sigma = {k: 1.0 for k in result.sigma} if options.weighting == "none" else dict(result.sigma)
    out: dict[str, Any] = {"load_average_before": os.getloadavg()}
    runs = {}
    for workers in sorted({1, available_workers()}):
        t0 = time.perf_counter()
        runs[workers] = frame_jackknife(res, x, sigma=sigma, active=active, workers=workers)
        out[f"wall_s_workers_{workers}"] = time.perf_counter() - t0
    full = runs[1]
    assert full is not None
    out["identical_for_any_workers"] = all(np.array_equal(full.estimates, r.estimates) for r in runs.values())
    out["iterations"] = full.iterations.tolist()
    with threadpool_limits(limits=1, user_api="blas"):
        t0 = time.perf_counter()
        est1 = first_order_jackknife(res, x, sigma, active)
        out["first_order_s"] = time.perf_counter() - t0
    n = len(est1)
    std1 = np.sqrt((n - 1) / n * np.sum((est1 - est1.mean(axis=0)) ** 2, axis=0))
    names = res.layout.intrinsic_names
    free = res.layout.free_mask[: len(names)]
    out["first_order_vs_resolves"] = {
        name: {"std_resolves": float(full.std[k]), "std_first_order": float(std1[k]),
               "ratio": float(std1[k] / full.std[k]),
               "max_shift_in_std": float(np.max(np.abs(est1[:, k] - full.estimates[:, k])) / full.std[k])}
        for k, name in enumerate(names) if free[k] and full.std[k] > 0
    }
    ratios = [v["ratio"] for v in out["first_order_vs_resolves"].values()]
    out["first_order_std_ratio_range"] = [min(ratios), max(ratios)]
    out["load_average_after"] = os.getloadavg()
    return out


# --- the older studies, on the synthetic problem -------------------------------------------------
def sigma_honesty(seeds: int) -> dict[str, Any]:
    from plenocal.calib.calibrate import calibrate
    from plenocal.calib.synthetic import perturbed_camera, synthetic_observations

    base = synthetic_problem()
    cam, poses = base["truth"]
    board = base["board"]
    est, sds, zs, conv, times = [], [], [], [], []
    for seed in range(seeds):
        o, _ = synthetic_observations(cam, poses, board, seed=1000 + seed)
        t0 = time.perf_counter()
        r = calibrate(o, perturbed_camera(cam, seed=1000 + seed), board)
        times.append(time.perf_counter() - t0)
        conv.append(r.converged)
        idx = [r.layout.index[n] for n in KEY]
        xt = r.layout.pack(cam, poses)
        est.append(r.x[idx])
        sds.append(r.std[idx])
        n_int = r.layout.n_intrinsics
        free = r.layout.free_mask[:n_int]
        zs.append(((r.x[:n_int] - xt[:n_int]) / np.where(free, r.std[:n_int], 1.0))[free])
    e, s = np.array(est), np.array(sds)
    truth_key = np.array([r.layout.pack(cam, poses)[r.layout.index[n]] for n in KEY])
    ratio = e.std(axis=0, ddof=1) / s.mean(axis=0)
    z_all = np.array(zs)
    free_names = [n for n, f in zip(r.layout.intrinsic_names, r.layout.free_mask, strict=False) if f]
    return {
        "seeds": seeds,
        "all_converged": bool(all(conv)),
        "spread_over_mean_sigma": dict(zip(KEY, ratio.round(3).tolist(), strict=True)),
        "mean_bias_in_sigma": dict(zip(KEY, ((e.mean(axis=0) - truth_key) / s.mean(axis=0)).round(3).tolist(),
                                       strict=True)),
        "rms_z_all_free_intrinsics": dict(zip(free_names, np.sqrt(np.mean(z_all**2, axis=0)).round(3).tolist(),
                                              strict=True)),
        "max_abs_error_in_sigma_all_intrinsics": float(np.max(np.abs(z_all))),
        "wall_s_median": statistics.median(times),
    }


def ablation() -> dict[str, Any]:
    import dataclasses

    from plenocal.calib.calibrate import ABLATION_CONFIGURATIONS, CalibrationOptions, calibrate
    from plenocal.model.camera import Distortion

    base = synthetic_problem()
    start, obs, board = base["camera"], base["observations"], base["board"]
    # Start as from Ω (paper §3.3): no tilt, no distortion, pitch λ·Δc with the reference's
    # params.js dC (0.036 % above the truth) — freezing a group freezes it at these values.
    th = start.mla.rotation_xyz_rad
    start_abl = start.replace(
        mla=dataclasses.replace(start.mla, rotation_xyz_rad=(0.0, 0.0, th[2]),
                                pitch_mm=(0.12750456894191076, 0.12750456894191076)),
        distortion=Distortion(),
    )
    rows = {}
    for name, fr in [*((str(n), f) for n, f in ABLATION_CONFIGURATIONS.items()), ("NOUR", ())]:
        opt = CalibrationOptions(freeze=fr, pinhole_micro_lenses=name == "NOUR")
        t0 = time.perf_counter()
        r = calibrate(obs, start_abl, board, options=opt)
        p = {q.name: q for q in r.parameters()}
        rows[name] = {"frozen": list(fr), "converged": r.converged, "termination": r.solver.termination,
                      "iterations_final": r.solver.iterations, "wall_s": time.perf_counter() - t0,
                      "rmse": r.rmse, "rejected": r.rejected,
                      "F_mm": p["F_mm"].value, "D_mm": p["D_mm"].value, "d_mm": p["d_mm"].value,
                      "u0_px": p["u0_px"].value, "v0_px": p["v0_px"].value}
    return rows


def _uniform_radii(camera: Any) -> Any:
    """The shift's radii as white images of the synthetic camera measure them (its radius law,
    uniform like the synthetic shift's)."""
    from plenocal.calib.residuals import MeasuredPupilRadii
    from plenocal.model.white import InternalParameters, radius_law

    m, q = radius_law(camera)
    return MeasuredPupilRadii(InternalParameters(m, q, camera.micro_image_pitch_mm, lambda_=camera.lambda_,
                                                 f_number=camera.main_lens.f_number,
                                                 pixel_size_mm=camera.sensor.pixel_size_mm), camera.grid)


def vignetting() -> dict[str, Any]:
    from plenocal.calib.calibrate import CalibrationOptions, calibrate
    from plenocal.calib.synthetic import synthetic_observations

    base = synthetic_problem()
    cam, poses = base["truth"]
    ov, _ = synthetic_observations(cam, poses, base["board"], seed=1, pupil_vignetting=True)
    out: dict[str, Any] = {"n_bap": len(ov.bap)}
    for on in (True, False):
        t0 = time.perf_counter()
        r = calibrate(ov, base["camera"], base["board"], options=CalibrationOptions(pupil_vignetting=on),
                      pupil_radii=_uniform_radii(cam) if on else None)
        idx = [r.layout.index[n] for n in KEY]
        xt = r.layout.pack(cam, poses)
        out["on" if on else "off"] = {
            "wall_s": time.perf_counter() - t0, "converged": r.converged, "rmse": r.rmse, "rejected": r.rejected,
            "error_in_sigma": dict(zip(KEY, ((r.x[idx] - xt[idx]) / r.std[idx]).round(2).tolist(), strict=True)),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--data", nargs="+", choices=("synthetic", "real"), default=["synthetic", "real"])
    ap.add_argument("--loss", nargs="+", choices=("huber", "linear"), default=["huber", "linear"])
    ap.add_argument("--no-reference", action="store_true")
    ap.add_argument("--jackknife-check", action="store_true")
    ap.add_argument("--seeds", type=int, default=0)
    ap.add_argument("--ablation", action="store_true")
    ap.add_argument("--vignetting", action="store_true")
    ap.add_argument("--model", nargs="+", choices=("chief-ray", "pupil-vignetting"), default=["chief-ray"])
    ap.add_argument("--cli", action="store_true")
    args = ap.parse_args(argv)
    from plenocal.calib.calibrate import CalibrationOptions

    out: dict[str, Any] = {"benchmark": "calibrate-r12a", "machine": machine() | {"load_average_before": os.getloadavg()}}
    with tempfile.TemporaryDirectory(prefix="bench-calibrate-") as tmp:
        problems = {}
        if "synthetic" in args.data:
            problems["synthetic"] = synthetic_problem()
        if "real" in args.data:
            real = real_problem(Path(tmp))
            if real is None:
                out["real"] = "skipped: ../shared/fixtures not found"
            else:
                problems["real"] = real
        for name, problem in problems.items():
            out[name] = {}
            for loss in args.loss:
                for model in args.model:
                    if model == "pupil-vignetting" and name != "real":
                        continue
                    options = CalibrationOptions(loss=loss, pupil_vignetting=model == "pupil-vignetting")
                    timing = time_calibration(problem, options, args.runs)
                    if not args.no_reference:
                        timing["reference"] = reference_costs(problem, options, timing["final_cost"])
                    out[name][f"loss={loss}" + ("" if model == "chief-ray" else f", {model}")] = timing
            if args.cli and name == "real":
                out[name]["cli"] = {m: cli_wall(problem["dataset"], Path(tmp), m, args.runs) for m in args.model}
            if args.jackknife_check:
                out[name]["jackknife_check"] = jackknife_check(problem, CalibrationOptions())
    if args.seeds:
        out["sigma_honesty"] = sigma_honesty(args.seeds)
    if args.ablation:
        out["ablation"] = ablation()
    if args.vignetting:
        out["vignetting"] = vignetting()
    out["machine"]["load_average_end"] = os.getloadavg()
    print(json.dumps(out, indent=2, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
