"""The model's field from the calibration's residuals (plenocal.evaluate.field)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from plenocal.evaluate.field import MAX_FIELD_RESIDUAL_RATIO, model_field

N = 4000
SIGMA_PX = 0.12


def _features(seed: int, scale) -> tuple[np.ndarray, np.ndarray]:
    """Features spread over 0–12 mm (density growing with the radius, as on a sensor), each with
    a 2-D Gaussian residual of σ = SIGMA_PX·scale(r); returns radius (mm) and |residual| (px)."""
    rng = np.random.default_rng(seed)
    r = 12.0 * np.sqrt(rng.uniform(0.0, 1.0, N))
    e = rng.normal(0.0, 1.0, (N, 2)) * (SIGMA_PX * scale(r))[:, None]
    return r, np.hypot(e[:, 0], e[:, 1])


@pytest.mark.parametrize("seed", range(5))
def test_a_model_that_fits_everywhere_has_no_field_limit(seed):
    r, e = _features(seed, lambda r: np.ones_like(r))
    f = model_field(r, e)
    assert not f.limited and math.isinf(f.radius_mm)
    assert f.reach_mm == pytest.approx(r.max())
    assert max(x["ratio"] for x in f.rings) < 1.3  # 30–400 features a ring: the bound is far above the noise
    assert f.reference_px == pytest.approx(SIGMA_PX * math.sqrt(2 * math.log(2)), rel=0.1)  # Rayleigh median
    assert "as far as the features reach" in f.line()


@pytest.mark.parametrize("seed", range(5))
def test_residuals_that_grow_beyond_the_design_field_end_it(seed):
    """σ grows as 1 + ((r − 5)/1.5)² beyond 5 mm: the ratio reaches 1.5 at r = 5 + 1.5·√0.5 = 6.06 mm."""
    r, e = _features(seed, lambda r: 1.0 + np.clip((r - 5.0) / 1.5, 0.0, None) ** 2)
    f = model_field(r, e)
    assert f.limited and 5.5 < f.radius_mm < 6.6
    assert all(x["ratio"] <= MAX_FIELD_RESIDUAL_RATIO for x in f.rings if x["outer_mm"] <= 5.0)
    assert "no depth is given there" in f.line()


def test_a_mislinked_cluster_does_not_end_the_field():
    """Six features 5 px off (a cluster on the wrong node) in a ring of ~130: the median ignores them."""
    r, e = _features(0, lambda r: np.ones_like(r))
    ring = np.flatnonzero((r > 4.0) & (r < 5.0))[:6]
    e[ring] = 5.0
    assert not model_field(r, e).limited


def test_too_few_features_say_nothing():
    r, e = _features(1, lambda r: 1.0 + r)
    f = model_field(r[:50], e[:50])
    assert not f.limited and f.rings == []


def test_the_outermost_thin_ring_is_merged_or_left_unjudged():
    r, e = _features(2, lambda r: np.ones_like(r))
    r = np.append(r, [30.0] * 5)  # five lonely features far out, with huge residuals
    e = np.append(e, [10.0] * 5)
    f = model_field(r, e)
    assert not f.limited and f.reach_mm == 30.0


def test_only_the_outermost_ring_departing_still_makes_a_line():
    """The field can end inside the last ring judged: the line names that ring's ratio."""
    r, e = _features(3, lambda r: np.where(r > 11.0, 4.0, 1.0))
    f = model_field(r, e)
    assert f.limited and 10.0 < f.radius_mm < 11.6
    assert "grow to" in f.line() and "no depth is given there" in f.line()


def test_exact_observations_set_no_limit():
    """Noise-free synthetic observations: residuals of ~1e-14 px, ratios of 2 between rings that
    mean nothing (the imported-roles test's camera wrote a field of 0 mm, which its own reader
    then refused)."""
    rng = np.random.default_rng(4)
    r = 2.0 * np.sqrt(rng.uniform(0.0, 1.0, 120))
    e = np.where(r > 0.5, 5.7e-14, 2.8e-14)
    assert not model_field(r, e).limited


def test_the_field_never_ends_inside_the_centre():
    """Residuals that already grow inside the innermost quarter: the field still holds the centre."""
    r, e = _features(5, lambda r: 1.0 + r ** 2)
    f = model_field(r, e)
    assert f.limited and f.radius_mm >= np.sort(r)[len(r) // 4 - 1]
