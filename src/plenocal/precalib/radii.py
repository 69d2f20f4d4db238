"""Micro-image second moments and radii in white images (paper §3.2).

For every micro-image the background-subtracted intensity inside a disc window around its grid
centre gives the covariance matrix [[μ20, μ11], [μ11, μ02]]/μ00. Two radii follow:

- the paper's radius ϱ = α·σ_max with α = 2.357 and σ_max² the largest eigenvalue (§3.2);
- the **variance law** used by plenocal's Ω fit: a white micro-image is the convolution of the
  pinhole image of the main aperture (a disc of radius R_a = |m|/N) with the micro-lens blur disc
  (radius R_b = |q_i|); a uniform disc of radius R has variance R²/4 per axis, variances add under
  convolution, and pixel integration adds 1/12 px². Hence 4·(σ² − 1/12) = R_a² + R_b² exactly,
  whereas α·σ is not the support radius R_a + R_b (its ratio to it varies with the aperture
  from 0.83 to 1.18), which biases a line fit of α·σ against 1/N.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from plenocal.model.camera import MicroImageGrid
from plenocal.model.geometry import vogel_disc
from plenocal.precalib._kernels import moments_kernel

FloatArray = NDArray[np.float64]
ALPHA = 2.357
"""The paper's σ-to-radius factor (98 % of a normal distribution, §3.2)."""
PIXEL_VARIANCE = 1.0 / 12.0
"""Variance of a 1-px box (pixel integration), px²."""


@dataclass(frozen=True, eq=False)
class Moments:
    """Second moments of micro-images, each array of shape (M,)."""

    k: NDArray[np.int64]
    l: NDArray[np.int64]
    variance_px2: FloatArray
    """Mean of the two principal variances (σ_xx + σ_yy)/2, px²."""
    variance_max_px2: FloatArray
    """Largest eigenvalue of the covariance matrix, px²."""
    mean_intensity: FloatArray
    """Mean background-subtracted intensity over the window (relative brightness of the type)."""
    offset_px: FloatArray
    """(M, 2) intensity centroid − grid centre."""
    centre_px: FloatArray
    """(M, 2) intensity centroid (u, v)."""
    anisotropy: FloatArray
    """(M, 2) second-moment anisotropy ((σ_xx − σ_yy), 2σ_xy)/(σ_xx + σ_yy): 0 for a round
    micro-image, its norm (λ_max − λ_min)/(λ_max + λ_min) for an elliptical one."""

    def select(self, mask: NDArray[np.bool_]) -> Moments:
        """The micro-images where ``mask`` (M,) is true."""
        return Moments(self.k[mask], self.l[mask], self.variance_px2[mask], self.variance_max_px2[mask],
                       self.mean_intensity[mask], self.offset_px[mask], self.centre_px[mask], self.anisotropy[mask])

    @property
    def radius_alpha_px(self) -> FloatArray:
        """The paper's radius ϱ = α·σ_max (px)."""
        return ALPHA * np.sqrt(np.maximum(self.variance_max_px2, 0.0))

    @property
    def radius_rms_px(self) -> FloatArray:
        """√(R_a² + R_b²) = 2·√(σ² − 1/12) (px), the variance-law radius."""
        return 2.0 * np.sqrt(np.maximum(self.variance_px2 - PIXEL_VARIANCE, 0.0))


def micro_image_moments(
    image: NDArray,
    grid: MicroImageGrid,
    k: NDArray[np.int64],
    l: NDArray[np.int64],
    *,
    window_radius_px: float | FloatArray | None = None,
    centres_uv: FloatArray | None = None,
) -> Moments:
    """Second moments of micro-images (k, l) of a grey white image, vectorised.

    Parameters
    ----------
    image : (H, W) float array (already dead-pixel filtered).
    grid : the micro-image grid (window centres).
    k, l : (M,) indices; micro-images whose window leaves the image are dropped.
    window_radius_px : one radius, or one per micro-image (M,); default pitch/2 − 0.5.
    centres_uv : (M, 2) window centres (default: the grid nodes).

    Notes
    -----
    The background is the mean of a 1-px ring at the window edge (the dark gaps between
    micro-images); intensities are not clipped, so noise averages out instead of biasing σ².
    """
    c = grid.centres(k, l) if centres_uv is None else np.asarray(centres_uv, dtype=np.float64)
    rw = grid.diameter_px / 2.0 - 0.5 if window_radius_px is None else window_radius_px
    return windowed_moments(image, k, l, c, rw)


