"""Clustering of corner observations per target corner, virtual depth and blur radius (paper §4).

- DBSCAN (scikit-learn) on (u, v) with ``min_samples = 2`` and ε = 2.1 micro-image pitches. The
  reference uses 2.2 micro-image radii (≈ 1.1 pitch, §6.5), which splits a corner's cluster as
  soon as one micro-image between two views misses it (views of one corner in neighbouring
  micro-images are (1 − 1/υ) pitches apart); clusters of different corners stay several pitches
  apart at the paper's distances. Clusters too small to give a virtual depth, or whose size is an
  outlier (the reference's interactive prompt, automated), are dropped and counted.
- Virtual depth per cluster from every pair of observations (eq:virtdepth):
  ``υ_ij = η·Δ_C / (η·Δ_C − Δp)`` with η = ‖c_i − c_j‖/Δc (micro-image grid nodes) and Δp the
  disparity, then the median over pairs.
- ρ of each observation from eq:radiusfinal: ``r = (λΔc/2)/υ + q'_i − λΔc/2``, ρ = r/s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray
from sklearn.cluster import DBSCAN

from plenocal.model.white import InternalParameters

FloatArray = NDArray[np.float64]
DBSCAN_EPS_PITCHES = 2.1
"""ε of DBSCAN in micro-image pitches."""
MIN_CLUSTER_SIZE = 2
"""One pair gives a virtual depth (clusters of near-focus corners are small)."""


@dataclass(frozen=True)
class Clusters:
    """Cluster id per observation (−1: noise or dropped) and what was dropped."""

    labels: NDArray[np.int64]
    counts: dict[str, int] = field(default_factory=dict)


def cluster_observations(uv: FloatArray, pitch_px: float, *, size_outlier_factor: float = 4.0) -> Clusters:
    """DBSCAN of corner positions; each cluster should be one target corner.

    Parameters
    ----------
    uv : (N, 2) corner positions of one frame.
    pitch_px : micro-image pitch.
    size_outlier_factor : clusters larger than this × the median size (merged corners) are dropped.
    """
    if len(uv) == 0:
        return Clusters(np.zeros(0, dtype=np.int64), {"clusters": 0})
    labels = DBSCAN(eps=DBSCAN_EPS_PITCHES * pitch_px, min_samples=2).fit_predict(uv).astype(np.int64)
    noise = int((labels < 0).sum())
    ids, sizes = np.unique(labels[labels >= 0], return_counts=True)
    small = ids[sizes < MIN_CLUSTER_SIZE]
    med = float(np.median(sizes)) if len(sizes) else 0.0
    big = ids[sizes > size_outlier_factor * max(med, 1.0)]
    drop = np.isin(labels, np.concatenate([small, big]))
    labels = np.where(drop, -1, labels)
    # Renumber 0..K−1 in order of first appearance along v then u (deterministic).
    keep_ids = np.setdiff1d(ids, np.concatenate([small, big]))
    order = np.argsort([np.mean(uv[labels == i, 1]) * 1e5 + np.mean(uv[labels == i, 0]) for i in keep_ids]) if len(keep_ids) else []
    remap = {int(keep_ids[j]): n for n, j in enumerate(order)}
    labels = np.array([remap.get(int(x), -1) for x in labels], dtype=np.int64) if len(labels) else labels
    return Clusters(labels, {"clusters": len(keep_ids), "noise": noise, "small": len(small), "oversized": len(big)})


def virtual_depths(
    uv: FloatArray,
    mic_uv: FloatArray,
    labels: NDArray[np.int64],
    *,
    micro_image_pitch_px: float,
    lambda_: float,
) -> tuple[FloatArray, FloatArray]:
    """Median virtual depth per cluster from all pairs of observations (eq:virtdepth).

    Parameters
    ----------
    uv : (N, 2) observations; mic_uv : (N, 2) their micro-image grid nodes.
    labels : (N,) cluster ids (−1 ignored).
    micro_image_pitch_px : Δc in px; lambda_ : λ (Δ_C = λ·Δc).

    Returns
    -------
    v_obs : (N,) the cluster's virtual depth per observation (NaN without a cluster);
    v_cluster : (K,) per cluster.
    """
    K = int(labels.max()) + 1 if len(labels) and labels.max() >= 0 else 0
    v_cluster = np.full(K, np.nan)
    order = np.argsort(labels, kind="stable")
    lab = labels[order]
    starts = np.searchsorted(lab, np.arange(K))
    ends = np.searchsorted(lab, np.arange(K), side="right")
    for c in range(K):  # one vectorised pair computation per target corner
        idx = order[starts[c] : ends[c]]
        if len(idx) < 2:
            continue
        i, j = np.triu_indices(len(idx), 1)
        a, b = idx[i], idx[j]
        baseline = lambda_ * np.hypot(*(mic_uv[a] - mic_uv[b]).T)  # η·Δ_C in px units of Δc
        disparity = np.hypot(*(uv[a] - uv[b]).T)
        ok = baseline > 0.5 * micro_image_pitch_px
        v = baseline[ok] / (baseline[ok] - disparity[ok])
        if len(v):
            v_cluster[c] = float(np.sort(v)[len(v) // 2])
    v_obs = np.where(labels >= 0, v_cluster[np.clip(labels, 0, max(K - 1, 0))] if K else np.nan, np.nan)
    return v_obs, v_cluster


CLUSTER_FIT_TOLERANCE_PX = 1.5
"""An observation farther than this from its cluster's plenoptic model is rejected."""


