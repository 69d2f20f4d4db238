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
LENS_POINTS = 200
"""Lens points of the brute-force whites (equal-area spiral): the quadrature moves a micro-image's
moments by well under the tests' tolerances (offsets 0.022 px RMS from the truth at 200 points, 0.015 at 400)."""


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
def _white_kernel(img, mic, ra, rb, off, A, lens, nsub, B):  # pragma: no cover - compiled
    """Brute-force white: per pixel, nsub² sub-pixel points × the lens points z (unit disc), lit
    where |A·(X − c − o − R_b·B·z)| ≤ R_a (B: the lenslet blur's shape)."""
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
                            zx = B[i, 0] * lens[s, 0] + B[i, 1] * lens[s, 1]
                            zy = B[i, 1] * lens[s, 0] + B[i, 2] * lens[s, 1]
                            vx = X - mic[i, 0] - off[i, 0] - rb[i] * zx
                            vy = Y - mic[i, 1] - off[i, 1] - rb[i] * zy
                            wx = A[i, 0] * vx + A[i, 1] * vy
                            wy = A[i, 1] * vx + A[i, 2] * vy
                            if wx * wx + wy * wy <= ra[i] * ra[i]:
                                cnt += 1
                img[y, x] += cnt / (nsub * nsub * lens.shape[0])


def _distorted(cam, *, lenslet_radial: float = 1.0):
    """Per micro-image: centres, field radius / half-diagonal r, outer fraction u (0 inside 60 % of
    the half-diagonal, 1 at the corner), radial unit vectors, the pupil's offset (up to ~1.5 px
    outwards) and A (radial semi-axis 1 − 0.2·u of R_a), the lenslet blur's B (radial scale
    1 − (1 − ``lenslet_radial``)·u)."""
    k, l = cam.mla.lattice.all_indices()
    c = micro_image_centres(cam, k, l)
    H, W = cam.sensor.height_px, cam.sensor.width_px
    d = c - np.array([(W - 1) / 2, (H - 1) / 2])
    r = np.hypot(*d.T) / np.hypot(W / 2, H / 2)
    u = np.clip((r - 0.6) / 0.4, 0.0, None)
    radial = d / np.maximum(np.hypot(*d.T), 1e-9)[:, None]
    off = (1.5 * u**2)[:, None] * radial

    def along(scale):  # the symmetric matrix that scales the radial direction by ``scale``
        return np.c_[scale * radial[:, 0] ** 2 + radial[:, 1] ** 2, (scale - 1.0) * radial[:, 0] * radial[:, 1],
                     scale * radial[:, 1] ** 2 + radial[:, 0] ** 2]

    A = matrix_from_shape(along((1.0 - 0.2 * u) ** 2))
    B = along(1.0 - (1.0 - lenslet_radial) * u)
    return c, r, u, radial, off, A, B


def _render(cam, f_number, c, off, A, B, seed):
    """The brute-force white at ``f_number`` (peak 180, noise 1 grey level)."""
    k, l = cam.mla.lattice.all_indices()
    m, q = radius_law_at(cam, k, l)
    s = cam.sensor.pixel_size_mm
    i = np.arange(LENS_POINTS) + 0.5
    rr, aa = np.sqrt(i / LENS_POINTS), i * np.pi * (3 - np.sqrt(5))
    lens = np.ascontiguousarray(np.c_[rr * np.cos(aa), rr * np.sin(aa)])
    img = np.zeros((cam.sensor.height_px, cam.sensor.width_px))
    _white_kernel(img, np.ascontiguousarray(c), np.abs(m) / f_number / s, np.abs(q) / s, np.ascontiguousarray(off),
                  np.ascontiguousarray(A), lens, 3, np.ascontiguousarray(B))
    return np.clip(180.0 * img + np.random.default_rng(seed).normal(0, 1.0, img.shape), 0, 255)


def _radial_scale(p, radial):
    """The measured ellipses' radial semi-axis / R_a (M,)."""
    a11, a12, a22 = p.matrix.T
    Ar = np.c_[a11 * radial[:, 0] + a12 * radial[:, 1], a12 * radial[:, 0] + a22 * radial[:, 1]]
    return 1.0 / np.hypot(*Ar.T)


