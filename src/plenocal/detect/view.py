"""The scene as the barycentre pinhole sees it: each micro-image's mean devignetted intensity.

Micro-image j shows the scene around the ray from the main lens's (exit-pupil) centre through
its centre c_j, the ray whose sensor point is c_j: the mean of a micro-image is the scene's
brightness in that direction, blurred over the micro-image's field of view (a disc of about
R·|υ| px at virtual depth υ). Seen at the scale of the micro-image pitch, the devignetted raw
image is therefore a picture of the scene in the pinhole camera whose projections the cluster
barycentres are (focal (D + d)/s, centre (u0, v0); :func:`plenocal.calib.extrinsics.pinhole_matrix`).
Linking reads the board's printed extent from it (which cells of the observed lattice are
checker squares, which the border or the background beyond:
:func:`plenocal.calib.linking.image_support`).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
from numpy.typing import NDArray

from plenocal.detect._kernels import weighted_block_means_kernel

FloatArray = NDArray[np.float64]

MIN_LIT_FRACTION = 0.25
"""A point of the view is lit where the white's weight, averaged over about a pitch, is at least
this fraction of its 99th percentile over the image (the image circle's edge, where cat's-eye
micro-images hold a quarter of a central one's light, and the dark sensor corners beyond it are
not)."""


@dataclass(frozen=True)
class SceneView:
    """Mean devignetted intensity around each point of the raw image, on a coarse grid.

    Attributes
    ----------
    image : ndarray of float32, shape (h, w)
        Relative to the white (a white scene ≈ 1), NaN where unlit.
    step_px : float
        Raw-image pixels per view pixel; view pixel (i, j) is centred at raw
        ((j + 0.5)·step − 0.5, (i + 0.5)·step − 0.5).
    """

    image: NDArray[np.float32]
    step_px: float

    def sample(self, uv: FloatArray) -> FloatArray:
        """Bilinear samples at raw-image positions, shape (..., 2) -> (...); NaN outside the
        image or where a neighbouring view pixel is unlit."""
        p = np.asarray(uv, dtype=np.float64)
        h, w = self.image.shape
        x = (p[..., 0] + 0.5) / self.step_px - 0.5
        y = (p[..., 1] + 0.5) / self.step_px - 0.5
        inside = (x >= 0) & (x <= w - 1) & (y >= 0) & (y <= h - 1)
        x0 = np.clip(np.floor(np.where(inside, x, 0.0)).astype(np.int64), 0, max(w - 2, 0))
        y0 = np.clip(np.floor(np.where(inside, y, 0.0)).astype(np.int64), 0, max(h - 2, 0))
        fx, fy = np.clip(x - x0, 0.0, 1.0), np.clip(y - y0, 0.0, 1.0)
        x1, y1 = np.minimum(x0 + 1, w - 1), np.minimum(y0 + 1, h - 1)
        im = self.image.astype(np.float64)
        val = (im[y0, x0] * (1 - fx) + im[y0, x1] * fx) * (1 - fy) + (im[y1, x0] * (1 - fx) + im[y1, x1] * fx) * fy
        return np.where(inside, val, np.nan)


def scene_view(devignetted: NDArray, weight: NDArray, *, pitch_px: float, min_lit_fraction: float = MIN_LIT_FRACTION) -> SceneView:
    """The :class:`SceneView` of one devignetted raw image.

    Normalised convolution at the scale of the micro-image pitch: summed over blocks of about
    half a pitch, then a Gaussian of σ = one pitch, of ``devignetted · weight`` divided by
    that of ``weight`` (the white's own light: dark gaps between micro-images and unlit pixels
    count for nothing).

    Parameters
    ----------
    devignetted, weight : ndarray, shape (H, W)
        From :func:`plenocal.detect.corners.devignette`.
    pitch_px : float
        Micro-image pitch.
    """
    dv = np.ascontiguousarray(devignetted)
    w = np.ascontiguousarray(weight)
    H, W = dv.shape
    step = max(1, round(0.5 * pitch_px))
    h, wd = max(1, H // step), max(1, W // step)
    num, den = weighted_block_means_kernel(dv, w, int(step), int(min(h, H // step)), int(min(wd, W // step)))
    num, den = num.astype(np.float32), den.astype(np.float32)
    sigma = max(pitch_px / step, 0.5)
    num = cv2.GaussianBlur(num, (0, 0), sigma)
    den = cv2.GaussianBlur(den, (0, 0), sigma)
    level = float(np.percentile(den, 99)) if den.size else 0.0
    lit = den >= min_lit_fraction * level if level > 0 else np.zeros(den.shape, dtype=bool)
    image = np.where(lit, num / np.where(lit, den, 1.0), np.nan).astype(np.float32)
    return SceneView(image, float(step))
