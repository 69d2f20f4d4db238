"""The main aperture's preimage per micro-image, measured from a white (beyond the paper).

Detection's corner model (:func:`plenocal.detect.corners.render_corners`) lights each pixel
through the part of the lenslet disc whose rays pass the main aperture; the paper takes the
aperture's preimage as the disc of radius R_a about the micro-image centre. Where a white departs
from that model (:mod:`.conformity`: a real lens's pupil, seen from off-axis lenslets, is
displaced and radially compressed), this module measures the preimage as an ellipse
(:class:`plenocal.model.pupil_ellipse.PupilEllipses`) from the white at the frames' f-number:

- **centre**: the micro-image's intensity centroid (moments in a disc window re-centred on it,
  :func:`.radii.windowed_moments`), minus the grid node;
- **shape**: a white micro-image is the pupil's preimage convolved with the lenslet's blur and the
  pixel, so its second-moment matrix is Σ_w(N) = Σ_p(N) + Σ_b. The pupil's part scales as 1/N²
  (its shape relative to its size does not change with the stop: real rays through the R12-B
  prescription give the same radial compression at f/4, f/8 and f/11.3, 0.96 at 8.5 mm and 0.79 at
  10.5 mm), the lenslet's does not. With whites at two or more f-numbers (``other_whites``), each
  component of Σ_w is fitted per micro-image as α + β/N² (moments in windows centred on the
  frames' white's centroid): Σ_p(N) = β/N². With one white, Σ_b is taken as the model's disc,
  (R_b²/4 + 1/12)·I, which puts any change of the lenslet's blur across the sensor into the pupil
  (on R12-B twice the pupil's real radial compression: the obliquely lit lenslets blur
  differently). S is Σ_p relative to the disc's (R_a²/4)·I, its departure from I taken relative
  to the median departure of the conforming central micro-images of the same type (which absorbs
  Ω's fit residual and a round camera's own small anisotropy, as :func:`.conformity.conformity`
  does), so that S = I there to the noise. A = S^(−1/2).

Only micro-images that the conformity test rejects, and whose 5 × 5-node neighbourhood it rejects
mostly (a departure across the sensor, not a noise flag), get an ellipse; every other one keeps
the disc exactly (o = 0, A = I), so a camera whose whites follow the model renders as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from plenocal.model.camera import MicroImageGrid
from plenocal.model.pupil_ellipse import PupilEllipses, matrix_from_shape
from plenocal.precalib.centres import clean_image, envelope, flatten_by
from plenocal.precalib.conformity import central, conformity, neighbourhood_mean
from plenocal.precalib.radii import PIXEL_VARIANCE, micro_image_moments, windowed_moments

FloatArray = NDArray[np.float64]

MIN_NEIGHBOURS_DEPARTING = 0.5
"""A rejected micro-image gets an ellipse only if at least this fraction of its neighbourhood
(:data:`.conformity.NEIGHBOURHOOD_NODES`) is rejected too: an isolated rejection is the test's
noise (PRISM r12-b: 2 of 26 k at N ≥ 8), not the lens."""
SHAPE_EIGENVALUE_RANGE = (0.05, 4.0)
"""S's eigenvalues (the ellipse's squared semi-axes in units of R_a²) are clamped to this range:
a near-dark micro-image's moments are mostly noise, and A = S^(−1/2) must stay finite."""


def sample_image(image: NDArray, uv: FloatArray) -> FloatArray:
    """``image`` at the nearest pixels of ``uv`` (M, 2), clamped to the image."""
    H, W = image.shape
    u = np.clip(np.rint(uv[:, 0]).astype(np.int64), 0, W - 1)
    v = np.clip(np.rint(uv[:, 1]).astype(np.int64), 0, H - 1)
    return np.asarray(image[v, u], dtype=np.float64)


