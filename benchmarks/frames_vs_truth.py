"""Each frame of a set with a truth camera and poses but no oracle observations (plenocal's
real-optics renders), against what its detection linked (issue 24).

Usage: python benchmarks/frames_vs_truth.py DATASET DETECTION [--fit] [--frames F ...]

DATASET has ``ground_truth/camera.json`` and ``ground_truth/poses.json`` (``plenocal simulate
--lens ...`` writes them: the lens's paraxial equivalent, so its pinhole is only near the
barycentres, 15–108 px off at the telephoto's field edge); DETECTION is a ``plenocal detect``
output folder (``detection.json``, ``observations.npz``). Per frame: its distance, what detection
said (linked, reason), the features and nodes linked and the nodes linked wrong (each node's
barycentre against the nearest true pinhole projection; the board turned by 180° counted right,
as ``benchmarks/link_frames.py`` does, and for a frame linked with relative ids any one rigid motion
of the grid), and from the truth the nodes a corner appears in two or
more micro-images for (``sim.groundtruth.FeatureOracle``: anywhere in the micro-image, however
blurred). With ``--fit``, for frames linked partly or not at all, what the true camera and pose
give the predict-and-fit path (``detect.nodes.predict_node_views``, ``detect_board_nodes`` on the
frame's devignetted image with the precalibration's grid): views predicted, nodes fitted in two
or more micro-images — the most a pose can add. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine

from plenocal.calib.extrinsics import board_symmetric_nodes, project_pinhole
from plenocal.calib.linking import grid_motion
from plenocal.io import read_camera_file, read_dataset
from plenocal.io.dataset import FRAME_ROLES, ImageRole
from plenocal.io.observations import read_observations
from plenocal.io.poses import read_poses
from plenocal.sim.groundtruth import FeatureOracle


def wrong_nodes(bap, camera, pose, board, *, relative: bool = False) -> tuple[int, int]:
    """(nodes, features) linked to a node whose barycentre is nearer another node's true pinhole
    projection, under the labelling (as is, or turned by 180°) that leaves fewer; for a frame
    linked with relative ids, under the one rigid motion of the grid that takes most
    (:func:`plenocal.calib.linking.grid_motion`)."""
    nodes = np.unique(bap.node)
    if not len(nodes):
        return 0, 0
    proj = project_pinhole(camera, pose, board.node_points())
    bary = np.array([[bap.u[bap.node == n].mean(), bap.v[bap.node == n].mean()] for n in nodes])
    near = np.argmin(np.hypot(*(bary[:, None] - proj[None]).transpose(2, 0, 1)), axis=1)
    if relative:
        bad = ~grid_motion(near, nodes, columns=board.columns)[1]
    else:
        same = board_symmetric_nodes(nodes, columns=board.columns, rows=board.rows)
        bad = min((near != same[0], near != same[1]), key=lambda b: int(b.sum()))
    return int(bad.sum()), int(sum(int(np.sum(bap.node == n)) for n in nodes[bad]))


def fitted_with_truth(dataset, entry, white, pre, pupil, camera, pose, board) -> dict[str, int]:
    """What the true camera and pose give the predict-and-fit path in this frame."""
    from plenocal.detect.nodes import detect_board_nodes, predict_node_views
    from plenocal.detect.pipeline import detect_frame
    from plenocal.model.observations import BapFeatures

    det = detect_frame(dataset.read_image(entry), white, grid=pre.camera.grid, omega=pre.internal_parameters,
                       layout=pre.camera.mla.types, frame=int(entry.frame), keep_images=True, pupil=pupil)
    views = predict_node_views(camera, pose, board, micro=det.micro)
    nd = detect_board_nodes(det.devignetted, det.micro, camera=camera, cam_from_world=pose, board=board, known=BapFeatures.empty(),
                            rms_bound=det.rms_bound, pitch_px=pre.camera.grid.diameter_px, frame=int(entry.frame), views=views)
    per_node = np.bincount(nd.fitted_node, minlength=board.n_nodes) if len(nd.fitted_node) else np.zeros(board.n_nodes, dtype=int)
    predicted = np.bincount(views.node, minlength=board.n_nodes) if len(views.node) else np.zeros(board.n_nodes, dtype=int)
    return {"views_predicted": len(views.node), "nodes_predicted_in_2_views": int((predicted >= 2).sum()),
            "nodes_fitted_in_2_views": int((per_node >= 2).sum()), "nodes_fitted_once": int((per_node == 1).sum())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", type=Path)
    ap.add_argument("detection", type=Path)
    ap.add_argument("--fit", action="store_true", help="also fit the true pose's predicted nodes in frames not fully linked")
    ap.add_argument("--frames", type=int, nargs="*", default=None)
    args = ap.parse_args()
    ds = read_dataset(args.dataset)
    board = ds.manifest.target
    camera = read_camera_file(args.dataset / "ground_truth" / "camera.json").camera
    poses = read_poses(args.dataset / "ground_truth" / "poses.json")
    doc = json.loads((args.detection / "detection.json").read_text())
    bap = read_observations(args.detection / "observations.npz").bap
    oracle = FeatureOracle(camera)
    entries = {int(e.frame): e for e in ds.manifest.images if e.role in FRAME_ROLES}
    fit_setup: Any = None
    rows: dict[int, Any] = {}
    for rec in doc["frames"]:
        f = int(rec["frame"])
        if args.frames is not None and f not in args.frames:
            continue
        pose = poses[f]
        views = np.bincount(oracle.board_features(board, pose).node, minlength=board.n_nodes)
        b = bap.select((bap.frame == f) & (bap.node >= 0))
        n_nodes = len(np.unique(b.node))
        relative = bool(rec["linking"].get("relative_ids"))
        wrong = wrong_nodes(b, camera, pose, board, relative=relative)
        row = {"role": rec["role"], "distance_mm": float(pose.translation[2]), "linked": bool(rec["linking"]["ok"]),
               "relative_ids": relative,
               "reason": rec["linking"]["reason"], "features": len(b), "nodes": n_nodes, "wrong_nodes": wrong[0],
               "wrong_features": wrong[1], "oracle_nodes_in_2_views": int((views >= 2).sum())}
        if args.fit and n_nodes < board.n_nodes:
            if fit_setup is None:
                from plenocal.cli.detect import pupil_ellipses

                pre = read_camera_file(Path(doc["precalibration"]))
                white = ds.read_image(ds.manifest.with_role(ImageRole.DEVIGNETTING)[0])
                shape = str(doc.get("pupil_shape", "disc"))
                fit_setup = (white, pre, pupil_ellipses(shape, white, grid=pre.camera.grid, omega=pre.internal_parameters,
                                                        layout=pre.camera.mla.types, dataset=ds))
            row["true_pose"] = fitted_with_truth(ds, entries[f], fit_setup[0], fit_setup[1], fit_setup[2], camera, pose, board)
        rows[f] = row
    summary = {"frames": len(rows), "linked": sum(r["linked"] for r in rows.values()),
               "features": sum(r["features"] for r in rows.values()),
               "wrong_features": sum(r["wrong_features"] for r in rows.values())}
    print(json.dumps({"machine": machine(), "dataset": str(args.dataset), "detection": str(args.detection),
                      "summary": summary, "frames": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
