"""numba kernels of corner detection: one parallel loop over micro-images, the pixels of each
micro-image in an inner loop. Each micro-image is computed independently, so results do not
depend on the thread count.

- :func:`xjunction_fit_kernel`: Levenberg–Marquardt fit of the blurred X-junction
  ``a + b·erf(d1/(√2σ))·erf(d2/(√2σ))`` (``corners.fit_corners``);
- :func:`symmetric_kernel`: centre of point symmetry (``corners.refine_symmetric``);
- :func:`render_kernel`: the devignetted image of a checkerboard corner seen through a micro-lens
  whose pupil is vignetted by the main aperture (``corners.render_corners``).
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_SQRT2_PI = math.sqrt(2.0 / math.pi)
_ERF_SATURATION = 3.6
_SMOOTH_HALF = math.sqrt(5.0)


@nb.njit(cache=True)
def _solve7(A, g, n):  # pragma: no cover - compiled
    """Solve A x = g (n × n, symmetric positive) by Gaussian elimination with partial pivoting;
    returns (x, ok). A and g are overwritten."""
    x = np.zeros(n)
    for c in range(n):
        p = c
        for r in range(c + 1, n):
            if abs(A[r, c]) > abs(A[p, c]):
                p = r
        if abs(A[p, c]) < 1e-300:
            return x, False
        if p != c:
            for k in range(n):
                A[c, k], A[p, k] = A[p, k], A[c, k]
            g[c], g[p] = g[p], g[c]
        for r in range(c + 1, n):
            f = A[r, c] / A[c, c]
            for k in range(c, n):
                A[r, k] -= f * A[c, k]
            g[r] -= f * g[c]
    for c in range(n - 1, -1, -1):
        s = g[c]
        for k in range(c + 1, n):
            s -= A[c, k] * x[k]
        x[c] = s / A[c, c]
    return x, True


_XJ_TABLE_STEP_PX = 0.01
"""The X-junction fit evaluates erf by table until its corner step falls below this."""


@nb.njit(cache=True)
def _xj_eval(p, X, Y, I, Wt, P, J, res, exact):  # pragma: no cover - compiled
    """Weighted residuals (I − f)·w and Jacobian of f·w for the X-junction; returns the cost.
    erf and its slope exactly, or (``exact`` False) from :func:`_edge`'s table (2e-6)."""
    cx, cy, t1, t2, sg, a, b = p[0], p[1], p[2], p[3], p[4], p[5], p[6]
    c1, s1, c2, s2 = math.cos(t1), math.sin(t1), math.cos(t2), math.sin(t2)
    k = _INV_SQRT2 / sg
    cost = 0.0
    for j in range(P):
        dx = X[j] - cx
        dy = Y[j] - cy
        d1 = c1 * dx + s1 * dy
        d2 = c2 * dx + s2 * dy
        # Exact erf here (not _edge's table): this LM also fits the blur σ and stops on tiny cost
        # changes, which a piecewise-linear erf turns into noise (374 of 2698 fits unconverged).
        if exact:
            e1 = math.erf(d1 * k)
            e2 = math.erf(d2 * k)
            g1 = _SQRT2_PI / sg * math.exp(-0.5 * (d1 / sg) ** 2)
            g2 = _SQRT2_PI / sg * math.exp(-0.5 * (d2 / sg) ** 2)
        else:
            e1, g1 = _edge(d1 * k, _SQRT2_PI / sg)
            e2, g2 = _edge(d2 * k, _SQRT2_PI / sg)
        w = Wt[j]
        r = (I[j] - (a + b * e1 * e2)) * w
        res[j] = r
        cost += r * r
        J[j, 0] = w * b * (-c1 * g1 * e2 - c2 * e1 * g2)
        J[j, 1] = w * b * (-s1 * g1 * e2 - s2 * e1 * g2)
        J[j, 2] = w * b * g1 * (-s1 * dx + c1 * dy) * e2
        J[j, 3] = w * b * e1 * g2 * (-s2 * dx + c2 * dy)
        J[j, 4] = w * b * (-g1 * d1 / sg * e2 - e1 * g2 * d2 / sg)
        J[j, 5] = w
        J[j, 6] = w * e1 * e2
    return cost


