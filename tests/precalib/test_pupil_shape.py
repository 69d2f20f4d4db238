"""The main aperture's preimage per micro-image measured from a white (precalib.pupil_shape)."""

from __future__ import annotations

import numba as nb
import numpy as np
from render import render_white

from plenocal.model.projection import micro_image_centres
from plenocal.model.pupil_ellipse import PupilEllipses, matrix_from_shape
from plenocal.model.white import radius_law_at
from plenocal.precalib.pupil_shape import measure_pupil_ellipses

N = 5.656854249


def _radii(camera):
    k, l = camera.mla.lattice.all_indices()
    m, q = radius_law_at(camera, k, l)
    s = camera.sensor.pixel_size_mm
    return np.abs(m) / N / s, np.abs(q) / s, camera.mla.types.type_of(k, l)


def test_a_white_that_follows_the_disc_model_keeps_the_disc_everywhere(small_camera):
    """A white made as the model says (noise 1 grey level, 30 % natural vignetting): no ellipse."""
    ra, rb, types = _radii(small_camera)
    white = render_white(small_camera, N, noise=1.0, vignetting=0.3, seed=3)
    p = measure_pupil_ellipses(white, small_camera.grid, radius_aperture_px=ra, radius_lens_px=rb, types=types, f_number=N)
    assert len(p) == len(ra)
    assert not p.elliptical.any()
    np.testing.assert_array_equal(p.offset_px, 0.0)
    np.testing.assert_array_equal(p.matrix, PupilEllipses.discs(len(ra)).matrix)


@nb.njit(parallel=True, cache=False)
def _white_kernel(img, mic, ra, rb, off, A, lens, nsub):  # pragma: no cover - compiled
    H, W = img.shape
    for i in nb.prange(mic.shape[0]):
        R = int(ra[i] + rb[i] + abs(off[i, 0]) + abs(off[i, 1])) + 2
        cu, cv = int(mic[i, 0] + 0.5), int(mic[i, 1] + 0.5)  # (centres are positive)
        for y in range(max(cv - R, 0), min(cv + R + 1, H)):
            for x in range(max(cu - R, 0), min(cu + R + 1, W)):
                cnt = 0
                for a in range(nsub):
                    for b in range(nsub):
                        X = x - 0.5 + (a + 0.5) / nsub
                        Y = y - 0.5 + (b + 0.5) / nsub
                        for s in range(lens.shape[0]):
                            vx = X - mic[i, 0] - off[i, 0] - rb[i] * lens[s, 0]
                            vy = Y - mic[i, 1] - off[i, 1] - rb[i] * lens[s, 1]
                            wx = A[i, 0] * vx + A[i, 1] * vy
                            wy = A[i, 1] * vx + A[i, 2] * vy
                            if wx * wx + wy * wy <= ra[i] * ra[i]:
                                cnt += 1
                img[y, x] += cnt / (nsub * nsub * lens.shape[0])


def test_a_displaced_compressed_pupil_is_measured_where_the_white_departs(small_camera):
    """A white rendered by brute force (pupil ⊗ lenslet disc, pixel supersampled) whose pupil, beyond
    60 % of the half-diagonal, is displaced outwards (up to ~1.5 px) and compressed radially (up to
    ~20 %), as a real lens's periphery makes it: the periphery gets ellipses whose offset and radial
    semi-axis match the truth to the moments' noise, the centre keeps the disc."""
    cam = small_camera
    ra, rb, types = _radii(cam)
    k, l = cam.mla.lattice.all_indices()
    c = micro_image_centres(cam, k, l)
    H, W = cam.sensor.height_px, cam.sensor.width_px
    centre = np.array([(W - 1) / 2, (H - 1) / 2])
    d = c - centre
    r = np.hypot(*d.T) / np.hypot(W / 2, H / 2)
    u = np.clip((r - 0.6) / 0.4, 0.0, None)  # 0 inside 60 %, 1 at the corner
    radial = d / np.maximum(np.hypot(*d.T), 1e-9)[:, None]
    off = (1.5 * u**2)[:, None] * radial
    comp = (1.0 - 0.2 * u) ** 2  # radial variance ratio
    shape = np.c_[comp * radial[:, 0] ** 2 + radial[:, 1] ** 2, (comp - 1.0) * radial[:, 0] * radial[:, 1],
                  comp * radial[:, 1] ** 2 + radial[:, 0] ** 2]
    A = matrix_from_shape(shape)
    i = np.arange(400) + 0.5
    rr, aa = np.sqrt(i / 400), i * np.pi * (3 - np.sqrt(5))
    lens = np.ascontiguousarray(np.c_[rr * np.cos(aa), rr * np.sin(aa)])
    img = np.zeros((H, W))
    _white_kernel(img, np.ascontiguousarray(c), ra, rb, np.ascontiguousarray(off), np.ascontiguousarray(A), lens, 3)
    white = np.clip(180.0 * img + np.random.default_rng(4).normal(0, 1.0, img.shape), 0, 255)
    p = measure_pupil_ellipses(white, cam.grid, radius_aperture_px=ra, radius_lens_px=rb, types=types, f_number=N)
    node = cam.grid.centres(k, l)
    inner = r < 0.55
    far = (u > 0.5) & (c[:, 0] > 15) & (c[:, 0] < W - 15) & (c[:, 1] > 15) & (c[:, 1] < H - 15)
    assert not p.elliptical[inner].any()
    assert p.elliptical[far].mean() > 0.9
    sel = far & p.elliptical
    # Offset (from the grid node, which the true micro-image centre is) and radial semi-axis.
    true_off = c + off - node
    err_off = p.offset_px[sel] - true_off[sel]
    assert np.sqrt(np.mean(np.sum(err_off**2, axis=1))) < 0.1, np.sqrt(np.mean(np.sum(err_off**2, axis=1)))
    a11, a12, a22 = p.matrix[sel].T
    rad = radial[sel]
    Ar = np.c_[a11 * rad[:, 0] + a12 * rad[:, 1], a12 * rad[:, 0] + a22 * rad[:, 1]]
    measured_scale = 1.0 / np.hypot(*Ar.T)  # radial semi-axis / R_a
    true_scale = 1.0 - 0.2 * u[sel]
    assert np.abs(np.median(measured_scale - true_scale)) < 0.02, np.median(measured_scale - true_scale)
    assert np.percentile(np.abs(measured_scale - true_scale), 90) < 0.05
    # shape=False: the same micro-images and centres, the disc's shape.
    q = measure_pupil_ellipses(white, cam.grid, radius_aperture_px=ra, radius_lens_px=rb, types=types, f_number=N, shape=False)
    np.testing.assert_array_equal(q.elliptical, p.elliptical)
    np.testing.assert_array_equal(q.offset_px, p.offset_px)
    np.testing.assert_array_equal(q.matrix, PupilEllipses.discs(len(ra)).matrix)
