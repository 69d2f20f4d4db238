"""Simulated datasets: poses, ground truth, sensor response, determinism, CLI."""

from __future__ import annotations

import math

import numpy as np
import pytest

from plenocal.cli.main import main
from plenocal.io import read_camera, read_dataset, read_observations, read_poses, read_raw_image
from plenocal.model import micro_image_centres, project_bap
from plenocal.model.geometry import rotvec_from_matrix
from plenocal.sim.dataset import FrameSelection, simulate_dataset
from plenocal.sim.groundtruth import FeatureOracle
from plenocal.sim.poses import NEAR_NODE_FRACTION, random_poses
from plenocal.sim.presets import PRESET_NAMES, matching_f_number, preset
from plenocal.sim.sensor import SensorResponse

FRAMES = "white=2,devignetting,calibration=2,evaluation=1,translation=2"


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory, r12a_small):
    out = tmp_path_factory.mktemp("r12a-small")
    simulate_dataset(r12a_small, out, seed=5, rays=4, frames=FrameSelection.parse(FRAMES))
    return out


def test_dataset_folder_follows_the_format(dataset_dir, r12a_small):
    ds = read_dataset(dataset_dir)
    roles = [e.role.value for e in ds.manifest.images]
    assert roles == ["white", "white", "devignetting", "calibration", "calibration", "evaluation",
                     "translation", "translation"]
    trans = ds.manifest.with_role("translation")
    assert [e.displacement_mm for e in trans] == [0.0, r12a_small.plan.translation_step_mm]
    for e in ds.manifest.images:
        img = read_raw_image(ds.path(e.path), as_grey=False)
        assert img.shape == (800, 1000) and img.dtype == np.uint8
    # Whites do not clip.
    white = read_raw_image(ds.path(ds.manifest.images[0].path), as_grey=False)
    assert 150 < white.max() < 255


def test_ground_truth_is_the_model_of_the_true_camera(dataset_dir, r12a_small):
    ds = read_dataset(dataset_dir)
    gt = ds.manifest.ground_truth
    camera = read_camera(ds.path(gt.camera))
    poses = read_poses(ds.path(gt.poses))
    obs = read_observations(ds.path(gt.observations))
    assert sorted(poses) == [0, 1, 100, 200, 201]
    assert set(np.unique(obs.bap.frame)) == set(poses)
    board = ds.manifest.target
    for frame, pose in poses.items():
        sel = obs.bap.frame == frame
        pts = pose.apply(board.node_points(obs.bap.node[sel]))
        ref = project_bap(camera, pts, obs.bap.k[sel], obs.bap.l[sel])
        np.testing.assert_allclose(ref[:, 0], obs.bap.u[sel], atol=1e-9)
        np.testing.assert_allclose(ref[:, 2], obs.bap.rho[sel], atol=1e-9)
        if frame < 200:  # free-hand frames: every node in >= 2 micro-images, or half of them (a partial view)
            assert np.mean(np.bincount(obs.bap.node[sel], minlength=board.n_nodes) >= 2) >= NEAR_NODE_FRACTION
    mic = micro_image_centres(camera, obs.mic.k, obs.mic.l)
    np.testing.assert_allclose(mic, obs.mic.uv, atol=1e-9)
    # Every feature lies inside its micro-image (radius at the checkerboard f-number).
    assert camera.main_lens.f_number == r12a_small.plan.checkerboard_f_number


def test_same_seed_same_dataset_bytes(tmp_path, dataset_dir, r12a_small):
    simulate_dataset(r12a_small, tmp_path, seed=5, rays=4, frames=FrameSelection.parse(FRAMES))
    for name in ("manifest.json", "images/calib-001.png", "images/white-f4.png",
                 "ground_truth/observations.npz", "ground_truth/poses.json"):
        assert (tmp_path / name).read_bytes() == (dataset_dir / name).read_bytes(), name


def test_random_poses_respect_the_paper_ranges(r12a_small):
    camera, plan = r12a_small.camera, r12a_small.plan
    rng = np.random.default_rng(1)
    oracle = FeatureOracle(camera)
    poses = random_poses(camera, plan.board, 4, distance_range_mm=plan.calibration_range_mm,
                         rng=rng, oracle=oracle, near_node_fraction=None)
    centre = np.array([(plan.board.columns - 1) / 2, (plan.board.rows - 1) / 2, 0]) * plan.board.square_mm
    for pose in poses:
        z = pose.apply(centre)[2]
        assert plan.calibration_range_mm[0] <= z <= plan.calibration_range_mm[1]
        normal_tilt = math.acos(pose.rotation[2, 2])
        assert normal_tilt <= math.radians(30.0) + 1e-9
        assert oracle.views_per_node(plan.board, pose).min() >= 2
        assert np.linalg.norm(rotvec_from_matrix(pose.rotation)) > 0


