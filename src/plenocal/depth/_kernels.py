"""numba kernels of the blur-aware micro-image matching (:mod:`plenocal.depth.matching`).

Every kernel works on one micro-image per ``prange`` iteration and writes only that micro-image's
outputs, so the results are the same bytes whatever the number of threads.

Notation (``docs/conventions.md``; paper eq:mlinterdist, eq:virtdepth, eq:relblurradius):

- w = 1/υ, the inverse virtual depth: the disparity is linear in it, so the search runs in w
  (|υ| ≥ 2 ⇔ |w| ≤ 0.5; w = 0 is υ = ±∞);
- the point seen at offset o from micro-image i's centre c_i is seen at offset o + δ from c_j in
  micro-image j, δ = (c_i − c_j)·((1 − λ)υ + λ)/υ = (c_i − c_j)·((1 − λ) + λ·w);
- the blur radius of type t at w is ρ_t(w) = P_t + Q·w px (eq:blurradius with a = −υ·d);
  σ = κ·ρ, and the sharper view is blurred by σ_r² = κ²·|ρ_i² − ρ_j²| (eq:relblurradius).

``stack`` (L, H, W) float32 holds the devignetted image blurred by Gaussians of variance
``levels[k]`` (px², levels[0] = 0); a variance between two levels is the linear interpolation of
the two images (the heat semigroup to first order in the gap).
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from plenocal.model.pupil import MIN_LENS_RADIUS_PX, centroid_partials, saturated_gain

STATUS_OK = 0
"""A virtual depth was found."""
STATUS_FLAT = 1
"""The micro-image's grey-level spread is below the texture threshold."""
STATUS_NO_PAIRS = 2
"""No neighbour overlapped enough at any hypothesis (image border, dark neighbours)."""
STATUS_AT_BOUND = 3
"""The coarse minimum is at an end of the search interval: the depth lies outside it."""
STATUS_OUTSIDE = 4
"""The micro-image is not wholly in the image, or its centre is not lit in the white."""
STATUS_NOT_REFINED = 6
"""The coarse curve's contrast is below the refinement's threshold: not refined, no depth of its
own (the robust aggregation would not use it; 5 is the aggregation's "unsupported")."""

REFINE_GOLDEN = 0
"""Refinement by golden-section search of the coarse bracket."""
REFINE_PARABOLA = 1
"""Refinement by the vertex of a parabola through full costs half a coarse step apart."""

REFINE_VARYING = 0
"""Parabola refinement: each cost over the pixels that overlap at its own hypothesis (3–4 costs)."""
REFINE_COMMON_PIXELS = 1
"""Parabola refinement: the five costs c0 − 2h … c0 + 2h about the coarse minimum over the pixels
of each pair that overlap at every one of them (:func:`_costs` ``common``), the vertex through the
lowest inner one and its neighbours."""
REFINE_RECENTRED = 2
""":data:`REFINE_COMMON_PIXELS`, then three costs h/2 apart centred on that vertex (common pixels again)
and their parabola's vertex: the samples no longer sit on the coarse grid, to which a vertex
through grid-fixed samples locks."""
REFINE_RECENTRED_VARYING = 3
""":data:`REFINE_VARYING`, then three costs h/2 apart centred on its vertex (each over its own
overlapping pixels) and their parabola's vertex: the re-centring of :data:`REFINE_RECENTRED`
without the common pixels."""
REFINE_COARSE_RECENTRED = 4
"""Parabola refinement: three full costs centred on the vertex of the coarse curve's own parabola
(its samples, neighbours and pixels, already computed), :data:`RECENTRED_STEP_FRACTION` of a
coarse step apart, one more beyond a side one when it is the lowest, and their parabola's vertex:
the re-centring of :data:`REFINE_RECENTRED_VARYING` without its first parabola (3–4 full costs
instead of 6–7)."""
RECENTRED_STEP_FRACTION = 0.5
"""Spacing of :data:`REFINE_COARSE_RECENTRED`'s samples, in coarse steps (the first parabola's of
:data:`REFINE_VARYING`)."""


@nb.njit(cache=True)
def _disc_bounds(cx, cy, radius, W, H):  # pragma: no cover - compiled
    """Inclusive pixel bounds (x_lo, x_hi, y_lo, y_hi) of the disc of ``radius`` about (cx, cy),
    clipped to a W × H image."""
    return (max(math.ceil(cx - radius), 0), min(math.floor(cx + radius), W - 1),
            max(math.ceil(cy - radius), 0), min(math.floor(cy + radius), H - 1))


@nb.njit(cache=True, inline="always")
def _level(s2, levels):  # pragma: no cover - compiled
    n = levels.shape[0]
    if s2 <= levels[0]:
        return 0, 0.0
    if s2 >= levels[n - 1]:
        return n - 2, 1.0
    k = 0
    while levels[k + 1] < s2:
        k += 1
    return k, (s2 - levels[k]) / (levels[k + 1] - levels[k])


TABLE_STEP_PX = 0.25
"""Radial step of the pupil-shift tables (the map is smooth: linear interpolation errs < 0.005 px)."""


@nb.njit(cache=True)
def centroid_table(ra, rb, n):  # pragma: no cover - compiled
    """(T, n) centroid offset g(e_o) of :mod:`plenocal.model.pupil` (the aperture's disc of
    radius ``ra`` against each lens type's pupil disc of radius ``rb[t]``) at e_o = k·h: the part
    of the pupil-vignetting shift that does not depend on the hypothesis (0 where R_b is below
    MIN_LENS_RADIUS_PX: no shift)."""
    h = TABLE_STEP_PX
    out = np.zeros((rb.shape[0], n))
    for t in range(rb.shape[0]):
        if rb[t] < MIN_LENS_RADIUS_PX:
            continue
        for k in range(n):
            out[t, k] = centroid_partials(k * h, rb[t], ra, True)[0]
    return out


