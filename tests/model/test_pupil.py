"""The pupil-vignetting shift's numerics (plenocal.model.pupil): the centroid against quadrature,
precision at the tangency, the continuation beyond it, the saturated gain, one root, and the
partial derivatives against Richardson central differences."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.model.pupil import (
    FOLD_MARGIN,
    SATURATION_KNEE,
    SLOPE_BOUND_SMALL_LENS,
    centroid_offset,
    saturated_gain,
    shifted_offset,
    slope_bound,
    unshifted_offset,
)


def quadrature_centroid(e: float, r1: float, r2: float, n: int = 2001) -> float:
    """Centroid offset of disc(0, r1) ∩ disc(e, r2) on an n × n grid (midpoints)."""
    x = np.linspace(-r1, r1, n + 1)
    x = 0.5 * (x[1:] + x[:-1])
    X, Y = np.meshgrid(x, x)
    inside = (X * X + Y * Y <= r1 * r1) & ((X - e) ** 2 + Y * Y <= r2 * r2)
    return float(X[inside].mean())


@pytest.mark.parametrize(("r1", "r2"), [(5.0, 6.5), (6.5, 5.0), (5.0, 5.0), (1.0, 6.0)])
def test_centroid_matches_quadrature(r1, r2):
    for frac in (0.1, 0.35, 0.6, 0.85, 0.97):
        lo, hi = abs(r1 - r2), r1 + r2
        e = lo + frac * (hi - lo)
        # grid step 2·r1/2001: the mean of the inside cells is off by ~step²/area·perimeter
        assert centroid_offset(e, r1, r2) == pytest.approx(quadrature_centroid(e, r1, r2), abs=2e-3 * r1)


def test_centroid_is_precise_and_smooth_up_to_the_tangency():
    """Within 1e-9 px of the tangency g stays within 1e-12 px of its first-order expansion
    r1 − α·δ (the textbook segment formula was off by 0.03 px at δ = 1e-6) and its slope is α."""
    r1, r2 = 4.84, 6.47
    alpha = 0.5 - (r1 - r2) / (10.0 * (r1 + r2))
    for delta in (1e-3, 1e-5, 1e-7, 1e-9):
        g, ge, _, _ = centroid_offset(r1 + r2 - delta, r1, r2, partials=True)
        assert abs(g - (r1 - alpha * delta)) < 1e-12 + delta * delta
        assert ge == pytest.approx(alpha, abs=2.0 * delta)
    # Beyond: the limit r1, or the linear continuation.
    assert centroid_offset(r1 + r2 + 1.0, r1, r2) == r1
    assert centroid_offset(r1 + r2 + 1.0, r1, r2, extend=True) == pytest.approx(r1 + alpha)


def richardson(f, x: np.ndarray, h: float) -> np.ndarray:
    d1 = (f(x + h) - f(x - h)) / (2 * h)
    d2 = (f(x + h / 2) - f(x - h / 2)) / h
    return (4 * d2 - d1) / 3


def test_centroid_partials_match_finite_differences():
    rng = np.random.default_rng(0)
    n = 4000
    r1, r2 = rng.uniform(0.5, 8, n), rng.uniform(0.5, 8, n)
    e = rng.uniform(0, 1.2, n) * (r1 + r2)
    # Away from the tangencies (C¹ only there) by far more than the steps.
    away = (np.abs(e - np.abs(r1 - r2)) > 0.05) & (np.abs(e - r1 - r2) > 0.05)
    got = centroid_offset(e, r1, r2, extend=True, partials=True)
    for j, name in enumerate(("e", "r1", "r2")):
        args = [e, r1, r2]

        def f(v, j=j, args=args):
            a = list(args)
            a[j] = v
            return centroid_offset(*a, extend=True)

        fd = richardson(f, args[j], 1e-4)
        np.testing.assert_allclose(got[away, 1 + j], fd[away], rtol=0, atol=1e-8, err_msg=name)


def test_gain_is_saturated_only_near_the_fold():
    """γ_s = γ below the knee; above it γ_s·B stays below FOLD_MARGIN whatever γ."""
    for ra, rb in ((6.5, 4.8), (6.5, 6.2), (5.0, 6.5)):
        B = slope_bound(rb / ra)[0]
        knee = SATURATION_KNEE * FOLD_MARGIN / B
        for gamma in (-3.0, 0.0, 0.5 * knee, knee):
            assert saturated_gain(gamma, ra, rb)[0] == gamma
        for gamma in (1.01 * knee, 2 * knee, 100.0):
            gs = saturated_gain(gamma, ra, rb)[0]
            assert knee < gs < gamma and gs * B <= FOLD_MARGIN * (1 + 1e-12)
    assert slope_bound(0.5)[0] == SLOPE_BOUND_SMALL_LENS and slope_bound(1.2)[0] == 1.0


def test_one_root_and_bounded_slope_even_past_the_fold():
    """Large gains (|ρ| ≫ R_b: an iterate far from the solution) still give one root of the
    fixed point, continuous in e, with ∂e_o/∂e ≤ 1/(1 − FOLD_MARGIN)."""
    e = np.linspace(0.0, 14.0, 20001)
    for ra, rb, rho in ((6.5, 2.8, -4.6), (5.0, 6.5, -9.0), (6.5, 4.8, 3.0)):
        out = shifted_offset(e, rho, ra, rb, partials=True)
        eo = out[:, 0]
        assert np.all(np.diff(eo) > 0)
        assert np.all(out[:, 1] <= 1.0 / (1.0 - FOLD_MARGIN) + 1e-9)
        np.testing.assert_allclose(unshifted_offset(eo, rho, ra, rb), e, rtol=0, atol=1e-11)


def test_shift_partials_match_finite_differences():
    rng = np.random.default_rng(1)
    n = 4000
    ra, rb = rng.uniform(3, 8, n), rng.uniform(0.5, 8, n)
    e = rng.uniform(0, 1.2, n) * (ra + rb)
    rho = rng.uniform(-8, 4, n)
    got = shifted_offset(e, rho, ra, rb, partials=True)
    eo = got[:, 0]
    t = rb / ra
    gamma = -rho / rb
    knee = SATURATION_KNEE * FOLD_MARGIN / np.array([slope_bound(x)[0] for x in t])
    away = ((np.abs(eo - np.abs(ra - rb)) > 0.05) & (np.abs(eo - ra - rb) > 0.05) & (np.abs(t - 0.9) > 1e-3)
            & (np.abs(t - 1.0) > 1e-3) & (np.abs(gamma - knee) > 1e-3))
    assert away.mean() > 0.9
    args = [e, rho, ra, rb]
    for j, name in enumerate(("e", "rho", "ra", "rb")):

        def f(v, j=j):
            a = list(args)
            a[j] = v
            return shifted_offset(*a)

        fd = richardson(f, args[j], 1e-4)
        np.testing.assert_allclose(got[away, 1 + j], fd[away], rtol=1e-7, atol=1e-8, err_msg=name)


def test_no_shift_for_a_vanishing_lens_disc_and_nan_for_nan_blur():
    assert shifted_offset(3.0, -2.0, 6.0, 0.01) == 3.0
    assert np.isnan(shifted_offset(3.0, np.nan, 6.0, 5.0))
