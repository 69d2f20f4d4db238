"""Internal parameters Ω = {m, q'_i} from micro-image moments at several apertures (paper §3.2).

The radius law R_i(1/N) = m/N + q_i (eq:miradiusfnumber) with m = ∓dF/(2D), q_i = Δ_C·d/(2f_i) − Δc/2
(eq:miradiusfnumbermc) describes the support radius |R| = R_a + R_b of a white micro-image, made
of the main-aperture disc R_a = |m|/N convolved with the micro-lens blur disc R_b = |q_i|.

Two estimators:

- ``"variance"`` (default): 4(σ² − 1/12)·s² = m²/N² + q_i², one linear least-squares problem in
  (m², q_1², …, q_I²) over every micro-image and aperture; exact for the disc ⊗ disc model.
- ``"paper"``: the paper's line fit of α·σ·s = |m|/N + |q_i| (α = 2.357), joint over apertures
  (one slope, I intercepts).

Signs follow the internal configuration (eq:miradiussgn): R < 0 for Galilean and unfocused.
Apertures whose micro-images touch their neighbours, or whose per-type radius distributions
overlap (the paper's rule, §6.1: "only white images that present distinguishable radii
distributions"), are left out; each decision is reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from plenocal.errors import DataError
from plenocal.model.camera import Configuration
from plenocal.model.white import InternalParameters
from plenocal.precalib.radii import PIXEL_VARIANCE, Moments


@dataclass(frozen=True)
class ApertureDecision:
    f_number: float
    used: bool
    reason: str
    mean_radius_alpha_px: tuple[float, ...]
    """Per-type mean of the paper's α·σ radius."""


@dataclass(frozen=True)
class InternalsFit:
    omega: InternalParameters
    estimator: str
    apertures: tuple[ApertureDecision, ...]
    residual_rms_px: float
    """RMS of the fit residuals: of 4σ² in px² (variance estimator) or of α·σ in px (paper)."""
    per_type_radius_px: dict[float, tuple[float, ...]] = field(default_factory=dict)
    """Fitted support radius |R_i(N)| in px per used aperture."""


def select_apertures(
    moments: dict[float, Moments],
    types: dict[float, NDArray[np.int64]],
    pitch_px: float,
    n_types: int,
    *,
    touch_margin_px: float = 0.5,
    quantiles: tuple[float, float] = (0.05, 0.95),
    support_px: dict[float, float] | None = None,
) -> list[ApertureDecision]:
    """Decide which white images enter the Ω fit (paper §6.1's rule, made automatic).

    ``support_px`` gives, per f-number, the largest fitted support radius max_i |R_i(N)| in px;
    apertures where it reaches pitch/2 − ``touch_margin_px`` are left out (touching micro-images
    are truncated by their neighbours, which biases their moments).
    """
    out = []
    for N in sorted(moments):
        m = moments[N]
        t = types[N]
        r = m.radius_alpha_px
        per_type = tuple(float(np.median(r[t == i])) if np.any(t == i) else float("nan") for i in range(max(n_types, 1)))
        if support_px is not None and N in support_px and support_px[N] >= pitch_px / 2.0 - touch_margin_px:
            out.append(ApertureDecision(N, False, f"micro-images touch their neighbours (fitted support radius {support_px[N]:.2f} px ≥ pitch/2 − {touch_margin_px:g} = {pitch_px / 2 - touch_margin_px:.2f} px)", per_type))
            continue
        overlap = None
        if n_types >= 2:
            bounds = [np.quantile(r[t == i], quantiles) for i in range(n_types)]
            for i in range(n_types):
                for j in range(i + 1, n_types):
                    if bounds[i][0] <= bounds[j][1] and bounds[j][0] <= bounds[i][1]:
                        overlap = (i, j)
                        break
                if overlap:
                    break
        if overlap:
            out.append(ApertureDecision(N, False, f"radius distributions of types {overlap[0]} and {overlap[1]} overlap", per_type))
            continue
        out.append(ApertureDecision(N, True, "distinct, non-touching micro-images", per_type))
    return out


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
) -> InternalsFit:
    """Fit Ω over the selected apertures, iterating the touching test on the fitted law.

    Parameters
    ----------
    moments, types : per f-number, the moments and type index of each micro-image.
    n_types : I (I = 0 is fitted as one pinhole type).
    micro_image_pitch_px : MIA diameter (p0 + p1)/2; Δc = s·pitch.
    configuration : sets the signs of m and q_i.
    f_number : N of the checkerboard images (stored in Ω).
    """
    nt = max(n_types, 1)
    support: dict[float, float] | None = None
    fit: InternalsFit | None = None
    for _ in range(4):
        decisions = select_apertures(moments, types, micro_image_pitch_px, nt, support_px=support)
        fit = _fit_once(moments, types, decisions, n_types=n_types, pixel_size_mm=pixel_size_mm, micro_image_pitch_px=micro_image_pitch_px, configuration=configuration, f_number=f_number, estimator=estimator)
        q_abs = np.abs(np.array(fit.omega.q_mm)) if n_types > 0 else np.array([micro_image_pitch_px * pixel_size_mm / 2])
        new_support = {N: float((abs(fit.omega.m_mm) / N + q_abs.max()) / pixel_size_mm) for N in moments}
        if support is not None and {N for N, v in support.items() if v >= micro_image_pitch_px / 2 - 0.5} == {N for N, v in new_support.items() if v >= micro_image_pitch_px / 2 - 0.5}:
            break
        support = new_support
    assert fit is not None
    return fit