def test_random_poses_spread_over_the_whole_range_with_partial_views_where_the_board_outgrows_the_image(r12a_small):
    """The board's depths are uniform over the plan's range: the near half holds about half of
    them (binomial σ 10 % of 24). Drawing a depth and one placement and rejecting both, the sampler
    before 2026-11-27, put 1 of 31 there (the whole board fits the image only beyond ~290 mm of
    175–400 mm). Where no whole view is found, the frames are partial views with half the nodes
    or more."""
    camera, plan = r12a_small.camera, r12a_small.plan
    oracle = FeatureOracle(camera)
    lo, hi = preset("r12-a").plan.calibration_range_mm  # the paper's 175–400 mm
    poses = random_poses(camera, plan.board, 24, distance_range_mm=(lo, hi), rng=np.random.default_rng(7), oracle=oracle)
    centre = np.array([(plan.board.columns - 1) / 2, (plan.board.rows - 1) / 2, 0]) * plan.board.square_mm
    z = np.array([pose.apply(centre[None])[0, 2] for pose in poses])
    seen = np.array([np.mean(oracle.views_per_node(plan.board, pose) >= 2) for pose in poses])
    assert np.all((z >= lo) & (z <= hi))
    assert np.mean(z < 0.5 * (lo + hi)) >= 0.25
    partial = seen < 1.0
    assert partial.any() and np.all(seen[partial] >= 0.5)
    # partial views only where the board outgrows the image: the whole board fits it in 0.3 % of
    # the placements at 259–288 mm and in none nearer
    assert np.all(z[partial] < 290.0)
    # without partial views, the near end of the range keeps only the depths where a whole view fits
    whole = random_poses(camera, plan.board, 8, distance_range_mm=(lo, hi), rng=np.random.default_rng(7), oracle=oracle,
                         near_node_fraction=None)
    assert all(oracle.views_per_node(plan.board, pose).min() >= 2 for pose in whole)


def test_sensor_noise_statistics_and_formats():
    flat = np.full((200, 200), 0.5, dtype=np.float32)
    r = SensorResponse(bit_depth=16, read_noise=False)
    dn = r.apply(flat, seed=0, image_id=0).astype(float)
    electrons = dn / r.gain_dn_per_electron
    assert electrons.mean() == pytest.approx(0.5 * r.electrons_at_white, rel=0.01)
    assert electrons.var() == pytest.approx(0.5 * r.electrons_at_white, rel=0.05)  # Poisson
    quiet = SensorResponse(bit_depth=8, photon_noise=False, read_noise=False)
    assert np.all(quiet.apply(flat, seed=0, image_id=0) == round(0.5 * 0.85 * 255))
    bayer = SensorResponse(color="bayer-rggb", photon_noise=False, read_noise=False, channel_gains=(0.5, 1.0, 0.25))
    m = bayer.apply(np.ones((4, 4), np.float32), seed=0, image_id=0)
    assert m[0, 0] == round(0.5 * 0.85 * 255) and m[0, 1] == m[1, 0] == round(0.85 * 255)
    assert m[1, 1] == round(0.25 * 0.85 * 255)
    rgb = SensorResponse(color="rgb").apply(flat, seed=1, image_id=2)
    assert rgb.shape == (200, 200, 3)
    assert not np.array_equal(r.apply(flat, seed=0, image_id=1), r.apply(flat, seed=0, image_id=0))


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_presets_checkerboard_f_number_avoids_overlap(name):
    p = preset(name, small=True)
    cam = p.camera
    # At the checkerboard f-number the largest micro-image fits in half a pitch (paper's matching).
    oracle_radius = FeatureOracle(cam)._radius.max()
    assert oracle_radius <= cam.grid.diameter_px / 2.0 + 1e-9
    assert p.plan.checkerboard_f_number == pytest.approx(matching_f_number(cam, standard=(
        p.plan.white_f_numbers if name != "upc-s" else None)))
    assert cam.sensor.width_px <= 1000 and cam.sensor.height_px <= 800


def test_cli_simulate_writes_a_readable_dataset(tmp_path, capsys):
    out = tmp_path / "ds"
    code = main(["simulate", "kep-3", "--small", "-o", str(out), "--rays", "2", "--quiet",
                 "--frames", "white=1,calibration=1", "--bit-depth", "16", "--color", "bayer-rggb"])
    assert code == 0
    ds = read_dataset(out)
    assert ds.manifest.image_format.bit_depth == 16
    assert ds.manifest.image_format.color == "bayer-rggb"
    assert len(ds.manifest.images) == 2
    assert main(["simulate", "r12-a", "-o", str(out), "--frames", "bogus"]) == 2
    assert "unknown role 'bogus'" in capsys.readouterr().err


def test_r12a_preset_is_the_reference_camera(r12a_camera):
    """With the paper's tilt, the r12-a preset is the reference's intrinsics.js camera (its
    micro-image grid recomputed from its MLA)."""
    cam = preset("r12-a", tilt_scale=1.0).camera
    r12a_camera = r12a_camera.with_consistent_mia().replace(rho_form=cam.rho_form)
    k, l = cam.mla.lattice.all_indices()
    np.testing.assert_allclose(micro_image_centres(cam, k, l), micro_image_centres(r12a_camera, k, l), atol=1e-6)
    assert cam.d_mm == pytest.approx(r12a_camera.d_mm, abs=1e-12)
    p = np.array([[37.72664, -3.23458, 241.78777]])
    np.testing.assert_allclose(project_bap(cam, p, [156], [69]), project_bap(r12a_camera, p, [156], [69]), atol=1e-6)


