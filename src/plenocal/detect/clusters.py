"""Clustering of corner observations per target corner, virtual depth and blur radius (paper §4).

- DBSCAN (scikit-learn) on (u, v) with ``min_samples = 2`` and ε = 2.1 micro-image pitches. The
  reference uses 2.2 micro-image radii (≈ 1.1 pitch, §6.5), which splits a corner's cluster as
  soon as one micro-image between two views misses it (views of one corner in neighbouring
  micro-images are (1 − 1/υ) pitches apart); clusters of different corners stay several pitches
  apart at the paper's distances. Clusters too small to give a virtual depth are dropped and
  counted. (A cluster's size is no evidence by itself: it grows as υ², and where false fits
  outnumber corners the median size is theirs; clusters that are not one corner are told by
  their plenoptic fit and by the micro-images their own model predicts,
  :func:`plenocal.detect.pipeline.screen_clusters`.)
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

from plenocal.detect._kernels import pair_virtual_depth_medians
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


def cluster_observations(uv: FloatArray, pitch_px: float) -> Clusters:
    """DBSCAN of corner positions; each cluster should be one target corner.

    Parameters
    ----------
    uv : (N, 2) corner positions of one frame.
    pitch_px : micro-image pitch.
    """
    if len(uv) == 0:
        return Clusters(np.zeros(0, dtype=np.int64), {"clusters": 0})
    labels = DBSCAN(eps=DBSCAN_EPS_PITCHES * pitch_px, min_samples=2).fit_predict(uv).astype(np.int64)
    noise = int((labels < 0).sum())
    ids, sizes = np.unique(labels[labels >= 0], return_counts=True)
    small = ids[sizes < MIN_CLUSTER_SIZE]
    drop = np.isin(labels, small)
    labels = np.where(drop, -1, labels)
    # Renumber 0..K−1 in order of first appearance along v then u (deterministic).
    keep_ids = np.setdiff1d(ids, small)
    order = np.argsort([np.mean(uv[labels == i, 1]) * 1e5 + np.mean(uv[labels == i, 0]) for i in keep_ids]) if len(keep_ids) else []
    remap = {int(keep_ids[j]): n for n, j in enumerate(order)}
    labels = np.array([remap.get(int(x), -1) for x in labels], dtype=np.int64) if len(labels) else labels
    return Clusters(labels, {"clusters": len(keep_ids), "noise": noise, "small": len(small)})


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
    idx = np.flatnonzero(labels >= 0)
    idx = idx[np.argsort(labels[idx], kind="stable")]  # observations cluster by cluster
    counts = np.bincount(labels[idx], minlength=K)
    starts = np.cumsum(counts) - counts
    v_cluster = pair_virtual_depth_medians(
        np.ascontiguousarray(uv, dtype=np.float64), np.ascontiguousarray(mic_uv, dtype=np.float64), idx, starts, counts,
        float(lambda_), 0.5 * float(micro_image_pitch_px),
    )
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
        a, _K, res = plenoptic_point_fits(uv, mic_uv, labels)
        on = labels >= 0
        n = np.bincount(labels[on], minlength=len(a))
        bad = on & ~(res <= tolerance_px)
        n_good = n - np.bincount(labels[bad], minlength=len(a))
        dead = (n < 2) | (n_good < 2)  # clusters without two observations on their model
        drop_cluster = np.zeros(len(labels), dtype=bool)
        drop_cluster[on] = dead[labels[on]]
        drop_obs = bad & ~drop_cluster
        dropped_obs += int(drop_obs.sum())
        changed = bool(np.any(drop_obs) or np.any(n[labels[drop_cluster]] >= 2))
        labels[drop_cluster | drop_obs] = -1
        if not changed:
            break
    # Physical virtual depth: a = λ(1 − 1/υ) with |υ| > 1.
    a, _, _ = plenoptic_point_fits(uv, mic_uv, labels)
    one_minus = 1.0 - a / lambda_
    unphysical = np.isfinite(a) & ((np.abs(one_minus) < 1e-9) | (np.abs(one_minus) >= 1.0))
    on = np.flatnonzero(labels >= 0)
    labels[on[unphysical[labels[on]]]] = -1
    return labels, {"observations_off_model": dropped_obs, "clusters_unphysical": int(unphysical.sum())}


def plenoptic_point_fits(
    uv: FloatArray, mic_uv: FloatArray, labels: NDArray[np.int64]
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """:func:`plenoptic_point_fit` of every cluster at once (closed form about the centroids).

    Returns
    -------
    a : (K,) per cluster (NaN with fewer than 2 distinct micro-images); K : (K, 2);
    residual distances (N,) (NaN for unlabelled observations).
    """
    on = labels >= 0
    n_c = int(labels.max()) + 1 if np.any(on) else 0
    lab = labels[on]
    c, p = mic_uv[on], np.asarray(uv, dtype=np.float64)[on]
    n = np.bincount(lab, minlength=n_c).astype(np.float64)
    nn = np.maximum(n, 1.0)
    c_bar = np.stack([np.bincount(lab, c[:, k], minlength=n_c) for k in range(2)], axis=1) / nn[:, None]
    p_bar = np.stack([np.bincount(lab, p[:, k], minlength=n_c) for k in range(2)], axis=1) / nn[:, None]
    dc, dp = c - c_bar[lab], p - p_bar[lab]
    sxx = np.bincount(lab, np.sum(dc * dc, axis=1), minlength=n_c)
    sxy = np.bincount(lab, np.sum(dc * dp, axis=1), minlength=n_c)
    with np.errstate(invalid="ignore", divide="ignore"):
        a = np.where(sxx > 0, sxy / sxx, np.nan)
    K = p_bar - a[:, None] * c_bar
    res = np.full(len(labels), np.nan)
    res[on] = np.hypot(*(p - (a[lab, None] * c + K[lab])).T)
    return a, K, res


def blur_radii_px(
    v: FloatArray, types: NDArray[np.int64], omega: InternalParameters
) -> FloatArray:
    """ρ = ((λΔc/2)/υ + q'_i − λΔc/2)/s (eq:radiusfinal)."""
    dC = omega.micro_lens_pitch_mm
    qp = np.asarray(omega.q_prime_mm, dtype=np.float64)[np.clip(types, 0, None)]
    r = (dC / 2.0) / v + qp - dC / 2.0
    return r / omega.pixel_size_mm