@nb.njit(cache=True)
def _shift_tables(rho, ra, rb, g, inv, fwd):  # pragma: no cover - compiled
    """Tables of the pupil-vignetting shift (:mod:`plenocal.model.pupil`, eq. (1)) of each lens
    type at blur ``rho[t]``: ``inv[t, k]`` the chief-ray offset e of the observed offset
    e_o = k·h (explicit, e = e_o − γ_s·g(e_o), g from :func:`centroid_table`), ``fwd[t, k]`` the
    observed offset e_o of the chief-ray offset e = k·h (inverse of the monotone ``inv``; NaN
    beyond its range)."""
    h = TABLE_STEP_PX
    n = inv.shape[1]
    for t in range(rho.shape[0]):
        if rb[t] < MIN_LENS_RADIUS_PX:
            for k in range(n):
                inv[t, k] = k * h
                fwd[t, k] = k * h
            continue
        gs = saturated_gain(-rho[t] / rb[t], ra, rb[t])[0]
        for k in range(n):
            inv[t, k] = k * h - gs * g[t, k]
        m = 0
        for k in range(n):
            e = k * h
            while m + 1 < n and inv[t, m + 1] < e:
                m += 1
            if m + 1 >= n or inv[t, m] > e:
                fwd[t, k] = math.nan if m + 1 >= n else 0.0
                continue
            a = inv[t, m]
            b = inv[t, m + 1]
            fwd[t, k] = (m + (e - a) / (b - a)) * h if b > a else m * h


@nb.njit(cache=True)
def _shift_row(gain, g_row, inv_row, fwd_row):  # pragma: no cover - compiled
    """One type's tables of :func:`_shift_tables` from its centroid offsets ``g_row`` (n,) and
    saturated gain γ_s."""
    h = TABLE_STEP_PX
    n = inv_row.shape[0]
    for k in range(n):
        inv_row[k] = k * h - gain * g_row[k]
    m = 0
    for k in range(n):
        e = k * h
        while m + 1 < n and inv_row[m + 1] < e:
            m += 1
        if m + 1 >= n or inv_row[m] > e:
            fwd_row[k] = math.nan if m + 1 >= n else 0.0
            continue
        a = inv_row[m]
        b = inv_row[m + 1]
        fwd_row[k] = (m + (e - a) / (b - a)) * h if b > a else m * h


@nb.njit(cache=True)
def _pair_tables_at(w, P, Q, kappa2, levels, ra, rb, gl, rho, inv, fwd, g_eff):  # pragma: no cover - compiled
    """ρ_t(w) = P_t + Q·w into ``rho`` (T,) and the pupil-vignetting shift tables of a view of type
    tv compared with one of type to into ``inv[role, tv, to]``, ``fwd[role, tv, to]`` (R, T, T', n;
    role 0 view i, 1 view j): as
    :func:`_shift_tables`, with the centroid offsets of the view *as the matching reads it*,
    blurred by its relative blur s2 (:func:`_relative_blur`, read from the stack between two
    levels like the image, :func:`_level`): ``gl`` (T, L, n) holds them at each of the stack's
    levels (:func:`plenocal.depth.matching.smoothed_centroid_tables`); with one level (L = 1, R = 1,
    T' = 1) the unblurred offsets, one table per type for every pair and role (:func:`_costs`
    reads [0, t, 0]). ``g_eff`` (n,): work row."""
    T = P.shape[0]
    R = inv.shape[0]
    Tp = inv.shape[2]
    n = inv.shape[3]
    h = TABLE_STEP_PX
    for t in range(T):
        rho[t] = P[t] + Q * w
    for role in range(R):
        for tv in range(T):
            if rb[tv] < MIN_LENS_RADIUS_PX:
                for to in range(Tp):
                    for k in range(n):
                        inv[role, tv, to, k] = k * h
                        fwd[role, tv, to, k] = k * h
                continue
            gain = saturated_gain(-rho[tv] / rb[tv], ra, rb[tv])[0]
            for to in range(Tp):
                if gl.shape[2] == 1:
                    _shift_row(gain, gl[role, tv, 0], inv[role, tv, to], fwd[role, tv, to])
                    continue
                s2 = _relative_blur(kappa2, rho[tv], rho[to])[0]
                kl, tl = _level(s2, levels)
                for k in range(n):
                    g_eff[k] = gl[role, tv, kl, k] + tl * (gl[role, tv, kl + 1, k] - gl[role, tv, kl, k]) if tl > 0.0 else gl[role, tv, kl, k]
                _shift_row(gain, g_eff, inv[role, tv, to], fwd[role, tv, to])


@nb.njit(cache=True, inline="always")
def _table_shape(gl, T):  # pragma: no cover - compiled
    """(R, T') of the pair tables for the centroid offsets ``gl`` (R, T, L, n): one role and one
    partner type when they are unblurred (L = 1), else as many roles as ``gl`` and T partners."""
    if gl.shape[2] == 1:
        return 1, 1
    return gl.shape[0], T


@nb.njit(cache=True)
def grid_pair_tables(w_grid, P, Q, kappa2, levels, ra, rb, gl):  # pragma: no cover - compiled
    """ρ (G, T) and the pair shift tables (G, R, T, T', n) of :func:`_pair_tables_at` at every
    hypothesis of the coarse grid: shared by every micro-image, computed once."""
    G = w_grid.shape[0]
    T = P.shape[0]
    n = gl.shape[3]
    R, Tp = _table_shape(gl, T)
    rho = np.empty((G, T))
    inv = np.empty((G, R, T, Tp, n))
    fwd = np.empty((G, R, T, Tp, n))
    g_eff = np.empty(n)
    for q in range(G):
        _pair_tables_at(w_grid[q], P, Q, kappa2, levels, ra, rb, gl, rho[q], inv[q], fwd[q], g_eff)
    return rho, inv, fwd


@nb.njit(cache=True)
def _tables_at(w, P, Q, ra, rb, g, rho, inv, fwd):  # pragma: no cover - compiled
    """ρ_t(w) = P_t + Q·w of each type into ``rho`` and the shift tables at it into ``inv``, ``fwd``."""
    for t in range(P.shape[0]):
        rho[t] = P[t] + Q * w
    _shift_tables(rho, ra, rb, g, inv, fwd)


@nb.njit(cache=True)
def grid_tables(w_grid, P, Q, ra, rb, g):  # pragma: no cover - compiled
    """ρ (G, T) and the shift tables (G, T, n) at every hypothesis of the coarse grid: shared by
    every micro-image, computed once."""
    G = w_grid.shape[0]
    T = P.shape[0]
    n = g.shape[1]
    rho = np.empty((G, T))
    inv = np.empty((G, T, n))
    fwd = np.empty((G, T, n))
    for q in range(G):
        _tables_at(w_grid[q], P, Q, ra, rb, g, rho[q], inv[q], fwd[q])
    return rho, inv, fwd


@nb.njit(cache=True, inline="always")
def _lookup(table, t, r, n):  # pragma: no cover - compiled
    x = r / TABLE_STEP_PX
    k = int(x)
    if k + 1 >= n:
        return math.nan
    f = x - k
    return table[t, k] + f * (table[t, k + 1] - table[t, k])


