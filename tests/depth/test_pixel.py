"""Per-pixel depth refinement on the rendered textured plate (tests/depth/conftest.py: small R12-A,
band-limited noise at 345 mm, υ ≈ 4.3; every pixel's true z is the plate's).

Measured (seed 0, defaults, from the aggregated micro-image depths): 99.0 % of the refined
micro-images' pixels get a depth, median |z − z_true|/z 0.25 % (the micro-image estimates they
start from: 0.11 %); started from υ × 1.1 (median 1.27 % off) the pixels come back to 0.25 %
(97.0 % of them), from × 1.05 / × 0.95 (0.59 / 0.82 %) to 0.25 %. The screen keeps 16.8 % of
them at a median 0.12 % (90th percentile 0.36 %); started from υ × 1.2, 42 % get a depth and the
screen keeps 0.0004 % of the pixels; the kept pixels' central-view positions agree with the
model's projection of their points to 0.0004 px.
"""

from __future__ import annotations

import dataclasses

import numba
import numpy as np
import pytest
from noise_plate import KAPPA, Z_MM

from plenocal.depth.metric import points_from_virtual_depth
from plenocal.depth.pixel import (
    MIN_CONFIDENCE,
    cell_medians,
    central_view_px,
    pixel_confidence,
    refine_pixel_depths,
    screen_pixels,
)
from plenocal.model.projection import central_view_px as model_central_view_px
from plenocal.model.projection import micro_image_centres, project_bap
from plenocal.sim.presets import preset

MEDIAN_TOLERANCE = 0.006
"""Median |z − z_true|/z over the pixels: measured 0.25 % (from the estimates or from υ × 1.1)."""
MIN_COVERAGE = 0.9
"""Fraction of the refined micro-images' pixels with a depth: measured 0.99 (0.97 from υ × 1.1)."""
MIN_KEPT = 0.08
"""Fraction of the pixels the screen keeps on this plate: measured 0.168 (a smooth texture: the
cost rises slowly over the ±1 px of hypotheses, and the 3 × 3 spread is small)."""
WRONG_START = 1.2
"""A start this far off (υ × 1.2): 42 % of the pixels still find an interior minimum, the screen
keeps 0.0004 %."""


@pytest.fixture(scope="module")
def r12a():
    return preset("r12-a", small=True).camera


def _z_errors(camera, vd, px):
    ok = np.isfinite(px.virtual_depth)
    mi = px.micro_image[ok]
    z = points_from_virtual_depth(camera, vd.k[mi], vd.l[mi], px.virtual_depth[ok])[:, 2]
    return np.abs(z - Z_MM) / Z_MM, ok.mean()


@pytest.mark.parametrize("start", [1.0, 1.1])
def test_pixels_find_the_plate(r12a, noise_plate, start):
    dv, weight, vd = noise_plate
    vd0 = dataclasses.replace(vd, virtual_depth=vd.virtual_depth * start)
    z0 = points_from_virtual_depth(r12a, vd.k[vd.ok], vd.l[vd.ok], vd0.virtual_depth[vd.ok])[:, 2]
    assert (np.median(np.abs(z0 - Z_MM) / Z_MM) > 2 * MEDIAN_TOLERANCE) == (start != 1.0)  # the start is off (1.27 %)
    px = refine_pixel_depths(dv, weight, r12a, vd0, kappa=KAPPA)
    assert px.settings["micro_images"] == int(vd.ok.sum()) > 1500
    assert len(px.x) > 150 * px.settings["micro_images"]  # every pixel within the radius: ~166 each
    rel, coverage = _z_errors(r12a, vd, px)
    assert coverage > MIN_COVERAGE
    assert np.median(rel) < MEDIAN_TOLERANCE
    img = px.image((800, 1000))
    assert np.isfinite(img).sum() == np.isfinite(px.virtual_depth).sum()


