"""Rejection of whole groups of observations that do not fit: gross errors come in clusters.

A mislinked cluster (every feature of one target node in one frame labelled with another node),
or a frame whose features are all off, is many consistent outliers at once: per-observation
weights (the Huber loss) see each of them as one moderate outlier among many, and the group as a
whole drags the estimate before any observation is rejected. Here the unit of rejection is the
group — a (frame, node) cluster, then a frame — tested on its normalised (u, v) residuals.

The statistic. For a group of n features with normalised squared (u, v) residuals
z_i = (e_u² + e_v²)/σ_uv² (σ_uv the robust noise level of the term), inliers have z_i ~ χ²₂,
independent (the intra-cluster correlation of the (u, v) errors is ~0, see
:func:`plenocal.calib.solver.covariance`). The group statistic is the lower median
m = z_(⌈n/2⌉): it exceeds a threshold t only when a strict majority r = ⌊n/2⌋ + 1 of the
features do, so a minority of individual outliers (rejected one by one elsewhere) cannot condemn
a group, and a group of gross errors is caught even when some of its features happen to fit.

The threshold. t is the gross threshold of a single observation, the χ²₂ quantile 1 − p
(p = ``gross_probability``, the per-observation rejection probability): a group is rejected when
its typical feature is itself a gross error. A group that is merely significant — under model
mismatch (real data) whole clusters sit a few σ off for reasons the model does not capture, and
with many features a median a little above the χ²₂ median is already significant — is
information, not a gross error, and stays. The probability that a group of n inliers is
rejected is exact: P(m > t) = P(Bin(n, q) ≥ r) = I_q(r, n − r + 1) with q = e^{−t/2} = p and I
the regularised incomplete beta (:func:`inlier_group_rejection_probability`): p for one feature,
~10 p² for three, negligible beyond. Frames are tested the same way on the features left after
the clusters.

Everything here is a pure function of arrays; :func:`plenocal.calib.calibrate.calibrate` calls
:func:`reject_groups` once, in its robust stage, before the final least squares.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from plenocal._distributions import MAD_TO_SIGMA, beta_cdf, chi2_isf, chi2_ppf, chi2_sf

FloatArray = NDArray[np.float64]

GROSS_RESIDUAL_PROBABILITY = 1e-4
"""p: a squared normalised (u, v) residual beyond the χ²₂ quantile 1 − p is a gross error."""

MIN_FRAME_FEATURES = 4
"""Frames with fewer features (after their rejected clusters) are not tested as frames."""


def lower_median(values: FloatArray, group: NDArray[np.integer], n_groups: int) -> tuple[FloatArray, NDArray[np.int64]]:
    """Lower median z_(⌈n/2⌉) of ``values`` within each group, vectorised.

    Parameters
    ----------
    values : ndarray, shape (N,)
    group : ndarray of int, shape (N,)
        Group index of each value, in [0, n_groups).
    n_groups : int

    Returns
    -------
    median : ndarray, shape (n_groups,)
        NaN for empty groups.
    count : ndarray of int, shape (n_groups,)
    """
    values = np.asarray(values, dtype=np.float64)
    group = np.asarray(group, dtype=np.int64)
    count = np.bincount(group, minlength=n_groups).astype(np.int64)
    out = np.full(n_groups, np.nan)
    if values.size == 0:
        return out, count
    order = np.lexsort((values, group))
    start = np.concatenate([[0], np.cumsum(count)[:-1]])
    has = count > 0
    pos = start[has] + (count[has] + 1) // 2 - 1
    out[has] = values[order][pos]
    return out, count


def chi2_thresholds(probability: float) -> dict[str, float]:
    """Thresholds on the normalised residual norm ‖e‖/σ̂ per term (uv, rho, mic) that one inlier
    exceeds with ``probability``: √χ²₂(1 − p), √χ²₁(1 − p), √χ²₂(1 − p). Calibration's rejection
    rule, which evaluation re-applies (:func:`plenocal.evaluate.outliers.chi2_thresholds`)."""
    two = float(np.sqrt(chi2_ppf(1.0 - probability, 2)))
    return {"uv": two, "rho": float(np.sqrt(chi2_ppf(1.0 - probability, 1))), "mic": two}


def gross_threshold(probability: float, *, dof: int = 2) -> float:
    """Squared normalised residual that one inlier exceeds with ``probability`` (χ²_dof quantile)."""
    return float(chi2_isf(probability, dof))


def inlier_group_rejection_probability(n: NDArray[np.integer] | int, threshold: float, *, dof: int = 2) -> FloatArray:
    """Probability that the lower median of n independent χ²_dof values exceeds ``threshold``.

    Exact: the lower median exceeds t iff at least r = ⌊n/2⌋ + 1 values do, so
    P = P(Bin(n, q) ≥ r) = I_q(r, n − r + 1), q = P(χ²_dof > t).

    Parameters
    ----------
    n : int or ndarray of int
        Group sizes (>= 1).
    threshold : float
    dof : int

    Returns
    -------
    ndarray, same shape as ``n``
    """
    n = np.asarray(n, dtype=np.int64)
    r = n // 2 + 1
    q = float(chi2_sf(threshold, dof))
    return np.asarray(beta_cdf(q, r, n - r + 1), dtype=np.float64)


@dataclass(frozen=True)
class GroupTest:
    """The outcome of one group test (:func:`test_groups`)."""

    keys: NDArray[np.int64]
    """(G,) group key of each tested group."""
    count: NDArray[np.int64]
    """(G,) features in the group."""
    statistic: FloatArray
    """(G,) lower median of the group's z."""
    threshold: float
    """The rejection threshold of the statistic (the gross threshold of one observation)."""

    @property
    def rejected(self) -> NDArray[np.bool_]:
        return self.statistic > self.threshold