@nb.njit(cache=True)
def _gather(stack, cix, ciy, radius, stride, ti, inv, px, py, ex, ey):  # pragma: no cover - compiled
    """The pixels x of micro-image i within ``radius`` of c_i on a ``stride`` grid (0: the
    quincunx x + y even, half of them) into
    ``px``, ``py``, and their chief-ray offsets e_i (observed offset o_i = x − c_i unshifted by
    the table ``inv`` of type ti) into ``ex``, ``ey``; returns their number. Shared by every pair
    of i at one hypothesis."""
    H = stack.shape[0]
    W = stack.shape[1]
    n_tab = inv.shape[1]
    r2 = radius * radius
    x_lo, x_hi, y_lo, y_hi = _disc_bounds(cix, ciy, radius, W, H)
    m = 0
    step = 2 if stride == 0 else stride
    for y in range(y_lo, y_hi + 1, 1 if stride == 0 else stride):
        oy = y - ciy
        for x in range(x_lo + ((x_lo + y) & 1 if stride == 0 else 0), x_hi + 1, step):
            ox = x - cix
            ro2 = ox * ox + oy * oy
            if ro2 > r2:
                continue
            ro = math.sqrt(ro2)
            if ro > 1e-9:  # _lookup(inv, ti, ro, n_tab) / ro, written out (see _costs)
                xt = ro / TABLE_STEP_PX
                kt = int(xt)
                if kt + 1 >= n_tab:
                    sc = math.nan
                else:
                    sc = (inv[ti, kt] + (xt - kt) * (inv[ti, kt + 1] - inv[ti, kt])) / ro
            else:
                sc = 1.0
            px[m] = x
            py[m] = y
            ex[m] = ox * sc
            ey[m] = oy * sc
            m += 1
    return m


OFFSET_LIMIT_MARGIN_PX = 0.5
"""The pre-test of :func:`_costs` keeps chief-ray offsets up to this much beyond the one
observed at the disc's edge (the tables are interpolated; the exact test follows)."""


@nb.njit(cache=True, inline="always")
def _offset_limit2(inv, t, radius):  # pragma: no cover - compiled
    """Square of the chief-ray offset observed at ``radius`` in type t, plus the margin (∞ when
    the table does not reach it)."""
    e = _lookup(inv, t, radius, inv.shape[1])
    if math.isnan(e):
        return math.inf
    e += OFFSET_LIMIT_MARGIN_PX
    return e * e


@nb.njit(cache=True, inline="always")
def _match_diff(stack, x, y, ex_, ey_, e_lim2, fwd, tj, n_tab, r2, cjx, cjy, ki, ti_, kj, tj_):  # pragma: no cover
    """|I_i(x, y) − I_j(c_j + o_j)| for the pixel (x, y) of micro-image i whose chief-ray offset,
    moved by the disparity, is (ex_, ey_) in j (o_j: that offset shifted by table ``fwd`` of
    type tj); −1 when the match falls outside j's disc of radius² ``r2`` or the image. View i
    at blur level ``ki`` + fraction ``ti_`` of the stack, view j at ``kj`` + ``tj_``. The
    per-pixel refinement's; :func:`_costs` writes the same operations out."""
    H = stack.shape[0]
    W = stack.shape[1]
    re2 = ex_ * ex_ + ey_ * ey_
    if re2 > e_lim2:
        return -1.0
    re = math.sqrt(re2)
    if re > 1e-9:
        sj = _lookup(fwd, tj, re, n_tab)
        if math.isnan(sj):
            return -1.0
        sj /= re
    else:
        sj = 1.0
    qx = ex_ * sj
    qy = ey_ * sj
    if qx * qx + qy * qy > r2:
        return -1.0
    bx = cjx + qx
    by = cjy + qy
    x0 = math.floor(bx)
    y0 = math.floor(by)
    if x0 < 0 or y0 < 0 or x0 + 1 >= W or y0 + 1 >= H:
        return -1.0
    a = stack[y, x, ki]
    if ti_ > 0.0:
        a += ti_ * (stack[y, x, ki + 1] - a)
    fx = bx - x0
    fy = by - y0
    b00 = stack[y0, x0, kj]
    b01 = stack[y0, x0 + 1, kj]
    b10 = stack[y0 + 1, x0, kj]
    b11 = stack[y0 + 1, x0 + 1, kj]
    if tj_ > 0.0:
        b00 += tj_ * (stack[y0, x0, kj + 1] - b00)
        b01 += tj_ * (stack[y0, x0 + 1, kj + 1] - b01)
        b10 += tj_ * (stack[y0 + 1, x0, kj + 1] - b10)
        b11 += tj_ * (stack[y0 + 1, x0 + 1, kj + 1] - b11)
    b = (1.0 - fy) * ((1.0 - fx) * b00 + fx * b01) + fy * ((1.0 - fx) * b10 + fx * b11)
    return abs(a - b)


@nb.njit(cache=True, inline="always")
def _pair_disparity(centres, i, j, f, max_d2):  # pragma: no cover - compiled
    """c_j and the disparity (dx, dy) = (c_i − c_j)·f of neighbour j, and whether the two discs
    still overlap (|d|² < ``max_d2``)."""
    cjx = centres[j, 0]
    cjy = centres[j, 1]
    dx = (centres[i, 0] - cjx) * f
    dy = (centres[i, 1] - cjy) * f
    return cjx, cjy, dx, dy, dx * dx + dy * dy < max_d2


@nb.njit(cache=True, inline="always")
def _relative_blur(kappa2, rho_i, rho_j):  # pragma: no cover - compiled
    """(s2_i, s2_j): the Gaussian variances (px²) that bring the sharper of views i and j to the
    other's blur, σ_r² = κ²·|ρ_i² − ρ_j²| on the sharper, 0 on the other."""
    s2 = kappa2 * (rho_i * rho_i - rho_j * rho_j)
    if s2 > 0.0:  # view i more blurred: blur the sharper j
        return 0.0, s2
    return -s2, 0.0


@nb.njit(cache=True)
def _gather_pixels(stack, cix, ciy, radius, stride, px, py, ro):  # pragma: no cover - compiled
    """The pixels of :func:`_gather` (hypothesis-free) into ``px``, ``py`` and their distances
    |o_i| to c_i into ``ro``; returns their number."""
    H = stack.shape[0]
    W = stack.shape[1]
    r2 = radius * radius
    x_lo, x_hi, y_lo, y_hi = _disc_bounds(cix, ciy, radius, W, H)
    m = 0
    step = 2 if stride == 0 else stride
    for y in range(y_lo, y_hi + 1, 1 if stride == 0 else stride):
        oy = y - ciy
        for x in range(x_lo + ((x_lo + y) & 1 if stride == 0 else 0), x_hi + 1, step):
            ox = x - cix
            ro2 = ox * ox + oy * oy
            if ro2 > r2:
                continue
            px[m] = x
            py[m] = y
            ro[m] = math.sqrt(ro2)
            m += 1
    return m


