"""Per micro-image virtual depth by blur-aware matching against its neighbours.

The reference is libpleno's ``processing/depth`` and ``optimization/errors/disparity.cpp``
(Labussière et al., CVIU 2023): for a hypothesis υ, each neighbour micro-image j is shifted by
the disparity δ = (c_i − c_j)·((1 − λ)υ + λ)/υ (their eq. 24: what :func:`plenocal.detect.clusters.
plenoptic_point_fit`'s p_i = λ(1 − 1/υ)·c_i + K says of one point's images), the sharper of the
two views is blurred to the other's blur (σ_r² = κ²·|ρ_i² − ρ_j²|, ρ from eq:blurradius at υ for
each lens type: the relative blur of the paper's §5.3, eq:relblurradius, with plenocal's σ = κ·ρ —
libpleno's κ multiplies ρ², ours ρ), and the two are compared by the mean absolute difference
over their overlap (the reference's normalised SAD), averaged over the pairs. Here:

- the search runs in w = 1/υ, in which the disparity is linear: a coarse scan of
  [w_min, w_max] (default |υ| ≥ 2, the reference's limit: closer, the micro-images hardly
  overlap) in steps that move the nearest neighbour's disparity by :data:`COARSE_STEP_PX` (first
  ring, a quarter of the pixels), then the vertex of a parabola through full costs (every
  neighbour, half the pixels) half a step apart around the coarse minimum (:data:`REFINE_MODE`;
  libpleno: golden section);
- the blurred views come from a stack of Gaussian blurs of the devignetted image (normalised by
  the blurred white mask, as the reference's ``GAUSSIAN_BLUR`` method), interpolated in variance;
- micro-images whose grey-level spread is below :data:`MIN_GREY_SPREAD` are not matched
  (the reference's contrast filter);
- the confidence is 1 − minimum/median of the coarse cost curve: 0 for a flat curve, → 1 for a
  deep, isolated minimum.

Not here yet: depth scaling (per-pixel refinement: :mod:`plenocal.depth.pixel`; the all-in-focus image: :mod:`plenocal.depth.render`).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import cv2
import numba
import numpy as np
from numpy.typing import NDArray
from scipy.spatial import cKDTree

from plenocal.depth._kernels import (
    REFINE_COARSE_RECENTRED,
    REFINE_PARABOLA,
    STATUS_AT_BOUND,
    STATUS_FLAT,
    STATUS_NO_PAIRS,
    STATUS_NOT_REFINED,
    STATUS_OK,
    STATUS_OUTSIDE,
    TABLE_STEP_PX,
    centroid_table,
    cost_curve_kernel,
    micro_image_spread_kernel,
    normalised_levels_kernel,
    search_kernel,
    star_mask_kernel,
    texture_centroid_kernel,
)
from plenocal.depth._kernels import (
    REFINE_COMMON_PIXELS as REFINE_COMMON_PIXELS,
)
from plenocal.depth._kernels import (
    REFINE_RECENTRED as REFINE_RECENTRED,
)
from plenocal.depth._kernels import (
    REFINE_VARYING as REFINE_VARYING,
)
from plenocal.errors import DataError
from plenocal.model.camera import PlenopticCamera, RhoForm
from plenocal.model.projection import blur_radius_mm, lens_distances, micro_lens_centres
from plenocal.model.white import radius_law, radius_law_at

FloatArray = NDArray[np.float64]

MIN_ABS_VIRTUAL_DEPTH = 2.0
"""|υ| below this is not estimable (the reference's limit): the nearest neighbour's disparity
exceeds half the pitch and the views hardly overlap. The default search is |w| = 1/|υ| ≤ 1/2."""
USABLE_RADIUS_FRACTION = 0.65
"""The devignetted micro-image is compared out to this fraction of its white radius |R_t(N)|.
Farther out the white falls off (devignetting amplifies noise: the relative spread of a uniform
grey plate doubles from 0.6 to 0.85 of the radius) and the main aperture vignettes the lenslet's
pupil, which changes the blur there. PRISM translation frames, central 1400 × 1000 px, median
|z − z_true|/z after aggregation at 650 / 450 mm: 1.40 / 1.12 % at 0.85, 1.20 / 0.72 % at 0.75,
0.88 / 0.62 % at 0.65, 1.30 / 1.17 % at 0.5; small R12-A renders at 250 / 300 mm: 0.26 / 0.20 %
at 0.85, 0.53 / 0.11 % at 0.65. Fewer pixels also make it 2–2.5 times faster than 0.85."""
MIN_GREY_SPREAD = 0.1
"""A micro-image is textured when the mean absolute deviation of its devignetted grey levels
within :data:`TEXTURE_RADIUS_FRACTION` of its radius, relative to their mean, is at least this.
Measured on the small R12-A renders (32 rays, white 64 rays): a uniform grey plate 0.029–0.052
(10th–100th percentile; Monte-Carlo noise amplified by the white's fall-off), the checkerboard
filling the view 0.26 at the 10th percentile. The reference's filter is an absolute standard
deviation of 5/255 (its ``is_contrasted_enough``)."""
TEXTURE_RADIUS_FRACTION = 0.6
"""The texture screen looks within this fraction of the white radius (the noise of the
devignetted image doubles from 0.6 to 0.85 of it)."""
COARSE_STEP_PX = 0.5
"""Step of the coarse scan, as the change of the nearest neighbour's disparity (px)."""
SEARCH_MARGIN_STEPS = 1
"""The coarse scan reaches this many of its steps beyond each end of the searched range of w
(:func:`coarse_grid`), where no physical limit stops it. A coarse minimum at the scan's first or last
hypothesis has no bracket (``STATUS_AT_BOUND``, no depth), so without the margin a plane within
one step of an end loses the micro-images whose minimum falls on the end and keeps the others,
all on one side of it: its median moves into the range. Measured without it on plenocal's R12-C
render through the double-Gauss (`plenocal run` defaults, range 408–5 025 mm, one coarse step
≈ 0.021 in w): the boards at 400 / 450 / 500 mm came out +17.6 / +11.7 / +6.2 % (`evaluate`'s
on-board medians); unscaled, the median z of the 400 / 500 mm boards was 474.6 / 515.6 mm with that
range and 408.4 / 493.0 mm with 300–5 000 mm (docs/depth.md, "The search's ends")."""
GOLDEN_ITERATIONS = 6
"""Golden-section iterations on the coarse bracket (2 steps wide, 1 px of the nearest
neighbour's disparity): it shrinks by 0.618⁶ ≈ 1/18, to ~0.06 px, and the estimate is the better
of its two interior points. PRISM translation frames 100–104 (aggregated median |z − z_true|/z,
with the quincunx refinement): 0.89 / 0.61 / 0.50 / 0.48 / 0.31 % against 0.90 / 0.59 / 0.49 /
0.46 / 0.34 % with 9 iterations and every pixel; the noise of the estimates (3 % per micro-image)
dwarfs the bracket."""
RINGS = 2.0
"""Neighbours within this many pitches of a micro-image take part (hexagonal: 18, the two rings
that see a point at |υ| ≲ 4 with a large overlap; farther ones overlap only at larger |υ|)."""
STAR_RINGS = 4.0
"""Beyond :data:`RINGS`, the neighbours along the lattice's directions up to this many pitches
take part where they overlap: far points (large |υ|) are seen in micro-images many pitches
apart, whose disparities are larger. Small R12-A renders, median |z − z_true|/z after
aggregation at 250 mm (υ 16.5) / 300 mm (υ 8.9): 0.81 / 0.12 % with two rings only, 0.26 / 0.20 %
with the star to 4 pitches, 0.36 / 0.19 % to 6."""
COARSE_RINGS = 1.0
"""The coarse scan uses the neighbours within this many pitches (the first ring)."""
COARSE_STRIDE_PX = 2
"""The coarse scan compares pixels on a grid of this step (a quarter of them)."""
REFINE_MODE = REFINE_PARABOLA
"""How the coarse minimum is refined: :data:`~plenocal.depth._kernels.REFINE_PARABOLA`, the
vertex of the parabola through the full costs at the coarse minimum and half a coarse step
either side (4–5 cost evaluations), or ``REFINE_GOLDEN``, :data:`GOLDEN_ITERATIONS` of golden
section (8). PRISM translation frames 100–104 (quincunx), per micro-image / aggregated median
|z − z_true|/z: parabola 3.26 / 3.47 / 2.89 / 3.83 / 1.54 % and 0.99 / 0.59 / 0.42 / 0.40 /
0.29 %, displacement errors 3.6 / 0.3 / 2.3 / 2.4 %; golden 3.79 / 3.95 / 3.00 / 3.65 / 1.98 %
and 0.91 / 0.62 / 0.48 / 0.47 / 0.32 %, 3.6 / 1.1 / 4.6 / 3.1 %. Tried and left (2026-11-26): the
equiangular vertex (two lines of opposite slopes through the same three costs, exact for a
V-shaped SAD): aggregated 0.90 / 0.62 / 0.65 / 0.59 / 0.21 %, signed −0.78 / +0.07 / −0.41 / +0.10 /
+0.06 % against the parabola's −0.77 / −0.33 / −0.28 / −0.06 / +0.13 % — the cost summed over
pairs and blurred is rounder than a V, and the board steps come out worse (7.7 % for the first)."""
REFINE_COMMON = REFINE_COARSE_RECENTRED
"""How the parabola refinement samples the cost (:mod:`plenocal.depth._kernels`): REFINE_VARYING
(each hypothesis' own overlapping pixels, the vertex through samples on the coarse grid),
REFINE_COMMON_PIXELS (the pixels every sample compares), REFINE_RECENTRED (that, then a parabola
re-centred on its vertex), REFINE_RECENTRED_VARYING (REFINE_VARYING, then re-centred) or
REFINE_COARSE_RECENTRED (one parabola centred on the coarse curve's vertex). PRISM R12-B translation frames 100–104, truth camera, aggregated signed
median |z − z_true|/z with the coarse grid shifted by 0 / ½ / ¼ of its step: varying −0.25 / −0.27 /
−0.37 % … (frame 101: −0.19 / −0.30 / −0.04 %; 103: +0.04 / 0.00 / +0.11 %: the estimate locks to
the grid, ±0.1–0.2 % of z per frame, 1–3 % of a 50 mm step); re-centred, with this module's other
corrections: −0.94 / −0.95 / −0.96, −0.67 / −0.70 / −0.68, −0.53 / −0.54 / −0.53, −0.22 / −0.24 /
−0.22, −0.08 / −0.08 / −0.08 %. A cost over pixels that enter and leave the overlap as w changes
also drifts: the common pixels move the estimates by −1.1 … −1.4 % of w (docs/depth.md). The
refinement evaluates 8 costs instead of 3–4; the first parabola, which only finds the vertex the
second samples about, compares a quarter of the pixels (every other row and column): 10–13 % less
CPU on the PRISM frames (frame 100 3.84 → 3.45 s at load ≤ 1.2), the boards' signed error the same
to 0.02 %, end to end PRISM displacements 0.53 / 0.15 / 0.14 / 0.22 % (0.53 / 0.18 / 0.18 / 0.26
with every pixel), real optics 1.61 / 0.74 / 0.64 / 0.04 % (1.51 / 0.65 / 0.58 / 0.11).
REFINE_COARSE_RECENTRED (default since 2026-11-26) centres the samples on the coarse curve's own
vertex instead, which costs nothing more, and drops the first parabola: 3–4 full costs per refined
micro-image instead of 6–7, 24–26 % less time (frame 100 3.01 → 2.25 s, idle machine), the grid's
phase moves the 300 mm render's median w by 0.006 % (0.031 % before), end to end the same figures
within their noise (PRISM displacements 0.51 / 0.15 / 0.14 / 0.06 %, on-board 0.34 / 0.28 / 0.20 /
0.22 / 0.16 %; real optics 1.96 / 0.57 / 0.74 / 0.05 %, on-board 0.74 / 0.59 / 0.55 / 0.49 /
0.52 %)."""
REFINE_STRIDE_PX = 0
"""The golden-section refinement compares the pixels on a grid of this step, 0 for the
quincunx (x + y even: half of them, every row and column). PRISM translation frames 100–104,
aggregated median |z − z_true|/z with 5 iterations: quincunx 0.97 / 0.68 / 0.45 / 0.48 / 0.33 %,
every other row and column (a quarter) 0.99 / 0.74 / 0.52 / 0.58 / 0.40 %, every pixel (9
iterations) 0.90 / 0.59 / 0.49 / 0.46 / 0.34 %; the quincunx halves the refinement's time."""
MIN_OVERLAP_PIXELS = 12
"""A pair counts only if at least this many pixels overlap (the reference: 9)."""
BLUR_VARIANCES_PX2 = (0.0, 0.25, 0.5, 1.0, 1.5, 2.25, 3.0, 4.0, 6.0, 9.0)
"""Variances (px²) of the Gaussian blur stack; σ_r beyond 3 px is clamped to 3 px (on R12
cameras with κ ≈ 0.3–0.6, σ_r ≲ 2 px over |υ| ≥ 2)."""
INTERPOLATION_BLUR_VARIANCE_PX2 = 0.5
"""Both views are blurred by a Gaussian of this variance (px²) before they are compared (every
level of the matching's stack: :func:`matching_stack`). View i is read at its pixels, view j
bilinearly between pixels at the disparity's fractional part f, which low-passes j by a variance
f(1 − f) per axis that changes with the hypothesis: the cost's minimum locks towards some
disparities, a bias of υ periodic in the disparity and the same for every micro-image of a plane
(small R12-A renders of a noise plate 296–372 mm in 1–2 mm steps, υ 9.4 … 2.0: the median board
error oscillates ±0.2 % about its trend, RMS 0.11–0.12 % about a cubic in 1/υ; with 0.25 / 0.5 /
1.0 px² 0.063 / 0.045 / 0.040 %, the per micro-image scatter unchanged, 0.176 / 0.164 / 0.172 %
MAD). What is left is a smooth function of 1/υ, which the depth scaling takes
(:mod:`plenocal.depth.scaling`). The texture screen reads the unblurred image."""
MIN_BLURRED_MASK = 1e-3
"""A blurred level is 0 where the equally blurred mask of lit pixels is below this (no lit pixel
near)."""
LEVELS_PER_PASS = 3
"""The blur stack's levels are blurred this many at a time and written into the (H, W, L) stack
in one pass (:func:`blur_stack`): each pass moves the whole stack through the cache. The blurred
levels wait in this many full-frame two-channel float32 images (300 MB at full R12 scale, 200 MB more
than one at a time). PRISM R12-B frame 100, the matching's nine levels, two sets of 6 and 8
interleaved runs (2026-11-26, load ~4): median 0.68 and 0.75 s against 0.75 and 0.85 s one at a
time, the same bytes. (Held in numpy arrays instead of OpenCV's, which numpy asks the kernel to back with
huge pages, the passes took 0.61–0.63 s in some runs and 1.5–1.8 s in others.)"""
MIN_WHITE_FRACTION = 0.1
"""Pixels whose white is below this fraction of its bright level are gaps (weight 0)."""
CHUNK = 1024
"""Micro-images per kernel call: a Ctrl-C ends between chunks."""
THREAD_TASK = 8
"""Micro-images per task of the search kernel's threads, handed out as the threads come free
(numba's ``parallel_chunksize``; by default each thread gets one fixed share of a chunk). The
micro-images' work differs (those refined cost about twice the others; a PRISM frame's board
fills some chunks' halves and not others): with fixed halves of each chunk, one thread idles
5–8 % of the matching on PRISM frames 100, 102, 104 (estimated from the statuses, a refined
micro-image counted as two others). Each micro-image writes only its own outputs, so the
results are the same bytes whatever the task size."""


@dataclass(frozen=True)
class BlurLaw:
    """ρ_t(w) = P_t + Q·w px, w = 1/υ, for each lens type t (eq:blurradius with a = −υ·d_v), and κ."""

    intercept_px: tuple[float, ...]
    slope_px: float
    kappa: float


def blur_law(camera: PlenopticCamera, *, kappa: float) -> BlurLaw:
    """The physical blur radius of each lens type against w = 1/υ, from the model.

    r = (A/2)(d(k, l)/f_t − 1 − d(k, l)/a) with a = −υ·d(k, l) (the lens' own distance to the
    sensor: what the tracer, PRISM and the disparity see; the model's HEAD ρ form) is linear in w;
    its coefficients are read off the model's :func:`~plenocal.model.projection.blur_radius_mm`
    at w = ±1, with d(k, l) the median over the lenses of each type. Under the PRISM camera's
    tilted MLA the legacy form's d (at the MLA frame's corner) is 3 % below that median, which
    changes ρ by ~0.2 px and the pupil-vignetting shift with it.
    """
    if camera.n_types == 0:
        return BlurLaw((0.0,), 0.0, float(kappa))
    s = camera.sensor.pixel_size_mm
    k, l = camera.mla.lattice.all_indices()
    lens_types = camera.mla.types.type_of(k, l)
    _, d_all = lens_distances(camera, micro_lens_centres(camera, k, l))
    types = np.arange(camera.n_types)
    d_t = np.array([np.median(d_all[lens_types == t]) if np.any(lens_types == t) else camera.d_mm for t in types])
    head = camera.replace(rho_form=RhoForm.HEAD)
    plus = blur_radius_mm(head, -d_t, types, d_lens_mm=d_t) / s  # υ = +1
    minus = blur_radius_mm(head, d_t, types, d_lens_mm=d_t) / s  # υ = −1
    P = 0.5 * (plus + minus)
    Q = 0.5 * (plus - minus)
    return BlurLaw(tuple(float(x) for x in P), float(np.mean(Q)), float(kappa))


def blur_stack(devignetted: NDArray, weight: NDArray, *, variances: tuple[float, ...] = BLUR_VARIANCES_PX2) -> NDArray[np.float32]:
    """(H, W, L) float32: the devignetted image blurred by Gaussians of the given variances (px²),
    each normalised by the equally blurred mask of lit pixels (the gaps do not darken the borders).
    The levels of a pixel are adjacent in memory (the kernels read a pixel at two levels). The
    levels are blurred :data:`LEVELS_PER_PASS` at a time and written into the stack together; the
    image and its mask are blurred together, as the two channels of one (H, W, 2) image, a third
    faster than two calls: OpenCV blurs each channel as it blurs one image alone, to a float32
    rounding in a row's last partial vector (the same bytes on rows of whole vectors, such as
    R12's 4080 px with AVX2; ``tests/depth/test_matching.py``).
    """
    img = np.asarray(devignetted, dtype=np.float32)
    mask = (np.asarray(weight) > 0).astype(np.float32)
    pair = np.empty((*img.shape, 2), dtype=np.float32)  # (masked image, mask)
    np.multiply(img, mask, out=pair[..., 0])
    pair[..., 1] = mask
    out = np.empty((*img.shape, len(variances)), dtype=np.float32)
    for k0 in range(0, len(variances), LEVELS_PER_PASS):
        blurred, min_dens = [], []
        for var in variances[k0:k0 + LEVELS_PER_PASS]:
            if var <= 0.0:  # masked / 1 on lit pixels, 0 elsewhere
                blurred.append(pair)
                min_dens.append(0.5)
                continue
            blurred.append(cv2.GaussianBlur(pair, (0, 0), float(np.sqrt(var)), borderType=cv2.BORDER_REPLICATE))
            min_dens.append(MIN_BLURRED_MASK)
        count = len(blurred)  # the tuple padded to LEVELS_PER_PASS: one tuple type, one compilation
        blurred += [blurred[0]] * (LEVELS_PER_PASS - count)
        min_dens += [0.0] * (LEVELS_PER_PASS - count)
        normalised_levels_kernel(tuple(blurred), np.int64(count), np.asarray(min_dens, dtype=np.float32), out, k0)
    return out


def matching_stack(devignetted: NDArray, weight: NDArray, *, n_levels: int | None = None) -> NDArray[np.float32]:
    """The stack the matching compares: :func:`blur_stack` at :data:`BLUR_VARIANCES_PX2` each plus
    :data:`INTERPOLATION_BLUR_VARIANCE_PX2` (level k stands for the relative blur
    ``BLUR_VARIANCES_PX2[k]``); its first ``n_levels`` only (default all:
    :func:`blur_levels_read` says how many a search reads)."""
    variances = BLUR_VARIANCES_PX2[:n_levels] if n_levels is not None else BLUR_VARIANCES_PX2
    return blur_stack(devignetted, weight, variances=tuple(v + INTERPOLATION_BLUR_VARIANCE_PX2 for v in variances))


BLUR_LEVEL_MARGIN = 1e-6
"""Relative margin on the largest relative blur variance when :func:`blur_levels_read` chooses
the levels: it covers the rounding of ρ and of the refinement's hypotheses (the parabola's outer
points are the coarse grid's neighbours recomputed, a few ulps from them)."""


def blur_levels_read(law: BlurLaw, w_range: tuple[float, float]) -> int:
    """How many of the stack's levels (the first ones) the matching reads over ``w_range``.

    The relative blur variance of a pair, σ_r² = κ²·|ρ_a(w)² − ρ_b(w)²| (eq:relblurradius) with
    ρ_t(w) = P_t + Q·w, is |(P_a − P_b)(P_a + P_b + 2Q·w)|·κ²: linear in w within the absolute
    value, so largest at an end of the range. A variance is read by interpolating the levels
    either side (:func:`plenocal.depth._kernels._level`), so the levels up to the first at or
    above the largest variance (times 1 + :data:`BLUR_LEVEL_MARGIN`) are the ones read; all of
    them when it is beyond the last. Leaving the others out changes no cost: on PRISM R12-B (κ
    0.72) the largest is 4.2 px², and the last level (9 px², the largest blur and the costliest
    to make) is never read.
    """
    P = np.asarray(law.intercept_px, dtype=np.float64)
    rho2 = (P[None, :] + law.slope_px * np.asarray(w_range, dtype=np.float64)[:, None]) ** 2  # (2, T)
    s2 = law.kappa**2 * float(np.max(np.abs(rho2[:, :, None] - rho2[:, None, :])))
    levels = np.asarray(BLUR_VARIANCES_PX2)
    above = np.flatnonzero(levels >= s2 * (1.0 + BLUR_LEVEL_MARGIN))
    return max(int(above[0]) + 1, 2) if above.size else len(levels)


NEIGHBOUR_TABLES_KEPT = 4
"""Neighbour tables kept per process (:func:`neighbour_table`): the matching's and the aggregation's
of a camera or two. A table depends only on the grid, so the frames of a sequence share it; on
the PRISM R12-B grid (26 k micro-images) the two cost 0.35 s a frame."""
_NEIGHBOUR_TABLES: collections.OrderedDict[tuple[Any, ...], tuple[NDArray[np.int64], int]] = collections.OrderedDict()
_NEIGHBOUR_TABLES_LOCK = threading.Lock()


def neighbour_table(
    centres: FloatArray, pitch_px: float, *, rings: float = RINGS, star_rings: float = STAR_RINGS,
) -> tuple[NDArray[np.int64], int]:
    """(N, M) indices of each micro-image's neighbours, nearest first (−1 pads): every one within
    ``rings`` pitches, and beyond, up to ``star_rings`` pitches, those along the lattice's
    first-ring directions (within a quarter pitch of the line). Also returns how many lie within
    :data:`COARSE_RINGS` pitches at most. The last :data:`NEIGHBOUR_TABLES_KEPT` are kept (by the
    centres' bytes and the arguments); callers get a copy."""
    c = np.ascontiguousarray(centres, dtype=np.float64)
    key = (hashlib.blake2b(c.tobytes(), digest_size=16).digest(), c.shape, float(pitch_px), float(rings), float(star_rings))
    with _NEIGHBOUR_TABLES_LOCK:
        found = _NEIGHBOUR_TABLES.get(key)
        if found is not None:
            _NEIGHBOUR_TABLES.move_to_end(key)
    if found is None:
        found = _neighbour_table(c, float(pitch_px), rings=float(rings), star_rings=float(star_rings))
        with _NEIGHBOUR_TABLES_LOCK:
            _NEIGHBOUR_TABLES[key] = found
            while len(_NEIGHBOUR_TABLES) > NEIGHBOUR_TABLES_KEPT:
                _NEIGHBOUR_TABLES.popitem(last=False)
    table, n_coarse = found
    return table.copy(), n_coarse


def _neighbour_table(centres: FloatArray, pitch_px: float, *, rings: float, star_rings: float) -> tuple[NDArray[np.int64], int]:
    tree = cKDTree(centres)
    reach = max(rings, star_rings)
    kmax = int(np.ceil(3.7 * (reach + 0.5) ** 2)) + 1
    dist, idx = tree.query(centres, k=min(kmax, len(centres)), distance_upper_bound=(reach + 0.1) * pitch_px, workers=-1)
    dist, idx = dist[:, 1:], idx[:, 1:]
    found = np.isfinite(dist)
    idx = np.where(found, idx, 0)
    keep = found & (dist <= (rings + 0.1) * pitch_px)
    if star_rings > rings and len(centres):
        # the first-ring directions of the micro-image nearest the grid's centre
        centre = int(np.argmin(np.sum((centres - centres.mean(axis=0)) ** 2, axis=1)))
        first = found[centre] & (dist[centre] <= 1.1 * pitch_px)
        dirs = centres[idx[centre, first]] - centres[centre]
        dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
        keep |= star_mask_kernel(centres, idx, found, np.ascontiguousarray(dirs), 0.25 * pitch_px)
    order = np.argsort(np.where(keep, dist, np.inf), axis=1, kind="stable")
    idx = np.take_along_axis(np.where(keep, idx, -1), order, axis=1).astype(np.int64)
    dist = np.take_along_axis(np.where(keep, dist, np.inf), order, axis=1)
    m = int(np.max(np.sum(idx >= 0, axis=1))) if len(idx) else 0
    n_coarse = int(np.max(np.sum(dist <= (COARSE_RINGS + 0.1) * pitch_px, axis=1))) if len(idx) else 0
    return np.ascontiguousarray(idx[:, :max(m, 1)]), max(n_coarse, 1)


def select_neighbours(neigh: NDArray[np.int64], centres: FloatArray, types: NDArray[np.int64], pitch_px: float, *,
                      baselines: tuple[float, float] | None = None, pair_types: str | None = None
                      ) -> tuple[NDArray[np.int64], int]:
    """The neighbour table ``neigh`` (N, M) restricted to the neighbours whose centre lies
    ``baselines`` = (lo, hi) pitches away and, with ``pair_types`` ``"same"`` / ``"different"``,
    of the micro-image's own lens type / another (diagnostics of the matching's bias by baseline:
    ``benchmarks/depth_bias.py``). Kept ones first, −1 pads; every kept neighbour also takes part
    in the coarse scan (the second value: how many)."""
    if pair_types not in (None, "same", "different"):
        raise ValueError(f"pair_types {pair_types!r}: expected 'same', 'different' or None")
    found = neigh >= 0
    j = np.clip(neigh, 0, None)
    keep = found.copy()
    if baselines is not None:
        dist = np.linalg.norm(centres[j] - centres[:, None, :], axis=2) / pitch_px
        keep &= (dist >= baselines[0]) & (dist <= baselines[1])
    if pair_types is not None:
        same = types[j] == types[:, None]
        keep &= same if pair_types == "same" else ~same
    order = np.argsort(~keep, axis=1, kind="stable")
    kept = np.take_along_axis(keep, order, axis=1)
    table = np.where(kept, np.take_along_axis(neigh, order, axis=1), -1)
    m = max(int(keep.sum(axis=1).max()) if len(keep) else 0, 1)
    return np.ascontiguousarray(table[:, :m]), m


@dataclass(frozen=True, eq=False)
class VirtualDepthMap:
    """Per micro-image virtual depth of one raw image.

    Attributes
    ----------
    k, l : (N,) micro-lens indices; centres_px : (N, 2) micro-image centres (the camera's grid).
    types : (N,) lens types.
    virtual_depth : (N,) υ (NaN where not estimated); confidence : (N,) in [0, 1].
    cost : (N,) the matching cost at υ (mean absolute difference, units of the white; with the
        parabola refinement the parabola's value at its vertex).
    grey : (N,) mean devignetted grey level (units of the white); spread : (N,) its mean
        absolute deviation relative to it (both within :data:`TEXTURE_RADIUS_FRACTION` of the radius).
    status : (N,) int8, :data:`STATUS_OK` … (``status_names``).
    pairs : (N,) pairs compared at υ (the parabola refinement: at its middle sample).
    settings : what the search used; wall_time_s : its duration.
    texture_offset_px : (N, 2) where in the micro-image its texture is, px from its centre
        (:func:`texture_offsets`; 0 where not matched): the point its depth belongs to.
    """

    k: NDArray[np.int64]
    l: NDArray[np.int64]
    centres_px: FloatArray
    types: NDArray[np.int64]
    virtual_depth: FloatArray
    confidence: FloatArray
    cost: FloatArray
    grey: FloatArray
    spread: FloatArray
    status: NDArray[np.int8]
    pairs: NDArray[np.int32]
    settings: dict[str, Any] = field(default_factory=dict)
    wall_time_s: float = 0.0
    texture_offset_px: FloatArray | None = None

    def __post_init__(self) -> None:
        if self.texture_offset_px is None:
            object.__setattr__(self, "texture_offset_px", np.zeros((len(self.k), 2)))

    @property
    def ok(self) -> NDArray[np.bool_]:
        return self.status == STATUS_OK

    @property
    def textured(self) -> NDArray[np.bool_]:
        """Micro-images in the image that passed the texture screen (estimated or not)."""
        return (self.status != STATUS_FLAT) & (self.status != STATUS_OUTSIDE)

    def counts(self) -> dict[str, int]:
        return {name: int(np.sum(self.status == code)) for code, name in STATUS_NAMES.items()}


STATUS_NAMES = {STATUS_OK: "estimated", STATUS_FLAT: "untextured", STATUS_NO_PAIRS: "no_pairs", STATUS_AT_BOUND: "at_bound",
                STATUS_NOT_REFINED: "not_refined",
                STATUS_OUTSIDE: "outside"}


def pupil_radii(camera: PlenopticCamera, f_number: float, max_radius_px: float, *, pupil_vignetting: bool = True) -> tuple[float, FloatArray, FloatArray]:
    """R_a = |m|/(N·s) and R_b = |q_t|/s (px) of the pupil-vignetting shift (0: off), and the
    hypothesis-free part of its radial tables (:func:`~plenocal.depth._kernels.centroid_table`,
    (T, n): they reach past the farthest compared offset).

    m and q_t are each lens' own (:func:`~plenocal.model.white.radius_law_at`, its D(k, l), d(k, l)):
    R_a the median over the lenses, R_b,t over the lenses of type t — the distances of the blur
    law's ρ_t (:func:`blur_law`, which the shift's gain −ρ/R_b divides). The shift is exact for thin
    lenses when ρ, R_a and R_b share one d (docs/depth.md, "The matcher's bias"); the camera's own
    m, q (:func:`~plenocal.model.white.radius_law`, at the MLA frame's corner) are 3 % off that d
    under the PRISM camera's tilted MLA, R_b 5 % too large: same-type pairs' w 1.2–2.8 % short.
    """
    s = camera.sensor.pixel_size_mm
    if camera.n_types == 0:
        m, q = radius_law(camera)
        ra = abs(m) / f_number / s
        rb = np.abs(np.asarray(q, dtype=np.float64)) / s if pupil_vignetting else np.zeros(len(q))
    else:
        k, l = camera.mla.lattice.all_indices()
        m_k, q_k = radius_law_at(camera, k, l)
        lens_types = camera.mla.types.type_of(k, l)
        ra = float(np.median(np.abs(m_k))) / f_number / s
        rb = np.array([np.median(np.abs(q_k[lens_types == t])) if np.any(lens_types == t) else abs(radius_law(camera)[1][t])
                       for t in range(camera.n_types)]) / s
        if not pupil_vignetting:
            rb = np.zeros(camera.n_types)
    n_table = int(np.ceil(3.0 * max_radius_px / TABLE_STEP_PX)) + 2
    rb = np.ascontiguousarray(rb)
    return float(ra), rb, centroid_table(float(ra), rb, n_table)


SHIFT_QUADRATURE_STEP_PX = 0.25
"""Grid step (px) of the quadrature of :func:`smoothed_centroid_tables` (over ±4σ of each
Gaussian): the smallest level's σ is 0.71 px, so the weights change by < 6 % between nodes."""


def smoothed_centroid_tables(g_table: FloatArray, variances: FloatArray) -> FloatArray:
    """(T, L, n) the pupil-vignetting centroid offsets of each lens type as a view blurred by a
    Gaussian of each variance (px²) sees them.

    A pixel at observed offset x sees the scene about the chief-ray offset e(x) = x − γ·G(x), with
    G(x) = g(|x|)·x/|x| the centroid field of :mod:`plenocal.model.pupil` (``g_table`` (T, n): g at
    |x| = k·h, :func:`~plenocal.depth._kernels.centroid_table`). The matching reads each view
    blurred by N(0, v) (the stack, :func:`matching_stack`); to first order in the scene's
    gradient the blurred pixel sees it about E_u[e(x − u)] = x − γ·(N_v ∗ G)(x): the shift field
    smoothed by the same Gaussian, radial again, whose radial component at |x| = k·h is stored
    here (quadrature on a :data:`SHIFT_QUADRATURE_STEP_PX` grid over ±4σ). Where the field bends
    (g rises from 0 where the aperture's disc starts to clip the lens's, at R_a − R_b, and
    straightens towards the tangency) the smoothed offsets differ from g by up to ~½·v·∇²G: with
    the relative blur of the R12 cameras (v ≈ 1–4 px²) several tenths of a px, ~10 % of a
    neighbour's disparity, of one sign for the sharper view of every pair.
    """
    g = np.asarray(g_table, dtype=np.float64)
    T, n = g.shape
    h = TABLE_STEP_PX
    r = np.arange(n) * h
    out = np.empty((T, len(variances), n))
    for li, v in enumerate(np.asarray(variances, dtype=np.float64)):
        sigma = float(np.sqrt(v))
        half = int(np.ceil(4.0 * sigma / SHIFT_QUADRATURE_STEP_PX))
        u = np.arange(-half, half + 1) * SHIFT_QUADRATURE_STEP_PX
        ux, uy = np.meshgrid(u, u)
        wgt = np.exp(-(ux**2 + uy**2) / (2.0 * v)).ravel()
        wgt /= wgt.sum()
        X = r[:, None] - ux.ravel()[None, :]
        Y = -uy.ravel()[None, :]
        R = np.hypot(X, Y)
        cos = np.divide(X, R, out=np.zeros_like(X), where=R > 0)
        far = max(float(R.max()), r[-1] + h)
        for t in range(T):  # beyond the table g continues along its last slope (the module's continuation)
            g_far = g[t, -1] + (far - r[-1]) * (g[t, -1] - g[t, -2]) / h
            gr = np.interp(R, np.append(r, far), np.append(g[t], g_far))
            out[t, li] = (gr * cos) @ wgt
    return out


BILINEAR_VARIANCE_PX2 = 1.0 / 6.0
"""Mean smoothing of the bilinear reading of view j (px², per axis): a fractional part f
low-passes by f(1 − f), 1/6 on average over f (:func:`pair_centroid_tables`)."""


def pair_centroid_tables(g_table: FloatArray, levels: FloatArray, *, smoothed: bool = True) -> FloatArray:
    """(2, T, L, n) the centroid offsets the matching's pair tables read
    (:func:`~plenocal.depth._kernels._pair_tables_at`): [0] for view i, read at its pixels from
    the stack (variance levels + :data:`INTERPOLATION_BLUR_VARIANCE_PX2`), [1] for view j, read
    bilinearly (:data:`BILINEAR_VARIANCE_PX2` more), each :func:`smoothed_centroid_tables`;
    ``smoothed`` False: (1, T, 1, n), g itself for both views and every pair."""
    if not smoothed:  # one role, one level: (1, T, 1, n)
        return np.ascontiguousarray(np.asarray(g_table, dtype=np.float64)[None, :, None, :])
    v = np.asarray(levels, dtype=np.float64) + INTERPOLATION_BLUR_VARIANCE_PX2
    return np.ascontiguousarray(np.stack([smoothed_centroid_tables(g_table, v),
                                          smoothed_centroid_tables(g_table, v + BILINEAR_VARIANCE_PX2)]))


def matching_lambda(camera: PlenopticCamera) -> float:
    """λ of the disparity δ = (c_i − c_j)·((1 − λ) + λ·w): the median over the lenses of their own
    (D(k, l) − e)/(D(k, l) + d(k, l) − e), the ratio of a lens' distance from the exit pupil to its
    micro-image centre's (the model's micro-image centres are the central projections of the lens
    centres from the exit-pupil centre). ``camera.lambda_`` is that ratio at the MLA frame's corner:
    under the PRISM camera's tilted MLA 1 − λ is 3.2 % smaller there (0.006409 against 0.006616),
    an offset of +0.0002 in w (+0.25 % at υ 12)."""
    if camera.n_types == 0:
        return float(camera.lambda_)
    k, l = camera.mla.lattice.all_indices()
    D, d = lens_distances(camera, micro_lens_centres(camera, k, l))
    e = camera.main_lens.exit_pupil_mm
    return float(np.median((D - e) / (D + d - e)))


def default_distance_range_mm(camera: PlenopticCamera) -> tuple[float, float]:
    """Object distances searched by default: libpleno's ``initialize_min_max_distance`` (its depth
    code): with h the focus distance, h < 20F: [4F, 1.2h]; h ≤ 100F: [6F, 2h]; else [8F, 100F]
    (F rounded up to whole mm)."""
    F = camera.main_lens.focal_length_mm
    h = camera.focus_distance_mm
    Fc = float(np.ceil(F))
    if h < 20.0 * F:
        return 4.0 * Fc, 1.2 * h
    if h <= 100.0 * F:
        return 6.0 * Fc, 2.0 * h
    return 8.0 * Fc, 100.0 * F


def _sides(camera: PlenopticCamera, distance_range_mm: tuple[float, float], *, min_abs_virtual_depth: float
           ) -> tuple[FloatArray, FloatArray, NDArray[np.bool_], NDArray[np.bool_]]:
    """On-axis object distances sampled over ``distance_range_mm`` (512, geometric), their w = 1/υ,
    and which of them are searched (the side of the MLA's conjugate holding the larger share, with
    |υ| ≥ ``min_abs_virtual_depth``) and which lie on the other side (same bound)."""
    from plenocal.depth.metric import virtual_depth_of_points

    z0, z1 = float(distance_range_mm[0]), float(distance_range_mm[1])
    if not (camera.main_lens.focal_length_mm < z0 < z1):
        raise DataError(f"distance range ({z0:g}, {z1:g}) mm: expected F = {camera.main_lens.focal_length_mm:.4g} < near < far")
    zs = np.geomspace(z0, z1, 512)
    k, l = camera.grid.lattice.all_indices()
    c = len(k) // 2
    ups = virtual_depth_of_points(camera, np.column_stack([0 * zs, 0 * zs, zs]), np.full(zs.size, k[c]), np.full(zs.size, l[c]))
    w = 1.0 / ups
    ok = np.abs(w) <= 1.0 / min_abs_virtual_depth
    pos, neg = ok & (w > 0), ok & (w < 0)
    return (zs, w, pos, neg) if pos.sum() >= neg.sum() else (zs, w, neg, pos)


def inverse_depth_range(camera: PlenopticCamera, distance_range_mm: tuple[float, float], *,
                        min_abs_virtual_depth: float = MIN_ABS_VIRTUAL_DEPTH) -> tuple[float, float]:
    """The interval of w = 1/υ that on-axis object points at ``distance_range_mm`` map to, within
    |w| ≤ 1/``min_abs_virtual_depth``. υ changes sign where the MLA images the object (υ → 0,
    not estimable): of the two sides, the one holding the larger share of the distances is kept.
    """
    _, w, side, _ = _sides(camera, distance_range_mm, min_abs_virtual_depth=min_abs_virtual_depth)
    if not side.any():
        raise DataError(f"distance range ({float(distance_range_mm[0]):g}, {float(distance_range_mm[1]):g}) mm: no virtual "
                        f"depth with |υ| >= {min_abs_virtual_depth:g} in it")
    w_max = 1.0 / min_abs_virtual_depth
    lo, hi = float(w[side].min()), float(w[side].max())
    # reaching the |υ| limit within the range: search up to it
    if lo > 0 and np.any(w > w_max):
        hi = w_max
    if hi < 0 and np.any(w < -w_max):
        lo = -w_max
    return lo, hi


def distances_left_out_mm(camera: PlenopticCamera, distance_range_mm: tuple[float, float], *,
                          min_abs_virtual_depth: float = MIN_ABS_VIRTUAL_DEPTH) -> tuple[float, float] | None:
    """The part of ``distance_range_mm`` that :func:`inverse_depth_range` does not search: on-axis
    object distances on the other side of the plane the MLA is conjugate to (υ of the other sign,
    |υ| ≥ ``min_abs_virtual_depth``), as (near, far) mm; None when the range is on one side.

    Objects there get no depth or a wrong one (a minimum on the searched side): plenocal's Tessar
    render, default range 200–540 mm about a conjugate at ~414 mm, gave its boards at 522 and
    550 mm 1 029 and 442 micro-image depths at a median 257 mm. A distance range on their side
    (``--distance-range``) searches them."""
    zs, _, _, other = _sides(camera, distance_range_mm, min_abs_virtual_depth=min_abs_virtual_depth)
    if not other.any():
        return None
    return float(zs[other].min()), float(zs[other].max())


def not_searched_text(searched: tuple[float, float] | list[float], left_out: tuple[float, float] | list[float], *,
                      default: bool) -> str:
    """One sentence for the distances a search leaves out (:func:`distances_left_out_mm`)."""
    what = "the default distance range" if default else "--distance-range"
    return (f"{what} {searched[0]:.0f}–{searched[1]:.0f} mm crosses the plane the micro-lens array is conjugate to: "
            f"objects at {left_out[0]:.0f}–{left_out[1]:.0f} mm, on its other side, are not searched and get no depth "
            f"or a wrong one (a match on the searched side); give --distance-range {left_out[0]:.0f} {left_out[1]:.0f} "
            "to measure them")


def coarse_grid(w_lo: float, w_hi: float, step: float, *, margin_steps: int = SEARCH_MARGIN_STEPS,
                w_limit: float = 1.0 / MIN_ABS_VIRTUAL_DEPTH) -> FloatArray:
    """The coarse scan's hypotheses of w = 1/υ: the range (w_lo, w_hi) widened by ``margin_steps``
    coarse steps at each end (:data:`SEARCH_MARGIN_STEPS`), but not beyond |w| = ``w_limit`` (the
    |υ| limit, :data:`MIN_ABS_VIRTUAL_DEPTH`) nor across w = 0 (υ = ±∞, the other side of the
    plane the micro-lens array is conjugate to); equally spaced, at most ``step`` apart, at least
    three."""
    lo, hi = float(w_lo), float(w_hi)
    pad = max(int(margin_steps), 0) * float(step)
    if lo >= 0.0:
        lo, hi = max(lo - pad, 0.0), min(hi + pad, w_limit)
    elif hi <= 0.0:
        lo, hi = max(lo - pad, -w_limit), min(hi + pad, 0.0)
    lo, hi = min(lo, float(w_lo)), max(hi, float(w_hi))  # a range already beyond the limits stays as given
    n = max(int(np.ceil((hi - lo) / step)) + 1, 3)
    return np.linspace(lo, hi, n)


def check_image(image: NDArray, camera: PlenopticCamera) -> tuple[int, int]:
    """(H, W) of a raw-sized image, or one line saying it is not the camera's sensor size."""
    H, W = np.asarray(image).shape[:2]
    if (W, H) != (camera.sensor.width_px, camera.sensor.height_px):
        raise DataError(f"image {W} x {H} px differs from the camera's sensor {camera.sensor.width_px} x {camera.sensor.height_px} px")
    return H, W


def grid_micro_images(camera: PlenopticCamera) -> tuple[NDArray[np.int64], NDArray[np.int64], FloatArray, NDArray[np.int64]]:
    """Every micro-image of the camera's grid: k, l (``all_indices``), centres (N, 2) px and lens
    types (N,) (0 for a camera without types)."""
    grid = camera.grid
    k, l = grid.lattice.all_indices()
    centres = np.ascontiguousarray(grid.centres(k, l), dtype=np.float64)
    types = (camera.mla.types.type_of(k, l) if camera.n_types else np.zeros(len(k))).astype(np.int64)
    return k, l, centres, types


def micro_images_in_view(camera: PlenopticCamera, centres: FloatArray, radii: FloatArray, weight: NDArray, *,
                         min_weight: float) -> NDArray[np.bool_]:
    """(N,) micro-images whose disc of ``radii`` px (2 px margin) lies in the image and whose
    centre pixel's white weight exceeds ``min_weight``."""
    H, W = camera.sensor.height_px, camera.sensor.width_px
    margin = radii + 2.0
    inside = (centres[:, 0] >= margin) & (centres[:, 0] <= W - 1 - margin) & (centres[:, 1] >= margin) & (centres[:, 1] <= H - 1 - margin)
    ci = np.clip(np.rint(centres).astype(np.int64), 0, [W - 1, H - 1])
    return inside & (np.asarray(weight)[ci[:, 1], ci[:, 0]] > min_weight)


def micro_image_radii_px(camera: PlenopticCamera, types: NDArray[np.int64], f_number: float) -> FloatArray:
    """|R_t(N)| px of each micro-image's type at the main-lens f-number N (eq:miradiusfnumbermc)."""
    m, q_types = radius_law(camera)
    q = np.asarray(q_types, dtype=np.float64)
    return np.abs(m / f_number + q[np.clip(types, 0, len(q) - 1)]) / camera.sensor.pixel_size_mm


def texture_offsets(devignetted: NDArray, weight: NDArray, centres: FloatArray, radii: FloatArray,
                    index: NDArray[np.int64]) -> FloatArray:
    """(M, 2) where the texture of micro-images ``index`` is, px from their centres: the centroid of
    the squared grey-level gradient within ``radii`` (:func:`~plenocal.depth._kernels.texture_centroid_kernel`).

    A micro-image's depth is the depth of what its texture shows: the matching compares grey
    levels, so the views agree where there are edges, and where a micro-image sees two surfaces
    (a silhouette) the textured one decides its υ. Its point then belongs on the chief ray through
    that texture, not through the micro-image's centre (the same virtual depth: the same plane of
    the virtual image). On a full-scale render of two plates behind a textured sphere
    (``benchmarks/depth_scene.py``) placing the points there takes the RMS of |z − z_true|/z from
    1.43 % to 1.14 % (1.5 px median offset, 4.6 px at the 90th percentile); a fronto-parallel board's
    z is unchanged. (The offset is where the texture appears; the pupil-vignetting shift between
    that and the chief ray is not undone: a few tenths of a px at these offsets.)"""
    return texture_centroid_kernel(devignetted, weight, centres, radii, np.asarray(index, dtype=np.int64))


def _texture_screen(
    dv: NDArray, weight: NDArray, centres: FloatArray, radii: FloatArray, in_view: NDArray[np.bool_], *,
    min_grey_spread: float, field: tuple[Any, float | None], subset: NDArray[np.bool_] | None,
) -> tuple[FloatArray, FloatArray, NDArray[np.int8], NDArray[np.int64]]:
    """:func:`estimate_virtual_depths`' screen: each micro-image in view's mean grey level and its
    relative spread (mean absolute deviation over the mean, within :data:`TEXTURE_RADIUS_FRACTION`
    of the white radius), its status (outside the view, flat below ``min_grey_spread``, beyond
    the model's ``field`` = (principal point, radius px or None), or waiting for pairs), and the
    micro-images to match (within ``subset`` when given). Returns (grey, spread, status, todo)."""
    n = len(centres)
    grey = np.full(n, np.nan)
    spread = np.full(n, np.nan)
    cand = np.flatnonzero(in_view)
    grey[cand], mad = micro_image_spread_kernel(dv, np.asarray(weight), centres, radii * (TEXTURE_RADIUS_FRACTION / USABLE_RADIUS_FRACTION), cand)
    spread[cand] = mad / np.maximum(grey[cand], 1e-6)
    status = np.full(n, STATUS_FLAT, dtype=np.int8)
    status[~in_view] = STATUS_OUTSIDE
    todo = cand[spread[cand] >= min_grey_spread]
    status[todo] = STATUS_NO_PAIRS
    principal_point, field_radius_px = field
    if field_radius_px is not None:
        beyond = np.hypot(*(centres[todo] - np.asarray(principal_point, dtype=np.float64)).T) > field_radius_px
        status[todo[beyond]] = STATUS_OUTSIDE_FIELD
        todo = todo[~beyond]
    if subset is not None:
        todo = todo[np.asarray(subset, dtype=bool)[todo]]
    return grey, spread, status, todo



def estimate_virtual_depths(
    devignetted: NDArray,
    weight: NDArray,
    camera: PlenopticCamera,
    *,
    kappa: float,
    f_number: float | None = None,
    distance_range_mm: tuple[float, float] | None = None,
    w_range: tuple[float, float] | None = None,
    min_grey_spread: float = MIN_GREY_SPREAD,
    rings: float = RINGS,
    star_rings: float = STAR_RINGS,
    golden_iterations: int = GOLDEN_ITERATIONS,
    refine_stride: int = REFINE_STRIDE_PX,
    refine_mode: int = REFINE_MODE,
    pupil_vignetting: bool = True,
    subset: NDArray[np.bool_] | None = None,
    refine_min_confidence: float = 0.0,
    field_radius_px: float | None = None,
    baselines: tuple[float, float] | None = None,
    pair_types: str | None = None,
    refine_common: int | None = None,
    smoothed_shift: bool = False,
    chunk: int = CHUNK,
    progress: Callable[[int, int], None] | None = None,
) -> VirtualDepthMap:
    """Virtual depth υ of every textured micro-image of one devignetted raw image.

    Parameters
    ----------
    devignetted, weight : (H, W) the raw image divided by the white at the same f-number and the
        white's relative level (0 in the gaps), from :func:`plenocal.detect.corners.devignette`.
    camera : the calibrated camera (micro-image grid, lens types, λ, blur model).
    kappa : κ of σ = κ·ρ (``plenocal blur``); 0 matches without equalising the blur.
    f_number : main-lens N of the image (default the camera's), for the micro-image radii.
    distance_range_mm : object distances searched (default :func:`default_distance_range_mm`),
        turned into an interval of w = 1/υ by :func:`inverse_depth_range`.
    w_range : (w_min, w_max) searched, instead of ``distance_range_mm``.
    min_grey_spread : :data:`MIN_GREY_SPREAD`.
    rings : :data:`RINGS`.
    golden_iterations, refine_stride, refine_mode : :data:`GOLDEN_ITERATIONS` (golden section
        only), :data:`REFINE_STRIDE_PX`, :data:`REFINE_MODE`.
    pupil_vignetting : model the radial displacement of defocused detail by the main aperture's
        vignetting of the micro-lens pupil (:mod:`plenocal.model.pupil`; on the R12-A renders it
        moves detail outwards by 30–60 %: without it υ comes out 25–30 % short).
    subset : (N,) bool over the grid's ``all_indices``: match only these (the others keep the
        status of the screen, or :data:`STATUS_NO_PAIRS` when textured).
    refine_common : :data:`REFINE_COMMON` (None) or another of its values.
    smoothed_shift : the pupil-vignetting shift of each view as the matching reads it, blurred
        (:func:`pair_centroid_tables`); False: the unblurred shift of :mod:`plenocal.model.pupil`.
    refine_min_confidence : micro-images whose coarse confidence is below this are not refined
        (status ``not_refined``, no depth of their own): :func:`aggregate_virtual_depths` does not
        use them as support below :data:`MIN_SUPPORT_CONFIDENCE`, so :func:`depth_map` passes that
        and skips a third of the refinements (31–39 % on the PRISM translation frames) with the
        same aggregated depths.
    field_radius_px : the calibrated model's field (``camera.json``'s ``model_field``,
        :mod:`plenocal.evaluate.field`), px about the principal point: textured micro-images whose
        centre lies beyond it are not matched (status ``outside_field``); None: no limit.
    baselines : (lo, hi) pitches, diagnostics: only the neighbours whose centre lies lo … hi
        pitches away take part (coarse scan included); None: all of them.
    pair_types : diagnostics: ``"same"`` or ``"different"`` keeps only the neighbours of the same
        lens type as the micro-image, or of another type; None: all.
    chunk : micro-images per kernel call; ``progress(done, total)`` after each.

    Returns
    -------
    VirtualDepthMap
    """
    t0 = time.perf_counter()
    dv = np.asarray(devignetted)
    check_image(dv, camera)
    N = float(camera.main_lens.f_number if f_number is None else f_number)
    grid = camera.grid
    k_all, l_all, centres, types = grid_micro_images(camera)
    radii = USABLE_RADIUS_FRACTION * micro_image_radii_px(camera, types, N)
    in_view = micro_images_in_view(camera, centres, radii, weight, min_weight=0.5)
    neigh, n_coarse = neighbour_table(centres, grid.diameter_px, rings=rings, star_rings=star_rings)
    if baselines is not None or pair_types is not None:
        neigh, n_coarse = select_neighbours(neigh, centres, types, grid.diameter_px, baselines=baselines, pair_types=pair_types)
    law = blur_law(camera, kappa=kappa)
    ra, rb, g_table = pupil_radii(camera, N, float(radii.max()), pupil_vignetting=pupil_vignetting)
    lam = matching_lambda(camera)
    if w_range is None:
        w_range = inverse_depth_range(camera, default_distance_range_mm(camera) if distance_range_mm is None else distance_range_mm)
    w_lo, w_hi = w_range
    if not w_lo < w_hi:
        raise DataError(f"inverse depth range ({w_lo}, {w_hi}) is empty")
    w_grid = coarse_grid(w_lo, w_hi, COARSE_STEP_PX / (lam * grid.diameter_px), margin_steps=SEARCH_MARGIN_STEPS)
    n_grid = len(w_grid)
    n_levels = blur_levels_read(law, (float(w_grid[0]), float(w_grid[-1])))
    stack = matching_stack(dv, weight, n_levels=n_levels)
    levels = np.asarray(BLUR_VARIANCES_PX2[:n_levels], dtype=np.float64)
    g_levels = pair_centroid_tables(g_table, levels, smoothed=smoothed_shift)

    n = len(k_all)
    grey, spread, status, todo = _texture_screen(dv, weight, centres, radii, in_view, min_grey_spread=min_grey_spread,
                                                 field=(camera.principal_point_px, field_radius_px), subset=subset)
    w = np.full(n, np.nan)
    cost = np.full(n, np.nan)
    conf = np.zeros(n)
    pairs = np.zeros(n, dtype=np.int32)
    P = np.asarray(law.intercept_px, dtype=np.float64)
    for start in range(0, len(todo), max(int(chunk), 1)):
        sel = todo[start:start + chunk]
        with numba.parallel_chunksize(THREAD_TASK):
            ww, cc, med, pp, st = search_kernel(
                stack, levels, centres, types, neigh, radii, sel, w_grid, lam, P, law.slope_px, law.kappa**2,
                n_coarse, COARSE_STRIDE_PX, int(golden_iterations), MIN_OVERLAP_PIXELS, ra, rb, g_levels, int(refine_stride),
                int(refine_mode), float(refine_min_confidence), int(REFINE_COMMON if refine_common is None else refine_common),
            )
        w[sel], cost[sel], pairs[sel], status[sel] = ww, cc, pp, st
        conf[sel] = np.where((st == STATUS_OK) | (st == STATUS_NOT_REFINED), np.clip(med, 0.0, 1.0), 0.0)
        if progress is not None:
            progress(min(start + chunk, len(todo)), len(todo))
    status[(status == STATUS_AT_BOUND) & (np.abs(w) >= (1.0 - 1e-12) / MIN_ABS_VIRTUAL_DEPTH)] = STATUS_AT_LIMIT
    if w_grid[0] == 0.0 or w_grid[-1] == 0.0:  # a scan widened to w = 0 (υ = ±∞): a refinement stays on its side
        side = np.sign(w_grid[-1] + w_grid[0])
        status[(status == STATUS_OK) & ~(w * side > 0.0)] = STATUS_AT_BOUND
    offsets = np.zeros((n, 2))
    offsets[todo] = texture_offsets(dv, np.asarray(weight), centres, radii, todo)
    with np.errstate(divide="ignore", invalid="ignore"):
        upsilon = np.where(status == STATUS_OK, 1.0 / w, np.nan)
    settings = {
        "kappa": float(kappa), "f_number": N, "inverse_depth_range": [float(w_lo), float(w_hi)],
        "scanned_inverse_depth_range": [float(w_grid[0]), float(w_grid[-1])],
        "coarse_steps": int(n_grid), "coarse_step_px": COARSE_STEP_PX, "golden_iterations": int(golden_iterations),
        "refine": "parabola" if refine_mode == REFINE_PARABOLA else "golden", "refine_stride_px": int(refine_stride),
        "rings": float(rings), "star_rings": float(star_rings), "coarse_rings": COARSE_RINGS, "neighbours": int(neigh.shape[1]), "coarse_neighbours": int(n_coarse),
        "min_grey_spread": float(min_grey_spread), "usable_radius_fraction": USABLE_RADIUS_FRACTION,
        "blur_variances_px2": list(BLUR_VARIANCES_PX2), "interpolation_blur_variance_px2": INTERPOLATION_BLUR_VARIANCE_PX2,
        "lambda": float(lam),
        "pupil_vignetting": bool(pupil_vignetting), "refine_min_confidence": float(refine_min_confidence),
        "refine_common": int(REFINE_COMMON if refine_common is None else refine_common), "smoothed_shift": bool(smoothed_shift),
        "field_radius_px": None if field_radius_px is None else float(field_radius_px),
        **({"baselines": [float(b) for b in baselines]} if baselines is not None else {}),
        **({"pair_types": pair_types} if pair_types is not None else {}),
        "blur_law": {"intercept_px": list(law.intercept_px), "slope_px": law.slope_px},
    }
    return VirtualDepthMap(
        k_all.astype(np.int64), l_all.astype(np.int64), centres, types, upsilon, conf, cost, grey, spread, status, pairs,
        settings, time.perf_counter() - t0, offsets,
    )


def cost_curves(
    devignetted: NDArray, weight: NDArray, camera: PlenopticCamera, index: NDArray[np.int64], w_grid: FloatArray, *,
    kappa: float, f_number: float | None = None, rings: float = RINGS, pupil_vignetting: bool = True,
    smoothed_shift: bool = False,
) -> FloatArray:
    """(M, G) matching cost of micro-images ``index`` (into the grid's ``all_indices``) at each
    w = 1/υ of ``w_grid``, all neighbours and pixels (diagnostics and tests)."""
    grid = camera.grid
    k_all, l_all = grid.lattice.all_indices()
    centres = np.ascontiguousarray(grid.centres(k_all, l_all), dtype=np.float64)
    types = (camera.mla.types.type_of(k_all, l_all) if camera.n_types else np.zeros(len(k_all))).astype(np.int64)
    N = float(camera.main_lens.f_number if f_number is None else f_number)
    radii = USABLE_RADIUS_FRACTION * micro_image_radii_px(camera, types, N)
    neigh, _ = neighbour_table(centres, grid.diameter_px, rings=rings)
    law = blur_law(camera, kappa=kappa)
    ra, rb, g_table = pupil_radii(camera, N, float(radii.max()), pupil_vignetting=pupil_vignetting)
    levels = np.asarray(BLUR_VARIANCES_PX2)
    g_levels = pair_centroid_tables(g_table, levels, smoothed=smoothed_shift)
    return cost_curve_kernel(
        matching_stack(devignetted, weight), levels, centres, types, neigh, radii,
        np.asarray(index, dtype=np.int64), np.asarray(w_grid, dtype=np.float64), matching_lambda(camera),
        np.asarray(law.intercept_px), law.slope_px, law.kappa**2, 1, MIN_OVERLAP_PIXELS, ra, rb, g_levels,
    )


AGGREGATION_RINGS = 4.0
"""The robust aggregation takes the median of 1/υ over the micro-images within this many
pitches (hexagonal: 61 with the micro-image itself). PRISM translation frames 100–104 (truth
camera, κ 0.72, with the interpolation blur), 3 / 4 / 5 rings: coverage of the textured board
micro-images 0.85 / 0.80 / 0.81 / 0.82 / 0.82, 0.87 / 0.82 / 0.83 / 0.85 / 0.85, 0.90 / 0.87 / 0.91
/ 0.92 / 0.94; median |z − z_true|/z 0.52 / 0.37 / 0.25 / 0.27 / 0.29 %, 0.47 / 0.34 / 0.23 / 0.25 /
0.27 %, 0.41 / 0.31 / 0.22 / 0.24 / 0.25 % (signed medians within 0.01 %). A depth edge pays: the
full-scale two-planes-and-sphere scene's RMS 1.40 / 1.43 / 1.46 % (the plate's micro-images near
the sphere's limb take more of the sphere's depth; the sphere and the tilted plate gain). Four:
every PRISM frame above 80 % coverage for 0.03 % of RMS on the scene."""
MIN_SUPPORT_CONFIDENCE = 0.3
"""Estimates below this confidence do not take part in the aggregation. PRISM trans-02 (550 mm),
aggregated: coverage 0.80 and median |z − z_true|/z 0.64 % (90th percentile 1.6 %) at 0.3;
0.97, 0.84 % (8 %) at 0.2 — low-confidence estimates are mostly the wrong minimum."""
MIN_SUPPORT = 2
"""A micro-image keeps a depth only when at least this many confident estimates support it
(PRISM trans-02, three rings: coverage 0.80 at 2, 0.76 at 3, same median error)."""
MAX_AT_LIMIT_PER_ESTIMATE = 1.0
"""A micro-image gets no aggregated depth (status ``at_limit``) when its neighbourhood holds more
than this many micro-images whose coarse minimum is at |υ| = 2 (:data:`STATUS_AT_LIMIT`) per
confident estimate: there the scene is where the matching cannot reach (|υ| < 2, near the MLA's
conjugate), and the few estimates inside the interval are its wrong minima. (A minimum at a user's
or the default's other end is not counted: plenocal's small R12-A render of a board at 230 mm,
υ 20.7, half a coarse step inside the default's near end, has 1 512 of its 1 638 micro-images at
that end, with coarse contrasts as high as the estimated ones'.)
plenocal's thin-lens R12-A render, a board at 375 mm (υ ≈ 1.9): 2 922 textured micro-images at
|υ| = 2 against 515 estimates, which aggregated gave 4 186 depths 3.4 % too near (now 429 keep
one, 5 780 are ``at_limit``); the PRISM translation frames' aggregated depths are the same bytes."""
STATUS_UNSUPPORTED = 5
"""Textured, but fewer than :data:`MIN_SUPPORT` confident estimates around it."""
STATUS_NAMES[STATUS_UNSUPPORTED] = "unsupported"
STATUS_AT_LIMIT = 7
"""The coarse minimum is at |υ| = 2 (:data:`MIN_ABS_VIRTUAL_DEPTH`), the nearest the matching
reaches to the MLA's conjugate plane: the surface is probably nearer that plane, where no depth can
be estimated (a minimum at the search's other end, or at a user's bound, is ``at_bound``)."""
STATUS_NAMES[STATUS_AT_LIMIT] = "at_limit"
STATUS_OUTSIDE_FIELD = 8
"""Textured, but beyond the calibrated model's field (``field_radius_px``): the lens's aberrations
there are not in the model, and its depth would be wrong (:mod:`plenocal.evaluate.field`)."""
STATUS_NAMES[STATUS_OUTSIDE_FIELD] = "outside_field"
MAX_SUPPORT_SPREAD = 0.08
"""A micro-image with a confident estimate of its own gets no aggregated depth (status ``at_edge``)
when its support disagrees: the median absolute deviation of the supporting estimates' 1/υ beyond
this fraction of their median. Such a support holds two surfaces (a silhouette) and the
micro-image's own estimate is one of them or a mixture; the median is neither's. (A micro-image
without an estimate of its own keeps the median: a wrong minimum among its neighbours spreads a
support on a flat board as well.) Full-scale render of two plates behind a textured sphere
(``benchmarks/depth_scene.py``, seeds 0 / 1 / 2; each point at its texture, :func:`texture_offsets`):
RMS of |z − z_true|/z 1.14 % → 0.85 / 0.83 / 0.86 %, 280–300 micro-images flagged of ~14 200 (0.10:
0.95 %, 0.06: 0.68 %, 0.05: 0.54 % at 5.6 % of the points); the small render of
tests/depth/test_scene_depth.py keeps 0.808 of its micro-images (0.786 at 0.06). Textured board
micro-images with a depth: the PRISM translation frames 0.866 / 0.822 / 0.835 / 0.849 / 0.856 at any
threshold down to 0.05 (their supports' MAD 1.3–1.6 %), the real-optics R12-B within its field and
plenocal's double-Gauss render ≤ 0.3 points less. (Flagging every micro-image, with or without an
estimate, cost PRISM frame 101 0.822 → 0.814 at 0.10 and 0.798 at 0.05, the real-optics set 3–6
points.)"""
STATUS_AT_EDGE = 9
"""Textured, with a confident estimate of its own, but its support's 1/υ spread beyond
:data:`MAX_SUPPORT_SPREAD`: a depth edge."""
STATUS_NAMES[STATUS_AT_EDGE] = "at_edge"


def aggregate_virtual_depths(
    vd: VirtualDepthMap,
    camera: PlenopticCamera,
    *,
    rings: float = AGGREGATION_RINGS,
    min_confidence: float = MIN_SUPPORT_CONFIDENCE,
    min_support: int = MIN_SUPPORT,
    max_at_limit_per_estimate: float = MAX_AT_LIMIT_PER_ESTIMATE,
    max_support_spread: float = MAX_SUPPORT_SPREAD,
) -> VirtualDepthMap:
    """Robust aggregation: each textured micro-image's 1/υ becomes the median of the confident
    estimates (≥ ``min_confidence``) within ``rings`` pitches, itself included; with fewer than
    ``min_support`` of them it gets no depth (:data:`STATUS_UNSUPPORTED`), nor with more than
    ``max_at_limit_per_estimate`` micro-images at |υ| = 2 per such estimate around it
    (:data:`STATUS_AT_LIMIT`: the surface is nearer the MLA's conjugate there). The confidence becomes
    the median confidence of the support. A plane stays a plane to first order (1/υ is smooth
    along it); a depth edge keeps its side's majority, except for a micro-image whose own confident
    estimate sits in a support spread over both surfaces (more than ``max_support_spread`` of its
    median 1/υ, :data:`STATUS_AT_EDGE`).
    """
    neigh, _ = neighbour_table(vd.centres_px, camera.grid.diameter_px, rings=rings)
    good = vd.ok & (vd.confidence >= min_confidence)
    w = np.where(good, 1.0 / np.where(good, vd.virtual_depth, 1.0), np.nan)
    c = np.where(good, vd.confidence, np.nan)
    rows = np.flatnonzero(vd.textured & (vd.status != STATUS_OUTSIDE_FIELD))  # only these can get a depth
    table = np.column_stack([rows, neigh[rows]])
    valid = table >= 0
    ws = np.where(valid, w[np.clip(table, 0, None)], np.nan)
    cs = np.where(valid, c[np.clip(table, 0, None)], np.nan)
    n_support = np.sum(np.isfinite(ws), axis=1)
    at_limit = vd.status == STATUS_AT_LIMIT
    n_limit = np.sum(valid & at_limit[np.clip(table, 0, None)], axis=1)
    beyond = n_limit > max_at_limit_per_estimate * n_support
    supported = (n_support >= min_support) & ~beyond
    target = np.zeros(len(w), dtype=bool)
    target[rows[supported]] = True
    ups = np.full(len(w), np.nan)
    c_out = np.zeros(len(w))
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            med = np.nanmedian(ws[supported], axis=1)
            spread = np.nanmedian(np.abs(ws[supported] - med[:, None]), axis=1) / np.abs(med)
            ups[rows[supported]] = 1.0 / med
            c_out[rows[supported]] = np.nanmedian(cs[supported], axis=1)
    edge = np.zeros(len(rows), dtype=bool)  # its own estimate in a support over two surfaces
    edge[np.flatnonzero(supported)[spread > max_support_spread]] = True
    edge &= good[rows]
    ups[rows[edge]] = np.nan
    c_out[rows[edge]] = 0.0
    status = vd.status.copy()
    status[target] = STATUS_OK
    status[rows[~supported]] = STATUS_UNSUPPORTED
    status[rows[beyond]] = STATUS_AT_LIMIT
    status[rows[edge]] = STATUS_AT_EDGE
    settings = {**vd.settings, "aggregation": {"rings": float(rings), "min_confidence": float(min_confidence),
                                               "min_support": int(min_support),
                                               "max_at_limit_per_estimate": float(max_at_limit_per_estimate),
                                               "max_support_spread": float(max_support_spread)}}
    return dataclasses.replace(vd, virtual_depth=ups, confidence=c_out, status=status, settings=settings)


def depth_map(devignetted: NDArray, weight: NDArray, camera: PlenopticCamera, *, aggregate: bool = True,
              **options: Any) -> VirtualDepthMap:
    """What ``plenocal depth`` computes of one frame: :func:`estimate_virtual_depths` (``options``),
    then, with ``aggregate``, :func:`aggregate_virtual_depths` — the micro-images too unconfident to
    support the aggregation (:data:`MIN_SUPPORT_CONFIDENCE`) are then not refined, which changes
    no aggregated depth."""
    if not aggregate:
        return estimate_virtual_depths(devignetted, weight, camera, **options)
    options.setdefault("refine_min_confidence", MIN_SUPPORT_CONFIDENCE)
    return aggregate_virtual_depths(estimate_virtual_depths(devignetted, weight, camera, **options), camera)
