"""The ray tracer against the model (paper eq:blurradius, eq:miradiusfnumber, MIC projection).

The tracer never calls the model's projections; these tests compare what it renders with them.
Tolerances come from the Monte Carlo noise at the ray counts used (measured: white centroids
≈ 0.005 px RMS, point-light centroids ≈ 0.01 px, radii ≈ 0.03 px).
"""

from __future__ import annotations

import dataclasses

import numba
import numpy as np
import pytest

from plenocal.errors import ModelError
from plenocal.model import micro_image_centres, micro_lens_centres, project_bap
from plenocal.model.camera import (
    Configuration,
    Distortion,
    MainLens,
    MicroLensArray,
    PlenopticCamera,
    Sensor,
)
from plenocal.model.geometry import Pose
from plenocal.model.lattice import Lattice, LatticeKind, TypeLayout
from plenocal.model.projection import virtual_points
from plenocal.model.target import Checkerboard
from plenocal.model.white import radius_law
from plenocal.sim.presets import preset
from plenocal.sim.scene import CheckerboardPlate, DiscLight, Scene, WhiteDiffuser
from plenocal.sim.tracer import build_optics, render, undistort_newton


def _moments(img: np.ndarray, centre: np.ndarray, radius: float):
    """Zeroth moment, centroid (u, v) and mean axis variance inside a disc window."""
    u0, v0 = int(np.floor(centre[0] - radius)), int(np.floor(centre[1] - radius))
    u1, v1 = int(np.ceil(centre[0] + radius)) + 1, int(np.ceil(centre[1] + radius)) + 1
    vv, uu = np.mgrid[v0:v1, u0:u1]
    w = img[v0:v1, u0:u1].astype(np.float64)
    w = np.where((uu - centre[0]) ** 2 + (vv - centre[1]) ** 2 <= radius**2, w, 0.0)
    m0 = w.sum()
    cu, cv = (w * uu).sum() / m0, (w * vv).sum() / m0
    var = 0.5 * ((w * (uu - cu) ** 2).sum() + (w * (vv - cv) ** 2).sum()) / m0
    return m0, np.array([cu, cv]), var


def _interior_lenses(camera: PlenopticCamera, roi, margin: float):
    k, l = camera.mla.lattice.all_indices()
    c = micro_image_centres(camera, k, l)
    i0, j0, i1, j1 = roi
    keep = (c[:, 0] > i0 + margin) & (c[:, 0] < i1 - 1 - margin)
    keep &= (c[:, 1] > j0 + margin) & (c[:, 1] < j1 - 1 - margin)
    return k[keep], l[keep], c[keep]


def _white_centroid_rms(camera: PlenopticCamera, f_number: float, roi, rays: int) -> float:
    img = render(camera, WhiteDiffuser(), f_number=f_number, rays=rays, roi=roi, seed=3)
    half = camera.grid.diameter_px / 2.0
    _, _, c = _interior_lenses(camera, roi, half + 1)
    assert len(c) >= 15
    err = np.array([_moments(img, ci, half)[1] - ci for ci in c])
    return float(np.sqrt(np.mean(np.sum(err**2, axis=1))))


def test_white_micro_image_centroids_on_model_mic(r12a_small):
    """Intensity centroids of white micro-images lie on the model's MICs (projection of O)."""
    rms = _white_centroid_rms(r12a_small.camera, 8.0, (300, 250, 560, 480), rays=1024)
    assert rms <= 0.02


@pytest.mark.parametrize("roi", [(160, 20, 400, 260), (3800, 2640, 4040, 2880)])
def test_white_centroids_at_full_scale_sensor_corners(roi):
    """Far off-axis (full-scale R12-B, whose MLA is off-centre, with its strong distortion): the
    white micro-images in opposite corners of the micro-image array are still on the MICs."""
    camera = preset("r12-b").camera
    assert _white_centroid_rms(camera, 11.31, roi, rays=1024) <= 0.02