@nb.njit(cache=True)
def _costs(stack, levels, centres, types, neigh, n_neigh, i, ws, lam, kappa2, radius, stride, min_pixels,
           rho, inv, fwd, px, py, ro, ex, ey, out_cost, out_pairs, common=False):  # pragma: no cover
    """The matching cost of micro-image i at each of the K inverse virtual depths ``ws`` into
    ``out_cost`` (K,): the mean over the pairs (i, j) with ≥ ``min_pixels`` compared pixels of
    their mean absolute difference (NaN without such a pair); the number of pairs into
    ``out_pairs`` (K,). ``rho`` (K, T), ``inv``, ``fwd`` (K, 2, T, T, n): the blur radii and the
    pair shift tables at each w (:func:`_pair_tables_at`: [k, 0, ti, tj] for view i compared with
    type tj, [k, 1, tj, ti] for view j); ``px``, ``py``, ``ro`` (S,), ``ex``, ``ey`` (K, T, S): work
    arrays (:func:`_costs_work`; e_i as compared with each type). ``stack`` is (H, W, L), the levels
    of a pixel adjacent in memory. ``common``: a pair's sums run over the pixels whose match lies in
    j at every one of the K hypotheses (and the pair counts only where the discs overlap at all of
    them), so that the K costs compare the same pixels.

    A pair (i, j) sums |I_i(x) − I_j(y)| over the pixels x of micro-image i within ``radius`` of
    c_i on a ``stride`` grid (:func:`_gather`) whose match y lies within ``radius`` of c_j: the
    chief-ray offset moves by the disparity, e_j = e_i + δ (:func:`_pair_disparity`), and is
    shifted to the observed o_j (table ``fwd`` of type tj), y = c_j + o_j, view i blurred by
    variance s2_i and view j by s2_j (:func:`_relative_blur`). Chief-ray offsets beyond the one
    observed at ``radius`` plus a margin (:func:`_offset_limit2`) are skipped before the table
    lookup: the shift is monotone, so their match lies outside the disc anyway.

    Each neighbour is taken at every hypothesis in turn (its pixels stay in the cache), each
    hypothesis summing its pairs in the neighbours' order. The loops are :func:`_gather`,
    :func:`_pair_disparity`, :func:`_offset_limit2` and :func:`_match_diff` written out, the same
    operations in the same order (the per-pixel refinement's; ``tests/depth/test_matching.py``
    holds the sums to theirs): numba counts the references of every array handed to an inlined
    function — an atomic increment and decrement per array and call, which per pixel took 35 % of
    the matching's time and made the two threads contend for the stack's counter.
    """
    H = stack.shape[0]
    W = stack.shape[1]
    K = ws.shape[0]
    n_tab = inv.shape[4]
    cix = centres[i, 0]
    ciy = centres[i, 1]
    ti = types[i]
    m = _gather_pixels(stack, cix, ciy, radius, stride, px, py, ro)
    Tp = inv.shape[3]
    rj = inv.shape[1] - 1  # view j's role
    for k in range(K):  # the chief-ray offsets e_i at each hypothesis, as compared with each type
        for to in range(Tp):
            for p in range(m):
                r = ro[p]
                if r > 1e-9:
                    xt = r / TABLE_STEP_PX
                    kt = int(xt)
                    if kt + 1 >= n_tab:
                        sc = math.nan
                    else:
                        sc = (inv[k, 0, ti, to, kt] + (xt - kt) * (inv[k, 0, ti, to, kt + 1] - inv[k, 0, ti, to, kt])) / r
                else:
                    sc = 1.0
                ex[k, to, p] = (px[p] - cix) * sc
                ey[k, to, p] = (py[p] - ciy) * sc
    for k in range(K):
        out_cost[k] = 0.0  # Σ sad until the end
        out_pairs[k] = 0
    count = np.zeros(K, dtype=np.int64)
    diffs = np.empty((K, m) if common else (1, 1))
    sads = np.zeros(K)
    r2 = radius * radius
    max_d2 = 4.0 * r2
    xr = radius / TABLE_STEP_PX
    kr = int(xr)
    for jj in range(n_neigh):
        j = neigh[i, jj]
        if j < 0:
            continue
        cjx = centres[j, 0]
        cjy = centres[j, 1]
        tj = types[j]
        oj = tj if Tp > 1 else 0  # i's table as compared with tj, and j's as compared with ti
        oi = ti if Tp > 1 else 0
        if common:
            diffs[:, :] = -1.0
        skip = False
        for k in range(K):
            f = (1.0 - lam) + lam * ws[k]
            dx = (cix - cjx) * f
            dy = (ciy - cjy) * f
            if not dx * dx + dy * dy < max_d2:  # the discs no longer overlap
                if common:
                    skip = True
                    break
                continue
            s2_i, s2_j = _relative_blur(kappa2, rho[k, ti], rho[k, tj])
            ki, ti_ = _level(s2_i, levels)
            kj, tj_ = _level(s2_j, levels)
            e_lim2 = math.inf  # the square of the chief-ray offset observed at the radius, plus the margin
            if kr + 1 < n_tab:
                e = inv[k, rj, tj, oi, kr] + (xr - kr) * (inv[k, rj, tj, oi, kr + 1] - inv[k, rj, tj, oi, kr])
                if not math.isnan(e):
                    e += OFFSET_LIMIT_MARGIN_PX
                    e_lim2 = e * e
            sad = 0.0
            n = 0
            for p in range(m):
                ex_ = ex[k, oj, p] + dx
                ey_ = ey[k, oj, p] + dy
                re2 = ex_ * ex_ + ey_ * ey_
                if re2 > e_lim2:
                    continue
                re = math.sqrt(re2)
                if re > 1e-9:
                    xt = re / TABLE_STEP_PX
                    kt = int(xt)
                    if kt + 1 >= n_tab:
                        continue
                    sj = fwd[k, rj, tj, oi, kt] + (xt - kt) * (fwd[k, rj, tj, oi, kt + 1] - fwd[k, rj, tj, oi, kt])
                    if math.isnan(sj):
                        continue
                    sj /= re
                else:
                    sj = 1.0
                qx = ex_ * sj
                qy = ey_ * sj
                if qx * qx + qy * qy > r2:
                    continue
                bx = cjx + qx
                by = cjy + qy
                x0 = math.floor(bx)
                y0 = math.floor(by)
                if x0 < 0 or y0 < 0 or x0 + 1 >= W or y0 + 1 >= H:
                    continue
                x = px[p]
                y = py[p]
                a = stack[y, x, ki]
                if ti_ > 0.0:
                    a += ti_ * (stack[y, x, ki + 1] - a)
                fx = bx - x0
                fy = by - y0
                b00 = stack[y0, x0, kj]
                b01 = stack[y0, x0 + 1, kj]
                b10 = stack[y0 + 1, x0, kj]
                b11 = stack[y0 + 1, x0 + 1, kj]
                if tj_ > 0.0:
                    b00 += tj_ * (stack[y0, x0, kj + 1] - b00)
                    b01 += tj_ * (stack[y0, x0 + 1, kj + 1] - b01)
                    b10 += tj_ * (stack[y0 + 1, x0, kj + 1] - b10)
                    b11 += tj_ * (stack[y0 + 1, x0 + 1, kj + 1] - b11)
                b = (1.0 - fy) * ((1.0 - fx) * b00 + fx * b01) + fy * ((1.0 - fx) * b10 + fx * b11)
                if common:
                    diffs[k, p] = abs(a - b)
                else:
                    sad += abs(a - b)
                    n += 1
            if not common and n >= min_pixels:
                out_cost[k] += sad
                count[k] += n
                out_pairs[k] += 1
        if common and not skip:  # the pixels compared at every hypothesis only
            n = 0
            for k in range(K):
                sads[k] = 0.0
            for p in range(m):
                full = True
                for k in range(K):
                    if diffs[k, p] < 0.0:
                        full = False
                        break
                if full:
                    n += 1
                    for k in range(K):
                        sads[k] += diffs[k, p]
            if n >= min_pixels:
                for k in range(K):
                    out_cost[k] += sads[k]
                    count[k] += n
                    out_pairs[k] += 1
    for k in range(K):
        out_cost[k] = np.nan if out_pairs[k] == 0 else out_cost[k] / count[k]