@pytest.mark.parametrize("name", ["r12-a", "r12-b", "r12-c", "upc-s"])
@pytest.mark.parametrize("small", [False, True])
def test_presets_are_labelled_like_precalibration_indexes_them(name, small):
    """Pre-calibration's grid fit on the true micro-image centres gives the presets' own labels."""
    from plenocal.model import micro_image_centres
    from plenocal.precalib.grid import fit_grid
    from plenocal.sim.presets import preset

    cam = preset(name, small=small).camera
    k, l = cam.mla.lattice.all_indices()
    c = micro_image_centres(cam, k, l)
    r = cam.grid.diameter_px / 2
    W, H = cam.sensor.width_px, cam.sensor.height_px
    vis = (c[:, 0] - r >= 0) & (c[:, 0] + r <= W - 1) & (c[:, 1] - r >= 0) & (c[:, 1] + r <= H - 1)
    fit = fit_grid(c[vis], cam.mla.lattice, (H, W))
    truth = {tuple(np.round(p, 6)): (a, b) for p, a, b in zip(c[vis], k[vis], l[vis], strict=True)}
    wrong = sum(truth[tuple(np.round(p, 6))] != (a, b) for p, a, b in zip(fit.uv, fit.k, fit.l, strict=True))
    assert wrong == 0 and len(fit.uv) == vis.sum()


def test_extrapolation_frames_lie_beyond_the_calibrated_depths():
    """``FrameSelection.extrapolation`` (``simulate --extrapolation 0.7,1.5``): two held-out frames
    at 0.7× the nearest and two at 1.5× the farthest calibration depth, each showing at least half
    of its nodes in two micro-images or more."""
    import dataclasses

    from plenocal.sim.dataset import EXTRAPOLATION_DEPTH_SPREAD, plan_images
    from plenocal.sim.poses import board_centre

    p = preset("r12-a", tilt_scale=1.0)
    frames = dataclasses.replace(FrameSelection.parse("calibration=6"), extrapolation=(0.7, 1.5))
    oracle = FeatureOracle(p.camera)
    jobs, poses = plan_images(p, seed=3, frames=frames, oracle=oracle)
    depth = {f: float((q.translation + q.rotation @ board_centre(p.plan.board))[2]) for f, q in poses.items()}
    cal = [depth[f] for f in range(6)]
    assert sorted(f for f in poses if f >= 100) == [180, 181, 182, 183]
    assert {j.entry.role.value for j in jobs if j.entry.frame in (180, 181, 182, 183)} == {"evaluation"}
    for f, target in ((180, 0.7 * min(cal)), (181, 0.7 * min(cal)), (182, 1.5 * max(cal)), (183, 1.5 * max(cal))):
        assert abs(depth[f] / target - 1.0) <= EXTRAPOLATION_DEPTH_SPREAD + 1e-9
        assert np.mean(oracle.views_per_node(p.plan.board, poses[f]) >= 2) >= 0.5


def test_cli_extrapolation_option_is_checked(tmp_path, capsys):
    assert main(["simulate", "r12-a", "--small", "--extrapolation", "1.2,1.5", "-o", str(tmp_path / "s")]) == 2
    assert "NEAR must be in 0.1..1" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def _two_node_share(camera, board, z_mm, tilt_rad):
    """Share of the true features in micro-images that see two nodes, the board at z_mm, tilted."""
    from plenocal.model.geometry import Pose, rodrigues
    from plenocal.sim.poses import board_centre

    R = rodrigues([tilt_rad, 0.0, 0.0])
    f = FeatureOracle(camera).board_features(board, Pose(R, np.array([0.0, 0.0, z_mm]) - R @ board_centre(board)), frame=0)
    _, inverse, counts = np.unique(np.c_[f.k, f.l], axis=0, return_inverse=True, return_counts=True)
    return float(np.mean(counts[inverse.ravel()] > 1))


def test_the_small_crop_calibrates_where_its_board_shows_one_corner_per_micro_image(r12a_small):
    """The crop's half-size squares put two corners in most micro-images near the camera (the full
    board, none): its calibration frames start at 300 mm, not at the paper's 175 mm."""
    full = preset("r12-a")
    assert r12a_small.plan.calibration_range_mm == (300.0, 400.0)
    assert full.plan.calibration_range_mm == (175.0, 400.0)
    assert _two_node_share(r12a_small.camera, r12a_small.plan.board, 250.0, 0.0) > 0.3
    assert _two_node_share(full.camera, full.plan.board, 175.0, 0.0) == 0.0
    for z, most in ((300.0, 0.2), (310.0, 0.05), (320.0, 0.0), (350.0, 0.0), (390.0, 0.0)):
        for tilt in (0.0, math.radians(30.0)):
            assert _two_node_share(r12a_small.camera, r12a_small.plan.board, z, tilt) <= most
