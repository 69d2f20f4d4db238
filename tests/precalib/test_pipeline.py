"""Pre-calibration end to end on analytic white images with noise, vignetting and hot pixels."""

from __future__ import annotations

import numpy as np
import pytest
from render import render_white

from plenocal.errors import DataError
from plenocal.model import micro_image_centres
from plenocal.model.camera import Configuration
from plenocal.model.spec import CameraSpec
from plenocal.model.white import internal_parameters
from plenocal.precalib.pipeline import WhiteImage, precalibrate


def spec_of(cam, configuration=Configuration.GALILEAN):
    return CameraSpec(
        pixel_size_mm=cam.sensor.pixel_size_mm,
        width_px=cam.sensor.width_px,
        height_px=cam.sensor.height_px,
        lattice=cam.mla.lattice,
        n_types=3,
        main_lens_focal_length_mm=50.0,
        focus_distance_mm=450.0,
        configuration=configuration,
    )


@pytest.fixture(scope="module")
def result(small_camera, small_whites):
    return precalibrate(small_whites, spec_of(small_camera), checkerboard_f_number=4.0)


def test_centres_indices_and_grid(result, small_camera):
    mic = result.mic
    true = micro_image_centres(small_camera, mic.k, mic.l)
    rms = np.sqrt(np.mean(np.sum((mic.uv - true) ** 2, axis=1)))
    assert rms < 0.05
    assert len(mic) > 1300
    np.testing.assert_allclose(result.grid_fit.grid.pitch_px, small_camera.grid.pitch_px, atol=0.005)
    np.testing.assert_allclose(result.grid_fit.grid.offset_px, small_camera.grid.offset_px, atol=0.02)


def test_type_layout_is_raytrix(result):
    assert result.types.layout.row_shift == (0, 1)
    assert result.types.confidence > 0.99


def test_touching_aperture_is_left_out_with_its_reason(result):
    decisions = {d.f_number: d for d in result.internals.apertures}
    assert not decisions[4.0].used
    assert "touch" in decisions[4.0].reason
    assert all(decisions[N].used for N in (5.656854249, 8.0, 11.313708499, 16.0))


def test_internal_parameters_within_2_percent(result, small_camera):
    truth = internal_parameters(small_camera)
    assert result.omega.m_mm == pytest.approx(truth.m_mm, rel=0.02)
    np.testing.assert_allclose(result.omega.q_prime_mm, truth.q_prime_mm, rtol=0.02)


def test_initial_camera_within_3_percent(result, small_camera):
    cam = result.camera
    assert cam.d_mm == pytest.approx(small_camera.d_mm, rel=0.03)
    assert cam.D_mm == pytest.approx(small_camera.D_mm, rel=0.03)
    np.testing.assert_allclose(cam.mla.focal_lengths_mm, small_camera.mla.focal_lengths_mm, rtol=0.03)
    assert result.configuration is Configuration.GALILEAN


def test_papers_alpha_estimator_is_biased_here(small_camera, small_whites):
    """α·σ is not the support radius of a disc ⊗ disc micro-image: m comes out ~27 % low."""
    res = precalibrate(small_whites, spec_of(small_camera), checkerboard_f_number=4.0, estimator="paper")
    truth = internal_parameters(small_camera)
    assert abs(res.omega.m_mm / truth.m_mm - 1) > 0.15


def test_unfocused_is_recognised_without_a_configuration(small_camera):
    """With f = d (q ≈ 0) and no configuration given, precalibration states "unfocused"."""
    from plenocal.model import MicroLensArray, TypeLayout

    mla = small_camera.mla
    d = small_camera.d_mm
    unf = small_camera.replace(
        mla=MicroLensArray(mla.lattice, mla.pitch_mm, mla.rotation_xyz_rad, mla.translation_mm, (d,), TypeLayout(1)),
        configuration=Configuration.UNFOCUSED,
    )
    whites = [WhiteImage(N, render_white(unf, N, noise=0.5, seed=7)) for N in (5.656854249, 8.0, 16.0)]
    spec = CameraSpec(0.0055, 1020, 710, mla.lattice, 1, None, 50.0, 450.0, None)
    res = precalibrate(whites, spec, checkerboard_f_number=8.0)
    assert res.configuration is Configuration.UNFOCUSED
    assert res.configuration_inferred
    assert res.camera.d_mm == pytest.approx(2 * abs(res.omega.m_mm))


# --- bad input ---------------------------------------------------------------------------
def test_single_aperture(small_camera, small_whites):
    with pytest.raises(DataError, match="white images at >= 2 different f-numbers, got 1"):
        precalibrate(small_whites[:1], spec_of(small_camera), checkerboard_f_number=4.0)


def test_only_touching_apertures(small_camera):
    whites = [WhiteImage(N, render_white(small_camera, N, seed=1)) for N in (3.0, 4.0)]
    with pytest.raises(DataError, match=r"need white images at >= 2 apertures whose micro-images do not touch, got 0 of 2 \(N=3: micro-images touch"):
        precalibrate(whites, spec_of(small_camera), checkerboard_f_number=4.0)


def test_different_sizes(small_camera, small_whites):
    w2 = WhiteImage(8.0, small_whites[2].image[:-10], "small")
    with pytest.raises(DataError, match="different sizes"):
        precalibrate([small_whites[1], w2], spec_of(small_camera), checkerboard_f_number=4.0)


def test_empty_image(small_camera, small_whites):
    w2 = WhiteImage(8.0, np.zeros_like(small_whites[2].image), "black")
    with pytest.raises(DataError, match="black is empty or uniform"):
        precalibrate([small_whites[1], w2], spec_of(small_camera), checkerboard_f_number=4.0)


def test_checkerboard_given_as_white(small_camera, small_whites):
    img = small_whites[2].image.copy()
    H, W = img.shape
    yy, xx = np.mgrid[0:H, 0:W]
    img = img * (((xx // 120) + (yy // 120)) % 2)  # a checkerboard seen through the micro-lenses
    with pytest.raises(DataError, match="not a white image"):
        precalibrate([small_whites[1], WhiteImage(8.0, img, "board")], spec_of(small_camera), checkerboard_f_number=4.0)
