"""A 12-frame R12-A (or other preset) set for linking near the MLA's conjugate plane and on partial boards (issue 24).

Usage: python benchmarks/make_link_set.py OUT [--preset r12-a|r12-c|…] [--small] [--rays N] [--seed S]
       [--lens DESIGN [--lenslets real|thin]] [--distances MM,MM,…]

The whites and the devignetting white come from ``plenocal simulate`` (``--frames
white,devignetting``); the 12 calibration frames are rendered here at chosen poses (simulate draws
random ones), written into the same dataset with their ground truth (poses, oracle features):

- boards whole in view at 0.80, 0.85, 0.90, 0.93, 0.95, 0.97, 1.00, 1.05 and 1.10 × z_c, the
  object distance whose image falls on the MLA (``plenocal.model.profile.mla_to_object_mm(camera, 0)``);
- partial boards at 0.85–0.90 z_c: the last column beyond the image border, the last row, and a
  corner (last row and column).

A preset whose MLA is conjugate to no real object (z_c ≤ 0: the R12-C, D < F's image of infinity)
gets the same frames at distances spread geometrically over its calibration range instead
(fraction 0.80 → the near end, 1.10 → the far end).

With ``--lens`` the images are traced through real optics (``plenocal simulate --lens``'s
renderer, real lenslets by default): the truth is then the thin-lens equivalent
(``ground_truth/camera.json``, ``optics.json``) and its oracle features only approximate, so none
are written (``benchmarks/frames_vs_truth.py`` reads such a set). ``--distances`` renders whole
boards at those object distances (mm) instead of the 12 frames, with the tilts and rolls of the
first frames in turn (the held-back real-optics set's lost frames were whole boards at 383 and
400 mm, its conjugate plane at ~414 mm).

Keep the output under /work/runs (generated data is not committed).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

from plenocal.calib.extrinsics import project_pinhole
from plenocal.cli.simulate import tilt_scale_of
from plenocal.io.camera import read_camera_file
from plenocal.io.dataset import ImageEntry, ImageRole, read_dataset, write_manifest
from plenocal.io.images import write_raw_image
from plenocal.io.observations import write_observations
from plenocal.io.poses import write_poses
from plenocal.model.geometry import Pose, rodrigues
from plenocal.model.observations import BapFeatures, Observations
from plenocal.model.profile import mla_to_object_mm
from plenocal.sim.dataset import BACKGROUND, FrameSelection, ThinRenderer, simulate_dataset
from plenocal.sim.groundtruth import FeatureOracle, true_mics
from plenocal.sim.presets import preset
from plenocal.sim.scene import CheckerboardPlate, Scene
from plenocal.sim.sensor import SensorResponse

FRAMES = (  # (fraction of z_c, tilt about x, tilt about y, roll (deg), cut: "", "column", "row", "corner")
    (0.80, 10.0, 0.0, 3.0, ""),
    (0.85, 0.0, 20.0, -4.0, ""),
    (0.90, 15.0, 0.0, 2.0, ""),
    (0.93, 0.0, -12.0, 5.0, ""),
    (0.95, 8.0, 0.0, -2.0, ""),
    (0.97, 0.0, 8.0, 1.0, ""),
    (1.00, 5.0, 0.0, 0.0, ""),
    (1.05, 0.0, 10.0, -3.0, ""),
    (1.10, -10.0, 0.0, 4.0, ""),
    (0.85, 10.0, 0.0, 2.0, "column"),
    (0.88, 0.0, 12.0, -2.0, "row"),
    (0.90, -8.0, 8.0, 3.0, "corner"),
)


def board_pose(camera, board, z: float, tilt_x: float, tilt_y: float, roll: float, cut: str) -> Pose:
    """cam_from_world with the board's centre on the axis at depth z (tilted, rolled), shifted so
    that the last column and/or row of nodes is half a spacing beyond the image border for a cut."""
    R = rodrigues(np.radians([0.0, 0.0, roll])) @ rodrigues(np.radians([tilt_x, tilt_y, 0.0]))
    centre = np.array([(board.columns - 1) * board.square_mm / 2, (board.rows - 1) * board.square_mm / 2, 0.0])
    pose = Pose(R, np.array([0.0, 0.0, z]) - R @ centre)
    W, H = camera.sensor.width_px, camera.sensor.height_px
    for axis, wanted in ((0, cut in ("column", "corner")), (1, cut in ("row", "corner"))):
        if not wanted:
            continue
        last = np.arange(board.n_nodes)
        last = last[(last % board.columns == board.columns - 1) if axis == 0 else (last // board.columns == board.rows - 1)]
        size = (W, H)[axis]

        def edge(shift: float, axis=axis, last=last, pose=pose, size=size) -> float:
            t = pose.translation.copy()
            t[axis] += shift
            uv = project_pinhole(camera, Pose(pose.rotation, t), board.node_points(last))[:, axis]
            spacing = np.median(np.abs(np.diff(project_pinhole(camera, Pose(pose.rotation, t), board.node_points())[:, axis])))
            return float(np.min(uv) if np.median(uv) > size / 2 else size - np.max(uv)) - (size - 1 + 0.5 * spacing)

        # The pinhole's u grows or falls with x: try both directions, bisect the sign change.
        for sign in (1.0, -1.0):
            lo, hi = 0.0, sign * z * 0.5
            if edge(lo) < 0 < edge(hi):
                for _ in range(60):
                    mid = 0.5 * (lo + hi)
                    lo, hi = (mid, hi) if edge(mid) < 0 else (lo, mid)
                t = pose.translation.copy()
                t[axis] += hi
                pose = Pose(pose.rotation, t)
                break
    return pose


def real_renderer(pre, lens: str, lenslets: str):
    """``plenocal simulate --lens LENS --lenslets LENSLETS``'s renderer for ``pre``."""
    from plenocal.sim.optics import load_lens
    from plenocal.sim.optics.camera import real_optics_camera
    from plenocal.sim.optics.dataset import RealOpticsRenderer
    from plenocal.sim.optics.lenslets import DEFAULT_SUBSTRATE_MM, FUSED_SILICA_ND, LensletDesign, LensletKind

    design = LensletDesign(LensletKind(lenslets), index=FUSED_SILICA_ND, substrate_mm=DEFAULT_SUBSTRATE_MM, clear_radius_mm=None)
    return RealOpticsRenderer(real_optics_camera(pre.camera, load_lens(lens), lenslets=design), lens, pre.plan.checkerboard_f_number)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--preset", default="r12-a", help="plenocal preset (default r12-a)")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--rays", type=int, default=24)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--lens", default=None, help="trace through this main lens (a bundled design or a plenocal-lens file)")
    ap.add_argument("--lenslets", choices=("real", "thin"), default="real", help="with --lens (default real)")
    ap.add_argument("--distances", default=None, help="whole boards at these object distances, mm (comma-separated)")
    args = ap.parse_args()
    pre = preset(args.preset, small=args.small, tilt_scale=tilt_scale_of(None, lens=args.lens))
    out = args.out
    optics = real_renderer(pre, args.lens, args.lenslets) if args.lens else None
    if not (out / "manifest.json").is_file():
        simulate_dataset(pre, out, seed=args.seed, rays=args.rays, frames=FrameSelection.parse("white,devignetting"), renderer=optics)
    ds = read_dataset(out)
    manifest = ds.manifest
    camera = read_camera_file(out / "ground_truth" / "camera.json").camera
    board = manifest.target
    zc = float(mla_to_object_mm(camera, 0.0))
    near, far = pre.plan.calibration_range_mm

    def distance(fraction: float) -> float:
        if zc > 0:
            return fraction * zc
        return float(near * (far / near) ** ((fraction - 0.80) / 0.30))
    renderer = ThinRenderer(camera) if optics is None else optics
    response = SensorResponse()
    chosen = FRAMES
    if args.distances:
        mm = [float(x) for x in args.distances.split(",")]
        chosen = tuple((d / zc, *FRAMES[i % 9][1:4], "") for i, d in enumerate(mm))
    oracle = FeatureOracle(camera)
    n_board = pre.plan.checkerboard_f_number
    entries, poses, feats, plan = [], {}, [], []
    for i, (fraction, tx, ty, roll, cut) in enumerate(chosen):
        pose = board_pose(camera, board, distance(fraction), tx, ty, roll, cut)
        entry = ImageEntry(f"images/calib-{i:03d}.png", ImageRole.CALIBRATION, f_number=n_board, frame=i)
        path = out / entry.path
        if not path.is_file():
            radiance = renderer.render(Scene((CheckerboardPlate(board, pose),), background=BACKGROUND), f_number=n_board,
                                       rays=args.rays, seed=args.seed, image_id=i)
            write_raw_image(path, response.apply(radiance, seed=args.seed, image_id=i), response.bit_depth)
            print(f"rendered {entry.path} ({fraction:.2f} z_c, {cut or 'whole'})", file=sys.stderr)
        entries.append(entry)
        poses[i] = pose
        feats.append(oracle.board_features(board, pose, frame=i))  # the thin equivalent's, with --lens
        plan.append({"frame": i, "fraction_of_conjugate": fraction if zc > 0 else None, "distance_mm": distance(fraction), "cut": cut or "none",
                     "true_views_per_node": np.bincount(feats[-1].node, minlength=board.n_nodes).tolist()})
    images = tuple(e for e in manifest.images if e.role not in (ImageRole.CALIBRATION,)) + tuple(entries)
    write_manifest(out, dataclasses.replace(manifest, images=images))
    write_poses(out / "ground_truth" / "poses.json", poses)
    if optics is None:
        write_observations(out / "ground_truth" / "observations.npz", Observations(BapFeatures.concatenate(feats), true_mics(camera)))
    (out / "link-set.json").write_text(json.dumps({"conjugate_distance_mm": zc, "frames": plan}, indent=1))
    print(json.dumps({"conjugate_distance_mm": zc, "frames": len(plan)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
