"""The pupil-vignetting shift of BAP features, as smooth scalar kernels with exact derivatives.

A pixel at offset e_o from its micro-image centre sees the scene through the part of the
micro-lens disc (radius R_b = |q_i|/s, centred 0) whose rays pass the main aperture, whose
preimage is the disc of radius R_a = |m|/(N·s) centred e_o (``docs/model.md``,
:mod:`plenocal.model.projection`). A corner whose chief ray meets the sensor at offset e from the
micro-image centre is seen at the offset e_o that solves

    e_o = e + γ·g(e_o; R_b, R_a),    γ = −ρ/R_b,                                  (1)

g the offset of the centroid of disc(0, R_b) ∩ disc(e_o, R_a) along the line of centres. This
module computes g with its partial derivatives (:func:`centroid_partials`) and the root of (1)
with the partial derivatives of e_o with respect to e, ρ, R_a and R_b (:func:`shift_partials`),
which the calibration chains into its Jacobian (implicit-function theorem on (1)).

Three things make (1) a smooth, single-valued function of the camera everywhere, which the
calibration needs (a clamp, a noisy g and a folded map made it settle in wrong minima):

- **g is evaluated without cancellation.** The intersection area is the sum of two circular
  segments, R²·φ(θ) with φ(θ) = θ − sin θ·cos θ and θ the half-angle of the common chord; the
  chord and the angles come from a factored (Heron-like) form and φ from its series at small θ,
  so g keeps ~1e-15 relative precision up to the tangency of the discs (the textbook form
  R²·acos(h/R) − h·√(R² − h²) lost all digits within 1e-4 px of it: g off by 0.03 px at the
  1e-6 px clamp the fixed point used).
- **Beyond the tangency e_o = R_a + R_b** (no light: the model's prediction of a feature that
  cannot be seen, which an iterate far from the solution produces) g continues linearly with its
  slope at the tangency, α = 1/2 − (R_b − R_a)/(10·(R_a + R_b)) (the thin-sliver limit), instead
  of being clamped: g and its derivatives are continuous there, and the fixed point has a root
  for every e.
- **The gain is saturated below the fold.** e ↦ e_o is single-valued while γ·g′ < 1. g′ ≤ 0.6
  when R_b ≤ R_a and reaches 1 when R_b > R_a (the aperture disc inside the lens disc, g = e_o);
  a perturbed start of the calibration can reach γ·g′ > 1, where (1) has three roots and the
  prediction jumps between them. γ is replaced by a smooth saturation γ_s that equals γ below
  :data:`SATURATION_KNEE` of its bound and never exceeds :data:`FOLD_MARGIN`/B(R_b/R_a), B a
  bound of g′ (:func:`slope_bound`). On the R12-A camera (R_a 6.5 px, R_b 4.2–5.1 px, |ρ| ≤ 4.6 px
  for the features of the reference's observations) the saturation starts at γ = 1.2, |ρ| ≥ 5 px:
  no observation is affected.

Everything here is a numba kernel over scalars or a loop over elements without any reduction, so
results do not depend on the number of threads.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np
from numpy.typing import ArrayLike

MIN_LENS_RADIUS_PX = 0.05
"""Below this micro-lens disc radius R_b = |q_i|/s (unfocused cameras: q_i → 0; upc-s has
R_b = 0.03 px) the shift is neglected: the aperture holds the whole pupil for every pixel but a
strip R_b wide at the micro-image border, where nothing is detected, and the gain −ρ/R_b would
make the fixed point of the shift ill-conditioned there."""

FOLD_MARGIN = 0.9
"""Largest γ_s·B allowed (B ≥ max g′, :func:`slope_bound`): the derivative of the map
e_o ↦ e_o − γ_s·g(e_o) stays ≥ 1 − FOLD_MARGIN = 0.1, so (1) has one root and
∂e_o/∂e ≤ 10."""

SATURATION_KNEE = 0.8
"""γ_s = γ while γ ≤ SATURATION_KNEE × its bound FOLD_MARGIN/B; above, a tanh saturation (C²)."""

SLOPE_BOUND_SMALL_LENS = 0.6
"""max g′ over e_o when R_b ≤ R_a: the thin-sliver slope α tends to 1/2 + 1/10 as R_b/R_a → 0
(numerically max g′ = 0.595 at R_b/R_a = 0.05, 0.50 at R_b = R_a)."""

SLOPE_BOUND_RAMP = 0.1
"""B rises from :data:`SLOPE_BOUND_SMALL_LENS` to 1 (g = e_o, the aperture disc inside the lens
disc) over R_b/R_a ∈ [1 − SLOPE_BOUND_RAMP, 1], by a smoothstep: continuous in the radii."""

SMALL_ANGLE_SERIES = 0.25
"""Below this chord half-angle (rad) φ(θ) = θ − sin θ·cos θ is summed as its series (relative
error < 1e-15); above, the closed form loses at most a factor θ/φ(θ) < 25 of precision."""

TANGENCY_SERIES = 1e-7
"""Within this fraction of R_a + R_b of the outer tangency g is its first-order expansion
R_b − α·δ (δ = R_a + R_b − e_o; error O(δ²) < 1e-13 px), where the exact derivatives lose
precision to cancellation (~1e-16·R/δ)."""

NEWTON_TOLERANCE = 1e-14
"""The root of (1) is accepted when a Newton step moves it by less than this × (1 + e_o) px."""

NEWTON_MAX_ITERATIONS = 60
"""Safety net of the safeguarded Newton iteration (3–4 steps on the R12-A features; bisection
halves the bracket, ≤ 15 px wide, to 1e-14 in ~50)."""


@nb.njit(cache=True, inline="always")
def _phi(theta):  # pragma: no cover - compiled
    """φ(θ) = θ − sin θ·cos θ = (2θ − sin 2θ)/2: a disc segment's area over R²."""
    if theta < SMALL_ANGLE_SERIES:
        x = 2.0 * theta
        x2 = x * x
        # Σ_k (−1)^{k+1} x^{2k+1}/(2·(2k+1)!), k = 1..6
        return x * x2 * (1.0 / 12.0 - x2 * (1.0 / 240.0 - x2 * (1.0 / 10080.0 - x2 * (
            1.0 / 725760.0 - x2 * (1.0 / 79833600.0 - x2 / 12454041600.0)))))
    return theta - math.sin(theta) * math.cos(theta)


