"""Spots of virtual points through one lenslet against the thin model (sim/optics/spots.py)."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.sim.optics._kernels import surface_table
from plenocal.sim.optics.lenslets import LensletDesign, LensletKind, lenslet_types
from plenocal.sim.optics.prescription import Prescription, Surface, SurfaceKind
from plenocal.sim.optics.spots import LensletBench, chief_ray_map, lenslet_bench, spot, unvignetted_offset_mm

PITCH = 0.127455
F_I = 0.5782  # R12-A type 0
D, d, PUPIL = 56.70, 0.3248, 49.71 / 8.0  # f/4


def _bench(design: LensletDesign) -> LensletBench:
    return lenslet_bench(design, lenslet_types(design, (F_I,), PITCH)[0], d_mm=d, D_mm=D, pupil_radius_mm=PUPIL)


@pytest.mark.parametrize("clear", [None, 0.7 * PITCH / 2])
@pytest.mark.parametrize("field", [0.0, 12.0])
def test_thin_lenslets_put_unvignetted_spots_on_the_chief_ray(clear, field):
    """A thin lenslet of any aperture: the centroid of every unvignetted spot is the image through
    its centre, β = 0 and c0 = 0 to the spiral's quadrature error (< 1e-4 relative; c0 < 10 nm: off axis the oblique cone’s section is an ellipse whose ray centroid is ~3 nm off the chief ray)."""
    bench = _bench(LensletDesign(LensletKind.THIN, clear_radius_mm=clear))
    for ups in (2.5, 4.0, 9.0):
        m = chief_ray_map(bench, ups, field_mm=field, samples=5000)
        assert m is not None
        assert abs(m.beta_t) < 1e-4 and abs(m.beta_s) < 1e-4 and abs(m.offset_mm) < 1e-5


def test_spot_radius_is_the_thin_blur_radius():
    """Unvignetted spot of a thin lenslet: a uniform disc of radius r_c·|1 − d/f − 1/υ| (eq:blurradius
    with A = 2 r_c), centred on the chief ray."""
    bench = _bench(LensletDesign(LensletKind.THIN))
    ups = 6.0
    x = np.array([0.01, -0.005, ups * d])
    hits = spot(bench, x, samples=20000)
    centre = x[:2] * d / x[2]
    r = np.hypot(*(hits - centre).T)
    expected = bench.clear_radius_mm * abs(1.0 - d / F_I - 1.0 / ups)
    assert r.max() == pytest.approx(expected, rel=2e-3)
    assert np.sqrt(2.0 * np.mean(r**2)) == pytest.approx(expected, rel=2e-3)  # a uniform disc


def test_a_stop_behind_a_thin_lenslet_scales_the_chief_ray_as_derived():
    """Ideal lens with its stop δ behind it (towards the sensor): the centroid lies on the ray from
    the image X″ through the stop's centre, β = (1 − δ/d)/(1 − δ/z″) − 1 with z″ = 1/(1/f + 1/z_X)
    (the spots module docstring), zero at focus and changing sign with the defocus."""
    delta = 0.02
    r_c = 0.03  # the lenslet's disc seen through a stop behind it is larger: keep it unvignetted
    p = Prescription("thin lenslet, stop behind", (
        Surface(thickness_mm=delta, kind=SurfaceKind.IDEAL, focal_length_mm=F_I),
        Surface(thickness_mm=1.0, semi_diameter_mm=r_c, is_stop=True),
    ))
    bench = LensletBench(surface_table(p), 0.0, r_c, F_I, d, D, PUPIL)
    betas = []
    for ups in (2.0, 3.0, 9.0):
        m = chief_ray_map(bench, ups, samples=20000)
        z2 = 1.0 / (1.0 / F_I + 1.0 / (ups * d))
        expected = (1.0 - delta / d) / (1.0 - delta / z2) - 1.0
        assert m.beta_t == pytest.approx(expected, abs=1e-4)
        assert m.beta_s == pytest.approx(expected, abs=1e-4)
        betas.append(m.beta_t)
    assert betas[0] > 0.0 > betas[2]  # focus is at υ = 1/(1 − d/f) ≈ 2.28


def test_refractive_caps_scale_the_disparity_with_depth():
    """R12-A fused-silica caps on 0.1 mm (the real-optics renders' lenslets): the centroid of the
    spot is farther from the lenslet axis than the thin model near focus (υ 2.2, measured +0.83 %)
    and nearer far from it (υ 15, −0.94 %); 12 mm off axis the spots move away from the main axis
    (c0 +0.2 µm at υ 4.5). The bounds hold the sign and the order of magnitude only."""
    bench = _bench(LensletDesign())
    near, far = chief_ray_map(bench, 2.2, samples=5000), chief_ray_map(bench, 15.0, samples=5000)
    assert 0.004 < near.beta_t < 0.015 and -0.015 < far.beta_t < -0.004
    edge = chief_ray_map(bench, 4.5, field_mm=12.0, samples=5000)
    assert edge.offset_mm > 0.0  # pushed away from the main axis off axis


def test_no_map_where_the_main_aperture_clips_every_bundle():
    """At υ 1.6 (f/4, R12-A) the cone towards X′ is narrower than the lenslet: every spot is
    vignetted and no map is fitted."""
    bench = _bench(LensletDesign())
    assert unvignetted_offset_mm(bench, 1.6) < 0.0 < unvignetted_offset_mm(bench, 2.2)
    assert chief_ray_map(bench, 1.6) is None