def _fit_once(
    moments: dict[float, Moments],
    types: dict[float, NDArray[np.int64]],
    decisions: list[ApertureDecision],
    *,
    n_types: int,
    pixel_size_mm: float,
    micro_image_pitch_px: float,
    configuration: Configuration,
    f_number: float,
    estimator: str,
) -> InternalsFit:
    nt = max(n_types, 1)
    used = [d.f_number for d in decisions if d.used]
    if len(used) < 2:
        why = "; ".join(f"N={d.f_number:g}: {d.reason}" for d in decisions if not d.used)
        raise DataError(
            f"need white images at >= 2 usable apertures for the radius law, got {len(used)} usable "
            f"of {len(decisions)} ({why or 'no others given'}); add whites at smaller apertures (larger N)"
        )
    s = pixel_size_mm
    rows, ys = [], []
    for N in used:
        m = moments[N]
        t = np.clip(types[N], 0, None)
        X = np.zeros((len(t), 1 + nt))
        if estimator == "variance":
            X[:, 0] = 1.0 / N**2
            y = 4.0 * (m.variance_px2 - PIXEL_VARIANCE) * s * s
        elif estimator == "paper":
            X[:, 0] = 1.0 / N
            y = m.radius_alpha_px * s
        else:
            raise ValueError(f"unknown estimator {estimator!r}")
        X[np.arange(len(t)), 1 + t] = 1.0
        rows.append(X)
        ys.append(y)
    X = np.concatenate(rows)
    y = np.concatenate(ys)
    sol, *_ = np.linalg.lstsq(X, y, rcond=None)
    res = y - X @ sol
    if estimator == "variance":
        m_abs = float(np.sqrt(max(sol[0], 0.0)))
        q_abs = np.sqrt(np.maximum(sol[1:], 0.0))
        resid_px = float(np.sqrt(np.mean(res**2))) / (s * s)
    else:
        m_abs, q_abs = float(sol[0]), np.abs(sol[1:])
        resid_px = float(np.sqrt(np.mean(res**2))) / s
    sign = configuration.radius_sign
    m_mm = sign * m_abs
    if configuration is Configuration.KEPLERIAN:
        q = q_abs
    else:
        q = -q_abs
    dc = s * micro_image_pitch_px
    omega = InternalParameters(
        m_mm=m_mm,
        q_mm=tuple(float(x) for x in q) if n_types > 0 else (),
        micro_image_pitch_mm=dc,
        lambda_=1.0,
        f_number=f_number,
        kappa=1.0,
        pixel_size_mm=s,
    )
    per_type = {N: tuple(float((m_abs / N + qa) / s) for qa in q_abs) for N in used}
    return InternalsFit(omega, estimator, tuple(decisions), resid_px, per_type)
