"""Screening clusters by the micro-images their own model predicts (detect.pipeline.screen_clusters)."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.detect.clusters import cluster_observations, virtual_depths
from plenocal.detect.pipeline import MicroImages, screen_clusters, view_coverage
from plenocal.model.white import internal_parameters
from plenocal.sim.groundtruth import FeatureOracle
from plenocal.sim.presets import preset


@pytest.fixture(scope="module")
def setup():
    cam = preset("r12-a", small=True).camera
    omega = internal_parameters(cam)
    k_all, l_all = cam.grid.lattice.all_indices()
    centres = cam.grid.centres(k_all, l_all)
    M = len(centres)
    usable = np.full(M, 0.85 * 0.5 * cam.grid.diameter_px)
    micro = MicroImages(
        centres=centres, usable=usable, on_idx=np.arange(M), types=np.zeros(M, dtype=np.int64),
        radius_aperture_px=np.ones(M), radius_lens_px=np.ones(M), blur_offset=np.zeros(M), vignetted=False,
        weight=np.ones((cam.sensor.height_px, cam.sensor.width_px)), omega=omega,
    )
    index = {(int(k), int(l)): i for i, (k, l) in enumerate(zip(k_all, l_all, strict=True))}
    return cam, micro, index, FeatureOracle(cam)


def _observations(oracle, index, points, *, keep_views=None, rng=None):
    """Exact chief-ray views of each point (all, or ``keep_views`` of them at random): uv, sel, point id."""
    uv, sel, pid = [], [], []
    for i, p in enumerate(points):
        f = oracle.features(p[None])
        j = np.arange(len(f))
        if keep_views is not None:
            j = rng.choice(j, size=min(keep_views, len(j)), replace=False)
        uv.append(np.c_[f.u[j], f.v[j]])
        sel.append(np.array([index[(int(a), int(b))] for a, b in zip(f.k[j], f.l[j], strict=True)], dtype=np.int64))
        pid.append(np.full(len(j), i))
    return np.concatenate(uv), np.concatenate(sel), np.concatenate(pid)


def test_corners_are_kept_and_chance_pairs_dropped_when_they_outnumber_the_corners(setup):
    """A board's corners (every view) among three times as many false clusters — pairs of views
    of points at other depths, as noise and the pattern's L-junctions give — keep their clusters
    and the frame's virtual depth; the pairs, whose own model predicts many more views, go."""
    cam, micro, index, oracle = setup
    rng = np.random.default_rng(4)
    xs = np.linspace(-6.0, 6.0, 4)
    corners = np.array([[x, y, 330.0] for x in xs for y in np.linspace(-4.0, 4.0, 3)])
    false_points = np.c_[rng.uniform(-9, 9, 36), rng.uniform(-6, 6, 36), rng.uniform(150.0, 260.0, 36)]
    uv_c, sel_c, pid_c = _observations(oracle, index, corners)
    uv_f, sel_f, pid_f = _observations(oracle, index, false_points, keep_views=2, rng=rng)
    uv, sel = np.r_[uv_c, uv_f], np.r_[sel_c, sel_f]
    truth = np.r_[pid_c, len(corners) + pid_f]
    labels = truth.copy()  # one cluster per point (DBSCAN's job is not tested here)
    mic = micro.centres[sel]
    v_obs, v_cl = virtual_depths(uv, mic, labels, micro_image_pitch_px=cam.grid.diameter_px, lambda_=cam.lambda_)
    predicted, found = view_coverage(uv, sel, labels, v_cl, micro=micro)
    cov = found / np.maximum(predicted, 1)
    assert np.all(cov[: len(corners)] > 0.9)
    assert np.all(cov[len(corners):][predicted[len(corners):] > 8] < 0.25)
    new, _v_obs, v_new, counts = screen_clusters(uv, sel, labels, v_obs, v_cl, micro=micro)
    kept = np.unique(new[new >= 0])
    assert set(range(len(corners))) <= set(kept.tolist())
    assert counts["clusters_sparse"] >= 0.8 * len(false_points)
    assert np.all(np.isfinite(v_new[: len(corners)]))


def test_a_corner_seen_in_two_or_three_micro_images_is_kept(setup):
    """Near the MLA's conjugate plane a corner appears in one to three micro-images; its model
    predicts about as many, so the coverage rule keeps it."""
    cam, micro, index, oracle = setup
    # The distance whose virtual depth is smallest (fewest views) in the camera's working range.
    best = None
    for z in np.linspace(200.0, 3000.0, 141):
        n = len(oracle.features(np.array([[0.5, 0.3, z]])))
        if n >= 2 and (best is None or n < best[1]):
            best = (z, n)
    assert best is not None and best[1] <= 4
    uv, sel, pid = _observations(oracle, index, np.array([[0.5, 0.3, best[0]], [1.5, -0.3, best[0]]]))
    labels = pid
    v_obs, v_cl = virtual_depths(uv, micro.centres[sel], labels, micro_image_pitch_px=cam.grid.diameter_px, lambda_=cam.lambda_)
    new, _, _, counts = screen_clusters(uv, sel, labels, v_obs, v_cl, micro=micro)
    assert counts["clusters_sparse"] == 0 and np.all(new == labels)


def test_cluster_size_is_no_reason_to_drop_a_cluster():
    """DBSCAN keeps a large cluster among many small ones (the median-relative size rule that
    dropped close boards' corners is gone)."""
    rng = np.random.default_rng(0)
    big = rng.normal(0.0, 20.0, (60, 2))
    small = np.concatenate([np.array([[500.0 + 300 * i, 500.0]]) + rng.normal(0, 3, (2, 2)) for i in range(10)])
    c = cluster_observations(np.r_[big, small], 23.0)
    sizes = np.bincount(c.labels[c.labels >= 0])
    assert sizes.max() == 60 and c.counts["clusters"] == 11
