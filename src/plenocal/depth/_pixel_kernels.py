"""numba kernel of the per-pixel depth refinement (:mod:`plenocal.depth.pixel`).

One micro-image per ``prange`` iteration, writing only its own rows of the outputs: the same bytes
whatever the number of threads. The matching is :mod:`plenocal.depth._kernels`'s (same disparity,
pupil-vignetting tables, relative blur and absolute differences, :func:`_match_diff`), kept per
pixel instead of summed over the micro-image.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from plenocal.depth._kernels import (
    _gather,
    _level,
    _match_diff,
    _offset_limit2,
    _pair_disparity,
    _relative_blur,
    _tables_at,
    _vertex,
    _work,
)

SPREAD_RADIUS_PX = 1
"""The pixel's own neighbourhood for its grey-level spread: 3 × 3 px (on the PRISM frames and the
sphere scene about as selective as the 5 × 5 window's spread at a higher threshold; docs/depth.md)."""


@nb.njit(cache=True)
def _window_spread(grey, seen, a, b, radius):  # pragma: no cover - compiled
    """Mean absolute deviation of ``grey`` over the cells ``seen`` within ``radius`` of (a, b)."""
    side = grey.shape[0]
    s = 0.0
    c = 0.0
    for aa in range(max(a - radius, 0), min(a + radius, side - 1) + 1):
        for bb in range(max(b - radius, 0), min(b + radius, side - 1) + 1):
            if seen[aa, bb]:
                s += grey[aa, bb]
                c += 1.0
    if c == 0.0:
        return math.nan
    mean = s / c
    s = 0.0
    for aa in range(max(a - radius, 0), min(a + radius, side - 1) + 1):
        for bb in range(max(b - radius, 0), min(b + radius, side - 1) + 1):
            if seen[aa, bb]:
                s += abs(grey[aa, bb] - mean)
    return s / c


