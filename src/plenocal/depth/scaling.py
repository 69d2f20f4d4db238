"""Depth scaling: the matcher's bias in virtual depth, fitted on the calibration frames.

The reference fits a quadratic of the object distance, z ← a·z² + b·z + c, on checkerboard frames
(libpleno ``processing/calibration/scaling.cpp``: distances between the board's nodes reconstructed
from the depth maps against the printed ones) and applies it to every depth
(``PlenopticCamera::scaling``). plenocal fits the bias where the matcher makes it: in the inverse
virtual depth w = 1/υ, in which the disparity between two micro-images is linear
(δ = (c_i − c_j)·((1 − λ) + λ·w), :mod:`plenocal.depth.matching`), so that a disparity measured
with a wrong scale and offset is w_true = c0 + c1·w_matched. On the calibration frames both are
known: each micro-image whose line of sight meets the board has the true w of the board plane
(the calibrated pose, :func:`board_virtual_depths`) and the matched one.

Measured on the PRISM R12-B set (8 tilted calibration frames at 400–770 mm, the camera and κ that
``plenocal run`` calibrated): matched w is 1.5 % short at 400 mm and 1.7 % long at 770 mm
(c0 = 0.0027 ± 0.0005, c1 = 0.977 ± 0.005, W = 33 against the identity; the same for the three
lens types to 0.2 %); applied to the five translation frames it brings the signed board error
from −0.61 … +0.38 % to −0.13 … +0.06 % and the displacement errors from 2.2–2.5 % to 0.1–1.2 %.
A quadratic in w, or the reference's quadratic in z, does no better on those frames
(docs/depth.md, "Depth scaling").

**The field term** (beyond the reference). Within a frame the matcher's error also varies across
the field on real optics: on the real-optics R12-B's 8 calibration frames the relative w error,
each frame's median removed, is +0.7…+1.3 % within 2 mm of the axis, ≈ 0 at 2–4 mm and −0.1…−0.8 %
at 4–6 mm, the same shape in every frame (the caps' field-dependent disparity scale, which the
matcher sees through the texture and calibration through the detector's corners,
docs/model.md "Real micro-lenses"). So w_matched is first divided by 1 + b·r² + c·r⁴ (r the
micro-lens's distance from the main axis, mm), with (b, c) the mean of each frame's own robust
fit and their covariance the frames' scatter; kept when Hotelling's T² against zero passes
:data:`FALSE_ALARM` (T² 258 there; PRISM's thin-lens renders: see docs/depth.md). Then c0, c1 are
fitted on the corrected frame summaries as above.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import least_squares

from plenocal._distributions import MAD_TO_SIGMA, f_isf
from plenocal.depth.metric import points_from_virtual_depth, virtual_depth_of_points
from plenocal.model.camera import PlenopticCamera
from plenocal.model.geometry import Pose
from plenocal.model.target import Checkerboard

FloatArray = NDArray[np.float64]

FIT_MARGIN_SQUARES = 0.5
"""Micro-images whose line of sight meets the board within the inner corners' extent widened by
this many squares count as seeing the board (the printed squares reach one square beyond; a
micro-image sees a patch of a few mm, so its depth mixes the board and the background near the
edge)."""

MIN_ABS_VIRTUAL_DEPTH = 2.0
"""Board micro-images whose true |υ| is below this are not used (the matcher does not search
there: :data:`plenocal.depth.matching.MIN_ABS_VIRTUAL_DEPTH`)."""

PLANE_ITERATIONS = 4
"""Line–plane steps of :func:`board_virtual_depths` (the object-space line of sight is straight to
the model's depth distortion: the third step moves υ by < 1e-9 relative on the R12 presets)."""

ROBUST_SCALE = 0.005
"""Soft-L1 scale of the fit's residuals (one per frame, relative to w): the frames' w errors scatter
by 0.3 % RMS about the fit on the PRISM R12-B calibration frames, 0.8 % on the real-optics R12-B's."""

FALSE_ALARM = 1e-2
"""The scaling is kept when the Wald statistic W of (c0, c1 − 1) against the identity exceeds
2·F(2, n − 2)'s quantile at this rate (n frames; the covariance is estimated from the same n
frames, so W/2 follows Fisher's F, not χ²₂/2: 21.8 for 8 frames, 14.4 for 13). Measured: W 33
on the PRISM R12-B set, 31 on the real-optics R12-B set; unbiased synthetic matchers 0.2–10.8."""

FIELD_OUTLIER_FRACTION = 0.05
"""Micro-images whose relative w error is further than this from their frame's median are left out
of the frame's field fit (wrong minima; the field term is a few tenths of a percent)."""

MIN_FRAMES = 4
"""Fewer calibration frames with board depths leave the jackknife covariance too noisy to test
with: no scaling."""

MAX_EXTRAPOLATION_SIGMA_RATIO = 2.0
"""A frame's depths are said to extrapolate the scaling (:func:`extrapolation`) when the
correction's own σ at the frame's median matched 1/υ exceeds this many times its largest σ over the
calibration frames it was fitted on: beyond the frames' span of 1/υ the line's σ grows with the
distance from them. plenocal's R12-C render through the double-Gauss (calibration frames at
0.99–2.5 m, translation frames at 0.4–1.25 m): σ 0.20–0.41 % of 1/υ on the calibration frames,
1.9 % at the 400 mm board, whose median z the scaling moved from −2.5 % to +1.8 %; the PRISM and
real-optics R12-B translation frames: σ 0.07–0.19 %, none flagged."""


def board_virtual_depths(camera: PlenopticCamera, k: NDArray[np.int64], l: NDArray[np.int64], pose: Pose, board: Checkerboard, *,
                         margin_squares: float = FIT_MARGIN_SQUARES,
                         iterations: int = PLANE_ITERATIONS,
                         node_extent: tuple[int, int, int, int] | None = None) -> tuple[NDArray[np.bool_], FloatArray]:
    """Where each micro-image's line of sight meets the board plane, as a virtual depth.

    The line of sight of micro-image (k, l) is the curve of :func:`points_from_virtual_depth` as υ
    runs (a straight line in object space for the thin lens); it is met by line–plane steps
    between its points at υ and 1.02·υ, from the υ of the board's centre.

    Parameters
    ----------
    k, l : (N,) micro-lens indices; pose : board → camera (mm); board : its inner corners' extent.
    node_extent : (first column, last column, first row, last row) of the nodes to take as the
        board's extent instead of all of them (a frame linked with relative node ids: only its
        linked nodes are known to lie on the printed board, :func:`plenocal.io.poses.read_node_extents`).

    Returns
    -------
    on_board : (N,) bool, the foot inside the extent widened by ``margin_squares`` and |υ| ≥
        :data:`MIN_ABS_VIRTUAL_DEPTH`, finite.
    virtual_depth : (N,) υ of the board plane along the line of sight (NaN where not found).
    """
    k = np.asarray(k, dtype=np.int64)
    l = np.asarray(l, dtype=np.int64)
    R = np.asarray(pose.rotation, dtype=np.float64)
    t = np.asarray(pose.translation, dtype=np.float64)
    sq = board.square_mm
    width, height = (board.columns - 1) * sq, (board.rows - 1) * sq
    normal = R[:, 2]
    centre = t + R @ np.array([width / 2, height / 2, 0.0])
    with np.errstate(all="ignore"):
        ups = virtual_depth_of_points(camera, np.broadcast_to(centre, (len(k), 3)), k, l)
        hit = np.full((len(k), 3), np.nan)
        for _ in range(int(iterations)):
            a = points_from_virtual_depth(camera, k, l, ups)
            b = points_from_virtual_depth(camera, k, l, 1.02 * ups)
            s = ((t - a) @ normal) / ((b - a) @ normal)
            hit = a + s[:, None] * (b - a)
            ups = virtual_depth_of_points(camera, hit, k, l)
        local = (hit - t) @ R
    ok = np.isfinite(ups) & np.all(np.isfinite(local), axis=1)
    loc = np.where(ok[:, None], local, 0.0)
    on = (ok & board.covers(loc, margin_squares=margin_squares, node_extent=node_extent)
          & (np.abs(np.where(ok, ups, 0.0)) >= MIN_ABS_VIRTUAL_DEPTH))
    return on, np.where(ok, ups, np.nan)


def _finite_or_none(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _float_or_nan(x: Any) -> float:
    return float("nan") if x is None else float(x)


@dataclass(frozen=True)
class DepthScaling:
    """w_true = c0 + c1·w_matched (w = 1/υ), fitted on calibration frames.

    Attributes
    ----------
    coefficients : (c0, c1); covariance : 2 × 2, the frame jackknife's or the frames' residual
        scatter's, whichever gives the smaller W (``covariance_method``).
    wald, threshold : W of (c0, c1 − 1) against the identity and :func:`wald_threshold`.
    kept : whether depth uses it (W > threshold, ≥ :data:`MIN_FRAMES` frames).
    n_frames, n_points : what the fit used; per_frame : each frame's median z (mm), the median
        signed error of w relative to the truth before and after (%) and the correction's own σ
        there (%, from the covariance), for the report.
    reason : one line.
    """

    coefficients: tuple[float, float]
    covariance: tuple[tuple[float, float], tuple[float, float]]
    wald: float
    threshold: float
    kept: bool
    n_frames: int
    n_points: int
    reason: str
    per_frame: dict[int, dict[str, float]] = field(default_factory=dict)
    covariance_method: str = "jackknife over frames"
    field: FieldTerm | None = None
    """The field term (None: not fitted, no radii in the samples)."""

    @staticmethod
    def identity(reason: str) -> DepthScaling:
        return DepthScaling((0.0, 1.0), ((0.0, 0.0), (0.0, 0.0)), float("nan"), float("nan"), False, 0, 0, reason)

    @property
    def field_kept(self) -> bool:
        return self.field is not None and self.field.kept

    @property
    def applied(self) -> bool:
        """Whether :meth:`apply` changes any depth (the scale or the field term kept)."""
        return self.kept or self.field_kept

    def apply(self, virtual_depth: FloatArray, radius2_mm2: FloatArray | None = None) -> FloatArray:
        """υ corrected (unchanged when not kept; NaN stays NaN): the field term first, where kept and
        ``radius2_mm2`` (the micro-lenses' r², :func:`lens_radius2_mm2`) is given, then c0, c1."""
        ups = np.asarray(virtual_depth, dtype=np.float64)
        field_term = self.field if self.field_kept and radius2_mm2 is not None else None
        if not self.kept and field_term is None:
            return ups.copy()
        with np.errstate(divide="ignore", invalid="ignore"):
            w = 1.0 / ups
            if field_term is not None:
                w = field_term.corrected(w, np.asarray(radius2_mm2, dtype=np.float64))
            if self.kept:
                c0, c1 = self.coefficients
                w = c0 + c1 * w
            return 1.0 / w

    @property
    def support_w(self) -> tuple[float, float] | None:
        """(min, max) of the calibration frames' matched 1/υ (their summaries, :func:`frame_summary`);
        None when the file predates them."""
        w = [float(v["w_matched"]) for v in self.per_frame.values() if "w_matched" in v]
        return (min(w), max(w)) if w else None

    def correction_sigma(self, w_matched: float) -> float:
        """The correction's own σ at a matched 1/υ, relative to the corrected one (the covariance's)."""
        return correction_sigma(self.coefficients, self.covariance, w_matched)

    def to_json(self) -> dict[str, Any]:
        c0, c1 = self.coefficients
        C = np.asarray(self.covariance)
        return {"form": "w_true = c0 + c1 * w_matched, w = 1/virtual_depth", "kept": self.kept,
                "c0": c0, "c1": c1, "c0_std": float(np.sqrt(C[0, 0])), "c1_std": float(np.sqrt(C[1, 1])),
                "covariance": [list(map(float, r)) for r in C], "covariance_method": self.covariance_method,
                "wald": _finite_or_none(self.wald), "threshold": _finite_or_none(self.threshold), "false_alarm": FALSE_ALARM,
                "n_frames": self.n_frames, "n_points": self.n_points, "reason": self.reason,
                "per_frame": {str(f): v for f, v in sorted(self.per_frame.items())},
                **({"field": self.field.to_json()} if self.field is not None else {})}

    @staticmethod
    def from_json(doc: Mapping[str, Any]) -> DepthScaling:
        return DepthScaling((float(doc["c0"]), float(doc["c1"])), tuple(tuple(float(x) for x in r) for r in doc["covariance"]),  # type: ignore[arg-type]
                            _float_or_nan(doc["wald"]), _float_or_nan(doc["threshold"]), bool(doc["kept"]), int(doc["n_frames"]),
                            int(doc["n_points"]), str(doc["reason"]),
                            {int(f): {str(k): x if isinstance(x, int) else float(x) for k, x in dict(v).items()}
                             for f, v in dict(doc.get("per_frame", {})).items()},  # numbers: a malformed file fails here
                            str(doc.get("covariance_method", "jackknife over frames")),
                            FieldTerm.from_json(doc["field"]) if doc.get("field") else None)


@dataclass(frozen=True)
class FieldTerm:
    """w_field = w_matched / (1 + a + b·r² + c·r⁴), r the micro-lens's distance from the main axis (mm).

    Attributes
    ----------
    coefficients : (b, c), the mean of the frames' own fits; covariance : their scatter / n.
    t2, threshold : Hotelling's T² against zero and :func:`hotelling_threshold`; kept : T² > threshold.
    per_frame : each frame's (b, c).
    offset : a, minus the median of b·r² + c·r⁴ over the calibration frames' micro-images: the term
        changes the field's shape, not its scale (which c0, c1 fit, or leave, after it).
    """

    coefficients: tuple[float, float]
    covariance: tuple[tuple[float, float], tuple[float, float]]
    t2: float
    threshold: float
    kept: bool
    per_frame: dict[int, tuple[float, float]] = field(default_factory=dict)
    offset: float = 0.0

    def corrected(self, w_matched: FloatArray, radius2_mm2: FloatArray) -> FloatArray:
        b, c = self.coefficients
        return w_matched / (1.0 + self.offset + b * radius2_mm2 + c * radius2_mm2 * radius2_mm2)

    def to_json(self) -> dict[str, Any]:
        b, c = self.coefficients
        C = np.asarray(self.covariance)
        return {"form": "w_field = w_matched / (1 + offset + b r^2 + c r^4), r: micro-lens distance from the axis (mm)",
                "b": b, "c": c, "b_std": float(np.sqrt(C[0, 0])), "c_std": float(np.sqrt(C[1, 1])),
                "covariance": [list(map(float, r)) for r in C], "t2": _finite_or_none(self.t2),
                "threshold": _finite_or_none(self.threshold), "kept": self.kept, "offset": self.offset,
                "per_frame": {str(f): list(v) for f, v in sorted(self.per_frame.items())}}

    @staticmethod
    def from_json(doc: Mapping[str, Any]) -> FieldTerm:
        return FieldTerm((float(doc["b"]), float(doc["c"])), tuple(tuple(float(x) for x in r) for r in doc["covariance"]),  # type: ignore[arg-type]
                         _float_or_nan(doc["t2"]), _float_or_nan(doc["threshold"]), bool(doc["kept"]),
                         {int(f): (float(v[0]), float(v[1])) for f, v in dict(doc.get("per_frame", {})).items()},
                         float(doc.get("offset", 0.0)))


def correction_sigma(coefficients: tuple[float, float], covariance: Any, w_matched: Any) -> Any:
    """σ of c0 + c1·w at matched ``w`` (scalar or array) from the 2 × 2 ``covariance`` of (c0, c1),
    relative to the corrected w."""
    C = np.asarray(covariance, dtype=np.float64)
    w = np.asarray(w_matched, dtype=np.float64)
    c0, c1 = coefficients
    return np.sqrt(np.maximum(C[0, 0] + 2 * C[0, 1] * w + C[1, 1] * w * w, 0.0)) / np.abs(c0 + c1 * w)


def extrapolation(scaling: DepthScaling, w_matched_median: float, z_median_mm: float, *,
                  max_sigma_ratio: float = MAX_EXTRAPOLATION_SIGMA_RATIO) -> dict[str, Any] | None:
    """Where a depth frame lies against the calibration frames the kept ``scaling`` was fitted on:
    its median matched 1/υ and the frames' span of it, the correction's σ there and at those frames
    (% of 1/υ), and ``extrapolated``: "nearer" or "farther" (its median z against the frames') when
    its σ there exceeds ``max_sigma_ratio`` (:data:`MAX_EXTRAPOLATION_SIGMA_RATIO`) times the
    frames' largest and it lies outside their span, else None. None when the scaling is not kept or
    its file has no frame summaries."""
    support = scaling.support_w
    if not scaling.kept or support is None or not np.isfinite(w_matched_median):
        return None
    fitted = [float(v["correction_sigma_percent"]) for v in scaling.per_frame.values() if "correction_sigma_percent" in v]
    z_fitted = [float(v["z_median_mm"]) for v in scaling.per_frame.values() if "z_median_mm" in v]
    sigma = float(100 * scaling.correction_sigma(float(w_matched_median)))
    lo, hi = support
    beyond = None
    if fitted and z_fitted and sigma > max_sigma_ratio * max(fitted) and not lo <= w_matched_median <= hi:
        beyond = "nearer" if z_median_mm < float(np.median(z_fitted)) else "farther"
    return {"w_matched_median": float(w_matched_median), "support_w": [lo, hi], "correction_sigma_percent": sigma,
            "calibration_sigma_percent": [min(fitted), max(fitted)] if fitted else None,
            "calibration_z_mm": [min(z_fitted), max(z_fitted)] if z_fitted else None, "extrapolated": beyond}


def extrapolation_text(frames: Mapping[Any, Mapping[str, Any] | None]) -> list[str]:
    """One line per direction ("nearer", "farther") for the frames whose depths extrapolate the
    scaling (``frames``: frame → :func:`extrapolation`'s entry; the others are left out)."""
    lines = []
    for side in ("nearer", "farther"):
        group = {f: e for f, e in frames.items() if isinstance(e, Mapping) and e.get("extrapolated") == side}
        if not group:
            continue
        ext = next(iter(group.values()))
        lo, hi = ext["support_w"]
        z = ext.get("calibration_z_mm") or [float("nan")] * 2
        s_lo, s_hi = ext.get("calibration_sigma_percent") or [float("nan")] * 2
        w = [e["w_matched_median"] for e in group.values()]
        sig = [e["correction_sigma_percent"] for e in group.values()]
        names = ", ".join(str(f) for f in group)
        w_text = f"{w[0]:.3g}" if len(w) == 1 else f"{min(w):.3g}–{max(w):.3g}"
        sig_text = f"{sig[0]:.2g}" if len(sig) == 1 else f"{min(sig):.2g}–{max(sig):.2g}"
        lines.append(f"frame{'s' if len(group) > 1 else ''} {names}: depths {side} than every calibration frame the depth "
                     f"scaling was fitted on (1/υ {w_text} against {lo:.3g}–{hi:.3g}, frames at "
                     f"{z[0]:.0f}–{z[1]:.0f} mm): the scaling is extrapolated there, its own σ {sig_text} % "
                     f"of 1/υ against {s_lo:.2g}–{s_hi:.2g} % on those frames; calibration frames spanning these distances "
                     "would fix it")
    return lines


def lens_radius2_mm2(camera: PlenopticCamera, k: NDArray[np.int64], l: NDArray[np.int64]) -> FloatArray:
    """r² (mm²) of micro-lenses (k, l): their centres' distance from the main lens's axis."""
    from plenocal.model.projection import micro_lens_centres

    C = micro_lens_centres(camera, np.asarray(k, dtype=np.int64), np.asarray(l, dtype=np.int64))
    return C[:, 0] ** 2 + C[:, 1] ** 2


def hotelling_threshold(n_frames: int, p: int = 2, false_alarm: float = FALSE_ALARM) -> float:
    """T² of a p-vector mean over n frames (its covariance from the same frames) above which it is
    not zero: p(n − 1)/(n − p)·F(p, n − p)'s upper quantile."""
    n = max(int(n_frames), p + 1)
    return float(p * (n - 1) / (n - p) * f_isf(false_alarm, p, n - p))


def frame_field_fit(w_matched: FloatArray, w_true: FloatArray, radius2_mm2: FloatArray, *,
                    outlier_fraction: float = FIELD_OUTLIER_FRACTION) -> tuple[float, float] | None:
    """One frame's (b, c): iteratively reweighted least squares of its relative w error on
    [1, r², r⁴] (the constant is the frame's, left to c0, c1); None with fewer than 20 points."""
    rel = (np.asarray(w_matched) - np.asarray(w_true)) / np.asarray(w_true)
    r2 = np.asarray(radius2_mm2, dtype=np.float64)
    m = np.isfinite(rel) & np.isfinite(r2) & (np.abs(rel - np.nanmedian(rel)) < outlier_fraction)
    if m.sum() < 20:
        return None
    A = np.column_stack([np.ones(int(m.sum())), r2[m], r2[m] ** 2])
    y = rel[m]
    wt = np.ones(len(y))
    coef = np.zeros(3)
    for _ in range(6):
        coef, *_ = np.linalg.lstsq(A * wt[:, None], y * wt, rcond=None)
        res = y - A @ coef
        s = MAD_TO_SIGMA * float(np.median(np.abs(res))) or 1e-12
        wt = 1.0 / np.maximum(1.0, np.abs(res) / (2.0 * s))
    return float(coef[1]), float(coef[2])


def fit_field_term(samples: Mapping[int, tuple[FloatArray, ...]], *, false_alarm: float = FALSE_ALARM,
                   min_frames: int = MIN_FRAMES) -> FieldTerm | None:
    """The field term from the frames' own fits (:func:`frame_field_fit`): their mean, its
    covariance from their scatter, Hotelling's T² against zero. None when the samples carry no radii
    or fewer than ``min_frames`` frames give a fit."""
    fits = {}
    for f, smp in samples.items():
        if len(smp) < 4 or len(smp[0]) == 0:
            continue
        fit = frame_field_fit(smp[0], smp[1], smp[3])
        if fit is not None:
            fits[f] = fit
    if len(fits) < min_frames:
        return None
    B = np.array([fits[f] for f in sorted(fits)])
    n = len(B)
    mean = B.mean(axis=0)
    cov = np.cov(B.T, ddof=1) / n
    try:
        t2 = float(mean @ np.linalg.solve(cov, mean))
    except np.linalg.LinAlgError:
        t2 = float("nan")
    threshold = hotelling_threshold(n, 2, false_alarm)
    r2 = np.concatenate([np.asarray(samples[f][3], dtype=np.float64) for f in fits])
    offset = -float(np.median(mean[0] * r2 + mean[1] * r2 * r2))
    return FieldTerm((float(mean[0]), float(mean[1])), ((float(cov[0, 0]), float(cov[0, 1])), (float(cov[1, 0]), float(cov[1, 1]))),
                     t2, threshold, bool(np.isfinite(t2) and t2 > threshold), dict(sorted(fits.items())), offset)


def wald_threshold(n_frames: int, false_alarm: float = FALSE_ALARM) -> float:
    """W above which the scaling is kept (:data:`FALSE_ALARM`): 2·F(2, n − 2)'s upper quantile."""
    return float(2.0 * f_isf(false_alarm, 2, max(int(n_frames) - 2, 1)))


def frame_summary(w_matched: FloatArray, w_true: FloatArray) -> tuple[float, float]:
    """A frame's (w_matched, w_true) at its median: the median w_true and the matched w that the
    median relative error gives there (robust to the micro-images in wrong minima)."""
    wt = float(np.median(w_true))
    r = float(np.median((np.asarray(w_matched) - np.asarray(w_true)) / np.asarray(w_true)))
    return wt * (1.0 + r), wt


def _fit(w_matched: FloatArray, w_true: FloatArray, robust_scale: float) -> FloatArray:
    def residual(c: FloatArray) -> FloatArray:
        return (c[0] + c[1] * w_matched - w_true) / w_true

    return least_squares(residual, np.array([0.0, 1.0]), loss="soft_l1", f_scale=robust_scale, x_scale=[1e-3, 1e-2], method="trf").x


def fit_depth_scaling(samples: Mapping[int, tuple[FloatArray, ...]], *,
                      robust_scale: float = ROBUST_SCALE, false_alarm: float = FALSE_ALARM,
                      min_frames: int = MIN_FRAMES) -> DepthScaling:
    """Fit w_true = c0 + c1·w_matched over the calibration frames, one summary per frame, after the
    field term (:func:`fit_field_term`) where the samples carry radii and the data keep it.

    Parameters
    ----------
    samples : frame → (w_matched, w_true, z_true mm[, r² mm²]), (n_f,) each: the matcher's
        aggregated 1/υ and the board plane's, of the micro-images that see the board, and their
        lenses' squared distance from the axis.
    robust_scale : :data:`ROBUST_SCALE`; false_alarm : :data:`FALSE_ALARM`; min_frames :
        :data:`MIN_FRAMES`.

    Returns
    -------
    DepthScaling: the soft-L1 fit of the frames' summaries (:func:`frame_summary`) in relative
    residuals, its covariance (the jackknife over frames or the residual scatter, whichever is the
    more cautious), and the Wald test against the identity. One summary per frame, not every micro-image: a frame's micro-images share its
    pose's error, and within a tilted frame the matcher's error also varies across the field —
    on the real-optics R12-B set a fit of every micro-image followed that within-frame trend
    (c1 0.937) and left the far frames 2–4.5 % off, the per-frame fit ±0.4–1.7 %.
    """
    frames = sorted(f for f, smp in samples.items() if len(smp[0]) > 0)
    if len(frames) < min_frames:
        return DepthScaling.identity(f"{len(frames)} calibration frame(s) with board depths (need >= {min_frames}): no depth scaling")
    field_term = fit_field_term(samples, false_alarm=false_alarm, min_frames=min_frames)
    if field_term is not None and field_term.kept:
        samples = {f: (field_term.corrected(np.asarray(samples[f][0]), np.asarray(samples[f][3])), *samples[f][1:]) for f in frames}
    summary = np.array([frame_summary(samples[f][0], samples[f][1]) for f in frames])
    wm, wt = summary[:, 0], summary[:, 1]
    c = _fit(wm, wt, robust_scale)
    n = len(frames)
    keep = ~np.eye(n, dtype=bool)
    jack = np.array([_fit(wm[keep[i]], wt[keep[i]], robust_scale) for i in range(n)])
    dev = jack - jack.mean(axis=0)
    cov_jack = (n - 1) / n * dev.T @ dev
    J = np.column_stack([1.0 / wt, wm / wt])
    r = (c[0] + c[1] * wm - wt) / wt
    cov_ls = float(r @ r) / max(n - 2, 1) * np.linalg.pinv(J.T @ J)
    theta = c - np.array([0.0, 1.0])
    # The larger of the two uncertainties: the jackknife of 6–10 frames is itself noisy (2× too
    # small in some draws of tests/depth/test_scaling.py), the residual scatter's is not robust.
    wald, cov, method = float("inf"), cov_jack, "jackknife over frames"
    for C, name in ((cov_jack, "jackknife over frames"), (cov_ls, "residual scatter of the frames")):
        try:
            w_c = float(theta @ np.linalg.solve(C, theta))
        except np.linalg.LinAlgError:
            continue
        if np.isfinite(w_c) and w_c < wald:
            wald, cov, method = w_c, C, name
    if not np.isfinite(wald):
        wald = float("nan")
    threshold = wald_threshold(n, false_alarm)
    kept = bool(np.isfinite(wald) and wald > threshold)
    after = (c[0] + c[1] * wm - wt) / wt
    # the correction's own σ where each frame is (relative to the corrected w)
    sigma = correction_sigma((float(c[0]), float(c[1])), cov, wm)
    per_frame = {f: {"z_median_mm": float(np.median(samples[f][2])), "micro_images": len(samples[f][0]),
                     "w_matched": float(wm[i]),
                     "w_error_before_percent": float(100 * (wm[i] - wt[i]) / wt[i]),
                     "w_error_after_percent": float(100 * after[i]),
                     "correction_sigma_percent": float(100 * sigma[i])} for i, f in enumerate(frames)}
    reason = (f"W = {wald:.1f} {'>' if kept else '<='} {threshold:.1f} (2·F(2, {n - 2}), false alarm {false_alarm:g}) over {n} frames; "
              f"frames' w error {100 * np.sqrt(np.mean(((wm - wt) / wt) ** 2)):.2f} % RMS before, {100 * np.sqrt(np.mean(after ** 2)):.2f} % after")
    if field_term is not None:
        reason += (f"; field term {'kept' if field_term.kept else 'not applied'}: T² = {field_term.t2:.1f} "
                   f"{'>' if field_term.kept else '<='} {field_term.threshold:.1f} over {len(field_term.per_frame)} frames")
    return DepthScaling((float(c[0]), float(c[1])), ((float(cov[0, 0]), float(cov[0, 1])), (float(cov[1, 0]), float(cov[1, 1]))),
                        wald, threshold, kept, n, int(sum(len(samples[f][0]) for f in frames)), reason, per_frame, method, field_term)


def board_samples(devignetted: NDArray, weight: NDArray, camera: PlenopticCamera, pose: Pose, board: Checkerboard, *,
                  kappa: float, f_number: float | None = None,
                  distance_range_mm: tuple[float, float] | None = None,
                  field_radius_px: float | None = None,
                  node_extent: tuple[int, int, int, int] | None = None) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """One calibration frame's samples for :func:`fit_depth_scaling`: the micro-images that see the
    board (:func:`board_virtual_depths`) matched and aggregated as ``plenocal depth`` does (only
    those: the others are not matched; none beyond ``field_radius_px``, the model's field), with the
    board plane's w and depth; ``node_extent`` as :func:`board_virtual_depths`'s.

    Returns
    -------
    w_matched, w_true : (n,) 1/υ of the estimated micro-images; z_true : (n,) mm, the depth of the
    board point on their line of sight; r2 : (n,) mm², their lenses' :func:`lens_radius2_mm2`.
    """
    from plenocal.depth.matching import depth_map

    k_all, l_all = camera.grid.lattice.all_indices()
    on, ups_true = board_virtual_depths(camera, k_all, l_all, pose, board, node_extent=node_extent)
    vd = depth_map(devignetted, weight, camera, kappa=kappa, f_number=f_number, distance_range_mm=distance_range_mm, subset=on,
                   field_radius_px=field_radius_px)
    ok = vd.ok & on
    z = points_from_virtual_depth(camera, k_all[ok], l_all[ok], ups_true[ok])[:, 2]
    return 1.0 / vd.virtual_depth[ok], 1.0 / ups_true[ok], z, lens_radius2_mm2(camera, k_all[ok], l_all[ok])
