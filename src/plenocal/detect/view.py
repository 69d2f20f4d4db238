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


VIEW_WHITE_PERCENTILE = 99.5
"""The view is scaled to 8 bits for the chessboard detector with this percentile of its lit values
as full scale (a white board square is about 1, a few brighter pixels saturate)."""
CORNER_SEARCH_FLAGS = cv2.CALIB_CB_EXHAUSTIVE
"""OpenCV's sector-based chessboard detector (``findChessboardCornersSB``) with its exhaustive
search: it finds the whole pattern of inner corners or nothing. Its ``CALIB_CB_ACCURACY``
refinement doubles the time (0.03–0.07 s against 0.02–0.04 s on the link set's full-scale views)
and moves no corner by more than a tenth of a view pixel there (its spread against the barycentre
pinhole's projections 3.8–4.8 / 2.1–3.5 px RMS in x / y either way)."""
CORNER_VIEW_SIDE_PX = 240
"""When the chessboard detector does not find the pattern in the view as it is and the view's
shorter side is under this many pixels, the view is enlarged (bilinear, by the least integer
factor that reaches it, at most :data:`CORNER_VIEW_MAX_UPSCALE`) and searched again: the detector
wants squares several pixels wide. A full-scale R12 view (255 × 340) is searched once (a failed
search there costs 0.04–0.15 s as it is, several times that enlarged). Spread of the corners found
against the barycentre pinhole's projections (x / y RMS): the link set's full-scale R12-A frames at
0.8 and 0.97–1.10 z_c (squares ≈ 21 view pixels, node spacing ≈ 225 px) 3.8–4.8 / 2.1–3.5 px as
they are (2.6–4.9 / 1.2–2.2 px enlarged twice); the small r12-a renders at 0.9–1.1 z_c (66 × 83,
squares ≈ 8–10 view pixels, spacing 94–114 px) 3.6–4.3 / 1.2–2.1 px as they are, 0.2–0.35 /
0.25–0.45 px enlarged four times (twice: not found at 0.90–0.95 z_c). Linking needs a tenth of the
spacing."""
CORNER_VIEW_MAX_UPSCALE = 4


def board_corners(view: SceneView, *, columns: int, rows: int, upscale: int | None = None) -> FloatArray | None:
    """The board's whole pattern of inner corners in the scene view, as raw-image positions.

    The view is the scene as the barycentre pinhole sees it (module docstring), so where it shows
    the whole board, OpenCV's chessboard detector (:data:`CORNER_SEARCH_FLAGS`) finds its
    ``columns`` × ``rows`` inner corners there, at the barycentre pinhole's projections of the
    nodes (to the view's blur and resolution: a few pixels of the raw image). Near the MLA's
    conjugate plane, where each corner shows in one micro-image or blurred over all of them and
    no cluster forms, the view is at its sharpest (each micro-image sees a patch a few pitches
    wide): the corners found there link the frame (:func:`plenocal.cli.detect.link_frame`).

    Parameters
    ----------
    view : SceneView
        The frame's view (:func:`scene_view`); unlit points count as black.
    columns, rows : int
        The board's inner corners along its two axes.
    upscale : int, optional
        The view is enlarged this many times (bilinear) before the search. Default: as it is
        (0.02–0.04 s at full R12 scale), then, when the pattern is not found there and the view
        is smaller than :data:`CORNER_VIEW_SIDE_PX`, enlarged to it (at most
        :data:`CORNER_VIEW_MAX_UPSCALE` times).

    Returns
    -------
    ndarray, shape (columns·rows, 2), or None
        Raw-image positions (px) in the detector's order (not node ids: the lattice is linked as
        barycentres are), or None when the detector does not find the whole pattern (or the
        board has fewer than 3 inner corners along an axis, which it does not search for).
    """
    if min(columns, rows) < 3:
        return None
    image = np.nan_to_num(view.image.astype(np.float64), nan=0.0)
    lit = image[np.isfinite(view.image)]
    top = float(np.percentile(lit, VIEW_WHITE_PERCENTILE)) if lit.size else 0.0
    if not top > 0.0:
        return None
    grey = np.clip(image / top * 255.0, 0.0, 255.0).astype(np.uint8)
    if upscale is not None:
        return _pattern(grey, columns=columns, rows=rows, upscale=upscale, step_px=view.step_px)
    enlarged = int(np.clip(np.ceil(CORNER_VIEW_SIDE_PX / max(min(grey.shape), 1)), 1, CORNER_VIEW_MAX_UPSCALE))
    found = _pattern(grey, columns=columns, rows=rows, upscale=1, step_px=view.step_px)
    if found is None and enlarged > 1:
        found = _pattern(grey, columns=columns, rows=rows, upscale=enlarged, step_px=view.step_px)
    return found


def _pattern(grey: NDArray[np.uint8], *, columns: int, rows: int, upscale: int, step_px: float) -> FloatArray | None:
    """:func:`board_corners` in the 8-bit view ``grey`` enlarged ``upscale`` times."""
    searched = cv2.resize(grey, None, fx=upscale, fy=upscale, interpolation=cv2.INTER_LINEAR) if upscale > 1 else grey
    try:
        found, corners = cv2.findChessboardCornersSB(searched, (int(columns), int(rows)), flags=CORNER_SEARCH_FLAGS)
    except cv2.error:  # a view too small for the pattern
        return None
    if not found or corners is None or len(corners.reshape(-1, 2)) != columns * rows:
        return None
    # view pixel (i, j) is centred at raw ((j + 0.5)·step − 0.5, …); an enlarged view's pixel j′ at
    # the view's (j′ + 0.5)/upscale − 0.5
    return (corners.reshape(-1, 2).astype(np.float64) + 0.5) / upscale * step_px - 0.5