@nb.njit(cache=True)
def _costs_at(stack, levels, centres, types, neigh, n_neigh, i, ws, lam, P, Q, kappa2, ra, rb, g_table, radius, stride,
              min_pixels, rho, inv, fwd, px, py, ro, ex, ey, out_cost, out_pairs, common=False):  # pragma: no cover - compiled
    """:func:`_costs` at ``ws`` (K,), with the blur radii and pair shift tables computed there
    (``g_table``: the (T, L, n) offsets of :func:`_pair_tables_at`)."""
    g_eff = np.empty(g_table.shape[3])
    for k in range(ws.shape[0]):
        _pair_tables_at(ws[k], P, Q, kappa2, levels, ra, rb, g_table, rho[k], inv[k], fwd[k], g_eff)
    _costs(stack, levels, centres, types, neigh, n_neigh, i, ws, lam, kappa2, radius, stride, min_pixels,
           rho, inv, fwd, px, py, ro, ex, ey, out_cost, out_pairs, common)


@nb.njit(parallel=True, cache=True)
def normalised_levels_kernel(blurred, count, min_dens, out, k0):  # pragma: no cover - compiled
    """``out[y, x, k0 + g]`` = blurred[g][y, x, 0] / blurred[g][y, x, 1] where the latter is above
    ``min_dens[g]``, else 0, for the first ``count`` levels of the tuple ``blurred`` of (H, W, 2)
    images (the blurred masked image and the blurred mask; the rest pads it to one length):
    consecutive levels of the (H, W, L) blur stack, written in place in one pass (each pass moves
    all of the stack through the cache)."""
    G = count
    H, W = blurred[0].shape[:2]
    for y in nb.prange(H):
        for x in range(W):
            for g in range(G):
                d = blurred[g][y, x, 1]
                out[y, x, k0 + g] = blurred[g][y, x, 0] / d if d > min_dens[g] else np.float32(0.0)


@nb.njit(parallel=True, cache=True)
def star_mask_kernel(centres, idx, found, dirs, half_width):  # pragma: no cover - compiled
    """(N, K) bool: neighbour ``idx[i, kk]`` (where ``found``) lies within ``half_width`` of a
    ray from c_i along one of the unit directions ``dirs`` (D, 2)."""
    n, kmax = idx.shape
    out = np.zeros((n, kmax), dtype=np.bool_)
    for i in nb.prange(n):
        for kk in range(kmax):
            if not found[i, kk]:
                continue
            vx = centres[idx[i, kk], 0] - centres[i, 0]
            vy = centres[idx[i, kk], 1] - centres[i, 1]
            for d in range(dirs.shape[0]):
                if abs(vx * dirs[d, 1] - vy * dirs[d, 0]) < half_width and (vx * dirs[d, 0] + vy * dirs[d, 1]) > 0:
                    out[i, kk] = True
                    break
    return out


@nb.njit(cache=True, inline="always")
def _parabola_at(x, x0, h, f0, f1, f2):  # pragma: no cover - compiled
    """The parabola through (x0 − h, f0), (x0, f1), (x0 + h, f2) at x."""
    t = (x - x0) / h
    return f1 + 0.5 * t * (f2 - f0) + 0.5 * t * t * (f0 - 2.0 * f1 + f2)


@nb.njit(cache=True, inline="always")
def _vertex(x0, h, f0, f1, f2):  # pragma: no cover - compiled
    """Abscissa of the parabola's vertex through (x0 − h, f0), (x0, f1), (x0 + h, f2), within
    [x0 − h, x0 + h] (x0 when the three do not make a minimum)."""
    den = f0 - 2.0 * f1 + f2
    if not den > 0.0:
        return x0
    return x0 + h * min(max(0.5 * (f0 - f2) / den, -1.0), 1.0)


