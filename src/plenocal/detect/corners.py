"""Checkerboard corners inside micro-images (paper §4.2; reference §6.3–6.4, without clicks).

1. **Devignetting** (paper §4): divide the raw image by the white image taken at the same
   f-number; pixels where the white is dark (gaps between micro-images) are invalid.
2. **Classification**, vectorised over every micro-image: the devignetted intensity is sampled on
   a circle inside the micro-image; a checkerboard corner whose two lines cross the disc gives
   exactly four sign changes around it (an edge gives two, a flat micro-image none). The two
   chords joining opposite crossings give the initial corner and line angles.
3. **Sub-pixel fit**, batched Levenberg–Marquardt over all corner micro-images at once, of a
   blurred X-junction ``I = a + b·erf(d1/(√2σ))·erf(d2/(√2σ))`` with ``d_i`` the signed distances
   to the two lines. The model is point-symmetric about the corner, like the true image of a
   corner blurred by any symmetric PSF (the micro-lens blur disc), so the misfit is symmetric
   and the corner unbiased.
4. **Acceptance**: converged, corner at least ``border_margin_px`` inside the micro-image,
   enough contrast, lines not parallel, a plausible blur. Rejections are counted by reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray
from scipy.special import erf

FloatArray = NDArray[np.float64]
SQRT2 = np.sqrt(2.0)
SQRT2_PI = np.sqrt(2.0 / np.pi)


def devignette(raw: NDArray, white: NDArray, *, min_white_fraction: float = 0.1) -> tuple[FloatArray, FloatArray]:
    """raw / white and a per-pixel weight white / (white level), 0 where the white is below
    ``min_white_fraction`` of its level (the gaps between micro-images).

    Both images are grey, same shape, any scale (divided values are relative to the white).
    """
    r = np.asarray(raw, dtype=np.float64)
    w = np.asarray(white, dtype=np.float64)
    bright = float(np.percentile(w[:: max(1, w.shape[0] // 512), :: max(1, w.shape[1] // 512)], 99))
    valid = w >= min_white_fraction * bright
    out = np.zeros_like(r)
    np.divide(r, w, out=out, where=valid)
    weight = np.where(valid, np.minimum(w / max(bright, 1e-12), 1.0), 0.0)
    return out, weight


def bilinear(image: FloatArray, u: FloatArray, v: FloatArray) -> FloatArray:
    """Bilinear samples of ``image`` at (u, v) (pixel centres at integers), clamped to the border."""
    H, W = image.shape
    u = np.clip(u, 0, W - 1.000001)
    v = np.clip(v, 0, H - 1.000001)
    u0 = np.floor(u).astype(np.int64)
    v0 = np.floor(v).astype(np.int64)
    fu, fv = u - u0, v - v0
    a = image[v0, u0]
    b = image[v0, u0 + 1]
    c = image[v0 + 1, u0]
    d = image[v0 + 1, u0 + 1]
    return (a * (1 - fu) + b * fu) * (1 - fv) + (c * (1 - fu) + d * fu) * fv


@dataclass(frozen=True)
class CornerCandidates:
    """Micro-images classified as holding a corner, with the initial guess."""

    index: NDArray[np.int64]
    """Index into the micro-images passed to :func:`classify`."""
    corner: FloatArray
    """(M, 2) initial corner (u, v)."""
    angles: FloatArray
    """(M, 2) initial line angles θ1, θ2 (radians, of the line normals)."""
    counts: dict[str, int] = field(default_factory=dict)
    """Micro-images per class: corner, edge, flat, other."""


def _circle_crossings(
    image: FloatArray, centres: FloatArray, radii_px: FloatArray, n_samples: int
) -> tuple[FloatArray, NDArray[np.int64], FloatArray, FloatArray]:
    """Samples on circles, the number of level crossings, contrast and crossing threshold."""
    phi = np.linspace(0.0, 2.0 * np.pi, n_samples, endpoint=False)
    u = centres[:, 0, None] + radii_px[:, None] * np.cos(phi)[None]
    v = centres[:, 1, None] + radii_px[:, None] * np.sin(phi)[None]
    s = bilinear(image, u, v)
    lo, hi = np.percentile(s, 10, axis=1), np.percentile(s, 90, axis=1)
    mid = 0.5 * (lo + hi)
    sign = s > mid[:, None]
    n_changes = (sign != np.roll(sign, -1, axis=1)).sum(axis=1)
    return s, n_changes, hi - lo, mid


def classify(
    image: FloatArray,
    centres: FloatArray,
    radii_px: FloatArray,
    *,
    n_samples: int = 72,
    min_contrast: float = 0.2,
    fractions: tuple[float, ...] = (0.85, 0.65, 0.45),
) -> CornerCandidates:
    """Find micro-images whose disc is crossed by two checkerboard lines (vectorised).

    Circles at several fractions of ``radii_px`` are tried (largest first): a corner near the
    border is enclosed by the large circle, one near the centre also by the small ones. The
    image should be lightly smoothed (noise would add crossings).

    Parameters
    ----------
    image : (H, W) devignetted image (white level ≈ 1), lightly smoothed.
    centres : (M, 2) micro-image centres (px).
    radii_px : (M,) radius of the usable micro-image disc.
    """
    M = len(centres)
    chosen = np.full(M, -1)
    best_n = np.zeros(M, dtype=np.int64)
    contrast = np.zeros(M)
    for j, frac in enumerate(fractions):
        _, n_ch, con, _ = _circle_crossings(image, centres, frac * radii_px, n_samples)
        if j == 0:
            best_n, contrast = n_ch, con
        take = (chosen < 0) & (n_ch == 4) & (con >= min_contrast)
        chosen[take] = j
    flat = contrast < min_contrast
    is_corner = chosen >= 0
    counts = {
        "corner": int(is_corner.sum()),
        "edge": int((~is_corner & ~flat & (best_n == 2)).sum()),
        "flat": int((~is_corner & flat).sum()),
        "other": int((~is_corner & ~flat & (best_n != 2)).sum()),
    }
    idx = np.flatnonzero(is_corner)
    corner = np.zeros((len(idx), 2))
    angles = np.zeros((len(idx), 2))
    for j, frac in enumerate(fractions):
        sel = chosen[idx] == j
        if not np.any(sel):
            continue
        ii = idx[sel]
        corner[sel], angles[sel] = _chords(image, centres[ii], frac * radii_px[ii], n_samples)
    return CornerCandidates(idx, corner, angles, counts)


def _chords(image: FloatArray, centres: FloatArray, radii: FloatArray, n_samples: int) -> tuple[FloatArray, FloatArray]:
    """Corner and line-normal angles from the four crossings (opposite crossings = one line)."""
    s, _, _, mid = _circle_crossings(image, centres, radii, n_samples)
    sign = s > mid[:, None]
    change = sign != np.roll(sign, -1, axis=1)
    j = np.nonzero(change)[1].reshape(len(centres), 4)
    s0 = np.take_along_axis(s, j, axis=1)
    s1 = np.take_along_axis(s, (j + 1) % n_samples, axis=1)
    frac = np.clip((mid[:, None] - s0) / np.where(s1 != s0, s1 - s0, 1.0), 0.0, 1.0)
    ang = (j + frac) * (2.0 * np.pi / n_samples)
    px = centres[:, 0, None] + radii[:, None] * np.cos(ang)
    py = centres[:, 1, None] + radii[:, None] * np.sin(ang)
    p0, p2 = np.stack([px[:, 0], py[:, 0]], 1), np.stack([px[:, 2], py[:, 2]], 1)
    p1, p3 = np.stack([px[:, 1], py[:, 1]], 1), np.stack([px[:, 3], py[:, 3]], 1)
    d1 = p2 - p0
    d2 = p3 - p1
    den = d1[:, 0] * d2[:, 1] - d1[:, 1] * d2[:, 0]
    den = np.where(np.abs(den) < 1e-9, 1e-9, den)
    t = ((p1[:, 0] - p0[:, 0]) * d2[:, 1] - (p1[:, 1] - p0[:, 1]) * d2[:, 0]) / den
    corner = p0 + t[:, None] * d1
    th1 = np.arctan2(d1[:, 1], d1[:, 0]) + np.pi / 2  # normal of line 1
    th2 = np.arctan2(d2[:, 1], d2[:, 0]) + np.pi / 2
    return corner, np.stack([th1, th2], axis=1)


@dataclass(frozen=True)
class CornerFit:
    """Result of :func:`fit_corners` for M candidates."""

    corner: FloatArray
    """(M, 2) sub-pixel corner (u, v)."""
    angles: FloatArray
    """(M, 2) line-normal angles θ1, θ2 (radians)."""
    sigma_px: FloatArray
    contrast: FloatArray
    """|b|: half the black-to-white difference (devignetted units)."""
    angle_between_rad: FloatArray
    rms: FloatArray
    """RMS residual / |b|."""
    converged: NDArray[np.bool_]


def _model(p: FloatArray, x: FloatArray, y: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Model values (M, P) and Jacobian (M, P, 7) of the blurred X-junction."""
    cx, cy, t1, t2, sg, a, b = (p[:, i, None] for i in range(7))
    c1, s1, c2, s2 = np.cos(t1), np.sin(t1), np.cos(t2), np.sin(t2)
    dx, dy = x - cx, y - cy
    d1 = c1 * dx + s1 * dy
    d2 = c2 * dx + s2 * dy
    e1 = erf(d1 / (SQRT2 * sg))
    e2 = erf(d2 / (SQRT2 * sg))
    g1 = SQRT2_PI / sg * np.exp(-0.5 * (d1 / sg) ** 2)
    g2 = SQRT2_PI / sg * np.exp(-0.5 * (d2 / sg) ** 2)
    f = a + b * e1 * e2
    J = np.empty((*f.shape, 7))
    J[..., 0] = b * (-c1 * g1 * e2 - c2 * e1 * g2)
    J[..., 1] = b * (-s1 * g1 * e2 - s2 * e1 * g2)
    J[..., 2] = b * g1 * (-s1 * dx + c1 * dy) * e2
    J[..., 3] = b * e1 * g2 * (-s2 * dx + c2 * dy)
    J[..., 4] = b * (-g1 * d1 / sg * e2 - e1 * g2 * d2 / sg)
    J[..., 5] = 1.0
    J[..., 6] = e1 * e2
    return f, J