def test_same_bytes_with_one_and_two_threads(r12a, noise_plate):
    dv, weight, vd = noise_plate
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        a = refine_pixel_depths(dv, weight, r12a, vd, kappa=KAPPA, chunk=300)
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        b = refine_pixel_depths(dv, weight, r12a, vd, kappa=KAPPA, chunk=700)
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(a.x, b.x)
    np.testing.assert_array_equal(a.y, b.y)
    np.testing.assert_array_equal(a.virtual_depth, b.virtual_depth)
    for name in ("cost", "offset_px", "margin", "spread"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_a_stack_without_every_level_is_refused(r12a, noise_plate):
    """The micro-image search may make only the levels it reads (``matching_stack(n_levels=…)``);
    the per-pixel refinement's hypotheses reach past them, so it refuses such a stack instead of
    reading past its end; the full stack gives what the refinement makes itself."""
    from plenocal.depth.matching import BLUR_VARIANCES_PX2, matching_stack

    dv, weight, vd = noise_plate
    short = matching_stack(dv, weight, n_levels=len(BLUR_VARIANCES_PX2) - 1)
    with pytest.raises(ValueError, match="full matching stack"):
        refine_pixel_depths(dv, weight, r12a, vd, kappa=KAPPA, stack=short)
    full = refine_pixel_depths(dv, weight, r12a, vd, kappa=KAPPA, stack=matching_stack(dv, weight))
    own = refine_pixel_depths(dv, weight, r12a, vd, kappa=KAPPA)
    np.testing.assert_array_equal(full.virtual_depth, own.virtual_depth)


@pytest.fixture(scope="module")
def refined(r12a, noise_plate):
    dv, weight, vd = noise_plate
    return vd, refine_pixel_depths(dv, weight, r12a, vd, kappa=KAPPA)


def test_the_screen_keeps_the_better_pixels(r12a, refined):
    """The kept pixels are more accurate than all of them (median 0.12 % against 0.25 %), with
    every kept confidence above the threshold."""
    vd, px = refined
    keep = screen_pixels(px)
    assert keep.mean() > MIN_KEPT
    assert np.all(pixel_confidence(px)[keep] >= MIN_CONFIDENCE)
    rel_all, _ = _z_errors(r12a, vd, px)
    mi = px.micro_image[keep]
    z = points_from_virtual_depth(r12a, vd.k[mi], vd.l[mi], px.virtual_depth[keep], offset_px=px.offset_px[keep])[:, 2]
    rel = np.abs(z - Z_MM) / Z_MM
    assert np.median(rel) < 0.75 * np.median(rel_all)
    assert np.percentile(rel, 90) < 2 * MEDIAN_TOLERANCE


def test_a_wrong_start_is_screened_out(r12a, noise_plate):
    """Started from υ × 1.2, many pixels still find a minimum inside the hypotheses (a wrong
    depth, pulled to the nearest end), but their cost curves are flat: the screen drops them."""
    dv, weight, vd = noise_plate
    px = refine_pixel_depths(dv, weight, r12a, dataclasses.replace(vd, virtual_depth=vd.virtual_depth * WRONG_START),
                             kappa=KAPPA)
    assert np.isfinite(px.virtual_depth).mean() > 0.2
    assert screen_pixels(px).mean() < 0.005


def test_central_view_positions_are_the_models(r12a, refined):
    """X = c + e/γ of each kept pixel is where the model's central view puts the point it sees."""
    vd, px = refined
    keep = screen_pixels(px)
    mi = px.micro_image[keep]
    pts = points_from_virtual_depth(r12a, vd.k[mi], vd.l[mi], px.virtual_depth[keep], offset_px=px.offset_px[keep])
    X = central_view_px(px, vd, r12a.lambda_)[keep]
    assert np.max(np.linalg.norm(X - model_central_view_px(r12a, pts), axis=1)) < 0.01
    # the offsets move the points across the plate: a micro-image's pixels are not one point
    assert np.ptp(pts[:, 0] - points_from_virtual_depth(r12a, vd.k[mi], vd.l[mi], px.virtual_depth[keep])[:, 0]) > 0.5


def test_points_at_offsets_invert_the_projection(r12a):
    """A point seen through micro-lens (k, l) at the feature (u, v) of project_bap comes back from
    its υ and the offset (u, v) − c(k, l)."""
    from plenocal.depth.metric import virtual_depth_of_points

    rng = np.random.default_rng(3)
    pts = np.column_stack([rng.uniform(-20, 20, 200), rng.uniform(-15, 15, 200), rng.uniform(250, 600, 200)])
    k, l = r12a.grid.nearest(*model_central_view_px(r12a, pts).T)
    k = k + rng.integers(-1, 2, 200)
    feat = project_bap(r12a, pts, k, l)
    offset = feat[:, :2] - micro_image_centres(r12a, k, l)
    ups = virtual_depth_of_points(r12a, pts, k, l)
    back = points_from_virtual_depth(r12a, k, l, ups, offset_px=offset)
    np.testing.assert_allclose(back, pts, atol=1e-6 * 600)
    assert np.abs(offset).max() > 1.0  # not only the centres


def test_cell_medians():
    """Cells of 2 px: cell c covers x in [2c − 0.5, 2c + 1.5); odd and even counts; positions
    off the image and NaN values are left out."""
    pos = np.array([[0.0, 0.0], [1.0, 0.4], [0.2, 0.2], [2.4, 1.2], [2.0, 0.0], [3.6, 0.0], [4.0, 4.0], [-0.6, 0.0],
                    [20.0, 0.0], [1.0, 1.0]])
    val = np.array([1.0, 3.0, 5.0, 2.0, 4.0, 10.0, 7.0, 99.0, 99.0, np.nan])
    expected = np.full((3, 3), np.nan)
    expected[0, 0] = 3.0  # 1, 3, 5
    expected[0, 1] = 3.0  # 2, 4
    expected[0, 2] = 10.0
    expected[2, 2] = 7.0
    np.testing.assert_array_equal(cell_medians(pos, val, (3, 3), scale=2), expected)
