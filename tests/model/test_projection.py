"""Projection model: round trips, consistency, configurations and lattices, bad input."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from plenocal.errors import ModelError
from plenocal.model import (
    Configuration,
    Distortion,
    Lattice,
    LatticeKind,
    MainLens,
    MicroLensArray,
    PlenopticCamera,
    Sensor,
    TypeLayout,
    back_project_bap,
    micro_image_centres,
    micro_lens_centres,
    project_bap,
)
from plenocal.model.camera import consistent_mia
from plenocal.model.projection import virtual_points

CONFIGS = {
    # configuration: (D, d, focal lengths)
    Configuration.GALILEAN: (56.7, 0.325, (0.578, 0.505, 0.552)),
    Configuration.KEPLERIAN: (60.0, 0.9, (0.6, 0.7, 0.75)),
    Configuration.UNFOCUSED: (50.0, 0.047, (0.047,)),
}


def make_camera(configuration: Configuration, kind: LatticeKind, *, tilt=(4e-4, -6e-4, 3e-5), distortion=True):
    D, d, focal = CONFIGS[configuration]
    n = len(focal)
    lattice = Lattice(kind, 40, 31)
    pitch = 0.1275 if configuration is not Configuration.UNFOCUSED else 0.02
    cx = 20 * pitch
    mla = MicroLensArray(
        lattice=lattice,
        pitch_mm=(pitch, pitch),
        rotation_xyz_rad=tilt,
        translation_mm=(-cx, -0.8 * cx, -D),
        focal_lengths_mm=focal,
        types=TypeLayout.raytrix(n),
    )
    dist = Distortion(2.4e-4, -3e-6, 1e-8, -1.4e-4, -6e-5) if distortion else Distortion()
    sensor = Sensor(0.0055, 1000, 800, (510.0, 395.0), D + d)
    return PlenopticCamera(MainLens(50.0, 4.0), dist, mla, sensor, configuration=configuration)


@pytest.mark.parametrize("configuration", list(CONFIGS))
@pytest.mark.parametrize("kind", list(LatticeKind))
def test_project_then_back_project_recovers_points(configuration, kind):
    cam = make_camera(configuration, kind)
    rng = np.random.default_rng(1)
    n = 500
    pts = np.stack([rng.uniform(-20, 20, n), rng.uniform(-15, 15, n), rng.uniform(150, 900, n)], axis=1)
    k = rng.integers(0, 40, n)
    l = rng.integers(0, 31, n)
    feat = project_bap(cam, pts, k, l)
    assert feat.shape == (n, 3)
    back = back_project_bap(cam, feat, k, l)
    if configuration is Configuration.UNFOCUSED:
        # f = d: ρ = A/2·(d/|a|)-ish depends only weakly on depth; check the ray instead.
        ray_err = np.cross(back / np.linalg.norm(back, axis=1)[:, None], pts / np.linalg.norm(pts, axis=1)[:, None])
        assert np.abs(ray_err).max() < 1e-6
    np.testing.assert_allclose(back, pts, rtol=1e-7, atol=1e-7)


def test_uv_does_not_depend_on_focal_lengths_but_rho_does():
    cam = make_camera(Configuration.GALILEAN, LatticeKind.HEX_ROWS)
    other = cam.replace(mla=MicroLensArray(**{**cam.mla.__dict__, "focal_lengths_mm": (0.6, 0.6, 0.6)}))
    pts = np.array([[3.0, -2.0, 300.0]] * 3)
    a = project_bap(cam, pts, [5, 6, 7], [9, 9, 9])
    b = project_bap(other, pts, [5, 6, 7], [9, 9, 9])
    np.testing.assert_allclose(a[:, :2], b[:, :2], rtol=0, atol=0)
    assert np.all(np.abs(a[:, 2] - b[:, 2]) > 1e-3)


def test_point_on_chief_ray_of_micro_lens_centre():
    """(u, v) lies on the line through C(k, l) and the distorted virtual point (eq:bapprojm)."""
    cam = make_camera(Configuration.GALILEAN, LatticeKind.HEX_ROWS)
    pts = np.array([[5.0, 2.0, 250.0], [-8.0, 4.0, 600.0]])
    k, l = np.array([10, 30]), np.array([12, 20])
    feat = project_bap(cam, pts, k, l)
    s = cam.sensor.pixel_size_mm
    u0, v0 = cam.sensor.principal_point_px
    P = np.stack([(u0 - feat[:, 0]) * s, (v0 - feat[:, 1]) * s, np.full(2, -cam.sensor.distance_mm)], axis=1)
    C = micro_lens_centres(cam, k, l)
    pu = virtual_points(cam, pts)
    cross = np.cross(P - C, pu - C)
    assert np.abs(cross).max() < 1e-12


def test_mic_is_central_projection_and_consistent_grid():
    cam = make_camera(Configuration.GALILEAN, LatticeKind.HEX_ROWS, tilt=(0.0, 0.0, 2e-3))
    k, l = cam.mla.lattice.all_indices()
    mic = micro_image_centres(cam, k, l)
    np.testing.assert_allclose(mic, cam.grid.centres(k, l), atol=1e-9)
    # MIC pitch = Δ_C·(D+d)/D/s
    assert cam.grid.pitch_px[0] == pytest.approx(0.1275 / cam.lambda_ / 0.0055, rel=1e-12)
    assert cam.micro_lens_aperture_mm == pytest.approx(0.1275, rel=1e-12)


@pytest.mark.parametrize("e_mm", [9.35, -7.3])
def test_mic_is_the_central_projection_from_the_exit_pupil(e_mm):
    """Micro-image centres are the lens centres projected from the exit-pupil centre (0, 0, −e)
    onto the sensor: the grid pitch is Δ_C·(D + d − e)/(D − e)/s and λ = (D − e)/(D + d − e);
    the BAP features (chief rays) do not depend on e."""
    cam0 = make_camera(Configuration.GALILEAN, LatticeKind.HEX_ROWS, tilt=(5e-4, -3e-4, 2e-3))
    cam = cam0.replace(main_lens=MainLens(50.0, 4.0, e_mm), mia=None)
    k, l = cam.mla.lattice.all_indices()
    C = micro_lens_centres(cam, k, l)
    pupil = np.array([0.0, 0.0, -e_mm])
    t = (-cam.sensor.distance_mm - pupil[2]) / (C[:, 2] - pupil[2])
    X = pupil + t[:, None] * (C - pupil)
    u0, v0 = cam.principal_point_px
    expected = np.stack([u0 - X[:, 0] / 0.0055, v0 - X[:, 1] / 0.0055], axis=1)
    np.testing.assert_allclose(micro_image_centres(cam, k, l), expected, atol=1e-9)
    assert cam.lambda_ == pytest.approx((cam.D_mm - e_mm) / (cam.sensor.distance_mm - e_mm), rel=1e-15)
    flat = cam.replace(mla=dataclasses.replace(cam.mla, rotation_xyz_rad=(0.0, 0.0, 2e-3)), mia=None)
    assert flat.grid.pitch_px[0] == pytest.approx(0.1275 / flat.lambda_ / 0.0055, rel=1e-12)
    pts = np.array([[1.0, 2.0, 300.0], [-3.0, 1.0, 600.0]])
    with_e, without = project_bap(cam, pts, [20, 21], [15, 15]), project_bap(cam0, pts, [20, 21], [15, 15])
    np.testing.assert_array_equal(with_e[:, :2], without[:, :2])
    # ρ through A = λ·Δc: the same micro-lens aperture up to the tilted grid's fit (1e-5 relative).
    np.testing.assert_allclose(with_e[:, 2], without[:, 2], rtol=2e-5)


def test_depth_distortion_bends_the_virtual_space_and_back_projects():
    """Z1·r′² + Z2·r′⁴ moves virtual points along the axis only (a curved field: off axis the image
    of a plane comes nearer the lens), and back-projection inverts it."""
    cam0 = make_camera(Configuration.GALILEAN, LatticeKind.HEX_ROWS)
    dist = dataclasses.replace(cam0.distortion, z1=0.0034, z2=-2e-6)
    cam = cam0.replace(distortion=dist)
    pts = np.array([[0.0, 0.0, 300.0], [40.0, -25.0, 320.0]])
    v0, v1 = virtual_points(cam0, pts), virtual_points(cam, pts)
    np.testing.assert_array_equal(v1[:, :2], v0[:, :2])
    r2 = (pts[:, 0] ** 2 + pts[:, 1] ** 2) * (cam.main_lens.focal_length_mm / (pts[:, 2] - 50.0)) ** 2
    np.testing.assert_allclose(v1[:, 2] - v0[:, 2], 0.0034 * r2 - 2e-6 * r2 * r2, rtol=1e-12, atol=1e-15)
    assert v1[1, 2] > v0[1, 2]  # z′ < 0 behind the lens: nearer the lens
    k, l = np.array([20, 21]), np.array([15, 16])
    feats = project_bap(cam, pts, k, l)
    np.testing.assert_allclose(back_project_bap(cam, feats, k, l), pts, atol=1e-8)


def test_exit_pupil_magnification_and_bad_values():
    """m_p = 1 − e/F (conjugate pupils of an aberration-free lens), exit-pupil radius (F − e)/(2N);
    e ≥ F (no real pupil) and a pupil behind the MLA are refused with the field named."""
    ml = MainLens(50.0, 4.0, 9.3456)
    assert ml.pupil_magnification == pytest.approx(0.81309, abs=1e-5)  # the Cooke-type lens of the real-optics set
    assert ml.exit_pupil_radius_mm == pytest.approx(10.1636 / 2, rel=1e-4)
    with pytest.raises(ModelError, match=r"main_lens\.exit_pupil_mm must be finite and < the focal length"):
        MainLens(50.0, 4.0, 50.0)
    cam = make_camera(Configuration.GALILEAN, LatticeKind.HEX_ROWS)
    with pytest.raises(ModelError, match="exit pupil must lie in front of the MLA"):
        cam.replace(main_lens=MainLens(100.0, 4.0, cam.D_mm + 1.0), mia=None)


def test_tilted_mla_grid_fit_is_close():
    cam = make_camera(Configuration.GALILEAN, LatticeKind.HEX_ROWS, tilt=(8e-4, -6e-4, 3e-5))
    k, l = cam.mla.lattice.all_indices()
    err = micro_image_centres(cam, k, l) - consistent_mia(cam).centres(k, l)
    assert np.abs(err).max() < 0.05  # a tilt of 1e-3 rad bends the projected grid by < 0.05 px here


def test_mla_frame_origin_is_corner_at_most_negative_x_y():
    cam = make_camera(Configuration.GALILEAN, LatticeKind.HEX_ROWS, tilt=(0, 0, 0))
    k, l = cam.mla.lattice.all_indices()
    C = micro_lens_centres(cam, k, l)
    t = np.array(cam.mla.translation_mm)
    assert C[:, 0].min() == pytest.approx(t[0])
    assert C[:, 1].min() == pytest.approx(t[1])
    # Micro-image (k, l) grows with u: its lens moves towards −x.
    assert C[1, 0] < C[0, 0]


def test_galilean_rho_is_negative_behind_the_mla():
    cam = make_camera(Configuration.GALILEAN, LatticeKind.HEX_ROWS)
    rho = project_bap(cam, np.array([[0.0, 0.0, 250.0]]), [20], [15])[0, 2]
    assert rho < 0


def test_pinhole_micro_lenses_have_no_rho():
    cam = make_camera(Configuration.GALILEAN, LatticeKind.HEX_ROWS)
    mla = MicroLensArray(cam.mla.lattice, cam.mla.pitch_mm, cam.mla.rotation_xyz_rad, cam.mla.translation_mm, (), TypeLayout(0))
    pin = cam.replace(mla=mla)
    out = project_bap(pin, np.array([[1.0, 2.0, 300.0]]), [3], [4])
    assert np.isnan(out[0, 2])
    np.testing.assert_allclose(out[0, :2], project_bap(cam, np.array([[1.0, 2.0, 300.0]]), [3], [4])[0, :2])


def test_distortion_inverse():
    dist = Distortion(2.4e-4, -3e-6, 1e-8, -1.4e-4, -6e-5)
    x = np.linspace(-12, 12, 25)
    y = np.linspace(9, -9, 25)
    xu, yu = dist.apply(x, y)
    xi, yi = dist.invert(xu, yu)
    np.testing.assert_allclose(xi, x, atol=1e-10)
    np.testing.assert_allclose(yi, y, atol=1e-10)


def test_bad_camera_parts_name_the_field():
    with pytest.raises(ModelError, match=r"main_lens.focal_length_mm must be > 0, got -50"):
        MainLens(-50.0, 4.0)
    with pytest.raises(ModelError, match=r"sensor.pixel_size_mm must be > 0, got -0.0055"):
        Sensor(-0.0055, 10, 10, (5, 5), 50)
    with pytest.raises(ModelError, match="3 values but the type layout has 2 types"):
        MicroLensArray(Lattice(LatticeKind.HEX_ROWS, 3, 3), (0.1, 0.1), focal_lengths_mm=(1, 1, 1), types=TypeLayout(2))
    cam = make_camera(Configuration.GALILEAN, LatticeKind.HEX_ROWS)
    with pytest.raises(ModelError, match="sensor must lie behind the MLA"):
        cam.replace(sensor=Sensor(0.0055, 1000, 800, (500, 400), cam.D_mm - 0.1))
