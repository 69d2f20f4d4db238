"""BAP detection speed and accuracy on full-scale simulated frames (issue: ≤ 3 s per r12 image,
≤ 10 s per upc-s image).

Usage: python benchmarks/bench_detect.py DATASET [--precalibration DIR] [--frames N]
       python benchmarks/bench_detect.py --prism ../shared/validation/prism-r12b [--precalibration DIR] [--repeats 3]

``--prism SET`` times detection on every checkerboard frame of a PRISM-rendered validation set
(imported with ``plenocal import-libpleno``, pre-calibrated with ``plenocal precalibrate`` unless
``--precalibration`` names a pre-calibration of it), each frame ``--repeats`` times (the median
per frame is reported), in this process after one warm-up frame (numba compiled). Accuracy there
is against the set's exact truth: each detected feature against the nearest truth projection of
any board node through the same micro-lens (``camera-true-image-index.json``, PRISM's pixel
convention), within 1 px.

The tracer's sampling noise is not physical, and at the default ray counts it is a large part of
the position error (12 r12-b frames: uv RMS 0.074 px at 96 rays, 0.042 px at 384, same poses
and sensor noise). To measure the detector rather than the tracer, render the frames at 384
rays and use the pre-calibration of a full run of the same preset and seed (the camera does
not depend on the ray count)::

    plenocal simulate r12-b -o r12-b-384 --seed 3 --rays 384 --frames 'devignetting,calibration=12'
    python benchmarks/bench_detect.py r12-b-384 --precalibration r12-b-run/precalibration --frames 12

DATASET is a simulated dataset folder (``plenocal simulate r12-a -o DATASET``); its
pre-calibration is DATASET/precalibration or ``--precalibration`` (OUT/precalibration of
``plenocal run``). Detection runs with the pre-calibrated grid and Ω, as in ``plenocal detect``.
Prints JSON, against the ground truth (matched by frame and micro-image):

- (u, v) RMS vs the chief-ray projection of the same corner through the same micro-lens (what
  the paper's model predicts, and what detection reports), over micro-images whose true corner
  lies ≥ 2 px inside the micro-image (radius |R_i(N)|);
- ρ RMS; virtual depth of every cluster vs the truth (max and RMS relative error);
- recall of micro-images whose corner lies ≥ 3 px inside the micro-image, with the corner taken
  (a) at its chief-ray projection and (b) where it appears: pupil vignetting displaces blurred
  corners by up to ~2 px towards the border (model.projection.pupil_shift), and corners seen
  within ~3 px of the border are too dark after devignetting to be measured;
- false detections (no true corner within 1 px), clusters holding more than one target corner,
  target corners split over several clusters.
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

from plenocal.detect.clusters import blur_radii_px
from plenocal.detect.pipeline import detect_frame
from plenocal.io import read_camera, read_camera_file, read_dataset, read_observations
from plenocal.io.dataset import ImageRole
from plenocal.model.projection import pupil_shift
from plenocal.model.white import internal_parameters
from plenocal.sim.groundtruth import micro_image_radii_px


def prism(set_dir: Path, precalibration: Path | None, repeats: int, work: Path) -> dict:
    """Detection time per frame and accuracy on a PRISM validation set (see the module docstring)."""
    from independent import sh, truth_of

    from plenocal.model.camera import RhoForm
    from plenocal.model.projection import project_bap

    def cli(*args: str) -> None:
        code, text, _ = sh(list(args))
        if code:
            raise SystemExit(f"bench_detect: plenocal {args[0]} failed: {text.splitlines()[-1] if text else code}")

    ds_dir = work / "dataset"
    if not (ds_dir / "manifest.json").is_file():
        work.mkdir(parents=True, exist_ok=True)
        step = json.loads((set_dir / "truth.json").read_text())["translation"]["step_mm"]
        cli("import-libpleno", str(set_dir / "libpleno-src-calib"), "--role", "translation",
            str(set_dir / "libpleno-src-trans"), "--step-mm", str(step), "-o", str(ds_dir))
    if precalibration is None:
        precalibration = work / "precalibration"
        if not (precalibration / "camera.json").is_file():
            cli("precalibrate", str(ds_dir), "-o", str(precalibration))
    ds = read_dataset(ds_dir)
    cf = read_camera_file(precalibration / "camera.json")
    white = ds.read_image(ds.manifest.with_role(ImageRole.DEVIGNETTING)[0])
    entries = [e for r in (ImageRole.CALIBRATION, ImageRole.EVALUATION, ImageRole.TRANSLATION) for e in ds.manifest.with_role(r)]
    _, cam_t, poses_t = truth_of(set_dir)
    cam_t = cam_t.replace(rho_form=RhoForm.VIRTUAL_DEPTH)
    board = ds.manifest.target
    nodes = board.node_points()

    def detect(img, frame):
        return detect_frame(img, white, grid=cf.camera.grid, omega=cf.internal_parameters, layout=cf.camera.mla.types, frame=frame)

    detect(ds.read_image(entries[-1]), entries[-1].frame)  # warm-up: numba compilation or cache load
    per_frame, errors, rho_err = [], [], []
    for e in entries:
        img = ds.read_image(e)
        times = []
        for _ in range(max(1, repeats)):
            t0 = time.perf_counter()
            det = detect(img, e.frame).features
            times.append(time.perf_counter() - t0)
        # Nearest truth projection of any node through each feature's micro-lens.
        pts = poses_t[int(e.frame)].apply(nodes)
        n, m = len(det), len(nodes)
        pr = project_bap(cam_t, np.repeat(pts[None], n, axis=0).reshape(-1, 3), np.repeat(det.k, m), np.repeat(det.l, m))
        pr = pr.reshape(n, m, 3)
        d = np.hypot(pr[..., 0] - det.u[:, None], pr[..., 1] - det.v[:, None])
        j = np.nanargmin(np.where(np.isfinite(d), d, np.inf), axis=1)
        best = d[np.arange(n), j]
        hit = best <= 1.0
        errors.append(best[hit])
        rho_err.append(det.rho[hit] - pr[np.arange(n), j, 2][hit])
        per_frame.append({"image": e.path, "features": n, "matched": int(hit.sum()), "seconds": statistics.median(times),
                          "runs": times})
    secs = [f["seconds"] for f in per_frame]
    uv, rho = np.concatenate(errors), np.concatenate(rho_err)
    return {
        "benchmark": "detect-prism",
        "set": str(set_dir),
        "precalibration": str(precalibration),
        "frames": len(per_frame),
        "repeats": repeats,
        "seconds_per_frame_median": statistics.median(secs),
        "seconds_per_frame_max": max(secs),
        "features": int(sum(f["features"] for f in per_frame)),
        "matched_within_1px": len(uv),
        "uv_rms_vs_truth_px": float(np.sqrt(np.mean(uv**2))),
        "rho_rms_vs_truth_px": float(np.sqrt(np.mean(rho**2))),
        "rho_mean_error_px": float(np.mean(rho)),
        "per_frame": per_frame,
        "peak_memory_mb": peak_memory_mb(),
        "machine": machine(),
    }


def main() -> None:
    if "--prism" in sys.argv:
        ap = argparse.ArgumentParser()
        ap.add_argument("--prism", type=Path, required=True, metavar="SET")
        ap.add_argument("--precalibration", type=Path, default=None)
        ap.add_argument("--repeats", type=int, default=3)
        ap.add_argument("--work", type=Path, default=Path("/tmp/plenocal-bench-detect-prism"))
        a = ap.parse_args()
        print(json.dumps(prism(a.prism, a.precalibration, a.repeats, a.work), indent=2))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--precalibration", type=Path, default=None)
    ap.add_argument("--frames", type=int, default=4, help="first N calibration frames (default 4)")
    ap.add_argument("--invert-estimator", action="store_true", help="detect with fit_rendered=False (invert the corner estimator)")
    args = ap.parse_args()
    ds = read_dataset(args.dataset)
    pre = args.precalibration or (args.dataset / "precalibration")
    cf = read_camera_file(pre / "camera.json")
    truth_cam = read_camera(ds.path(ds.manifest.ground_truth.camera))
    true_omega = internal_parameters(truth_cam)
    gt = read_observations(ds.path(ds.manifest.ground_truth.observations)).bap
    white = ds.read_image(ds.manifest.with_role(ImageRole.DEVIGNETTING)[0])
    entries = ds.manifest.with_role(ImageRole.CALIBRATION)[: args.frames]
    H, W = truth_cam.sensor.height_px, truth_cam.sensor.width_px
    radius = micro_image_radii_px(truth_cam, truth_cam.main_lens.f_number)
    times: list[float] = []
    e_uv, e_rho, e_vd = [], [], []
    hit_chief = n_chief = hit_seen = n_seen = false = n_det = impure = split = n_clusters = 0
    for e in entries:
        img = ds.read_image(e)
        t0 = time.perf_counter()
        res = detect_frame(img, white, grid=cf.camera.grid, omega=cf.internal_parameters, layout=cf.camera.mla.types, frame=e.frame,
                           fit_rendered=not args.invert_estimator)
        times.append(time.perf_counter() - t0)
        det = res.features
        g = gt.select(gt.frame == e.frame)
        mic = truth_cam.grid.centres(g.k, g.l)
        R = radius[truth_cam.mla.types.type_of(g.k, g.l)]
        on = (mic[:, 0] >= R) & (mic[:, 0] <= W - 1 - R) & (mic[:, 1] >= R) & (mic[:, 1] <= H - 1 - R)
        dist = np.hypot(g.u - mic[:, 0], g.v - mic[:, 1])
        seen = pupil_shift(truth_cam, np.c_[g.u, g.v], g.rho, g.k, g.l)
        dist_seen = np.hypot(seen[:, 0] - mic[:, 0], seen[:, 1] - mic[:, 1])
        key = {(a, b): i for i, (a, b) in enumerate(zip(g.k, g.l, strict=True))}
        j = np.array([key.get((a, b), -1) for a, b in zip(det.k, det.l, strict=True)], dtype=int)
        m = j >= 0
        err = np.full(len(det), np.inf)
        err[m] = np.hypot(det.u[m] - g.u[j[m]], det.v[m] - g.v[j[m]])
        good = err <= 1.0
        n_det += len(det)
        false += int((~good).sum())
        inner2 = good.copy()
        inner2[good] = dist[j[good]] <= R[j[good]] - 2.0
        e_uv.append(err[inner2])
        e_rho.append(det.rho[good] - g.rho[j[good]])
        found = np.zeros(len(g), dtype=bool)
        found[j[good]] = True
        sel = on & (dist <= R - 3.0)
        hit_chief += int(found[sel].sum())
        n_chief += int(sel.sum())
        sel = on & (dist_seen <= R - 3.0)
        hit_seen += int(found[sel].sum())
        n_seen += int(sel.sum())
        # Clusters: one target corner each, and each corner in one cluster.
        clusters_per_node: dict[int, int] = {}
        for c in np.unique(det.cluster[good]):
            nodes = set(g.node[j[good & (det.cluster == c)]].tolist())
            impure += len(nodes) > 1
            n_clusters += 1
            for nd in nodes:
                clusters_per_node[nd] = clusters_per_node.get(nd, 0) + 1
            tv = _true_virtual_depth(truth_cam, true_omega, g, g.node == next(iter(nodes)))
            if np.isfinite(tv) and np.isfinite(res.virtual_depth[c]):
                e_vd.append(abs(res.virtual_depth[c]) / abs(tv) - 1.0)
        split += sum(v > 1 for v in clusters_per_node.values())
    uv, rho, vd = np.concatenate(e_uv), np.concatenate(e_rho), np.asarray(e_vd)
    print(json.dumps({
        "benchmark": "detect",
        "dataset": str(args.dataset),
        "fit_rendered": not args.invert_estimator,
        "image_size": [W, H],
        "frames": len(times),
        "seconds_per_frame_median": statistics.median(times),
        "seconds_per_frame": times,
        "features": n_det,
        "uv_rms_vs_chief_ray_px_2px_inside": float(np.sqrt(np.mean(uv**2))),
        "uv_n": len(uv),
        "rho_rms_px": float(np.sqrt(np.mean(rho**2))),
        "virtual_depth_rel_error_max": float(np.max(np.abs(vd))) if len(vd) else None,
        "virtual_depth_rel_error_rms": float(np.sqrt(np.mean(vd**2))) if len(vd) else None,
        "clusters": n_clusters,
        "clusters_with_several_corners": impure,
        "corners_split_over_clusters": split,
        "recall_3px_inside_chief_ray": hit_chief / max(n_chief, 1),
        "recall_3px_inside_as_seen": hit_seen / max(n_seen, 1),
        "false_detection_fraction": false / max(n_det, 1),
        "peak_memory_mb": peak_memory_mb(),
        "machine": machine(),
    }, indent=2))


def _true_virtual_depth(camera, om, g, rows) -> float:
    """Virtual depth of the node seen in ``rows`` of the truth: from its true ρ and micro-lens
    type through the model with the true Ω ``om`` (eq:blurradius inverted, the same relation
    detection uses)."""
    if not rows.any():
        return float("nan")
    t = camera.mla.types.type_of(g.k[rows], g.l[rows])
    r1 = blur_radii_px(np.ones(len(t)), t, om)
    r2 = blur_radii_px(np.full(len(t), 2.0), t, om)
    b = 2.0 * (r1 - r2)
    a = r1 - b
    return float(np.median(b / (g.rho[rows] - a)))


if __name__ == "__main__":
    main()