@nb.njit(parallel=True, cache=True)
def xjunction_fit_kernel(image, weight, centres, radii, init_corner, init_angles, iterations, step_tolerance):  # pragma: no cover
    """Per micro-image LM fit; returns params (M, 7) [cx, cy, θ1, θ2, σ, a, b], cost (M,),
    number of pixels (M,) and converged (M,): the corner's last step below ``step_tolerance`` px.
    A fit whose corner leaves the micro-image disc stops there, not converged (an edge or a flat
    micro-image: a corner walking away is most of the time spent on micro-images without one)."""
    H, W = image.shape
    M = centres.shape[0]
    params = np.zeros((M, 7))
    costs = np.zeros(M)
    npix = np.zeros(M, dtype=np.int64)
    conv = np.zeros(M, dtype=np.bool_)
    rmax = 0
    for i in range(M):
        rmax = max(rmax, int(math.ceil(radii[i])) + 1)
    side = 2 * rmax + 1
    for i in nb.prange(M):
        X = np.empty(side * side)
        Y = np.empty(side * side)
        I = np.empty(side * side)
        Wt = np.empty(side * side)
        cu = int(round(centres[i, 0]))
        cv = int(round(centres[i, 1]))
        r = int(math.ceil(radii[i])) + 1
        P = np.int64(0)  # np.int64, np.bool_: not literals, so _xj_eval compiles once, not six times
        for y in range(cv - r, cv + r + 1):
            for x in range(cu - r, cu + r + 1):
                if x < 0 or x >= W or y < 0 or y >= H:
                    continue
                if math.hypot(x - centres[i, 0], y - centres[i, 1]) > radii[i]:
                    continue
                w = weight[y, x]
                if w <= 0.0:
                    continue
                X[P] = x
                Y[P] = y
                I[P] = image[y, x]
                Wt[P] = math.sqrt(w)
                P += 1
        npix[i] = P
        if P < 8:
            continue
        p = np.empty(7)
        p[0] = init_corner[i, 0]
        p[1] = init_corner[i, 1]
        p[2] = init_angles[i, 0]
        p[3] = init_angles[i, 1]
        p[4] = 1.5
        # a, b by linear least squares given the geometry
        c1, s1 = math.cos(p[2]), math.sin(p[2])
        c2, s2 = math.cos(p[3]), math.sin(p[3])
        k = _INV_SQRT2 / p[4]
        n = 0.0
        se = 0.0
        see = 0.0
        sI = 0.0
        seI = 0.0
        for j in range(P):
            dx = X[j] - p[0]
            dy = Y[j] - p[1]
            e = math.erf((c1 * dx + s1 * dy) * k) * math.erf((c2 * dx + s2 * dy) * k)
            w2 = Wt[j] * Wt[j]
            n += w2
            se += w2 * e
            see += w2 * e * e
            sI += w2 * I[j]
            seI += w2 * e * I[j]
        det = n * see - se * se
        if abs(det) < 1e-12:
            det = 1e-12
        p[6] = (n * seI - se * sI) / det
        p[5] = (sI - p[6] * se) / max(n, 1e-12)
        J = np.empty((P, 7))
        res = np.empty(P)
        Jn = np.empty((P, 7))
        resn = np.empty(P)
        # The table's erf while the corner moves by more than TABLE_STEP_PX, then the exact one: the
        # LM's accept test compares costs, which a piecewise-linear erf blurs near the optimum.
        exact = np.bool_(False)
        cost = _xj_eval(p, X, Y, I, Wt, P, J, res, exact)
        lam = 1e-2
        converged = False
        A = np.empty((7, 7))
        g = np.empty(7)
        pn = np.empty(7)
        for _ in range(iterations):
            # JᵀJ and Jᵀr in one pass over the pixels.
            A[:, :] = 0.0
            g[:] = 0.0
            for j in range(P):
                rj = res[j]
                for a_ in range(7):
                    ja = J[j, a_]
                    g[a_] += ja * rj
                    for b_ in range(a_, 7):
                        A[a_, b_] += ja * J[j, b_]
            for a_ in range(7):
                for b_ in range(a_ + 1, 7):
                    A[b_, a_] = A[a_, b_]
            for a_ in range(7):
                A[a_, a_] += lam * (A[a_, a_] + 1e-9)
            step, ok = _solve7(A, g, 7)
            if not ok:
                lam *= 10.0
                if lam > 1e6:
                    break
                continue
            step[4] = min(max(step[4], -0.5 * p[4]), 2.0)
            for a_ in range(7):
                pn[a_] = p[a_] + step[a_]
            pn[4] = max(pn[4], 0.2)
            cn = _xj_eval(pn, X, Y, I, Wt, P, Jn, resn, exact)
            if cn < cost:
                for a_ in range(7):
                    p[a_] = pn[a_]
                J, Jn = Jn, J
                res, resn = resn, res
                cost = cn
                lam *= 0.3
                small = max(abs(step[0]), abs(step[1]))
                if not exact and small < _XJ_TABLE_STEP_PX:
                    exact = np.bool_(True)
                    cost = _xj_eval(p, X, Y, I, Wt, P, J, res, exact)
                elif exact and small < step_tolerance:
                    converged = True
                    break
                if math.hypot(p[0] - centres[i, 0], p[1] - centres[i, 1]) > radii[i] + 1.0:
                    break  # the corner left the micro-image: no corner here (not converged)
            elif not exact:
                exact = np.bool_(True)  # no progress on the table: go on with the exact erf
                cost = _xj_eval(p, X, Y, I, Wt, P, J, res, exact)
            else:
                lam *= 10.0
                if lam > 1e6:
                    break
        conv[i] = converged or (lam <= 1e6 and math.hypot(p[0] - centres[i, 0], p[1] - centres[i, 1]) <= radii[i] + 1.0)
        for a_ in range(7):
            params[i, a_] = p[a_]
        costs[i] = cost
    return params, costs, npix, conv


@nb.njit(cache=True)
def _bilinear3(image, weight, u, v):  # pragma: no cover - compiled
    """Bilinear samples of image and weight at (u, v), and of the image's central-difference
    gradient; (0, 0, 0, 0) outside."""
    H, W = image.shape
    if u < 1.0 or v < 1.0 or u >= W - 2.0 or v >= H - 2.0:
        return 0.0, 0.0, 0.0, 0.0
    u0 = int(math.floor(u))
    v0 = int(math.floor(v))
    fu = u - u0
    fv = v - v0
    w00 = (1 - fu) * (1 - fv)
    w10 = fu * (1 - fv)
    w01 = (1 - fu) * fv
    w11 = fu * fv
    val = w00 * image[v0, u0] + w10 * image[v0, u0 + 1] + w01 * image[v0 + 1, u0] + w11 * image[v0 + 1, u0 + 1]
    wt = w00 * weight[v0, u0] + w10 * weight[v0, u0 + 1] + w01 * weight[v0 + 1, u0] + w11 * weight[v0 + 1, u0 + 1]
    gx = 0.5 * (
        w00 * (image[v0, u0 + 1] - image[v0, u0 - 1])
        + w10 * (image[v0, u0 + 2] - image[v0, u0])
        + w01 * (image[v0 + 1, u0 + 1] - image[v0 + 1, u0 - 1])
        + w11 * (image[v0 + 1, u0 + 2] - image[v0 + 1, u0])
    )
    gy = 0.5 * (
        w00 * (image[v0 + 1, u0] - image[v0 - 1, u0])
        + w10 * (image[v0 + 1, u0 + 1] - image[v0 - 1, u0 + 1])
        + w01 * (image[v0 + 2, u0] - image[v0, u0])
        + w11 * (image[v0 + 2, u0 + 1] - image[v0, u0 + 1])
    )
    return val, wt, gx, gy


