"""Frames linked, and features linked to a wrong node, on independent sets: the real-optics r12-b
renders and the PRISM r12-b renders, as a user gets them (default settings, from raw images).

Usage: python benchmarks/link_frames.py OUT [--set DIR ...] [--repeats N] [--timing-only]

For each set (default ``../shared/validation/realoptics-r12b`` and ``prism-r12b``):

1. ``plenocal import-libpleno`` (calibration frames, plus the translation and evaluation frames
   when the set has them) into ``OUT/<set>/dataset`` and ``plenocal precalibrate`` into
   ``OUT/<set>/precalibration``, unless present (delete them to redo);
2. every checkerboard frame detected in process (``detect_frame``, as ``plenocal detect`` calls
   it; median of ``--repeats`` runs after a warm-up frame), then linked
   (``initial_extrinsics`` with the frame's scene view when detection gives one, and the
   RMSE bound of ``plenocal detect``), timed per frame in wall and in process CPU seconds (all
   threads: the work done, less sensitive than wall time to other jobs on the machine);
3. against the truth: each cluster's true node is the nearest true barycentre within 0.3 of the
   node spacing (real-optics: the set's thin-lens chief-ray estimate of every corner, which is up
   to ~80 px off at the image circle's edge against 300–500 px spacings; PRISM: the truth
   camera's central projection of the node's virtual point), −1 beyond (a spurious cluster).
   A frame is linked correctly when every linked cluster has its true node, or every one has
   the node of the board turned by 180° in its plane (the same corner positions: calibration
   cannot tell, and the upright convention picks one), or, for a calibration or evaluation frame
   linked with relative ids, every one has the node of one rigid motion of the grid; the features of
   clusters linked otherwise are "wrong features".

The code measured is the ``plenocal`` this script imports (run it with ``PYTHONPATH`` set to
another checkout to time that one: ``--timing-only`` skips what older releases lack). Prints
JSON (also written to ``OUT/link_frames.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine

import plenocal
from plenocal.calib.extrinsics import cluster_barycentres, initial_extrinsics
from plenocal.calib.linking import grid_motion
from plenocal.cli.detect import LINK_MAX_RMSE_FRACTION, RELATIVE_ROLES
from plenocal.detect.pipeline import detect_frame
from plenocal.io import read_camera_file, read_dataset
from plenocal.io.dataset import FRAME_ROLES, ImageRole

ROOT = Path(__file__).resolve().parents[1]
SETS = (ROOT / ".." / "shared" / "validation" / "realoptics-r12b", ROOT / ".." / "shared" / "validation" / "prism-r12b")
TRUE_NODE_FRACTION = 0.3
"""A cluster is a node's when its barycentre is within this fraction of the node spacing of the
node's true barycentre."""


def sh(args: list[str]) -> None:
    src = Path(plenocal.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(src)}
    p = subprocess.run([sys.executable, "-m", "plenocal", *args], capture_output=True, text=True, env=env)
    if p.returncode:
        raise SystemExit(f"plenocal {' '.join(args)} failed: {(p.stdout + p.stderr).strip().splitlines()[-1:]}")


def prepare(set_dir: Path, work: Path) -> tuple[Path, Path]:
    """OUT/<set>/dataset and OUT/<set>/precalibration, unless present."""
    ds, pre = work / "dataset", work / "precalibration"
    if not (ds / "manifest.json").is_file():
        calib = set_dir / "libpleno-src-calib" if (set_dir / "libpleno-src-calib").is_dir() else set_dir / "libpleno-src"
        truth = json.loads((set_dir / "truth.json").read_text())
        step = (truth.get("translation") or {}).get("step_mm")
        args = ["import-libpleno", str(calib)]
        if (set_dir / "libpleno-src-trans").is_dir() and step:
            args += ["--role", "translation", str(set_dir / "libpleno-src-trans"), "--step-mm", str(step)]
        if (set_dir / "libpleno-src-eval").is_dir():
            args += ["--role", "evaluation", str(set_dir / "libpleno-src-eval")]
        sh([*args, "-o", str(ds)])
    if not (pre / "camera.json").is_file():
        sh(["precalibrate", str(ds), "-o", str(pre), "--no-plots"])
    return ds, pre