def fit_corners(
    image: FloatArray,
    weight: FloatArray,
    centres: FloatArray,
    radii_px: FloatArray,
    init_corner: FloatArray,
    init_angles: FloatArray,
    *,
    iterations: int = 30,
) -> CornerFit:
    """Batched LM fit of the blurred X-junction in each micro-image disc (radius ``radii_px``).

    Parameters
    ----------
    image : devignetted image.
    weight : per-pixel weight (≈ white / white level: the devignetted noise variance ∝ 1/white);
        0 outside the usable micro-image area.
    centres : (M, 2) micro-image centres; radii_px : (M,) fit radius.
    init_corner : (M, 2); init_angles : (M, 2) line-normal angles.
    """
    M = len(centres)
    if M == 0:
        z = np.zeros(0)
        return CornerFit(np.zeros((0, 2)), np.zeros((0, 2)), z, z, z, z, np.zeros(0, dtype=bool))
    r = int(np.ceil(radii_px.max())) + 1
    offs = np.arange(-r, r + 1)
    oy, ox = np.meshgrid(offs, offs, indexing="ij")
    ox, oy = ox.ravel(), oy.ravel()
    H, W = image.shape
    cu = np.rint(centres[:, 0]).astype(np.int64)
    cv = np.rint(centres[:, 1]).astype(np.int64)
    X = cu[:, None] + ox[None]
    Y = cv[:, None] + oy[None]
    inside = (X >= 0) & (X < W) & (Y >= 0) & (Y < H)
    Xc, Yc = np.clip(X, 0, W - 1), np.clip(Y, 0, H - 1)
    I = image[Yc, Xc]
    disc = inside & (np.hypot(X - centres[:, 0, None], Y - centres[:, 1, None]) <= radii_px[:, None])
    wf = np.sqrt(np.where(disc, weight[Yc, Xc], 0.0))
    x = X.astype(np.float64)
    y = Y.astype(np.float64)
    # Initial photometric parameters by linear least squares given the geometry.
    p = np.zeros((M, 7))
    p[:, 0:2] = init_corner
    p[:, 2:4] = init_angles
    p[:, 4] = 1.5
    _, J0 = _model(np.concatenate([p[:, :5], np.zeros((M, 1)), np.ones((M, 1))], axis=1), x, y)
    e = J0[..., 6]
    w2 = wf * wf
    n = w2.sum(axis=1)
    se, see = (w2 * e).sum(1), (w2 * e * e).sum(1)
    sI, seI = (w2 * I).sum(1), (w2 * e * I).sum(1)
    det = n * see - se * se
    det = np.where(np.abs(det) < 1e-12, 1e-12, det)
    p[:, 6] = (n * seI - se * sI) / det
    p[:, 5] = (sI - p[:, 6] * se) / np.maximum(n, 1)
    lam = np.full(M, 1e-2)
    f, J = _model(p, x, y)
    res = (I - f) * wf
    cost = (res**2).sum(1)
    converged = np.zeros(M, dtype=bool)
    for _ in range(iterations):
        Jw = J * wf[..., None]
        A = np.einsum("mpi,mpj->mij", Jw, Jw)
        g = np.einsum("mpi,mp->mi", Jw, res)
        diag = np.einsum("mii->mi", A)
        A_d = A + (lam[:, None] * (diag + 1e-9))[:, :, None] * np.eye(7)[None]
        try:
            step = np.linalg.solve(A_d, g[..., None])[..., 0]
        except np.linalg.LinAlgError:
            step = np.zeros_like(g)
        step[:, 4] = np.clip(step[:, 4], -0.5 * p[:, 4], 2.0)
        p_new = p + step
        p_new[:, 4] = np.maximum(p_new[:, 4], 0.2)
        f_new, J_new = _model(p_new, x, y)
        res_new = (I - f_new) * wf
        cost_new = (res_new**2).sum(1)
        better = cost_new < cost
        p = np.where(better[:, None], p_new, p)
        f = np.where(better[:, None], f_new, f)
        J = np.where(better[:, None, None], J_new, J)
        res = np.where(better[:, None], res_new, res)
        small = np.abs(step[:, :2]).max(axis=1) < 1e-4
        converged |= better & small
        cost = np.where(better, cost_new, cost)
        lam = np.where(better, lam * 0.3, lam * 10.0)
        if np.all(converged | (lam > 1e6)):
            break
    converged |= lam <= 1e6
    ang = np.abs(np.angle(np.exp(1j * (p[:, 2] - p[:, 3]))))
    ang = np.minimum(ang, np.pi - ang)
    rms = np.sqrt(cost / np.maximum(n, 1)) / np.maximum(np.abs(p[:, 6]), 1e-9)
    return CornerFit(p[:, 0:2].copy(), p[:, 2:4].copy(), p[:, 4].copy(), np.abs(p[:, 6]), ang, rms, converged)