def _with_exit_pupil(camera: PlenopticCamera, e_mm: float) -> PlenopticCamera:
    """The camera with its exit pupil e behind H′ (and the micro-image grid that goes with it)."""
    ml = camera.main_lens
    return camera.replace(main_lens=MainLens(ml.focal_length_mm, ml.f_number, e_mm), mia=None)


@pytest.mark.parametrize("e_mm", [9.35, -7.3])
def test_white_centroids_follow_the_exit_pupil(e_mm):
    """With the aperture stop off the lens plane (an aberration-free lens whose exit pupil is e
    behind H′, as in the real-optics sets: +9.35 and −7.3 mm) the white micro-images are centred
    on the exit pupil's projection through the lens centres, not on the lens plane's: in the far
    corner of a full-scale R12-B the two differ by ~3 px."""
    camera = _with_exit_pupil(preset("r12-b").camera, e_mm)
    roi = (3800, 2640, 4040, 2880)
    assert _white_centroid_rms(camera, 11.31, roi, rays=1024) <= 0.02
    thin = camera.replace(main_lens=MainLens(camera.main_lens.focal_length_mm, camera.main_lens.f_number))
    img = render(camera, WhiteDiffuser(), f_number=11.31, rays=256, roi=roi, seed=3)
    k, l, c = _interior_lenses(camera, roi, camera.grid.diameter_px / 2.0 + 1)
    c_thin = micro_image_centres(thin, k, l)
    err_thin = np.array([_moments(img, ci, camera.grid.diameter_px / 2.0)[1] for ci in c]) - c_thin
    assert np.sqrt(np.mean(np.sum(err_thin**2, axis=1))) > 1.0


def _ortho_camera() -> PlenopticCamera:
    """A single-focus Galilean camera with an orthogonal, tilted MLA and distortion."""
    lattice = Lattice(LatticeKind.ORTHOGONAL, 40, 30)
    mla = MicroLensArray(
        lattice=lattice, pitch_mm=(0.1, 0.1), rotation_xyz_rad=(2e-5, -1e-5, 0.02),
        translation_mm=(-2.0, -1.5, -40.0), focal_lengths_mm=(0.45,), types=TypeLayout(1),
    )
    return PlenopticCamera(
        MainLens(35.0, 5.6), Distortion(q1=2e-4, p2=3e-5), mla,
        Sensor(0.005, 420, 320, (211.3, 157.8), 40.3), None, Configuration.GALILEAN, 300.0,
    )


@pytest.mark.parametrize("case", ["upc-s", "kep-3", "orthogonal"])
def test_white_centroids_other_configurations(case):
    """Unfocused (f = d), Keplerian (f < d) and an orthogonal lattice agree with the MIC model."""
    if case == "orthogonal":
        camera, n = _ortho_camera(), 8.0
        roi = (60, 60, 360, 260)
    else:
        p = preset(case, small=True)
        camera, n = p.camera, p.plan.white_f_numbers[-1]
        roi = (350, 250, 650, 550) if case == "upc-s" else (300, 250, 560, 480)
    assert _white_centroid_rms(camera, n, roi, rays=1024) <= 0.02


