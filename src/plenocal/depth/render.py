"""All-in-focus image of a raw frame from its per micro-image virtual depths.

The depth-adaptive patch rendering of focused plenoptic cameras (Lumsdaine & Georgiev, "The
focused plenoptic camera", ICCP 2009; Raytrix's "total focus"), with plenocal's geometry:

- the output is the **central view**: a scene point appears at X, its virtual point projected
  from the exit-pupil centre onto the sensor (:func:`plenocal.model.projection.central_view_px`),
  drawn at 1/``scale`` of the sensor's size (output pixel (x, y) is at X = ((x + ½)·scale − ½,
  (y + ½)·scale − ½), as the depth map's cells);
- micro-image i, at inverse virtual depth w_i = 1/υ_i, sees X at the chief-ray offset
  e = γ_i·(X − c_i) from its centre c_i, γ_i = (1 − λ) + λ·w_i (the matching's disparity factor,
  :mod:`plenocal.depth.matching`; with λ → 1, γ → 1/υ). Its patch is the part of the scene within
  :data:`BLEND_PITCHES` pitches of c_i in X: the cell |X − c_i| ≲ p/2 ⇔ |e| ≲ p·|γ|/2 ≈ p/(2|υ|)
  is the part it adds beyond its neighbours (the patch of size p/|υ|), the rest overlaps theirs
  and is blended. υ < 0 (a virtual image in front of the MLA) makes γ < 0: the patch is
  flipped, as the optics flip it; υ > 0 (behind the MLA, the R12 presets at close range) keeps
  it upright;
- the offset is the **observed** one: the chief-ray offset moved radially by the main aperture's
  vignetting of the lenslet pupil (:mod:`plenocal.model.pupil`, the matching's tables at w_i; on
  the R12-A renders defocused detail sits 30–60 % farther out than its chief ray);
- overlapping patches are blended with the weight (1 − (|X − c_i|/(B·p))²)²·(1 − (|o|/r_i)²)²
  (smooth in X and towards the edge of the used part of the micro-image, radius r_i) times the
  micro-image's **sharpness** 1/(1 + (κ·ρ_t(w_i)/:data:`SHARPNESS_FLOOR_PX`)²): of the lens types
  that see a point, the one in focus at its depth weighs most (σ = κ·ρ, eq:blurradius);
- micro-images without a depth (untextured, unsupported) take the nearest estimated one's
  (:func:`fill_inverse_depths`); those not wholly in the image, or unlit, are not drawn. Output
  pixels that no patch reaches are NaN.

The image is in the devignetted raw's units (1 = the white).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.spatial import cKDTree

from plenocal.depth._render_kernels import accumulate_kernel, patch_kernel
from plenocal.depth.matching import (
    blur_law,
    check_image,
    grid_micro_images,
    micro_image_radii_px,
    micro_images_in_view,
    pupil_radii,
)
from plenocal.errors import DataError
from plenocal.model.camera import PlenopticCamera

FloatArray = NDArray[np.float64]

DEFAULT_SCALE = 4
"""Sensor pixels per output pixel (the depth map's cells: 1020 × 767 px for an R12). The image's
own resolution is about a sample every |υ| sensor px in X (a micro-image sees the scene
magnified by |1/γ| ≈ |υ|), so 1/4 loses detail only where |υ| < 4."""
BLEND_PITCHES = 1.5
"""Radius of a micro-image's patch in X, in pitches (hexagonal: each point is drawn from ~8
micro-images, the nearest weighing most). A larger radius averages more views (less noise) but
is less forgiving of depth errors: a wrong w moves the patches' content by (X − c_i)·Δγ/γ. NCC
with the truth texture, 1.0 / 1.5 / 2.0 pitches: small R12-A plate at 345 mm 0.923 / 0.930 /
0.932; PRISM R12-B board near the square edges (``benchmarks/depth_render.py``) frame 100
0.860 / 0.865 / –, frame 104 0.917 / 0.920 / – (0.75: 0.856, 0.914)."""
RADIUS_FRACTION = 0.65
"""Pixels within this fraction of the micro-image's white radius |R_t(N)| are used (as the
matching's :data:`~plenocal.depth.matching.USABLE_RADIUS_FRACTION`: beyond, devignetting
amplifies the noise and the main aperture cuts the lenslet's pupil)."""
SHARPNESS_FLOOR_PX = 0.5
"""The sharpness weight is 1/(1 + (σ/σ_0)²) with σ = κ·|ρ_t(w)| px and σ_0 this: the blur below
which a view counts as sharp (half a pixel: the Monte-Carlo and pixel-integration blur of a view
in focus). Against equal weights (σ_0 → ∞), NCC with the truth (1 pitch): small R12-A plate at
345 mm 0.923 against 0.917; PRISM frames 100 / 104 near the edges 0.860 / 0.917 against
0.858 / 0.914."""
FILL_REACH_PITCHES = np.inf
"""A micro-image without a depth takes the nearest estimated one's within this many pitches
(default: any distance; an untextured micro-image draws the same grey whatever its depth)."""
CHUNK = 1024
"""Micro-images per kernel call: a Ctrl-C ends between chunks."""


