"""Cluster validation and virtual depths, vectorised over clusters: edge cases and agreement with
the one-cluster fit."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.detect.clusters import plenoptic_point_fit, plenoptic_point_fits, validate_clusters, virtual_depths


def _cluster(rng, n, v, K, pitch=23.0, lam=0.99, noise=0.05):
    c = rng.uniform(0, 10, (n, 2)).round() * pitch
    a = lam * (1 - 1 / v)
    return a * c + K + rng.normal(0, noise, (n, 2)), c


@pytest.mark.parametrize("labels", [np.full(6, -1), np.zeros(0, dtype=np.int64), np.array([0, -1, -1, -1, -1, -1])])
def test_no_usable_cluster_is_not_an_error(labels):
    rng = np.random.default_rng(0)
    uv, mic = rng.uniform(0, 100, (len(labels), 2)), rng.uniform(0, 100, (len(labels), 2))
    out, counts = validate_clusters(uv, mic, labels, lambda_=0.99)
    assert np.all(out == -1) and counts["observations_off_model"] == 0
    v_obs, _ = virtual_depths(uv, mic, labels, micro_image_pitch_px=23.0, lambda_=0.99)
    assert np.all(np.isnan(v_obs))


def test_batched_fits_match_one_cluster_fits_and_reject_an_outlier():
    rng = np.random.default_rng(1)
    parts = [_cluster(rng, n, v, rng.uniform(0, 500, 2)) for n, v in ((12, -3.0), (8, 5.0), (20, -9.0))]
    uv = np.concatenate([p[0] for p in parts])
    mic = np.concatenate([p[1] for p in parts])
    labels = np.repeat(np.arange(3), [12, 8, 20])
    a, K, res = plenoptic_point_fits(uv, mic, labels)
    for c in range(3):
        a1, K1, r1 = plenoptic_point_fit(uv[labels == c], mic[labels == c])
        assert a[c] == pytest.approx(a1, abs=1e-10) and np.allclose(K[c], K1, atol=1e-8)
        assert np.allclose(res[labels == c], r1, atol=1e-8)
    uv[3] += 5.0  # one observation 5 px off its cluster's model
    out, counts = validate_clusters(uv, mic, labels, lambda_=0.99)
    assert out[3] == -1 and counts["observations_off_model"] == 1 and np.all(out[np.arange(40) != 3] == labels[np.arange(40) != 3])


def _pairwise_upper_median(uv, mic, members, lam, min_baseline):
    """eq:virtdepth over every pair of a cluster, the long way (numpy, no kernel)."""
    i, j = np.triu_indices(len(members), 1)
    a, b = members[i], members[j]
    base = lam * np.hypot(*(mic[a] - mic[b]).T)
    v = (base / (base - np.hypot(*(uv[a] - uv[b]).T)))[base > min_baseline]
    return np.sort(v)[len(v) // 2] if len(v) else np.nan


def test_virtual_depth_is_the_upper_median_of_the_pairs_of_each_cluster():
    rng = np.random.default_rng(2)
    parts = [_cluster(rng, n, v, rng.uniform(0, 500, 2), noise=0.3) for n, v in ((12, -3.0), (7, 5.0), (2, 4.0), (30, -9.0))]
    uv = np.concatenate([p[0] for p in parts])
    mic = np.concatenate([p[1] for p in parts])
    labels = np.repeat(np.arange(4), [12, 7, 2, 30])
    labels[[5, 40]] = -1
    uv[20] = np.nan  # a failed position: its pairs give NaN, which sorts last
    order = rng.permutation(len(labels))  # clusters need not be contiguous
    uv, mic, labels = uv[order], mic[order], labels[order]
    v_obs, v_cluster = virtual_depths(uv, mic, labels, micro_image_pitch_px=23.0, lambda_=0.99)
    expect = [_pairwise_upper_median(uv, mic, np.flatnonzero(labels == c), 0.99, 11.5) for c in range(4)]
    np.testing.assert_array_equal(v_cluster, expect)
    assert v_cluster[0] == pytest.approx(-3.0, rel=0.05) and v_cluster[3] == pytest.approx(-9.0, rel=0.05)
    np.testing.assert_array_equal(v_obs[labels >= 0], v_cluster[labels[labels >= 0]])
    assert np.all(np.isnan(v_obs[labels < 0]))