@nb.njit(parallel=True, cache=True)
def symmetric_kernel(image, weight, centres, radii, corner, max_radius, min_radius, iterations):  # pragma: no cover
    """Gauss–Newton on the centre of point symmetry; returns (corner (M, 2), radius (M,))."""
    M = corner.shape[0]
    out = corner.copy()
    rad_out = np.zeros(M)
    rmax = int(math.ceil(max_radius))
    n_side = 4 * rmax + 1
    for i in nb.prange(M):
        cx = out[i, 0]
        cy = out[i, 1]
        rad = 0.0
        for _ in range(iterations):
            dist = math.hypot(cx - centres[i, 0], cy - centres[i, 1])
            rad = min(max(radii[i] - dist - 0.5, 0.0), max_radius)
            if rad < min_radius:
                break
            a11 = 0.0
            a12 = 0.0
            a22 = 0.0
            b1 = 0.0
            b2 = 0.0
            for iy in range(n_side):
                oy = -rmax + 0.5 * iy
                if oy < 0:
                    continue
                for ix in range(n_side):
                    ox = -rmax + 0.5 * ix
                    if oy == 0 and ox <= 0:
                        continue  # half-disc: each pair once
                    rr = math.hypot(ox, oy)
                    if rr > rad:
                        continue
                    Ip, wp, gxp, gyp = _bilinear3(image, weight, cx + ox, cy + oy)
                    Im, wm, gxm, gym = _bilinear3(image, weight, cx - ox, cy - oy)
                    w = wp * wm
                    if w <= 0.0:
                        continue
                    r = Ip - Im
                    jx = gxp - gxm
                    jy = gyp - gym
                    a11 += w * jx * jx
                    a12 += w * jx * jy
                    a22 += w * jy * jy
                    b1 += w * jx * r
                    b2 += w * jy * r
            det = a11 * a22 - a12 * a12
            if det <= 1e-12:
                break
            sx = -(a22 * b1 - a12 * b2) / det
            sy = -(-a12 * b1 + a11 * b2) / det
            sx = min(max(sx, -1.0), 1.0)
            sy = min(max(sy, -1.0), 1.0)
            cx += sx
            cy += sy
            if abs(sx) < 1e-3 and abs(sy) < 1e-3:
                break
        dist = math.hypot(cx - centres[i, 0], cy - centres[i, 1])
        rad = min(max(radii[i] - dist - 0.5, 0.0), max_radius)
        out[i, 0] = cx
        out[i, 1] = cy
        rad_out[i] = rad if rad >= min_radius else 0.0
    return out, rad_out


@nb.njit(cache=True, inline="always")
def _disc_set(need, cap, offsets):  # pragma: no cover - compiled
    """Bounds [s0, s1) of the first disc point set with at least min(``need``, ``cap``) points (the
    largest if none has); ``offsets`` are the sets' bounds."""
    n_sets = offsets.shape[0] - 1
    j = 0
    need = min(need, cap)
    while j < n_sets - 1 and offsets[j + 1] - offsets[j] < need:
        j += 1
    return offsets[j], offsets[j + 1]


_EDGE_STEP = 1.0 / 512.0
_EDGE_T = np.arange(0.0, _ERF_SATURATION + 2 * _EDGE_STEP, _EDGE_STEP)
_EDGE_TABLE = np.stack([np.array([math.erf(t) for t in _EDGE_T]), np.exp(-_EDGE_T * _EDGE_T)], axis=1)
"""erf(t) and exp(−t²) on [0, 3.6] every 1/512: linear interpolation is exact to 2e-6 (erf'' ≤ 0.97,
step² / 8 = 4e-7 in value), far below the 8-bit quantisation of an image (2e-3)."""


@nb.njit(cache=True, inline="always", fastmath=True)
def _edge(t, dk):  # pragma: no cover - compiled
    """erf(t) and its slope dk·exp(−t²), from :data:`_EDGE_TABLE` (an erf and an exp per lens
    sample were half of the rendered fit's time); beyond |t| = 3.6 the erf is ±1 to 4e-7 and its
    slope 2e-6 of the peak."""
    a = abs(t)
    if a >= _ERF_SATURATION:
        return (1.0 if t > 0 else -1.0), 0.0
    x = a * 512.0
    i = int(x)
    f = x - i
    e = _EDGE_TABLE[i, 0] + f * (_EDGE_TABLE[i + 1, 0] - _EDGE_TABLE[i, 0])
    g = _EDGE_TABLE[i, 1] + f * (_EDGE_TABLE[i + 1, 1] - _EDGE_TABLE[i, 1])
    return (e if t >= 0 else -e), dk * g


