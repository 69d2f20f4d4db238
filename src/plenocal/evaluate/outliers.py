"""Which observations an evaluation keeps: calibration's χ² rejection rule applied to residuals.

The rule is the one calibration applies after its robust stage (:mod:`plenocal.calib.calibrate`,
step 4), so that an evaluation's headline RMSE counts the observations calibration kept:

1. per term t ∈ {uv, ρ, mic}, a robust noise level σ̂_t = 1.4826 · median |e| of the residual
   components over every evaluated observation (u and v pooled for uv; both components of a
   micro-image centre pooled for mic) — the σ of the inliers of a zero-mean Gaussian, blind to
   a few gross outliers. Calibration takes the MAD about the median; at its optimum the median
   residual is 0 and the two agree. An evaluation's residuals may be biased (a wrong camera on
   held-out frames: every ρ off by the same 0.3 px), and about the median a biased term would
   have a small σ̂ and every observation would be "an outlier"; about 0 the bias is part of σ̂;
2. a BAP feature is rejected when ‖e_uv‖²/σ̂_uv² > χ²₂(1 − p) (reason ``uv``) or
   e_ρ²/σ̂_ρ² > χ²₁(1 − p) (reason ``rho``; ``uv+rho`` for both); a centre when
   ‖e_mic‖²/σ̂_mic² > χ²₂(1 − p);
3. p is calibration's ``reject_probability`` (default 1e-4: about one Gaussian observation in
   10 000 is rejected wrongly). ``p = None`` (a calibration run with ``loss="linear"``) keeps
   everything.

Calibration applies the rule at the robust stage's optimum and an evaluation at the final camera
and poses, so the two sets can differ by an observation or two near the threshold; the
evaluation report gives both counts. Held-out frames use the same rule with σ̂ from their own
residuals, frame by frame (:mod:`plenocal.evaluate.holdout`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from plenocal._distributions import MAD_TO_SIGMA, robust_scale
from plenocal.calib.calibrate import CalibrationOptions
from plenocal.calib.robust import chi2_thresholds as calibration_thresholds

if TYPE_CHECKING:
    from plenocal.evaluate.metrics import Residuals

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

DEFAULT_REJECT_PROBABILITY: float = CalibrationOptions.reject_probability
"""Calibration's default ``reject_probability`` (the rule's p)."""

RULE = ("calibration's χ² rule: σ̂_t = 1.4826·median|e| per term (u, v pooled); a feature is rejected when "
        "‖e_uv‖²/σ̂_uv² > χ²₂(1−p) or e_ρ²/σ̂_ρ² > χ²₁(1−p), a centre when ‖e_mic‖²/σ̂_mic² > χ²₂(1−p)")
"""One line describing the rule, written into the evaluation report."""


def chi2_thresholds(probability: float) -> dict[str, float]:
    """Thresholds on the normalised residual norm ‖e‖/σ̂ per term for a rejection probability p
    (calibration's, :func:`plenocal.calib.robust.chi2_thresholds`), p checked.

    >>> {k: round(v, 3) for k, v in chi2_thresholds(1e-4).items()}
    {'uv': 4.292, 'rho': 3.891, 'mic': 4.292}
    """
    if not 0.0 < probability < 1.0:
        raise ValueError(f"reject probability must be in (0, 1), got {probability}")
    return calibration_thresholds(probability)


SIGMA_FLOOR_PX = 1e-6
"""σ̂ below this (a noise-free fit) is raised to it, as calibration does: rounding errors are not outliers."""

def term_sigma(residuals: Residuals) -> dict[str, float]:
    """Robust σ̂ per term (1.4826·median |e|, components pooled); terms without data are left out."""
    r = residuals
    out: dict[str, float] = {}
    if r.uv.size:
        out["uv"] = robust_scale(r.uv)
    finite = np.isfinite(r.rho)
    if finite.any():  # ρ of the features that have one (single views and cameras without types have none)
        out["rho"] = robust_scale(r.rho[finite])
    if r.mic_uv.size:
        out["mic"] = robust_scale(r.mic_uv)
    return out


@dataclass(frozen=True, eq=False)
class OutlierSplit:
    """Kept and rejected observations of one :class:`~plenocal.evaluate.metrics.Residuals`.

    Attributes
    ----------
    keep_bap : ndarray of bool, shape (N,)
        Per evaluated feature (the residuals' row order).
    keep_mic : ndarray of bool, shape (M,)
    reason : ndarray of str, shape (N,)
        ``""`` (kept), ``"uv"``, ``"rho"`` or ``"uv+rho"``.
    normalised : dict
        ‖e‖/σ̂ per term: ``uv`` (N,), ``rho`` (N,) when the camera has ρ, ``mic`` (M,).
    sigma_px : dict
        σ̂ per term used by the rule (px).
    threshold_sigma : dict
        Thresholds on ‖e‖/σ̂ per term (empty when nothing is rejected by rule).
    probability : float or None
        The rule's p; None keeps everything.
    suspended : str
        Why the rule was not applied although asked (empty when it was): it would have rejected
        more than the allowed fraction, so the residuals are not "Gaussian plus a few outliers".
    sigma_px_per_frame : dict
        frame → σ̂ per term, when the features were judged frame by frame (``per_frame=True``).
    """

    keep_bap: BoolArray
    keep_mic: BoolArray
    reason: NDArray[np.str_]
    normalised: dict[str, FloatArray]
    sigma_px: dict[str, float]
    threshold_sigma: dict[str, float]
    probability: float | None
    suspended: str = ""
    sigma_px_per_frame: dict[int, dict[str, float]] = field(default_factory=dict)

    @property
    def n_rejected_bap(self) -> int:
        return int(np.count_nonzero(~self.keep_bap))

    @property
    def n_rejected_mic(self) -> int:
        return int(np.count_nonzero(~self.keep_mic))

    def counts(self) -> dict[str, int]:
        """Rejections as calibration's ``report.json`` counts them: ``bap`` = ``uv`` ∪ ``rho``, ``mic``."""
        r = self.reason
        return {
            "bap": self.n_rejected_bap,
            "uv": int(np.count_nonzero((r == "uv") | (r == "uv+rho"))),
            "rho": int(np.count_nonzero((r == "rho") | (r == "uv+rho"))),
            "mic": self.n_rejected_mic,
        }


def frame_sigma(residuals: Residuals, pooled: dict[str, float]) -> dict[int, dict[str, float]]:
    """σ̂ of the BAP terms frame by frame, never below the pooled σ̂ (a frame with few features, or
    an unusually clean one, must not make ordinary noise look like outliers)."""
    r = residuals
    out: dict[int, dict[str, float]] = {}
    for f in np.unique(r.frame):
        sel = r.frame == f
        sig = term_sigma(r.subset(sel, np.zeros(r.mic_uv.shape[0], bool)))
        out[int(f)] = {k: max(v, pooled[k]) for k, v in sig.items() if k in pooled}
    return out


def split_outliers(
    residuals: Residuals,
    *,
    probability: float | None = DEFAULT_REJECT_PROBABILITY,
    sigma_px: dict[str, float] | None = None,
    per_frame: bool = False,
    max_rejected_fraction: float | None = None,
) -> OutlierSplit:
    """Apply the module's rule to residuals.

    Parameters
    ----------
    residuals : Residuals
    probability : float or None
        The rule's p (calibration's ``reject_probability``); None keeps every observation.
    sigma_px : dict, optional
        σ per term (``uv``, ``rho``, ``mic``) instead of the robust σ̂ of these residuals.
    per_frame : bool
        Judge each frame's features against the σ̂ of that frame (:func:`frame_sigma`), e.g.
        when the noise differs by frame (ρ's grows away from the focus planes).
    max_rejected_fraction : float, optional
        When the rule would reject more than this fraction of the features, reject nothing and
        say so (``suspended``): that many are not outliers, the model does not fit the data.

    Returns
    -------
    OutlierSplit
    """
    r = residuals
    sig = term_sigma(r) if sigma_px is None else {k: float(v) for k, v in sigma_px.items()}
    sig = {k: max(v, SIGMA_FLOOR_PX) for k, v in sig.items()}
    n, m = r.uv.shape[0], r.mic_uv.shape[0]
    per = frame_sigma(r, sig) if per_frame else {}
    has_rho = bool(np.isfinite(r.rho).any())  # single views (ρ NaN) are judged by (u, v) alone

    def row_sigma(term: str) -> FloatArray | float:
        if not per:
            return sig.get(term, 1.0)
        return np.array([per[int(f)].get(term, sig.get(term, 1.0)) for f in r.frame], dtype=np.float64)

    s: dict[str, FloatArray] = {"uv": np.hypot(r.uv[:, 0], r.uv[:, 1]) / row_sigma("uv")}
    if has_rho:
        s["rho"] = np.nan_to_num(np.abs(r.rho) / row_sigma("rho"), nan=0.0)
    s["mic"] = np.hypot(r.mic_uv[:, 0], r.mic_uv[:, 1]) / sig.get("mic", 1.0)
    if probability is None:
        return OutlierSplit(np.ones(n, bool), np.ones(m, bool), np.full(n, "", dtype="<U6"), s, sig, {}, None, "", per)
    thr = chi2_thresholds(probability)
    bad_uv = s["uv"] > thr["uv"]
    bad_rho = s["rho"] > thr["rho"] if has_rho else np.zeros(n, bool)
    reason = np.full(n, "", dtype="<U6")
    reason[bad_uv] = "uv"
    reason[bad_rho] = "rho"
    reason[bad_uv & bad_rho] = "uv+rho"
    if not has_rho:
        thr = {k: v for k, v in thr.items() if k != "rho"}
    bad = bad_uv | bad_rho
    if max_rejected_fraction is not None and n and np.count_nonzero(bad) > max_rejected_fraction * n:
        why = (f"the rule would reject {np.count_nonzero(bad)} of {n} features (more than "
               f"{max_rejected_fraction:.0%}): not outliers, the camera does not fit these observations; nothing rejected")
        return OutlierSplit(np.ones(n, bool), np.ones(m, bool), np.full(n, "", dtype="<U6"), s, sig, thr, probability, why, per)
    return OutlierSplit(~bad, ~(s["mic"] > thr["mic"]), reason, s, sig, thr, probability, "", per)


__all__ = [
    "DEFAULT_REJECT_PROBABILITY",
    "MAD_TO_SIGMA",
    "RULE",
    "OutlierSplit",
    "chi2_thresholds",
    "frame_sigma",
    "robust_scale",
    "split_outliers",
    "term_sigma",
]
