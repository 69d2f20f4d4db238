"""numba kernels of the all-in-focus rendering (:mod:`plenocal.depth.render`).

The patches of one chunk of micro-images are computed in parallel, each into its own buffer
(one micro-image per ``prange`` iteration), then added to the output in the chunk's order by one
thread: the image is the same bytes whatever the number of threads.

Notation as in :mod:`plenocal.depth._kernels`: X is the central-view position (sensor px,
:func:`plenocal.model.projection.central_view_px`), micro-image i at inverse virtual depth w
sees X at the chief-ray offset e = γ·(X − c_i), γ = (1 − λ) + λ·w, observed at the offset o that
the pupil-vignetting table ``fwd`` of its type gives for |e| (same direction).
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from plenocal.depth._kernels import _lookup, _tables_at


@nb.njit(cache=True, inline="always")
def _bump(r2):  # pragma: no cover - compiled
    """(1 − r²)² for r² < 1, else 0: a smooth (C¹) weight of the squared relative radius."""
    if r2 >= 1.0:
        return 0.0
    a = 1.0 - r2
    return a * a


@nb.njit(parallel=True, cache=True)
def patch_kernel(image, lit, centres, types, w, gain, radii, index, lam, P, Q, ra, rb, g_table,
                 scale, blend_px, half, values, weights):  # pragma: no cover - compiled
    """Patches of micro-images ``index`` on the output grid.

    Parameters
    ----------
    image : (H, W) float32, the devignetted raw image; lit : (H, W) uint8, 1 where it is valid.
    centres : (N, 2) c_i px; types : (N,) lens types; w : (N,) inverse virtual depth (NaN: none);
    gain : (N,) the micro-image's weight (its sharpness); radii : (N,) the radius (px) within which
        its pixels are used.
    lam, P, Q, ra, rb, g_table : λ, the blur law ρ_t(w) = P_t + Q·w and the pupil-vignetting
        tables (:func:`plenocal.depth.matching.pupil_radii`).
    scale : sensor px per output px; blend_px : the radius (X, sensor px) of a micro-image's
        patch; half : the patch buffers' half side (output px).
    values, weights : (M, 2·half + 1, 2·half + 1) float64 buffers, written: Σ weight·sample and
        Σ weight of output pixel (y0 + a, x0 + b), (x0, y0) the output pixel nearest c_i.
    """
    m = index.shape[0]
    H = image.shape[0]
    W = image.shape[1]
    T = P.shape[0]
    n = g_table.shape[1]
    side = 2 * half + 1
    for t in nb.prange(m):
        i = index[t]
        for a in range(side):
            for b in range(side):
                values[t, a, b] = 0.0
                weights[t, a, b] = 0.0
        wi = w[i]
        if math.isnan(wi) or gain[i] <= 0.0:
            continue
        rho = np.empty(T)
        inv = np.empty((T, n))
        fwd = np.empty((T, n))
        _tables_at(wi, P, Q, ra, rb, g_table, rho, inv, fwd)
        ti = types[i]
        gamma = (1.0 - lam) + lam * wi
        cx = centres[i, 0]
        cy = centres[i, 1]
        r_use = radii[i]
        # output pixel (x, y) is at X = (x + 0.5)·scale − 0.5
        x0 = math.floor((cx + 0.5) / scale)
        y0 = math.floor((cy + 0.5) / scale)
        inv_b2 = 1.0 / (blend_px * blend_px)
        inv_r2 = 1.0 / (r_use * r_use)
        for a in range(side):
            Yy = (y0 - half + a + 0.5) * scale - 0.5 - cy
            for b in range(side):
                Xx = (x0 - half + b + 0.5) * scale - 0.5 - cx
                wb = _bump((Xx * Xx + Yy * Yy) * inv_b2)
                if wb <= 0.0:
                    continue
                ex = gamma * Xx
                ey = gamma * Yy
                re = math.sqrt(ex * ex + ey * ey)
                if re > 1e-9:
                    ro = _lookup(fwd, ti, re, n)
                    if math.isnan(ro):
                        continue
                    sc = ro / re
                else:
                    sc = 1.0
                ox = ex * sc
                oy = ey * sc
                wr = _bump((ox * ox + oy * oy) * inv_r2)
                if wr <= 0.0:
                    continue
                bx = cx + ox
                by = cy + oy
                u0 = math.floor(bx)
                v0 = math.floor(by)
                if u0 < 0 or v0 < 0 or u0 + 1 >= W or v0 + 1 >= H:
                    continue
                if lit[v0, u0] == 0 or lit[v0, u0 + 1] == 0 or lit[v0 + 1, u0] == 0 or lit[v0 + 1, u0 + 1] == 0:
                    continue
                fx = bx - u0
                fy = by - v0
                s = ((1.0 - fy) * ((1.0 - fx) * image[v0, u0] + fx * image[v0, u0 + 1])
                     + fy * ((1.0 - fx) * image[v0 + 1, u0] + fx * image[v0 + 1, u0 + 1]))
                wt = gain[i] * wb * wr
                values[t, a, b] = wt * s
                weights[t, a, b] = wt


@nb.njit(cache=True)
def accumulate_kernel(centres, index, scale, half, values, weights, acc, acc_w):  # pragma: no cover - compiled
    """Add the patches of :func:`patch_kernel` to ``acc`` and ``acc_w`` (h, w) in the order of
    ``index`` (one thread: the sums are the same bytes whatever the thread count)."""
    h = acc.shape[0]
    wd = acc.shape[1]
    side = 2 * half + 1
    for t in range(index.shape[0]):
        i = index[t]
        x0 = math.floor((centres[i, 0] + 0.5) / scale)
        y0 = math.floor((centres[i, 1] + 0.5) / scale)
        for a in range(side):
            y = y0 - half + a
            if y < 0 or y >= h:
                continue
            for b in range(side):
                x = x0 - half + b
                if x < 0 or x >= wd:
                    continue
                if weights[t, a, b] > 0.0:
                    acc[y, x] += values[t, a, b]
                    acc_w[y, x] += weights[t, a, b]