@pytest.mark.parametrize(
    ("name", "f_numbers", "e_mm"),
    [("r12-a", None, 0.0), ("kep-3", None, 0.0), ("upc-s", (4.0, 5.6), 0.0),  # upc-s overlaps at N = 2
     ("r12-a", None, 9.35), ("r12-a", None, -7.3)],
)
def test_micro_image_radius_law(name, f_numbers, e_mm):
    """White micro-image radii follow R_i(1/N) = m/N + q_i (eq:miradiusfnumber) to <= 2 %.

    A white micro-image is the convolution of two uniform discs: the micro-lens aperture seen
    through the lens (radius ρ1) and the main aperture projected from the MLA onto the sensor
    (radius ρ2 = d·(F − e)/(2(D − e)N), the exit pupil; d·F/(2DN) in the lens plane), normalised so
    that its integral is πρ2²; its support radius is
    ρ1 + ρ2. With the pixel box (variance 1/12): ρ2 = √(M0/π), ρ1² = 4(σ² − 1/12) − ρ2².
    """
    small = preset(name, small=True)
    camera = _with_exit_pupil(small.camera, e_mm) if e_mm else small.camera
    m, q = radius_law(camera)
    s = camera.sensor.pixel_size_mm
    roi = (400, 300, 600, 500) if name == "upc-s" else (330, 280, 530, 460)
    half = camera.grid.diameter_px / 2.0
    k, l, c = _interior_lenses(camera, roi, half + 1)
    types = camera.mla.types.type_of(k, l)
    for n in f_numbers or small.plan.white_f_numbers:
        img = render(camera, WhiteDiffuser(), f_number=n, rays=128, roi=roi, seed=1)
        moments = [_moments(img, ci, half) for ci in c]
        m0 = np.array([mo[0] for mo in moments])
        var = np.array([mo[2] for mo in moments])
        rho2 = np.sqrt(m0 / np.pi)
        rho1 = np.sqrt(np.clip(4.0 * (var - 1.0 / 12.0) - rho2**2, 0.0, None))
        # The main aperture's share: the exit pupil, radius (F − e)/(2N), seen from D − e.
        F, e = camera.main_lens.focal_length_mm, camera.main_lens.exit_pupil_mm
        expected_rho2 = camera.d_mm * (F - e) / (2 * (camera.D_mm - e) * n) / s
        assert np.median(rho2) == pytest.approx(expected_rho2, rel=0.01)
        for t in range(camera.n_types):
            measured = np.median((rho1 + rho2)[types == t])
            law = abs(m / n + q[t]) / s
            assert measured == pytest.approx(law, rel=0.02), (n, t, measured, law)


def _point_light_errors(camera: PlenopticCamera, centre: np.ndarray, r_src: float = 0.3):
    """Centroid errors (px) and radius errors (px) of a point light's blur discs in the fully lit
    micro-images, against the model's (u, v, ρ)."""
    scene = Scene((DiscLight(tuple(centre), r_src, 1.0),), background=0.0)
    # Fully lit lenses: inside the cone from the virtual point through the main aperture.
    pu = virtual_points(camera, centre[None])[0]
    k, l = camera.mla.lattice.all_indices()
    C = micro_lens_centres(camera, k, l)
    scale = (C[:, 2] - pu[2]) / (0.0 - pu[2])
    cone_r = camera.main_lens.aperture_mm / 2.0 * np.abs(scale)
    axis = pu[:2] * (1.0 - scale[:, None])
    r_lens = 0.25 * sum(camera.mla.pitch_mm)
    lit = np.hypot(*(C[:, :2] - axis).T) + r_lens <= 0.9 * cone_r
    feats = project_bap(camera, np.repeat(centre[None], lit.sum(), 0), k[lit], l[lit])
    assert len(feats) >= 8
    # Geometric image radius of the source (thin main lens, then through the micro-lens centre).
    F = camera.main_lens.focal_length_mm
    a = np.abs(pu[2] + camera.D_mm)
    r_img = r_src * F / (centre[2] - F) * camera.d_mm / a / camera.sensor.pixel_size_mm
    errs, radii = [], []
    for u, v, rho in feats:
        w = abs(rho) + 2.5
        roi = (int(u - w), int(v - w), int(u + w) + 2, int(v + w) + 2)
        img = render(camera, scene, rays=4096, roi=roi, seed=7)
        _, cen, var = _moments(img, np.array([u, v]), w)
        errs.append(cen - (u, v))
        radii.append(np.sqrt(4.0 * (var - 1.0 / 12.0) - r_img**2) - abs(rho))
    return np.array(errs), np.array(radii)


def test_point_light_blur_discs_match_bap_features(r12a_small):
    """The image of a point light through each fully lit micro-lens is centred on the model's
    (u, v) and its blur-disc radius is the model's |ρ| (eq:blurradius, eq:completemodel)."""
    errs, radii = _point_light_errors(r12a_small.camera, np.array([1.5, -0.8, 300.0]))
    assert np.sqrt(np.mean(np.sum(errs**2, axis=1))) <= 0.02
    assert np.max(np.abs(radii)) <= 0.1