@dataclass(frozen=True, eq=False)
class AllInFocus:
    """The all-in-focus image of one raw frame.

    Attributes
    ----------
    image : (H // scale, W // scale) float64, devignetted grey level (1 = the white); NaN where no
        patch reaches.
    weight : (H // scale, W // scale) the blending weights' sum (0 where NaN).
    scale : sensor px per output px.
    drawn : micro-images drawn; filled : of them, those whose depth came from a neighbour.
    settings : what the rendering used; wall_time_s : its duration.
    """

    image: FloatArray
    weight: FloatArray
    scale: int
    drawn: int
    filled: int
    settings: dict[str, Any] = field(default_factory=dict)
    wall_time_s: float = 0.0


def fill_inverse_depths(
    centres: FloatArray, w: FloatArray, drawable: NDArray[np.bool_], pitch_px: float, *,
    reach_pitches: float = FILL_REACH_PITCHES,
) -> tuple[FloatArray, NDArray[np.bool_]]:
    """(N,) inverse virtual depths with those of the ``drawable`` micro-images without one (NaN)
    taken from the nearest micro-image that has one, within ``reach_pitches``; and (N,) which were
    filled. ``centres`` (N, 2) px."""
    w = np.asarray(w, dtype=np.float64)
    have = np.isfinite(w)
    need = np.asarray(drawable, dtype=bool) & ~have
    out = w.copy()
    filled = np.zeros(len(w), dtype=bool)
    if not have.any() or not need.any():
        return out, filled
    src = np.flatnonzero(have)
    bound = reach_pitches * pitch_px if np.isfinite(reach_pitches) else np.inf
    dist, j = cKDTree(centres[src]).query(centres[need], distance_upper_bound=bound)
    ok = np.isfinite(dist)
    idx = np.flatnonzero(need)[ok]
    out[idx] = w[src[j[ok]]]
    filled[idx] = True
    return out, filled


