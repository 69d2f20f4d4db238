"""The real-optics renderer: against the thin tracer, micro-image centres of real lenses,
unbiased sampling, determinism.

Tolerances come from the Monte-Carlo noise of the ray counts used (measured: white centroids
≈ 0.015 px RMS at 256 rays on R12-B micro-images)."""

from __future__ import annotations

import math

import numba
import numpy as np
import pytest
from test_tracer import _moments

from plenocal.model import micro_image_centres
from plenocal.model.camera import Distortion, MainLens
from plenocal.model.geometry import Pose
from plenocal.model.target import Checkerboard
from plenocal.sim.optics._kernels import footprint_disc, surface_table, trace_rays
from plenocal.sim.optics.camera import real_optics_camera
from plenocal.sim.optics.chief import chief_ray_micro_image_centres_px
from plenocal.sim.optics.lenslets import LensletDesign, LensletKind, lenslet_prescription
from plenocal.sim.optics.library import load_lens
from plenocal.sim.optics.render import build_real_optics, render_real
from plenocal.sim.presets import preset
from plenocal.sim.scene import CheckerboardPlate, Scene, WhiteDiffuser
from plenocal.sim.tracer import render

THIN_LENSLETS = LensletDesign(LensletKind.THIN)


@pytest.fixture(scope="module")
def r12b_small():
    return preset("r12-b", small=True)


@pytest.fixture(scope="module")
def r12b():
    return preset("r12-b")


def _checker(camera):
    board = Checkerboard(6, 4, 5.0, 2.0)
    pose = Pose.from_rotvec([0.2, -0.15, 0.05], [-12.0, -8.0, 500.0])
    return Scene((CheckerboardPlate(board, pose),), background=0.3)


def _centroids(img, centres, half):
    return np.array([_moments(img, c, half)[1] for c in centres])


def _inside(centres, roi, margin):
    i0, j0, i1, j1 = roi
    return ((centres[:, 0] > i0 + margin) & (centres[:, 0] < i1 - 1 - margin)
            & (centres[:, 1] > j0 + margin) & (centres[:, 1] < j1 - 1 - margin))


def test_thin_design_with_the_thin_tracers_weights_reproduces_the_thin_tracer(r12b_small):
    """The paper's camera written as a prescription (`thin`, thin lenslets with full-pitch discs,
    ray-fraction weights) draws the same samples as plenocal's thin tracer (same hashes and
    patterns) through an independent path (ideal surfaces by the tangent law, exact Snell code):
    the images agree but for rays decided differently by rounding on aperture edges (measured:
    none, the float32 images are identical)."""
    thin = r12b_small.camera.replace(distortion=Distortion())
    cam = real_optics_camera(thin, load_lens("thin"), lenslets=THIN_LENSLETS)
    roi = (350, 250, 650, 500)
    for scene in (WhiteDiffuser(), _checker(thin)):
        a = render(thin, scene, f_number=4.0, rays=16, roi=roi, seed=5)
        b = render_real(cam, scene, f_number=4.0, rays=16, roi=roi, seed=5, natural_vignetting=False)
        diff = np.abs(a - b)
        assert a.max() > 0.5
        assert np.mean(diff > 1e-4) < 0.001  # pixels with a ray decided differently
        assert diff.max() <= 2.0 / 16 + 1e-4


@pytest.mark.parametrize("name", ["ideal-stop-behind", "ideal-stop-front"])
def test_ideal_lenses_with_offset_pupils_reproduce_the_exit_pupil_model(r12b_small, name):
    """An aberration-free lens whose stop is behind it (exit pupil 10 mm behind H′, pupil
    magnification 0.8) or in front (virtual exit pupil 21.4 mm before H′, 1.43) is the model's
    exit-pupil main lens (MainLens.exit_pupil_mm = e, pupil magnification 1 − e/F): the thin
    tracer with that e and this renderer draw the same images (measured: identical)."""
    cam = real_optics_camera(r12b_small.camera, load_lens(name), lenslets=THIN_LENSLETS)
    par = cam.paraxial(4.0)
    e = par.exit_pupil_z - par.h_prime_z
    F = r12b_small.camera.main_lens.focal_length_mm
    assert par.pupil_magnification == pytest.approx(1.0 - e / F, rel=1e-12)
    thin = r12b_small.camera.replace(distortion=Distortion(), main_lens=MainLens(F, 4.0, exit_pupil_mm=e))
    roi = (350, 250, 650, 500)
    for scene in (WhiteDiffuser(), _checker(thin)):
        a = render(thin, scene, f_number=4.0, rays=16, roi=roi, seed=5)
        b = render_real(cam, scene, f_number=4.0, rays=16, roi=roi, seed=5, natural_vignetting=False)
        diff = np.abs(a - b)
        assert a.max() > 0.5
        assert np.mean(diff > 1e-4) < 0.001
        assert diff.max() <= 2.0 / 16 + 1e-4


