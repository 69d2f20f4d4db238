"""Micro-image grid fit: lattice indices of detected centres and a least-squares MIA (paper §3.1).

The grid is ``c(k, l) = offset + R(θ)·g(k, l)`` with pitch (p0, p1) (``docs/conventions.md``).

Index convention (observable in the image, and the same as libpleno's labelling of the R12-A
data): row 0 is the topmost lattice row whose centres lie at v ≥ −(row spacing)/2, and node
(0, 0) is the leftmost node of that row with u ≥ −p0/2 — the top-left micro-image that is at
least half visible. On a hexagonal rows-aligned lattice row 0 is an even row (shifted by +½ pitch),
which fixes the parity of every row. Columns-aligned lattices follow the same rule transposed.

Steps: lattice vectors from the neighbours of the centre nearest the image centre; half-integer
relative coordinates of every centre; a first linear fit; absolute labels by the rule above;
non-linear least squares of (p0, p1, θ, offset) with iterative rejection.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import least_squares
from scipy.spatial import cKDTree

from plenocal.errors import DataError
from plenocal.model.camera import MicroImageGrid
from plenocal.model.lattice import Lattice, LatticeKind

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class GridFit:
    """A fitted micro-image grid and the linked centres."""

    grid: MicroImageGrid
    k: IntArray
    l: IntArray
    uv: FloatArray
    residuals_px: FloatArray
    """(M, 2) detected − grid node."""
    n_rejected: int

    @property
    def rms_px(self) -> float:
        return float(np.sqrt(np.mean(np.sum(self.residuals_px**2, axis=1)))) if len(self.uv) else float("nan")


def _basis(uv: FloatArray, image_centre: FloatArray) -> tuple[FloatArray, FloatArray, float]:
    """Seed centre (nearest the image centre), along-row unit vector and pitch, row spacing.

    Robust: medians over every centre's neighbour vectors, so that the basis is accurate to
    ~1e-5 and relative indices stay exact across the whole array.
    """
    tree = cKDTree(uv)
    _, seed_idx = tree.query(image_centre)
    dists, idx = tree.query(uv, k=min(7, len(uv)))
    nn = float(np.median(dists[:, 1]))
    vec = uv[idx[:, 1:]] - uv[:, None, :]
    d = dists[:, 1:]
    ok = np.abs(d - nn) < 0.25 * nn
    v = vec[ok]
    ang = np.arctan2(v[:, 1], v[:, 0])
    along = v[np.abs(ang) < np.pi / 6]
    if len(along) < 3:
        raise DataError("too few micro-image centres to find the lattice direction")
    a = np.median(along, axis=0)
    e = a / np.hypot(*a)
    n = np.array([-e[1], e[0]])
    across = np.abs(v @ n)
    row_spacing = float(np.median(across[across > 0.5 * nn]))
    return uv[seed_idx], a, row_spacing


def fit_grid(
    uv: FloatArray,
    lattice: Lattice,
    image_shape: tuple[int, int],
    *,
    reject_px: float = 2.0,
) -> GridFit:
    """Index every detected centre and fit the micro-image grid.

    Parameters
    ----------
    uv : (M, 2) detected centres.
    lattice : kind and size (columns × rows) of the micro-lens array.
    image_shape : (H, W).
    reject_px : centres farther than this from their fitted node are dropped (and counted).
    """
    uv = np.asarray(uv, dtype=np.float64)
    if len(uv) < 10:
        raise DataError(f"only {len(uv)} micro-image centres detected; need at least 10 to fit a grid")
    H, W = image_shape
    kind = lattice.kind
    cols = kind is LatticeKind.HEX_COLS
    # Work in a frame where the aligned direction is "x" (transpose for columns-aligned).
    pts = uv[:, ::-1] if cols else uv
    size = (H, W) if not cols else (W, H)  # (extent across, extent along) in that frame
    seed, a, row_spacing = _basis(pts, np.array([(size[1] - 1) / 2.0, (size[0] - 1) / 2.0]))
    hexa = kind is not LatticeKind.ORTHOGONAL
    half = 2.0 if hexa else 1.0
    p = float(np.hypot(*a))
    theta = float(np.arctan2(a[1], a[0]))
    # Affine model pts = o + xi·ax + row·ay, started from the basis and refitted on all centres.
    o, ax = seed, a
    ay = row_spacing * np.array([-a[1], a[0]]) / p
    for _ in range(3):
        A = np.stack([ax, ay], axis=1)
        rel = np.linalg.solve(A, (pts - o).T).T
        row = np.rint(rel[:, 1]).astype(np.int64)
        xi = np.rint(rel[:, 0] * half) / half  # half-integer (hexagonal) or integer positions
        X = np.stack([np.ones_like(xi), xi, row.astype(np.float64)], axis=1)
        sol, *_ = np.linalg.lstsq(X, pts, rcond=None)
        o, ax, ay = sol[0], sol[1], sol[2]

    # The labels' origin is found by extrapolating the lattice to the image's top-left corner: from
    # the centres in the central half of the image, where a real lens neither clips nor distorts
    # the micro-images (pulled-in or displaced centres at the edges shear a fit to all of them).
    mid = (np.abs(pts[:, 0] - (size[1] - 1) / 2.0) <= size[1] / 4.0) & (np.abs(pts[:, 1] - (size[0] - 1) / 2.0) <= size[0] / 4.0)
    if int(mid.sum()) >= 10:
        sol, *_ = np.linalg.lstsq(X[mid], pts[mid], rcond=None)
        o, ax, ay = sol[0], sol[1], sol[2]

    def predict(xq: FloatArray, rq: FloatArray) -> FloatArray:
        return o + np.outer(xq, ax) + np.outer(rq, ay)

    # Row 0: topmost row with its centre (near the middle of the row) at "v" >= −row spacing/2.
    row_spacing = float(abs(ay @ np.array([-ax[1], ax[0]])) / np.hypot(*ax))
    r_candidates = np.arange(row.min() - int(np.ceil(size[0] / row_spacing)) - 3, row.max() + 1)
    mid_x = float(np.median(xi))
    v_rows = predict(np.full(r_candidates.size, mid_x), r_candidates.astype(np.float64))[:, 1]
    r0 = int(r_candidates[np.argmax(v_rows >= -row_spacing / 2.0)])
    # In row 0, the leftmost node with "u" >= −p/2. Nodes of row r0 sit at x ≡ frac of row r0.
    in_r0 = row == r0
    frac = float(np.median(xi[in_r0] % 1.0)) if np.any(in_r0) else float(np.median((xi[row % 2 == r0 % 2]) % 1.0))
    xs = frac + np.arange(int(np.floor(xi.min())) - int(np.ceil(size[1] / p)) - 3, int(np.ceil(xi.max())) + 2)
    u_nodes = predict(xs, np.full(xs.size, float(r0)))[:, 0]
    x_left = float(xs[np.argmax(u_nodes >= -p / 2.0)])

    l_abs = row - r0
    if hexa:
        x_abs = xi - x_left + 0.5  # row 0 is even: its first node sits at ½ pitch
        k_abs = np.rint(x_abs - 0.5 * (l_abs % 2 == 0)).astype(np.int64)
    else:
        k_abs = np.rint(xi - x_left).astype(np.int64)
    p = float(np.hypot(*ax))
    theta = float(np.arctan2(ax[1], ax[0]))
    k_final, l_final = (l_abs, k_abs) if cols else (k_abs, l_abs)
    inside = lattice.contains(k_final, l_final)
    return _refine(uv[inside], k_final[inside], l_final[inside], lattice, p, -theta if cols else theta, reject_px, n_pre=int((~inside).sum()))


def refit_grid(fit: GridFit, keep: NDArray[np.bool_], *, reject_px: float = 2.0) -> GridFit:
    """The grid refitted to the linked centres ``fit.uv[keep]`` (their indices kept), started from
    ``fit.grid``; the others count as rejected.

    Parameters
    ----------
    fit : a previous :func:`fit_grid` result.
    keep : (M,) which of ``fit.uv`` enter the fit.
    reject_px : as in :func:`fit_grid`.
    """
    g = fit.grid
    keep = np.asarray(keep, dtype=bool)
    if int(keep.sum()) < 10:
        raise DataError(f"only {int(keep.sum())} micro-image centres to refit the grid; need at least 10")
    out = _refine(fit.uv[keep], fit.k[keep], fit.l[keep], g.lattice, float(np.mean(g.pitch_px)), g.rotation_rad, reject_px,
                  n_pre=fit.n_rejected + int((~keep).sum()))
    return out


def _refine(
    uv: FloatArray,
    k: IntArray,
    l: IntArray,
    lattice: Lattice,
    pitch: float,
    theta: float,
    reject_px: float,
    n_pre: int,
) -> GridFit:
    lin = l * lattice.width + k
    _, first, counts = np.unique(lin, return_index=True, return_counts=True)
    single = first[counts == 1]  # a node claimed by two centres is ambiguous: drop both
    n_dup = len(lin) - len(single)
    uv, k, l = uv[single], k[single], l[single]
    gx1, gy1 = lattice.positions(k, l, (1.0, 1.0))

    def model(params: FloatArray) -> FloatArray:
        p0, p1, th, ox, oy = params
        gx, gy = p0 * gx1, p1 * gy1
        ct, st = np.cos(th), np.sin(th)
        return np.stack([ox + ct * gx - st * gy, oy + st * gx + ct * gy], axis=1)

    th0 = theta
    gx, gy = pitch * gx1, pitch * gy1
    ct, st = np.cos(th0), np.sin(th0)
    off = np.median(uv - np.stack([ct * gx - st * gy, st * gx + ct * gy], axis=1), axis=0)
    params = np.array([pitch, pitch, th0, off[0], off[1]])
    keep = np.ones(len(uv), dtype=bool)
    for _ in range(5):
        sol = least_squares(
            lambda q, m=keep: (model(q)[m] - uv[m]).ravel(),
            params,
            method="lm",
            x_scale=np.array([1e-3, 1e-3, 1e-5, 0.1, 0.1]),
        )
        params = sol.x
        res = uv - model(params)
        new_keep = np.hypot(res[:, 0], res[:, 1]) < reject_px
        if np.array_equal(new_keep, keep):
            break
        keep = new_keep
    p0, p1, th, ox, oy = params
    grid = MicroImageGrid(lattice, (float(p0), float(p1)), float(th), (float(ox), float(oy)))
    res = uv - model(params)
    return GridFit(
        grid=grid,
        k=k[keep],
        l=l[keep],
        uv=uv[keep],
        residuals_px=res[keep],
        n_rejected=int((~keep).sum()) + n_dup + n_pre,
    )