def refine_symmetric(
    image: FloatArray,
    weight: FloatArray,
    centres: FloatArray,
    radii_px: FloatArray,
    corner: FloatArray,
    *,
    max_radius_px: float = 7.0,
    min_radius_px: float = 2.0,
    iterations: int = 8,
) -> tuple[FloatArray, FloatArray]:
    """Model-free corner refinement: the centre of point symmetry of the corner image.

    A checkerboard corner blurred by any point-symmetric PSF (the micro-lens blur disc, pixel
    integration) is point-symmetric about the corner: minimise over c
    ``Σ_x w(c+x) w(c−x) (I(c+x) − I(c−x))²`` for offsets x in a disc that stays inside the
    usable micro-image (radius ``min(max_radius, R − |c − centre| − 0.5)``). Gauss–Newton on c,
    vectorised over micro-images; gradients by bilinear interpolation of the image gradient.

    Returns
    -------
    corner : (M, 2) refined corners; radius : (M,) symmetry radius used (0 when too small).
    """
    M = len(corner)
    if M == 0:
        return corner.copy(), np.zeros(0)
    gy, gx = np.gradient(image)
    rmax = int(np.ceil(max_radius_px))
    offs = np.arange(-rmax, rmax + 1, 0.5)
    oy, ox = np.meshgrid(offs, offs, indexing="ij")
    keep = (oy > 0) | ((oy == 0) & (ox > 0))  # half-disc: each pair once
    ox, oy = ox[keep], oy[keep]
    rr = np.hypot(ox, oy)
    c = corner.copy()
    rad = np.zeros(M)
    for _ in range(iterations):
        dist = np.hypot(c[:, 0] - centres[:, 0], c[:, 1] - centres[:, 1])
        rad = np.clip(radii_px - dist - 0.5, 0.0, max_radius_px)
        use = (rr[None] <= rad[:, None]) & (rr[None] > 0)
        up, vp = c[:, 0, None] + ox[None], c[:, 1, None] + oy[None]
        um, vm = c[:, 0, None] - ox[None], c[:, 1, None] - oy[None]
        Ip, Im = bilinear(image, up, vp), bilinear(image, um, vm)
        wp, wm = bilinear(weight, up, vp), bilinear(weight, um, vm)
        w = np.where(use, wp * wm, 0.0)
        r = Ip - Im
        # d r / d c = ∇I(c+x) − ∇I(c−x)
        jx = bilinear(gx, up, vp) - bilinear(gx, um, vm)
        jy = bilinear(gy, up, vp) - bilinear(gy, um, vm)
        a11 = (w * jx * jx).sum(1)
        a12 = (w * jx * jy).sum(1)
        a22 = (w * jy * jy).sum(1)
        b1 = (w * jx * r).sum(1)
        b2 = (w * jy * r).sum(1)
        det = a11 * a22 - a12 * a12
        ok = (det > 1e-12) & (rad >= min_radius_px)
        det = np.where(ok, det, 1.0)
        step_x = -(a22 * b1 - a12 * b2) / det
        step_y = -(-a12 * b1 + a11 * b2) / det
        step = np.stack([step_x, step_y], axis=1)
        step = np.where(ok[:, None], np.clip(step, -1.0, 1.0), 0.0)
        c = c + step
        if np.all(np.abs(step) < 1e-3):
            break
    rad = np.where(rad >= min_radius_px, rad, 0.0)
    return c, rad