def true_barycentres(set_dir: Path, board) -> dict[int, np.ndarray]:
    """Per frame, the true barycentre of every node, (N, 2) px."""
    truth = json.loads((set_dir / "truth.json").read_text())
    if "poses" in truth:  # the real-optics set: the thin-lens chief-ray estimate of each corner
        return {int(p["frame"]): np.asarray(p["corners_uv_thin_lens_chief_ray_estimate"], dtype=np.float64)
                for p in truth["poses"].values()}
    from plenocal.model.geometry import Pose
    from plenocal.model.projection import virtual_points

    camera = read_camera_file(set_dir / "camera" / "camera-true-image-index.json").camera
    out = {}
    for tb in truth["checkerboards"].values():
        pose = Pose(np.array(tb["board_in_camera"]["R"]), np.array(tb["board_in_camera"]["t"]))
        pu = virtual_points(camera, pose.apply(board.node_points()))
        scale = -camera.sensor.distance_mm / pu[:, 2] / camera.sensor.pixel_size_mm
        u0, v0 = camera.sensor.principal_point_px
        out[int(tb["frame"])] = np.stack([u0 - pu[:, 0] * scale, v0 - pu[:, 1] * scale], axis=-1)
    return out


def judge(bary: np.ndarray, node: np.ndarray, sizes: np.ndarray, truth: np.ndarray, n_nodes: int, *,
          columns: int, relative: bool = False) -> dict[str, Any]:
    """Clusters against the truth: true node of each, and whether the linking is right (for a
    frame linked with relative ids: under the one rigid motion of the grid that takes most,
    :func:`plenocal.calib.linking.grid_motion`)."""
    d = np.hypot(bary[:, None, 0] - truth[None, :, 0], bary[:, None, 1] - truth[None, :, 1])
    dn = np.hypot(truth[:, None, 0] - truth[None, :, 0], truth[:, None, 1] - truth[None, :, 1])
    np.fill_diagonal(dn, np.inf)
    spacing = float(np.median(dn.min(axis=1)))
    true_node = np.where(d.min(axis=1) < TRUE_NODE_FRACTION * spacing, d.argmin(axis=1), -1)
    turned = np.where(true_node >= 0, n_nodes - 1 - true_node, -1)
    linked = node >= 0
    wrong = {name: linked & (node != t) for name, t in (("as truth", true_node), ("turned 180°", turned))}
    label = min(wrong, key=lambda k: int(wrong[k].sum()))
    bad = wrong[label]
    if relative:
        both = linked & (true_node >= 0)
        motion, agree = grid_motion(true_node[both], node[both], columns=columns)
        label, bad = f"relative: turn {motion[0]}°, shift ({motion[1]}, {motion[2]})", linked & (true_node < 0)
        bad[np.flatnonzero(both)[~agree]] = True
    return {
        "clusters": len(bary), "spurious_clusters": int((true_node < 0).sum()),
        "nodes_seen": int(np.unique(true_node[true_node >= 0]).size), "nodes_linked": int(linked.sum()),
        "labelling": label if linked.any() else None, "wrong_clusters": int(bad.sum()), "wrong_features": int(sizes[bad].sum()),
        "spurious_linked": int((linked & (true_node < 0)).sum()),
    }


