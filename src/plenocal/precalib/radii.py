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
    window_radius_px: float | None = None,
    centres_uv: FloatArray | None = None,
) -> Moments:
    """Second moments of micro-images (k, l) of a grey white image, vectorised.

    Parameters
    ----------
    image : (H, W) float array (already dead-pixel filtered).
    grid : the micro-image grid (window centres).
    k, l : (M,) indices; micro-images whose window leaves the image are dropped.
    window_radius_px : default pitch/2 − 0.5.
    centres_uv : (M, 2) window centres (default: the grid nodes).

    Notes
    -----
    The background is the mean of a 1-px ring at the window edge (the dark gaps between
    micro-images); intensities are not clipped, so noise averages out instead of biasing σ².
    """
    img = np.asarray(image, dtype=np.float32)
    H, W = img.shape
    rw = grid.diameter_px / 2.0 - 0.5 if window_radius_px is None else float(window_radius_px)
    c = grid.centres(k, l) if centres_uv is None else np.asarray(centres_uv, dtype=np.float64)
    r = int(np.ceil(rw)) + 1
    inside = (c[:, 0] - r >= 0) & (c[:, 0] + r <= W - 1) & (c[:, 1] - r >= 0) & (c[:, 1] + r <= H - 1)
    c, kk, ll = c[inside], np.asarray(k)[inside], np.asarray(l)[inside]
    offs = np.arange(-r, r + 1)
    oy, ox = np.meshgrid(offs, offs, indexing="ij")
    cu = np.rint(c[:, 0]).astype(np.int64)
    cv = np.rint(c[:, 1]).astype(np.int64)
    out_var = np.empty(len(c))
    out_max = np.empty(len(c))
    out_mean = np.empty(len(c))
    out_off = np.empty((len(c), 2))
    chunk = 4096
    for s in range(0, len(c), chunk):  # chunks bound memory at full scale; vectorised inside
        sl = slice(s, s + chunk)
        patch = img[cv[sl, None, None] + oy[None], cu[sl, None, None] + ox[None]].astype(np.float64)
        dx = (cu[sl, None, None] + ox[None]) - c[sl, 0, None, None]
        dy = (cv[sl, None, None] + oy[None]) - c[sl, 1, None, None]
        dist = np.hypot(dx, dy)
        ring = (dist > rw) & (dist <= rw + 1.0)
        bg = (patch * ring).sum(axis=(1, 2)) / np.maximum(ring.sum(axis=(1, 2)), 1)
        inwin = dist <= rw
        w = np.where(inwin, patch - bg[:, None, None], 0.0)
        m00 = w.sum(axis=(1, 2))
        m00 = np.where(m00 > 0, m00, np.nan)
        mx = (w * dx).sum(axis=(1, 2)) / m00
        my = (w * dy).sum(axis=(1, 2)) / m00
        ddx = dx - mx[:, None, None]
        ddy = dy - my[:, None, None]
        sxx = (w * ddx * ddx).sum(axis=(1, 2)) / m00
        syy = (w * ddy * ddy).sum(axis=(1, 2)) / m00
        sxy = (w * ddx * ddy).sum(axis=(1, 2)) / m00
        out_var[sl] = 0.5 * (sxx + syy)
        out_max[sl] = 0.5 * (sxx + syy) + 0.5 * np.sqrt(4 * sxy**2 + (sxx - syy) ** 2)
        out_mean[sl] = m00 / inwin.sum(axis=(1, 2))
        out_off[sl] = np.stack([mx, my], axis=1)
    ok = np.isfinite(out_var)
    return Moments(kk[ok], ll[ok], out_var[ok], out_max[ok], out_mean[ok], out_off[ok])
