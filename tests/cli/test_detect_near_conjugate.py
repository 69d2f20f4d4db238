"""``plenocal detect``, both passes, on a board beyond the MLA's conjugate plane (issue 24), as a
user runs them: a small r12-a dataset (24 rays) whose 5 × 4 board stands at 0.80 and 0.85 z_c
(linked by their clusters) and at 1.05 z_c, where every corner is blurred over its micro-images
(|ρ| ≥ 12 px of an 8.5 px disc) and the scene view shows the whole board."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from plenocal.calib.extrinsics import project_pinhole
from plenocal.cli.detect import LATTICE_FROM_SCENE_VIEW
from plenocal.cli.main import main
from plenocal.io.camera import read_camera_file
from plenocal.io.dataset import ImageEntry, ImageRole, read_dataset, write_manifest
from plenocal.io.images import write_raw_image
from plenocal.io.poses import write_poses
from plenocal.model.geometry import Pose, rodrigues
from plenocal.model.profile import mla_to_object_mm
from plenocal.model.target import Checkerboard
from plenocal.sim.dataset import BACKGROUND, ThinRenderer
from plenocal.sim.scene import CheckerboardPlate, Scene
from plenocal.sim.sensor import SensorResponse

BOARD = Checkerboard(5, 4, 4.0, border_mm=4.0)
FRAMES = {0: 0.80, 1: 0.85, 50: 1.05}
"""Frame → board distance as a fraction of z_c."""
N = 4.0


def _strict_json(path):
    """detection.json read as JSON proper: NaN and ±∞ are not JSON (Python's reader accepts them)."""
    def refuse(token):
        raise AssertionError(f"{path} holds {token}")
    return json.loads(path.read_text(), parse_constant=refuse)


@pytest.fixture(scope="module")
def passes(tmp_path_factory):
    root = tmp_path_factory.mktemp("near")
    ds = root / "ds"
    assert main(["simulate", "r12-a", "--small", "-o", str(ds), "--seed", "2", "--rays", "24", "--frames", "white,devignetting"]) == 0
    assert main(["precalibrate", str(ds), "-o", str(ds / "precalibration"), "--no-plots"]) == 0
    manifest = read_dataset(ds).manifest
    camera = read_camera_file(ds / "ground_truth" / "camera.json").camera
    zc = float(mla_to_object_mm(camera, 0.0))
    R = rodrigues(np.radians(3.0) * np.array([0.0, 0.0, 1.0])) @ rodrigues(np.radians(5.0) * np.array([1.0, 0.0, 0.0]))
    centre = np.array([(BOARD.columns - 1) * BOARD.square_mm / 2, (BOARD.rows - 1) * BOARD.square_mm / 2, 0.0])
    response, poses, entries = SensorResponse(), {}, []
    for frame, fraction in FRAMES.items():
        pose = Pose(R, np.array([0.5, 0.0, fraction * zc]) - R @ centre)
        radiance = ThinRenderer(camera).render(Scene((CheckerboardPlate(BOARD, pose),), background=BACKGROUND), f_number=N,
                                               rays=24, seed=2, image_id=frame)
        entry = ImageEntry(f"images/board-{frame:03d}.png", ImageRole.CALIBRATION, f_number=N, frame=frame)
        write_raw_image(ds / entry.path, response.apply(radiance, seed=2, image_id=frame), response.bit_depth)
        entries.append(entry)
        poses[frame] = pose
    write_manifest(ds, dataclasses.replace(manifest, target=BOARD, images=(*manifest.images, *entries)))
    write_poses(ds / "ground_truth" / "poses.json", poses)
    first, second = root / "det", root / "det2"
    code1 = main(["detect", str(ds), "-o", str(first), "--overlays", "0"])
    code2 = main(["detect", str(ds), "-o", str(second), "--previous", str(first), "--camera", str(ds / "ground_truth" / "camera.json"),
                  "--poses", str(ds / "ground_truth" / "poses.json")])
    return camera, poses, (code1, _strict_json(first / "detection.json")), (code2, _strict_json(second / "detection.json"))


def test_the_first_pass_poses_the_blurred_board_by_its_scene_view(passes):
    """The first pass links the two near boards by their clusters and poses the 1.05 z_c one by its
    scene view: all 20 nodes placed, each within a tenth of the node spacing of its true
    barycentre-pinhole projection; it is refused for its blur, and the reason says how blurred;
    the lattice is kept for the second pass."""
    camera, poses, (code, doc), _ = passes
    assert code == 0
    frames = {f["frame"]: f for f in doc["frames"]}
    assert frames[0]["linking"]["ok"] and frames[1]["linking"]["ok"]
    near = frames[50]
    assert not near["linking"]["ok"]
    reason = near["linking"]["reason"]
    assert "inner corners in its scene view linked (20 nodes)" in reason and "blurred over |ρ|" in reason, reason
    record = near["predicted_nodes"]
    assert record["lone_links_from"] == LATTICE_FROM_SCENE_VIEW
    links = np.asarray(record["lone_links"])
    nodes = links[:, 0].astype(int)
    assert sorted(nodes.tolist()) == list(range(BOARD.n_nodes))
    truth = project_pinhole(camera, poses[50], BOARD.node_points(nodes))
    spacing = np.median(np.hypot(*np.diff(project_pinhole(camera, poses[50], BOARD.node_points()[: BOARD.columns]), axis=0).T))
    assert np.max(np.hypot(*(links[:, 1:] - truth).T)) < 0.1 * spacing


def test_the_second_pass_refuses_it_again_with_the_calibrated_camera_s_reason(passes):
    """Posed again from its lattice with the (true) camera, the 1.05 z_c board still has no node
    sharp enough to fit: refused again, the linking record giving that reason (the report's), the
    first pass's kept; the other frames as they were."""
    _, _, (_, first), (code, doc) = passes
    assert code == 0
    frames = {f["frame"]: f for f in doc["frames"]}
    near = frames[50]
    assert near["second_pass"]["action"] == "refused again" and near["second_pass"]["added_features"] == 0
    assert near["linking"]["reason"].startswith("second pass: its lattice posed with the calibrated camera")
    assert "blurred over |ρ|" in near["linking"]["reason"]
    # where to put the board instead: the stretch of distances around z_c this camera resolves no corner in
    lo, hi = near["second_pass"]["unresolvable_mm"]
    assert lo < near["second_pass"]["conjugate_mm"] < (hi if hi is not None else np.inf)
    assert f"no board on the axis between {lo:.0f} and" in near["linking"]["reason"] or f"beyond {lo:.0f} mm" in near["linking"]["reason"]
    assert near["linking"]["first_pass_reason"] == {f["frame"]: f for f in first["frames"]}[50]["linking"]["reason"]
    assert frames[0]["linking"]["ok"] and frames[1]["linking"]["ok"]
