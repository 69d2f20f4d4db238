"""``distortions_inverse``: the least-squares inverse of the forward distortion over the sensor's
image-space footprint (reference §4 step 4, §11 step 4; prism-build/invdist.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from plenocal.errors import DataError
from plenocal.io.libpleno.inverse_distortion import (
    error_on_sensor_px,
    fit_camera_inverse_distortion,
    fit_inverse_distortion,
    focus_plane_depths,
    image_space_footprint,
)
from plenocal.model.camera import Distortion
from plenocal.sim import preset

# The distortions_inverse PRISM rendered the r12-b images with (validation/prism-r12b, fitted by
# prism-build/invdist.py over x in [-12.6, 11.6] mm, y in [-7.9, 10.9] mm on a 400 x 400 grid).
PRISM_R12B_INVERSE = (
    -2.8245866467159044e-05, 2.9583986888241894e-07, -6.155204891512131e-10,
    -0.0001425410596989074, 0.00021664456731706363,
)


@pytest.fixture(scope="module")
def r12b_full():
    """The r12-b preset at the paper's full MLA tilt (the PRISM r12-b truth camera's optics)."""
    return preset("r12-b", tilt_scale=1.0).camera


# --- distortions_inverse ------------------------------------------------------------------
def test_distortions_inverse_accuracy(r12b_full):
    """inverse ∘ forward = identity within 3.5 µm (RMS 0.6 µm) over the sensor's image-space
    footprint, for a distortion that moves points up to 0.21 mm; at random points too."""
    fit = fit_camera_inverse_distortion(r12b_full)
    (x0, x1), (y0, y1) = image_space_footprint(r12b_full)
    assert (fit.x_range_mm, fit.y_range_mm) == ((x0, x1), (y0, y1))
    assert fit.max_shift_mm > 0.2
    assert fit.max_error_mm < 3.5e-3 and fit.rms_error_mm < 0.6e-3
    rng = np.random.default_rng(1)
    p = np.column_stack([rng.uniform(x0, x1, 5000), rng.uniform(y0, y1, 5000)])
    q = np.column_stack(r12b_full.distortion.apply(p[:, 0], p[:, 1]))
    back = np.column_stack(fit.inverse.apply(q[:, 0], q[:, 1]))
    assert np.hypot(*(back - p).T).max() < 3.5e-3
    # ~100 times better than ignoring the distortion, and the footprint holds the sensor
    assert fit.max_error_mm < fit.max_shift_mm / 50.0
    s, (u0, v0) = r12b_full.sensor.pixel_size_mm, r12b_full.principal_point_px
    assert x0 < (u0 - 4079.5) * s and x1 > (u0 + 0.5) * s and y0 < (v0 - 3067.5) * s and y1 > (v0 + 0.5) * s


def test_distortions_inverse_is_invdist_fit(r12b_full):
    """Over prism-build's rectangle the fit gives the coefficients PRISM rendered with."""
    fit = fit_inverse_distortion(r12b_full.distortion, x_range_mm=(-12.6, 11.6), y_range_mm=(-7.9, 10.9))
    c = fit.inverse
    np.testing.assert_allclose((c.q1, c.q2, c.q3, c.p1, c.p2), PRISM_R12B_INVERSE, rtol=1e-12)
    zero = fit_inverse_distortion(Distortion(), x_range_mm=(-1.0, 1.0), y_range_mm=(-1.0, 1.0))
    assert zero.inverse.is_zero and zero.max_error_mm == 0.0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"x_range_mm": (1.0, -1.0), "y_range_mm": (-1.0, 1.0)}, "non-empty rectangle"),
        ({"x_range_mm": (-1.0, 1.0), "y_range_mm": (-1.0, math.nan)}, "non-empty rectangle"),
        ({"x_range_mm": (-1.0, 1.0), "y_range_mm": (-1.0, 1.0), "n_grid": 2}, "at least 3"),
    ],
)
def test_distortions_inverse_bad_input(kwargs, message):
    with pytest.raises(DataError, match=message):
        fit_inverse_distortion(Distortion(q1=1e-4), **kwargs)


def test_error_on_sensor(r12b_full):
    """An inverse error at PRISM's p' seen on the sensor: ×d/|a| at the types' focus planes
    (r12-b: 3 µm ≈ 0.23 px, what prism-build's chief-ray check saw), ×1 when HEAD takes the camera
    for unfocused (a Keplerian multi-focus camera: its rays start at the pixel)."""
    d = r12b_full.d_mm
    a = max(focus_plane_depths(r12b_full), key=lambda x: d / abs(x))
    assert error_on_sensor_px(r12b_full, 3e-3) == pytest.approx(3e-3 * d / abs(a) / 0.0055, rel=1e-12)
    assert 0.15 < error_on_sensor_px(r12b_full, 3e-3) < 0.3
    kep = preset("kep-3", small=True).camera
    assert error_on_sensor_px(kep, 5.5e-3) == pytest.approx(1.0, rel=1e-12)