def test_blur_discs_stay_centred_on_the_chief_ray_under_strong_distortion(r12a_small):
    """With distortion, the blur disc is the straight cone from the distorted virtual point
    through the micro-lens, as the model has it (the tracer undistorts whole image-space rays).

    Distortion 20–70x R12-A's, at a point whose virtual image is ~1 mm off-axis: the local
    Jacobian of eq:distortion differs from the identity by ~6 %, so disc centroids ~4 px from the
    chief ray would move by ~0.2 px if the tracer bent rays at the virtual point (as it did)."""
    camera = r12a_small.camera.replace(distortion=Distortion(5e-3, 0.0, 0.0, 1e-2, -4e-3))
    errs, radii = _point_light_errors(camera, np.array([5.0, -3.0, 300.0]))
    assert np.sqrt(np.mean(np.sum(errs**2, axis=1))) <= 0.02
    assert np.max(np.abs(radii)) <= 0.1


def _checker_scene():
    board = Checkerboard(9, 5, 2.5, 1.0)
    pose = Pose.from_rotvec([0.25, -0.2, 0.05], [-10.0, -5.0, 250.0])
    return board, pose, Scene((CheckerboardPlate(board, pose),), background=0.3)


def test_same_seed_same_bytes_for_any_thread_count(r12a_small):
    _, _, scene = _checker_scene()
    roi = (200, 200, 600, 330)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = render(r12a_small.camera, scene, rays=16, seed=11, image_id=4, roi=roi)
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        two = render(r12a_small.camera, scene, rays=16, seed=11, image_id=4, roi=roi, band_rows=7)
    finally:
        numba.set_num_threads(before)
    assert one.tobytes() == two.tobytes()
    assert one[200:330, 200:600].std() > 0.05  # a real image, not zeros
    other = render(r12a_small.camera, scene, rays=16, seed=12, image_id=4, roi=roi)
    assert other.tobytes() != one.tobytes()


def test_roi_equals_the_same_window_of_a_full_render(r12a_small):
    _, _, scene = _checker_scene()
    full = render(r12a_small.camera, scene, rays=4, seed=2)
    part = render(r12a_small.camera, scene, rays=4, seed=2, roi=(100, 50, 180, 90))
    np.testing.assert_array_equal(part[50:90, 100:180], full[50:90, 100:180])


def test_fused_checkerboard_path_equals_generic_path(r12a_small):
    """The single-checkerboard fast path and the generic plate loop shade identically."""
    board, pose, scene = _checker_scene()
    # An extra plate behind the camera is never hit but forces the generic path.
    generic = Scene((CheckerboardPlate(board, pose), DiscLight((0.0, 0.0, -500.0), 1.0)), 0.3)
    roi = (300, 200, 500, 300)
    a = render(r12a_small.camera, scene, rays=8, roi=roi)
    b = render(r12a_small.camera, generic, rays=8, roi=roi)
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_checkerboard_image_is_upright_and_reaches_expected_levels(r12a_small):
    """Node 0 of a board facing the camera is at the top-left; the top-left square is black."""
    board = Checkerboard(4, 3, 3.0, 2.0)
    pose = Pose(np.eye(3), [-4.5, -3.0, 400.0])
    scene = Scene((CheckerboardPlate(board, pose, black=0.0, white=1.0),), background=0.5)
    camera = r12a_small.camera
    img = render(camera, WhiteDiffuser(), rays=8, f_number=8.0)
    lit = img > 0.999 * img.max()
    img = render(camera, scene, rays=8, f_number=8.0)
    # Ratio to the white image where fully lit: 0 (black), 1 (white) or 0.5 (background).
    levels = np.unique(np.round(img[lit] * 4) / 4)
    assert set(levels) <= {0.0, 0.25, 0.5, 0.75, 1.0}
    # Model: the top-left square's centre (−1.5, −1.5) images left of and above the board centre.
    pts = pose.apply(np.array([[-1.5, -1.5, 0.0], [4.5, 3.0, 0.0]]))
    uv = project_bap(camera, pts, [24, 24], [22, 22])[:, :2]
    assert uv[0, 0] < uv[1, 0] and uv[0, 1] < uv[1, 1]