@nb.njit(cache=True, inline="always", fastmath=True)
def _lens_sample(wzx, wzy, pa1, pa2, pb1, pb2, ex, ey, qa1, qa2, qb1, qb2, ra, c1, n1, c2, n2, sigma, k, dk, lim, inner, grad, g, scale,
                 ell, a11, a12, a22):  # pragma: no cover
    """The contribution of lens point z (unit disc) to :func:`_render_pixel`, times ``scale``:
    returns (scale·(m·f + cov·h), scale·m) and adds scale × its derivatives into ``g``.
    (wzx, wzy) = R_b·z; pa_i = ρ·(c_i, n_i)·z and pb_i = ρ·(−n_i, c_i)·z (:func:`_sample_table`);
    qa_i, qb_i the same projections of the pixel's offset from the corner.
    With ``ell`` the pupil is the ellipse |A·w| ≤ R_a (A = [[a11, a12], [a12, a22]], w the pixel's
    offset from the pupil centre less R_b·z): (ex, ey) and (wzx, wzy) are then already A·(…), and
    the mask edge is crossed along the pixel-space gradient of |A·w| (distance (R_a − |A·w|)/|∇|)."""
    wx = ex - wzx
    wy = ey - wzy
    r2 = wx * wx + wy * wy
    if r2 > lim * lim:
        return 0.0, 0.0
    # a_i = (c_i, n_i)·(x + ρz − K): the signed distance of the sharp point to line i.
    a1 = qa1 + pa1
    a2 = qa2 + pa2
    e1, d1 = _edge(a1 * k, dk)  # erf and de/da of line 1
    e2, d2 = _edge(a2 * k, dk)
    f = e1 * e2
    if r2 < inner * inner:
        m = 1.0
        cov = 0.0
        nx = 0.0
        ny = 0.0
    else:
        # The pixel offset's distribution across the mask edge: a Beta(2, 2) density of
        # variance σ² (support ±√5·σ), whose CDF is the smoothstep: m = the mask's pixel
        # fraction, cov = −σ²·dm/dt (exact for a Gaussian, first order for any density).
        rr = math.sqrt(r2)
        if ell:
            # ∇|A·w_pix| = A·(A·w_pix)/|A·w_pix| (A symmetric), the outward normal in pixels.
            gx = (a11 * wx + a12 * wy) / max(rr, 1e-12)
            gy = (a12 * wx + a22 * wy) / max(rr, 1e-12)
            gn = max(math.sqrt(gx * gx + gy * gy), 1e-12)
            xs = min(max(((ra - rr) / gn / sigma + _SMOOTH_HALF) / (2.0 * _SMOOTH_HALF), 0.0), 1.0)
            nx = gx / gn
            ny = gy / gn
        else:
            xs = min(max(((ra - rr) / sigma + _SMOOTH_HALF) / (2.0 * _SMOOTH_HALF), 0.0), 1.0)
            nx = wx / max(rr, 1e-12)
            ny = wy / max(rr, 1e-12)
        m = xs * xs * (3.0 - 2.0 * xs)
        cov = -sigma * 6.0 * xs * (1.0 - xs) / (2.0 * _SMOOTH_HALF)
    acc = m * f
    if d1 == 0.0 and d2 == 0.0:
        # Both edges saturated: the corner is flat at this sample, no slope and no covariance term.
        return scale * acc, scale * m
    if cov != 0.0:
        p1 = nx * c1 + ny * n1
        p2 = nx * c2 + ny * n2
        h = d1 * e2 * p1 + e1 * d2 * p2  # n·∇_y f
        acc += cov * h
    if grad:
        # ∂a/∂K = −(c_i, n_i); ∂a_i/∂θ_i = b_i = (−n_i, c_i)·(x + ρz − K).
        b1 = qb1 + pb1
        b2 = qb2 + pb2
        g[0] -= scale * m * (d1 * c1 * e2 + e1 * d2 * c2)
        g[1] -= scale * m * (d1 * n1 * e2 + e1 * d2 * n2)
        g[2] += scale * m * d1 * b1 * e2
        g[3] += scale * m * e1 * d2 * b2
        if cov != 0.0:
            dd1 = -2.0 * k * k * a1 * d1  # d²e1/da1²
            dd2 = -2.0 * k * k * a2 * d2
            q1 = -nx * n1 + ny * c1  # ∂p1/∂θ1
            q2 = -nx * n2 + ny * c2
            g[0] -= scale * cov * (dd1 * c1 * e2 * p1 + d1 * d2 * (c2 * p1 + c1 * p2) + e1 * dd2 * c2 * p2)
            g[1] -= scale * cov * (dd1 * n1 * e2 * p1 + d1 * d2 * (n2 * p1 + n1 * p2) + e1 * dd2 * n2 * p2)
            g[2] += scale * cov * (dd1 * b1 * e2 * p1 + d1 * e2 * q1 + d1 * b1 * d2 * p2)
            g[3] += scale * cov * (d1 * d2 * b2 * p1 + e1 * dd2 * b2 * p2 + e1 * d2 * q2)
    return scale * acc, scale * m


