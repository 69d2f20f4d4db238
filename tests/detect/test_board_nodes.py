"""Board corners near the MLA's conjugate plane, seen in one to three micro-images: predicted from
a camera and a board pose, fitted there and linked by node (issue 24). Small r12-a renders (24
rays) of a 5 × 4 board at fractions of the conjugate distance z_c (the object distance imaged on
the MLA); the simulator's oracle gives each node's true micro-images."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from plenocal.calib.extrinsics import initial_extrinsics
from plenocal.detect.nodes import MAX_BOARD_DISTANCE_FRACTION, RESOLVABLE_BLUR_FRACTION, detect_board_nodes
from plenocal.detect.pipeline import detect_frame, frame_micro_images
from plenocal.model.geometry import Pose, rodrigues
from plenocal.model.observations import BapFeatures
from plenocal.model.profile import mla_to_object_mm
from plenocal.model.projection import project_bap
from plenocal.model.target import Checkerboard
from plenocal.model.white import internal_parameters
from plenocal.sim.groundtruth import FeatureOracle
from plenocal.sim.presets import preset
from plenocal.sim.scene import CheckerboardPlate, Scene, WhiteDiffuser
from plenocal.sim.tracer import render

BOARD = Checkerboard(5, 4, 4.0, border_mm=4.0)
N = 4.0
FRACTIONS = (0.9, 0.93, 0.95, 0.97, 1.0, 1.1)
"""Board distances as fractions of z_c. At 0.93 z_c the detector's clusters cover part of the
board (the issue's partial lattice); from 0.95 z_c on it finds no cluster at all; at z_c a corner
on the MLA fills its micro-lens uniformly, beyond it the blur (|ρ| ≥ 10 px) exceeds the disc."""


def pose_at(z: float) -> Pose:
    R = rodrigues(np.radians(3.0) * np.array([0.0, 0.0, 1.0])) @ rodrigues(np.radians(5.0) * np.array([1.0, 0.0, 0.0]))
    centre = np.array([(BOARD.columns - 1) * BOARD.square_mm / 2, (BOARD.rows - 1) * BOARD.square_mm / 2, 0.0])
    return Pose(R, np.array([0.5, 0.0, z]) - R @ centre)


@pytest.fixture(scope="module")
def scenes():
    cam = preset("r12-a", small=True).camera
    omega = internal_parameters(cam)
    white = render(cam, WhiteDiffuser(), f_number=N, rays=24, seed=5, image_id=99)
    zc = float(mla_to_object_mm(cam, 0.0))
    out, raw = {}, {"white": white}
    for i, f in enumerate(FRACTIONS):
        pose = pose_at(f * zc)
        img = render(cam, Scene((CheckerboardPlate(BOARD, pose),), background=0.0), f_number=N, rays=24, seed=5, image_id=i)
        det = detect_frame(img, white, grid=cam.grid, omega=omega, layout=cam.mla.types, frame=i)
        dv, micro = frame_micro_images(img, white, grid=cam.grid, omega=omega, layout=cam.mla.types)
        out[f] = (pose, det, dv, micro)
        raw[f] = img
    return cam, out, raw


def visible_views(cam, pose, micro) -> set[tuple[int, int]]:
    """(node, micro-image) of the true views a detector can resolve (:data:`RESOLVABLE_BLUR_FRACTION`)."""
    truth = FeatureOracle(cam).board_features(BOARD, pose)
    lut = {(int(k), int(l)): i for i, (k, l) in enumerate(zip(micro.k, micro.l, strict=True))}
    idx = np.array([lut.get((int(k), int(l)), -1) for k, l in zip(truth.k, truth.l, strict=True)], dtype=np.int64)
    on = np.isin(idx, micro.on_idx)
    shifted = project_bap(cam, pose.apply(BOARD.node_points(truth.node)), truth.k, truth.l, pupil_vignetting=True)
    disc = micro.usable[idx] - 1.0
    inside = on & (np.hypot(*(shifted[:, :2] - micro.centres[idx]).T) <= disc)
    sharp = np.abs(truth.rho) <= RESOLVABLE_BLUR_FRACTION * disc
    keep = inside & sharp
    return {(int(n), int(i)) for n, i in zip(truth.node[keep], idx[keep], strict=True)}


def _node_of(micro, feats: BapFeatures, cam, pose) -> np.ndarray:
    truth = FeatureOracle(cam).board_features(BOARD, pose)
    key = {(int(k), int(l)): int(n) for k, l, n in zip(truth.k, truth.l, truth.node, strict=True)}
    return np.array([key.get((int(k), int(l)), -1) for k, l in zip(feats.k, feats.l, strict=True)], dtype=np.int64)


def test_a_partial_lattice_is_completed_by_node(scenes):
    """0.93 z_c: the clusters link to part of the board; the pose they give predicts the rest,
    found in one to three micro-images each, every one with its true node."""
    cam, out, _ = scenes
    pose_true, det, dv, micro = out[0.93]
    ext = initial_extrinsics(cam, det.features, BOARD, max_rmse_fraction=0.1, views={int(det.features.frame[0]): det.view})
    rec = ext.frames[0]
    assert rec.ok, rec.reason
    known = ext.bap.select(ext.bap.node >= 0)
    assert 4 <= len(np.unique(known.node)) < BOARD.n_nodes, "premise: a partial lattice"
    nd = detect_board_nodes(dv, micro, camera=cam, cam_from_world=rec.pose, board=BOARD, known=known,
                            rms_bound=det.rms_bound, pitch_px=cam.grid.diameter_px, frame=0)
    wanted = {n for n, _ in visible_views(cam, pose_true, micro)} - set(known.node.tolist())
    assert wanted, "premise: nodes left to find"
    found = set(nd.fitted_node.tolist())
    assert wanted <= found
    true_fit = {(int(n), int(i)) for n, i in visible_views(cam, pose_true, micro)}
    assert all((int(n), int(i)) in true_fit for n, i in zip(nd.fitted_node, nd.fitted_index, strict=True))
    assert np.array_equal(_node_of(micro, nd.features, cam, pose_true), nd.features.node)
    assert nd.counts["nodes_added"] >= 1 and len(nd.features) >= 2
    # The added features are chief-ray positions near the model's (prediction error ≪ a pixel at the true pose).
    pred = project_bap(cam, pose_true.apply(BOARD.node_points(nd.features.node)), nd.features.k, nd.features.l)
    assert np.median(np.hypot(nd.features.u - pred[:, 0], nd.features.v - pred[:, 1])) < 0.5


@pytest.mark.parametrize("fraction", FRACTIONS)
def test_every_visible_corner_is_found_with_its_node(scenes, fraction):
    """At and around z_c, from a pose 0.3 mm / 0.1° off the truth: every resolvable true view of
    every node is fitted and labelled with its node; nothing else."""
    cam, out, _ = scenes
    pose_true, det, dv, micro = out[fraction]
    pose = Pose(pose_true.rotation @ rodrigues(np.radians([0.1, -0.05, 0.05])), pose_true.translation + np.array([0.1, -0.1, 0.3]))
    nd = detect_board_nodes(dv, micro, camera=cam, cam_from_world=pose, board=BOARD, known=BapFeatures.empty(),
                            rms_bound=det.rms_bound, pitch_px=cam.grid.diameter_px, frame=0)
    visible = visible_views(cam, pose_true, micro)
    if fraction <= 0.95:  # (premise) beyond, no corner is sharp enough to see: nothing may be linked
        per_node = np.bincount([n for n, _ in visible], minlength=BOARD.n_nodes)
        assert (per_node > 0).sum() >= 12
        if fraction == 0.95:
            assert per_node.max() <= 3
    fitted = {(int(n), int(i)) for n, i in zip(nd.fitted_node, nd.fitted_index, strict=True)}
    assert {n for n, _ in visible} <= {n for n, _ in fitted}
    truth_nodes = _node_of(micro, BapFeatures(frame=np.zeros(len(nd.fitted_index)), k=micro.k[nd.fitted_index],
                                               l=micro.l[nd.fitted_index], u=nd.fitted_uv[:, 0], v=nd.fitted_uv[:, 1],
                                               rho=np.zeros(len(nd.fitted_index))), cam, pose_true)
    assert np.array_equal(truth_nodes, nd.fitted_node)
    assert np.array_equal(_node_of(micro, nd.features, cam, pose_true), nd.features.node)


@pytest.mark.parametrize("whole_board_in_view", [True, False])
def test_a_frame_without_clusters_is_linked_by_its_lone_corners(scenes, monkeypatch, whole_board_in_view):
    """0.95 z_c: too few clusters for a pose (one of two corners), the other corners each in one
    micro-image. The board's inner corners in the scene view (the whole board in view), or else
    (the view's pattern not found, as for a partial board) the lone corners' micro-image
    centres, make a lattice that the image places; its pose predicts the nodes, and those fitted
    in two or more micro-images are the frame's features, each on its true node."""
    import plenocal.detect.view
    from plenocal.cli.detect import MIN_LONE_FEATURE_NODES, link_frame

    cam, out, _ = scenes
    pose_true, det, dv, micro = out[0.95]
    assert len(np.unique(det.features.cluster)) < 4 and len(det.lone_index) >= 12  # the premise
    if not whole_board_in_view:
        monkeypatch.setattr(plenocal.detect.view, "board_corners", lambda *_a, **_k: None)
    feats, r, few, record = link_frame(replace(det, devignetted=dv, micro=micro), 0, camera=cam, board=BOARD, fit_rendered=True)
    assert r is not None and r.ok and r.image_decided and few is None, r.reason
    assert ("inner corners in its scene view" if whole_board_in_view else "lone corners") in r.note and record["action"] == "predicted"
    assert np.all(feats.node >= 0) and len(np.unique(feats.node)) >= MIN_LONE_FEATURE_NODES
    assert np.array_equal(_node_of(micro, feats, cam, pose_true), feats.node)
    # Most of its nodes show in one micro-image: single views, (u, v) the chief ray's (ρ unobserved).
    single = feats.select(~feats.has_rho)
    assert len(single) >= 4 and f"{len(single)} of them seen in one micro-image" in r.note
    assert len(np.unique(single.node)) == len(single)
    truth = project_bap(cam, pose_true.apply(BOARD.node_points(single.node)), single.k, single.l)
    assert np.median(np.hypot(single.u - truth[:, 0], single.v - truth[:, 1])) < 0.45  # 0.33 (0.88 px without posing it again)


@pytest.mark.parametrize("whole_board_in_view", [True, False])
@pytest.mark.parametrize(("fraction", "image_id"), [(0.94, 10), (0.945, 12)])
def test_a_few_clusters_are_linked_with_the_lone_corners(scenes, monkeypatch, fraction, image_id, whole_board_in_view):
    """0.94 and 0.945 z_c: a handful of clusters (6 and 4 with these seeds) that link to nothing by
    themselves (a lattice needs more, or they make none), and lone corners outnumbering them. The
    clusters' barycentres and the scene view's inner corners (or, the view's pattern not found,
    the lone corners' centres) link together; the image places them, the
    clusters keep their features by node and the pose adds the nodes fitted in two or more
    micro-images — every feature on its true node (the oracle's node of its micro-lens)."""
    import plenocal.detect.view
    from plenocal.cli.detect import MIN_LONE_FEATURE_NODES, link_frame

    if not whole_board_in_view:
        monkeypatch.setattr(plenocal.detect.view, "board_corners", lambda *_a, **_k: None)

    cam, _, raw = scenes
    omega = internal_parameters(cam)
    pose_true = pose_at(fraction * float(mla_to_object_mm(cam, 0.0)))
    img = render(cam, Scene((CheckerboardPlate(BOARD, pose_true),), background=0.0), f_number=N, rays=24, seed=5, image_id=image_id)
    det = detect_frame(img, raw["white"], grid=cam.grid, omega=omega, layout=cam.mla.types, frame=0, keep_images=True)
    n_clusters = len(np.unique(det.features.cluster))
    alone = initial_extrinsics(cam, det.features, BOARD, max_rmse_fraction=0.1, views={0: det.view}).frames[0]
    assert n_clusters >= 4 and not alone.ok and len(det.lone_index) > n_clusters, alone.reason  # the premise
    feats, r, few, record = link_frame(det, 0, camera=cam, board=BOARD, fit_rendered=True)
    assert r is not None and r.ok and r.image_decided and few is None, r.reason
    assert f"and {n_clusters} clusters" in r.note and record["action"] == "predicted"
    assert ("inner corners in its scene view" if whole_board_in_view else "lone corners") in r.note
    assert np.all(feats.node >= 0) and len(np.unique(feats.node)) >= MIN_LONE_FEATURE_NODES
    multi = feats.has_rho  # each node with a ρ seen in two or more micro-images; the others once (single views)
    assert np.all(np.bincount(feats.node[multi])[np.unique(feats.node[multi])] >= 2)
    single = feats.node[~multi]
    assert len(np.unique(single)) == len(single) and not np.isin(single, feats.node[multi]).any()
    assert np.isin(det.features.u, feats.u).sum() >= 2  # the clusters' own features kept
    assert np.array_equal(_node_of(det.micro, feats, cam, pose_true), feats.node)
    # A lone corner in a cluster's own micro-image is that cluster's node, not a point of its own.
    member = np.flatnonzero((det.micro.k == det.features.k[0]) & (det.micro.l == det.features.l[0]))
    again, r2, _, _ = link_frame(replace(det, lone_index=np.concatenate([det.lone_index, member])), 0, camera=cam, board=BOARD,
                                 fit_rendered=True)
    assert r2 is not None and r2.ok and r2.note.split(',')[0] == r.note.split(',')[0] and np.array_equal(again.node, feats.node)


def test_single_views_need_a_camera_that_explains_them(scenes):
    """0.95 z_c with F 1 % and 2 % off: the pose that best explains where its single corners
    appear leaves them σ̂ 2.6 and 2.5 px off (0.23 px with the true camera), beyond
    SINGLE_VIEW_MAX_RMS_PX: none becomes a feature. At 1 % the frame keeps its nodes seen twice;
    at 2 % too few are left and it is refused, saying why and that the calibrated camera tries again."""
    import dataclasses

    from plenocal.cli.detect import link_frame
    from plenocal.detect.nodes import SINGLE_VIEW_MAX_RMS_PX

    cam, out, _ = scenes
    _pose, det, dv, micro = out[0.95]
    lens = cam.main_lens
    for scale, linked in ((1.01, True), (1.02, False)):
        off = cam.replace(main_lens=dataclasses.replace(lens, focal_length_mm=lens.focal_length_mm * scale))
        feats, r, _few, record = link_frame(replace(det, devignetted=dv, micro=micro), 0, camera=off, board=BOARD, fit_rendered=True)
        assert record["single_views"] == 0 and record["single_views_refused"] >= 10
        assert record["single_views_sigma_px"] > 1.5 * SINGLE_VIEW_MAX_RMS_PX
        assert r is not None and r.ok == linked, r.reason
        if linked:
            assert len(feats) and np.all(feats.has_rho)
        else:
            assert "fitted in one micro-image left out" in r.reason and "calibrated camera tries them again" in r.reason


def test_a_lone_lattice_refused_for_its_single_views_is_posed_again_with_a_better_camera(scenes):
    """The second pass's path for a frame refused that way: the first pass (F 2 % off) keeps its
    lone corners' lattice in its record (each point's node and position); posed again from it with
    the right camera, without detecting the frame again, it gives single views on their true nodes."""
    import dataclasses

    from plenocal.cli.detect import MIN_LONE_FEATURE_NODES, _repose_lone_lattice, link_frame

    cam, out, _ = scenes
    pose_true, det, dv, micro = out[0.95]
    lens = cam.main_lens
    off = cam.replace(main_lens=dataclasses.replace(lens, focal_length_mm=lens.focal_length_mm * 1.02))
    _feats, r, _few, record = link_frame(replace(det, devignetted=dv, micro=micro), 0, camera=off, board=BOARD, fit_rendered=True)
    assert r is not None and not r.ok and len(record["lone_links"]) >= 12
    feats, rec2 = _repose_lone_lattice(0, record["lone_links"], calibrated=cam, board=BOARD, micro=micro, devignetted=lambda _i: dv,
                                       rms_bound=det.rms_bound, pitch_px=cam.grid.diameter_px, fit_rendered=True)
    assert "posed with the calibrated camera" in rec2["action"] and rec2["single_views"] >= 10
    assert len(np.unique(feats.node)) >= MIN_LONE_FEATURE_NODES
    assert np.array_equal(_node_of(micro, feats, cam, pose_true), feats.node)
    single = feats.select(~feats.has_rho)
    truth = project_bap(cam, pose_true.apply(BOARD.node_points(single.node)), single.k, single.l)
    assert np.median(np.hypot(single.u - truth[:, 0], single.v - truth[:, 1])) < 0.45


def test_lone_corners_that_give_too_few_nodes_are_refused_with_the_reason(scenes):
    """0.97 z_c: the lone corners still link, but no node's corner is sharp enough to fit where the
    pose predicts it (|ρ| 10.8 px of an 8.5 px disc, :data:`RESOLVABLE_BLUR_FRACTION`), even in one
    micro-image: refused, and the reason says so. The scene view's corners link the frame too (all
    20 nodes, where the lone corners place fewer, to a pitch): its lattice is the one kept for the
    second pass."""
    from plenocal.cli.detect import link_frame

    cam, out, _ = scenes
    _pose, det, dv, micro = out[0.97]
    feats, r, _few, _record = link_frame(replace(det, devignetted=dv, micro=micro), 0, camera=cam, board=BOARD, fit_rendered=True)
    assert r is not None and not r.ok and "0 nodes predicted from their pose were fitted" in r.reason
    assert "in its scene view linked (20 nodes)" in r.reason and "blurred over |ρ|" in r.reason, r.reason
    assert not np.any(feats.node >= 0) and len(_record["lone_links"]) == BOARD.n_nodes


def test_a_pose_off_by_a_fraction_of_a_square_links_nothing(scenes):
    """A pose 0.3 or 0.5 square off along the board's x axis: nothing is linked (the fits either
    fail from their start or their rays miss the nodes, :data:`MAX_BOARD_DISTANCE_FRACTION`)."""
    cam, out, _ = scenes
    pose_true, det, dv, micro = out[0.93]
    for fraction in (0.3, 0.5):
        shift = pose_true.rotation @ np.array([fraction * BOARD.square_mm, 0.0, 0.0])
        pose = Pose(pose_true.rotation, pose_true.translation + shift)
        nd = detect_board_nodes(dv, micro, camera=cam, cam_from_world=pose, board=BOARD, known=BapFeatures.empty(),
                                rms_bound=det.rms_bound, pitch_px=cam.grid.diameter_px, frame=0)
        assert nd.counts["views_predicted"] >= 20
        assert nd.counts["views_fitted"] == 0 and len(nd.features) == 0


def test_rays_meet_the_board_at_their_node_and_a_square_from_the_next(scenes):
    """The back-projection behind the bound: true chief rays meet the true board at their nodes;
    measured against the neighbouring node they are a square away, four times the bound."""
    from plenocal.detect.nodes import board_points
    from plenocal.model.projection import virtual_points

    cam, out, _ = scenes
    for fraction in (0.9, 0.95):
        pose = out[fraction][0]
        truth = FeatureOracle(cam).board_features(BOARD, pose)
        z = virtual_points(cam, pose.apply(BOARD.node_points(truth.node)))[:, 2]
        xy = board_points(cam, pose, truth.uv, truth.k, truth.l, z)
        own = np.hypot(*(xy - BOARD.node_points(truth.node)[:, :2]).T) / BOARD.square_mm
        assert np.max(own) < 1e-6
        neighbour = np.where(truth.node % BOARD.columns == BOARD.columns - 1, truth.node - 1, truth.node + 1)
        other = np.hypot(*(xy - BOARD.node_points(neighbour)[:, :2]).T) / BOARD.square_mm
        assert np.all(other > 0.99) and np.all(other > 3.9 * MAX_BOARD_DISTANCE_FRACTION)


def test_nodes_beyond_the_central_view_are_completed(scenes):
    """A board at 0.6 z_c whose last column lies a tenth of a spacing (17 px) beyond the central
    view's right edge (the pinhole through the main-lens centre): the micro-images along the
    border still see that column (5–12 resolvable views per node), and the completion of a frame
    whose every other node is linked (``plenocal detect``'s ``complete_frame_nodes``, true pose)
    adds it with its true node ids. It used to count only nodes inside the central view as
    missing, and called such a frame complete (R12-C: a cut row seen by 15–38 whole micro-images
    and left out)."""
    from plenocal.calib.extrinsics import project_pinhole
    from plenocal.cli.detect import complete_frame_nodes

    cam, _, _ = scenes
    omega = internal_parameters(cam)
    white = render(cam, WhiteDiffuser(), f_number=N, rays=24, seed=5, image_id=99)
    zc = float(mla_to_object_mm(cam, 0.0))
    pose = pose_at(0.6 * zc)
    last = np.flatnonzero(np.arange(BOARD.n_nodes) % BOARD.columns == BOARD.columns - 1)
    uv = project_pinhole(cam, pose, BOARD.node_points())
    spacing = np.median(np.diff(uv[: BOARD.columns, 0]))
    shift_px = (cam.sensor.width_px - 1 + 0.1 * spacing) - np.min(uv[last, 0])
    f_px = cam.sensor.distance_mm / cam.sensor.pixel_size_mm
    t = pose.translation + np.array([shift_px * pose.translation[2] / f_px, 0.0, 0.0])
    pose = Pose(pose.rotation, t)
    assert np.all(project_pinhole(cam, pose, BOARD.node_points(last))[:, 0] > cam.sensor.width_px - 1), "premise: cut off"
    img = render(cam, Scene((CheckerboardPlate(BOARD, pose),), background=0.0), f_number=N, rays=24, seed=5, image_id=7)
    det = detect_frame(img, white, grid=cam.grid, omega=omega, layout=cam.mla.types, frame=0, keep_images=True)
    micro = det.micro
    # the frame as a first pass leaves it when every node inside the central view is linked (the
    # oracle's resolvable views of those nodes), the cut column not
    inside = np.flatnonzero(~np.isin(np.arange(BOARD.n_nodes), last))
    visible = visible_views(cam, pose, micro)
    oracle = FeatureOracle(cam).board_features(BOARD, pose, frame=0)
    lut = {(int(k), int(l)): i for i, (k, l) in enumerate(zip(micro.k, micro.l, strict=True))}
    resolvable = np.array([(int(n), lut.get((int(k), int(l)), -1)) in visible
                           for n, k, l in zip(oracle.node, oracle.k, oracle.l, strict=True)], dtype=bool)
    known = oracle.select(resolvable & np.isin(oracle.node, inside))
    per_node = np.bincount([n for n, _ in visible], minlength=BOARD.n_nodes)
    beyond = [int(n) for n in last if per_node[n] >= 2]
    assert beyond, "premise: the border's micro-images see some of the cut column"
    added, record = complete_frame_nodes(0, pose, known, camera=cam, board=BOARD, micro=micro, devignetted=lambda _index: det.devignetted,
                                         rms_bound=det.rms_bound, pitch_px=cam.grid.diameter_px, fit_rendered=True)
    assert record["action"] == "predicted" and record["missing_in_view"] >= len(beyond), record
    assert set(beyond) <= set(added.node.tolist()), record
    # at 0.6 z_c a micro-image sees several nodes: each added feature is its node's true projection
    # through its own lens, not a neighbour's
    assert np.array_equal(_nearest_node(cam, pose, added), added.node)


def _nearest_node(cam, pose, feats: BapFeatures, *, within_px: float = 1.5) -> np.ndarray:
    """Per feature, the node whose true projection through the feature's micro-lens is nearest its
    (u, v) (−1 beyond ``within_px``)."""
    nodes = np.arange(BOARD.n_nodes)
    pts = pose.apply(BOARD.node_points(nodes))
    k = np.repeat(feats.k, len(nodes))
    l = np.repeat(feats.l, len(nodes))
    proj = project_bap(cam, np.tile(pts, (len(feats.k), 1)), k, l)[:, :2].reshape(len(feats.k), len(nodes), 2)
    d = np.hypot(proj[..., 0] - feats.u[:, None], proj[..., 1] - feats.v[:, None])
    best = np.argmin(d, axis=1)
    return np.where(d[np.arange(len(best)), best] <= within_px, best, -1)


def test_micro_image_index_finds_each_lens_or_minus_one():
    """The vectorised (k, l) lookup agrees with a dictionary's, negative indices and absent lenses
    included."""
    from plenocal.detect.nodes import micro_image_index

    rng = np.random.default_rng(3)
    k = rng.permutation(np.repeat(np.arange(-5, 60), 3))
    l = rng.integers(-3, 40, k.size)
    pairs = {(int(a), int(b)) for a, b in zip(k, l, strict=True)}
    k, l = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    kq = np.concatenate([k[::7], [1000, -6]])
    lq = np.concatenate([l[::7], [0, 0]])
    lut = {(int(a), int(b)): i for i, (a, b) in enumerate(zip(k, l, strict=True))}
    expected = [lut.get((int(a), int(b)), -1) for a, b in zip(kq, lq, strict=True)]
    np.testing.assert_array_equal(micro_image_index(k, l, kq, lq), expected)
    assert micro_image_index(k[:0], l[:0], kq, lq).tolist() == [-1] * len(kq)


@pytest.mark.parametrize("fraction", (0.9, 0.93))
def test_nodes_fitted_in_their_micro_images_alone_are_the_same(scenes, fraction):
    """The second pass devignettes only the micro-images :func:`views_to_fit` lists
    (:func:`~plenocal.detect.pipeline.devignette_micro_images`, micro-images set up from the white's
    weight alone): every fit, count and feature is the same bytes as with the whole devignetted
    image, and so with the prediction handed over (``views``)."""
    from plenocal.detect.corners import white_weight
    from plenocal.detect.nodes import predict_node_views, views_to_fit
    from plenocal.detect.pipeline import devignette_micro_images, micro_images

    cam, out, raw = scenes
    _, det, dv, micro = out[fraction]
    ext = initial_extrinsics(cam, det.features, BOARD, max_rmse_fraction=0.1, views={int(det.features.frame[0]): det.view})
    known = ext.bap.select(ext.bap.node >= 0)
    args = {"camera": cam, "cam_from_world": ext.frames[0].pose, "board": BOARD, "known": known,
            "rms_bound": det.rms_bound, "pitch_px": cam.grid.diameter_px, "frame": 0}
    whole = detect_board_nodes(dv, micro, **args)
    assert whole.counts["views_predicted"] >= 5, "premise: views to fit"
    lean = micro_images(white_weight(raw["white"]), grid=cam.grid, omega=internal_parameters(cam), layout=cam.mla.types)
    assert lean.weight.tobytes() == micro.weight.tobytes()
    views = predict_node_views(cam, args["cam_from_world"], BOARD, micro=lean,
                               nodes=np.setdiff1d(np.arange(BOARD.n_nodes), known.node))
    part = devignette_micro_images(raw[fraction], raw["white"], lean, np.unique(views_to_fit(views, lean, known).index))
    assert np.count_nonzero(part) < 0.2 * np.count_nonzero(dv), "premise: a few micro-images"
    alone = detect_board_nodes(part, lean, **args, views=views)
    assert alone.counts == whole.counts
    for name in ("fitted_node", "fitted_index", "fitted_uv", "board_offset"):
        assert getattr(alone, name).tobytes() == getattr(whole, name).tobytes(), name
    for name in ("frame", "k", "l", "u", "v", "rho", "node", "cluster"):
        assert getattr(alone.features, name).tobytes() == getattr(whole.features, name).tobytes(), name
    if fraction == 0.93:
        assert len(whole.features) >= 2, "premise: features added, not only single views"


def test_a_frame_calibration_did_not_pose_gets_its_pose_from_its_linked_features():
    """The second pass completes evaluation and translation frames too: their pose comes from their
    own linked features with the calibrated camera fixed (``plenocal detect``'s ``frame_pose``),
    here the truth's features of a board at 0.7 z_c with 2 % of (u, v) noise in px: within a
    tenth of a millimetre and a milliradian of the true pose; none without features."""
    from plenocal.cli.detect import frame_pose

    cam = preset("r12-a", small=True).camera
    pose = pose_at(0.7 * float(mla_to_object_mm(cam, 0.0)))
    feats = FeatureOracle(cam).board_features(BOARD, pose, frame=200)
    rng = np.random.default_rng(0)
    feats = replace(feats, u=feats.u + rng.normal(0.0, 0.02, len(feats.u)), v=feats.v + rng.normal(0.0, 0.02, len(feats.v)))
    got = frame_pose(cam, feats, BOARD, 200)
    assert got is not None
    assert np.max(np.abs(got.translation - pose.translation)) < 0.1
    angle = np.arccos(np.clip((np.trace(got.rotation.T @ pose.rotation) - 1.0) / 2.0, -1.0, 1.0))
    assert angle < 1e-3
    assert frame_pose(cam, feats, BOARD, 201) is None


def test_a_frame_linked_in_the_second_pass_is_reported_linked():
    """detection.json's linking record of a frame the first pass refused and the second linked:
    marked linked (the report lists frames left out from it), its first reason kept, its single
    views counted."""
    from plenocal.cli.detect import _count_second_pass

    rec = {"linking": {"ok": False, "reason": "no features; 26 lone corners ...", "linked_features": 0, "single_views": 0},
           "second_pass": {"action": "its lone corners' lattice posed with the calibrated camera; predicted"}}
    added = BapFeatures(frame=np.full(3, 5), k=np.arange(3), l=np.arange(3), u=np.zeros(3), v=np.zeros(3),
                        rho=np.array([np.nan, np.nan, 1.5]), node=np.arange(3), cluster=np.full(3, -1))
    _count_second_pass(rec, added, refused=True, typed=True)
    link = rec["linking"]
    assert link["ok"] and link["reason"] == "" and link["first_pass_reason"].startswith("no features")
    assert link["linked_features"] == 3 and link["single_views"] == 2 and "second pass" in link["note"]


def test_a_frame_refused_again_is_reported_with_the_second_pass_reason():
    """A frame both passes refused: its linking record gives the second pass's reason (the
    calibrated camera's: the report lists frames left out with it), the first's kept."""
    from plenocal.cli.detect import _refused_again

    rec = {"linking": {"ok": False, "reason": "no features; 45 of the board's inner corners in its scene view linked ..."}}
    _refused_again(rec, "its lattice posed with the calibrated camera, 0 nodes fitted (need >= 4); its nodes' corners are blurred")
    link = rec["linking"]
    assert not link["ok"] and link["first_pass_reason"].startswith("no features; 45 of the board's")
    assert link["reason"].startswith("second pass: its lattice posed with the calibrated camera") and "blurred" in link["reason"]


def test_a_pose_fit_the_model_cannot_project_leaves_no_single_view(scenes):
    """pose_from_views from a pose whose views the model cannot project (the board in the main lens's
    focal plane: its virtual image at infinity, non-finite residuals) gives σ̂ = inf, so no single
    view, and no exception."""
    from plenocal.detect.nodes import pose_from_views

    cam, out, _ = scenes
    _pose, _det, _dv, micro = out[0.95]
    idx = micro.on_idx[:5]
    behind = Pose(np.eye(3), np.array([0.0, 0.0, cam.main_lens.focal_length_mm]))
    pose, res, sigma = pose_from_views(cam, behind, BOARD, micro, node=np.arange(5), idx=idx, appear=micro.centres[idx])
    assert sigma == float("inf") and pose is behind and res.shape == (5,) and not np.all(np.isfinite(res))


def test_pose_from_views_recovers_the_pose_that_made_the_views(scenes):
    """Corners placed where the true pose makes them appear (0.95 z_c, single views shifted by the
    pupil vignetting) and a start 0.5 mm and 5 mrad off: the fit, with its batched forward-difference
    Jacobian, returns the true pose and leaves nothing but rounding."""
    from plenocal.detect.nodes import _views_of, pose_from_views

    cam, out, _ = scenes
    pose, _det, _dv, micro = out[0.95]
    views = sorted(visible_views(cam, pose, micro))
    node = np.array([n for n, _ in views], dtype=np.int64)
    idx = np.array([i for _, i in views], dtype=np.int64)
    assert len(node) >= 8
    _, appear, _ = _views_of(cam, pose.apply(BOARD.node_points(node)), idx, micro)
    start = Pose(rodrigues(np.array([0.0, 5e-3, 0.0])) @ pose.rotation, pose.translation + np.array([0.2, -0.1, 0.5]))
    got, res, sigma = pose_from_views(cam, start, BOARD, micro, node=node, idx=idx, appear=appear)
    assert np.max(res) < 1e-5 and sigma < 1e-5
    assert np.allclose(got.translation, pose.translation, atol=1e-5)
    assert np.allclose(got.rotation, pose.rotation, atol=1e-7)


@pytest.mark.parametrize("fraction", [1.0, 1.1])
def test_a_board_blurred_past_its_micro_images_is_posed_by_its_scene_view(scenes, fraction):
    """At z_c and 1.1 z_c no corner is sharp enough to fit in any micro-image (|ρ| ≥ 10 px of an
    8.5 px disc) and the lone corners make no lattice, but the scene view shows the whole board:
    its 20 inner corners are linked there, each to its true node (within a tenth of a node spacing
    of the barycentre pinhole's projection of that node through the true pose). The frame is
    still refused, and the reason says it was posed and how blurred its corners are; its linked
    lattice is kept for the second pass."""
    from plenocal.calib.extrinsics import project_pinhole
    from plenocal.cli.detect import link_frame

    cam, out, _ = scenes
    pose_true, det, dv, micro = out[fraction]
    feats, r, _few, record = link_frame(replace(det, devignetted=dv, micro=micro), 0, camera=cam, board=BOARD, fit_rendered=True)
    assert r is not None and not r.ok and not np.any(feats.node >= 0)
    assert "inner corners in its scene view linked (20 nodes)" in r.reason, r.reason
    assert "blurred over |ρ|" in r.reason and "gives features" in r.reason, r.reason
    lo, _median = record["too_blurred_rho_px"]
    assert lo > record["resolvable_rho_px"] > 0
    links = np.asarray(record["lone_links"])
    assert sorted(links[:, 0].astype(int).tolist()) == list(range(BOARD.n_nodes))
    truth = project_pinhole(cam, pose_true, BOARD.node_points(links[:, 0].astype(int)))
    spacing = np.median(np.hypot(*np.diff(project_pinhole(cam, pose_true, BOARD.node_points()[: BOARD.columns]), axis=0).T))
    assert np.max(np.hypot(*(links[:, 1:] - truth).T)) < 0.1 * spacing


def test_single_views_too_few_for_a_pose_are_refused_with_a_record_json_can_hold(scenes):
    """One node fitted in one micro-image and nothing else linked: two residuals cannot pose the
    board (6 unknowns), so there is no σ̂ to judge it by; it is refused and the record says so with
    σ̂ None, not ∞ (detection.json holds no ∞; the double-Gauss boards at 400 and 404 mm, 0.99 and
    1.0 z_c, linked by their scene views, come here)."""
    import json

    from plenocal.detect.nodes import _single_views

    cam, out, _ = scenes
    pose, _det, _dv, micro = out[0.95]
    truth = FeatureOracle(cam).board_features(BOARD, pose)
    lut = {(int(k), int(l)): i for i, (k, l) in enumerate(zip(micro.k, micro.l, strict=True))}
    j = next(i for i in range(len(truth.k)) if (int(truth.k[i]), int(truth.l[i])) in lut)
    node = truth.node[j : j + 1]
    per_node = np.bincount(node, minlength=BOARD.n_nodes)
    feats, record = _single_views(cam, pose, BOARD, micro, np.array([lut[(int(truth.k[j]), int(truth.l[j]))]]),
                                  np.array([[truth.u[j], truth.v[j]]]), node, per_node, known=BapFeatures.empty(), frame=0)
    assert len(feats) == 0 and record == {"single_views_sigma_px": None, "single_views_refused": 1}
    json.dumps(record, allow_nan=False)


def test_the_distances_where_no_corner_is_resolved_bracket_the_conjugate_plane():
    """unresolvable_distances_mm on the small r12-a camera: a stretch that holds z_c, at whose
    nearer edge the sharpest lens type's |ρ| crosses the bound (within a sample on either side);
    none for the R12-C, whose MLA is conjugate to no real object, nor for a bound no blur exceeds."""
    from plenocal.detect.nodes import central_lenses, unresolvable_distances_mm

    cam = preset("r12-a", small=True).camera
    zc = float(mla_to_object_mm(cam, 0.0))
    resolved = 5.0
    band = unresolvable_distances_mm(cam, resolved_px=resolved)
    assert band is not None
    near, far = band
    assert 0.8 * zc < near < zc and (far is None or far > zc)

    k, l = central_lenses(cam)
    assert len(k) == cam.n_types

    def sharpest(z):
        return float(np.min(np.abs(project_bap(cam, np.tile([0.0, 0.0, z], (len(k), 1)), k, l)[:, 2])))

    step = near * 0.002
    assert sharpest(near - step) <= resolved < sharpest(near + step)
    assert unresolvable_distances_mm(preset("r12-c", small=True).camera, resolved_px=resolved) is None
    assert unresolvable_distances_mm(cam, resolved_px=1e6) is None
