"""Micro-images clipped by a lens' mechanical vignetting are recognised and left out; the grid and
Ω stay unbiased; whites whose micro-images all follow the model lose none."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial import cKDTree

from plenocal.errors import DataError
from plenocal.model import Lattice, LatticeKind, micro_image_centres
from plenocal.model.camera import Configuration
from plenocal.model.spec import CameraSpec
from plenocal.model.white import internal_parameters
from plenocal.precalib import conformity as cf
from plenocal.precalib import pipeline
from plenocal.precalib.pipeline import WhiteImage, precalibrate

CLIP_START = 0.5
"""Fraction of the sensor's half-diagonal where the synthetic vignetting starts clipping."""
CLIP_END = 0.95
"""Fraction of the half-diagonal beyond which the micro-images are black."""


def spec_of(cam):
    return CameraSpec(cam.sensor.pixel_size_mm, cam.sensor.width_px, cam.sensor.height_px, cam.mla.lattice, 3, None,
                      50.0, 450.0, Configuration.GALILEAN)


def vignetted(image, cam, f_number):
    """``image`` times a cat's-eye mask and each micro-image's lost fraction of light.

    Each micro-image keeps only what falls in a second disc (the image of another element's rim)
    of fixed radius (the N = 4 support) whose centre moves towards the sensor centre as the field
    grows, from CLIP_START (no clipping) to CLIP_END (none left): its outer side is cut, more at
    wide apertures.
    """
    H, W = image.shape
    k, l = cam.mla.lattice.all_indices()
    c = micro_image_centres(cam, k, l)
    s = cam.sensor.pixel_size_mm
    m, q = internal_parameters(cam).m_mm, max(abs(x) for x in internal_parameters(cam).q_mm)
    support = (abs(m) / 4.0 + q) / s
    centre = np.array([(W - 1) / 2.0, (H - 1) / 2.0])
    field = c - centre
    r = np.hypot(*field.T)
    r_max = np.hypot(W / 2.0, H / 2.0)
    t = np.clip((r / r_max - CLIP_START) / (CLIP_END - CLIP_START), 0.0, 1.0)
    reach = support + (abs(m) / f_number + q) / s  # offset at which the two discs stop overlapping
    clip_centre = c - (field / np.maximum(r, 1e-9)[:, None]) * (t * reach)[:, None]
    yy, xx = np.mgrid[0:H, 0:W]
    pix = np.stack([xx.ravel(), yy.ravel()], axis=1).astype(np.float64)
    _, owner = cKDTree(c).query(pix)
    d = np.hypot(*(pix - clip_centre[owner]).T)
    mask = np.clip(support - d + 0.5, 0.0, 1.0).reshape(H, W)
    out = image * mask
    before = np.bincount(owner, image.ravel(), minlength=len(k))
    after = np.bincount(owner, out.ravel(), minlength=len(k))
    lost = 1.0 - after / np.maximum(before, 1e-12)
    return out, lost, r


@pytest.fixture(scope="module")
def clipped(small_camera, small_whites):
    whites, lost, radius = [], {}, None
    for w in small_whites[:4]:
        img, lost[w.f_number], radius = vignetted(w.image, small_camera, w.f_number)
        whites.append(WhiteImage(w.f_number, img, w.name))
    return whites, lost, radius


@pytest.fixture(scope="module")
def clipped_result(small_camera, clipped):
    return precalibrate(clipped[0], spec_of(small_camera), checkerboard_f_number=4.0)


def test_thin_lens_whites_keep_every_micro_image(small_camera, small_whites):
    res = precalibrate(small_whites, spec_of(small_camera), checkerboard_f_number=4.0)
    for c in res.conformity.values():
        assert np.all(c.ok), c.summary()
    assert res.grid_rms_all_px == pytest.approx(res.grid_fit.rms_px, rel=0.05)