@nb.njit(cache=True, inline="always")
def _sample_table(pts, s0, s1, rbi, rho_i, c1, n1, c2, n2, tab, ell, a11, a12, a22, unblurred, lens_px):  # pragma: no cover - compiled
    """Per lens point z of pts[s0:s1] the corner-independent-of-pixel terms of :func:`_lens_sample`:
    R_b·z (A·R_b·z with ``ell``), ρ·(c_i, n_i)·z and ρ·(−n_i, c_i)·z, the sample's weight
    1 − ``unblurred`` and the lens point's offset from the lens centre, ``lens_px``·z (px; for the
    natural vignetting, :func:`_render_pixel`) (into ``tab``, one row per point); with
    ``unblurred`` > 0 a last row for the chief ray, z = 0, of weight unblurred × the points'
    number. Returns the number of rows.
    (One row set and one loop over it in :func:`_render_pixel`: the chief ray as a second
    inlined :func:`_lens_sample` made render_grad_kernel's compilation 23 s instead of 11–16.)"""
    n = s1 - s0
    for s in range(s0, s1):
        zx = pts[s, 0]
        zy = pts[s, 1]
        j = s - s0
        if ell:
            tab[j, 0] = rbi * (a11 * zx + a12 * zy)
            tab[j, 1] = rbi * (a12 * zx + a22 * zy)
        else:
            tab[j, 0] = rbi * zx
            tab[j, 1] = rbi * zy
        tab[j, 2] = rho_i * (c1 * zx + n1 * zy)
        tab[j, 3] = rho_i * (c2 * zx + n2 * zy)
        tab[j, 4] = rho_i * (-n1 * zx + c1 * zy)
        tab[j, 5] = rho_i * (-n2 * zx + c2 * zy)
        tab[j, 6] = 1.0 - unblurred
        tab[j, 7] = lens_px * zx
        tab[j, 8] = lens_px * zy
    if unblurred > 0.0:
        for q in range(9):
            tab[n, q] = 0.0
        tab[n, 6] = unblurred * n
        return n + 1
    return n


@nb.njit(cache=True, inline="always", fastmath=True)
def _render_pixel(x, y, mx, my, ra, kx, ky, c1, n1, c2, n2, reach, sigma, k, dk, n_rows, tab, grad, g, ell, pup, nat):  # pragma: no cover
    """Σ_z over lens samples of the pixel-integrated devignetted corner at pixel (x, y), and its
    derivatives when ``grad`` (into ``g``: ∂/∂Kx, ∂/∂Ky, ∂/∂θ1, ∂/∂θ2 of the returned mean).

    The pixel integrates over its area δ (variance σ² = 1/12 per axis) both the sharp point
    x + δ + ρz and the pupil mask ``|x + δ − c − R_b z| ≤ R_a`` of each lens point z:
    E_δ[M·S] = m·S_σ + Cov, with m(t) the mask's pixel fraction (t = R_a − |x − c − R_b z|) and,
    to first order in δ, Cov = −σ²·m'(t)·n·∇S_σ (n the outward unit vector of x − c − R_b z).
    m is the CDF of δ across the edge, taken as the smoothstep (a Beta(2, 2) density of variance
    σ²; a Gaussian CDF costs an erf and an exp per sample and gave the same accuracy: 12
    full-scale r12-c / r12-d frames, uv RMS 0.0460 / 0.0512 px against 0.0459 / 0.0510 px).
    A fraction ``unblurred`` of the light (measured on the white images by pre-calibration:
    0 for a real lens, 1/31 for PRISM's chief ray) reaches the pixel along its chief ray, z = 0,
    unblurred but through the same aperture mask: the ``n_rows`` rows of ``tab``
    (:func:`_sample_table`) hold the samples' weights and that ray.
    The devignetted value is Σ E[M·S] / Σ m, the white being Σ m. With natural vignetting
    (``nat`` = (f_x, f_y, L, (s/d)²), (s/d)² > 0) each lens point z weighs (1 + |L·z − ξ|²·(s/d)²)⁻²
    in both sums: cos θ_X·cos θ_P/r² of the ray from the pixel to the lens point, ξ the pixel's
    offset from the foot f of the lens's axis on the sensor, L the lens radius (px), d the MLA–sensor
    distance (``docs/model.md``, "Natural vignetting").
    With ``ell`` the pupil's preimage is an ellipse: ``pup`` = (o_x, o_y, a11, a12, a22, s_max), the
    mask |A·(x + δ − c − o − R_b z)| ≤ R_a (``tab`` holds A·R_b·z), s_max A's largest eigenvalue
    (the mask's edge band in A's frame is s_max times the pixel's).
    Returns (Σ m·f + T, Σ m) where f = erf·erf is the unit-contrast corner; (±1, 1) with zero
    derivatives when the pixel is farther than ``reach`` from both lines (every sample then sees
    the same quadrant)."""
    g[0] = 0.0
    g[1] = 0.0
    g[2] = 0.0
    g[3] = 0.0
    qa1 = c1 * (x - kx) + n1 * (y - ky)
    qa2 = c2 * (x - kx) + n2 * (y - ky)
    if abs(qa1) > reach and abs(qa2) > reach:
        return (1.0 if qa1 * qa2 > 0 else -1.0), 1.0
    qb1 = -n1 * (x - kx) + c1 * (y - ky)
    qb2 = -n2 * (x - kx) + c2 * (y - ky)
    ex = x - mx
    ey = y - my
    a11 = 1.0
    a12 = 0.0
    a22 = 1.0
    if ell:
        ex0 = ex - pup[0]
        ey0 = ey - pup[1]
        a11 = pup[2]
        a12 = pup[3]
        a22 = pup[4]
        ex = a11 * ex0 + a12 * ey0
        ey = a12 * ex0 + a22 * ey0
        lim = ra + _SMOOTH_HALF * sigma * pup[5]
        inner = ra - _SMOOTH_HALF * sigma * pup[5]
    else:
        lim = ra + _SMOOTH_HALF * sigma
        inner = ra - _SMOOTH_HALF * sigma
    acc = 0.0
    wsum = 0.0
    nv = nat[3]
    fx = x - nat[0]
    fy = y - nat[1]
    for j in range(n_rows):
        scale = tab[j, 6]
        if nv > 0.0:
            dx = tab[j, 7] - fx
            dy = tab[j, 8] - fy
            q = 1.0 + (dx * dx + dy * dy) * nv
            scale = scale / (q * q)
        a, w = _lens_sample(tab[j, 0], tab[j, 1], tab[j, 2], tab[j, 3], tab[j, 4], tab[j, 5], ex, ey, qa1, qa2, qb1, qb2,
                            ra, c1, n1, c2, n2, sigma, k, dk, lim, inner, grad, g, scale, ell, a11, a12, a22)
        acc += a
        wsum += w
    return acc, wsum


