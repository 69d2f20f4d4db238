"""BAP detection speed and accuracy on full-scale simulated frames (issue: ≤ 3 s per r12 image).

Usage: python benchmarks/bench_detect.py DATASET [--frames N]
DATASET is a simulated dataset folder (``plenocal simulate r12-a -o DATASET``) whose pre-calibration
is in DATASET/precalibration or OUT of ``plenocal run`` (``--precalibration DIR``). Prints JSON:
median time per frame, and against the ground truth (matched by frame and micro-image): position
RMS versus the model with pupil vignetting and versus the chief ray, ρ RMS, recall of micro-images
whose true corner lies ≥ 3 px inside the micro-image, false detections (> 1 px off).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, peak_memory_mb

from plenocal.detect.pipeline import detect_frame
from plenocal.io import read_camera, read_camera_file, read_dataset, read_observations
from plenocal.io.dataset import ImageRole
from plenocal.model.projection import pupil_shift
from plenocal.sim.groundtruth import micro_image_radii_px


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--precalibration", type=Path, default=None)
    ap.add_argument("--frames", type=int, default=4)
    args = ap.parse_args()
    ds = read_dataset(args.dataset)
    pre = args.precalibration or (args.dataset / "precalibration")
    cf = read_camera_file(pre / "camera.json")
    truth_cam = read_camera(ds.path(ds.manifest.ground_truth.camera))
    gt = read_observations(ds.path(ds.manifest.ground_truth.observations)).bap
    white = ds.read_image(ds.manifest.with_role(ImageRole.DEVIGNETTING)[0])
    entries = ds.manifest.with_role(ImageRole.CALIBRATION)[: args.frames]
    times, e_vig, e_chief, e_rho, inner_hit, inner_n, false = [], [], [], [], 0, 0, 0
    for e in entries:
        img = ds.read_image(e)
        t0 = time.perf_counter()
        det = detect_frame(img, white, grid=cf.camera.grid, omega=cf.internal_parameters, layout=cf.camera.mla.types, frame=e.frame).features
        times.append(time.perf_counter() - t0)
        g = gt.select(gt.frame == e.frame)
        key = {(a, b): i for i, (a, b) in enumerate(zip(g.k, g.l, strict=True))}
        j = np.array([key.get((a, b), -1) for a, b in zip(det.k, det.l, strict=True)], dtype=int)
        m = j >= 0
        sh = pupil_shift(truth_cam, np.c_[g.u, g.v], g.rho, g.k, g.l)
        ev = np.hypot(det.u[m] - sh[j[m], 0], det.v[m] - sh[j[m], 1])
        e_vig.append(ev)
        e_chief.append(np.hypot(det.u[m] - g.u[j[m]], det.v[m] - g.v[j[m]]))
        e_rho.append(det.rho[m] - g.rho[j[m]])
        false += int((~m).sum() + (ev > 1.0).sum())
        mic = truth_cam.grid.centres(g.k, g.l)
        R = micro_image_radii_px(truth_cam, truth_cam.main_lens.f_number)[truth_cam.mla.types.type_of(g.k, g.l)]
        inner = np.hypot(g.u - mic[:, 0], g.v - mic[:, 1]) <= R - 3.0
        found = set(zip(det.k.tolist(), det.l.tolist(), strict=True))
        inner_hit += sum((a, b) in found for a, b in zip(g.k[inner], g.l[inner], strict=True))
        inner_n += int(inner.sum())
    ev, ec, er = np.concatenate(e_vig), np.concatenate(e_chief), np.concatenate(e_rho)
    n_det = len(ev) + false
    print(json.dumps({
        "benchmark": "detect",
        "dataset": str(args.dataset),
        "image_size": [truth_cam.sensor.width_px, truth_cam.sensor.height_px],
        "frames": len(times),
        "seconds_per_frame_median": statistics.median(times),
        "seconds_per_frame": times,
        "target_s": 3.0,
        "features_matched": len(ev),
        "uv_rms_vs_vignetting_model_px": float(np.sqrt(np.mean(ev**2))),
        "uv_rms_vs_chief_ray_px": float(np.sqrt(np.mean(ec**2))),
        "rho_rms_px": float(np.sqrt(np.mean(er**2))),
        "recall_3px_inside": inner_hit / max(inner_n, 1),
        "false_detection_fraction": false / max(n_det, 1),
        "peak_memory_mb": peak_memory_mb(),
        "machine": machine(),
    }, indent=2))


if __name__ == "__main__":
    main()