def test_groups(z: FloatArray, key: NDArray[np.integer], *, threshold: float) -> GroupTest:
    """Lower median of z in each group, against ``threshold`` (see the module docstring).

    Parameters
    ----------
    z : ndarray, shape (N,)
        Squared normalised (u, v) residuals (χ²₂ for inliers).
    key : ndarray of int, shape (N,)
        Group key of each value (any integers).
    threshold : float
        Rejection threshold of the group statistic (:func:`gross_threshold`).

    Returns
    -------
    GroupTest
    """
    keys, inv = np.unique(np.asarray(key, dtype=np.int64), return_inverse=True)
    stat, count = lower_median(z, inv, keys.size)
    return GroupTest(keys, count, stat, float(threshold))


@dataclass
class GroupRejection:
    """Features rejected as whole clusters and frames, and the report of each rejected group."""

    keep: NDArray[np.bool_]
    """(N,) False for the features of rejected clusters and frames."""
    clusters: list[dict[str, object]] = field(default_factory=list)
    """One entry per rejected (frame, node): frame, node, n_features, median normalised (u, v)
    residual (in σ_uv), its threshold, median (u, v) offset in px, reason."""
    frames: list[dict[str, object]] = field(default_factory=list)
    """One entry per rejected frame, the same keys without node."""

    @property
    def any(self) -> bool:
        return bool(self.clusters or self.frames)

    def to_dict(self) -> dict[str, object]:
        return {"clusters": self.clusters, "frames": self.frames,
                "n_features": int((~self.keep).sum())}


def _describe(test: GroupTest, i: int, eu: FloatArray, ev: FloatArray, rows: NDArray[np.bool_],
              sigma_uv: float, what: str) -> dict[str, object]:
    stat, thr, n = float(test.statistic[i]), test.threshold, int(test.count[i])
    du, dv = float(np.median(eu[rows])), float(np.median(ev[rows]))
    p_inlier = float(inlier_group_rejection_probability(n, thr))
    return {
        "n_features": n,
        "median_residual_sigma": float(np.sqrt(stat)),
        "threshold_sigma": float(np.sqrt(thr)),
        "median_offset_px": [du, dv],
        "inlier_rejection_probability": p_inlier,
        "reason": (f"{what}: the median normalised (u, v) residual of its {n} features is {np.sqrt(stat):.1f} σ_uv "
                   f"(median offset {np.hypot(du, dv):.2f} px, σ_uv = {sigma_uv:.3g} px), beyond the gross "
                   f"threshold {np.sqrt(thr):.2f} σ_uv (a group of {n} inliers exceeds it with probability "
                   f"{p_inlier:.1e})"),
    }


def reject_groups(
    eu: FloatArray,
    ev: FloatArray,
    frame: NDArray[np.integer],
    node: NDArray[np.integer],
    *,
    sigma_uv: float,
    gross_probability: float = GROSS_RESIDUAL_PROBABILITY,
    min_frame_features: int = MIN_FRAME_FEATURES,
) -> GroupRejection:
    """Reject whole (frame, node) clusters, then whole frames, whose (u, v) residuals do not fit.

    Parameters
    ----------
    eu, ev : ndarray, shape (N,)
        (u, v) residuals of the BAP features, px.
    frame, node : ndarray of int, shape (N,)
        Frame and target node of each feature.
    sigma_uv : float
        Robust noise level of one (u, v) component, px (> 0).
    gross_probability : float
        p: a group is rejected when its lower median squared normalised residual exceeds the χ²₂
        quantile 1 − p (:func:`gross_threshold`).
    min_frame_features : int
        Frames with fewer features (after the clusters) are not tested as frames.

    Returns
    -------
    GroupRejection
    """
    eu = np.asarray(eu, dtype=np.float64)
    ev = np.asarray(ev, dtype=np.float64)
    frame = np.asarray(frame, dtype=np.int64)
    node = np.asarray(node, dtype=np.int64)
    z = (eu**2 + ev**2) / sigma_uv**2
    gross = gross_threshold(gross_probability)
    keep = np.ones(z.size, dtype=bool)
    out = GroupRejection(keep)
    if z.size == 0:
        return out
    n_nodes = int(node.max()) + 1
    cluster_key = frame * n_nodes + node
    ct = test_groups(z, cluster_key, threshold=gross)
    for i in np.flatnonzero(ct.rejected):
        rows = cluster_key == ct.keys[i]
        keep &= ~rows
        f, n = divmod(int(ct.keys[i]), n_nodes)
        out.clusters.append({"frame": f, "node": n, **_describe(ct, int(i), eu, ev, rows, sigma_uv, "mislinked cluster or a wrong node")})
    ft = test_groups(z[keep], frame[keep], threshold=gross)
    for i in np.flatnonzero(ft.rejected & (ft.count >= min_frame_features)):
        rows = keep & (frame == ft.keys[i])
        keep &= ~rows
        out.frames.append({"frame": int(ft.keys[i]), **_describe(ft, int(i), eu, ev, rows, sigma_uv, "frame that does not fit")})
    out.keep = keep
    return out


__all__ = [
    "GROSS_RESIDUAL_PROBABILITY",
    "MIN_FRAME_FEATURES",
    "GroupRejection",
    "GroupTest",
    "gross_threshold",
    "inlier_group_rejection_probability",
    "lower_median",
    "reject_groups",
    "test_groups",
]


def robust_sigma(values: NDArray[np.float64]) -> float:
    """1.4826 × median absolute deviation from the median (σ of the inliers of a Gaussian)."""
    if values.size == 0:
        return float("nan")
    return float(MAD_TO_SIGMA * np.median(np.abs(values - np.median(values))))
