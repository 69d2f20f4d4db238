"""All-in-focus rendering against the truth of a rendered textured plate (tests/depth/conftest.py:
the small R12-A, band-limited noise at 345 mm, υ ≈ 4.3).

The truth of every texel is where the model's central view puts it
(:func:`plenocal.model.projection.central_view_px`); the rendered image is sampled there and
compared with the texel values by normalised cross-correlation (NCC).

Measured (seed 0, estimated and aggregated depths, the defaults): NCC 0.930, against 0.38 for
the micro-images' mean grey levels on the same cells; gradient energy 9.6 times theirs; with the
depths × 1.3 NCC 0.905, ÷ 1.3 0.902, × 2 0.772 (the blended patches forgive small depth errors:
at υ ≈ 9, 300 mm, × 1.3 changed NCC by < 0.005 on the same texture, with 1-pitch patches).
"""

from __future__ import annotations

import numba
import numpy as np
import pytest
from noise_plate import KAPPA, PLATE_MM, TEXEL_MM, Z_MM

from plenocal.depth.metric import virtual_depth_of_points
from plenocal.depth.render import fill_inverse_depths, render_all_in_focus
from plenocal.detect.corners import bilinear
from plenocal.model.projection import central_view_px, micro_image_centres, micro_lens_centres, project_bap
from plenocal.sim.presets import preset

MIN_NCC = 0.88
"""NCC of the all-in-focus image with the texture: measured 0.930 (the rendering's resolution
and the Monte-Carlo noise keep it below 1)."""
MIN_GRADIENT_RATIO = 4.0
"""Gradient energy of the all-in-focus image over the micro-image means' (same cells): measured 9.6."""
MIN_NCC_LOSS = 0.01
"""A depth 30 % off (× 1.3 or ÷ 1.3) lowers the NCC by at least this: measured 0.025 and 0.028."""


def _ncc(a: np.ndarray, b: np.ndarray) -> float:
    a = a - a.mean()
    b = b - b.mean()
    return float(np.sum(a * b) / np.sqrt(np.sum(a * a) * np.sum(b * b)))


@pytest.fixture(scope="module")
def r12a():
    return preset("r12-a", small=True).camera


@pytest.fixture(scope="module")
def texel_view(r12a, noise_texture):
    texture = noise_texture
    """Central-view position (px) of every texel centre, and its value."""
    yy, xx = np.mgrid[0:texture.shape[0], 0:texture.shape[1]]
    P = np.column_stack([(xx.ravel() + 0.5) * TEXEL_MM - PLATE_MM[0] / 2, (yy.ravel() + 0.5) * TEXEL_MM - PLATE_MM[1] / 2,
                         np.full(xx.size, Z_MM)])
    return central_view_px(r12a, P), texture.ravel().astype(np.float64)


def _sample(image: np.ndarray, X: np.ndarray, scale: int) -> np.ndarray:
    """``image`` (output grid) at central-view positions X (sensor px); NaN off it or near NaN."""
    u = (X[:, 0] + 0.5) / scale - 0.5
    v = (X[:, 1] + 0.5) / scale - 0.5
    h, w = image.shape
    inside = (u >= 0) & (u <= w - 1) & (v >= 0) & (v <= h - 1)
    vals = bilinear(np.nan_to_num(image), u, v)
    finite = bilinear(np.isfinite(image).astype(np.float64), u, v) > 0.999
    return np.where(inside & finite, vals, np.nan)


def _score(image: np.ndarray, scale: int, texel_view) -> float:
    X, values = texel_view
    s = _sample(image, X, scale)
    ok = np.isfinite(s)
    assert ok.sum() > 50_000  # the plate fills the view
    return _ncc(s[ok], values[ok])


def _gradient_energy(image: np.ndarray, mask: np.ndarray) -> float:
    gy, gx = np.gradient(image)
    m = mask & np.isfinite(gx) & np.isfinite(gy)
    return float(np.mean(gx[m] ** 2 + gy[m] ** 2))


