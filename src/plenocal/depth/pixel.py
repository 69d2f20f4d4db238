"""Per-pixel virtual depth: each textured micro-image's depth refined pixel by pixel.

Around each micro-image's (aggregated) inverse virtual depth w_i = 1/υ_i, hypotheses
w_i + h·Δw, h = −:data:`HALF_HYPOTHESES` … :data:`HALF_HYPOTHESES`, Δw = :data:`STEP_PX`/(λ·p)
(:data:`STEP_PX` px of the nearest neighbour's disparity per step), are scored per pixel: every
pixel within the matching's radius is compared with its match in every neighbour micro-image at
that hypothesis (the blur-aware absolute difference of :mod:`plenocal.depth.matching`: the same
disparity, pupil-vignetting tables, relative blur κ), and a pixel's cost is the mean over the
pairs and the pixels of a (2·:data:`WINDOW_RADIUS_PX` + 1)² window around it within its
micro-image. The pixel's w is the vertex of the parabola through its lowest hypothesis and the
two beside it; none (NaN) when the minimum is at an end or the window compares fewer than
:data:`MIN_WINDOW_PIXELS` pixels.

The depth belongs to the virtual point that the pixel sees, at υ from the pixel's micro-lens
(``points_from_virtual_depth`` with the micro-image's (k, l) gives its z exactly: a virtual
depth is a plane of the virtual image, whatever the pixel's offset).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from plenocal.depth._pixel_kernels import pixel_depth_kernel
from plenocal.depth.matching import (
    BLUR_VARIANCES_PX2,
    MIN_OVERLAP_PIXELS,
    RINGS,
    STAR_RINGS,
    USABLE_RADIUS_FRACTION,
    VirtualDepthMap,
    blur_law,
    check_image,
    matching_stack,
    micro_image_radii_px,
    neighbour_table,
    pupil_radii,
)
from plenocal.model.camera import PlenopticCamera

FloatArray = NDArray[np.float64]

STEP_PX = 0.25
"""Hypothesis step, as the change of the nearest neighbour's disparity (px): half the coarse
scan's step of the micro-image search."""
HALF_HYPOTHESES = 4
"""Hypotheses each side of the micro-image's estimate: ±1 px of the nearest neighbour's
disparity (the micro-image estimates' spread on the PRISM frames is ~3 % of υ, 0.1–0.3 px)."""
WINDOW_RADIUS_PX = 2
"""The per-pixel cost is summed over a (2·this + 1)² window (5 × 5 px)."""
MIN_WINDOW_PIXELS = MIN_OVERLAP_PIXELS
"""A pixel gets a depth only if its window compared at least this many pixels (over the pairs)
at every hypothesis (the micro-image matching's minimum overlap of a pair)."""
CHUNK = 512
"""Micro-images per kernel call: a Ctrl-C ends between chunks."""


@dataclass(frozen=True, eq=False)
class PixelDepthMap:
    """Per-pixel inverse virtual depth of one raw image.

    Attributes
    ----------
    x, y : (P,) int64 pixel coordinates; micro_image : (P,) index into the grid's ``all_indices``.
    virtual_depth : (P,) υ of the virtual point seen at the pixel (NaN: none); cost : (P,) its
        windowed cost (mean absolute difference, units of the white).
    settings : what the refinement used; wall_time_s : its duration.
    """

    x: NDArray[np.int64]
    y: NDArray[np.int64]
    micro_image: NDArray[np.int64]
    virtual_depth: FloatArray
    cost: FloatArray
    settings: dict[str, Any] = field(default_factory=dict)
    wall_time_s: float = 0.0

    def image(self, shape: tuple[int, int]) -> NDArray[np.float32]:
        """(H, W) float32 υ at every refined pixel, NaN elsewhere."""
        out = np.full(shape, np.nan, dtype=np.float32)
        out[self.y, self.x] = self.virtual_depth
        return out