@nb.njit(parallel=True, cache=True)
def pixel_depth_kernel(
    stack, levels, centres, types, neigh, radii, index, w0, step, half_hyp, lam, P, Q, kappa2, ra, rb, g_table,
    window, min_pixels, out_x, out_y, out_w, out_cost, out_ex, out_ey, out_margin, out_spread,
):  # pragma: no cover - compiled
    """Inverse virtual depth of every pixel of micro-images ``index``.

    For each hypothesis w = w0[i] + h·step, h = −half_hyp … half_hyp, every pixel x within
    ``radii[i]`` of c_i is compared with its match in every neighbour (the absolute difference of
    the blur-equalised views, as the micro-image's cost); the cost of x is the mean over the
    pairs and the pixels of the (2·window + 1)² window around it (those of the micro-image), and
    its w the vertex of the parabola through the lowest hypothesis and its two neighbours. NaN
    where the window holds fewer than ``min_pixels`` compared pixels at some hypothesis or the
    minimum is at an end of the hypotheses.

    With each depth, what the screen of :mod:`plenocal.depth.pixel` reads and where the point is:
    the pixel's chief-ray offset from c_i at the lowest hypothesis (``out_ex``, ``out_ey``, px: its
    observed offset with the pupil-vignetting shift undone), the lower of the cost curve's two
    ends' excess over c[b] (``out_margin``, cost units) and the mean absolute deviation of the
    micro-image's own grey levels (the stack's sharpest level) over the pixel's
    (2·:data:`SPREAD_RADIUS_PX` + 1)² neighbourhood (``out_spread``).

    Returns nothing; writes ``out_x``, ``out_y`` (M, S) int64 pixel coordinates (−1 pads),
    ``out_w``, ``out_cost``, ``out_ex``, ``out_ey``, ``out_margin``, ``out_spread`` (M, S) float64.
    """
    m = index.shape[0]
    T = P.shape[0]
    n_table = g_table.shape[1]
    n_all = neigh.shape[1]
    G = 2 * half_hyp + 1
    for t in nb.prange(m):
        i = index[t]
        r = radii[i]
        rho, inv, fwd, px, py, ex, ey = _work(r, T, n_table)
        cix = centres[i, 0]
        ciy = centres[i, 1]
        ti = types[i]
        side = 2 * math.ceil(r) + 3
        x_lo = math.ceil(cix - r) - 1
        y_lo = math.ceil(ciy - r) - 1
        S = np.zeros((G, side, side))
        C = np.zeros((G, side, side))
        EX = np.zeros((G, side, side))
        EY = np.zeros((G, side, side))
        m_pix = 0
        for h in range(G):
            w = w0[i] + (h - half_hyp) * step
            _tables_at(w, P, Q, ra, rb, g_table, rho, inv, fwd)
            m_pix = _gather(stack, cix, ciy, r, 1, ti, inv, px, py, ex, ey)
            for p in range(m_pix):
                EX[h, py[p] - y_lo, px[p] - x_lo] = ex[p]
                EY[h, py[p] - y_lo, px[p] - x_lo] = ey[p]
            f = (1.0 - lam) + lam * w
            max_d2 = 4.0 * r * r
            r2 = r * r
            for jj in range(n_all):
                j = neigh[i, jj]
                if j < 0:
                    continue
                cjx, cjy, dx, dy, overlap = _pair_disparity(centres, i, j, f, max_d2)
                if not overlap:
                    continue
                tj = types[j]
                s2_i, s2_j = _relative_blur(kappa2, rho[ti], rho[tj])
                ki, ti_ = _level(s2_i, levels)
                kj, tj_ = _level(s2_j, levels)
                e_lim2 = _offset_limit2(inv, tj, r)
                for p in range(m_pix):
                    d = _match_diff(stack, px[p], py[p], ex[p] + dx, ey[p] + dy, e_lim2, fwd, tj, n_table, r2, cjx, cjy,
                                    ki, ti_, kj, tj_)
                    if d < 0.0:
                        continue
                    S[h, py[p] - y_lo, px[p] - x_lo] += d
                    C[h, py[p] - y_lo, px[p] - x_lo] += 1.0
        for p in range(out_x.shape[1]):
            out_x[t, p] = -1
            out_y[t, p] = -1
            out_w[t, p] = math.nan
            out_cost[t, p] = math.nan
            out_ex[t, p] = math.nan
            out_ey[t, p] = math.nan
            out_margin[t, p] = math.nan
            out_spread[t, p] = math.nan
        # the micro-image's own grey levels (the stack's sharpest level) on the same cells
        grey = np.zeros((side, side))
        seen = np.zeros((side, side), dtype=np.bool_)
        for p in range(m_pix):
            grey[py[p] - y_lo, px[p] - x_lo] = stack[py[p], px[p], 0]
            seen[py[p] - y_lo, px[p] - x_lo] = True
        curve = np.empty(G)
        for p in range(m_pix):
            a = py[p] - y_lo
            b = px[p] - x_lo
            out_x[t, p] = px[p]
            out_y[t, p] = py[p]
            best = -1
            ok = True
            for h in range(G):
                s = 0.0
                c = 0.0
                for aa in range(max(a - window, 0), min(a + window, side - 1) + 1):
                    for bb in range(max(b - window, 0), min(b + window, side - 1) + 1):
                        s += S[h, aa, bb]
                        c += C[h, aa, bb]
                if c < min_pixels:
                    ok = False
                    break
                curve[h] = s / c
                if best < 0 or curve[h] < curve[best]:
                    best = h
            if not ok or best <= 0 or best >= G - 1:
                continue
            wb = w0[i] + (best - half_hyp) * step
            out_w[t, p] = _vertex(wb, step, curve[best - 1], curve[best], curve[best + 1])
            out_cost[t, p] = curve[best]
            out_ex[t, p] = EX[best, a, b]
            out_ey[t, p] = EY[best, a, b]
            out_margin[t, p] = min(curve[0], curve[G - 1]) - curve[best]
            out_spread[t, p] = _window_spread(grey, seen, a, b, SPREAD_RADIUS_PX)