@nb.njit(cache=True)
def _spread(image, weight, cix, ciy, radius):  # pragma: no cover - compiled
    """Mean and mean absolute deviation of the unblurred view within ``radius`` of (cix, ciy):
    ``image`` (H, W) as float32 where ``weight`` > 0, 0 elsewhere — the bytes of level 0 of
    :func:`plenocal.depth.matching.blur_stack` at variance 0, read without making it."""
    H = image.shape[0]
    W = image.shape[1]
    r2 = radius * radius
    x_lo, x_hi, y_lo, y_hi = _disc_bounds(cix, ciy, radius, W, H)
    s = 0.0
    n = 0
    for y in range(y_lo, y_hi + 1):
        for x in range(x_lo, x_hi + 1):
            if (x - cix) ** 2 + (y - ciy) ** 2 <= r2:
                s += np.float32(image[y, x]) if weight[y, x] > 0 else np.float32(0.0)
                n += 1
    if n == 0:
        return 0.0, 0.0, 0
    mean = s / n
    a = 0.0
    for y in range(y_lo, y_hi + 1):
        for x in range(x_lo, x_hi + 1):
            if (x - cix) ** 2 + (y - ciy) ** 2 <= r2:
                a += abs((np.float32(image[y, x]) if weight[y, x] > 0 else np.float32(0.0)) - mean)
    return mean, a / n, n


@nb.njit(parallel=True, cache=True)
def micro_image_spread_kernel(image, weight, centres, radii, index):  # pragma: no cover - compiled
    """(M,) mean and mean absolute deviation of the micro-images ``index`` in the unblurred view
    (:func:`_spread`)."""
    m = index.shape[0]
    mean = np.zeros(m)
    mad = np.zeros(m)
    for t in nb.prange(m):
        i = index[t]
        mean[t], mad[t], _ = _spread(image, weight, centres[i, 0], centres[i, 1], radii[i])
    return mean, mad


@nb.njit(parallel=True, cache=True)
def texture_centroid_kernel(image, weight, centres, radii, index):  # pragma: no cover - compiled
    """(M, 2) offset (px) from the centre of micro-image ``index`` of its texture's centroid: the
    mean pixel offset within ``radii`` weighted by the squared central-difference gradient of
    ``image`` (pixels whose four neighbours are lit, ``weight`` > 0)."""
    H = image.shape[0]
    W = image.shape[1]
    m = index.shape[0]
    out = np.zeros((m, 2))
    for t in nb.prange(m):
        i = index[t]
        cx = centres[i, 0]
        cy = centres[i, 1]
        r = radii[i]
        x_lo, x_hi, y_lo, y_hi = _disc_bounds(cx, cy, r, W, H)
        s = 0.0
        sx = 0.0
        sy = 0.0
        for y in range(max(y_lo, 1), min(y_hi, H - 2) + 1):
            for x in range(max(x_lo, 1), min(x_hi, W - 2) + 1):
                dx = x - cx
                dy = y - cy
                if dx * dx + dy * dy > r * r:
                    continue
                if weight[y, x - 1] <= 0 or weight[y, x + 1] <= 0 or weight[y - 1, x] <= 0 or weight[y + 1, x] <= 0:
                    continue
                gx = np.float64(image[y, x + 1]) - np.float64(image[y, x - 1])
                gy = np.float64(image[y + 1, x]) - np.float64(image[y - 1, x])
                e = gx * gx + gy * gy
                s += e
                sx += e * dx
                sy += e * dy
        if s > 0.0:
            out[t, 0] = sx / s
            out[t, 1] = sy / s
    return out


@nb.njit(cache=True, inline="always")
def _work(radius, T, n_table):  # pragma: no cover - compiled
    """Work arrays of one micro-image: ρ (T,), shift tables (T, n), gathered pixels and offsets."""
    side = 2 * math.ceil(radius) + 2
    size = side * side
    return (np.empty(T), np.empty((T, n_table)), np.empty((T, n_table)), np.empty(size, dtype=np.int64),
            np.empty(size, dtype=np.int64), np.empty(size), np.empty(size))


@nb.njit(cache=True, inline="always")
def _costs_work(radius, K, T, gl):  # pragma: no cover - compiled
    """Work arrays of :func:`_costs` at K hypotheses: ρ (K, T), pair shift tables (K, R, T, T', n)
    (:func:`_table_shape` of the centroid offsets ``gl``), the gathered pixels and their radii
    (S,), their offsets (K, T', S)."""
    side = 2 * math.ceil(radius) + 2
    size = side * side
    R, Tp = _table_shape(gl, T)
    n_table = gl.shape[3]
    return (np.empty((K, T)), np.empty((K, R, T, Tp, n_table)), np.empty((K, R, T, Tp, n_table)), np.empty(size, dtype=np.int64),
            np.empty(size, dtype=np.int64), np.empty(size), np.empty((K, Tp, size)), np.empty((K, Tp, size)))


@nb.njit(cache=True)
def _full_costs(ctx, work, ws, stride, min_pixels, common):  # pragma: no cover - compiled
    """:func:`_costs_at` of the micro-image of ``ctx`` at ``ws`` with every neighbour, into
    ``work``'s costs and pair counts (its last two arrays). ``ctx``: (stack, levels, centres,
    types, neigh, n_neigh, i, lam, P, Q, kappa2, ra, rb, g_table, radius); ``work``: the arrays of
    :func:`_costs_work` at 5 hypotheses, the (5,) costs and (5,) pair counts."""
    stack, levels, centres, types, neigh, n_neigh, i, lam, P, Q, kappa2, ra, rb, g_table, radius = ctx
    rho, inv, fwd, px, py, ro, ex, ey, fs, ps = work
    _costs_at(stack, levels, centres, types, neigh, n_neigh, i, ws, lam, P, Q, kappa2, ra, rb, g_table, radius, stride,
              min_pixels, rho, inv, fwd, px, py, ro, ex, ey, fs, ps, common)


@nb.njit(cache=True)
def _three_costs(ctx, work, c, h, stride, min_pixels, common):  # pragma: no cover - compiled
    """Full costs and pair counts at c − h, c, c + h: (f₋, f₀, f₊, p₋, p₀, p₊)."""
    fs, ps = work[8], work[9]
    ws = np.empty(3)
    ws[0] = c - h
    ws[1] = c
    ws[2] = c + h
    _full_costs(ctx, work, ws, stride, min_pixels, common)
    return fs[0], fs[1], fs[2], ps[0], ps[1], ps[2]


