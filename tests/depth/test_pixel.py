"""Per-pixel depth refinement on the rendered textured plate (tests/depth/conftest.py: small R12-A,
band-limited noise at 345 mm, υ ≈ 4.3; every pixel's true z is the plate's).

Measured (seed 0, defaults, from the aggregated micro-image depths): 99.0 % of the refined
micro-images' pixels get a depth, median |z − z_true|/z 0.25 % (the micro-image estimates they
start from: 0.11 %); started from υ × 1.1 (median 1.27 % off) the pixels come back to 0.25 %
(97.0 % of them), from × 1.05 / × 0.95 (0.59 / 0.82 %) to 0.25 %.
"""

from __future__ import annotations

import dataclasses

import numba
import numpy as np
import pytest
from noise_plate import KAPPA, Z_MM

from plenocal.depth.metric import points_from_virtual_depth
from plenocal.depth.pixel import refine_pixel_depths
from plenocal.sim.presets import preset

MEDIAN_TOLERANCE = 0.006
"""Median |z − z_true|/z over the pixels: measured 0.25 % (from the estimates or from υ × 1.1)."""
MIN_COVERAGE = 0.9
"""Fraction of the refined micro-images' pixels with a depth: measured 0.99 (0.97 from υ × 1.1)."""


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