@nb.njit(cache=True, inline="always")
def _corner_setup(i, mic, radius, rb, rho, angles, sigma, density, mask_density, offsets, cap):  # pragma: no cover
    """Per micro-image i of the render kernels: the disc point set [s0, s1) (the blur's and the
    mask's densities, at most ``cap[i]`` points), the line normals (c, n), the reach beyond which a
    pixel sees one quadrant (erf(4.5/√2) = 1 − 7e-6) and the bounding box of the disc of ``radius[i]``."""
    s0, s1 = _disc_set(max(density * rho[i] * rho[i], mask_density * rb[i] * rb[i]), cap[i], offsets)
    r = radius[i]
    return (
        s0, s1,
        math.cos(angles[i, 0]), math.sin(angles[i, 0]), math.cos(angles[i, 1]), math.sin(angles[i, 1]),
        abs(rho[i]) + 4.5 * sigma,
        int(math.floor(mic[i, 0] - r)), int(math.ceil(mic[i, 0] + r)),
        int(math.floor(mic[i, 1] - r)), int(math.ceil(mic[i, 1] + r)),
    )


@nb.njit(parallel=True, cache=True)
def render_kernel(out, mic, radius, rb, ra, rho, corner, angles, sign, sigma, density, mask_density, pts, offsets, unblurred, cap, ell, pupil, nat):  # pragma: no cover
    """Write into ``out`` the devignetted image of corners seen through pupil-vignetted micro-lenses.

    Pixel x of micro-image i sees the sharp (chief-ray) image S at x + ρ·z for the lens-disc
    points z (unit disc, radius R_b on the lens) whose rays pass the main aperture: those with
    |z − (x − c_i)/R_b| ≤ R_a/R_b. The devignetted value is the mean of S over them:
    0.5 + 0.5·sign·mean(erf(d1/(√2σ))·erf(d2/(√2σ))), integrated over the pixel's area with the
    mask (:func:`_render_pixel`). ``pts`` holds equal-area disc point sets of increasing size,
    ``offsets`` their bounds; the first set with at least ``density``·ρ² points is used
    (spacing ≈ √(π/density) px). Where ``ell[i]`` the pupil's preimage is the ellipse ``pupil[i]``
    (:func:`_render_pixel`), elsewhere the disc of radius R_a about c_i. ``nat[i]`` = (f_x, f_y, L,
    (s/d)²): the natural vignetting's weights (:func:`_render_pixel`; (s/d)² = 0: none).
    """
    M = mic.shape[0]
    H, W = out.shape
    k = _INV_SQRT2 / sigma
    dk = 2.0 / math.sqrt(math.pi) * k
    for i in nb.prange(M):
        s0, s1, c1, n1, c2, n2, reach, x0, x1, y0, y1 = _corner_setup(i, mic, radius, rb, rho, angles, sigma, density, mask_density, offsets, cap)
        g = np.empty(4)
        tab = np.empty((s1 - s0 + 1, 9))
        n_rows = _sample_table(pts, s0, s1, rb[i], rho[i], c1, n1, c2, n2, tab, ell[i], pupil[i, 2], pupil[i, 3], pupil[i, 4], unblurred,
                               nat[i, 2])
        r = radius[i]
        for y in range(max(y0, 0), min(y1 + 1, H)):
            for x in range(max(x0, 0), min(x1 + 1, W)):
                ex = x - mic[i, 0]
                ey = y - mic[i, 1]
                if ex * ex + ey * ey > r * r:
                    continue
                acc, wsum = _render_pixel(x, y, mic[i, 0], mic[i, 1], ra[i], corner[i, 0], corner[i, 1],
                                          c1, n1, c2, n2, reach, sigma, k, dk, n_rows, tab, False, g, ell[i], pupil[i], nat[i])
                out[y, x] = 0.5 + 0.5 * sign[i] * acc / wsum if wsum > 1e-9 else 0.0


