"""Cluster-to-node linking on the PRISM r12-b renders against their truth, and on the real R12-A
observations against the reference's own linking (issue #14).

Usage: python benchmarks/check_linking.py OUT [--prism DIR] [--detect-cli]

DIR is ``../shared/validation/prism-r12b`` by default (13 frames: calibration 0–7, translation
100–104; 8 × 5 nodes, every node ≥ 220 px inside the image). Pre-calibration is bypassed: the
truth camera in image-index coordinates (``camera/camera-true-image-index.json``) is written as
``OUT/precalibration`` (camera.json with Ω, observations.npz with the micro-image centres it
projects), the libpleno sources are imported as ``OUT/dataset``, and every frame is detected with
the settings of ``plenocal detect``; the raw (unlinked) features are cached in
``OUT/raw-features.npz``. Then, per frame:

- the linking of ``plenocal detect`` (``initial_extrinsics`` with its RMSE bound) against the true
  node of each cluster: the nearest true barycentre, i.e. the central projection through O of the
  node's distorted virtual point (truth camera and ``board_in_camera`` pose), within 0.3 of the
  node spacing (clusters farther from every node are spurious: they must stay unlinked);
- the same barycentres degraded as detection can degrade them: a corner node lost, an interior
  column lost, an edge column or row lost (a board cut by the image border looks the same: the
  answer must be "ambiguous", never a shifted labelling), interior nodes lost. Each must be linked
  correctly or reported, never mislabelled.

``--detect-cli`` also runs ``plenocal detect`` end to end (about 100 s on 2 cores) and reports its
per-frame linking.

Real data: the reference's R12-A BAP features (``../shared/fixtures/libpleno-r12a-observations``,
detected by COMPOTE in the real images, 16 frames of a 9 × 5 board) with their node ids replaced
by arbitrary cluster ids are linked again with the reference's published camera; the node ids must
come back. Prints JSON (also written to OUT/linking.json).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine

from plenocal.calib.extrinsics import cluster_barycentres, initial_extrinsics, link_barycentres
from plenocal.cli.detect import LINK_MAX_RMSE_FRACTION
from plenocal.detect.pipeline import detect_frame
from plenocal.io import read_camera_file, read_dataset
from plenocal.io.camera import write_camera
from plenocal.io.dataset import FRAME_ROLES, ImageRole
from plenocal.io.observations import read_observations, write_observations
from plenocal.model.camera import PlenopticCamera
from plenocal.model.geometry import Pose
from plenocal.model.observations import BapFeatures, MicroImageCentres, Observations
from plenocal.model.projection import micro_image_centres, virtual_points
from plenocal.model.target import Checkerboard

ROOT = Path(__file__).resolve().parents[1]
PRISM = ROOT / ".." / "shared" / "validation" / "prism-r12b"
R12A = ROOT / ".." / "shared" / "fixtures"
TRUE_NODE_FRACTION = 0.3
"""A cluster is a node's when its barycentre is within this fraction of the node spacing of the
node's true barycentre (true barycentres are 240–470 px apart; detected ones 3–5 px off)."""


def prepare(prism: Path, out: Path) -> tuple[Path, Path]:
    """OUT/dataset (imported) and OUT/precalibration (truth camera), unless present."""
    ds, pre = out / "dataset", out / "precalibration"
    if not (ds / "manifest.json").is_file():
        subprocess.run([sys.executable, "-m", "plenocal", "import-libpleno", str(prism / "libpleno-src"), "-o", str(ds)], check=True, stdout=sys.stderr)
    if not (pre / "camera.json").is_file():
        cf = read_camera_file(prism / "camera" / "camera-true-image-index.json")
        cam = cf.camera
        k, l = cam.mla.lattice.all_indices()
        uv = micro_image_centres(cam, k, l)
        inside = (uv[:, 0] >= 0) & (uv[:, 0] <= cam.sensor.width_px - 1) & (uv[:, 1] >= 0) & (uv[:, 1] <= cam.sensor.height_px - 1)
        mic = MicroImageCentres(k[inside].astype(np.int32), l[inside].astype(np.int32), uv[inside, 0], uv[inside, 1])
        write_camera(pre / "camera.json", cam, internal_parameters=cf.internal_parameters,
                     provenance={"note": "PRISM r12-b truth camera in image-index coordinates (benchmarks/check_linking.py)"})
        write_observations(pre / "observations.npz", Observations(BapFeatures.empty(), mic))
    return ds, pre


