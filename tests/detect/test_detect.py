"""BAP detection on ray-traced small r12-a frames, against the model's ground truth."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.cli.main import main
from plenocal.detect.clusters import validate_clusters, virtual_depths
from plenocal.detect.pipeline import detect_frame
from plenocal.io import read_camera, read_dataset, read_observations
from plenocal.model.projection import pupil_shift
from plenocal.model.white import internal_parameters
from plenocal.sim.groundtruth import FeatureOracle
from plenocal.sim.poses import random_poses
from plenocal.sim.presets import preset
from plenocal.sim.scene import CheckerboardPlate, Scene, WhiteDiffuser
from plenocal.sim.tracer import render


@pytest.fixture(scope="module")
def frames():
    p = preset("r12-a", small=True)
    cam, board, N = p.camera, p.plan.board, p.plan.checkerboard_f_number
    oracle = FeatureOracle(cam)
    poses = random_poses(cam, board, 3, distance_range_mm=(320.0, 360.0), rng=np.random.default_rng(1), oracle=oracle)
    white = render(cam, WhiteDiffuser(), f_number=N, rays=48, seed=3, image_id=99)
    out = []
    for i, pose in enumerate(poses):
        img = render(cam, Scene((CheckerboardPlate(board, pose),)), f_number=N, rays=48, seed=3, image_id=i)
        out.append((img, oracle.board_features(board, pose, frame=i)))
    return cam, white, out


def _match(cam, det, truth):
    key = {(a, b): j for j, (a, b) in enumerate(zip(truth.k, truth.l, strict=True))}
    j = np.array([key.get((a, b), -1) for a, b in zip(det.k, det.l, strict=True)], dtype=int)
    shifted = pupil_shift(cam, np.c_[truth.u, truth.v], truth.rho, truth.k, truth.l)
    return j, shifted


def test_detected_features_agree_with_the_chief_ray_model(frames):
    """Detection inverts the pupil vignetting: positions vs the paper's chief-ray projection, ρ vs
    the model's ρ; no false detection; one target corner per cluster. Reporting the corners where
    they appear instead agrees with the first-order vignetting model, and is far from the chief
    ray (the displacement that the inversion removes)."""
    cam, white, data = frames
    omega = internal_parameters(cam)
    errs, rho_errs, seen_errs, seen_chief = [], [], [], []
    for i, (img, truth) in enumerate(data):
        det = detect_frame(img, white, grid=cam.grid, omega=omega, layout=cam.mla.types, frame=i).features
        assert len(det) > 10
        j, _ = _match(cam, det, truth)
        assert np.all(j >= 0), "a detection in a micro-image that sees no corner"
        errs.append(np.hypot(det.u - truth.u[j], det.v - truth.v[j]))
        rho_errs.append(det.rho - truth.rho[j])
        # Every cluster is one target corner.
        for c in np.unique(det.cluster):
            assert len(set(truth.node[j[det.cluster == c]])) == 1
        seen = detect_frame(img, white, grid=cam.grid, omega=omega, layout=cam.mla.types, frame=i, pupil_vignetting=False).features
        js, shifted_s = _match(cam, seen, truth)
        seen_errs.append(np.hypot(seen.u - shifted_s[js, 0], seen.v - shifted_s[js, 1]))
        seen_chief.append(np.hypot(seen.u - truth.u[js], seen.v - truth.v[js]))
    e = np.concatenate(errs)
    rms = np.sqrt(np.mean(e**2))
    print("chief-ray rms", rms, "max", e.max(), "rho rms", np.sqrt(np.mean(np.concatenate(rho_errs) ** 2)))
    assert e.max() < 0.8
    assert rms < 0.12
    assert np.sqrt(np.mean(np.concatenate(rho_errs) ** 2)) < 0.06
    s_vig = np.sqrt(np.mean(np.concatenate(seen_errs) ** 2))
    s_chief = np.sqrt(np.mean(np.concatenate(seen_chief) ** 2))
    print("as seen: vs first-order vignetting", s_vig, "vs chief ray", s_chief)
    assert s_vig < 0.3
    assert s_chief > 3 * rms
    # The independent estimator (inverting the corner estimator): chief-ray positions as well,
    # no closer to the truth than the rendered-corner fit.
    img, truth = data[0]
    inv = detect_frame(img, white, grid=cam.grid, omega=omega, layout=cam.mla.types, frame=0, fit_rendered=False).features
    ji, _ = _match(cam, inv, truth)
    assert np.all(ji >= 0)
    rms_inv = np.sqrt(np.mean(np.hypot(inv.u - truth.u[ji], inv.v - truth.v[ji]) ** 2))
    rms_0 = np.sqrt(np.mean(errs[0] ** 2))
    print("rendered fit rms", rms_0, "inversion rms", rms_inv)
    assert rms_0 < 1.1 * rms_inv


def test_virtual_depth_and_cluster_model_on_exact_projections():
    """eq:virtdepth on exact chief-ray projections gives the true υ; an off-model point is rejected."""
    cam = preset("r12-a", small=True).camera
    pt = np.array([[1.0, -0.5, 330.0]])
    oracle = FeatureOracle(cam)
    f = oracle.features(pt)
    mic = cam.grid.centres(f.k, f.l)
    labels = np.zeros(len(f), dtype=np.int64)
    uv = np.c_[f.u, f.v]
    _v_obs, v_cl = virtual_depths(uv, mic, labels, micro_image_pitch_px=cam.grid.diameter_px, lambda_=cam.lambda_)
    from plenocal.model.projection import depth_in_mla, virtual_points

    v_true = -depth_in_mla(cam, virtual_points(cam, pt))[0] / cam.d_mm
    assert v_cl[0] == pytest.approx(v_true, rel=0.01)
    uv_bad = uv.copy()
    uv_bad[0] += 3.0
    new, counts = validate_clusters(uv_bad, mic, labels, lambda_=cam.lambda_)
    assert new[0] == -1 and np.all(new[1:] == 0) and counts["observations_off_model"] == 1


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("det")
    ds = root / "ds"
    assert main(["simulate", "r12-a", "--small", "-o", str(ds), "--seed", "2", "--rays", "24",
                 "--frames", "white,devignetting,calibration=4"]) == 0
    assert main(["precalibrate", str(ds), "-o", str(ds / "precalibration"), "--no-plots"]) == 0
    return ds


def test_detect_cli_links_features_to_the_right_nodes(dataset, tmp_path, capsys):
    out = tmp_path / "det"
    assert main(["detect", str(dataset), "-o", str(out), "--overlays", "1", "--csv"]) == 0
    obs = read_observations(out / "observations.npz")
    ds = read_dataset(dataset)
    gt = read_observations(ds.path(ds.manifest.ground_truth.observations)).bap
    # every feature is the truth's view of its node through its micro-lens (near the MLA's conjugate
    # a micro-image sees two nodes: the truth has a row for each, so (frame, k, l) is no key)
    truth = set(zip(gt.frame.tolist(), gt.k.tolist(), gt.l.tolist(), gt.node.tolist(), strict=True))
    seen = list(zip(obs.bap.frame.tolist(), obs.bap.k.tolist(), obs.bap.l.tolist(), obs.bap.node.tolist(), strict=True))
    assert len(obs.bap) > 40 and all(s in truth for s in seen)
    assert len(obs.mic) > 1000
    assert (out / "bap.csv").is_file() and (out / "overlays" / "frame-000.png").is_file()
    cam = read_camera(ds.path(ds.manifest.ground_truth.camera))
    assert cam.n_types == 3


def test_detect_cli_without_precalibration_is_one_line(dataset, tmp_path, capsys):
    out = tmp_path / "det"
    assert main(["detect", str(dataset), "-o", str(out), "--precalibration", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no camera.json from pre-calibration" in err
    assert not out.exists()


def test_unfocused_camera_corners_need_no_vignetting_inversion():
    """upc-s (q ≈ 0, as pre-calibration infers for unfocused cameras): the aperture holds the
    whole lens disc, corners sit at their chief-ray positions; no NaN from R_b = 0."""
    import dataclasses

    p = preset("upc-s", small=True)
    cam, board, N = p.camera, p.plan.board, p.plan.checkerboard_f_number
    oracle = FeatureOracle(cam)
    poses = random_poses(cam, board, 1, distance_range_mm=p.plan.calibration_range_mm, rng=np.random.default_rng(2), oracle=oracle)
    white = render(cam, WhiteDiffuser(), f_number=N, rays=32, seed=3, image_id=99)
    img = render(cam, Scene((CheckerboardPlate(board, poses[0]),)), f_number=N, rays=32, seed=3, image_id=0)
    truth = oracle.board_features(board, poses[0])
    omega = dataclasses.replace(internal_parameters(cam), q_mm=(-0.0,))
    det = detect_frame(img, white, grid=cam.grid, omega=omega, layout=cam.mla.types).features
    assert len(det) > 20
    assert np.all(np.isfinite(det.u)) and np.all(np.isfinite(det.rho))
    j, _ = _match(cam, det, truth)
    assert np.all(j >= 0)
    e = np.hypot(det.u - truth.u[j], det.v - truth.v[j])
    print("upc-s small: n", len(det), "rms", np.sqrt(np.mean(e**2)), "max", e.max())
    assert np.sqrt(np.mean(e**2)) < 0.2


def test_circle_crossings_kernel_matches_the_vectorised_samples():
    """classify's numba kernel: the same crossing counts and percentile contrast as the numpy
    samples (corners._circle_crossings), on a random image with circles crossing its border."""
    from plenocal.detect._kernels import circle_crossings_kernel
    from plenocal.detect.corners import _circle_crossings

    rng = np.random.default_rng(0)
    img = rng.random((120, 160))
    cen = np.c_[rng.uniform(-5, 165, 2000), rng.uniform(-5, 125, 2000)]
    rad = rng.uniform(2, 9, 2000)
    _, n_ref, con_ref, _ = _circle_crossings(img, cen, rad, 72)
    n, con = circle_crossings_kernel(img, cen, rad, 72)
    np.testing.assert_array_equal(n, n_ref)
    np.testing.assert_allclose(con, con_ref, rtol=0, atol=1e-12)
    assert n.max() > 10  # noise: many crossings, so the comparison is not trivial