def run_set(set_dir: Path, out: Path, *, repeats: int, timing_only: bool) -> dict[str, Any]:
    work = out / set_dir.name
    ds_path, pre = prepare(set_dir, work)
    ds = read_dataset(ds_path)
    cf = read_camera_file(pre / "camera.json")
    assert cf.internal_parameters is not None
    board = ds.manifest.target
    white = ds.read_image(ds.manifest.with_role(ImageRole.DEVIGNETTING)[0])
    entries = [e for e in ds.manifest.images if e.role in FRAME_ROLES]
    truth = {} if timing_only else true_barycentres(set_dir, board)

    def detect(e, image):
        return detect_frame(image, white, grid=cf.camera.grid, omega=cf.internal_parameters, layout=cf.camera.mla.types,
                            frame=int(e.frame or 0))

    detect(entries[0], ds.read_image(entries[0]))  # warm-up (numba's cache)
    frames = []
    for e in entries:
        image = ds.read_image(e)
        times, cpu = [], []
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            det = detect(e, image)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        rec: dict[str, Any] = {"frame": int(e.frame or 0), "role": e.role.value, "detect_s": statistics.median(times),
                               "detect_cpu_s": statistics.median(cpu), "features": len(det.features)}
        view = getattr(det, "view", None)
        t0, c0 = time.perf_counter(), time.process_time()
        kw = {"views": {rec["frame"]: view}} if view is not None else {}
        ext = initial_extrinsics(cf.camera, det.features, board, max_rmse_fraction=LINK_MAX_RMSE_FRACTION, **kw,
                                 relative_frames=(rec["frame"],) if e.role in RELATIVE_ROLES else ())
        rec["link_s"] = time.perf_counter() - t0
        rec["link_cpu_s"] = time.process_time() - c0
        r = ext.frames[0] if ext.frames else None
        rec.update({"linked": bool(r is not None and r.ok), "reason": r.reason if r else "no features", "note": r.note if r else "",
                    "relative_ids": bool(r is not None and r.relative_ids),
                    "linked_features": int((ext.bap.node >= 0).sum()) if ext.bap is not None and r is not None and r.ok else 0})
        if not timing_only and ext.bap is not None and len(det.features):
            f = ext.bap
            uid, bary = cluster_barycentres(f.cluster, f.u, f.v)
            node_of = dict(zip(f.cluster.tolist(), f.node.tolist(), strict=True))
            node = np.array([node_of[c] for c in uid.tolist()])
            sizes = np.array([(f.cluster == c).sum() for c in uid])
            rec.update(judge(bary, node, sizes, truth[rec["frame"]], board.n_nodes, columns=board.columns,
                             relative=rec["relative_ids"]))
            rec["correct"] = rec["linked"] and rec["wrong_clusters"] == 0
        frames.append(rec)
    res: dict[str, Any] = {"set": str(set_dir), "n_frames": len(frames)}
    for role in sorted({f["role"] for f in frames}):
        fr = [f for f in frames if f["role"] == role]
        res[role] = {"frames": len(fr), "linked": sum(f["linked"] for f in fr)}
        if not timing_only:
            res[role]["correct"] = sum(f["correct"] for f in fr)
    if not timing_only:
        res["wrong_features"] = sum(f.get("wrong_features", 0) for f in frames)
        res["wrong_clusters"] = sum(f.get("wrong_clusters", 0) for f in frames)
    d = [f["detect_s"] for f in frames]
    link = [f["link_s"] for f in frames]
    res["detect_s_per_frame"] = {"median": statistics.median(d), "max": max(d), "total": sum(d),
                                 "cpu_total": sum(f["detect_cpu_s"] for f in frames)}
    res["link_s_per_frame"] = {"median": statistics.median(link), "max": max(link), "total": sum(link),
                               "cpu_total": sum(f["link_cpu_s"] for f in frames)}
    res["linked_features"] = sum(f["linked_features"] for f in frames)
    res["frames"] = frames
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--set", type=Path, action="append", dest="sets", help="a validation set folder (repeatable)")
    ap.add_argument("--repeats", type=int, default=1, help="detection runs per frame (the median is reported)")
    ap.add_argument("--timing-only", action="store_true", help="no truth comparison (for older releases)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"plenocal": str(Path(plenocal.__file__).resolve().parent), "repeats": args.repeats,
                           "sets": [run_set(s.resolve(), args.out, repeats=args.repeats, timing_only=args.timing_only)
                                    for s in (args.sets or SETS)],
                           "machine": machine(), "load_average": os.getloadavg()}
    text = json.dumps(doc, indent=2, default=float)
    (args.out / "link_frames.json").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