def test_newton_undistortion_inverts_the_model_distortion():
    dist = Distortion(2.4657e-4, -2.998e-6, 1.0628e-8, -1.4585e-4, -6.34e-5)
    rng = np.random.default_rng(0)
    for x, y in rng.uniform(-12, 12, (20, 2)):
        xu, yu = dist.apply(np.array(x), np.array(y))
        got = undistort_newton(float(xu), float(yu), dist.q1, dist.q2, dist.q3, dist.p1, dist.p2)
        assert got[0] == pytest.approx(x, abs=1e-10) and got[1] == pytest.approx(y, abs=1e-10)


def test_pinhole_micro_lenses_are_rejected(r12a_small):
    camera = r12a_small.camera
    mla = dataclasses.replace(camera.mla, focal_lengths_mm=(), types=TypeLayout(0))
    with pytest.raises(ModelError, match="I >= 1"):
        build_optics(camera.replace(mla=mla))


def test_rgb_texture_plate_scales_the_white_image(r12a_small):
    """A uniformly coloured texture filling the view gives (r, g, b) × the white image."""
    from plenocal.sim.scene import TexturePlate

    camera = r12a_small.camera
    texture = np.ones((4, 6, 3), dtype=np.float32) * np.array([0.2, 0.4, 0.8], dtype=np.float32)
    plate = TexturePlate(texture, Pose(np.eye(3), [-300.0, -200.0, 500.0]), 600.0, 400.0)
    roi = (400, 300, 600, 450)
    rgb = render(camera, Scene((plate,), background=0.0), rays=16, roi=roi, seed=9)
    white = render(camera, WhiteDiffuser(), rays=16, roi=roi, seed=9)
    assert rgb.shape == (800, 1000, 3)
    lit = white > 0.2
    for c, level in enumerate((0.2, 0.4, 0.8)):
        np.testing.assert_allclose(rgb[..., c][lit], level * white[lit], atol=0.02)
        assert rgb[..., c][lit].sum() / white[lit].sum() == pytest.approx(level, rel=1e-3)


@pytest.mark.slow
def test_full_scale_r12a_frame_is_thread_count_independent():
    """Full-scale R12-A checkerboard frame, 1 vs 2 threads: byte-identical (benchmarks time it)."""
    camera = preset("r12-a").camera
    board = Checkerboard(9, 5, 10.0, 5.0)
    scene = Scene((CheckerboardPlate(board, Pose.from_rotvec([0.2, 0.1, 0.0], [-40, -20, 250])),), 0.3)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = render(camera, scene, rays=30, seed=1)
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        two = render(camera, scene, rays=30, seed=1)
    finally:
        numba.set_num_threads(before)
    assert one.tobytes() == two.tobytes()


def test_focus_scale_puts_the_conjugate_on_the_board_plane():
    """The tracer's linearisation centre t·X': the thin-lens conjugate F·p'/(z' + F) of
    p' = (Dist⁻¹(t·x, t·y), t·z) lies on the board plane n·X = h."""
    from plenocal.sim.tracer import focus_scale

    dist = Distortion(2.4657e-4, -2.998e-6, 1.0628e-8, -1.4585e-4, -6.34e-5)
    F = 50.0
    rng = np.random.default_rng(4)
    n = np.array([0.2, -0.1, 1.0])
    n /= np.linalg.norm(n)
    for x, y, depth in zip(rng.uniform(-10, 10, 10), rng.uniform(-8, 8, 10), rng.uniform(300, 700, 10), strict=True):
        h = float(n @ np.array([x * depth / F, y * depth / F, depth]))
        z = -60.0
        t = focus_scale(x, y, z, F, n, h, dist.q1, dist.q2, dist.q3, dist.p1, dist.p2)
        ux, uy = undistort_newton(t * x, t * y, dist.q1, dist.q2, dist.q3, dist.p1, dist.p2)[:2]
        p = np.array([ux, uy, t * z])
        conj = F * p / (p[2] + F)
        assert 0.5 < t < 2.0
        assert float(n @ conj) == pytest.approx(h, abs=1e-8 * abs(h))