def test_central_view_is_where_every_micro_image_sees_a_point(r12a):
    """A point's image through lens i, at offset o from c_i, is at c_i + o/γ_i in the central view
    (γ = (1 − λ) + λ/υ): the mapping the rendering inverts. Exact for an untilted MLA; under the
    preset's tilt, γ with the one λ of the camera errs by 0.004 px (measured)."""
    cam = r12a
    rng = np.random.default_rng(3)
    k = rng.integers(8, 36, 40)
    l = rng.integers(8, 30, 40)
    C = micro_lens_centres(cam, k, l)
    for z in (250.0, 345.0, 600.0):
        # a point seen near the lens' own line of sight
        P = np.column_stack([-C[:, 0] * (z / cam.D_mm) * 0.2, -C[:, 1] * (z / cam.D_mm) * 0.2, np.full(len(k), z)])
        uv = project_bap(cam, P, k, l)[:, :2]
        c = micro_image_centres(cam, k, l)
        ups = virtual_depth_of_points(cam, P, k, l)
        gamma = (1.0 - cam.lambda_) + cam.lambda_ / ups
        np.testing.assert_allclose(c + (uv - c) / gamma[:, None], central_view_px(cam, P), atol=0.01)


def test_all_in_focus_matches_the_plate(r12a, noise_plate, texel_view):
    dv, weight, vd = noise_plate
    af = render_all_in_focus(dv, weight, r12a, vd.virtual_depth, kappa=KAPPA)
    assert af.image.shape == (800 // af.scale, 1000 // af.scale)
    assert af.drawn > 1500 and af.filled < 0.05 * af.drawn
    assert _score(af.image, af.scale, texel_view) > MIN_NCC
    # sharper than the micro-images' mean grey levels on the same cells
    from plenocal.cli.depth import cell_image

    means = cell_image(r12a, vd.grey, scale=af.scale)
    both = np.isfinite(af.image) & np.isfinite(means)
    assert both.mean() > 0.9
    assert _gradient_energy(af.image, both) > MIN_GRADIENT_RATIO * _gradient_energy(means, both)
    assert _score(means, af.scale, texel_view) < MIN_NCC - 0.3  # measured 0.38


@pytest.mark.parametrize("factor", [1.3, 1 / 1.3])
def test_a_wrong_depth_renders_worse(r12a, noise_plate, texel_view, factor):
    dv, weight, vd = noise_plate
    right = _score(render_all_in_focus(dv, weight, r12a, vd.virtual_depth, kappa=KAPPA).image, 4, texel_view)
    wrong = _score(render_all_in_focus(dv, weight, r12a, vd.virtual_depth * factor, kappa=KAPPA).image, 4, texel_view)
    assert wrong < right - MIN_NCC_LOSS


def test_same_bytes_with_one_and_two_threads(r12a, noise_plate):
    dv, weight, vd = noise_plate
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        a = render_all_in_focus(dv, weight, r12a, vd.virtual_depth, kappa=KAPPA, chunk=300)
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        b = render_all_in_focus(dv, weight, r12a, vd.virtual_depth, kappa=KAPPA, chunk=700)
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(a.image, b.image)


def test_without_depths_nothing_is_drawn(r12a, noise_plate):
    dv, weight, vd = noise_plate
    af = render_all_in_focus(dv, weight, r12a, np.full(len(vd.k), np.nan), kappa=KAPPA)
    assert af.drawn == 0 and np.all(np.isnan(af.image))


def test_fill_takes_the_nearest_estimate():
    centres = np.array([[0.0, 0.0], [8.0, 0.0], [20.0, 0.0], [100.0, 0.0], [30.0, 0.0]])
    w = np.array([0.1, np.nan, 0.3, np.nan, np.nan])
    drawable = np.array([True, True, True, True, False])
    out, filled = fill_inverse_depths(centres, w, drawable, 10.0)
    np.testing.assert_array_equal(out[:4], [0.1, 0.1, 0.3, 0.3])
    assert np.isnan(out[4]) and filled.tolist() == [False, True, False, True, False]
    out, filled = fill_inverse_depths(centres, w, drawable, 10.0, reach_pitches=2.0)
    assert np.isnan(out[3]) and filled.tolist() == [False, True, False, False, False]