def refine_pixel_depths(
    devignetted: NDArray,
    weight: NDArray,
    camera: PlenopticCamera,
    vd: VirtualDepthMap,
    *,
    kappa: float,
    f_number: float | None = None,
    step_px: float = STEP_PX,
    half_hypotheses: int = HALF_HYPOTHESES,
    window_radius_px: int = WINDOW_RADIUS_PX,
    min_window_pixels: int = MIN_WINDOW_PIXELS,
    pupil_vignetting: bool = True,
    stack: NDArray[np.float32] | None = None,
    chunk: int = CHUNK,
    progress: Callable[[int, int], None] | None = None,
) -> PixelDepthMap:
    """Per-pixel virtual depth of the micro-images of ``vd`` that have one.

    Parameters
    ----------
    devignetted, weight : (H, W) as for :func:`~plenocal.depth.matching.estimate_virtual_depths`.
    camera : the calibrated camera; vd : the per micro-image depths (e.g. aggregated) to refine.
    kappa, f_number, pupil_vignetting : as for the micro-image matching.
    step_px, half_hypotheses, window_radius_px, min_window_pixels : :data:`STEP_PX`,
        :data:`HALF_HYPOTHESES`, :data:`WINDOW_RADIUS_PX`, :data:`MIN_WINDOW_PIXELS`.
    stack : the blur stack of ``devignetted`` if already made, with every level
        (:func:`~plenocal.depth.matching.matching_stack` without ``n_levels``; ValueError otherwise).
    chunk : micro-images per kernel call; ``progress(done, total)`` after each.

    Returns
    -------
    PixelDepthMap
    """
    t0 = time.perf_counter()
    dv = np.asarray(devignetted)
    check_image(dv, camera)
    N = float(camera.main_lens.f_number if f_number is None else f_number)
    centres = np.ascontiguousarray(vd.centres_px, dtype=np.float64)
    types = np.ascontiguousarray(vd.types, dtype=np.int64)
    radii = USABLE_RADIUS_FRACTION * micro_image_radii_px(camera, types, N)
    if stack is None:
        stack = matching_stack(dv, weight)
    elif stack.ndim != 3 or stack.shape[:2] != dv.shape or stack.shape[2] != len(BLUR_VARIANCES_PX2):
        # the kernel reads every level it may need (its hypotheses reach past the search's range)
        raise ValueError(f"stack must be the full matching stack of the image, ({dv.shape[0]}, {dv.shape[1]}, "
                         f"{len(BLUR_VARIANCES_PX2)}) (matching_stack without n_levels), got {stack.shape}")
    neigh, _ = neighbour_table(centres, camera.grid.diameter_px, rings=RINGS, star_rings=STAR_RINGS)
    law = blur_law(camera, kappa=kappa)
    ra, rb, g_table = pupil_radii(camera, N, float(radii.max()), pupil_vignetting=pupil_vignetting)
    lam = camera.lambda_
    step = float(step_px) / (lam * camera.grid.diameter_px)
    with np.errstate(divide="ignore"):
        w0 = np.where(vd.ok, 1.0 / np.where(vd.ok, vd.virtual_depth, 1.0), np.nan)
    todo = np.flatnonzero(np.isfinite(w0)).astype(np.int64)
    side = 2 * int(np.ceil(radii.max())) + 2
    slots = side * side
    xs, ys, mis, ws, cs = [], [], [], [], []
    P = np.asarray(law.intercept_px, dtype=np.float64)
    levels = np.asarray(BLUR_VARIANCES_PX2, dtype=np.float64)
    chunk = max(int(chunk), 1)
    for start in range(0, len(todo), chunk):
        sel = todo[start:start + chunk]
        ox = np.empty((len(sel), slots), dtype=np.int64)
        oy = np.empty_like(ox)
        ow = np.empty((len(sel), slots))
        oc = np.empty_like(ow)
        pixel_depth_kernel(stack, levels, centres, types, neigh, radii, sel, w0, step, int(half_hypotheses), lam, P,
                           law.slope_px, law.kappa**2, ra, rb, g_table, int(window_radius_px), float(min_window_pixels),
                           ox, oy, ow, oc)
        keep = ox >= 0
        xs.append(ox[keep])
        ys.append(oy[keep])
        mis.append(np.broadcast_to(sel[:, None], ox.shape)[keep])
        ws.append(ow[keep])
        cs.append(oc[keep])
        if progress is not None:
            progress(min(start + chunk, len(todo)), len(todo))
    def cat(parts: list[np.ndarray], dt: type) -> np.ndarray:
        return np.concatenate(parts).astype(dt) if parts else np.zeros(0, dtype=dt)

    w = cat(ws, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ups = 1.0 / w
    settings = {"step_px": float(step_px), "half_hypotheses": int(half_hypotheses), "window_radius_px": int(window_radius_px),
                "min_window_pixels": int(min_window_pixels), "kappa": float(kappa), "f_number": N,
                "pupil_vignetting": bool(pupil_vignetting), "micro_images": len(todo)}
    return PixelDepthMap(cat(xs, np.int64), cat(ys, np.int64), cat(mis, np.int64), ups, cat(cs, np.float64), settings,
                         time.perf_counter() - t0)