@nb.njit(cache=True)
def _parabola_walk(ctx, work, c0, h, stride, min_pixels):  # pragma: no cover - compiled
    """Full costs at c0 − h, c0, c0 + h, one more h beyond a side one when it is the lowest (the
    three then centred on it), and the vertex of their parabola.

    Returns (w, cost, pairs, bracketed): the cost there is the parabola's (not evaluated: a fifth
    full evaluation was 20 % of the refinement) and the pairs the centre sample's; bracketed is
    False when a cost is NaN (w the centre, cost its own)."""
    fs = work[8]
    fm, fc, fp, pm, pc, pp = _three_costs(ctx, work, c0, h, stride, min_pixels, np.bool_(False))
    if math.isnan(fm) or math.isnan(fc) or math.isnan(fp):
        return c0, fc, pc, False
    ws = np.empty(1)
    if fm < fc and fm <= fp:
        ws[0] = c0 - 2.0 * h
        _full_costs(ctx, work, ws, stride, min_pixels, np.bool_(False))
        fp = fc
        fc = fm
        fm = fs[0]
        c0 = c0 - h
        pc = pm
    elif fp < fc:
        ws[0] = c0 + 2.0 * h
        _full_costs(ctx, work, ws, stride, min_pixels, np.bool_(False))
        fm = fc
        fc = fp
        fp = fs[0]
        c0 = c0 + h
        pc = pp
    if math.isnan(fm) or math.isnan(fp):
        return c0, fc, pc, False
    wv = _vertex(c0, h, fm, fc, fp)
    return wv, fc if wv == c0 else _parabola_at(wv, c0, h, fm, fc, fp), pc, True


@nb.njit(cache=True)
def _recentred(ctx, work, wv, h, stride, min_pixels, common):  # pragma: no cover - compiled
    """Full costs at wv − h, wv, wv + h (samples centred on an earlier vertex, so off the coarse
    grid) and their parabola's vertex. Returns (w, cost, pairs, ok); ok False when a cost is NaN."""
    f0, f1, f2, _, p1, _ = _three_costs(ctx, work, wv, h, stride, min_pixels, common)
    if math.isnan(f0) or math.isnan(f1) or math.isnan(f2):
        return wv, np.nan, 0, False
    wb = _vertex(wv, h, f0, f1, f2)
    return wb, _parabola_at(wb, wv, h, f0, f1, f2), p1, True


@nb.njit(cache=True)
def _common_pixels_parabola(ctx, work, c0, h, stride, min_pixels, recentre):  # pragma: no cover - compiled
    """:data:`REFINE_COMMON_PIXELS` (``recentre`` False) or :data:`REFINE_RECENTRED`: the five
    costs c0 − 2h … c0 + 2h over the pixels common to all, the vertex through the lowest inner
    one and its neighbours, then (``recentre``) three costs h/2 apart centred on it."""
    fs, ps = work[8], work[9]
    ws = np.empty(5)
    for q in range(5):
        ws[q] = c0 + (q - 2) * h
    _full_costs(ctx, work, ws, stride, min_pixels, np.bool_(True))
    q = 2
    if fs[1] < fs[2] and fs[1] <= fs[3]:
        q = 1
    elif fs[3] < fs[2]:
        q = 3
    if math.isnan(fs[q - 1]) or math.isnan(fs[q]) or math.isnan(fs[q + 1]):
        return c0, fs[2], ps[2]
    wv = _vertex(ws[q], h, fs[q - 1], fs[q], fs[q + 1])
    wb, cb, pairs = wv, fs[q] if wv == ws[q] else _parabola_at(wv, ws[q], h, fs[q - 1], fs[q], fs[q + 1]), ps[q]
    if recentre:
        w2, c2, p2, ok = _recentred(ctx, work, wv, 0.5 * h, stride, min_pixels, np.bool_(True))
        if ok:
            return w2, c2, p2
    return wb, cb, pairs


@nb.njit(cache=True)
def _golden(ctx, work, a, b, iterations, stride, min_pixels):  # pragma: no cover - compiled
    """:data:`REFINE_GOLDEN`: golden-section search of [a, b]; the better of the final interior
    points (already evaluated; within the final bracket, 0.618^k of the first one wide)."""
    fs, ps = work[8], work[9]
    invphi = (math.sqrt(5.0) - 1.0) / 2.0
    ws = np.empty(2)
    x1 = b - invphi * (b - a)
    x2 = a + invphi * (b - a)
    ws[0] = x1
    ws[1] = x2
    _full_costs(ctx, work, ws, stride, min_pixels, np.bool_(False))
    f1, p1, f2, p2 = fs[0], ps[0], fs[1], ps[1]
    for _it in range(iterations):
        if f1 <= f2 or math.isnan(f2):
            b = x2
            x2 = x1
            f2 = f1
            p2 = p1
            x1 = b - invphi * (b - a)
            ws[0] = x1
            _full_costs(ctx, work, ws[:1], stride, min_pixels, np.bool_(False))
            f1, p1 = fs[0], ps[0]
        else:
            a = x1
            x1 = x2
            f1 = f2
            p1 = p2
            x2 = a + invphi * (b - a)
            ws[0] = x2
            _full_costs(ctx, work, ws[:1], stride, min_pixels, np.bool_(False))
            f2, p2 = fs[0], ps[0]
    if f1 <= f2 or math.isnan(f2):
        return x1, f1, p1
    return x2, f2, p2