def measure_pupil_ellipses(
    white: NDArray,
    grid: MicroImageGrid,
    *,
    radius_aperture_px: FloatArray,
    radius_lens_px: FloatArray,
    types: NDArray[np.int64],
    f_number: float,
    shape: bool = True,
    other_whites: Sequence[tuple[float, NDArray]] = (),
) -> PupilEllipses:
    """The main aperture's preimage in every micro-image of ``grid`` (order of
    ``grid.lattice.all_indices()``), measured from ``white`` (module docstring).

    Parameters
    ----------
    white : (H, W) the white at the frames' f-number (raw, as devignetting takes it).
    grid : the micro-image grid (pre-calibration).
    radius_aperture_px, radius_lens_px : (M,) R_a and R_b per micro-image (px), as detection uses them.
    types : (M,) micro-lens type per micro-image (−1 or 0 for untyped cameras).
    f_number : the white's N (recorded with the conformity test).
    shape : measure the shape too; False keeps the disc's shape (A = I) at the measured centre
        (on the real-optics R12-B set the centre carries what the ellipse improves, the shape what
        it worsens: ``docs/model.md``).
    other_whites : (N, image) of whites at other f-numbers (raw): the pupil's and the lenslet's
        parts of the shape are separated by their f-number dependence (module docstring).
    """
    k_all, l_all = grid.lattice.all_indices()
    M = len(k_all)
    out = PupilEllipses.discs(M)
    img = clean_image(white)
    env = envelope(img, grid.diameter_px)
    flat = flatten_by(img, env)
    mom = micro_image_moments(flat, grid, k_all, l_all)
    if len(mom.k) < 10:
        return out
    mass = mom.mean_intensity * sample_image(env, mom.centre_px)
    lattice = grid.lattice
    conf = conformity(mom, mass, lattice, img.shape, f_number=f_number)
    rejected = ~conf.ok
    if not np.any(rejected):
        return out
    share, _ = neighbourhood_mean(rejected.astype(np.float64), mom.k, mom.l, lattice)
    index = {int(key): i for i, key in enumerate(l_all * lattice.width + k_all)}
    idx = np.array([index[int(key)] for key in mom.l * lattice.width + mom.k], dtype=np.int64)
    # Moments again in a window centred on each centroid (the node's window clips a micro-image
    # that sits pixels off it).
    rw = grid.diameter_px / 2.0 - 0.5
    rec = windowed_moments(flat, mom.k, mom.l, mom.centre_px, rw)
    rec_idx = np.array([index[int(key)] for key in rec.l * lattice.width + rec.k], dtype=np.int64)
    pos = {int(j): i for i, j in enumerate(rec_idx)}
    take = np.array([pos.get(int(j), -1) for j in idx])
    ok_rec = take >= 0
    var = np.full(len(idx), np.nan)
    a1 = np.full(len(idx), np.nan)
    a2 = np.full(len(idx), np.nan)
    cen = np.full((len(idx), 2), np.nan)
    var[ok_rec] = rec.variance_px2[take[ok_rec]]
    a1[ok_rec], a2[ok_rec] = rec.anisotropy[take[ok_rec]].T
    cen[ok_rec] = rec.centre_px[take[ok_rec]]
    ra = np.asarray(radius_aperture_px, dtype=np.float64)[idx]
    rb = np.asarray(radius_lens_px, dtype=np.float64)[idx]
    disc = np.maximum(ra**2 / 4.0, 1e-12)
    others = [(float(n), w) for n, w in other_whites if abs(float(n) - float(f_number)) > 1e-3 * float(f_number)]
    if others:
        # Σ_w = α + β/N² per component over every white, in windows centred on the frames'
        # white's centroids: Σ_p at the frames' N is β/N².
        comps = [np.stack([var * (1.0 + a1), var * a2, var * (1.0 - a1)], axis=1)]
        inv_n2 = [1.0 / float(f_number) ** 2]
        window = np.where(np.isfinite(cen), cen, grid.centres(mom.k, mom.l))
        for n_o, w_o in others:
            img_o = clean_image(w_o)
            m_o = windowed_moments(flatten_by(img_o, envelope(img_o, grid.diameter_px)), mom.k, mom.l, window, rw)
            pos_o = {int(key): i for i, key in enumerate(m_o.l * lattice.width + m_o.k)}
            t_o = np.array([pos_o.get(int(key), -1) for key in mom.l * lattice.width + mom.k])
            v_o = np.full(len(idx), np.nan)
            b1 = np.full(len(idx), np.nan)
            b2 = np.full(len(idx), np.nan)
            have = t_o >= 0
            v_o[have] = m_o.variance_px2[t_o[have]]
            b1[have], b2[have] = m_o.anisotropy[t_o[have]].T
            comps.append(np.stack([v_o * (1.0 + b1), v_o * b2, v_o * (1.0 - b1)], axis=1))
            inv_n2.append(1.0 / n_o**2)
        x = np.asarray(inv_n2)
        y = np.stack(comps, axis=0)  # (n_whites, M, 3)
        xc = x - x.mean()
        beta = np.einsum("j,jmc->mc", xc, y - y.mean(axis=0)) / float(np.sum(xc**2))
        dev = beta / float(f_number) ** 2 / disc[:, None] - np.array([1.0, 0.0, 1.0])
    else:
        blur = rb**2 / 4.0 + PIXEL_VARIANCE
        dev = np.stack([(var * (1.0 + a1) - blur) / disc - 1.0, var * a2 / disc, (var * (1.0 - a1) - blur) / disc - 1.0], axis=1)
    t = np.asarray(types, dtype=np.int64)[idx]
    ref = conf.ok & central(mom.centre_px, img.shape) & np.all(np.isfinite(dev), axis=1)
    for ty in np.unique(t):
        sel = t == ty
        r = ref & sel
        if int(r.sum()) >= 10:
            dev[sel] -= np.median(dev[r], axis=0)
    s_raw = dev + np.array([1.0, 0.0, 1.0])
    # Clamp S's eigenvalues (same eigenvectors).
    mean = 0.5 * (s_raw[:, 0] + s_raw[:, 2])
    half = np.hypot(0.5 * (s_raw[:, 0] - s_raw[:, 2]), s_raw[:, 1])
    lo, hi = SHAPE_EIGENVALUE_RANGE
    l1, l2 = np.clip(mean - half, lo, hi), np.clip(mean + half, lo, hi)
    cos2 = np.where(half > 0, 0.5 * (s_raw[:, 0] - s_raw[:, 2]) / np.maximum(half, 1e-300), 1.0)
    sin2 = np.where(half > 0, s_raw[:, 1] / np.maximum(half, 1e-300), 0.0)
    m_, h_ = 0.5 * (l1 + l2), 0.5 * (l2 - l1)
    shape_s = np.stack([m_ + h_ * cos2, h_ * sin2, m_ - h_ * cos2], axis=1)
    node = grid.centres(mom.k, mom.l)
    ell = rejected & (share >= MIN_NEIGHBOURS_DEPARTING) & ok_rec & np.all(np.isfinite(shape_s), axis=1)
    offset = out.offset_px.copy()
    matrix = out.matrix.copy()
    elliptical = out.elliptical.copy()
    j = idx[ell]
    offset[j] = cen[ell] - node[ell]
    if shape:
        matrix[j] = matrix_from_shape(shape_s[ell])
    elliptical[j] = True
    return PupilEllipses(offset, matrix, elliptical)
