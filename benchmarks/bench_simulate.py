"""Benchmark of the ray-traced raw-image simulator (prints JSON).

Full-scale renders (noise-free radiance, the tracer alone) of one checkerboard frame and one white
image for r12-a (4080 × 3068) and upc-s (7728 × 5368) at 30 rays per pixel: warm-up (numba
compile or cache load), then the median of several runs. Also reports peak memory (ru_maxrss),
the machine, the load average (other processes share the CPUs), and the model-agreement figures
of the tests (white-MIC centroid RMS, point-light centroid RMS and radius error, radius-law error)
measured on the small presets.

With ``--lens DESIGN_OR_FILE`` it times the real-optics renderer (``plenocal.sim.optics``)
instead: one white and one checkerboard frame of ``--preset`` (default r12-b) at its checkerboard
f-number, full scale, ``--rays`` samples per pixel and lenslet (16 is the target's: ≤ 60 s a frame
on the 2-core machine), real or thin lenslets (``--lenslets``), plus the paraxial data.

Usage: ``python benchmarks/bench_simulate.py [--runs 3] [--rays 30] [--skip-upc] [--skip-agreement]``
       ``python benchmarks/bench_simulate.py --lens double-gauss [--preset r12-b] [--rays 16] [--lenslets real|thin]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

import numba
import numpy as np

from plenocal.model import micro_lens_centres, project_bap
from plenocal.model.geometry import Pose
from plenocal.model.projection import virtual_points
from plenocal.model.white import radius_law
from plenocal.sim.presets import preset
from plenocal.sim.scene import CheckerboardPlate, DiscLight, Scene, WhiteDiffuser
from plenocal.sim.tracer import build_optics, render

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "sim"))


def _time(fn, runs: int) -> dict:
    t0 = time.perf_counter()
    fn()
    warm = time.perf_counter() - t0
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return {"median_s": round(statistics.median(times), 3), "runs_s": [round(t, 3) for t in times],
            "first_call_s": round(warm, 3)}


def bench_full(name: str, rays: int, runs: int) -> dict:
    p = preset(name)
    cam, plan = p.camera, p.plan
    board = plan.board
    z = 0.5 * sum(plan.calibration_range_mm)
    centre = np.array([(board.columns - 1) / 2, (board.rows - 1) / 2, 0.0]) * board.square_mm
    R = Pose.from_rotvec([0.3, -0.2, 0.1], [0, 0, 0]).rotation
    pose = Pose(R, np.array([0.0, 0.0, z]) - R @ centre)
    scene = Scene((CheckerboardPlate(board, pose),), background=0.3)
    n = plan.checkerboard_f_number
    t0 = time.perf_counter()
    optics = build_optics(cam, n)
    optics_s = time.perf_counter() - t0
    out = {
        "preset": name, "size_px": [cam.sensor.width_px, cam.sensor.height_px],
        "micro_lenses": cam.mla.lattice.size, "f_number": n, "rays_per_pixel": rays,
        "build_optics_s": round(optics_s, 3),
        "checkerboard": _time(lambda: render(cam, scene, rays=rays, optics=optics, seed=1), runs),
        "white": _time(lambda: render(cam, WhiteDiffuser(), rays=rays, optics=optics, seed=1), runs),
    }
    return out


def bench_real(name: str, lens: str, lenslets: str, rays: int, runs: int, f_number: float | None = None) -> dict:
    """Full-scale real-optics renders: a white and a checkerboard frame at ``f_number`` (default:
    the preset's board f-number)."""
    from plenocal.sim.optics import load_lens
    from plenocal.sim.optics.camera import real_optics_camera
    from plenocal.sim.optics.lenslets import LensletDesign, LensletKind
    from plenocal.sim.optics.render import build_real_optics, render_real

    p = preset(name)
    plan = p.plan
    board = plan.board
    z = 0.5 * sum(plan.calibration_range_mm)
    centre = np.array([(board.columns - 1) / 2, (board.rows - 1) / 2, 0.0]) * board.square_mm
    R = Pose.from_rotvec([0.3, -0.2, 0.1], [0, 0, 0]).rotation
    pose = Pose(R, np.array([0.0, 0.0, z]) - R @ centre)
    scene = Scene((CheckerboardPlate(board, pose),), background=0.3)
    n = plan.checkerboard_f_number if f_number is None else f_number
    t0 = time.perf_counter()
    cam = real_optics_camera(p.camera, load_lens(lens), lenslets=LensletDesign(LensletKind(lenslets)))
    optics = build_real_optics(cam, n)
    build_s = time.perf_counter() - t0
    par = cam.paraxial(n)
    white = None

    def run_white() -> None:
        nonlocal white
        white = render_real(cam, WhiteDiffuser(), rays=rays, optics=optics, seed=1)

    out = {
        "preset": name, "lens": lens, "lenslets": lenslets, "size_px": [cam.thin.sensor.width_px, cam.thin.sensor.height_px],
        "micro_lenses": cam.thin.mla.lattice.size, "f_number": n, "rays_per_pixel_and_lenslet": rays,
        "build_optics_s": round(build_s, 3),
        "paraxial": {"efl_mm": par.efl_mm, "principal_separation_mm": par.principal_separation_mm,
                     "exit_pupil_from_h_prime_mm": par.exit_pupil_z - par.h_prime_z,
                     "pupil_magnification": par.pupil_magnification},
        "white": _time_cpu(run_white, runs),
        "checkerboard": _time_cpu(lambda: render_real(cam, scene, rays=rays, optics=optics, seed=1), runs),
    }
    assert white is not None
    out["white_mean"] = round(float(white.mean()), 4)
    return out


def _time_cpu(fn, runs: int) -> dict:
    """Wall times as :func:`_time`, plus the process CPU seconds of the median run (other
    engineers' jobs share the 2 cores: CPU seconds / 2 is the wall time on a free machine)."""
    t0 = time.perf_counter()
    fn()
    warm = time.perf_counter() - t0
    times, cpus = [], []
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return {"median_s": round(statistics.median(times), 3), "runs_s": [round(t, 3) for t in times],
            "median_cpu_s": round(statistics.median(cpus), 3), "first_call_s": round(warm, 3)}


def agreement() -> dict:
    """The tests' agreement figures, measured (small presets, noise-free)."""
    from test_tracer import _interior_lenses, _moments, _ortho_camera

    res: dict = {}
    r12 = preset("r12-a", small=True)
    cams = {"r12-a": (r12.camera, 8.0, (300, 250, 560, 480)),
            "kep-3": (preset("kep-3", small=True).camera, 16.0, (300, 250, 560, 480)),
            "upc-s": (preset("upc-s", small=True).camera, 5.6, (350, 250, 650, 550)),
            "orthogonal": (_ortho_camera(), 8.0, (60, 60, 360, 260))}
    for key, (cam, n, roi) in cams.items():
        img = render(cam, WhiteDiffuser(), f_number=n, rays=1024, roi=roi, seed=3)
        half = cam.grid.diameter_px / 2.0
        _, _, c = _interior_lenses(cam, roi, half + 1)
        err = np.array([_moments(img, ci, half)[1] - ci for ci in c])
        res[f"white_mic_centroid_rms_px[{key}]"] = float(np.sqrt(np.mean(np.sum(err**2, 1))))
    cam = r12.camera
    centre = np.array([1.5, -0.8, 300.0])
    scene = Scene((DiscLight(tuple(centre), 0.3, 1.0),), 0.0)
    pu = virtual_points(cam, centre[None])[0]
    k, l = cam.mla.lattice.all_indices()
    C = micro_lens_centres(cam, k, l)
    scale = (C[:, 2] - pu[2]) / (0.0 - pu[2])
    cone = cam.main_lens.aperture_mm / 2.0 * np.abs(scale)
    lit = np.hypot(*(C[:, :2] - pu[:2] * (1 - scale[:, None])).T) + 0.25 * sum(cam.mla.pitch_mm) <= 0.9 * cone
    feats = project_bap(cam, np.repeat(centre[None], lit.sum(), 0), k[lit], l[lit])
    F = cam.main_lens.focal_length_mm
    r_img = 0.3 * F / (centre[2] - F) * cam.d_mm / abs(pu[2] + cam.D_mm) / cam.sensor.pixel_size_mm
    errs, dr = [], []
    for u, v, rho in feats:
        w = abs(rho) + 2.5
        img = render(cam, scene, rays=4096, roi=(int(u - w), int(v - w), int(u + w) + 2, int(v + w) + 2), seed=7)
        _, cen, var = _moments(img, np.array([u, v]), w)
        errs.append(cen - (u, v))
        dr.append(float(np.sqrt(4 * (var - 1 / 12) - r_img**2) - abs(rho)))
    res["point_light_centroid_rms_px"] = float(np.sqrt(np.mean(np.sum(np.square(errs), 1))))
    res["point_light_radius_max_abs_error_px"] = float(np.max(np.abs(dr)))
    res["point_light_micro_lenses"] = len(feats)
    m, q = radius_law(cam)
    s = cam.sensor.pixel_size_mm
    roi = (330, 280, 530, 460)
    half = cam.grid.diameter_px / 2.0
    kk, ll, c = _interior_lenses(cam, roi, half + 1)
    types = cam.mla.types.type_of(kk, ll)
    worst = 0.0
    for n in r12.plan.white_f_numbers:
        img = render(cam, WhiteDiffuser(), f_number=n, rays=128, roi=roi, seed=1)
        mo = [_moments(img, ci, half) for ci in c]
        m0 = np.array([x[0] for x in mo])
        var = np.array([x[2] for x in mo])
        r2 = np.sqrt(m0 / np.pi)
        r1 = np.sqrt(np.clip(4 * (var - 1 / 12) - r2**2, 0, None))
        for t in range(cam.n_types):
            law = abs(m / n + q[t]) / s
            worst = max(worst, abs(np.median((r1 + r2)[types == t]) / law - 1))
    res["radius_law_max_rel_error"] = worst
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rays", type=int, default=30)
    ap.add_argument("--skip-upc", action="store_true")
    ap.add_argument("--skip-agreement", action="store_true")
    ap.add_argument("--lens", default=None, help="time the real-optics renderer with this design or file")
    ap.add_argument("--lenslets", choices=("real", "thin"), default="real")
    ap.add_argument("--preset", default="r12-b", help="preset of the real-optics benchmark (default r12-b)")
    ap.add_argument("--f-number", type=float, default=None, help="real-optics f-number (default: the board's)")
    args = ap.parse_args()
    result = {
        "benchmark": "plenocal.sim ray tracer",
        "machine": {
            "python": platform.python_version(), "numpy": np.__version__, "numba": numba.__version__,
            "cpu_count": os.cpu_count(), "numba_threads": numba.get_num_threads(),
            "processor": platform.processor() or platform.machine(),
            "load_average_before": list(os.getloadavg()),
        },
    }
    if args.lens is not None:
        result["benchmark"] = "plenocal.sim.optics real-optics renderer"
        result["full_scale"] = [bench_real(args.preset, args.lens, args.lenslets, args.rays, args.runs, args.f_number)]
        result["machine"]["load_average_after"] = list(os.getloadavg())
        result["peak_memory_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)
        print(json.dumps(result, indent=2))
        return
    result["full_scale"] = [bench_full("r12-a", args.rays, args.runs)]
    if not args.skip_upc:
        result["full_scale"].append(bench_full("upc-s", args.rays, max(1, args.runs - 1)))
    if not args.skip_agreement:
        result["agreement"] = agreement()
    result["machine"]["load_average_after"] = list(os.getloadavg())
    result["peak_memory_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
