"""Real-optics camera placement and its thin-lens-equivalent truth."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from plenocal.errors import ModelError
from plenocal.model import micro_image_centres
from plenocal.model.projection import virtual_points
from plenocal.sim.optics._kernels import trace_rays
from plenocal.sim.optics.camera import real_optics_camera
from plenocal.sim.optics.lenslets import LensletDesign, LensletKind
from plenocal.sim.optics.library import load_lens
from plenocal.sim.optics.prescription import Prescription, Surface, SurfaceKind
from plenocal.sim.presets import preset


@pytest.fixture(scope="module")
def r12b():
    return preset("r12-b")


def test_validation_set_geometry_is_reproduced(r12b):
    """realoptics-r12b's README: d = 0.3360 mm from the lenslets' mean H′ gives a 0.2619 mm air
    gap behind a 0.1 mm fused-silica substrate; per-type D_i − D = +0.1, +0.5, −0.6 µm and
    d_i − d = 0.0, −0.4, +0.4 µm for f = 0.5464, 0.5805, 0.5043 mm (4-decimal rounding)."""
    thin = r12b.camera
    mla = dataclasses.replace(thin.mla, focal_lengths_mm=(0.5464, 0.5805, 0.5043))
    sensor = dataclasses.replace(thin.sensor, distance_mm=thin.D_mm + 0.3360)
    cam = real_optics_camera(thin.replace(mla=mla, sensor=sensor), load_lens("field-corrector"))
    assert cam.air_gap_mm == pytest.approx(0.2619, abs=5e-5)
    Di, di = cam.per_type_distances_mm()
    np.testing.assert_allclose(np.array(Di) - cam.thin.D_mm, [0.1e-3, 0.5e-3, -0.6e-3], atol=0.1e-3)
    np.testing.assert_allclose(np.array(di) - cam.thin.d_mm, [0.0, -0.4e-3, 0.4e-3], atol=0.1e-3)
    assert np.mean(Di) == pytest.approx(cam.thin.D_mm, abs=1e-12)
    assert np.mean(di) == pytest.approx(cam.thin.d_mm, abs=1e-12)
    # The preset's F is 50.047 mm: Δ scales with it (13.5963 mm at EFL 50).
    assert cam.separation_mm * 50.0 / cam.thin.main_lens.focal_length_mm == pytest.approx(13.5963, abs=1e-4)


@pytest.mark.parametrize("name", ["double-gauss", "field-corrector", "thick-ideal", "telephoto"])
def test_object_points_image_where_the_thin_equivalent_puts_them(r12b, name):
    """Poses from H are exact paraxially: near-axis rays from a point 600 mm in front of H meet
    at the thin-equivalent's virtual point moved by −Δ (image distances from H′)."""
    cam = real_optics_camera(r12b.camera, load_lens(name))
    table = cam.lens_table(16.0)
    point = np.array([0.4, -0.3, 600.0])
    # A narrow bundle around the ray through the entrance-pupil centre.
    ep = cam.z_cam(cam.paraxial(16.0).entrance_pupil_z)
    aim = np.array([[dx, dy, ep] for dx in (-0.02, 0.0, 0.02) for dy in (-0.02, 0.0, 0.02)])
    d_cam = aim - point
    d_cam /= np.linalg.norm(d_cam, axis=1)[:, None]
    start = np.tile(point, (len(aim), 1))
    to_lens = np.array([1.0, 1.0, -1.0])
    ok, p, d = trace_rays(table, (start * to_lens) + np.array([0, 0, cam.h_z]), d_cam * to_lens, True)
    assert ok.all()
    # Least-squares meeting point of the rays (lens coordinates), back to the camera frame.
    A = np.zeros((3, 3))
    b = np.zeros(3)
    for pi, di in zip(p, d, strict=True):
        P = np.eye(3) - np.outer(di, di)
        A += P
        b += P @ pi
    meet = np.linalg.solve(A, b)
    meet_cam = np.array([meet[0], meet[1], cam.h_z - meet[2]])
    want = virtual_points(cam.thin, point[None])[0] - np.array([0.0, 0.0, cam.separation_mm])
    np.testing.assert_allclose(meet_cam, want, atol=2e-4)


def test_thin_design_micro_image_centres_are_the_models(r12b):
    """With the thin main lens the exit pupil is O: micro-image centres = the model's MICs
    (exactly with thin lenslets, to the sag offsets' 0.02 px with real caps)."""
    k, l = r12b.camera.mla.lattice.all_indices()
    model = micro_image_centres(r12b.camera, k, l)
    thin = real_optics_camera(r12b.camera, load_lens("thin"), lenslets=LensletDesign(LensletKind.THIN))
    np.testing.assert_allclose(thin.micro_image_centres_px(), model, atol=1e-9)
    real = real_optics_camera(r12b.camera, load_lens("thin"))
    np.testing.assert_allclose(real.micro_image_centres_px(), model, atol=0.02)
    # The double-Gauss's exit pupil lies 7.3 mm in front of H′ (D_xp = D + 7.3 mm): about the
    # principal point, the micro-image lattice is scaled by (1 + d/D_xp)/(1 + d/D), not 1 — 2 px
    # smaller at the sensor's corners.
    dg = real_optics_camera(r12b.camera, load_lens("double-gauss"))
    par = dg.paraxial()
    D, d = dg.thin.D_mm, dg.thin.d_mm
    D_xp = D + (par.h_prime_z - par.exit_pupil_z)
    pp = np.array(dg.thin.sensor.principal_point_px)
    scaled = pp + (model - pp) * (1 + d / D_xp) / (1 + d / D)
    np.testing.assert_allclose(dg.micro_image_centres_px(), scaled, atol=0.02)
    assert np.hypot(*(dg.micro_image_centres_px() - model).T).max() > 1.5


def test_placements_that_cannot_be_built_are_refused(r12b):
    with pytest.raises(ModelError, match="too thick"):
        real_optics_camera(r12b.camera, load_lens("thin"), lenslets=LensletDesign(substrate_mm=0.6))
    far_stop = Prescription("far", (
        Surface(thickness_mm=60.0, kind=SurfaceKind.IDEAL, focal_length_mm=50.0),
        Surface(thickness_mm=1.0, is_stop=True),
    ))
    with pytest.raises(ModelError, match="reaches the lenslet array"):
        real_optics_camera(r12b.camera, far_stop)


def test_truth_is_plain_json_and_consistent(r12b):
    import json

    cam = real_optics_camera(r12b.camera, load_lens("field-corrector"))
    truth = json.loads(json.dumps(cam.truth((4.0, 5.66, 8.0)), allow_nan=False))
    assert sorted(truth["paraxial_by_f_number"]) == ["4", "5.66", "8"]
    par = cam.paraxial()
    assert truth["exit_pupil_from_h_prime_mm"] == pytest.approx(par.exit_pupil_z - par.h_prime_z)
    assert truth["placement"]["h_prime_z_cam_mm"] == pytest.approx(-cam.separation_mm)
    eq = truth["thin_equivalent"]
    assert eq["F_mm"] == r12b.camera.main_lens.focal_length_mm and eq["D_mm"] == r12b.camera.D_mm
    assert np.mean(eq["d_per_type_mm"]) == pytest.approx(r12b.camera.d_mm, abs=1e-12)
    # The sensor is d behind the lenslets' mean H′, which is D + Δ behind H (+ the mean H–H′ gap).
    gap = np.mean(truth["lenslet_principal_gap_mm"])
    assert truth["placement"]["sensor_z_cam_mm"] == pytest.approx(-(eq["D_mm"] + eq["d_mm"] + cam.separation_mm + gap))