def test_clipped_micro_images_are_left_out(small_camera, clipped, clipped_result):
    """Every micro-image that lost over 5 % of its light is left out in its white; those well inside
    the clipping radius are kept."""
    _, lost, radius = clipped
    k, l = small_camera.mla.lattice.all_indices()
    pitch = small_camera.grid.diameter_px
    r_start = CLIP_START * np.hypot(small_camera.sensor.width_px / 2.0, small_camera.sensor.height_px / 2.0)
    lin = l * small_camera.mla.lattice.width + k
    for N, conf in clipped_result.conformity.items():
        index = np.searchsorted(lin, conf.l * small_camera.mla.lattice.width + conf.k)
        assert np.all(~conf.ok[lost[N][index] > 0.05]), f"N={N:g}: a clipped micro-image kept ({conf.summary()})"
        inside = radius[index] < r_start - 3 * pitch
        assert np.mean(conf.ok[inside]) > 0.98, f"N={N:g}: {conf.summary()}"
        assert np.sum(lost[N] > 0.05) > 100  # the test clips many


def test_grid_and_omega_unbiased_under_clipping(small_camera, clipped_result):
    truth = internal_parameters(small_camera)
    res = clipped_result
    np.testing.assert_allclose(res.grid_fit.grid.pitch_px, small_camera.grid.pitch_px, atol=0.005)
    np.testing.assert_allclose(res.grid_fit.grid.offset_px, small_camera.grid.offset_px, atol=0.02)
    assert res.grid_fit.rms_px < 0.03
    assert res.omega.m_mm == pytest.approx(truth.m_mm, rel=0.005)
    np.testing.assert_allclose(res.omega.q_prime_mm, truth.q_prime_mm, rtol=0.01)
    assert res.types.confidence > 0.99
    # The MIC observations are the conforming micro-images' centres, on the truth.
    k, l = small_camera.mla.lattice.all_indices()
    c = micro_image_centres(small_camera, k, l)
    lin = l * small_camera.mla.lattice.width + k
    got = np.stack([res.mic.u, res.mic.v], axis=1)
    true = c[np.searchsorted(lin, res.mic.l * small_camera.mla.lattice.width + res.mic.k)]
    assert float(np.sqrt(np.mean(np.sum((got - true) ** 2, axis=1)))) < 0.03


def test_without_the_exclusion_clipping_biases_the_result(small_camera, clipped, monkeypatch):
    """The same whites with every micro-image kept: the test above would fail."""
    def keep_all(moments, mass, lattice, image_shape, *, f_number):
        n = len(moments.k)
        z = np.zeros(n, dtype=bool)
        return cf.Conformity(f_number, moments.k, moments.l, moments.centre_px, z, z, z, 0.0, 0.0)

    monkeypatch.setattr(pipeline, "conformity", keep_all)
    try:
        res = precalibrate(clipped[0], spec_of(small_camera), checkerboard_f_number=4.0)
    except DataError as exc:  # the clipped micro-images' radii blur the types together
        assert "cannot be told apart" in str(exc)
        return
    truth = internal_parameters(small_camera)
    assert res.grid_fit.rms_px > 0.1 or abs(res.omega.m_mm / truth.m_mm - 1) > 0.01


# --- the statistics ----------------------------------------------------------------------
def test_neighbourhood_mean_is_the_mean_over_the_index_square():
    lattice = Lattice(LatticeKind.HEX_ROWS, 13, 9)
    k, l = lattice.all_indices()
    rng = np.random.default_rng(0)
    keep = rng.random(len(k)) > 0.2
    k, l = k[keep], l[keep]
    v = rng.normal(size=(len(k), 2))
    mean, n = cf.neighbourhood_mean(v, k, l, lattice, nodes=2)
    for i in rng.choice(len(k), 20, replace=False):
        near = (np.abs(k - k[i]) <= 2) & (np.abs(l - l[i]) <= 2)
        assert n[i] == near.sum()
        np.testing.assert_allclose(mean[i], v[near].mean(axis=0), atol=1e-12)


