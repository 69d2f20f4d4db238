"""Real and thin lenslets: paraxial data, exact rays, apertures."""

from __future__ import annotations

import math

import numpy as np
import pytest

from plenocal.errors import ModelError
from plenocal.sim.optics._kernels import surface_table, trace_rays
from plenocal.sim.optics.lenslets import (
    FUSED_SILICA_ND,
    LensletDesign,
    LensletKind,
    lenslet_prescription,
    lenslet_types,
)
from plenocal.sim.optics.paraxial import paraxial_data

PITCH = 0.127454
F_I = (0.5464, 0.5805, 0.5043)  # the validation set's lenslets


def test_real_lenslet_paraxials_follow_the_thick_lens_formulas():
    """f_i from R_i = f_i (n − 1), H at the curved vertex, H′ at t_i (1 − 1/n): the y–nu trace of
    each type's prescription agrees to 1e-12 relative."""
    design = LensletDesign()
    for kind in lenslet_types(design, F_I, PITCH):
        d = paraxial_data(lenslet_prescription(design, kind), 1.0)
        assert d.efl_mm == pytest.approx(kind.focal_length_mm, rel=1e-12)
        assert d.h_z == pytest.approx(0.0, abs=1e-12)
        assert d.h_prime_z == pytest.approx(kind.principal_gap_mm, rel=1e-12)
        assert kind.cap_radius_mm == pytest.approx(kind.focal_length_mm * (FUSED_SILICA_ND - 1.0))
        assert kind.clear_radius_mm == pytest.approx(0.0626, abs=1e-12)
    sags = [k.sag_mm for k in lenslet_types(design, F_I, PITCH)]
    # Longer focal length, flatter cap: type 1 has the smallest sag, type 2 the largest (~1 µm apart).
    assert sags[1] < sags[0] < sags[2] and 0.5e-3 < sags[2] - sags[1] < 2e-3


def test_thin_lenslets_have_full_pitch_apertures_and_no_thickness():
    design = LensletDesign(LensletKind.THIN)
    kinds = lenslet_types(design, F_I, PITCH)
    assert all(k.clear_radius_mm == PITCH / 2 and k.principal_gap_mm == 0.0 for k in kinds)
    d = paraxial_data(lenslet_prescription(design, kinds[0]), 1.0)
    assert d.efl_mm == pytest.approx(F_I[0], rel=1e-12)


def test_exact_rays_from_a_sensor_point_leave_from_its_conjugate():
    """Near-axis rays from a sensor point 0.336 mm behind H′ (Galilean, d < f) leave the lenslet as
    if from the paraxial virtual image of that point (Gauss, distances from H and H′), to
    third-order accuracy; rays beyond the clear aperture are blocked by the mask."""
    design = LensletDesign()
    kind = lenslet_types(design, F_I, PITCH)[0]
    d = 0.336
    g = kind.principal_gap_mm + d - kind.thickness_mm  # rear face → sensor
    p = lenslet_prescription(design, kind, back_focus_mm=g)
    table = surface_table(p)
    z_sensor = kind.thickness_mm + g
    f = kind.focal_length_mm
    # Virtual image of the sensor point through the lenslet, seen from the front: distance
    # s' = d f/(f − d) behind H (Galilean), i.e. at z = s' (lenslet coordinates).
    z_img = d * f / (f - d)
    h = 1e-3  # sensor point 1 µm off axis
    m = z_img / d
    tilt = np.linspace(-0.02, 0.02, 5)
    start = np.stack([np.full(5, h), np.zeros(5), np.full(5, z_sensor)], 1)
    direction = np.stack([tilt, np.zeros(5), -np.ones(5)], 1)
    ok, pts, dirs = trace_rays(table, start, direction, False)
    assert ok.all()
    # Each emerging ray, extended backwards to z = z_img, passes near (m·h, 0).
    t = (z_img - pts[:, 2]) / dirs[:, 2]
    x = pts[:, 0] + t * dirs[:, 0]
    np.testing.assert_allclose(x, m * h, atol=2e-4 * z_img)  # spherical aberration of the cap
    # A steep ray that reaches the mask plane beyond r_c is blocked.
    far = np.array([[0.0, 0.0, z_sensor]])
    tau = math.tan(math.atan(kind.clear_radius_mm / (g + design.substrate_mm / design.index)) * 1.1)
    ok, _, _ = trace_rays(table, far, np.array([[tau, 0.0, -1.0]]), False)
    assert not ok[0]


def test_bad_lenslets_are_refused():
    with pytest.raises(ModelError, match="exceeds half the pitch"):
        LensletDesign(clear_radius_mm=0.07).clear_radius(PITCH)
    with pytest.raises(ModelError, match="no spherical cap"):
        lenslet_types(LensletDesign(index=1.05), (0.5,), PITCH)
    with pytest.raises(ModelError, match="substrate"):
        LensletDesign(substrate_mm=-0.1)