def raw_features(ds_path: Path, pre: Path, cache: Path) -> BapFeatures:
    """Unlinked features of every checkerboard frame, as ``plenocal detect`` finds them."""
    if cache.is_file():
        return read_observations(cache).bap
    ds = read_dataset(ds_path)
    cf = read_camera_file(pre / "camera.json")
    assert cf.internal_parameters is not None
    white = ds.read_image(ds.manifest.with_role(ImageRole.DEVIGNETTING)[0])
    parts = []
    for e in ds.manifest.images:
        if e.role in FRAME_ROLES:
            det = detect_frame(ds.read_image(e), white, grid=cf.camera.grid, omega=cf.internal_parameters,
                               layout=cf.camera.mla.types, frame=int(e.frame or 0))
            parts.append(det.features)
    bap = BapFeatures.concatenate(parts)
    write_observations(cache, Observations(bap, MicroImageCentres.empty()))
    return bap


def true_barycentres(camera: PlenopticCamera, board: Checkerboard, pose: Pose) -> np.ndarray:
    """Central projection through O of every node's distorted virtual point, (N, 2) px."""
    pu = virtual_points(camera, pose.apply(board.node_points()))
    scale = -camera.sensor.distance_mm / pu[:, 2] / camera.sensor.pixel_size_mm
    u0, v0 = camera.sensor.principal_point_px
    return np.stack([u0 - pu[:, 0] * scale, v0 - pu[:, 1] * scale], axis=-1)