@nb.njit(cache=True, inline="always")
def _tangent_slope(r1, r2):  # pragma: no cover - compiled
    """(α, ∂α/∂r1, ∂α/∂r2): g′ at the outer tangency, α = 1/2 − (r1 − r2)/(10·(r1 + r2))."""
    s = r1 + r2
    return 0.5 - (r1 - r2) / (10.0 * s), -r2 / (5.0 * s * s), r1 / (5.0 * s * s)


@nb.njit(cache=True)
def centroid_partials(e, r1, r2, extend):  # pragma: no cover - compiled
    """Centroid offset g of disc(0, r1) ∩ disc(e, r2) along the line of centres, e ≥ 0, and its
    partial derivatives: returns (g, ∂g/∂e, ∂g/∂r1, ∂g/∂r2).

    In the partial overlap g = e·A2/(A1 + A2), A_i = r_i²·φ(θ_i) the two segments cut by the
    common chord (half-length c) at x0 = (e² + r1² − r2²)/(2e) from the first centre:
    θ1 = atan2(c, x0), θ2 = atan2(c, e − x0) (the segments' moments about the chord cancel, so
    the moment about 0 is e·A2). With A = A1 + A2, ∂A1/∂x0 = −2c, ∂A_i/∂r_i = 2r_i·θ_i:

        ∂g/∂e = g/e + 2c·(g − x0)/A,  ∂g/∂r1 = 2r1·(c − θ1·g)/A,  ∂g/∂r2 = 2r2·(e·θ2·A1/A − c)/A.

    One disc inside the other: g = e (the second inside the first) or 0. Beyond r1 + r2 (no
    overlap) g = r1 (``extend`` false: the limit) or r1 + α·(e − r1 − r2) (``extend`` true, the
    module's continuation), and within :data:`TANGENCY_SERIES` of the tangency r1 − α·δ.
    """
    s = r1 + r2
    if e <= r1 - r2:
        return e, 1.0, 0.0, 0.0
    if e <= r2 - r1:
        return 0.0, 0.0, 0.0, 0.0
    delta = s - e
    if delta <= TANGENCY_SERIES * s:
        if not extend and delta <= 0.0:
            return r1, 0.0, 1.0, 0.0
        a, a1, a2 = _tangent_slope(r1, r2)
        return r1 - a * delta, a, 1.0 - a - delta * a1, -a - delta * a2
    # Heron-like factored chord: c² = (r1+r2−e)(r2+e−r1)(e+r1−r2)(e+r1+r2)/(4e²), no cancellation.
    c = math.sqrt(max(delta * (r2 + e - r1) * (e + r1 - r2) * (e + s), 0.0)) / (2.0 * e)
    x0 = (e * e + r1 * r1 - r2 * r2) / (2.0 * e)
    h2 = e - x0
    t1 = math.atan2(c, x0)
    t2 = math.atan2(c, h2)
    A1 = r1 * r1 * _phi(t1)
    A2 = r2 * r2 * _phi(t2)
    A = A1 + A2
    g = e * A2 / A
    return g, g / e + 2.0 * c * (g - x0) / A, 2.0 * r1 * (c - t1 * g) / A, 2.0 * r2 * (e * t2 * A1 / A - c) / A