def plenoptic_point_fit(uv: FloatArray, mic_uv: FloatArray) -> tuple[float, FloatArray, FloatArray]:
    """Least-squares ``p_i = a·c_i + K`` of one virtual point's images (a = λ(1 − 1/υ)).

    Parameters
    ----------
    uv : (n, 2) chief-ray positions; mic_uv : (n, 2) their micro-image centres.

    Returns
    -------
    a, K (2,), residual distances (n,)
    """
    A = np.zeros((2 * len(uv), 3))
    A[0::2, 0], A[1::2, 0] = mic_uv[:, 0], mic_uv[:, 1]
    A[0::2, 1] = 1.0
    A[1::2, 2] = 1.0
    b = np.asarray(uv, dtype=np.float64).reshape(-1)
    sol = np.linalg.lstsq(A, b, rcond=None)[0]
    res = np.hypot(*(A @ sol - b).reshape(-1, 2).T)
    return float(sol[0]), sol[1:], res


def validate_clusters(
    uv: FloatArray,
    mic_uv: FloatArray,
    labels: NDArray[np.int64],
    *,
    lambda_: float,
    tolerance_px: float = CLUSTER_FIT_TOLERANCE_PX,
    rounds: int = 3,
) -> tuple[NDArray[np.int64], dict[str, int]]:
    """Reject observations and clusters that do not behave like one point seen through the MLA.

    The chief-ray images of one virtual point through micro-lenses i satisfy
    ``p_i = λ(1 − 1/υ)·c_i + K`` (c_i micro-image centres): a per-cluster linear fit of (a, K)
    with a = λ(1 − 1/υ). Observations farther than ``tolerance_px`` are dropped (iteratively);
    clusters left with fewer than 2 observations, or with a non-physical υ (< 1 in magnitude),
    are dropped. Returns the new labels and counts.
    """
    labels = labels.copy()
    dropped_obs = 0
    for _ in range(rounds):
        changed = False
        for c in np.unique(labels[labels >= 0]):  # one small least-squares per target corner
            idx = np.flatnonzero(labels == c)
            if len(idx) < 2:
                labels[idx] = -1
                continue
            _, _, res = plenoptic_point_fit(uv[idx], mic_uv[idx])
            bad = res > tolerance_px
            if bad.all() or len(idx) - bad.sum() < 2:
                labels[idx] = -1
                changed = True
                continue
            if bad.any():
                labels[idx[bad]] = -1
                dropped_obs += int(bad.sum())
                changed = True
        if not changed:
            break
    # Physical virtual depth: a = λ(1 − 1/υ) with |υ| > 1.
    n_bad_v = 0
    for c in np.unique(labels[labels >= 0]):
        idx = np.flatnonzero(labels == c)
        a, _, _ = plenoptic_point_fit(uv[idx], mic_uv[idx])
        one_minus = 1.0 - a / lambda_
        if abs(one_minus) < 1e-9 or abs(1.0 / one_minus) <= 1.0:
            labels[idx] = -1
            n_bad_v += 1
    return labels, {"observations_off_model": dropped_obs, "clusters_unphysical": n_bad_v}


def blur_radii_px(
    v: FloatArray, types: NDArray[np.int64], omega: InternalParameters
) -> FloatArray:
    """ρ = ((λΔc/2)/υ + q'_i − λΔc/2)/s (eq:radiusfinal)."""
    dC = omega.micro_lens_pitch_mm
    qp = np.asarray(omega.q_prime_mm, dtype=np.float64)[np.clip(types, 0, None)]
    r = (dC / 2.0) / v + qp - dC / 2.0
    return r / omega.pixel_size_mm
