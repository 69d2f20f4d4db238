"""Internal parameters Ω = {m, q'_i} from micro-image moments at several apertures (paper §3.2).

The radius law R_i(1/N) = m/N + q_i (eq:miradiusfnumber) with m = ∓dF/(2D), q_i = Δ_C·d/(2f_i) −
Δc/2 (eq:miradiusfnumbermc) describes a white micro-image: the main-aperture disc R_a = |m|/N
convolved with the micro-lens blur disc R_b = |q_i|.

Two estimators:

- ``"variance"`` (default): the second moment of disc ⊗ disc obeys 4σ² = R_a² + R_b² exactly.
  plenocal fits, over every micro-image and every usable aperture at once,

      4σ²(k, l; N) = m(u, v)²/N² + (1 − w)·q_i(u, v)² + 4p,

  with m and q_i linear in the micro-image position (u, v) (a tilted MLA puts each lens at its own
  d(k, l): :class:`~plenocal.model.white.RadiusLawField`), p the pixel term (the variance that pixel
  area, diffraction and the like add to every micro-image) and w the unblurred fraction of light
  (0 for a real lens; 1/31 for PRISM, which adds the chief ray to every pixel's 30 lens samples).
  m comes from the slope against 1/N², which neither p nor w touches. p and w are not separable
  from q_i by second moments; they come from the *shape* of the mean radial profile in the centre
  of the array (:mod:`plenocal.precalib.profile`), so the estimator assumes neither a pixel
  integration nor a renderer. Ω is reported at the image of the MLA frame origin (where the
  camera model's d is defined) with the gradients across the sensor.
- ``"paper"``: the paper's line fit of α·σ·s = |m|/N + |q_i| (α = 2.357), joint over apertures
  (one slope, I intercepts), uniform over the sensor.

Signs follow the internal configuration (eq:miradiussgn): R < 0 for Galilean and unfocused.

Which apertures enter: those whose micro-images do not touch their neighbours (fitted support
radius below half the pitch). The paper keeps apertures whose per-type radius distributions are
"distinguishable, with small overlap" (§3.2): here every micro-image's type comes from the
periodic layout found jointly over all apertures (:mod:`plenocal.precalib.types`), so an
aperture where the distributions overlap still measures each type correctly; the paper's rule
becomes a statistic on the layout itself: the Bayes error of telling a micro-image's type from its
radii at all apertures together (:func:`type_confusion`) must stay below
:data:`MAX_TYPE_CONFUSION`. Each aperture's own confusion is reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import NDArray

from plenocal._distributions import norm_cdf
from plenocal.errors import DataError
from plenocal.model.camera import Configuration
from plenocal.model.white import InternalParameters, LensletFieldTrend, RadiusLawField
from plenocal.precalib.profile import ProfileFit, fit_profile, radial_profile
from plenocal.precalib.radii import PIXEL_VARIANCE, Moments, windowed_moments

FloatArray = NDArray[np.float64]

TOUCH_MARGIN_PX = 0.5
"""Apertures whose fitted support radius max_i |R_i(N)| reaches pitch/2 − this are left out:
touching micro-images are truncated by their neighbours, which biases their moments."""
MAX_TYPE_CONFUSION = 0.05
"""Largest Bayes error, over pairs of types, of telling a micro-image's type from its radii at all
usable apertures (the paper's "distinguishable, with small overlap", as a number)."""
OUTLIER_SIGMAS = 5.0
"""Micro-images whose variance-law residual exceeds this many robust σ are left out of Ω."""
PROFILE_REGION_FRACTION = 1.0 / 3.0
"""The mean radial profiles are taken over the micro-images in the central third of the sensor
(both axes), where the main aperture is seen undistorted."""
MIN_PROFILE_MICRO_IMAGES = 50
"""Fewer micro-images of one type in the central region: no profile fit for that type."""
SUPPORT_MARGIN_PX = 1.5
"""Window radius beyond a micro-image's fitted support |m|/N + |q_i|: room for the pixel's area,
diffraction and the support's own uncertainty (a few tenths of a px)."""
MIN_SHAPE_RADIUS_PX = 2.0
"""A profile fit tells the pixel term from the lens blur only when the lens disc R_b is several
times the pixel kernel's spread (≈ 0.3 px): below this R_b both are just "a small blur" (unfocused
cameras), and the fit does not enter p and w."""


LENSLET_TREND_RADIUS_MM = 5.0
"""Where :func:`lenslet_field_trend` reports the change of the lens blur disc R_b: 5 mm from the
sensor's centre, inside the field of every R12-size camera (a main lens's image circle may clip
micro-images beyond 6 mm, which the conformity rules then leave out)."""


def lenslet_field_trend(
    inv_n2: FloatArray,
    pos_px: FloatArray,
    typ: NDArray[np.int64],
    y_mm2: FloatArray,
    inlier: NDArray[np.bool_],
    nt: int,
    *,
    pixel_size_mm: float,
    centre_px: tuple[float, float],
    offset_mm2: float = 0.0,
    blur_scale: float = 1.0,
    radius_mm: float = LENSLET_TREND_RADIUS_MM,
) -> LensletFieldTrend | None:
    """R_b's change across the field, per type (:class:`LensletFieldTrend`).

    Per type, in the squared domain of the variance law (4σ² = R_a² + (1 − w)R_b² + 4p), a linear
    least-squares fit of 4σ² − 4p on [1, x, y, r²] and the same divided by N² (x, y, r in mm from
    ``centre_px``): the constant and r² terms of the blur part give R_b(r)²/R_b(0)² = 1 + b₂r²/b₀,
    so the change at ``radius_mm`` is √(1 + b₂R²/b₀) − 1, its σ by the delta method from the fit's
    residual σ. The aperture part's own radial term (the main lens's pupil seen obliquely,
    vignetting) goes to the 1/N² columns. The r² coefficients do not depend on the centre chosen
    (a shifted centre changes only the linear and constant terms), so the sensor's centre serves;
    only b₀, the blur at the centre, does, by the tilt's few per cent over the shift.
    None without at least 2 apertures and 50 micro-images of each type."""
    s = pixel_size_mm
    xy = (np.asarray(pos_px, dtype=np.float64) - np.asarray(centre_px)) * s
    r2 = np.sum(xy * xy, axis=1)
    changes, stds = [], []
    for t in range(max(nt, 1)):
        sel = inlier & (typ == t)
        if np.count_nonzero(sel) < 50 or len(np.unique(inv_n2[sel])) < 2:
            return None
        g = np.column_stack([np.ones(np.count_nonzero(sel)), xy[sel], r2[sel]])
        X = np.column_stack([g * inv_n2[sel, None], g])
        yy = y_mm2[sel] - offset_mm2
        coef, *_ = np.linalg.lstsq(X, yy, rcond=None)
        res = yy - X @ coef
        dof = max(len(yy) - X.shape[1], 1)
        cov = np.linalg.pinv(X.T @ X) * float(res @ res) / dof
        b0, b2 = coef[4] / blur_scale, coef[7] / blur_scale
        if b0 <= 0.0:
            return None
        ratio = 1.0 + b2 * radius_mm**2 / b0
        change = float(np.sqrt(max(ratio, 0.0)) - 1.0)
        # d(change)/d(b0, b2) through ratio = 1 + b2 R²/b0
        dr = 0.5 / np.sqrt(max(ratio, 1e-12))
        grad = np.zeros(X.shape[1])
        grad[4] = dr * (-b2 * radius_mm**2 / b0**2) / blur_scale
        grad[7] = dr * (radius_mm**2 / b0) / blur_scale
        changes.append(change)
        stds.append(float(np.sqrt(max(grad @ cov @ grad, 0.0))))
    reach = float(np.sqrt(r2[inlier].max())) if np.any(inlier) else 0.0
    return LensletFieldTrend(float(radius_mm), tuple(changes), tuple(stds), reach)


@dataclass(frozen=True)
class ApertureDecision:
    f_number: float
    used: bool
    reason: str
    mean_radius_alpha_px: tuple[float, ...]
    """Per-type median of the paper's α·σ radius."""
    type_confusion: float = float("nan")
    """Bayes error of telling the types apart at this aperture alone (informational)."""


@dataclass(frozen=True)
class InternalsFit:
    omega: InternalParameters
    estimator: str
    apertures: tuple[ApertureDecision, ...]
    residual_rms_px: float
    """RMS of the fit residuals: of 4σ² in px² (variance estimator) or of α·σ in px (paper)."""
    per_type_radius_px: dict[float, tuple[float, ...]] = field(default_factory=dict)
    """Fitted support radius |R_i(N)| in px per used aperture, at the reference point."""
    pixel_variance_px2: float = PIXEL_VARIANCE
    """p: the variance every pixel adds, from the profile shape (variance estimator)."""
    unblurred_weight: float = 0.0
    """w: the fraction of light not blurred by the micro-lenses, from the profile shape."""
    profile_fits: tuple[tuple[float, int, ProfileFit], ...] = ()
    """(N, type, fit) of every mean-profile fit."""
    type_confusion: float = 0.0
    """Joint Bayes error of the type layout over the usable apertures (:func:`type_confusion`)."""
    q_prime_spread_mm: tuple[float, ...] = ()
    """Per type, the spread of q'_i over the apertures' profile fits (a systematic uncertainty)."""
    warnings: tuple[str, ...] = ()


class InternalsError(DataError):
    """Ω cannot be estimated; carries the per-aperture decisions for the radii plot."""

    def __init__(self, message: str, apertures: tuple[ApertureDecision, ...]) -> None:
        super().__init__(message)
        self.apertures = apertures


def detrended(values: FloatArray, uv_px: FloatArray) -> FloatArray:
    """``values`` minus their quadratic trend across the sensor (the MLA tilt's), plus the mean."""
    x, y = _normalised(uv_px)
    A = np.stack([np.ones_like(x), x, y, x * x, x * y, y * y], axis=1)
    coef, *_ = np.linalg.lstsq(A, values, rcond=None)
    return values - A @ coef + float(np.mean(values))


def _normalised(uv_px: FloatArray) -> tuple[FloatArray, FloatArray]:
    uv = np.asarray(uv_px, dtype=np.float64)
    c = uv.mean(axis=0)
    sc = np.maximum(uv.max(axis=0) - uv.min(axis=0), 1.0)
    return (uv[:, 0] - c[0]) / sc[0], (uv[:, 1] - c[1]) / sc[1]


def type_confusion(features: FloatArray, types: NDArray[np.int64], n_types: int) -> float:
    """Largest pairwise Bayes error of classifying micro-images by type from ``features``.

    Linear discriminant model: each type's features are Gaussian around the type mean with one
    pooled covariance; two types whose means are a Mahalanobis distance Δ apart are confused with
    probability Φ(−Δ/2) (equal priors).

    Parameters
    ----------
    features : (M,) or (M, F)
    types : (M,) type of each micro-image (from the layout).
    """
    f = np.asarray(features, dtype=np.float64)
    f = f[:, None] if f.ndim == 1 else f
    if n_types < 2:
        return 0.0
    means, resid = [], []
    for i in range(n_types):
        fi = f[types == i]
        if len(fi) < 2:
            return 0.5
        means.append(np.median(fi, axis=0))
        resid.append(fi - means[-1])
    r = np.concatenate(resid)
    # Robust pooled covariance: MAD-scaled, clipped at 5σ so that a few broken micro-images do not
    # inflate it.
    scale = 1.4826 * np.median(np.abs(r), axis=0) + 1e-12
    r = r[np.all(np.abs(r) < 5.0 * scale, axis=1)]
    cov = np.atleast_2d(np.cov(r, rowvar=False)) + 1e-12 * np.eye(f.shape[1])
    inv = np.linalg.inv(cov)
    worst = 0.0
    for i in range(n_types):
        for j in range(i + 1, n_types):
            d = means[i] - means[j]
            delta = float(np.sqrt(max(d @ inv @ d, 0.0)))
            worst = max(worst, float(norm_cdf(-delta / 2.0)))
    return worst


def select_apertures(
    moments: dict[float, Moments],
    types: dict[float, NDArray[np.int64]],
    pitch_px: float,
    n_types: int,
    *,
    support_px: dict[float, float] | None = None,
    touch_margin_px: float = TOUCH_MARGIN_PX,
    left_out: Mapping[float, str] | None = None,
) -> list[ApertureDecision]:
    """Decide which white images enter the Ω fit (module docstring).

    ``support_px`` gives, per f-number, the largest fitted support radius max_i |R_i(N)| in px;
    apertures where it reaches pitch/2 − ``touch_margin_px`` are left out, and so are those of
    ``left_out`` (f-number → the reason, :func:`plenocal.precalib.checks.check_f_numbers`).
    """
    out = []
    for N in sorted(moments):
        m = moments[N]
        t = types[N]
        r = m.radius_alpha_px
        per_type = tuple(float(np.median(r[t == i])) if np.any(t == i) else float("nan") for i in range(max(n_types, 1)))
        conf = type_confusion(detrended(m.variance_px2, m.centre_px), t, n_types) if n_types >= 2 else 0.0
        if left_out and N in left_out:
            out.append(ApertureDecision(N, False, left_out[N], per_type, conf))
            continue
        if support_px is not None and N in support_px and support_px[N] >= pitch_px / 2.0 - touch_margin_px:
            reason = (f"micro-images touch their neighbours (fitted support radius {support_px[N]:.2f} px ≥ "
                      f"pitch/2 − {touch_margin_px:g} = {pitch_px / 2 - touch_margin_px:.2f} px)")
            out.append(ApertureDecision(N, False, reason, per_type, conf))
            continue
        out.append(ApertureDecision(N, True, "micro-images separated", per_type, conf))
    return out


def _positions(m: Moments) -> FloatArray:
    return np.asarray(m.centre_px, dtype=np.float64)


def fit_internals(
    moments: dict[float, Moments],
    types: dict[float, NDArray[np.int64]],
    *,
    n_types: int,
    pixel_size_mm: float,
    micro_image_pitch_px: float,
    configuration: Configuration,
    f_number: float,
    estimator: str = "variance",
    reference_uv_px: tuple[float, float] | None = None,
    images: dict[float, NDArray] | None = None,
    left_out: Mapping[float, str] | None = None,
    excess_px2: Mapping[float, tuple[float, ...]] | None = None,
) -> InternalsFit:
    """Fit Ω over the usable apertures, iterating the touching test on the fitted law.

    Parameters
    ----------
    moments, types : per f-number, the moments and type index of each micro-image.
    n_types : I (I = 0 is fitted as one pinhole type).
    micro_image_pitch_px : MIA diameter (p0 + p1)/2; Δc = s·pitch.
    configuration : sets the signs of m and q_i.
    f_number : N of the checkerboard images (stored in Ω).
    reference_uv_px : where Ω's m, q_i are reported (default: the micro-images' mean position).
    images : per f-number, the (flattened) white images, for the profile fits (variance
        estimator); without them p = 1/24 px² ± 1/24 (the middle of area and point sampling) and
        w = 0.
    left_out : f-numbers kept out of the fit, each with the reason recorded in its decision.
    excess_px2 : per f-number, per type, a variance (px² per axis) the micro-images have beyond
        the variance law, taken off before the law is fitted (variance estimator; natural
        vignetting's, :func:`plenocal.precalib.radii.natural_vignetting_excess_px2`).

    Raises
    ------
    InternalsError
        Fewer than two usable apertures, or types that cannot be told apart.
    """
    support: dict[float, float] | None = None
    fit: InternalsFit | None = None
    for _ in range(4):
        decisions = select_apertures(moments, types, micro_image_pitch_px, n_types, support_px=support, left_out=left_out)
        _check_decisions(decisions, moments, types, n_types)
        if estimator == "paper":
            fit = _fit_paper(moments, types, decisions, n_types=n_types, pixel_size_mm=pixel_size_mm,
                             micro_image_pitch_px=micro_image_pitch_px, configuration=configuration, f_number=f_number)
        elif estimator == "variance":
            fit = _fit_variance(moments, types, decisions, n_types=n_types, pixel_size_mm=pixel_size_mm,
                                micro_image_pitch_px=micro_image_pitch_px, configuration=configuration,
                                f_number=f_number, reference_uv_px=reference_uv_px, images=images, excess_px2=excess_px2)
        else:
            raise ValueError(f"unknown estimator {estimator!r}")
        q_abs = np.abs(np.array(fit.omega.q_mm)) if n_types > 0 else np.array([micro_image_pitch_px * pixel_size_mm / 2])
        new_support = {N: float((abs(fit.omega.m_mm) / N + q_abs.max()) / pixel_size_mm) for N in moments}
        limit = micro_image_pitch_px / 2 - TOUCH_MARGIN_PX
        if support is not None and {N for N, v in support.items() if v >= limit} == {N for N, v in new_support.items() if v >= limit}:
            break
        support = new_support
    assert fit is not None
    return fit


def _check_decisions(
    decisions: list[ApertureDecision],
    moments: dict[float, Moments],
    types: dict[float, NDArray[np.int64]],
    n_types: int,
) -> None:
    used = [d.f_number for d in decisions if d.used]
    if len(used) < 2:
        why = "; ".join(f"N={d.f_number:g}: {d.reason}" for d in decisions if not d.used)
        raise InternalsError(
            f"need white images at >= 2 apertures whose micro-images do not touch, got {len(used)} of "
            f"{len(decisions)} ({why or 'no others given'}); add whites at smaller apertures (larger N)",
            tuple(decisions),
        )
    if n_types < 2:
        return
    conf = joint_type_confusion(moments, types, used, n_types)
    if conf > MAX_TYPE_CONFUSION:
        per = ", ".join(f"N={d.f_number:g}: {100 * d.type_confusion:.0f} %" for d in decisions if d.used)
        raise InternalsError(
            f"the micro-lens types cannot be told apart from the white images: a micro-image's type is "
            f"confused with another's in {100 * conf:.1f} % of cases over all usable apertures together "
            f"(> {100 * MAX_TYPE_CONFUSION:g} %; per aperture {per}); the types' radii differ by less than "
            "the micro-images' noise: average several white exposures per aperture, or add whites at "
            "smaller apertures (larger N), where the types differ most relative to their size",
            tuple(decisions),
        )


def joint_type_confusion(
    moments: dict[float, Moments], types: dict[float, NDArray[np.int64]], used: list[float], n_types: int
) -> float:
    """:func:`type_confusion` of the detrended variances at every used aperture jointly."""
    keys = {N: moments[N].l.astype(np.int64) * 1_000_000 + moments[N].k for N in used}
    common = None
    for v in keys.values():
        common = v if common is None else np.intersect1d(common, v)
    assert common is not None
    cols = []
    t = None
    for N in used:
        idx = np.searchsorted(keys[N], common) if np.all(np.diff(keys[N]) > 0) else np.nonzero(np.isin(keys[N], common))[0]
        m = moments[N]
        cols.append(detrended(m.variance_px2[idx], _positions(m)[idx]))
        t = types[N][idx]
    assert t is not None
    return type_confusion(np.stack(cols, axis=1), t, n_types)


# --- the variance estimator ------------------------------------------------------------------
def _variance_rows(
    moments: dict[float, Moments], types: dict[float, NDArray[np.int64]], used: list[float], s: float,
    excess_px2: Mapping[float, tuple[float, ...]] | None = None,
) -> tuple[FloatArray, FloatArray, NDArray[np.int64], FloatArray]:
    """Stacked (1/N², position (M, 2), type, 4σ² in mm²) over the used apertures, less 4 ×
    ``excess_px2[N][type]`` (:func:`fit_internals`)."""
    inv_n2, pos, typ, y = [], [], [], []
    for N in used:
        m = moments[N]
        t = np.clip(types[N], 0, None)
        inv_n2.append(np.full(len(m.k), 1.0 / N**2))
        pos.append(_positions(m))
        typ.append(t)
        excess = np.asarray(excess_px2[N], dtype=np.float64)[t] if excess_px2 is not None and N in excess_px2 else 0.0
        y.append(4.0 * (m.variance_px2 - excess) * s * s)
    return np.concatenate(inv_n2), np.concatenate(pos), np.concatenate(typ), np.concatenate(y)


def _law_fit(
    inv_n2: FloatArray,
    duv: FloatArray,
    typ: NDArray[np.int64],
    y: FloatArray,
    nt: int,
    *,
    offset_mm2: float,
    blur_scale: float,
) -> tuple[FloatArray, NDArray[np.bool_], float]:
    """Robust Gauss–Newton fit of y = (m0 + g·duv)²·inv_n2 + blur_scale·(q_t + h_t·duv)² + offset.

    Returns the parameters [m0, g_u, g_v, (q_t, h_tu, h_tv) per type] (all ≥ 0 magnitudes, mm
    and mm/px), the inlier mask and the robust σ of the residuals (mm²).
    """
    n = len(y)
    # Linear start: uniform law, squared domain.
    X = np.zeros((n, 1 + nt))
    X[:, 0] = inv_n2
    X[np.arange(n), 1 + typ] = blur_scale
    sol, *_ = np.linalg.lstsq(X, y - offset_mm2, rcond=None)
    p = np.zeros(3 + 3 * nt)
    p[0] = np.sqrt(max(sol[0], 1e-12))
    # A type whose lens-blur variance q_t² comes out ≤ 0 (an unfocused camera, R_b ≈ 0.03 px, with
    # the pixel term over-estimated) has q_t = 0: y does not depend on q_t there (∂y/∂q_t = 2q_t),
    # and Gauss–Newton would divide by that vanishing slope.
    free = np.ones(p.size, dtype=bool)
    for i in range(nt):
        if sol[1 + i] > 0.0:
            p[3 + 3 * i] = np.sqrt(sol[1 + i])
        else:
            free[3 + 3 * i : 6 + 3 * i] = False
    inlier = np.ones(n, dtype=bool)
    sigma = float("inf")
    for it in range(12):
        m = p[0] + duv @ p[1:3]
        qt = p[3 + 3 * typ] + duv[:, 0] * p[4 + 3 * typ] + duv[:, 1] * p[5 + 3 * typ]
        r = y - (m * m * inv_n2 + blur_scale * qt * qt + offset_mm2)
        sigma = 1.4826 * float(np.median(np.abs(r[inlier] - np.median(r[inlier])))) + 1e-30
        inlier = np.abs(r) < OUTLIER_SIGMAS * sigma
        J = np.zeros((n, p.size))
        J[:, 0] = 2 * m * inv_n2
        J[:, 1] = J[:, 0] * duv[:, 0]
        J[:, 2] = J[:, 0] * duv[:, 1]
        jq = 2 * blur_scale * qt
        rows = np.arange(n)
        J[rows, 3 + 3 * typ] = jq
        J[rows, 4 + 3 * typ] = jq * duv[:, 0]
        J[rows, 5 + 3 * typ] = jq * duv[:, 1]
        Ji, ri = J[inlier][:, free], r[inlier]
        col = np.sqrt(np.sum(Ji * Ji, axis=0)) + 1e-300
        step = np.zeros(p.size)
        step[free], *_ = np.linalg.lstsq(Ji / col, ri, rcond=None)
        step[free] /= col
        p = p + step
        if np.all(np.abs(step) <= 1e-10 * (np.abs(p) + 1e-12)) and it > 1:
            break
    return p, inlier, sigma


def _fit_variance(
    moments: dict[float, Moments],
    types: dict[float, NDArray[np.int64]],
    decisions: list[ApertureDecision],
    *,
    n_types: int,
    pixel_size_mm: float,
    micro_image_pitch_px: float,
    configuration: Configuration,
    f_number: float,
    reference_uv_px: tuple[float, float] | None,
    images: dict[float, NDArray] | None,
    excess_px2: Mapping[float, tuple[float, ...]] | None = None,
) -> InternalsFit:
    nt = max(n_types, 1)
    s = pixel_size_mm
    used = [d.f_number for d in decisions if d.used]
    inv_n2, pos, typ, y = _variance_rows(moments, types, used, s, excess_px2)
    ref = np.asarray(reference_uv_px if reference_uv_px is not None else pos.mean(axis=0), dtype=np.float64)
    duv = pos - ref
    # 1. m (and its gradient) from the slope: p and w do not touch it.
    warnings: list[str] = []
    p_px2, w = 0.5 * PIXEL_VARIANCE, 0.0
    params, inlier, sigma = _law_fit(inv_n2, duv, typ, y, nt, offset_mm2=4 * p_px2 * s * s, blur_scale=1.0)
    if images is not None:
        # Moments again in windows that hold each micro-image's support and little more: the dark
        # pixels beyond it add only noise (weighted by e²) and, where noise is clipped at 0, bias.
        moments, types = support_windowed(moments, types, used, images, params, ref, nt, s, micro_image_pitch_px)
        inv_n2, pos, typ, y = _variance_rows(moments, types, used, s, excess_px2)
        duv = pos - ref
        params, inlier, sigma = _law_fit(inv_n2, duv, typ, y, nt, offset_mm2=4 * p_px2 * s * s, blur_scale=1.0)
    # 2. p and w from the shape of the mean profiles in the centre of the sensor.
    fits: list[tuple[float, int, ProfileFit]] = []
    q_spread: tuple[float, ...] = ()
    pixel_term_measured = False
    if images is not None:
        fits = _profile_fits(moments, types, used, images, params, ref, nt, s, micro_image_pitch_px)
        good = [(N, t, f) for N, t, f in fits
                if f.converged and f.unblurred_weight < 0.45 and f.spread_px < 1.9 and f.radius_lens_px >= MIN_SHAPE_RADIUS_PX]
        if good:
            w = float(np.median([f.unblurred_weight for _, _, f in good]))
            # p per (aperture, type): what the variance law leaves for the pixel term once R_b is known.
            ps = []
            for N, t, f in good:
                sel = (typ == t) & (inv_n2 == 1.0 / N**2) & inlier & _central(pos, pos)
                if not np.any(sel):
                    continue
                ra2 = f.radius_aperture_px**2
                var4 = float(np.median(y[sel])) / (s * s)
                ps.append((var4 - ra2 - (1.0 - w) * f.radius_lens_px**2) / 4.0)
            if ps:
                p_px2 = float(np.clip(np.median(ps), 0.0, None))
                pixel_term_measured = True
            rb_by_type = [[f.radius_lens_px for N, t, f in good if t == i] for i in range(nt)]
            q_spread = tuple(float(np.std(v)) * s if len(v) > 1 else float("nan") for v in rb_by_type)
        params, inlier, sigma = _law_fit(inv_n2, duv, typ, y, nt, offset_mm2=4 * p_px2 * s * s, blur_scale=1.0 - w)
    centre = (np.array(next(iter(images.values())).shape[1::-1], dtype=np.float64) - 1.0) / 2.0 if images else pos.mean(axis=0)
    trend = lenslet_field_trend(inv_n2, pos, typ, y, inlier, nt, pixel_size_mm=s, centre_px=(float(centre[0]), float(centre[1])),
                                offset_mm2=4 * p_px2 * s * s, blur_scale=1.0 - w) if n_types > 0 else None
    sign = configuration.radius_sign
    q_sign = 1.0 if configuration is Configuration.KEPLERIAN else -1.0
    m_mm = sign * abs(params[0])
    q_mm = tuple(q_sign * abs(params[3 + 3 * i]) for i in range(nt)) if n_types > 0 else ()
    grad_m = (sign * np.sign(params[0]) * params[1], sign * np.sign(params[0]) * params[2])
    grad_q = tuple((q_sign * np.sign(params[3 + 3 * i]) * params[4 + 3 * i], q_sign * np.sign(params[3 + 3 * i]) * params[5 + 3 * i])
                   for i in range(nt)) if n_types > 0 else ()
    fieldv = RadiusLawField((float(ref[0]), float(ref[1])), (float(grad_m[0]), float(grad_m[1])),
                            tuple((float(a), float(b)) for a, b in grad_q))
    omega = InternalParameters(
        m_mm=m_mm, q_mm=q_mm, micro_image_pitch_mm=s * micro_image_pitch_px, lambda_=1.0, f_number=f_number,
        kappa=1.0, pixel_size_mm=s, field=fieldv, unblurred_weight=w, lenslet_trend=trend,
    )
    if not pixel_term_measured and n_types > 0:
        # The assumed pixel term sits halfway between point-sampled (0) and area-integrated
        # (1/12 px²) pixels; say how far q'_i moves between the assumption and either end.
        shift = 0.0
        for pe in (0.0, PIXEL_VARIANCE):
            end = _law_fit(inv_n2, duv, typ, y, nt, offset_mm2=4 * pe * s * s, blur_scale=1.0 - w)[0]
            q_end = replace(omega, q_mm=tuple(q_sign * abs(end[3 + 3 * i]) for i in range(nt))).q_prime_mm
            shift = max(shift, max(abs(e - q) / max(abs(q), 1e-12) for e, q in zip(q_end, omega.q_prime_mm, strict=True)))
        why = ("the micro-lens blur disc R_b is below 2 px (unfocused micro-lenses)" if fits and not any(
            f.radius_lens_px >= MIN_SHAPE_RADIUS_PX for _, _, f in fits) else "the white micro-images' profile could not be fitted")
        warnings.append(f"pixel term not measured ({why}): taken as {p_px2:.3g} px²; between point-sampled and "
                        f"area-integrated pixels q'_i would move by ±{100 * shift:.1f} %, and the micro-lens focal lengths "
                        "with it (their σ does not include this)")
    per_type = {N: tuple(float((abs(m_mm) / N + abs(q)) / s) for q in (q_mm or (0.0,))) for N in used}
    conf = joint_type_confusion(moments, types, used, n_types) if n_types >= 2 else 0.0
    return InternalsFit(omega, "variance", tuple(decisions), sigma / (s * s), per_type, p_px2, w, tuple(fits), conf,
                        q_spread, tuple(warnings))


def support_windowed(
    moments: dict[float, Moments],
    types: dict[float, NDArray[np.int64]],
    used: list[float],
    images: dict[float, NDArray],
    params: FloatArray,
    ref: FloatArray,
    nt: int,
    s: float,
    pitch_px: float,
) -> tuple[dict[float, Moments], dict[float, NDArray[np.int64]]]:
    """Moments of the used apertures re-measured in windows of radius support + :data:`SUPPORT_MARGIN_PX`
    (the fitted law's |m|/N + |q_i| at each micro-image), at most pitch/2 − 0.5, centred on the
    centroids, with the types of the micro-images kept (new dictionaries)."""
    out, out_types = dict(moments), dict(types)
    for N in used:
        m = moments[N]
        pos = _positions(m)
        t = np.clip(types[N], 0, nt - 1)
        duv = pos - ref
        ra = np.abs(params[0] + duv @ params[1:3]) / N
        rb = np.abs(params[3 + 3 * t] + duv[:, 0] * params[4 + 3 * t] + duv[:, 1] * params[5 + 3 * t])
        radius = np.minimum((ra + rb) / s + SUPPORT_MARGIN_PX, pitch_px / 2.0 - 0.5)
        new = windowed_moments(images[N], m.k, m.l, pos, radius)
        key_old = m.l.astype(np.int64) * 1_000_000 + m.k
        key_new = new.l.astype(np.int64) * 1_000_000 + new.k
        out_types[N] = types[N][np.searchsorted(key_old, key_new)] if np.all(np.diff(key_old) > 0) else types[N][np.isin(key_old, key_new)]
        out[N] = new
    return out, out_types


def _central(pos: FloatArray, all_pos: FloatArray) -> NDArray[np.bool_]:
    lo, hi = all_pos.min(axis=0), all_pos.max(axis=0)
    c, half = (lo + hi) / 2.0, (hi - lo) * PROFILE_REGION_FRACTION / 2.0
    return np.all(np.abs(pos - c) <= half, axis=1)


def _profile_fits(
    moments: dict[float, Moments],
    types: dict[float, NDArray[np.int64]],
    used: list[float],
    images: dict[float, NDArray],
    params: FloatArray,
    ref: FloatArray,
    nt: int,
    s: float,
    pitch_px: float,
) -> list[tuple[float, int, ProfileFit]]:
    """Mean-profile fits per (aperture, type) in the central region (module docstring)."""
    out = []
    all_pos = np.concatenate([_positions(moments[N]) for N in used])
    for N in used:
        m = moments[N]
        pos = _positions(m)
        centre = _central(pos, all_pos)
        t = np.clip(types[N], 0, None)
        for i in range(nt):
            sel = centre & (t == i)
            if sel.sum() < MIN_PROFILE_MICRO_IMAGES:
                continue
            m_local = params[0] + (pos[sel] - ref) @ params[1:3]
            ra = float(np.mean(np.abs(m_local))) / N / s
            prof = radial_profile(images[N], pos[sel], window_radius_px=pitch_px / 2.0 - 0.5)
            out.append((N, i, fit_profile(prof, radius_aperture_px=ra, pitch_px=pitch_px)))
    return out


# --- the paper's estimator -------------------------------------------------------------------
def _fit_paper(
    moments: dict[float, Moments],
    types: dict[float, NDArray[np.int64]],
    decisions: list[ApertureDecision],
    *,
    n_types: int,
    pixel_size_mm: float,
    micro_image_pitch_px: float,
    configuration: Configuration,
    f_number: float,
) -> InternalsFit:
    nt = max(n_types, 1)
    s = pixel_size_mm
    used = [d.f_number for d in decisions if d.used]
    rows, ys = [], []
    for N in used:
        m = moments[N]
        t = np.clip(types[N], 0, None)
        X = np.zeros((len(t), 1 + nt))
        X[:, 0] = 1.0 / N
        X[np.arange(len(t)), 1 + t] = 1.0
        rows.append(X)
        ys.append(m.radius_alpha_px * s)
    X = np.concatenate(rows)
    y = np.concatenate(ys)
    sol, *_ = np.linalg.lstsq(X, y, rcond=None)
    res = y - X @ sol
    m_abs, q_abs = float(sol[0]), np.abs(sol[1:])
    sign = configuration.radius_sign
    q = q_abs if configuration is Configuration.KEPLERIAN else -q_abs
    omega = InternalParameters(
        m_mm=sign * m_abs,
        q_mm=tuple(float(x) for x in q) if n_types > 0 else (),
        micro_image_pitch_mm=s * micro_image_pitch_px,
        lambda_=1.0,
        f_number=f_number,
        kappa=1.0,
        pixel_size_mm=s,
    )
    per_type = {N: tuple(float((m_abs / N + qa) / s) for qa in q_abs) for N in used}
    conf = joint_type_confusion(moments, types, used, n_types) if n_types >= 2 else 0.0
    return InternalsFit(omega, "paper", tuple(decisions), float(np.sqrt(np.mean(res**2))) / s, per_type,
                        type_confusion=conf)
