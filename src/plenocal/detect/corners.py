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
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from numpy.typing import NDArray

from plenocal.detect._kernels import (
    circle_crossings_kernel,
    devignette_boxes_kernel,
    devignette_boxes_stored_kernel,
    devignette_kernel,
    render_grad_kernel,
    render_kernel,
    rendered_normal_kernel,
    rendered_residual_kernel,
    symmetric_kernel,
    xjunction_fit_kernel,
)
from plenocal.model.pupil_ellipse import PupilEllipses

if TYPE_CHECKING:
    from plenocal.model.camera import PlenopticCamera

FloatArray = NDArray[np.float64]


def devignette(raw: NDArray, white: NDArray, *, min_white_fraction: float = 0.1) -> tuple[FloatArray, FloatArray]:
    """raw / white and a per-pixel weight white / (white level), 0 where the white is below
    ``min_white_fraction`` of its level (the gaps between micro-images).

    Both images are grey, same shape, any scale (divided values are relative to the white).
    """
    r = np.ascontiguousarray(raw)
    w = np.ascontiguousarray(white)
    if r.shape != w.shape:
        raise ValueError(f"raw {r.shape} and white {w.shape} differ in shape")
    threshold, bright = white_levels(w, min_white_fraction=min_white_fraction)
    return devignette_kernel(r, w, threshold, bright)


