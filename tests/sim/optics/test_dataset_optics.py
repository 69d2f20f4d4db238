"""Real-optics datasets: the folder, the thin-lens-equivalent truth, optics.json, CLI errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from plenocal.cli.main import main
from plenocal.io import read_camera, read_dataset, read_poses, read_raw_image
from plenocal.sim.dataset import FrameSelection, simulate_dataset
from plenocal.sim.optics.camera import real_optics_camera
from plenocal.sim.optics.dataset import RealOpticsRenderer
from plenocal.sim.optics.library import load_lens
from plenocal.sim.presets import REAL_OPTICS_TILT_SCALE, preset


@pytest.fixture(scope="module")
def small():
    return preset("r12-b", small=True)


def test_cli_writes_a_real_optics_dataset(tmp_path, small):
    out = tmp_path / "ds"
    code = main(["simulate", "r12-b", "--small", "--lens", "field-corrector", "-o", str(out), "--rays", "2",
                 "--quiet", "--frames", "white=1,devignetting,calibration=1,translation=1", "--seed", "3"])
    assert code == 0
    ds = read_dataset(out)
    gt = ds.manifest.ground_truth
    assert gt is not None and gt.observations is None
    assert not (out / "ground_truth" / "observations.npz").exists()
    cam = read_camera(out / "ground_truth" / "camera.json")
    # The thin-lens equivalent: the preset's camera without distortion.
    assert cam.distortion.is_zero and cam.main_lens.focal_length_mm == small.camera.main_lens.focal_length_mm
    # through a real lens the MLA has a real camera's tilt, which lets the images place the exit pupil
    tilted = preset("r12-b", small=True, tilt_scale=REAL_OPTICS_TILT_SCALE).camera
    assert cam.mla.rotation_xyz_rad == pytest.approx(tilted.mla.rotation_xyz_rad, abs=1e-12)
    assert abs(tilted.mla.rotation_xyz_rad[0]) > 50 * abs(small.camera.mla.rotation_xyz_rad[0])
    assert cam.D_mm == pytest.approx(tilted.D_mm) and cam.d_mm == pytest.approx(tilted.d_mm)
    assert sorted(read_poses(out / "ground_truth" / "poses.json")) == [0, 200]
    truth = json.loads((out / "ground_truth" / "optics.json").read_text())
    assert truth["format"] == "plenocal-optics-truth"
    assert truth["main_lens"]["name"] == "field-corrector"
    assert "not written" in truth["observations"]
    assert truth["exit_pupil_model"]["exit_pupil_mm"] == pytest.approx(
        (21.6506 - 12.3050) * small.camera.main_lens.focal_length_mm / 50.0, abs=1e-3)
    assert ds.manifest.provenance["real_optics"]["lens"] == "field-corrector"
    white = read_raw_image(ds.path(ds.manifest.images[0].path), as_grey=False)
    assert 100 < white.max() < 255


def test_same_seed_same_bytes_and_boards_inside_the_lit_circle(tmp_path, small):
    """Same seed, same dataset bytes; the field-corrector lights only ~1900 px around the axis on
    the full sensor: every board node projects inside that circle, or, for a partial view, at
    least half of them."""
    cam = real_optics_camera(preset("r12-b").camera, load_lens("field-corrector"))
    renderer = RealOpticsRenderer(cam, "field-corrector", 5.66)
    radius = renderer.pose_image_radius_px
    assert radius is not None and 1500 < radius < 2100
    from plenocal.sim.dataset import plan_images
    from plenocal.sim.groundtruth import FeatureOracle
    from plenocal.sim.poses import NEAR_NODE_FRACTION

    full = preset("r12-b")
    _, poses = plan_images(full, seed=1, frames=FrameSelection.parse("calibration=4"),
                           oracle=FeatureOracle(cam.thin), camera=cam.thin, image_radius_px=radius)
    board = full.plan.board
    s, D = cam.thin.sensor.pixel_size_mm, cam.thin.sensor.distance_mm
    whole = 0
    for pose in poses.values():
        p = pose.apply(board.node_points())
        r = np.hypot(p[:, 0] / p[:, 2] * D / s, p[:, 1] / p[:, 2] * D / s)
        # a whole view inside the circle, or a partial one (near, the board outgrows it): half its nodes
        assert r.max() <= radius or np.mean(r <= radius) >= NEAR_NODE_FRACTION
        whole += r.max() <= radius
    assert whole >= 1
    small_cam = real_optics_camera(small.camera, load_lens("thin"))
    frames = FrameSelection.parse("white=1,calibration=1")
    for folder in ("a", "b"):
        simulate_dataset(small, tmp_path / folder, seed=2, rays=2, frames=frames,
                         renderer=RealOpticsRenderer(small_cam, "thin", 5.66))
    for name in ("images/white-f4.png", "images/calib-000.png", "ground_truth/optics.json", "manifest.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_bad_lens_inputs_end_in_one_line_and_exit_2(tmp_path, capsys):
    lens = tmp_path / "lens.json"
    lens.write_text(json.dumps({"format": "plenocal-lens", "version": 1, "name": "x",
                                "surfaces": [{"radius_mm": 0, "thickness_mm": 1, "stop": True}]}))
    out = tmp_path / "ds"
    cases = [
        (["--lens", str(lens)], "must be non-zero"),
        (["--lens", str(tmp_path / "missing.json")], "does not exist"),
        (["--lenslets", "thin"], "--lenslets needs --lens"),
        (["--lens", "thin", "--substrate-mm", "0.6"], "too thick"),
        (["--lens", "thin", "--clear-radius-mm", "0.5"], "exceeds half the pitch"),
        # an f/5.6 design at the preset's f/4: its whites would contradict their f-numbers
        (["--lens", "telephoto"], "cannot open to f/4"),
        (["--lens", "telephoto", "--f-number", "2.8"], "faster than the preset's f/5.66"),
        (["--lens", "telephoto", "--f-number", "11.31"], "pre-calibration needs three whites"),
    ]
    for extra, message in cases:
        code = main(["simulate", "r12-b", "--small", "-o", str(out), "--quiet", "--frames", "white=1", *extra])
        err = capsys.readouterr().err
        assert code == 2, extra
        assert message in err and err.strip().count("\n") == 0 and "Traceback" not in err, err
        assert not out.exists()


def test_cli_renders_a_slower_design_at_its_own_f_number(tmp_path):
    """``--f-number``: the telephoto (an f/5.6 design) at 5.66 on the R12-A preset (f/4): whites at
    5.66 and the preset's slower ones, the checkerboards and the true camera at 5.66; the whites' mean
    level falls as 1/N² from one to the next."""
    out = tmp_path / "ds"
    code = main(["simulate", "r12-a", "--small", "--lens", "telephoto", "--f-number", "5.66", "-o", str(out), "--rays", "2",
                 "--quiet", "--frames", "white,calibration=1", "--seed", "1", "--no-noise", "--bit-depth", "16"])
    assert code == 0
    ds = read_dataset(out)
    whites = sorted((e for e in ds.manifest.images if e.role.value == "white"), key=lambda e: e.f_number)
    assert [e.f_number for e in whites] == [5.66, 8.0, 11.31, 16.0]
    board = [e for e in ds.manifest.images if e.role.value == "calibration"]
    assert [e.f_number for e in board] == [5.66]
    assert read_camera(out / "ground_truth" / "camera.json").main_lens.f_number == 5.66
    level = [float(np.mean(ds.read_image(e))) for e in whites[:2]]
    assert level[1] / level[0] == pytest.approx((5.66 / 8.0) ** 2, rel=0.05)