@nb.njit(cache=True, inline="always")
def slope_bound(t):  # pragma: no cover - compiled
    """(B, dB/dt): a bound of max g′ as a function of t = R_b/R_a, continuous in t
    (:data:`SLOPE_BOUND_SMALL_LENS` for t ≤ 1 − ramp, 1 for t ≥ 1, a smoothstep between)."""
    lo = 1.0 - SLOPE_BOUND_RAMP
    if t <= lo:
        return SLOPE_BOUND_SMALL_LENS, 0.0
    if t >= 1.0:
        return 1.0, 0.0
    x = (t - lo) / SLOPE_BOUND_RAMP
    span = 1.0 - SLOPE_BOUND_SMALL_LENS
    return SLOPE_BOUND_SMALL_LENS + span * x * x * (3.0 - 2.0 * x), span * 6.0 * x * (1.0 - x) / SLOPE_BOUND_RAMP


@nb.njit(cache=True)
def saturated_gain(gamma, ra, rb):  # pragma: no cover - compiled
    """(γ_s, ∂γ_s/∂γ, ∂γ_s/∂R_a, ∂γ_s/∂R_b): γ below SATURATION_KNEE·Γ, Γ = FOLD_MARGIN/B(R_b/R_a);
    above, κ + w·tanh((γ − κ)/w), κ = SATURATION_KNEE·Γ, w = Γ − κ (never reaches Γ)."""
    if gamma <= 0.0:
        return gamma, 1.0, 0.0, 0.0
    t = rb / ra
    B, dB = slope_bound(t)
    G = FOLD_MARGIN / B
    kappa = SATURATION_KNEE * G
    if gamma <= kappa:
        return gamma, 1.0, 0.0, 0.0
    w = G - kappa
    z = (gamma - kappa) / w
    th = math.tanh(z)
    sech2 = 1.0 - th * th
    d_gs_dG = SATURATION_KNEE + (1.0 - SATURATION_KNEE) * th - (gamma / G) * sech2
    dG_dt = -FOLD_MARGIN * dB / (B * B)
    return kappa + w * th, sech2, d_gs_dG * dG_dt * (-t / ra), d_gs_dG * dG_dt / ra


@nb.njit(cache=True)
def shift_partials(e, rho, ra, rb):  # pragma: no cover - compiled
    """The root e_o of (1) (module docstring) and its partial derivatives.

    Parameters
    ----------
    e : chief-ray offset from the micro-image centre (px, ≥ 0); rho : signed blur radius ρ (px);
    ra, rb : R_a, R_b (px). R_b below :data:`MIN_LENS_RADIUS_PX`: no shift.

    Returns
    -------
    (e_o, ∂e_o/∂e, ∂e_o/∂ρ, ∂e_o/∂R_a, ∂e_o/∂R_b)

    The map F(y) = y − e − γ_s·g(y) increases (F′ ≥ 1 − FOLD_MARGIN), so its root is bracketed
    — [e, e + γ_s·g(e)/(1 − γ_s·B)] for γ_s ≥ 0, [0, e] otherwise — and found by Newton steps from
    e, bisecting where a step leaves the bracket (3–4 evaluations of g on the R12-A features). By the implicit-function theorem, with
    F′ = 1 − γ_s·∂g/∂y: ∂e_o/∂e = 1/F′ and ∂e_o/∂p = (γ_s·∂g/∂p + g·∂γ_s/∂p)/F′ for
    p = ρ, R_a, R_b (γ = −ρ/R_b).
    """
    if rb < MIN_LENS_RADIUS_PX:
        return e, 1.0, 0.0, 0.0, 0.0
    if not rho == rho:  # NaN blur: no position
        return math.nan, math.nan, math.nan, math.nan, math.nan
    gamma = -rho / rb
    gs, gs_g, gs_ra, gs_rb = saturated_gain(gamma, ra, rb)
    # F(e) = −γ_s·g(e): e bounds the root below (γ_s ≥ 0) or above; the other bound is set by the
    # first evaluation (g(e) known).
    lo, hi = (e, math.inf) if gs >= 0.0 else (0.0, e)
    y = e
    g = gy = g_rb = g_ra = 0.0
    for it in range(NEWTON_MAX_ITERATIONS):
        g, gy, g_rb, g_ra = centroid_partials(y, rb, ra, True)
        if it == 0 and gs >= 0.0:
            hi = e + gs * g / (1.0 - gs * slope_bound(rb / ra)[0]) + 1e-12 * (1.0 + e)
        F = y - e - gs * g
        if F > 0.0:
            hi = min(hi, y)
        else:
            lo = max(lo, y)
        new = y - F / (1.0 - gs * gy)
        if not (lo <= new <= hi):
            new = 0.5 * (lo + hi)
        done = abs(new - y) <= NEWTON_TOLERANCE * (1.0 + y)
        y = new
        if done:
            break
    # The partials of the last evaluation, ≤ NEWTON_TOLERANCE from the root.
    inv = 1.0 / (1.0 - gs * gy)
    d_rho = g * gs_g * (-1.0 / rb) * inv
    d_ra = (gs * g_ra + g * gs_ra) * inv
    d_rb = (gs * g_rb + g * (gs_rb + gs_g * (rho / (rb * rb)))) * inv
    return y, inv, d_rho, d_ra, d_rb