def test_thin_design_with_natural_vignetting_matches_the_thin_tracer_statistically(r12b_small):
    """With radiometric weights (cos·cos/r²) the white micro-images keep their centres and radii
    and a checkerboard its position: centroids agree to 0.02 px RMS, the moment radii to 1 %,
    and the devignetted checkerboards are not shifted (least-squares shift < 0.02 px)."""
    thin = r12b_small.camera.replace(distortion=Distortion())
    cam = real_optics_camera(thin, load_lens("thin"), lenslets=THIN_LENSLETS)
    roi = (350, 250, 650, 500)
    wa = render(thin, WhiteDiffuser(), f_number=5.66, rays=256, roi=roi, seed=1)
    wb = render_real(cam, WhiteDiffuser(), f_number=5.66, rays=256, roi=roi, seed=1)
    k, l = thin.mla.lattice.all_indices()
    centres = micro_image_centres(thin, k, l)
    half = thin.grid.diameter_px / 2.0
    centres = centres[_inside(centres, roi, half + 1)]
    assert len(centres) >= 80
    ma = [_moments(wa, c, half) for c in centres]
    mb = [_moments(wb, c, half) for c in centres]
    ca, cb = np.array([m[1] for m in ma]), np.array([m[1] for m in mb])
    assert np.sqrt(np.mean(np.sum((ca - cb) ** 2, 1))) < 0.02
    assert np.sqrt(np.mean(np.sum((cb - centres) ** 2, 1))) < 0.02
    ra = np.sqrt(np.array([m[2] for m in ma]))
    rb = np.sqrt(np.array([m[2] for m in mb]))
    assert abs(np.median(rb / ra) - 1.0) < 0.01
    scene = _checker(thin)
    a = render(thin, scene, f_number=5.66, rays=64, roi=roi, seed=2)
    b = render_real(cam, scene, f_number=5.66, rays=64, roi=roi, seed=2)
    lit = (wa > 0.5) & (wb > 0.5)
    da = np.where(lit, a / np.maximum(wa, 1e-6), 0.0)[roi[1]:roi[3], roi[0]:roi[2]]
    db = np.where(lit, b / np.maximum(wb, 1e-6), 0.0)[roi[1]:roi[3], roi[0]:roi[2]]
    gy, gx = np.gradient(db)
    m = lit[roi[1]:roi[3], roi[0]:roi[2]]
    G = np.array([[np.sum(gx[m] ** 2), np.sum(gx[m] * gy[m])], [np.sum(gx[m] * gy[m]), np.sum(gy[m] ** 2)]])
    shift = np.linalg.solve(G, [np.sum(gx[m] * (da - db)[m]), np.sum(gy[m] * (da - db)[m])])
    assert np.hypot(*shift) < 0.02
    assert np.mean(np.abs(da - db)[m]) < 0.05


def test_micro_image_centres_are_images_of_the_exit_pupil_not_of_h_prime(r12b):
    """An aberration-free lens with its stop 15 mm in front (exit pupil 21 mm before H′): white
    micro-images 9 mm from the axis are centred on the exit pupil's centre imaged through the
    lenslets (within the Monte-Carlo noise), ~2.5 px away from the projection of H′ (the thin
    model's MICs)."""
    cam = real_optics_camera(r12b.camera, load_lens("ideal-stop-front"), lenslets=THIN_LENSLETS)
    roi = (3200, 2600, 3400, 2800)
    img = render_real(cam, WhiteDiffuser(), f_number=8.0, rays=256, roi=roi, seed=3, natural_vignetting=False)
    xp = cam.micro_image_centres_px(8.0)
    k, l = cam.thin.mla.lattice.all_indices()
    model = micro_image_centres(cam.thin, k, l)
    half = cam.thin.grid.diameter_px / 2.0
    sel = _inside(xp, roi, half + 2)
    assert sel.sum() >= 50
    got = _centroids(img, xp[sel], half)
    assert np.sqrt(np.mean(np.sum((got - xp[sel]) ** 2, 1))) < 0.025
    assert np.min(np.hypot(*(got - model[sel]).T)) > 1.5


def test_real_lens_micro_images_follow_its_real_chief_rays(r12b):
    """Through the double-Gauss, 9 mm off axis, white micro-images sit on the real chief rays
    (stop centre → lenslet centre) to 0.04 px RMS (noise + second-order pupil coma), while the
    paraxial exit pupil misses them by ~0.14 px (pupil aberration) and H′ by 1.4 px."""
    cam = real_optics_camera(r12b.camera, load_lens("double-gauss"), lenslets=THIN_LENSLETS)
    roi = (3200, 2600, 3400, 2800)
    img = render_real(cam, WhiteDiffuser(), f_number=8.0, rays=256, roi=roi, seed=3, natural_vignetting=False)
    chief, ok = chief_ray_micro_image_centres_px(cam)
    half = cam.thin.grid.diameter_px / 2.0
    sel = _inside(chief, roi, half + 2) & ok
    got = _centroids(img, chief[sel], half)
    assert np.sqrt(np.mean(np.sum((got - chief[sel]) ** 2, 1))) < 0.04
    paraxial = cam.micro_image_centres_px(8.0)[sel]
    assert np.sqrt(np.mean(np.sum((got - paraxial) ** 2, 1))) > 0.08