@nb.njit(cache=True)
def _refine(ctx, work, curve, w_grid, best, refine_mode, refine_common, refine_stride, min_pixels,
            golden_iterations):  # pragma: no cover - compiled
    """The refined (w, cost, pairs) of one micro-image about its coarse minimum ``best`` (an
    interior sample of ``curve`` on ``w_grid``), as :func:`search_kernel` describes the modes."""
    refine_min = max(min_pixels // 2, 1) if refine_stride == 0 else max(min_pixels // (refine_stride * refine_stride), 1)
    h = 0.5 * (w_grid[best + 1] - w_grid[best - 1]) * 0.5  # half a coarse step
    if refine_mode != REFINE_PARABOLA:
        return _golden(ctx, work, w_grid[best - 1], w_grid[best + 1], golden_iterations, refine_stride, refine_min)
    if refine_common == REFINE_COMMON_PIXELS or refine_common == REFINE_RECENTRED:
        return _common_pixels_parabola(ctx, work, w_grid[best], h, refine_stride, refine_min,
                                       refine_common == REFINE_RECENTRED)
    if refine_common == REFINE_COARSE_RECENTRED:
        g = w_grid[best + 1] - w_grid[best]
        c0 = _vertex(w_grid[best], g, curve[best - 1], curve[best], curve[best + 1])
        wv, cb, pairs, _ = _parabola_walk(ctx, work, c0, RECENTRED_STEP_FRACTION * g, refine_stride, refine_min)
        return wv, cb, pairs
    if refine_common == REFINE_RECENTRED_VARYING:
        # the first parabola only finds the vertex the second samples about: a quarter of the pixels
        wv, cb, pairs, ok = _parabola_walk(ctx, work, w_grid[best], h, np.int64(2), max(min_pixels // 4, 1))
        if ok:
            w2, c2, p2, ok2 = _recentred(ctx, work, wv, 0.5 * h, refine_stride, refine_min, np.bool_(False))
            if ok2:
                return w2, c2, p2
        return wv, cb, pairs
    wv, cb, pairs, _ = _parabola_walk(ctx, work, w_grid[best], h, refine_stride, refine_min)
    return wv, cb, pairs


@nb.njit(cache=True)
def _median(values):  # pragma: no cover - compiled
    """``np.median`` of a non-empty 1-D array without NaN, the same number (numba's: the middle value,
    or (a + b) / 2 of the two middle ones), from a sort: numba's partition-based median cost 5.7 s of
    the depth kernels' first compilation."""
    s = np.sort(values)
    n = s.shape[0]
    h = n >> 1
    return s[h] if n & 1 else (s[h - 1] + s[h]) / 2


@nb.njit(parallel=True, cache=True)
def search_kernel(
    stack, levels, centres, types, neigh, radii, index, w_grid, lam, P, Q, kappa2,
    coarse_neighbours, coarse_stride, golden_iterations, min_pixels, ra, rb, g_table, refine_stride, refine_mode,
    min_refine_contrast, refine_common,
):  # pragma: no cover - compiled
    """Inverse virtual depth of micro-images ``index``: coarse search on ``w_grid`` (the first
    ``coarse_neighbours`` neighbours, pixels on a ``coarse_stride`` grid), then golden-section
    search of the bracket around the coarse minimum with every neighbour and the pixels on a
    ``refine_stride`` grid (0: quincunx); the estimate is the better of the final interior points
    (``refine_mode`` REFINE_GOLDEN), or the vertex of the parabola through full costs half a coarse
    step apart around the coarse minimum (REFINE_PARABOLA: 3–4 evaluations over the pixels that
    overlap at each hypothesis with ``refine_common`` REFINE_VARYING; 5 over the pixels common to
    all with REFINE_COMMON_PIXELS, 5 + 3 re-centred on the vertex with REFINE_RECENTRED, 3–4 centred on the
    coarse curve's vertex with REFINE_COARSE_RECENTRED); micro-images whose
    coarse contrast is below ``min_refine_contrast`` are not refined (STATUS_NOT_REFINED). ``ra``,
    ``rb`` (T,): the pupil-vignetting shift's radii (rb all 0: none); ``g_table`` (T, n):
    :func:`centroid_table`. ``stack`` (H, W, L).

    Returns
    -------
    w : (M,) inverse virtual depth (NaN unless status OK; the bound's w when STATUS_AT_BOUND); cost : (M,) the refined cost (the
    golden section's at its best point; the parabola's value at its vertex);
    contrast : (M,) 1 − (the coarse curve's minimum)/(its median), from the same pairs and
    pixels (the refined cost uses more of both, so it is not compared with the coarse curve);
    pairs : (M,) pairs at the optimum;
    status : (M,) int8 (STATUS_*).
    """
    m = index.shape[0]
    G = w_grid.shape[0]
    T = P.shape[0]
    n_all = neigh.shape[1]
    rho_g, inv_g, fwd_g = grid_pair_tables(w_grid, P, Q, kappa2, levels, ra, rb, g_table)
    out_w = np.full(m, np.nan)
    out_cost = np.full(m, np.nan)
    out_median = np.full(m, np.nan)
    out_pairs = np.zeros(m, dtype=np.int32)
    out_status = np.zeros(m, dtype=np.int8)
    coarse_min = max(min_pixels // (coarse_stride * coarse_stride), 1)
    for t in nb.prange(m):
        i = index[t]
        r = radii[i]
        curve = np.empty(G)
        npairs = np.empty(G, dtype=np.int64)
        _, _, _, px, py, ro, exg, eyg = _costs_work(r, G, T, g_table)
        _costs(stack, levels, centres, types, neigh, coarse_neighbours, i, w_grid, lam, kappa2, r, coarse_stride,
               coarse_min, rho_g, inv_g, fwd_g, px, py, ro, exg, eyg, curve, npairs, np.bool_(False))
        best = np.int64(-1)
        for q in range(G):
            c = curve[q]
            if not math.isnan(c) and (best < 0 or c < curve[best]):
                best = q
        if best < 0:
            out_status[t] = STATUS_NO_PAIRS
            continue
        med = _median(curve[~np.isnan(curve)])
        out_median[t] = 1.0 - curve[best] / med if med > 0 else 0.0
        if best == 0 or best == G - 1:
            out_status[t] = STATUS_AT_BOUND
            out_w[t] = w_grid[best]
            continue
        if out_median[t] < min_refine_contrast:
            out_status[t] = STATUS_NOT_REFINED
            continue
        rho, inv, fwd, px, py, ro, ex, ey = _costs_work(r, 5, T, g_table)
        ctx = (stack, levels, centres, types, neigh, n_all, i, lam, P, Q, kappa2, ra, rb, g_table, r)
        work = (rho, inv, fwd, px, py, ro, ex, ey, np.empty(5), np.empty(5, dtype=np.int64))
        wb, cb, pairs = _refine(ctx, work, curve, w_grid, best, refine_mode, refine_common, refine_stride, min_pixels,
                                golden_iterations)
        if math.isnan(cb):
            out_status[t] = STATUS_NO_PAIRS
            continue
        out_w[t] = wb
        out_cost[t] = cb
        out_pairs[t] = pairs
        out_status[t] = STATUS_OK
    return out_w, out_cost, out_median, out_pairs, out_status


@nb.njit(parallel=True, cache=True)
def cost_curve_kernel(stack, levels, centres, types, neigh, radii, index, w_grid, lam, P, Q, kappa2, stride, min_pixels,
                      ra, rb, g_table):  # pragma: no cover
    """(M, G) cost of micro-images ``index`` at every ``w_grid`` value, every neighbour (diagnostics, tests)."""
    m = index.shape[0]
    G = w_grid.shape[0]
    out = np.full((m, G), np.nan)
    rho_g, inv_g, fwd_g = grid_pair_tables(w_grid, P, Q, kappa2, levels, ra, rb, g_table)
    for t in nb.prange(m):
        i = index[t]
        _, _, _, px, py, ro, ex, ey = _costs_work(radii[i], G, P.shape[0], g_table)
        _costs(stack, levels, centres, types, neigh, neigh.shape[1], i, w_grid, lam, kappa2, radii[i], stride, min_pixels,
               rho_g, inv_g, fwd_g, px, py, ro, ex, ey, out[t], np.empty(G, dtype=np.int64), np.bool_(False))
    return out