@nb.njit(parallel=True, cache=True, fastmath=True)
def render_grad_kernel(out, origin, half_size, H, W, mic, radius, rb, ra, rho, corner, angles, sign, sigma, density, mask_density, pts, offsets, unblurred, cap, ell, pupil, nat):  # pragma: no cover
    """:func:`render_kernel` and its derivatives in one pass, on a square stencil per micro-image:
    ``out[q, i, (y − oy + h)·(2h + 1) + (x − ox + h)]`` for the pixels (x, y) of micro-image i,
    (ox, oy) = ``origin[i]``, h = ``half_size``; q = 0 the devignetted value, 1–2 ∂/∂K (u, v),
    3–4 ∂/∂θ1, ∂/∂θ2 (the line-normal angles). Stencil pixels outside the disc or the image are
    left untouched."""
    M = mic.shape[0]
    side = 2 * half_size + 1
    k = _INV_SQRT2 / sigma
    dk = 2.0 / math.sqrt(math.pi) * k
    for i in nb.prange(M):
        s0, s1, c1, n1, c2, n2, reach, x0, x1, y0, y1 = _corner_setup(i, mic, radius, rb, rho, angles, sigma, density, mask_density, offsets, cap)
        g = np.empty(4)
        tab = np.empty((s1 - s0 + 1, 9))
        n_rows = _sample_table(pts, s0, s1, rb[i], rho[i], c1, n1, c2, n2, tab, ell[i], pupil[i, 2], pupil[i, 3], pupil[i, 4], unblurred,
                               nat[i, 2])
        r = radius[i]
        half = 0.5 * sign[i]
        y0 = max(y0, origin[i, 1] - half_size)
        y1 = min(y1, origin[i, 1] + half_size)
        x0 = max(x0, origin[i, 0] - half_size)
        x1 = min(x1, origin[i, 0] + half_size)
        for y in range(max(y0, 0), min(y1 + 1, H)):
            for x in range(max(x0, 0), min(x1 + 1, W)):
                ex = x - mic[i, 0]
                ey = y - mic[i, 1]
                if ex * ex + ey * ey > r * r:
                    continue
                o = (y - origin[i, 1] + half_size) * side + (x - origin[i, 0] + half_size)
                acc, wsum = _render_pixel(x, y, mic[i, 0], mic[i, 1], ra[i], corner[i, 0], corner[i, 1],
                                          c1, n1, c2, n2, reach, sigma, k, dk, n_rows, tab, True, g, ell[i], pupil[i], nat[i])
                if wsum > 1e-9:
                    inv = half / wsum
                    out[0, i, o] = 0.5 + acc * inv
                    for q in range(4):
                        out[q + 1, i, o] = g[q] * inv
                else:
                    for q in range(5):
                        out[q, i, o] = 0.0


@nb.njit(parallel=True, cache=True)
def circle_crossings_kernel(image, centres, radii, n_samples):  # pragma: no cover - compiled
    """Per micro-image: the bilinear samples of ``image`` on a circle (``corners.bilinear``,
    clamped to the border), their 10th–90th percentile range (numpy's linear interpolation)
    and the number of crossings of its midpoint around the circle. Same values as
    ``corners._circle_crossings`` without its (M, n_samples) temporaries (upc-s: 4e7 samples)."""
    M = centres.shape[0]
    H, W = image.shape
    n_changes = np.zeros(M, dtype=np.int64)
    contrast = np.zeros(M)
    step = 2.0 * math.pi / n_samples
    lo_pos = 0.1 * (n_samples - 1)
    hi_pos = 0.9 * (n_samples - 1)
    lo_i = int(math.floor(lo_pos))
    hi_i = int(math.floor(hi_pos))
    lo_f = lo_pos - lo_i
    hi_f = hi_pos - hi_i
    cos_phi = np.empty(n_samples)
    sin_phi = np.empty(n_samples)
    for j in range(n_samples):
        cos_phi[j] = math.cos(j * step)
        sin_phi[j] = math.sin(j * step)
    for i in nb.prange(M):
        vals = np.empty(n_samples)
        for j in range(n_samples):
            u = min(max(centres[i, 0] + radii[i] * cos_phi[j], 0.0), W - 1.000001)
            v = min(max(centres[i, 1] + radii[i] * sin_phi[j], 0.0), H - 1.000001)
            u0 = int(math.floor(u))
            v0 = int(math.floor(v))
            fu = u - u0
            fv = v - v0
            vals[j] = (image[v0, u0] * (1 - fu) + image[v0, u0 + 1] * fu) * (1 - fv) + (image[v0 + 1, u0] * (1 - fu) + image[v0 + 1, u0 + 1] * fu) * fv
        srt = np.sort(vals)
        lo = srt[lo_i] + lo_f * (srt[min(lo_i + 1, n_samples - 1)] - srt[lo_i])
        hi = srt[hi_i] + hi_f * (srt[min(hi_i + 1, n_samples - 1)] - srt[hi_i])
        mid = 0.5 * (lo + hi)
        cnt = 0
        for j in range(n_samples):
            a = vals[j] > mid
            b = vals[(j + 1) % n_samples] > mid
            if a != b:
                cnt += 1
        n_changes[i] = cnt
        contrast[i] = hi - lo
    return n_changes, contrast


@nb.njit(parallel=True, cache=True)
def rendered_normal_kernel(G, w, obs):  # pragma: no cover - compiled
    """Weighted normal equations of the rendered-corner fit, per micro-image: with the design
    row a = (1, r, ∂r/∂Kx, ∂r/∂Ky, ∂r/∂θ1, ∂r/∂θ2) from G (5, m, P) and weights w (m, P),
    N = Σ w·aaᵀ (m, 6, 6) and g = Σ w·a·obs (m, 6). Pixels of zero weight are skipped."""
    m = G.shape[1]
    P = G.shape[2]
    N = np.zeros((m, 6, 6))
    g = np.zeros((m, 6))
    for i in nb.prange(m):
        a = np.empty(6)
        a[0] = 1.0
        for p in range(P):
            wp = w[i, p]
            if wp == 0.0:
                continue
            for j in range(5):
                a[j + 1] = G[j, i, p]
            o = obs[i, p]
            for j in range(6):
                wa = wp * a[j]
                g[i, j] += wa * o
                for k in range(j, 6):
                    N[i, j, k] += wa * a[k]
        for j in range(6):
            for k in range(j):
                N[i, j, k] = N[i, k, j]
    return N, g


