"""numba kernels for per-micro-image work (centroids, moments): one parallel loop over
micro-images, pixels of each window in an inner loop. Results do not depend on the thread count
(each micro-image is computed independently)."""

from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(cache=True, fastmath=False)
def _ring_mean(image, cu, cv, iu, iv, r, inner, outer):  # pragma: no cover - compiled
    """Mean of the pixels at distance in (inner, outer] from (cu, cv), window (iu ± r, iv ± r)."""
    total = 0.0
    n = 0
    # Squared distances (no square root per pixel): inner, outer ≥ 0 here.
    inner2 = inner * inner if inner >= 0.0 else -1.0
    outer2 = outer * outer
    for y in range(iv - r, iv + r + 1):
        dy = y - cv
        for x in range(iu - r, iu + r + 1):
            dx = x - cu
            d2 = dx * dx + dy * dy
            if d2 > inner2 and d2 <= outer2:
                total += image[y, x]
                n += 1
    return total / max(n, 1)


@nb.njit(parallel=True, cache=True, fastmath=False)
def refine_centroids_kernel(image, uv, radius, iterations):  # pragma: no cover - compiled
    """Iterated intensity centroids over soft-edged discs; returns (uv_out, mass)."""
    H, W = image.shape
    n = uv.shape[0]
    out = uv.copy()
    mass = np.zeros(n)
    r = int(np.ceil(radius)) + 1
    r_out2 = (radius + 0.5) ** 2
    r_in2 = (radius - 0.5) ** 2 if radius > 0.5 else -1.0
    for i in nb.prange(n):
        cu0 = out[i, 0]
        cv0 = out[i, 1]
        m00 = 0.0
        for _ in range(iterations):
            iu = int(np.rint(cu0))
            iv = int(np.rint(cv0))
            iu = min(max(iu, r), W - 1 - r)
            iv = min(max(iv, r), H - 1 - r)
            bg = _ring_mean(image, cu0, cv0, iu, iv, r, radius - 1.0, radius + 0.5)
            m00 = 0.0
            mx = 0.0
            my = 0.0
            for y in range(iv - r, iv + r + 1):
                dy = y - cv0
                for x in range(iu - r, iu + r + 1):
                    dx = x - cu0
                    d2 = dx * dx + dy * dy
                    # Weight 1 inside radius − 0.5, 0 beyond radius + 0.5, linear in d between
                    # (the square root only on that one-pixel ring).
                    if d2 >= r_out2:
                        continue
                    w = 1.0 if d2 <= r_in2 else min(max(radius + 0.5 - np.sqrt(d2), 0.0), 1.0)
                    if w <= 0.0:
                        continue
                    val = image[y, x] - bg
                    if val <= 0.0:
                        continue
                    val *= w
                    m00 += val
                    mx += val * dx
                    my += val * dy
            if m00 > 0.0:
                cu0 += mx / m00
                cv0 += my / m00
        out[i, 0] = cu0
        out[i, 1] = cv0
        mass[i] = m00
    return out, mass


@nb.njit(parallel=True, cache=True, fastmath=False)
def moments_kernel(image, centres, radii):  # pragma: no cover - compiled
    """Background-subtracted second moments in disc windows of radius ``radii[i]``.

    Returns an (n, 6) array: m00, mean x offset, mean y offset, σxx, σyy, σxy (NaN when m00 ≤ 0),
    and the window pixel count in a separate array.
    """
    H, W = image.shape
    n = centres.shape[0]
    out = np.full((n, 6), np.nan)
    npx = np.zeros(n)
    for i in nb.prange(n):
        radius = radii[i]
        r = int(np.ceil(radius)) + 1
        cu = centres[i, 0]
        cv = centres[i, 1]
        iu = int(np.rint(cu))
        iv = int(np.rint(cv))
        if iu - r < 0 or iu + r > W - 1 or iv - r < 0 or iv + r > H - 1:
            continue
        bg = _ring_mean(image, cu, cv, iu, iv, r, radius, radius + 1.0)
        radius2 = radius * radius
        m00 = 0.0
        sx = 0.0
        sy = 0.0
        cnt = 0
        for y in range(iv - r, iv + r + 1):
            dy = y - cv
            for x in range(iu - r, iu + r + 1):
                dx = x - cu
                if dx * dx + dy * dy <= radius2:
                    w = image[y, x] - bg
                    m00 += w
                    sx += w * dx
                    sy += w * dy
                    cnt += 1
        if m00 <= 0.0:
            continue
        mx = sx / m00
        my = sy / m00
        sxx = 0.0
        syy = 0.0
        sxy = 0.0
        for y in range(iv - r, iv + r + 1):
            dy = y - cv
            for x in range(iu - r, iu + r + 1):
                dx = x - cu
                if dx * dx + dy * dy <= radius2:
                    w = image[y, x] - bg
                    ex = dx - mx
                    ey = dy - my
                    sxx += w * ex * ex
                    syy += w * ey * ey
                    sxy += w * ex * ey
        out[i, 0] = m00
        out[i, 1] = mx
        out[i, 2] = my
        out[i, 3] = sxx / m00
        out[i, 4] = syy / m00
        out[i, 5] = sxy / m00
        npx[i] = cnt
    return out, npx


@nb.njit(parallel=True, cache=True, fastmath=False)
def comb_sums_kernel(c, steps):  # pragma: no cover - compiled
    """JPEG comb sums (:func:`plenocal.precalib.checks.jpeg_comb`): for each step Q of ``steps``
    (S,), over the coefficients ``c`` (n,) with |c| > Q/2, one row of ``out`` (S, 9): their count,
    sum and sum of squares, then Σ cos and Σ sin of 2π·c/q for q = Q − ½, Q and Q + ½. One pass over
    ``c`` per step, the steps in parallel (each row is its own thread's: no dependence on the
    thread count)."""
    S = steps.shape[0]
    out = np.zeros((S, 9))
    for s in nb.prange(S):
        Q = steps[s]
        half = 0.5 * Q
        w0 = 2.0 * np.pi / (Q - 0.5)
        w1 = 2.0 * np.pi / Q
        w2 = 2.0 * np.pi / (Q + 0.5)
        n = 0.0
        s1 = 0.0
        s2 = 0.0
        c0 = 0.0
        z0 = 0.0
        c1 = 0.0
        z1 = 0.0
        c2 = 0.0
        z2 = 0.0
        for i in range(c.shape[0]):
            x = c[i]
            if abs(x) > half:
                n += 1.0
                s1 += x
                s2 += x * x
                c0 += np.cos(w0 * x)
                z0 += np.sin(w0 * x)
                c1 += np.cos(w1 * x)
                z1 += np.sin(w1 * x)
                c2 += np.cos(w2 * x)
                z2 += np.sin(w2 * x)
        out[s, 0] = n
        out[s, 1] = s1
        out[s, 2] = s2
        out[s, 3] = c0
        out[s, 4] = z0
        out[s, 5] = c1
        out[s, 6] = z1
        out[s, 7] = c2
        out[s, 8] = z2
    return out