def render_all_in_focus(
    devignetted: NDArray,
    weight: NDArray,
    camera: PlenopticCamera,
    virtual_depth: FloatArray,
    *,
    kappa: float,
    f_number: float | None = None,
    scale: int = DEFAULT_SCALE,
    blend_pitches: float = BLEND_PITCHES,
    radius_fraction: float = RADIUS_FRACTION,
    sharpness_floor_px: float = SHARPNESS_FLOOR_PX,
    fill_reach_pitches: float = FILL_REACH_PITCHES,
    pupil_vignetting: bool = True,
    chunk: int = CHUNK,
    progress: Callable[[int, int], None] | None = None,
) -> AllInFocus:
    """All-in-focus (central-view) image of one devignetted raw frame.

    Parameters
    ----------
    devignetted, weight : (H, W) from :func:`plenocal.detect.corners.devignette` (the white at the
        frame's f-number); pixels of weight 0 are not sampled.
    camera : the calibrated camera (micro-image grid, lens types, λ, blur model).
    virtual_depth : (N,) υ of every micro-image of the grid's ``all_indices`` (NaN: none; e.g. the
        aggregated :class:`~plenocal.depth.matching.VirtualDepthMap`'s).
    kappa : κ of σ = κ·ρ, for the sharpness weight (0: every view weighs the same).
    f_number : main-lens N of the frame (default the camera's), for the micro-image radii and
        the pupil-vignetting tables.
    scale : :data:`DEFAULT_SCALE`; blend_pitches : :data:`BLEND_PITCHES`; radius_fraction :
        :data:`RADIUS_FRACTION`; sharpness_floor_px : :data:`SHARPNESS_FLOOR_PX`;
        fill_reach_pitches : :data:`FILL_REACH_PITCHES`.
    pupil_vignetting : move the offsets by the pupil-vignetting shift (as the matching does).
    chunk : micro-images per kernel call; ``progress(done, total)`` after each.

    Returns
    -------
    AllInFocus
    """
    t0 = time.perf_counter()
    dv = np.ascontiguousarray(devignetted, dtype=np.float32)
    H, W = check_image(dv, camera)
    if int(scale) < 1:
        raise DataError(f"scale must be a whole number of sensor pixels >= 1, got {scale}")
    scale = int(scale)
    N = float(camera.main_lens.f_number if f_number is None else f_number)
    grid = camera.grid
    k_all, _, centres, types = grid_micro_images(camera)
    ups = np.asarray(virtual_depth, dtype=np.float64)
    if ups.shape != (len(k_all),):
        raise DataError(f"virtual depths: expected one per micro-image ({len(k_all)}), got shape {ups.shape}")
    radii = radius_fraction * micro_image_radii_px(camera, types, N)
    lit = (np.asarray(weight) > 0).astype(np.uint8)
    drawable = micro_images_in_view(camera, centres, radii, weight, min_weight=0.0)
    pitch = grid.diameter_px
    with np.errstate(divide="ignore"):
        w = np.where(drawable & np.isfinite(ups), 1.0 / ups, np.nan)
    w, filled = fill_inverse_depths(centres, w, drawable, pitch, reach_pitches=fill_reach_pitches)
    law = blur_law(camera, kappa=kappa)
    P = np.asarray(law.intercept_px, dtype=np.float64)
    sigma = kappa * np.abs(P[np.clip(types, 0, len(P) - 1)] + law.slope_px * np.nan_to_num(w))
    gain = np.where(np.isfinite(w), 1.0 / (1.0 + (sigma / sharpness_floor_px) ** 2), 0.0)
    ra, rb, g_table = pupil_radii(camera, N, float(radii.max()) + pitch, pupil_vignetting=pupil_vignetting)
    blend_px = float(blend_pitches) * pitch
    half = int(np.ceil(blend_px / scale)) + 1
    h, wd = H // scale, W // scale
    acc = np.zeros((h, wd))
    acc_w = np.zeros((h, wd))
    todo = np.flatnonzero(np.isfinite(w)).astype(np.int64)
    chunk = max(int(chunk), 1)
    side = 2 * half + 1
    values = np.empty((min(chunk, max(len(todo), 1)), side, side))
    weights = np.empty_like(values)
    for start in range(0, len(todo), chunk):
        sel = todo[start:start + chunk]
        v, wt = values[:len(sel)], weights[:len(sel)]
        patch_kernel(dv, lit, centres, types, w, gain, radii, sel, camera.lambda_, P, law.slope_px, ra, rb, g_table,
                     float(scale), blend_px, half, v, wt)
        accumulate_kernel(centres, sel, float(scale), half, v, wt, acc, acc_w)
        if progress is not None:
            progress(min(start + chunk, len(todo)), len(todo))
    with np.errstate(invalid="ignore", divide="ignore"):
        image = np.where(acc_w > 0.0, acc / np.where(acc_w > 0.0, acc_w, 1.0), np.nan)
    settings = {
        "scale": scale, "blend_pitches": float(blend_pitches), "radius_fraction": float(radius_fraction),
        "sharpness_floor_px": float(sharpness_floor_px), "kappa": float(kappa), "f_number": N,
        "fill_reach_pitches": float(fill_reach_pitches) if np.isfinite(fill_reach_pitches) else None, "pupil_vignetting": bool(pupil_vignetting),
    }
    return AllInFocus(image, acc_w, scale, len(todo), int(np.sum(filled)), settings, time.perf_counter() - t0)
