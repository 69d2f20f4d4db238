"""Paraxial data of every bundled design against optiland's (an independent implementation)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from optiland_twin import D_LINE_UM, optiland_optic, scalar

from plenocal.sim.optics.library import DESIGN_NAMES, REAL_DESIGNS, load_lens
from plenocal.sim.optics.paraxial import (
    clear_semi_diameters_mm,
    image_of_plane,
    paraxial_data,
    stop_semi_diameter_mm,
)
from plenocal.sim.optics.prescription import SurfaceKind, thin_lens

optiland = pytest.importorskip("optiland")

REL = 1e-9
"""Agreement required with optiland: both are exact first-order computations in float64."""
R12_HALF_DIAGONAL_MM = 0.5 * math.hypot(4080, 3068) * 0.0055


@pytest.mark.parametrize("name", DESIGN_NAMES)
@pytest.mark.parametrize("f_number", [4.0, 11.313708498984761])
def test_paraxial_data_agree_with_optiland(name, f_number):
    p = load_lens(name, efl_mm=50.0)
    ours = paraxial_data(p, f_number)
    o = optiland_optic(p, epd_mm=ours.epd_mm)
    par = o.paraxial
    z_image = ours.last_vertex_z + p.surfaces[-1].thickness_mm
    scale = ours.efl_mm
    assert ours.efl_mm == pytest.approx(50.0, rel=1e-12)
    assert scalar(par.f2()) == pytest.approx(ours.efl_mm, rel=REL)
    assert abs(z_image + scalar(par.F2()) - ours.rear_focal_z) <= REL * scale  # BFL
    assert abs(scalar(par.F1()) - ours.front_focal_z) <= REL * scale  # FFL
    assert abs(z_image + scalar(par.P2()) - ours.h_prime_z) <= REL * scale
    assert abs(scalar(par.P1()) - ours.h_z) <= REL * scale
    assert abs(scalar(par.EPL()) - ours.entrance_pupil_z) <= REL * scale
    assert abs(z_image + scalar(par.XPL()) - ours.exit_pupil_z) <= REL * scale
    assert scalar(par.EPD()) == pytest.approx(ours.epd_mm, rel=REL)
    assert scalar(par.XPD()) == pytest.approx(ours.xpd_mm, rel=REL)
    assert ours.f_number == pytest.approx(f_number, rel=1e-12)


def test_field_corrector_matches_the_validation_set_readme():
    """realoptics-r12b's README (its own y-nu trace and optiland): EFL 50, H −1.2913, H′ 12.3050,
    EP 10.2026, XP 21.6506 mm from surface 1; XPD 10.1636 mm at f/4; BFL 11.7041; the scaled
    semi-diameters 8.420 … 8.630 mm."""
    p = load_lens("field-corrector", efl_mm=50.0)
    d = paraxial_data(p, 4.0)
    for got, want in ((d.h_z, -1.2913), (d.h_prime_z, 12.3050), (d.entrance_pupil_z, 10.2026),
                      (d.exit_pupil_z, 21.6506), (d.xpd_mm, 10.1636), (d.bfl_mm, 11.7041)):
        assert got == pytest.approx(want, abs=6e-5)
    assert d.pupil_magnification == pytest.approx(0.8131, abs=6e-5)
    readme = [8.420, 6.990, None, 5.178, 5.443, 5.706, 6.301, 9.721, 9.136, 9.144, 8.630]
    for s, want in zip(p.surfaces, readme, strict=True):
        if want is not None:
            assert s.semi_diameter_mm == pytest.approx(want, abs=6e-4)
    assert p.surfaces[0].radius_mm == pytest.approx(19.8539, abs=6e-5)


@pytest.mark.parametrize("name", REAL_DESIGNS)
def test_real_designs_transcribe_optilands_samples(name):
    """Our JSON (Schott n_d to 5 decimals) against optiland's own sample with its catalogue
    glasses: EFL and pupils agree to the index rounding (≤ 2e-5 relative)."""
    from optiland.samples import objectives

    cls = {"double-gauss": objectives.DoubleGauss, "tessar": objectives.TessarLens,
           "telephoto": objectives.Telephoto, "field-corrector": objectives.LensWithFieldCorrector}[name]
    sample = cls()
    p = load_lens(name)
    d = paraxial_data(p, 4.0)
    assert scalar(sample.paraxial.f2()) == pytest.approx(d.efl_mm, rel=2e-5)
    assert scalar(sample.paraxial.EPL()) == pytest.approx(d.entrance_pupil_z, rel=2e-5, abs=2e-5 * d.efl_mm)
    assert len(sample.surfaces.surfaces) == len(p.surfaces) + 2
    for s, o in zip(p.surfaces, sample.surfaces.surfaces[1:-1], strict=True):
        assert s.is_stop == bool(o.is_stop)
        assert float(o.geometry.radius) == pytest.approx(s.radius_mm, rel=1e-12)


@pytest.mark.parametrize("name", REAL_DESIGNS)
def test_glass_indices_are_optilands_schott_d_line(name):
    """Each glass's n_d (5 decimals) equals optiland's Schott catalogue at 587.5618 nm to the
    rounding (5e-6 + 1e-6)."""
    from optiland.materials import Material

    for s in load_lens(name).surfaces:
        if s.glass:
            m = Material(s.glass, reference="schott")
            assert scalar(m.n(D_LINE_UM)) == pytest.approx(s.index_after, abs=6e-6)


@pytest.mark.parametrize("name", REAL_DESIGNS)
def test_stored_clear_apertures_follow_the_documented_rule(name):
    """Semi-diameters = 1.02 (axial f/4 — f/5.6 for the telephoto, its design aperture — + chief to
    0.7 × the R12 half-diagonal) at EFL 50, rounded up to 1e-4 design units; every element keeps a
    positive edge thickness."""
    design = load_lens(name)
    p = design.scaled_to_efl(50.0)
    n_rule = 5.6 if name == "telephoto" else 4.0
    rule = clear_semi_diameters_mm(p, f_number=n_rule, image_height_mm=0.7 * R12_HALF_DIAGONAL_MM)
    k = p.surfaces[0].thickness_mm / design.surfaces[0].thickness_mm
    for i, (s, want) in enumerate(zip(p.surfaces, rule, strict=True)):
        if not s.is_stop:
            assert want <= s.semi_diameter_mm <= want + 1e-4 * k + 1e-12, i
    z = p.vertex_z_mm
    for i, s in enumerate(p.surfaces[:-1]):
        if s.index_after > 1.0:
            a, b = s, p.surfaces[i + 1]
            h = max(a.semi_diameter_mm, b.semi_diameter_mm)
            sag = [0.0 if math.isinf(x.radius_mm) else x.radius_mm - math.copysign(math.sqrt(x.radius_mm**2 - h**2), x.radius_mm)
                   for x in (a, b)]
            assert z[i + 1] + sag[1] - (z[i] + sag[0]) > 0.0, f"element after surface {i + 1}"


def test_thin_lens_and_ideal_systems_have_their_documented_pupils():
    d = paraxial_data(thin_lens(50.0), 4.0)
    assert (d.h_z, d.h_prime_z, d.entrance_pupil_z, d.exit_pupil_z) == (0.0, 0.0, 0.0, 0.0)
    assert d.epd_mm == pytest.approx(12.5) and d.xpd_mm == pytest.approx(12.5)
    t = paraxial_data(load_lens("thick-ideal"), 4.0)
    assert t.entrance_pupil_z == pytest.approx(t.h_z, abs=1e-12)
    assert t.exit_pupil_z == pytest.approx(t.h_prime_z, abs=1e-12)
    assert t.principal_separation_mm == pytest.approx(125.0 / 12.0)
    front = paraxial_data(load_lens("ideal-stop-front"), 4.0)
    assert front.h_z - front.entrance_pupil_z == pytest.approx(15.0)
    assert front.pupil_magnification == pytest.approx(50.0 / 35.0)
    behind = paraxial_data(load_lens("ideal-stop-behind"), 4.0)
    assert behind.exit_pupil_z - behind.h_prime_z == pytest.approx(10.0)
    assert behind.pupil_magnification == pytest.approx(0.8)
    assert all(s.kind is SurfaceKind.IDEAL or s.is_stop for s in load_lens("thick-ideal").surfaces)


def test_stop_radius_gives_the_f_number_and_scaling_keeps_it():
    p = load_lens("double-gauss", efl_mm=50.0)
    r = stop_semi_diameter_mm(p, 5.6)
    d = paraxial_data(p.with_stop_semi_diameter(r))
    assert d.f_number == pytest.approx(5.6, rel=1e-12)
    big = p.scaled(2.0)
    assert stop_semi_diameter_mm(big, 5.6) == pytest.approx(2.0 * r, rel=1e-12)
    assert paraxial_data(big, 5.6).efl_mm == pytest.approx(100.0, rel=1e-12)


@pytest.mark.parametrize("name", ["field-corrector", "telephoto"])
def test_image_of_a_plane_agrees_with_a_paraxial_ray_trace(name):
    """A paraxial ray from an on-axis object point 600 mm in front of H crosses the axis at the
    image plane; the magnification is the ratio of the heights of a marginal and a field ray."""
    from plenocal.sim.optics.paraxial import partial_matrix

    p = load_lens(name, efl_mm=50.0)
    d = paraxial_data(p, 4.0)
    z_img, m = image_of_plane(p, 600.0)
    z_obj = d.h_z - 600.0
    M = partial_matrix(p, 0, len(p.surfaces) - 1)
    # Object point at height y0, ray of slope u0: at surface 1, (y0 + u0·(0 − z_obj), u0).
    for y0, u0 in ((0.0, 0.01), (1.0, 0.0), (1.0, 0.02)):
        y1, nu = M @ np.array([y0 - u0 * z_obj, u0])
        y_img = y1 + nu * (z_img - d.last_vertex_z)
        assert y_img == pytest.approx(m * y0, abs=1e-12 * 600)
    assert image_of_plane(p, math.inf)[0] == pytest.approx(d.rear_focal_z, rel=1e-12)


def test_which_bundled_lenses_open_to_the_presets_f4():
    """The axial beam at f/N against every clear aperture (the stop's own radius follows N): the
    telephoto is an f/5.6 design (its front element clips the axial beam below ~f/5.3, where
    pre-calibration measured its "f/4" whites at f/5.32), every other bundled lens opens to f/4. At
    surface 1 the marginal ray of an object at infinity is at the entrance-pupil radius, F/(2N)."""
    from plenocal.sim.optics.paraxial import axial_clipping, fastest_f_number

    F = 50.0
    for name in ("double-gauss", "tessar", "field-corrector", "thin", "thick-ideal"):
        assert axial_clipping(load_lens(name).scaled_to_efl(F), 4.0) is None, name
    tele = load_lens("telephoto").scaled_to_efl(F)
    surface, semi, needed = axial_clipping(tele, 4.0)
    assert surface == 0 and needed == pytest.approx(F / 8.0, rel=1e-9) and semi < needed
    assert 5.0 < fastest_f_number(tele) < 5.6
    assert axial_clipping(tele, 5.6) is None