def degradations(board: Checkerboard) -> dict[str, list[int]]:
    C, R = board.columns, board.rows
    return {
        "corner-0": [0],
        f"corner-{C * R - 1}": [C * R - 1],
        "interior-column": list(range(C // 2, C * R, C)),
        "interior-nodes": [C + 1, 2 * C + C // 2, (R - 2) * C + C - 2],
        "edge-column-0": list(range(0, C * R, C)),
        f"edge-column-{C - 1}": list(range(C - 1, C * R, C)),
        "edge-row-0": list(range(C)),
    }


def verdict(node: np.ndarray, truth: np.ndarray, ok: bool) -> str:
    if not ok:
        return "reported"
    return "correct" if np.array_equal(node, truth) else "WRONG"


def r12a_real(fixtures: Path) -> dict[str, object]:
    """Re-link the reference's real R12-A observations from arbitrary cluster ids."""
    from plenocal.io.libpleno import camera_from_intrinsics, read_scene
    from plenocal.io.libpleno.observations import read_observations_csv

    bap = read_observations_csv(fixtures / "libpleno-r12a-observations" / "bap-R12-A.csv").bap
    camera = camera_from_intrinsics(fixtures / "libpleno-r12a-configs" / "intrinsics.js")
    board = read_scene(fixtures / "libpleno-r12a-configs" / "scene.js")
    cols = bap.columns()
    ref = bap.node.copy()
    cols["cluster"] = np.where(ref >= 0, (ref * 7 + 3) % 1000, -1)
    cols["node"] = np.full(len(bap), -1)
    ext = initial_extrinsics(camera, BapFeatures(**cols), board, max_rmse_fraction=LINK_MAX_RMSE_FRACTION)
    assert ext.bap is not None
    frames = [
        {"frame": f.frame, "nodes_seen": int(np.unique(ref[bap.frame == f.frame]).size), "linked": f.ok,
         "correct": bool(f.ok and np.array_equal(ext.bap.node[bap.frame == f.frame], ref[bap.frame == f.frame])),
         "reason": f.reason, "note": f.note, "rmse_px": f.rmse_px}
        for f in ext.frames
    ]
    return {"n_frames": len(frames), "n_linked": sum(f["linked"] for f in frames),
            "n_correct": sum(f["correct"] for f in frames), "frames": frames}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--prism", type=Path, default=PRISM)
    ap.add_argument("--fixtures", type=Path, default=R12A, help="folder with libpleno-r12a-observations and -configs")
    ap.add_argument("--detect-cli", action="store_true", help="also run 'plenocal detect' end to end")
    args = ap.parse_args()
    prism, out = args.prism.resolve(), args.out
    truth = json.loads((prism / "truth.json").read_text())
    cb = truth["checkerboard"]
    board = Checkerboard(int(cb["x_grid"]), int(cb["y_grid"]), float(cb["square_mm"]))
    camera = read_camera_file(prism / "camera" / "camera-true-image-index.json").camera
    ds, pre = prepare(prism, out)
    t0 = time.perf_counter()
    bap = raw_features(ds, pre, out / "raw-features.npz")
    t_detect = time.perf_counter() - t0
    t0 = time.perf_counter()
    ext = initial_extrinsics(camera, bap, board, max_rmse_fraction=LINK_MAX_RMSE_FRACTION)
    t_link = time.perf_counter() - t0
    assert ext.bap is not None
    status = {f.frame: f for f in ext.frames}
    frames = []
    for name, tb in sorted(truth["checkerboards"].items(), key=lambda kv: kv[1]["frame"]):
        fr = int(tb["frame"])
        pose = Pose(np.array(tb["board_in_camera"]["R"]), np.array(tb["board_in_camera"]["t"]))
        tbar = true_barycentres(camera, board, pose)
        rows = bap.frame == fr
        uid, bary = cluster_barycentres(bap.cluster[rows], bap.u[rows], bap.v[rows])
        d = np.hypot(bary[:, None, 0] - tbar[None, :, 0], bary[:, None, 1] - tbar[None, :, 1])
        dn = np.hypot(tbar[:, None, 0] - tbar[None, :, 0], tbar[:, None, 1] - tbar[None, :, 1])
        spacing = float(np.median(np.sort(dn, axis=1)[:, 1]))
        true_node = np.where(d.min(axis=1) < TRUE_NODE_FRACTION * spacing, d.argmin(axis=1), -1)
        linked = dict(zip(bap.cluster[rows].tolist(), ext.bap.node[rows].tolist(), strict=True))
        node = np.array([linked[c] for c in uid.tolist()])
        r = status[fr]
        rec: dict[str, object] = {
            "frame": fr, "image": name, "clusters": int(uid.size), "spurious_clusters": int((true_node < 0).sum()),
            "nodes_seen": int(np.unique(true_node[true_node >= 0]).size),
            "whole_board_in_view": bool(np.all((tbar >= 0) & (tbar <= [camera.sensor.width_px - 1, camera.sensor.height_px - 1]))),
            "linked": bool(r.ok), "correct": bool(r.ok and np.array_equal(node, true_node)),
            "reason": r.reason, "note": r.note, "rmse_px": r.rmse_px,
        }
        degraded = {}
        for what, drop in degradations(board).items():
            keep = ~np.isin(true_node, drop)
            link = link_barycentres(camera, board, bary[keep])
            degraded[what] = verdict(link.node, true_node[keep], link.ok)
        rec["degraded"] = degraded
        frames.append(rec)
    doc: dict[str, object] = {
        "prism": str(prism),
        "n_frames": len(frames),
        "n_linked": sum(bool(f["linked"]) for f in frames),
        "n_correct": sum(bool(f["correct"]) for f in frames),
        "n_wrong": sum(bool(f["linked"]) and not f["correct"] for f in frames),
        "n_degraded_wrong": sum(v == "WRONG" for f in frames for v in f["degraded"].values()),  # type: ignore[attr-defined]
        "detect_s": t_detect,
        "link_s": t_link,
        "frames": frames,
        "r12a_real": r12a_real(args.fixtures.resolve()),
        "machine": machine(),
    }
    if args.detect_cli:
        cli_out = out / "detect-cli"
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "plenocal", "detect", str(ds), "--precalibration", str(pre), "-o", str(cli_out), "--overlays", "0"], check=True, stdout=sys.stderr)
        det = json.loads((cli_out / "detection.json").read_text())
        doc["detect_cli"] = {
            "wall_time_s": time.perf_counter() - t0,
            "n_frames_linked": det["n_frames_linked"],
            "frames": {f["frame"]: f["linking"] for f in det["frames"]},
        }
    text = json.dumps(doc, indent=2, default=float)
    (out / "linking.json").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
