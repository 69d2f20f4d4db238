"""Ω from white images that plenocal's simulator did not make: point-sampled and area-integrated
pixels, an unblurred fraction of light (PRISM's chief ray), a tilted MLA, types whose radius
distributions overlap at every single aperture."""

from __future__ import annotations

import numpy as np
import pytest
from render import render_white
from small_r12 import small_r12_camera

from plenocal.errors import DataError
from plenocal.model import MicroLensArray
from plenocal.model.camera import Configuration
from plenocal.model.spec import CameraSpec
from plenocal.model.white import internal_parameters
from plenocal.precalib.internals import type_confusion
from plenocal.precalib.pipeline import WhiteImage, precalibrate

F_NUMBERS = (5.656854249, 8.0, 11.313708499)
TILT = (1.6e-3, -1.3e-3)
"""Spans d(k, l) by ~3 % over the small camera's MLA, like the paper's full tilt over an R12."""


def tilted(cam, focal=None):
    mla = cam.mla
    return cam.replace(mla=MicroLensArray(
        mla.lattice, mla.pitch_mm, (TILT[0], TILT[1], mla.rotation_xyz_rad[2]), mla.translation_mm,
        focal or mla.focal_lengths_mm, mla.types))


def spec_of(cam):
    return CameraSpec(cam.sensor.pixel_size_mm, cam.sensor.width_px, cam.sensor.height_px, cam.mla.lattice, 3, None,
                      50.0, 450.0, Configuration.GALILEAN)


def run(cam, **render):
    """Pre-calibration of whites at F_NUMBERS rendered with a raw sensor's black level (16 of 255)."""
    whites = [WhiteImage(N, render_white(cam, N, seed=i, black_level=16.0, **render), f"white-{N:g}")
              for i, N in enumerate(F_NUMBERS)]
    return precalibrate(whites, spec_of(cam), checkerboard_f_number=4.0)


@pytest.fixture(scope="module")
def camera():
    return tilted(small_r12_camera())


@pytest.mark.parametrize(("supersample", "pixel_variance"), [(1, 0.0), (4, 1.0 / 12.0)], ids=["point", "area"])
def test_omega_at_the_mla_origin_whatever_the_pixel_integration(camera, supersample, pixel_variance):
    """m and q'_i at the MLA frame origin within 0.5 % of the truth's radius law, whether pixels are
    sampled at one point (PRISM) or integrated over their area; the pixel term is measured."""
    res = run(camera, supersample=supersample, noise=1.0)
    truth = internal_parameters(camera)
    fit = res.internals
    assert res.omega.m_mm == pytest.approx(truth.m_mm, rel=0.005)
    np.testing.assert_allclose(res.omega.q_prime_mm, truth.q_prime_mm, rtol=0.005)
    assert fit.pixel_variance_px2 == pytest.approx(pixel_variance, abs=0.03)
    assert fit.unblurred_weight < 0.01


def test_unblurred_light_is_measured_not_mistaken_for_a_smaller_lens_blur(camera):
    """PRISM adds the chief ray (weight 1/31) to every pixel: the variance law alone would put q'_i
    ~1 % off; the profile shape recovers w and keeps q'_i within 0.5 %."""
    res = run(camera, supersample=1, noise=1.0, unblurred_weight=1.0 / 31.0)
    truth = internal_parameters(camera)
    assert res.internals.unblurred_weight == pytest.approx(1.0 / 31.0, abs=0.006)
    np.testing.assert_allclose(res.omega.q_prime_mm, truth.q_prime_mm, rtol=0.005)


def test_initial_tilt_from_the_gradient_of_the_radius_law(camera):
    res = run(camera, supersample=4, noise=1.0)
    tx, ty, _ = res.camera.mla.rotation_xyz_rad
    assert tx == pytest.approx(TILT[0], rel=0.15)
    assert ty == pytest.approx(TILT[1], rel=0.15)


def test_overlapping_per_aperture_distributions_still_calibrate():
    """Types whose radii differ by about their per-micro-image noise at every aperture (PRISM's
    R12: medians 0.13–0.29 px apart, spread 0.06–0.12 px): each aperture alone confuses the types
    often, all apertures together do not, and Ω comes out right."""
    cam = tilted(small_r12_camera(), focal=(0.5650, 0.5525, 0.5400))
    res = run(cam, supersample=4, noise=2.0)
    per_aperture = [d.type_confusion for d in res.internals.apertures if d.used]
    assert min(per_aperture) > 0.01
    assert res.internals.type_confusion < 0.01
    truth = internal_parameters(cam)
    np.testing.assert_allclose(res.omega.q_prime_mm, truth.q_prime_mm, rtol=0.01)


def test_types_that_cannot_be_told_apart_fail_naming_the_cause():
    cam = tilted(small_r12_camera(), focal=(0.5530, 0.5525, 0.5520))
    with pytest.raises(DataError, match=r"types cannot be told apart .* confused with another's in"):
        run(cam, supersample=4, noise=6.0)


def test_type_confusion_is_the_gaussian_bayes_error():
    rng = np.random.default_rng(3)
    types = np.repeat([0, 1], 20000)
    x = rng.normal(0.0, 1.0, types.size) + 2.0 * types  # means 2σ apart: error Φ(−1) = 15.9 %
    assert type_confusion(x, types, 2) == pytest.approx(0.1587, abs=0.01)


@pytest.mark.parametrize("supersample", [1, 4], ids=["point", "area"])
def test_unfocused_pixel_term_is_not_measured_and_says_how_much_that_costs(supersample):
    """An unfocused camera's lens blur disc (R_b ≈ 0.03 px) cannot be told from the pixel kernel:
    the pixel term is assumed, and a warning says how far q'_i moves between point-sampled and
    area-integrated pixels. The truth lies within that band for either kind of pixel."""
    import re

    from plenocal.sim.presets import preset

    cam = preset("upc-s", small=True).camera
    whites = [WhiteImage(N, render_white(cam, N, seed=i, black_level=16.0, supersample=supersample, noise=1.0), f"white-{N:g}")
              for i, N in enumerate((4.0, 5.6, 8.0))]
    spec = CameraSpec(cam.sensor.pixel_size_mm, cam.sensor.width_px, cam.sensor.height_px, cam.mla.lattice, 1, None,
                      cam.main_lens.focal_length_mm, float("inf"), Configuration.UNFOCUSED)
    res = precalibrate(whites, spec, checkerboard_f_number=2.04)
    (warning,) = [w for w in res.internals.warnings if w.startswith("pixel term not measured")]
    band = float(re.search(r"±([0-9.]+) %", warning).group(1)) / 100.0
    assert band < 0.1, warning
    error = res.omega.q_prime_mm[0] / internal_parameters(cam).q_prime_mm[0] - 1.0
    assert abs(error) <= band + 0.005, (error, band)
    # Focused cameras measure the pixel term: no such warning (test_omega_at_the_mla_origin...).