def windowed_moments(
    image: NDArray, k: NDArray[np.int64], l: NDArray[np.int64], centres_uv: FloatArray, window_radius_px: float | FloatArray
) -> Moments:
    """:func:`micro_image_moments` in disc windows of given centres (M, 2) and radii (scalar or (M,))."""
    img = np.asarray(image, dtype=np.float32)
    c = np.asarray(centres_uv, dtype=np.float64)
    radii = np.empty(len(c))  # writable whatever was given: a read-only array is another type, compiled again
    radii[:] = np.asarray(window_radius_px, dtype=np.float64)
    out, npx = moments_kernel(np.ascontiguousarray(img), np.ascontiguousarray(c), radii)
    kk, ll = np.asarray(k), np.asarray(l)
    m00, mx, my, sxx, syy, sxy = out.T
    out_var = 0.5 * (sxx + syy)
    out_max = 0.5 * (sxx + syy) + 0.5 * np.sqrt(4 * sxy**2 + (sxx - syy) ** 2)
    out_mean = m00 / np.maximum(npx, 1)
    out_off = np.stack([mx, my], axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out_aniso = np.stack([sxx - syy, 2.0 * sxy], axis=1) / (sxx + syy)[:, None]
    ok = np.isfinite(out_var)
    return Moments(kk[ok], ll[ok], out_var[ok], out_max[ok], out_mean[ok], out_off[ok], c[ok] + out_off[ok], out_aniso[ok])


NATURAL_VIGNETTING_STEP_PX = 0.25
"""Pixel-grid step (px) of :func:`natural_vignetting_excess_px2`'s quadrature of a white
micro-image (the hard pupil mask's discretisation cancels between the weighted and the uniform
sums, which use the same grid)."""
NATURAL_VIGNETTING_LENS_POINTS = 400
"""Lens-disc points (Vogel spiral) of :func:`natural_vignetting_excess_px2`."""


def natural_vignetting_excess_px2(ra_px: float, rb_px: float, *, lens_radius_px: float, d_px: float) -> float:
    """How much natural vignetting widens a white micro-image, as variance per axis (px²).

    The variance law (module docstring) takes every lens point z of a pixel x that passes the
    main aperture (|x − R_b·z| ≤ R_a) alike; a physical white weighs each by cos θ_X·cos θ_P/r² =
    (1 + |L·z − x|²/d²)⁻² (L the lens radius and d the MLA–sensor distance, px; x from the lens
    axis's foot, here the micro-image centre: the central micro-images), so the pixels near the
    rim, which see the lens's near side, count more, and the micro-image's variance exceeds
    (R_a² + R_b²)/4 by what this returns (``docs/model.md``, "Natural vignetting"; the detector's
    rendered corner weighs its lens points alike, :class:`plenocal.detect.corners.NaturalVignetting`).
    """
    z = vogel_disc(NATURAL_VIGNETTING_LENS_POINTS)
    reach = ra_px + rb_px
    g = np.arange(-reach, reach + NATURAL_VIGNETTING_STEP_PX / 2, NATURAL_VIGNETTING_STEP_PX)
    xx, yy = np.meshgrid(g, g)
    x = np.stack([xx.ravel(), yy.ravel()], axis=1)
    x = x[np.hypot(x[:, 0], x[:, 1]) <= reach]
    lit = np.hypot(x[:, None, 0] - rb_px * z[None, :, 0], x[:, None, 1] - rb_px * z[None, :, 1]) <= ra_px
    q = 1.0 + ((lens_radius_px * z[None, :, 0] - x[:, None, 0]) ** 2 + (lens_radius_px * z[None, :, 1] - x[:, None, 1]) ** 2) / (d_px * d_px)
    weighted = np.sum(lit / (q * q), axis=1)
    uniform = np.sum(lit, axis=1).astype(np.float64)
    r2 = 0.5 * np.sum(x * x, axis=1)
    return float(np.sum(r2 * weighted) / np.sum(weighted) - np.sum(r2 * uniform) / np.sum(uniform))
