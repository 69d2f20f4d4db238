"""Per-pixel virtual depth: each textured micro-image's depth refined pixel by pixel, and a screen
that keeps the pixels whose depth the image determines.

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

**Screen** (:func:`screen_pixels`): a window on a flat part of the scene has no texture of its
own, its cost curve is flat and its minimum is noise (on the PRISM boards 4–10 times the
micro-image's error). A pixel is kept when its cost curve is sharp, :func:`pixel_confidence`
≥ :data:`MIN_CONFIDENCE`, and its own neighbourhood has texture above the matching's residual,
:func:`texture_snr` ≥ :data:`MIN_TEXTURE_SNR`.

The depth belongs to the virtual point that the pixel sees: at υ from the pixel's micro-lens, on
the chief ray through its chief-ray offset e (``points_from_virtual_depth`` with the micro-image's
(k, l) and ``offset_px=e``: a virtual depth is a plane of the virtual image, whatever the offset),
at X = c + e/γ in the central view (:func:`central_view_px`).
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
    matching_lambda,
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
MIN_CONFIDENCE = 0.6
"""A pixel's depth is kept only if its :func:`pixel_confidence`, 1 − c[b]/min(c[0], c[−1]) (how far
the lower end of its cost curve rises above its minimum), is at least this: both ends at least
2.5 times the minimum. On the PRISM boards the pixels' median confidence is 0.1–0.4 (a window on
a flat square: a flat curve); chosen from the kept pixels' errors there and on the sphere scene
at 0.5 / 0.6 / 0.67 / 0.7 (docs/depth.md, "Per-pixel depth")."""
MIN_TEXTURE_SNR = 2.0
"""... and its :func:`texture_snr` at least this: the mean absolute deviation of the grey levels
of its 3 × 3 neighbourhood over its cost at the minimum — the mean absolute difference left between
the matched views, the image's noise and the interpolation's in the same units — so the pixel's
own texture stands out of what the matching cannot explain (chosen with :data:`MIN_CONFIDENCE`)."""
CHUNK = 512
"""Micro-images per kernel call: a Ctrl-C ends between chunks."""


@dataclass(frozen=True, eq=False)
class PixelDepthMap:
    """Per-pixel inverse virtual depth of one raw image.

    Attributes
    ----------
    x, y : (P,) int64 pixel coordinates; micro_image : (P,) index into the grid's ``all_indices``.
    virtual_depth : (P,) υ of the virtual point seen at the pixel (NaN: none); cost : (P,) its
        windowed cost at the lowest hypothesis b, c[b] (mean absolute difference, units of the white).
    offset_px : (P, 2) the pixel's chief-ray offset e from its micro-image's centre (px: its
        observed offset x − c with the pupil-vignetting shift undone).
    margin : (P,) the cost curve's lower end's excess over its minimum, min(c[0], c[−1]) − c[b];
        spread : (P,) the mean absolute deviation of the micro-image's grey levels over the
        pixel's 3 × 3 neighbourhood (both in units of the white). All NaN without a depth.
    settings : what the refinement used; wall_time_s : its duration.
    """

    x: NDArray[np.int64]
    y: NDArray[np.int64]
    micro_image: NDArray[np.int64]
    virtual_depth: FloatArray
    cost: FloatArray
    offset_px: FloatArray
    margin: FloatArray
    spread: FloatArray
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
    lam = matching_lambda(camera)  # the micro-image matching's disparity law
    step = float(step_px) / (lam * camera.grid.diameter_px)
    with np.errstate(divide="ignore"):
        w0 = np.where(vd.ok, 1.0 / np.where(vd.ok, vd.virtual_depth, 1.0), np.nan)
    todo = np.flatnonzero(np.isfinite(w0)).astype(np.int64)
    side = 2 * int(np.ceil(radii.max())) + 2
    slots = side * side
    P = np.asarray(law.intercept_px, dtype=np.float64)
    levels = np.asarray(BLUR_VARIANCES_PX2, dtype=np.float64)

    names = ("w", "cost", "ex", "ey", "margin", "spread")
    parts: dict[str, list[np.ndarray]] = {n: [] for n in ("x", "y", "micro_image", *names)}
    chunk = max(int(chunk), 1)
    for start in range(0, len(todo), chunk):
        sel = todo[start:start + chunk]
        res: dict[str, np.ndarray] = {n: np.empty((len(sel), slots), dtype=np.int64) for n in ("x", "y")}
        res.update({n: np.empty((len(sel), slots)) for n in names})
        pixel_depth_kernel(stack, levels, centres, types, neigh, radii, sel, w0, step, int(half_hypotheses), lam, P,
                           law.slope_px, law.kappa**2, ra, rb, g_table, int(window_radius_px), float(min_window_pixels),
                           *(res[n] for n in ("x", "y", *names)))
        keep = res["x"] >= 0
        res["micro_image"] = np.broadcast_to(sel[:, None], keep.shape)
        for n, arr in res.items():
            parts[n].append(arr[keep])
        if progress is not None:
            progress(min(start + chunk, len(todo)), len(todo))

    def cat(parts: list[np.ndarray], dt: type) -> np.ndarray:
        return np.concatenate(parts).astype(dt) if parts else np.zeros(0, dtype=dt)

    cols = {n: cat(v, np.int64 if n in ("x", "y", "micro_image") else np.float64) for n, v in parts.items()}
    with np.errstate(divide="ignore", invalid="ignore"):
        ups = 1.0 / cols["w"]
    settings = {"step_px": float(step_px), "half_hypotheses": int(half_hypotheses), "window_radius_px": int(window_radius_px),
                "min_window_pixels": int(min_window_pixels), "kappa": float(kappa), "f_number": N,
                "pupil_vignetting": bool(pupil_vignetting), "micro_images": len(todo)}
    offsets = np.column_stack([cols["ex"], cols["ey"]])
    return PixelDepthMap(cols["x"], cols["y"], cols["micro_image"], ups, cols["cost"], offsets, cols["margin"], cols["spread"],
                         settings, time.perf_counter() - t0)


def pixel_confidence(px: PixelDepthMap) -> FloatArray:
    """(P,) confidence in [0, 1) of each pixel's depth: 1 − c[b]/min(c[0], c[−1]) = m/(m + c[b]),
    m the lower end's excess over the minimum (:attr:`PixelDepthMap.margin`); NaN without a depth.
    (The micro-image's confidence is 1 − min/median of its coarse curve.)"""
    with np.errstate(divide="ignore", invalid="ignore"):
        return px.margin / (px.margin + px.cost)


def texture_snr(px: PixelDepthMap) -> FloatArray:
    """(P,) the grey-level spread of each pixel's 3 × 3 neighbourhood over its cost at the minimum
    (:data:`MIN_TEXTURE_SNR`; NaN without a depth)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return px.spread / px.cost


def screen_pixels(
    px: PixelDepthMap, *, min_confidence: float = MIN_CONFIDENCE, min_texture_snr: float = MIN_TEXTURE_SNR
) -> NDArray[np.bool_]:
    """(P,) the pixels whose depth is kept: a depth, :func:`pixel_confidence` ≥ ``min_confidence``
    and :func:`texture_snr` ≥ ``min_texture_snr`` (:data:`MIN_CONFIDENCE`, :data:`MIN_TEXTURE_SNR`)."""
    with np.errstate(invalid="ignore"):
        sharp = pixel_confidence(px) >= min_confidence
        textured = texture_snr(px) >= min_texture_snr
    return np.isfinite(px.virtual_depth) & sharp & textured


def central_view_px(px: PixelDepthMap, vd: VirtualDepthMap, lambda_: float) -> FloatArray:
    """(P, 2) where each pixel's virtual point appears in the central view, X = c_i + e/γ (px),
    e the pixel's chief-ray offset, γ = (1 − λ) + λ/υ at its own υ
    (:func:`plenocal.model.projection.central_view_px` of the point it sees; NaN without a depth)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        gamma = (1.0 - lambda_) + lambda_ / px.virtual_depth
        return vd.centres_px[px.micro_image] + px.offset_px / gamma[:, None]


def cell_medians(positions_px: FloatArray, values: FloatArray, shape: tuple[int, int], *, scale: int) -> FloatArray:
    """(H, W) image, H, W = ``shape``, each cell the median of the values whose position (px of the
    sensor, pixel centres at integers) falls in it (cell (r, c) covers [c·scale − 0.5,
    (c + 1)·scale − 0.5) in x); NaN where none does. Vectorised: one sort."""
    H, W = shape
    pos = np.asarray(positions_px, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        col = np.floor((pos[:, 0] + 0.5) / scale)
        row = np.floor((pos[:, 1] + 0.5) / scale)
    ok = np.isfinite(v) & (col >= 0) & (col < W) & (row >= 0) & (row < H)
    cell = (row[ok] * W + col[ok]).astype(np.int64)
    v = v[ok]
    order = np.lexsort((v, cell))
    cell, v = cell[order], v[order]
    out = np.full(H * W, np.nan)
    if cell.size:
        starts = np.flatnonzero(np.r_[True, cell[1:] != cell[:-1]])
        counts = np.diff(np.r_[starts, cell.size])
        lo = starts + (counts - 1) // 2
        hi = starts + counts // 2
        out[cell[starts]] = 0.5 * (v[lo] + v[hi])
    return out.reshape(H, W)