@nb.njit(cache=True)
def shift_kernel(en, rho, ra, rb, with_partials, out):  # pragma: no cover - compiled
    """:func:`shift_partials` of every element: ``out`` (n, 5) or (n, 1) without partials."""
    for i in range(en.shape[0]):
        y, de, drho, dra, drb = shift_partials(en[i], rho[i], ra[i], rb[i])
        out[i, 0] = y
        if with_partials:
            out[i, 1] = de
            out[i, 2] = drho
            out[i, 3] = dra
            out[i, 4] = drb


@nb.njit(cache=True)
def unshift_kernel(eo, rho, ra, rb, out):  # pragma: no cover - compiled
    """The chief-ray offset e = e_o − γ_s·g(e_o) of observed offsets e_o (the inverse of (1))."""
    for i in range(eo.shape[0]):
        if rb[i] < MIN_LENS_RADIUS_PX:
            out[i] = eo[i]
            continue
        gs = saturated_gain(-rho[i] / rb[i], ra[i], rb[i])[0]
        out[i] = eo[i] - gs * centroid_partials(eo[i], rb[i], ra[i], True)[0]


@nb.njit(cache=True)
def centroid_kernel(e, r1, r2, extend, out):  # pragma: no cover - compiled
    """:func:`centroid_partials` of every element into ``out`` (n, 4)."""
    for i in range(e.shape[0]):
        g, ge, g1, g2 = centroid_partials(e[i], r1[i], r2[i], extend)
        out[i, 0] = g
        out[i, 1] = ge
        out[i, 2] = g1
        out[i, 3] = g2


def _flat(*arrays: ArrayLike) -> list[np.ndarray]:
    b = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in arrays))
    return [np.ascontiguousarray(a).reshape(-1) for a in b]


def centroid_offset(e: ArrayLike, r1: ArrayLike, r2: ArrayLike, *, extend: bool = False,
                    partials: bool = False) -> np.ndarray:
    """:func:`centroid_partials` over broadcast arrays: g, shape of the broadcast, or with
    ``partials`` (…, 4) = (g, ∂g/∂e, ∂g/∂r1, ∂g/∂r2)."""
    shape = np.broadcast_shapes(np.shape(e), np.shape(r1), np.shape(r2))
    a, b, c = _flat(e, r1, r2)
    out = np.empty((a.size, 4))
    centroid_kernel(a, b, c, bool(extend), out)
    return out.reshape(*shape, 4) if partials else out[:, 0].reshape(shape)


def shifted_offset(en: ArrayLike, rho: ArrayLike, ra: ArrayLike, rb: ArrayLike, *,
                   partials: bool = False) -> np.ndarray:
    """The root e_o of (1) over broadcast arrays (shape of the broadcast), or with ``partials``
    (…, 5) = (e_o, ∂e_o/∂e, ∂e_o/∂ρ, ∂e_o/∂R_a, ∂e_o/∂R_b). ``rho`` NaN gives NaN."""
    shape = np.broadcast_shapes(np.shape(en), np.shape(rho), np.shape(ra), np.shape(rb))
    a, b, c, d = _flat(en, rho, ra, rb)
    out = np.empty((a.size, 5 if partials else 1))
    shift_kernel(a, b, c, d, bool(partials), out)
    return out.reshape(*shape, 5) if partials else out[:, 0].reshape(shape)


def unshifted_offset(eo: ArrayLike, rho: ArrayLike, ra: ArrayLike, rb: ArrayLike) -> np.ndarray:
    """e = e_o − γ_s·g(e_o): the chief-ray offsets of observed offsets (inverse of :func:`shifted_offset`)."""
    shape = np.broadcast_shapes(np.shape(eo), np.shape(rho), np.shape(ra), np.shape(rb))
    a, b, c, d = _flat(eo, rho, ra, rb)
    out = np.empty(a.size)
    unshift_kernel(a, b, c, d, out)
    return out.reshape(shape)