def test_fully_lit_micro_image_centre_renders_as_one(r12b_small):
    """Normalisation: real lenslets behind the thin lens at f/4, the micro-image nearest the
    principal point: its fully lit centre pixels average 1 (±1 %)."""
    cam = real_optics_camera(r12b_small.camera, load_lens("thin"))
    u0, v0 = cam.thin.sensor.principal_point_px
    mic = cam.micro_image_centres_px(4.0)
    c = mic[np.argmin(np.hypot(mic[:, 0] - u0, mic[:, 1] - v0))]
    i, j = round(c[0]), round(c[1])
    img = render_real(cam, WhiteDiffuser(), f_number=4.0, rays=1024, roi=(i - 1, j - 1, i + 2, j + 2), seed=4)
    assert img[j - 1:j + 2, i - 1:i + 2].mean() == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize("lenslets", [LensletDesign(), THIN_LENSLETS])
def test_larger_culling_bounds_change_nothing(r12b, lenslets):
    """Culling never cuts light: bounds twice as large give the same bytes (white and checkerboard,
    at the image's edge where the double-Gauss vignets)."""
    cam = real_optics_camera(r12b.camera, load_lens("double-gauss"), lenslets=lenslets)
    roi = (3900, 2900, 4000, 2990)
    for scene in (WhiteDiffuser(), _checker(cam.thin)):
        a = render_real(cam, scene, f_number=4.0, rays=8, roi=roi, seed=6)
        b = render_real(cam, scene, f_number=4.0, rays=8, roi=roi, seed=6,
                        optics=build_real_optics(cam, 4.0, bound_scale=2.0))
        assert a.tobytes() == b.tobytes()
    assert a.max() > 0.05


def test_rear_face_disc_holds_every_transmitted_ray():
    """Dense rays from points of a pixel to a fine grid on the rear face: every one that passes
    the mask starts inside :func:`footprint_disc`'s disc (pixels up to 110 µm off axis, the
    validation set's lenslets)."""
    design = LensletDesign()
    from plenocal.sim.optics.lenslets import lenslet_types

    kind = lenslet_types(design, (0.5464,), 0.127454)[0]
    g = 0.2619
    table = surface_table(lenslet_prescription(design, kind))
    s = 0.0055
    rng = np.random.default_rng(0)
    for xl, yl in [(0.0, 0.0), (0.03, 0.01), (-0.08, 0.05), (0.11, -0.02)]:
        cx, cy, radius = footprint_disc(xl, yl, g, design.substrate_mm, design.index, kind.clear_radius_mm, s)
        grid = np.linspace(-1.6, 1.6, 241) * radius
        gx, gy = np.meshgrid(grid + cx, grid + cy)
        P = np.stack([gx.ravel(), gy.ravel(), np.full(gx.size, kind.thickness_mm)], 1)
        for du, dv in rng.uniform(-0.5, 0.5, (4, 2)):
            X = np.array([xl + du * s, yl + dv * s, kind.thickness_mm + g])
            ok, _, _ = trace_rays(table, np.tile(X, (len(P), 1)), P - X, False)
            assert ok.sum() > 1000
            r = np.hypot(P[ok, 0] - cx, P[ok, 1] - cy)
            assert r.max() <= radius
            assert r.max() >= 0.95 * radius  # the disc is not much larger than the footprint


def test_same_bytes_for_any_thread_count_and_roi_windows(r12b_small):
    cam = real_optics_camera(r12b_small.camera, load_lens("double-gauss"))
    scene = _checker(cam.thin)
    roi = (300, 300, 700, 420)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = render_real(cam, scene, rays=8, seed=11, image_id=4, roi=roi)
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        two = render_real(cam, scene, rays=8, seed=11, image_id=4, roi=roi, band_rows=7)
    finally:
        numba.set_num_threads(before)
    assert one.tobytes() == two.tobytes()
    assert one[300:420, 300:700].std() > 0.05
    part = render_real(cam, scene, rays=8, seed=11, image_id=4, roi=(420, 330, 500, 380))
    np.testing.assert_array_equal(part[330:380, 420:500], one[330:380, 420:500])
    assert not part[:330].any() and not part[380:].any()
    other = render_real(cam, scene, rays=8, seed=12, image_id=4, roi=roi)
    assert other.tobytes() != one.tobytes()
    assert math.isfinite(float(one.sum()))


@pytest.mark.slow
def test_full_scale_real_optics_frame_is_thread_count_independent(r12b):
    """Full-scale R12-B checkerboard through the double-Gauss and real lenslets, 1 vs 2 threads:
    byte-identical (benchmarks/bench_simulate.py --lens times it)."""
    cam = real_optics_camera(r12b.camera, load_lens("double-gauss"))
    scene = _checker(cam.thin)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = render_real(cam, scene, rays=16, seed=1)
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        two = render_real(cam, scene, rays=16, seed=1)
    finally:
        numba.set_num_threads(before)
    assert one.tobytes() == two.tobytes()