def white_levels(white: NDArray, *, min_white_fraction: float = 0.1, scale: float = 1.0) -> tuple[float, float]:
    """(threshold, level) of :func:`devignette`: the white's level is its 99th percentile (on a
    ≤ 512 × 512 subsample), pixels below ``min_white_fraction`` of it are invalid. ``scale``: the
    white is divided by it first (its stored integers and 2^bits − 1, the grey white's numbers)."""
    w = np.asarray(white)
    sub = w[:: max(1, w.shape[0] // 512), :: max(1, w.shape[1] // 512)]
    bright = float(np.percentile(sub if scale == 1.0 else sub.astype(np.float64) / scale, 99))
    return float(min_white_fraction * bright), max(bright, 1e-12)


def white_weight(
    white: NDArray, *, min_white_fraction: float = 0.1, levels: tuple[float, float] | None = None, scale: float = 1.0,
) -> FloatArray:
    """(H, W) :func:`devignette`'s weight alone, the same numbers: it depends on the white only, so
    a pass that fits corners in a few micro-images of several frames computes it once.
    ``levels``: :func:`white_levels` of this white and ``min_white_fraction`` when the caller has
    them (None: computed here); ``scale``: as :func:`white_levels`'."""
    w = np.ascontiguousarray(white)
    if levels is None:
        levels = white_levels(w, min_white_fraction=min_white_fraction, scale=scale)
    threshold, bright = float(levels[0]), float(levels[1])
    # numpy, not a kernel: the work is a few element-wise passes (0.1 s at full scale), and loading
    # a cached parallel kernel into a new process cost 0.27 s of the second pass alone
    weight = w.astype(np.float64)  # float(white[y, x]) / scale, as devignette_kernel divides
    if scale != 1.0:
        weight /= scale
    lit = (weight >= threshold) & (weight > 0.0)
    weight *= 1.0 / bright
    np.minimum(weight, 1.0, out=weight)
    weight[~lit] = 0.0
    return weight


def devignette_boxes(
    raw: NDArray, white: NDArray, centres: FloatArray, *, half_px: int, scale: float = 1.0, white_scale: float = 1.0,
    min_white_fraction: float = 0.1, threshold: float | None = None,
) -> FloatArray:
    """:func:`devignette`'s divided image on the square boxes ``rint(centres) ± half_px`` only
    (the same numbers there; 0 elsewhere).

    A frame whose corners are fitted in a few micro-images (the second pass's predicted nodes:
    tens of the grid's 26 000) needs them alone; dividing the whole 4080 × 3068 image took
    0.15 s a frame, most of the second pass's work per frame.

    Parameters
    ----------
    raw, white : (H, W) the raw image and the white at the same f-number: grey images (any float
        dtype), or both their stored integers with ``scale`` and ``white_scale``.
    centres : (n, 2) micro-image centres, px.
    half_px : half the box side, px (e.g. the micro-image radius + 2: every pixel a fit in the
        micro-image reads).
    scale, white_scale : stored integers are divided by them first (2^bits − 1, as
        :func:`plenocal.io.images.read_raw_image` converts grey images), in float64; both 1:
        grey images, divided in their own precision as :func:`devignette` does.
    threshold : the white's validity threshold, :func:`white_levels`' first value, when the
        caller has it for this white and ``min_white_fraction`` (None: computed here).
    """
    r = np.ascontiguousarray(raw)
    w = np.ascontiguousarray(white)
    if r.shape != w.shape:
        raise ValueError(f"raw {r.shape} and white {w.shape} differ in shape")
    if threshold is None:
        threshold, _ = white_levels(w, min_white_fraction=min_white_fraction, scale=white_scale)
    out = np.zeros(w.shape)  # untouched pages stay unmapped
    origins = np.ascontiguousarray(np.rint(np.asarray(centres, dtype=np.float64).reshape(-1, 2)).astype(np.int64))
    if scale == 1.0 and white_scale == 1.0:
        devignette_boxes_kernel(out, r, w, float(threshold), origins, int(half_px))
    else:
        devignette_boxes_stored_kernel(out, r, w, float(threshold), float(scale), float(white_scale), origins, int(half_px))
    return out


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
    image : (H, W) devignetted image (white level ≈ 1), lightly smoothed (float32 is sampled
        as is, without a float64 copy).
    centres : (M, 2) micro-image centres (px).
    radii_px : (M,) radius of the usable micro-image disc.
    """
    M = len(centres)
    chosen = np.full(M, -1)
    best_n = np.zeros(M, dtype=np.int64)
    contrast = np.zeros(M)
    img = np.asarray(image)
    img = np.ascontiguousarray(img, dtype=img.dtype if img.dtype in (np.float32, np.float64) else np.float64)
    cen = np.ascontiguousarray(centres, dtype=np.float64)
    todo = np.arange(M)
    for j, frac in enumerate(fractions):
        n_ch, con = circle_crossings_kernel(img, np.ascontiguousarray(cen[todo]),
                                            np.ascontiguousarray(frac * radii_px[todo], dtype=np.float64), int(n_samples))
        if j == 0:
            best_n, contrast = n_ch, con
        take = (n_ch == 4) & (con >= min_contrast)
        chosen[todo[take]] = j
        # Smaller circles only where no corner was found yet and the largest saw some contrast:
        # both lines of a corner inside a smaller circle also cross the largest one.
        todo = todo[~take & (contrast[todo] >= min_contrast)]
        if not len(todo):
            break
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
    sign: FloatArray = field(default_factory=lambda: np.zeros(0))
    """sign of b: which pair of opposite quadrants is bright (for rendering the corner)."""

    @property
    def render_sign(self) -> FloatArray:
        """``sign`` for rendering the corner: ±1 (+1 where the fit left it 0)."""
        return np.where(self.sign != 0, self.sign, 1.0)

    def select(self, mask: NDArray) -> CornerFit:
        return CornerFit(*(getattr(self, f)[mask] for f in _FIT_FIELDS))

    @staticmethod
    def concatenate(parts: list[CornerFit]) -> CornerFit:
        return CornerFit(*(np.concatenate([getattr(p, f) for p in parts]) for f in _FIT_FIELDS))

    @staticmethod
    def empty() -> CornerFit:
        z = np.zeros(0)
        return CornerFit(np.zeros((0, 2)), np.zeros((0, 2)), z, z, z, z, np.zeros(0, dtype=bool), z)


_FIT_FIELDS = ("corner", "angles", "sigma_px", "contrast", "angle_between_rad", "rms", "converged", "sign")


def fit_corners(
    image: FloatArray,
    weight: FloatArray,
    centres: FloatArray,
    radii_px: FloatArray,
    init_corner: FloatArray,
    init_angles: FloatArray,
    *,
    iterations: int = 30,
    step_tolerance_px: float = 1e-3,
) -> CornerFit:
    """Levenberg–Marquardt fit of the blurred X-junction in each micro-image disc (numba, one
    micro-image per task: :func:`plenocal.detect._kernels.xjunction_fit_kernel`).

    Parameters
    ----------
    image : devignetted image.
    weight : per-pixel weight (≈ white / white level: the devignetted noise variance ∝ 1/white);
        0 outside the usable micro-image area.
    centres : (M, 2) micro-image centres; radii_px : (M,) fit radius.
    init_corner : (M, 2); init_angles : (M, 2) line-normal angles.
    step_tolerance_px : a fit has converged when its corner moves by less than this (1e-3 px: a
        thirtieth of the position noise of a clean 384-ray render, a two-hundredth of PRISM's).
    """
    M = len(centres)
    if M == 0:
        return CornerFit.empty()
    p, cost, npix, conv = xjunction_fit_kernel(
        np.ascontiguousarray(image, dtype=np.float64),
        np.ascontiguousarray(weight, dtype=np.float64),
        np.ascontiguousarray(centres, dtype=np.float64),
        np.ascontiguousarray(radii_px, dtype=np.float64),
        np.ascontiguousarray(init_corner, dtype=np.float64),
        np.ascontiguousarray(init_angles, dtype=np.float64),
        int(iterations),
        float(step_tolerance_px),
    )
    conv &= npix >= 8
    ang = np.abs(np.angle(np.exp(1j * (p[:, 2] - p[:, 3]))))
    ang = np.minimum(ang, np.pi - ang)
    rms = np.sqrt(cost / np.maximum(npix, 1)) / np.maximum(np.abs(p[:, 6]), 1e-9)
    return CornerFit(p[:, 0:2].copy(), p[:, 2:4].copy(), p[:, 4].copy(), np.abs(p[:, 6]), ang, rms, conv, np.sign(p[:, 6]))


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
    if len(corner) == 0:
        return np.asarray(corner, dtype=np.float64).copy(), np.zeros(0)
    return symmetric_kernel(
        np.ascontiguousarray(image, dtype=np.float64),
        np.ascontiguousarray(weight, dtype=np.float64),
        np.ascontiguousarray(centres, dtype=np.float64),
        np.ascontiguousarray(radii_px, dtype=np.float64),
        np.ascontiguousarray(corner, dtype=np.float64),
        float(max_radius_px),
        float(min_radius_px),
        int(iterations),
    )


def _disc_points(n: int) -> FloatArray:
    """``n`` (even) equal-area points in the unit disc (Vogel spiral), point-symmetric."""
    h = n // 2
    i = np.arange(h) + 0.5
    r = np.sqrt(i / h)
    a = i * np.pi * (3.0 - np.sqrt(5.0))
    p = np.stack([r * np.cos(a), r * np.sin(a)], axis=1)
    return np.concatenate([p, -p])


_SET_SIZES = (16, 32, 64, 128, 256, 512)
_DISC_POINTS = np.concatenate([_disc_points(n) for n in _SET_SIZES])
_DISC_OFFSETS = np.cumsum((0, *_SET_SIZES)).astype(np.int64)
RENDER_DENSITY = 9.0
"""Lens-disc samples per px² of blur disc: spacing √(π/9) ≈ 0.6 px (sparser samples add ~0.03 px RMS on clean frames)."""
RENDER_MASK_DENSITY = 5.6
"""Lens-disc samples per px² of the pupil mask's footprint (π·R_b²): spacing ≈ 0.75 px where the
mask edge sweeps over the lens samples. The mask does not scale with ρ, so near focus the blur
density alone left it under-sampled: on a brute-force pixel-integrated render (|ρ| = 1 px), 46
mpx RMS fit error without this floor, 3 mpx with it; r12-b virtual depths at υ 3–5 +0.3 % → 0.0 %."""
RENDER_SIGMA_PX = 0.3
"""Edge blur of the rendered sharp image: pixel integration (a 1-px box ≈ Gaussian σ = 1/√12)."""
QUADRATURE_ERROR_PX_SAMPLES = 2.3
"""The rendered fit's position error from sampling the lens disc with N points is about this / N
px (measured: noise-free full-scale frame at ρ ≈ −3.5 px, fitted with 16 / 32 / 64 / 128 points:
0.144 / 0.069 / 0.034 / ~0.017 px RMS beyond the fit's floor)."""
QUADRATURE_ERROR_FRACTION = 0.2
"""A corner is rendered with enough lens points that the quadrature error stays below this
fraction of its own position σ (measured by the fit): noisy images need fewer points (PRISM's
30-ray renders: σ ≈ 0.2 px → 64 points instead of 128, +1.7 % RMS)."""
COARSE_SAMPLES = 16
"""Lens points of the first Gauss–Newton iteration, which starts up to ~1 px off (first order)."""
STEP_FRACTION_OF_SIGMA = 0.25
"""Gauss–Newton stops when a corner's step is below this fraction of its position σ. Steps shrink
by ~6× per iteration near the end, so the position left is ~0.05σ: nothing in quadrature. At 0.1
(PRISM r12-b, 13 frames) the same corners came out 0.5 % worse (later iterations re-render with
a lens-point set re-chosen from a re-measured σ, i.e. a slightly different quadrature) and 210
corners more were left unconverged."""
_NO_CAP = float(_SET_SIZES[-1])


def _pupil_arrays(pupil: PupilEllipses | None, n: int) -> tuple[NDArray[np.bool_], FloatArray]:
    """The render kernels' (ell, pupil) arrays for ``n`` corners (the paper's disc when None)."""
    p = PupilEllipses.discs(n) if pupil is None else pupil
    if len(p) != n:
        raise ValueError(f"{len(p)} pupil ellipses for {n} corners")
    return p.kernel_arrays()


@dataclass(frozen=True)
class NaturalVignetting:
    """What weighing the rendered corner's lens points by natural vignetting needs beyond Ω: the
    principal point and the MLA–sensor distance d, in px (a camera's, e.g. pre-calibration's).

    A pixel sees each point of its micro-lens's aperture along a ray of length r at angles θ_X
    (at the pixel) and θ_P (at the lens) to the axis; a physical image weighs that ray by
    cos θ_X·cos θ_P/r² = d²/r⁴ (per unit area), so the near side of the aperture counts more than
    the far side, the more so the farther the pixel is from the lens's axis: a blurred corner's
    kernel is lopsided towards the pixel's own side, and blurred corners appear farther from
    their micro-image centre (``docs/model.md``, "Natural vignetting moves d and f_i")."""

    principal_point_px: tuple[float, float]
    d_px: float

    @classmethod
    def of_camera(cls, camera: PlenopticCamera) -> NaturalVignetting:
        """A camera's principal point and d in px (pre-calibration's camera, in detection)."""
        s = camera.sensor.pixel_size_mm
        return cls(principal_point_px=tuple(camera.sensor.principal_point_px), d_px=camera.d_mm / s)

    def rows(self, centres: FloatArray, *, lambda_: float, lens_radius_px: float) -> FloatArray:
        """(M, 4) rows (f_x, f_y, L, (s/d)²) of the micro-images centred at ``centres`` (M, 2):
        f the foot of the lens's axis on the sensor, c − (1 − λ)(c − pp) (the micro-image centre
        is the pupil centre's image through the lens centre, λ = D/(D + d) of Ω), L the lens
        radius."""
        c = np.asarray(centres, dtype=np.float64).reshape(-1, 2)
        pp = np.asarray(self.principal_point_px, dtype=np.float64)
        out = np.empty((len(c), 4))
        out[:, :2] = c - (1.0 - lambda_) * (c - pp)
        out[:, 2] = lens_radius_px
        out[:, 3] = 1.0 / (self.d_px * self.d_px)
        return out


def _natural_array(natural: FloatArray | None, n: int) -> FloatArray:
    """The render kernels' (n, 4) natural-vignetting rows (f_x, f_y, L, (s/d)²) for ``n`` corners:
    zeros (none) when ``natural`` is None."""
    if natural is None:
        return np.zeros((n, 4))
    a = np.ascontiguousarray(natural, dtype=np.float64)
    if a.shape != (n, 4):
        raise ValueError(f"natural vignetting rows of shape {a.shape} for {n} corners")
    return a


def _per_corner(value: float | FloatArray, n: int) -> FloatArray:
    """One value per corner (C-contiguous float64), from a scalar or an (n,) array."""
    return np.ascontiguousarray(np.broadcast_to(np.asarray(value, dtype=np.float64), (n,)))


def render_corners(
    out: FloatArray,
    centres: FloatArray,
    radii_px: FloatArray,
    corner: FloatArray,
    angles: FloatArray,
    sign: FloatArray,
    rho: FloatArray,
    radius_aperture_px: float | FloatArray,
    radius_lens_px: FloatArray,
    *,
    sigma_px: float = RENDER_SIGMA_PX,
    unblurred_weight: float = 0.0,
    pupil: PupilEllipses | None = None,
    natural: FloatArray | None = None,
) -> FloatArray:
    """Render, in place in ``out``, devignetted micro-images of checkerboard corners whose
    chief-ray projection is ``corner`` (model.projection.project_bap), blurred by ρ through the
    micro-lens pupil vignetted by the main aperture (model.projection's module docstring).

    Pixel x of the micro-image centred at c sees the sharp image at x + ρ·z for the unit-disc
    lens points z with |z − (x − c)/R_b| ≤ R_a/R_b (the rays that pass the main aperture); its
    devignetted value is their mean. With the aperture wide (R_a ≥ R_b + |x − c|) this is the
    paper's disc blur of radius |ρ| (eq:blurradius), centred on the chief ray.

    Parameters
    ----------
    out : (H, W) image written at the pixels within ``radii_px`` of each centre.
    centres : (M, 2) micro-image centres; radii_px : (M,) radius to render.
    corner : (M, 2) chief-ray corners; angles : (M, 2) line-normal angles; sign : (M,) ±1.
    rho : (M,) signed blur radii (px); radius_aperture_px : R_a = |m|/(N·s), one or (M,);
    radius_lens_px : (M,) R_b = |q_i|/s.
    unblurred_weight : the fraction of light that reaches each pixel along its chief ray, unblurred
        (pre-calibration's w: 0 for a real lens, 1/31 for PRISM).
    pupil : (M,) the main aperture's preimage per corner as an ellipse
        (:class:`~plenocal.model.pupil_ellipse.PupilEllipses`: |A·(x − c − o − R_b z)| ≤ R_a);
        None: the disc of radius R_a about c.
    natural : (M, 4) per corner (f_x, f_y, L, (s/d)²): each lens point weighed by the natural
        vignetting of its ray to the pixel (:func:`plenocal.detect._kernels._render_pixel`;
        :func:`natural_vignetting_rows`); None: every lens point alike (the paper's image).
    """
    ell, pup = _pupil_arrays(pupil, len(centres))
    render_kernel(
        out, np.ascontiguousarray(centres, dtype=np.float64), np.ascontiguousarray(radii_px, dtype=np.float64),
        np.ascontiguousarray(radius_lens_px, dtype=np.float64), _per_corner(radius_aperture_px, len(centres)),
        np.ascontiguousarray(rho, dtype=np.float64), np.ascontiguousarray(corner, dtype=np.float64),
        np.ascontiguousarray(angles, dtype=np.float64), np.ascontiguousarray(sign, dtype=np.float64),
        float(sigma_px), float(RENDER_DENSITY), float(RENDER_MASK_DENSITY), _DISC_POINTS, _DISC_OFFSETS,
        float(unblurred_weight), np.full(len(centres), _NO_CAP), ell, pup, _natural_array(natural, len(centres)),
    )
    return out


def locate_corners(
    image: FloatArray, weight: FloatArray, centres: FloatArray, radii_px: FloatArray, start: FloatArray, angles: FloatArray
) -> tuple[FloatArray, CornerFit]:
    """The corner estimator: X-junction fit, then the centre of point symmetry where the
    symmetric window fits in the micro-image (the X-junction fit elsewhere)."""
    fit = fit_corners(image, weight, centres, radii_px, start, angles)
    corner, sym_radius = refine_symmetric(image, weight, centres, radii_px, fit.corner)
    return np.where((sym_radius > 0)[:, None], corner, fit.corner), fit


def chief_ray_corners(
    observed: FloatArray,
    fit: CornerFit,
    rho: FloatArray,
    weight: FloatArray,
    centres: FloatArray,
    radii_px: FloatArray,
    radius_aperture_px: float | FloatArray,
    radius_lens_px: FloatArray,
    *,
    iterations: int = 4,
    tolerance_px: float = 0.02,
    buffer: FloatArray | None = None,
    unblurred_weight: float = 0.0,
    pupil: PupilEllipses | None = None,
    natural: FloatArray | None = None,
) -> tuple[FloatArray, NDArray[np.bool_]]:
    """Chief-ray corners from observed ones, by inverting the image formation.

    The main aperture vignettes the micro-lens pupil, so a blurred corner appears displaced
    radially from its chief-ray projection (up to ~2 px near the micro-image border at |ρ| ≈ 3),
    and the displaced image is no longer point-symmetric. The displacement depends only on
    quantities known here: the micro-image centre, R_a, R_b (Ω) and ρ (from the cluster's
    virtual depth). Find K such that the estimator (:func:`locate_corners`) applied to the
    rendered corner (:func:`render_corners`) lands where it landed on the image:
    ``e(render(K)) = observed``. This cancels the estimator's bias on vignetted corners to first
    order, whatever that bias is. Newton-like steps K ← K + J⁻¹(observed − e(render(K))), with J
    the Jacobian of the first-order model (:func:`plenocal.model.projection.pupil_shift_px`).

    With ``pupil`` (M,) the main aperture's preimage is an ellipse per corner (rendered exactly;
    the first-order model that starts the inversion and gives J uses its stand-in disc,
    :meth:`~plenocal.model.pupil_ellipse.PupilEllipses.first_order`). ``natural``: as
    :func:`render_corners`'.

    Returns
    -------
    chief : (M, 2); converged : (M,) last step below ``tolerance_px``.
    """
    from plenocal.model.projection import pupil_shift_px, pupil_unshift

    M = len(observed)
    if M == 0:
        return np.zeros((0, 2)), np.zeros(0, dtype=bool)
    rb = np.asarray(radius_lens_px, dtype=np.float64)
    ra = _per_corner(radius_aperture_px, M)
    rho = np.asarray(rho, dtype=np.float64)
    c1, ra1 = (centres, ra) if pupil is None else pupil.first_order(centres, ra)
    K = pupil_unshift(observed, rho, c1, ra1, rb)
    # Jacobian of the first-order model at the start (it varies slowly).
    h = 0.05
    J = np.empty((M, 2, 2))
    for a in range(2):
        dp = np.zeros(2)
        dp[a] = h
        fp = pupil_shift_px(K + dp, rho, c1, ra1, rb)
        fm = pupil_shift_px(K - dp, rho, c1, ra1, rb)
        J[:, :, a] = (fp - fm) / (2 * h)
    det = J[:, 0, 0] * J[:, 1, 1] - J[:, 0, 1] * J[:, 1, 0]
    bad = ~(np.abs(det) > 0.2)
    J[bad] = np.eye(2)
    Jinv = np.linalg.inv(J)
    out = np.zeros_like(weight) if buffer is None else buffer
    sign = fit.render_sign
    step = np.full((M, 2), np.inf)
    todo = np.arange(M)
    for _ in range(iterations):
        # Only the corners not converged yet are rendered and re-estimated.
        t = todo
        render_corners(out, centres[t], radii_px[t] + 1.5, K[t], fit.angles[t], sign[t], rho[t], ra[t], rb[t],
                       unblurred_weight=unblurred_weight, pupil=None if pupil is None else pupil.take(t),
                       natural=None if natural is None else natural[t])
        e, _ = locate_corners(out, weight, centres[t], radii_px[t], observed[t], fit.angles[t])
        s = np.clip(np.einsum("mij,mj->mi", Jinv[t], observed[t] - e), -1.0, 1.0)
        K[t] += s
        step[t] = s
        todo = t[np.any(np.abs(s) >= tolerance_px, axis=1)]
        if not len(todo):
            break
    return K, np.all(np.abs(step) < tolerance_px, axis=1)


def _lens_points_for(sigma_px: FloatArray) -> FloatArray:
    """Lens points for a quadrature error below :data:`QUADRATURE_ERROR_FRACTION` of each σ."""
    need = QUADRATURE_ERROR_PX_SAMPLES / (QUADRATURE_ERROR_FRACTION * np.maximum(np.nan_to_num(sigma_px, nan=1e-6), 1e-6))
    return np.clip(need, COARSE_SAMPLES, _NO_CAP)


class RenderedFit(NamedTuple):
    """Result of :func:`refine_rendered` for M micro-images."""

    corner: FloatArray
    """(M, 2) chief-ray corners."""
    ok: NDArray[np.bool_]
    """(M,) the fit was determined and its last step below 0.01 px."""
    angles: FloatArray
    """(M, 2) fitted line-normal angles."""
    contrast: FloatArray
    """(M,) b of a + b·render: the black-to-white difference in devignetted units (< 0 when
    the rendered sign is wrong)."""
    rms: FloatArray
    """(M,) white-weighted RMS residual / |b| at the last iteration."""
    sigma_px: FloatArray
    """(M,) standard deviation of the corner along its worst direction (px), from the
    Gauss–Newton normal matrix and the residual variance (weights = white, ∝ 1/variance)."""
    lens_points: FloatArray
    """(M,) the lens-point cap each corner was rendered with (pass it on to a later fit)."""


def refine_rendered(
    image: FloatArray,
    weight: FloatArray,
    centres: FloatArray,
    radii_px: FloatArray,
    corner: FloatArray,
    angles: FloatArray,
    sign: FloatArray,
    rho: FloatArray,
    radius_aperture_px: float | FloatArray,
    radius_lens_px: FloatArray,
    *,
    iterations: int = 3,
    density: float = RENDER_DENSITY,
    tolerance_px: float = 0.01,
    unblurred_weight: float = 0.0,
    noise_matched: bool = True,
    sigma_start: FloatArray | None = None,
    lens_points_start: FloatArray | None = None,
    pupil: PupilEllipses | None = None,
    natural: FloatArray | None = None,
) -> RenderedFit:
    """Chief-ray corners by fitting the rendered corner (:func:`render_corners`) to the pixels.

    Per micro-image, Gauss–Newton on K with the levels free: observed ≈ a + b·render(K), the
    pixels within ``radii_px`` weighted by ``weight`` (the white level, as devignetted noise
    variance goes as 1/white). The renderer matches ray-traced vignetted corners to the noise
    (0.02 devignetted units at 768 rays); fitting it directly uses every pixel with its own
    sensitivity, where :func:`chief_ray_corners` inverts the estimator's output, whose
    sensitivity to K collapses at the micro-image border (r12-d, 2–6 px from the centre: 0.08 px
    RMS from the inversion, 0.03 px from this fit). The detection pipeline starts it from the
    first-order positions (:func:`plenocal.model.projection.pupil_unshift`).

    With ``noise_matched`` the first iteration renders with :data:`COARSE_SAMPLES` lens points
    (with ``sigma_start``, a previous fit's σ, or ``lens_points_start``, its lens points, the
    start is already close: no coarse iteration), later ones with enough points that the
    quadrature error stays below :data:`QUADRATURE_ERROR_FRACTION` of the corner's own position σ
    (measured once, by the first iteration; re-choosing the point set from a re-measured σ would
    move the corner for the quadrature's sake, ~0.1σ, and keep it from converging), and a corner
    stops once its step is below ``tolerance_px`` or
    :data:`STEP_FRACTION_OF_SIGMA` of its σ — the effort follows the image's noise; a corner is
    never reported converged from a coarse iteration.

    ``pupil`` (M,): the main aperture's preimage per micro-image as an ellipse
    (:func:`render_corners`); None: the disc of radius R_a about the centre. ``natural``: as
    :func:`render_corners`'.

    Returns
    -------
    :class:`RenderedFit` (corner, ok, angles, contrast, rms, sigma_px).
    """
    M = len(corner)
    K = np.array(corner, dtype=np.float64, copy=True)
    if M == 0:
        z = np.zeros(0)
        return RenderedFit(K, np.zeros(0, dtype=bool), np.zeros((0, 2)), z, z, z, z)
    H, W = image.shape
    r = int(np.ceil(float(np.max(radii_px))))
    oy, ox = np.mgrid[-r : r + 1, -r : r + 1]
    oy, ox = oy.reshape(-1), ox.reshape(-1)
    origin = np.rint(centres).astype(np.int64)
    px = origin[:, :1] + ox[None]
    py = origin[:, 1:] + oy[None]
    inside = (px >= 0) & (px < W) & (py >= 0) & (py < H)
    pxc, pyc = np.clip(px, 0, W - 1), np.clip(py, 0, H - 1)
    inside &= (px - centres[:, :1]) ** 2 + (py - centres[:, 1:]) ** 2 <= (radii_px**2)[:, None]
    w = np.where(inside, weight[pyc, pxc], 0.0)
    obs = image[pyc, pxc]
    rb = np.asarray(radius_lens_px, dtype=np.float64)
    ra = _per_corner(radius_aperture_px, M)
    rad = np.asarray(radii_px, dtype=np.float64)
    rho = np.asarray(rho, dtype=np.float64)
    sign = np.asarray(sign, dtype=np.float64)
    ell, pup = _pupil_arrays(pupil, M)
    nat = _natural_array(natural, M)
    th = np.array(angles, dtype=np.float64, copy=True)
    step = np.full((M, 2), np.inf)
    det_ok = np.ones(M, dtype=bool)
    contrast = np.zeros(M)
    rms = np.full(M, np.inf)
    sigma = np.full(M, np.inf)
    n_pix = np.count_nonzero(w > 0, axis=1)
    coarse = noise_matched and sigma_start is None and lens_points_start is None
    cap = np.full(M, float(COARSE_SAMPLES) if coarse else _NO_CAP)
    if noise_matched and lens_points_start is not None:
        # Continuing a previous fit with its quadrature: corners do not move for its sake.
        cap = np.array(lens_points_start, dtype=np.float64, copy=True)
    elif noise_matched and sigma_start is not None:
        cap = _lens_points_for(np.asarray(sigma_start, dtype=np.float64))
    fine = np.full(M, not coarse)
    todo = np.arange(M)
    for _ in range(iterations + (1 if coarse else 0)):
        # Only the micro-images whose corner still moves are rendered again.
        t = todo
        G = np.zeros((5, len(t), px.shape[1]))
        render_grad_kernel(
            G, origin[t], r, H, W, np.ascontiguousarray(centres[t], dtype=np.float64), rad[t], rb[t], ra[t],
            rho[t], np.ascontiguousarray(K[t]), np.ascontiguousarray(th[t]), sign[t], float(RENDER_SIGMA_PX), float(density),
            float(RENDER_MASK_DENSITY), _DISC_POINTS, _DISC_OFFSETS, float(unblurred_weight), np.ascontiguousarray(cap[t]),
            ell[t], np.ascontiguousarray(pup[t]), np.ascontiguousarray(nat[t]),
        )
        # G: value, ∂/∂Kx, ∂/∂Ky, ∂/∂θ1, ∂/∂θ2 at the stencil pixels (0 where w = 0 is unused).
        # Linear in (a, b, b·dKx, b·dKy, b·dθ1, b·dθ2): obs = a + b·r0 + Σ (b·d_j)·J_j.
        wt, ot = np.ascontiguousarray(w[t]), np.ascontiguousarray(obs[t])
        N, g = rendered_normal_kernel(G, wt, ot)
        N += np.eye(6)[None] * 1e-9 * np.trace(N, axis1=1, axis2=2)[:, None, None]
        sol = np.linalg.solve(N, g[..., None])[..., 0]
        b_ = sol[:, 1]
        ssr = rendered_residual_kernel(G, wt, ot, np.ascontiguousarray(sol))
        contrast[t] = b_
        rms[t] = np.sqrt(ssr / np.maximum(wt.sum(axis=1), 1e-12)) / np.maximum(np.abs(b_), 1e-9)
        # Covariance of (b·dKx, b·dKy) = s²·N⁻¹, s² the weighted residual variance.
        s2 = ssr / np.maximum(n_pix[t] - 6, 1)
        cov_k = np.linalg.inv(N)[:, 2:4, 2:4] * (s2 / np.maximum(b_**2, 1e-12))[:, None, None]
        sigma[t] = np.sqrt(np.maximum(np.linalg.eigvalsh(cov_k)[:, 1], 0.0))
        good = np.abs(b_) > 0.05
        inv_b = np.where(good, 1.0 / np.where(good, b_, 1.0), 0.0)
        d = np.clip(sol[:, 2:4] * inv_b[:, None], -0.5, 0.5)
        th[t] += np.clip(sol[:, 4:6] * inv_b[:, None], -0.1, 0.1)
        K[t] += d
        step[t] = d
        det_ok[t] &= good
        was_fine = fine[t].copy()
        tol = np.maximum(tolerance_px, STEP_FRACTION_OF_SIGMA * sigma[t]) if noise_matched else np.full(len(t), tolerance_px)
        moving = np.any(np.abs(d) >= tol[:, None], axis=1)
        if noise_matched:
            # From now on as many lens points as the corner's own noise calls for (set once).
            cap[t] = np.where(was_fine, cap[t], _lens_points_for(sigma[t]))
            fine[t] = True
        todo = t[(moving | ~was_fine) & good]
        if not len(todo):
            break
    stop = np.maximum(0.01, STEP_FRACTION_OF_SIGMA * sigma) if noise_matched else np.full(M, 0.01)
    return RenderedFit(K, det_ok & fine & np.all(np.abs(step) < stop[:, None], axis=1), th, contrast, rms, sigma, cap)