@nb.njit(parallel=True, cache=True)
def rendered_residual_kernel(G, w, obs, sol):  # pragma: no cover - compiled
    """Σ w·(obs − a·sol)² per micro-image (m,), the design rows a of :func:`rendered_normal_kernel`."""
    m = G.shape[1]
    P = G.shape[2]
    ssr = np.zeros(m)
    for i in nb.prange(m):
        s = 0.0
        for p in range(P):
            wp = w[i, p]
            if wp == 0.0:
                continue
            pred = sol[i, 0]
            for j in range(5):
                pred += sol[i, j + 1] * G[j, i, p]
            e = obs[i, p] - pred
            s += wp * e * e
        ssr[i] = s
    return ssr


@nb.njit(parallel=True, cache=True)
def devignette_kernel(raw, white, threshold, bright):  # pragma: no cover - compiled
    """raw / white where white ≥ ``threshold`` (else 0), and the weight min(white / bright, 1)
    there (else 0), in one pass over the image (any numeric dtypes)."""
    H, W = raw.shape
    out = np.empty((H, W))
    weight = np.empty((H, W))
    inv_bright = 1.0 / bright
    for y in nb.prange(H):
        for x in range(W):
            w = float(white[y, x])
            if w >= threshold and w > 0.0:
                out[y, x] = float(raw[y, x]) / w
                weight[y, x] = min(w * inv_bright, 1.0)
            else:
                out[y, x] = 0.0
                weight[y, x] = 0.0
    return out, weight


@nb.njit(cache=True)
def devignette_boxes_kernel(out, raw, white, threshold, origins, half):  # pragma: no cover - compiled
    """:func:`devignette_kernel`'s divided image written into ``out`` (H, W) on the square boxes
    ``origins[i] ± half`` (clipped to the image) only: ``raw / white`` where white ≥ ``threshold``
    (else 0), the same operations in the inputs' precision (numba's ``float`` keeps float32).
    Serial: tens of boxes of a few hundred pixels; boxes that overlap write the same numbers."""
    H, W = raw.shape
    for i in range(origins.shape[0]):
        y0 = max(origins[i, 1] - half, 0)
        y1 = min(origins[i, 1] + half + 1, H)
        x0 = max(origins[i, 0] - half, 0)
        x1 = min(origins[i, 0] + half + 1, W)
        for y in range(y0, y1):
            for x in range(x0, x1):
                w = float(white[y, x])
                if w >= threshold and w > 0.0:
                    out[y, x] = float(raw[y, x]) / w
                else:
                    out[y, x] = 0.0


@nb.njit(cache=True)
def devignette_boxes_stored_kernel(out, raw, white, threshold, raw_scale, white_scale, origins, half):  # pragma: no cover - compiled
    """:func:`devignette_boxes_kernel` for stored integers: ``(raw / raw_scale) / (white /
    white_scale)`` in float64, as dividing the grey images (stored / (2^bits − 1)) would."""
    H, W = raw.shape
    for i in range(origins.shape[0]):
        y0 = max(origins[i, 1] - half, 0)
        y1 = min(origins[i, 1] + half + 1, H)
        x0 = max(origins[i, 0] - half, 0)
        x1 = min(origins[i, 0] + half + 1, W)
        for y in range(y0, y1):
            for x in range(x0, x1):
                w = float(white[y, x]) / white_scale
                if w >= threshold and w > 0.0:
                    out[y, x] = (float(raw[y, x]) / raw_scale) / w
                else:
                    out[y, x] = 0.0


@nb.njit(cache=True)
def pair_virtual_depth_medians(uv, mic, order, starts, counts, lambda_, min_baseline):  # pragma: no cover - compiled
    """Per cluster g (observations ``order[starts[g] : starts[g] + counts[g]]``): the upper median
    (element n // 2 of the sorted estimates) of υ = b / (b − d) over its pairs of observations
    whose baseline b = λ·|c_i − c_j| (``mic``) exceeds ``min_baseline``, d = |uv_i − uv_j| the
    disparity (eq:virtdepth); NaN without such a pair. NaNs sort last, as in numpy. (Sorted, not
    partitioned: the same element, and numba's ``np.partition`` took 10 of this kernel's 12.5 s of
    compilation on a fresh install, for a few hundred pairs a cluster.)"""
    out = np.full(starts.shape[0], np.nan)
    for g in range(starts.shape[0]):
        n = counts[g]
        s = starts[g]
        buf = np.empty(n * (n - 1) // 2)
        m = 0
        for a in range(n):
            ia = order[s + a]
            for b in range(a + 1, n):
                ib = order[s + b]
                base = lambda_ * math.hypot(mic[ia, 0] - mic[ib, 0], mic[ia, 1] - mic[ib, 1])
                if base > min_baseline:
                    disp = math.hypot(uv[ia, 0] - uv[ib, 0], uv[ia, 1] - uv[ib, 1])
                    buf[m] = base / (base - disp)
                    m += 1
        if m:
            out[g] = np.sort(buf[:m])[m // 2]
    return out


@nb.njit(parallel=True, cache=True)
def weighted_block_means_kernel(image, weight, step, h, w):  # pragma: no cover - compiled
    """Per ``step`` × ``step`` block (h × w blocks from the top-left), the sums of
    ``image · weight`` and of ``weight``, in one pass; a block row per thread (deterministic)."""
    num = np.zeros((h, w))
    den = np.zeros((h, w))
    for bi in nb.prange(h):
        for y in range(bi * step, (bi + 1) * step):
            for bj in range(w):
                sn = 0.0
                sd = 0.0
                for x in range(bj * step, (bj + 1) * step):
                    wt = weight[y, x]
                    sn += image[y, x] * wt
                    sd += wt
                num[bi, bj] += sn
                den[bi, bj] += sd
    return num, den
