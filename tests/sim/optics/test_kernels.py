"""The exact ray kernel (spheres, Snell, ideal surfaces) against optiland's real-ray trace."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from optiland_twin import D_LINE_UM, optiland_optic

from plenocal.sim.optics._kernels import surface_table, trace_rays
from plenocal.sim.optics.library import DESIGN_NAMES, load_lens
from plenocal.sim.optics.paraxial import paraxial_data
from plenocal.sim.optics.prescription import Prescription, Surface, SurfaceKind

optiland = pytest.importorskip("optiland")

TOL_MM = 1e-9
"""Agreement with optiland at the image plane (positions in mm and direction cosines): both
solve the same exact equations in float64."""


def _rays(p: Prescription, n: int, seed: int, max_field_deg: float = 10.0):
    """Rays from a plane 20 mm before surface 1 towards points of the entrance pupil (0.95 of
    its radius) at field angles up to ``max_field_deg``."""
    d = paraxial_data(p)
    rng = np.random.default_rng(seed)
    r = 0.95 * d.epd_mm / 2.0 * np.sqrt(rng.uniform(0, 1, n))
    a = rng.uniform(0, 2 * np.pi, n)
    target = np.stack([r * np.cos(a), r * np.sin(a), np.full(n, d.entrance_pupil_z)], axis=1)
    field = np.radians(max_field_deg) * np.sqrt(rng.uniform(0, 1, n))
    b = rng.uniform(0, 2 * np.pi, n)
    direction = np.stack([np.tan(field) * np.cos(b), np.tan(field) * np.sin(b), np.ones(n)], axis=1)
    direction /= np.linalg.norm(direction, axis=1)[:, None]
    z0 = -20.0
    start = target + direction * ((z0 - target[:, 2]) / direction[:, 2])[:, None]
    return start, direction


def _optiland_trace(p: Prescription, start, direction):
    from optiland.rays import RealRays

    d = paraxial_data(p)
    o = optiland_optic(p, epd_mm=d.epd_mm)
    n = len(start)
    rays = RealRays(*start.T, *direction.T, np.ones(n), np.full(n, D_LINE_UM))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        o.surfaces.trace(rays, skip=1)
    return np.stack([rays.x, rays.y, rays.z], 1), np.stack([rays.L, rays.M, rays.N], 1)


@pytest.mark.parametrize("name", DESIGN_NAMES)
def test_real_rays_agree_with_optiland_at_the_image_plane(name):
    lens = load_lens(name, efl_mm=50.0)
    p = lens.with_stop_semi_diameter(paraxial_data(lens, 5.6).stop_semi_diameter_mm)
    start, direction = _rays(p, 64, seed=1)
    ok, pts, dirs = trace_rays(surface_table(p), start, direction, True)
    assert ok.sum() >= 16  # many rays pass every clear aperture (the telephoto vignets most)
    z_image = p.vertex_z_mm[-1] + p.surfaces[-1].thickness_mm
    pts = pts + dirs * ((z_image - pts[:, 2]) / dirs[:, 2])[:, None]
    ref_p, ref_d = _optiland_trace(p, start[ok], direction[ok])
    np.testing.assert_allclose(pts[ok], ref_p, rtol=0, atol=TOL_MM)
    np.testing.assert_allclose(dirs[ok], ref_d, rtol=0, atol=TOL_MM)


@pytest.mark.parametrize("name", ["double-gauss", "telephoto", "thick-ideal"])
def test_backward_trace_retraces_the_forward_ray(name):
    """Reversibility: a ray traced to the sensor side and sent back comes out on its own line."""
    lens = load_lens(name, efl_mm=50.0)
    p = lens.with_stop_semi_diameter(paraxial_data(lens, 4.0).stop_semi_diameter_mm)
    start, direction = _rays(p, 64, seed=2)
    table = surface_table(p)
    ok, pts, dirs = trace_rays(table, start, direction, True)
    back_ok, back_p, back_d = trace_rays(table, pts[ok], -dirs[ok], False)
    assert back_ok.all()
    np.testing.assert_allclose(back_d, -direction[ok], atol=1e-12)
    # The returned line passes through the start point.
    t = (start[ok, 2] - back_p[:, 2]) / back_d[:, 2]
    np.testing.assert_allclose(back_p + back_d * t[:, None], start[ok], atol=1e-10)


def test_clipping_by_the_stop_and_total_internal_reflection():
    lens = load_lens("field-corrector", efl_mm=50.0)
    d = paraxial_data(lens, 4.0)
    p = lens.with_stop_semi_diameter(d.stop_semi_diameter_mm)
    table = surface_table(p)
    # Axial rays: inside the entrance pupil (real f/4 beam: 98.7 % of its radius passes) or not.
    r_ep = d.epd_mm / 2.0
    start = np.array([[0.0, 0.97 * r_ep, -5.0], [0.0, 1.01 * r_ep, -5.0]])
    ok, _, _ = trace_rays(table, start, np.array([[0.0, 0.0, 1.0]] * 2), True)
    assert ok.tolist() == [True, False]
    # A glass-to-air plane beyond the critical angle reflects totally: the ray is dropped.
    slab = Prescription("slab", (Surface(thickness_mm=1.0, index_after=1.5, is_stop=True), Surface(thickness_mm=1.0)))
    angle = math.asin(1 / 1.5)
    tilted = [[0.0, math.sin(angle * 0.99), math.cos(angle * 0.99)], [0.0, math.sin(angle * 1.01), math.cos(angle * 1.01)]]
    ok, _, _ = trace_rays(surface_table(slab)[1:], np.array([[0.0, 0.0, 0.5]] * 2), np.array(tilted), True)
    assert ok.tolist() == [True, False]


def _ideal(**terms) -> Prescription:
    return Prescription("aberrated", (
        Surface(thickness_mm=50.0, kind=SurfaceKind.IDEAL, focal_length_mm=50.0, is_stop=True, **terms),
    ))


def test_each_third_order_term_is_its_aberration_alone():
    """Distortion moves the chief ray's image height to f·t·(1 − T t²); spherical aberration makes
    a ray from infinity at height y cross the axis at f/(1 + A f y²); field curvature focuses a
    bundle at field tangent t at f/(1 + C f t²), the same for every height in it."""
    f = 50.0
    t = 0.2
    table = surface_table(_ideal(distortion=0.3))
    ok, p, d = trace_rays(table, np.array([[-t * 10.0, 0.0, -10.0]]), np.array([[t, 0.0, 1.0]]), True)
    x = p[0, 0] + d[0, 0] / d[0, 2] * (f - p[0, 2])
    assert ok[0] and x == pytest.approx(f * t * (1 - 0.3 * t * t), rel=1e-12)
    A = 2e-5
    table = surface_table(_ideal(spherical=A))
    y = np.array([1.0, 3.0, 6.0])
    start = np.stack([y, np.zeros(3), np.full(3, -5.0)], 1)
    ok, p, d = trace_rays(table, start, np.tile([0.0, 0.0, 1.0], (3, 1)), True)
    z_cross = p[:, 2] - p[:, 0] * d[:, 2] / d[:, 0]
    np.testing.assert_allclose(z_cross, f / (1 + A * f * y**2), rtol=1e-12)
    C = 0.05
    table = surface_table(_ideal(field_curvature=C))
    ys = np.array([-4.0, -1.0, 2.0, 5.0])
    start = np.stack([ys - t * 10.0, np.zeros(4), np.full(4, -10.0)], 1)
    ok, p, d = trace_rays(table, start, np.tile([t, 0.0, 1.0], (4, 1)), True)
    z_focus = f / (1 + C * f * t * t)
    x = p[:, 0] + d[:, 0] / d[:, 2] * (z_focus - p[:, 2])
    assert ok.all() and np.ptp(x) < 1e-12 and x[0] == pytest.approx(z_focus * t, rel=1e-12)


def test_aberrated_ideal_surface_is_reversible_and_paraxially_invisible():
    p = _ideal(spherical=1e-5, field_curvature=0.02, distortion=0.1)
    assert paraxial_data(p, 4.0) == paraxial_data(_ideal(), 4.0)
    start, direction = _rays(p.with_stop_semi_diameter(6.0), 32, seed=3, max_field_deg=15.0)
    table = surface_table(p.with_stop_semi_diameter(6.0))
    ok, pts, dirs = trace_rays(table, start, direction, True)
    back_ok, _, back_d = trace_rays(table, pts[ok], -dirs[ok], False)
    assert back_ok.all()
    np.testing.assert_allclose(back_d, -direction[ok], atol=1e-12)
    # Scaling keeps the aberrations of the scaled rays (heights × k, angles unchanged).
    big = p.with_stop_semi_diameter(6.0).scaled(2.0)
    ok2, _, dirs2 = trace_rays(surface_table(big), start * 2.0, direction, True)
    assert (ok2 == ok).all()
    np.testing.assert_allclose(dirs2[ok], dirs[ok], atol=1e-12)


def test_aberration_terms_only_on_ideal_surfaces():
    from plenocal.errors import ModelError

    with pytest.raises(ModelError, match="ideal surfaces only"):
        Surface(thickness_mm=1.0, radius_mm=20.0, distortion=0.1)
