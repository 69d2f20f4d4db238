"""Full-scale pre-calibration from 5 simulated white images (issue: ≤ 10 s wall) and its accuracy.

Renders the preset's whites once with the simulator (cached under $PLENOCAL_BENCH_CACHE, default
/tmp/plenocal-bench), adds photon and read noise, then times :func:`precalibrate` (median of
runs) and compares with the truth: MIC RMS (matched by position), pitch error, Ω and the initial
camera. Prints JSON.

Usage: python benchmarks/bench_precalibrate.py [PRESET] [--rays N] [--runs R]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, peak_memory_mb, time_runs

from plenocal.model import micro_image_centres
from plenocal.model.spec import CameraSpec
from plenocal.model.white import internal_parameters
from plenocal.precalib.pipeline import WhiteImage, precalibrate
from plenocal.sim.presets import preset
from plenocal.sim.scene import WhiteDiffuser
from plenocal.sim.tracer import render


def whites_for(name: str, rays: int, cache: Path) -> tuple[object, list[WhiteImage]]:
    p = preset(name)
    cam = p.camera
    out = []
    rng = np.random.default_rng(0)
    for i, N in enumerate(p.plan.white_f_numbers):
        f = cache / f"{name}-white-{N:g}-r{rays}.npy"
        if f.is_file():
            img = np.load(f)
        else:
            img = render(cam, WhiteDiffuser(), f_number=N, rays=rays, seed=1, image_id=i)
            cache.mkdir(parents=True, exist_ok=True)
            np.save(f, img)
        # Photon noise (gain: 200 e- at white level 1, exposure so that whites do not clip) + read noise.
        scale = 0.8 / max(float(img.max()), 1e-6)
        electrons = rng.poisson(img * scale * 4000.0).astype(np.float32)
        dn = np.clip(np.rint(electrons / 4000.0 * 255.0 + rng.normal(0, 1.0, img.shape)), 0, 255).astype(np.uint8)
        out.append(WhiteImage(float(N), dn, f"white-{N:g}"))
    return p, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("preset", nargs="?", default="r12-a")
    ap.add_argument("--rays", type=int, default=30)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--infer-configuration", action="store_true", help="leave the configuration out of the spec (to be inferred)")
    args = ap.parse_args()
    cache = Path(os.environ.get("PLENOCAL_BENCH_CACHE", "/tmp/plenocal-bench"))
    p, whites = whites_for(args.preset, args.rays, cache)
    cam = p.camera
    spec = CameraSpec(
        cam.sensor.pixel_size_mm, cam.sensor.width_px, cam.sensor.height_px, cam.mla.lattice, cam.n_types,
        None, float(np.round(cam.main_lens.focal_length_mm)), cam.focus_distance_mm,
        None if args.infer_configuration else cam.configuration,
    )
    result = {}

    def run() -> None:
        result["pc"] = precalibrate(whites, spec, checkerboard_f_number=p.plan.checkerboard_f_number)

    timing = time_runs(run, runs=args.runs, warmup=1)
    pc = result["pc"]
    from scipy.spatial import cKDTree

    k, l = cam.mla.lattice.all_indices()
    c = micro_image_centres(cam, k, l)
    d, i = cKDTree(c).query(pc.mic.uv)
    truth = internal_parameters(cam)
    index_shift = sorted({(int(a), int(b)) for a, b in zip(k[i] - pc.mic.k, l[i] - pc.mic.l, strict=True)})
    true_types = cam.mla.types.type_of(k[i], l[i]) if cam.n_types else np.zeros(len(i), dtype=int)
    got_types = pc.types.layout.type_of(pc.mic.k, pc.mic.l) if cam.n_types else np.zeros(len(i), dtype=int)
    print(json.dumps({
        "benchmark": "precalibrate",
        "preset": p.name,
        "image_size": [cam.sensor.width_px, cam.sensor.height_px],
        "n_whites": len(whites),
        "rays": args.rays,
        "precalibrate": timing,
        "target_s": 10.0,
        "peak_memory_mb": peak_memory_mb(),
        "mic_rms_px": float(np.sqrt(np.mean(d**2))),
        "mic_max_px": float(d.max()),
        "n_mic": len(pc.mic),
        "index_shift_vs_truth": index_shift,
        "types_agree_fraction": float(np.mean(got_types == true_types)),
        "pitch_error_px": (np.array(pc.grid_fit.grid.pitch_px) - np.array(cam.grid.pitch_px)).tolist(),
        "apertures": [{"N": a.f_number, "used": a.used, "reason": a.reason} for a in pc.internals.apertures],
        "m_rel_error": pc.omega.m_mm / truth.m_mm - 1,
        "q_prime_rel_error": (np.array(pc.omega.q_prime_mm) / np.array(truth.q_prime_mm) - 1).tolist() if cam.n_types else None,
        "configuration": pc.configuration.value,
        "configuration_inferred": pc.configuration_inferred,
        "initial_rel_error": {
            "d": pc.camera.d_mm / cam.d_mm - 1,
            "D": pc.camera.D_mm / cam.D_mm - 1,
            "f": (np.array(pc.camera.mla.focal_lengths_mm) / np.array(cam.mla.focal_lengths_mm) - 1).tolist(),
        },
        "machine": machine(),
    }, indent=2))


if __name__ == "__main__":
    main()