def test_projective_lattice_recovers_a_homography():
    """A tilted MLA's projective lattice is fitted exactly, from its centre only."""
    lattice = Lattice(LatticeKind.HEX_ROWS, 60, 50)
    k, l = lattice.all_indices()
    gx, gy = lattice.positions(k, l, (1.0, 1.0))
    Hm = np.array([[23.3, 0.01, 40.0], [-0.02, 23.31, 30.0], [2e-5, -1.5e-5, 1.0]])
    p = np.stack([gx, gy, np.ones_like(gx)], axis=1) @ Hm.T
    uv = p[:, :2] / p[:, 2:]
    fit = (np.abs(gx - 30) < 10) & (np.abs(gy - 20) < 8)
    pred = cf.projective_lattice(uv, k, l, lattice, fit)
    assert np.max(np.abs(pred - uv)) < 1e-6
    # The tilt's departure from a linear lattice is far above the tolerance: it is not a departure.
    assert np.max(np.abs(uv - (gx[:, None] * Hm[:2, 0] + gy[:, None] * Hm[:2, 1] + Hm[:2, 2]))) > 1.0


def test_departs_sees_a_smooth_departure_above_its_noise_and_nothing_in_noise():
    lattice = Lattice(LatticeKind.HEX_ROWS, 100, 80)
    k, l = lattice.all_indices()
    rng = np.random.default_rng(1)
    noise = rng.normal(0.0, 0.05, (len(k), 2))
    r = np.hypot(k - 50, (l - 40) * 1.25) / 50.0
    flags, sigma = cf.departs(noise, k, l, lattice, 0.1, reference=r < 0.4)
    assert sigma == pytest.approx(0.05, rel=0.1)
    assert flags.mean() < 1e-3
    # A departure growing with the distance from the lattice centre: 0.2 px at the edge, below the
    # single micro-image's threshold (0.1 + 4·0.05) and found by the neighbourhood mean.
    shift = 0.2 * np.clip((r - 0.5) / 0.5, 0.0, None)
    values = noise + np.stack([shift, np.zeros_like(shift)], axis=1)
    flags, _ = cf.departs(values, k, l, lattice, 0.1, reference=r < 0.4)
    assert flags[shift > 0.15].mean() > 0.95
    assert flags[shift < 0.05].mean() < 0.01


def test_a_shape_shared_by_every_micro_image_is_not_a_departure():
    """Micro-images all 3 % elliptical (astigmatic lenslets, non-square pixels) are kept; a ring of
    cat's-eyes on top of that is not."""
    from plenocal.model.camera import MicroImageGrid
    from plenocal.precalib.radii import Moments

    lattice = Lattice(LatticeKind.HEX_ROWS, 100, 80)
    grid = MicroImageGrid(lattice, (23.3, 23.3), 0.0, (10.0, 10.0))
    k, l = lattice.all_indices()
    uv = grid.centres(k, l)
    shape = (int(uv[:, 1].max()) + 12, int(uv[:, 0].max()) + 12)
    rng = np.random.default_rng(5)
    n = len(k)
    aniso = np.array([0.03, 0.0]) + rng.normal(0.0, 0.005, (n, 2))
    centres = uv + rng.normal(0.0, 0.03, (n, 2))

    def moments(a):
        return Moments(k, l, np.full(n, 10.0), np.full(n, 10.3), np.ones(n), np.zeros((n, 2)), centres, a)

    conf = cf.conformity(moments(aniso), np.ones(n), lattice, shape, f_number=8.0)
    assert np.all(conf.ok), conf.summary()
    r = np.hypot(*(uv - np.array([shape[1], shape[0]]) / 2.0).T) / np.hypot(shape[1] / 2.0, shape[0] / 2.0)
    ring = r > 0.8
    clipped = aniso.copy()
    clipped[ring] += 0.05 * np.stack([np.cos(2 * np.arctan2(*(uv[ring] - uv.mean(0)).T[::-1])),
                                      np.sin(2 * np.arctan2(*(uv[ring] - uv.mean(0)).T[::-1]))], axis=1)
    conf = cf.conformity(moments(clipped), np.ones(n), lattice, shape, f_number=8.0)
    assert np.all(conf.anisotropic[ring]) and not np.any(conf.anisotropic[r < 0.7])