def _inside(cam, c, margin=15):
    H, W = cam.sensor.height_px, cam.sensor.width_px
    return (c[:, 0] > margin) & (c[:, 0] < W - margin) & (c[:, 1] > margin) & (c[:, 1] < H - margin)


def test_a_displaced_compressed_pupil_is_measured_where_the_white_departs(small_camera):
    """A white rendered by brute force (pupil ⊗ lenslet disc, pixel supersampled) whose pupil, beyond
    60 % of the half-diagonal, is displaced outwards (up to ~1.5 px) and compressed radially (up to
    ~20 %), as a real lens's periphery makes it: the periphery gets ellipses whose offset and radial
    semi-axis match the truth to the moments' noise, the centre keeps the disc."""
    cam = small_camera
    ra, rb, types = _radii(cam)
    k, l = cam.mla.lattice.all_indices()
    c, r, u, radial, off, A, B = _distorted(cam)
    white = _render(cam, N, c, off, A, B, 4)
    p = measure_pupil_ellipses(white, cam.grid, radius_aperture_px=ra, radius_lens_px=rb, types=types, f_number=N)
    node = cam.grid.centres(k, l)
    far = (u > 0.5) & _inside(cam, c)
    assert not p.elliptical[r < 0.55].any()
    assert p.elliptical[far].mean() > 0.9
    sel = far & p.elliptical
    # Offset (from the grid node, which the true micro-image centre is) and radial semi-axis.
    err_off = p.offset_px[sel] - (c + off - node)[sel]
    assert np.sqrt(np.mean(np.sum(err_off**2, axis=1))) < 0.1, np.sqrt(np.mean(np.sum(err_off**2, axis=1)))  # measured 0.022
    err = _radial_scale(p, radial)[sel] - (1.0 - 0.2 * u[sel])
    assert abs(np.median(err)) < 0.02, np.median(err)  # measured −0.0006
    assert np.percentile(np.abs(err), 90) < 0.05  # measured 0.012
    # shape=False: the same micro-images and centres, the disc's shape.
    q = measure_pupil_ellipses(white, cam.grid, radius_aperture_px=ra, radius_lens_px=rb, types=types, f_number=N, shape=False)
    np.testing.assert_array_equal(q.elliptical, p.elliptical)
    np.testing.assert_array_equal(q.offset_px, p.offset_px)
    np.testing.assert_array_equal(q.matrix, PupilEllipses.discs(len(ra)).matrix)


def test_the_pupil_shape_is_told_from_the_lenslets_by_the_f_number(small_camera):
    """Whites at N = 5.66 and 11.3 whose lenslets, besides the pupil (compressed radially by up to
    20 %, displaced), blur 15 % less radially in the periphery (obliquely lit lenslets): with one
    white the lenslets' change is taken for the pupil's; with both, the pupil's radial semi-axis is
    measured to the noise."""
    cam = small_camera
    c, _, u, radial, off, A, B = _distorted(cam, lenslet_radial=0.85)
    ra, rb, types = _radii(cam)
    n2 = 11.313708499
    w1, w2 = _render(cam, N, c, off, A, B, 1), _render(cam, n2, c, off, A, B, 2)
    args = {"radius_aperture_px": ra, "radius_lens_px": rb, "types": types, "f_number": N}
    one = measure_pupil_ellipses(w1, cam.grid, **args)
    both = measure_pupil_ellipses(w1, cam.grid, **args, other_whites=[(n2, w2)])
    far = (u > 0.5) & _inside(cam, c) & one.elliptical & both.elliptical
    assert far.sum() > 50
    truth = 1.0 - 0.2 * u[far]
    err_one = np.median(_radial_scale(one, radial)[far] - truth)
    err_both = np.median(_radial_scale(both, radial)[far] - truth)
    assert err_one < -0.05, err_one  # the lenslets' narrower blur read as a narrower pupil (measured −0.117)
    assert abs(err_both) < 0.02, err_both  # measured −0.003
    np.testing.assert_array_equal(both.offset_px[far], one.offset_px[far])
