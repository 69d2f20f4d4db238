"""Integer lattice coordinates of cluster barycentres, and their placements in the board.

The barycentres of one frame are the (perspective-distorted) images of a sub-lattice of the
board's ``columns × rows`` nodes; some nodes may be missing (a partial board, a node no
micro-image resolves) and some barycentres may be spurious. No barycentre is assumed to be a
board corner:

1. :func:`lattice_coordinates` estimates the two lattice steps at a seed barycentre from its
   nearest-neighbour vectors and grows integer coordinates (i, j) over the others with the
   lattice-to-image homography of those already placed (bridging up to ``max_gap_sites``
   missing sites), then takes the board's own axes as the lattice basis (not a diagonal step):
   the basis whose steps are orthogonal and equal once back-projected through the camera
   matrix, else the basis that puts the points on the fewest lines if it is unique; otherwise
   the candidate lattices of nodes through them (:func:`axes_candidates`: also those holding
   them as a sub-lattice, lines of nodes between clusters unseen) are left for the image to
   choose (:func:`axes_image_support`);
2. :func:`board_placements` lists every placement of those coordinates in the board: the 8
   symmetries of the square lattice times every integer offset that puts some of them on the
   board (points off the board are left unlinked).

:func:`undetected_in_view` says which nodes a placement predicts in the image without a
barycentre; :func:`image_support` scores placements against the image itself (the board's
printed extent in a :class:`ViewSampler`, e.g. :class:`plenocal.detect.view.SceneView`). Choosing among the placements needs the camera (image size, facing); see
:func:`plenocal.calib.extrinsics.link_barycentres`. Every distance threshold is a fraction of the
local lattice step, from the homography fitted to the barycentres.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

import cv2
import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

MAX_SITE_DISTANCE_FRACTION = 0.25
"""Largest distance of a barycentre from its predicted lattice site, as a fraction of the shorter
lattice step there (a quarter keeps neighbouring sites' capture discs apart, with room for the
barycentres' bias and noise, a few px on 200–500 px spacings)."""

MAX_SQUARE_BASIS_ERROR = 0.25
"""Largest |cos(angle)| + |ln(length ratio)| of the two lattice steps back-projected through the
camera matrix for the basis to count as the board's square grid (≈ 0.01–0.05 with noise and
lens distortion; a basis with a diagonal step is ≈ 0.7)."""

MAX_GAP_SITES = 2
"""Most consecutive missing sites the growth bridges (a missing column inside the board)."""

MIN_BORDER_DISTANCE_FRACTION = 0.5
"""A node missing from the observations counts against a labelling only if the labelling predicts
its barycentre at least this fraction of the local lattice step inside the image (nearer the
border its micro-images are cut and it may be lost legitimately)."""


SYMMETRIES: IntArray = np.array(
    [np.linalg.matrix_power(np.array([[0, -1], [1, 0]]), r) @ f for f in (np.eye(2, dtype=np.int64), np.diag([1, -1])) for r in range(4)],
    dtype=np.int64,
)
"""The 8 symmetries of the square lattice, shape (8, 2, 2): 4 rotations, then the same composed
with a mirror (first the 4 proper ones, determinant +1)."""

MAX_SUBLATTICE_INDEX = 3
"""Largest index of the barycentres' lattice in the board's that the axes' candidates consider
(:func:`lattice_coordinates`): 2 when every other line of nodes went unseen between the observed
ones, 3 when two consecutive lines did (near the MLA's conjugate plane most nodes are in one or
two micro-images and form no cluster, so the seed's nearest neighbour across may be two or three
rows away)."""

AXES_SAMPLES_PER_STEP = 6
"""Samples of the view per step of the finest candidate lattice, each way, for
:func:`axes_image_support` (a square grid over the observed nodes' convex hull)."""

_SEED_SITES = ((0, 0), (1, 0), (-1, 0), (0, 1), (0, -1))
_ALL_2X2: IntArray = np.array(list(np.ndindex(5, 5, 5, 5)), dtype=np.int64).reshape(-1, 2, 2) - 2
_BASES: IntArray = _ALL_2X2[np.abs(_ALL_2X2[:, 0, 0] * _ALL_2X2[:, 1, 1] - _ALL_2X2[:, 0, 1] * _ALL_2X2[:, 1, 0]) == 1]
"""Unimodular 2 × 2 integer matrices with entries in −2…2: candidate changes of lattice basis."""
_ALL_3: IntArray = np.array(list(np.ndindex(7, 7, 7, 7)), dtype=np.int64).reshape(-1, 2, 2) - 3
_REFINEMENTS: IntArray = _ALL_3[
    np.isin(np.abs(_ALL_3[:, 0, 0] * _ALL_3[:, 1, 1] - _ALL_3[:, 0, 1] * _ALL_3[:, 1, 0]), np.arange(1, MAX_SUBLATTICE_INDEX + 1))
]
"""Integer 2 × 2 matrices N with entries in −3…3 and 1 ≤ |det N| ≤ :data:`MAX_SUBLATTICE_INDEX`:
board coordinates ``ij @ N.T`` of a lattice whose sites are a sub-lattice of the board's nodes of
index |det N| (unimodular N: a change of basis only)."""


@dataclass(frozen=True)
class LatticeFit:
    """Integer lattice coordinates of barycentres (:func:`lattice_coordinates`).

    Attributes
    ----------
    ij : ndarray of int, shape (C, 2)
        Lattice coordinates of each barycentre (meaningful where ``on_lattice``), ≥ 0.
    on_lattice : ndarray of bool, shape (C,)
        Barycentres placed on the lattice; the others are off it (spurious) or unreachable.
    image_from_lattice : ndarray, shape (3, 3)
        Homography from (i, j, 1) to image pixels, fitted to the placed barycentres (affine for
        a lattice one or two lines thick).
    reason : str
        Empty when a lattice was found, else why not.
    square_error : float
        :func:`_square_basis`'s error of the chosen axes (NaN when not tested).
    index : int
        Index of the barycentres' growth lattice in this one (> 1: lines of nodes between
        neighbouring barycentres unseen; :func:`axes_candidates`).
    alternatives : tuple of LatticeFit
        When the barycentres leave the axes ambiguous (``reason`` set) and a camera matrix was
        given: every candidate lattice of the board's nodes through them (:func:`axes_candidates`),
        for the image to decide (:func:`axes_image_support`). Also when the lattice was taken in
        its unique fewest-lines basis although no basis of it is square (an oblique view, or a
        sheared sub-lattice of the nodes): the image may prefer a square candidate. Empty
        otherwise.
    """

    ij: IntArray
    on_lattice: NDArray[np.bool_]
    image_from_lattice: FloatArray
    reason: str = ""
    square_error: float = float("nan")
    index: int = 1
    alternatives: tuple[LatticeFit, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.reason

    @property
    def extent(self) -> tuple[int, int]:
        """(width, height) of the placed coordinates' bounding box, in sites."""
        if not np.any(self.on_lattice):
            return (0, 0)
        span = self.ij[self.on_lattice].max(axis=0) - self.ij[self.on_lattice].min(axis=0) + 1
        return int(span[0]), int(span[1])

    def sites_to_image(self, ij: FloatArray) -> FloatArray:
        """Image positions of lattice sites, shape (S, 2) -> (S, 2) px (NaN behind the horizon)."""
        return apply_homography(self.image_from_lattice, ij)

    def step_px(self, ij: FloatArray) -> FloatArray:
        """Shorter of the two lattice steps at each site, in px, shape (S, 2) -> (S,)."""
        return site_steps(self.image_from_lattice, ij)


def apply_homography(H: FloatArray, xy: FloatArray) -> FloatArray:
    """``H · (x, y, 1)`` dehomogenised, shape (..., 2) -> (..., 2); NaN where the scale is ≤ 0."""
    p = np.asarray(xy, dtype=np.float64)
    w = H[2, 0] * p[..., 0] + H[2, 1] * p[..., 1] + H[2, 2]
    w = np.where(w > 0, w, np.nan)
    return np.stack(
        [(H[0, 0] * p[..., 0] + H[0, 1] * p[..., 1] + H[0, 2]) / w, (H[1, 0] * p[..., 0] + H[1, 1] * p[..., 1] + H[1, 2]) / w],
        axis=-1,
    )


def _fit_homography(ij: IntArray, points: FloatArray, *, projective: bool = True) -> FloatArray | None:
    """Least-squares lattice-to-image homography, signed so that the sites' homogeneous scale is
    positive; an affine map when not ``projective`` or from fewer than 6 sites (a seed cross or T
    has 3 on one line, which leaves a homography undetermined). None when the sites are on one
    line."""
    if len(ij) < 3 or np.linalg.matrix_rank(ij[1:] - ij[0]) < 2:
        return None
    src = ij.astype(np.float64)
    if len(ij) < 6 or not projective:
        A, *_ = np.linalg.lstsq(np.c_[src, np.ones(len(src))], points, rcond=None)
        return np.vstack([A.T, [0.0, 0.0, 1.0]])
    H, _ = cv2.findHomography(src, points.astype(np.float64), 0)
    if H is None or not np.all(np.isfinite(H)):
        return None
    w = H[2, 0] * ij[:, 0] + H[2, 1] * ij[:, 1] + H[2, 2]
    return np.asarray(H if np.median(w) > 0 else -H, dtype=np.float64)


def site_steps(H: FloatArray, sites: FloatArray) -> FloatArray:
    """Shorter of the two lattice steps at each site under homography H, px, shape (S, 2) -> (S,)."""
    p = apply_homography(H, sites)
    di = np.hypot(*(apply_homography(H, sites + np.array([1.0, 0.0])) - p).T)
    dj = np.hypot(*(apply_homography(H, sites + np.array([0.0, 1.0])) - p).T)
    return np.fmin(di, dj)


def _seeds(points: FloatArray, dist: FloatArray, *, max_site_distance_fraction: float) -> list[tuple[int, ...]]:
    """Seeds for the growth: crosses (seed, +a, −a, +b, −b), then T's (seed, +a, −a, +b).

    A cross: ``a`` is the seed's nearest neighbour and ``b`` its nearest neighbour off the line of
    ``a``, both with an opposite partner (``|v + v'|`` within the site tolerance). Being the
    nearest, they are single lattice steps (a missing neighbour would let a partner two steps
    away qualify otherwise). A T (boards two nodes high, where no cross exists): ``a`` is the
    nearest neighbour with a partner, ``b`` the nearest one off its line. Nearest the median
    position first.
    """
    C = len(points)
    k = min(8, C - 1)
    nbr = np.argsort(dist, axis=1)[:, :k]  # (C, k), nearest first
    vec = points[nbr] - points[:, None, :]  # (C, k, 2)
    length = np.hypot(vec[..., 0], vec[..., 1])
    tol = max_site_distance_fraction * np.minimum(length[:, :, None], length[:, None, :])
    opposite = np.hypot(*(vec[:, :, None, :] + vec[:, None, :, :]).transpose(3, 0, 1, 2)) < tol  # (C, k, k)
    opposite &= ~np.eye(k, dtype=bool)[None]
    has_opp = opposite.any(axis=2)
    partner = np.argmax(opposite, axis=2)  # (C, k)
    by_centre = np.argsort(np.hypot(*(points - np.median(points, axis=0)).T), kind="stable")
    rows = np.arange(C)
    seeds: list[tuple[int, ...]] = []
    for ia, kind in ((np.zeros(C, dtype=np.int64), "cross"), (np.argmax(has_opp, axis=1), "tee")):
        a, la = vec[rows, ia], length[rows, ia]
        # Distance of each neighbour from the line of a, against the tolerance on a.
        off_line = np.abs(a[:, None, 0] * vec[..., 1] - a[:, None, 1] * vec[..., 0]) / la[:, None] > max_site_distance_fraction * la[:, None]
        ib = np.argmax(off_line, axis=1)  # nearest off-line neighbour
        ok = has_opp[rows, ia] & off_line.any(axis=1)
        if kind == "cross":
            ok &= has_opp[rows, ib]
            seeds += [
                (int(s), int(nbr[s, 0]), int(nbr[s, partner[s, 0]]), int(nbr[s, ib[s]]), int(nbr[s, partner[s, ib[s]]]))
                for s in by_centre[ok[by_centre]]
            ]
        else:
            seeds += [(int(s), int(nbr[s, ia[s]]), int(nbr[s, partner[s, ia[s]]]), int(nbr[s, ib[s]])) for s in by_centre[ok[by_centre]]]
    return seeds


def _fewest_lines_basis(ij: IntArray) -> tuple[IntArray, bool]:
    """Unimodular S (2, 2) such that the coordinates ``ij @ S.T`` lie on the fewest lines.

    The observed nodes are a sub-rectangle of the board with holes, on the fewest columns × rows
    in the board's own axes (a stray point on the lattice adds at most one line each way).
    Chooses among :data:`_BASES` by the product of the numbers of distinct i and j values;
    returns (S, unique), unique when every basis as good is S up to a lattice symmetry (a
    triangular patch, e.g. a board cut diagonally, can tie with a sheared basis).
    """
    coords = np.einsum("nj,bkj->bnk", ij, _BASES)  # (B, n, 2)
    srt = np.sort(coords, axis=1)
    distinct = 1 + np.sum(np.diff(srt, axis=1) != 0, axis=1)  # (B, 2)
    count = distinct[:, 0] * distinct[:, 1]
    best = np.flatnonzero(count == count.min())
    S = _BASES[best[0]]
    # B · S⁻¹ is a symmetry for every equally good B: S is unique up to the symmetries.
    rel = np.rint(_BASES[best] @ np.linalg.inv(S)).astype(np.int64)  # (k, 2, 2)
    unique = bool(np.all(np.any(np.all(rel[:, None] == SYMMETRIES[None], axis=(2, 3)), axis=1)))
    return np.asarray(S), unique


def _square_basis(H: FloatArray, camera_matrix: FloatArray, *, affine: bool = False) -> tuple[IntArray, float]:
    """Unimodular S (2, 2) whose lattice steps are those of a square grid seen by the camera.

    For the board's own axes, the first two columns of K⁻¹·H are s·r₁ and s·r₂ (the board's x and
    y axes in the camera frame): orthogonal and of equal length. A basis with a diagonal step
    (what the growth may start from on a strongly foreshortened, sheared view, and what a
    diagonally cut board's bounding box cannot tell) is far from that. Chooses among
    :data:`_BASES` the S minimising error = |cos(m₁, m₂)| + |ln(|m₁|/|m₂|)| for H·S⁻¹; returns
    (S, error).

    ``affine``: H is an affine fit (a lattice one or two lines thick, whose perspective is
    undetermined): the steps are taken in the image plane, K₂₂⁻¹ times H's linear part — the
    weak-perspective view of s·r₁ and s·r₂, whose error grows with the tilt (0.14 at 30° about
    the board's diagonal, 0.26 at 40°) while a diagonal step's stays ≈ 0.7 or more.
    """
    err = _square_errors(H, camera_matrix, _BASES, affine=affine)
    best = int(np.argmin(err))
    return np.asarray(_BASES[best]), float(err[best])


def _square_errors(H: FloatArray, camera_matrix: FloatArray, bases: IntArray, *, affine: bool) -> FloatArray:
    """:func:`_square_basis`'s error for each integer basis change N (B, 2, 2) of H's lattice:
    the board steps are the columns of A · N⁻¹ (N need not be unimodular), shape (B,)."""
    if affine:
        A = np.linalg.solve(camera_matrix[:2, :2], H[:2, :2] / H[2, 2])  # (2, 2): the steps (i, j) in the image plane
    else:
        A = np.linalg.solve(camera_matrix, H)[:, :2]  # (3, 2): images of the steps (i, j)
    M = np.einsum("ij,bjk->bik", A, np.linalg.inv(bases.astype(np.float64)))  # A · N⁻¹, (B, d, 2)
    n1, n2 = np.linalg.norm(M[:, :, 0], axis=1), np.linalg.norm(M[:, :, 1], axis=1)
    return np.abs(np.sum(M[:, :, 0] * M[:, :, 1], axis=1)) / (n1 * n2) + np.abs(np.log(n1 / n2))


def axes_candidates(
    ij: IntArray, H: FloatArray, camera_matrix: FloatArray, *, affine: bool, max_square_basis_error: float = MAX_SQUARE_BASIS_ERROR,
) -> tuple[IntArray, FloatArray]:
    """Square lattices of board nodes through lattice sites whose axes the sites leave ambiguous.

    The sites ``ij`` need not be single board steps apart: near the MLA's conjugate plane whole
    lines of nodes form no cluster, and the growth's nearest neighbour across may be two or three
    nodes away; the board's nodes are then a finer lattice holding these sites as a sub-lattice
    (:data:`_REFINEMENTS`). Every N whose steps A · N⁻¹ are square through the camera within
    ``max_square_basis_error`` is a candidate; those related by a symmetry of the square lattice
    (N' N⁻¹ in :data:`SYMMETRIES`, the same nodes and axes) are one.

    Parameters
    ----------
    ij : ndarray of int, shape (n, 2)
        The placed sites (to tell N's alike by their images, not needed otherwise).
    H : ndarray, shape (3, 3)
        Lattice-to-image homography of ``ij`` (affine for a thin lattice, ``affine`` set).
    camera_matrix : ndarray, shape (3, 3)

    Returns
    -------
    N : ndarray of int, shape (K, 2, 2)
        Candidates, squarest first; board coordinates are ``ij @ N[k].T``.
    error : ndarray, shape (K,)
    """
    err = _square_errors(H, camera_matrix, _REFINEMENTS, affine=affine)
    order = np.flatnonzero(err <= max_square_basis_error)
    order = order[np.argsort(err[order], kind="stable")]
    kept: list[int] = []
    for b in order:  # few (tens): the symmetry classes of the square ones
        N = _REFINEMENTS[b].astype(np.float64)
        if not any(_is_symmetry(N @ np.linalg.inv(_REFINEMENTS[k].astype(np.float64))) for k in kept):
            kept.append(int(b))
    return _REFINEMENTS[kept].copy(), err[kept]


def _is_symmetry(T: FloatArray) -> bool:
    """T (2, 2) is one of :data:`SYMMETRIES`."""
    return bool(np.any(np.all(np.abs(SYMMETRIES - T[None]) < 1e-9, axis=(1, 2))))


def _grow(
    pts: FloatArray, seed: tuple[int, ...], *, max_site_distance_fraction: float, max_gap_sites: int
) -> tuple[IntArray, NDArray[np.bool_], FloatArray] | None:
    """Lattice coordinates grown from a seed: (ij (C, 2), placed (C,), homography) or None."""
    C = len(pts)
    ij = np.zeros((C, 2), dtype=np.int64)
    placed = np.zeros(C, dtype=bool)
    for n, site in zip(seed, _SEED_SITES[: len(seed)], strict=True):  # a cross, or a T
        ij[n], placed[n] = site, True
    H = _fit_homography(ij[placed], pts[placed])
    reach = 1
    while H is not None:
        lo, hi = ij[placed].min(axis=0) - reach, ij[placed].max(axis=0) + reach
        gi, gj = np.meshgrid(np.arange(lo[0], hi[0] + 1), np.arange(lo[1], hi[1] + 1), indexing="ij")
        sites = np.stack([gi.ravel(), gj.ravel()], axis=-1)
        occupied = np.zeros(len(sites), dtype=bool)
        width = hi[1] - lo[1] + 1
        occupied[(ij[placed, 0] - lo[0]) * width + (ij[placed, 1] - lo[1])] = True
        sites = sites[~occupied]
        free = np.flatnonzero(~placed)
        if free.size == 0 or sites.size == 0:
            break
        pred = apply_homography(H, sites.astype(np.float64))
        tol = max_site_distance_fraction * site_steps(H, sites.astype(np.float64))
        d = np.hypot(pts[free, None, 0] - pred[None, :, 0], pts[free, None, 1] - pred[None, :, 1])
        d = np.where(np.isfinite(d), d, np.inf)
        near = np.argmin(d, axis=1)
        d_near = d[np.arange(free.size), near]
        take = d_near < tol[near]
        if not np.any(take):
            if reach > max_gap_sites:
                break
            reach += 1
            continue
        order = np.flatnonzero(take)[np.argsort(d_near[take])]
        _, first = np.unique(near[order], return_index=True)  # a contested site: nearest wins
        new = order[first]
        ij[free[new]] = sites[near[new]]
        placed[free[new]] = True
        H = _fit_homography(ij[placed], pts[placed])
        reach = 1
    if H is None:
        return None
    # Contest every site again with the homography of all: a spurious barycentre placed early
    # (extrapolated sites) gives its site up to a free one nearer to it.
    on = np.flatnonzero(placed)
    free = np.flatnonzero(~placed)
    if free.size:
        pred = apply_homography(H, ij[on].astype(np.float64))
        d_on = np.hypot(*(pts[on] - pred).T)
        d = np.hypot(pts[free, None, 0] - pred[None, :, 0], pts[free, None, 1] - pred[None, :, 1])
        near = np.argmin(d, axis=1)
        better = d[np.arange(free.size), near] < d_on[near]
        order = np.flatnonzero(better)[np.argsort(d[np.flatnonzero(better), near[better]])]
        _, first = np.unique(near[order], return_index=True)
        win = order[first]
        placed[on[near[win]]] = False
        ij[free[win]], placed[free[win]] = ij[on[near[win]]], True
        H = _fit_homography(ij[placed], pts[placed])
        if H is None:
            return None
    # The final homography, fitted to all, must still hold every placed barycentre.
    site_f = ij[placed].astype(np.float64)
    resid = np.hypot(*(apply_homography(H, site_f) - pts[placed]).T)
    keep = resid < max_site_distance_fraction * site_steps(H, site_f)
    if not np.all(keep):
        placed[np.flatnonzero(placed)[~keep]] = False
        H = _fit_homography(ij[placed], pts[placed])
    return None if H is None else (ij, placed, H)


def lattice_coordinates(
    points: FloatArray,
    *,
    max_site_distance_fraction: float = MAX_SITE_DISTANCE_FRACTION,
    max_gap_sites: int = MAX_GAP_SITES,
    n_seeds: int = 3,
    camera_matrix: FloatArray | None = None,
    max_square_basis_error: float = MAX_SQUARE_BASIS_ERROR,
) -> LatticeFit:
    """Integer lattice coordinates of the barycentres of one frame.

    Parameters
    ----------
    points : ndarray, shape (C, 2)
        Cluster barycentres, px.
    max_site_distance_fraction : float
        A barycentre joins the lattice when it is within this fraction of the shorter local
        lattice step from a predicted free site (the nearest barycentre wins a contested site).
    max_gap_sites : int
        Missing sites bridged in one step (rows or columns of undetected nodes).
    n_seeds : int
        Seeds tried (nearest the median position first); the growth placing most is kept.
    camera_matrix : ndarray, shape (3, 3), optional
        Pinhole K of the barycentres. With it, the lattice basis is the one whose steps are
        orthogonal and equal on the board (:func:`_square_basis`; in the image plane for a
        lattice one or two lines thick) if one is within ``max_square_basis_error``; otherwise
        the one putting the points on the fewest lines, if that is unique (else ``reason`` says
        the axes are ambiguous, and ``alternatives`` lists the square lattices of nodes through
        the points, of index up to :data:`MAX_SUBLATTICE_INDEX`, and the points' own lattice in
        its fewest-lines and squarest bases, for the image to choose from when there is a square
        one).
    max_square_basis_error : float
        See :data:`MAX_SQUARE_BASIS_ERROR`.

    Returns
    -------
    LatticeFit
        ``ij`` in an arbitrary one of the 8 orientations of the board's axes, shifted to start
        at 0; ``reason`` set when no barycentre has neighbours both ways along one lattice step
        and a neighbour along the other.
    """
    pts = np.asarray(points, dtype=np.float64)
    C = len(pts)

    def failed(reason: str) -> LatticeFit:
        return LatticeFit(np.zeros((C, 2), dtype=np.int64), np.zeros(C, dtype=bool), np.full((3, 3), np.nan), reason)

    if C < 5:
        return failed(f"{C} barycentres (a lattice needs >= 5)")
    dist = np.hypot(pts[:, None, 0] - pts[None, :, 0], pts[:, None, 1] - pts[None, :, 1])
    np.fill_diagonal(dist, np.inf)
    seeds = _seeds(pts, dist, max_site_distance_fraction=max_site_distance_fraction)
    if not seeds:
        return failed("no barycentre with neighbours both ways along one lattice step and along another step")
    best: tuple[IntArray, NDArray[np.bool_], FloatArray] | None = None
    for seed in seeds[:n_seeds]:  # over a few seeds: a spurious neighbour can mislead one
        grown = _grow(pts, seed, max_site_distance_fraction=max_site_distance_fraction, max_gap_sites=max_gap_sites)
        if grown is not None and (best is None or grown[1].sum() > best[1].sum()):
            best = grown
            if best[1].all():  # every barycentre placed: no later seed places more (and a tie keeps the first)
                break
    if best is None:
        return failed("degenerate lattice (placed barycentres on one line)")
    ij, placed, H = best
    S, unique = _fewest_lines_basis(ij[placed])
    lines = ij[placed] @ S.T
    thin = min(np.unique(lines[:, 0]).size, np.unique(lines[:, 1]).size) < 3
    square = False
    H_test, S_square = None, S
    if camera_matrix is not None:
        # A homography from one or two lines is too loose for this: such a lattice is tested in
        # the image plane, on an affine fit.
        H_test = _fit_homography(ij[placed], pts[placed], projective=False) if thin else H
        if H_test is not None:
            S_square, error = _square_basis(H_test, np.asarray(camera_matrix, dtype=np.float64), affine=thin)
            if error <= max_square_basis_error:
                S, square = S_square, True
    alternatives: tuple[LatticeFit, ...] = ()
    if camera_matrix is not None and H_test is not None and not square:
        alternatives = _axes_alternatives(ij, placed, pts, H_test, np.asarray(camera_matrix, dtype=np.float64), S, S_square,
                                          thin=thin, max_square_basis_error=max_square_basis_error)
    if not (square or unique):
        reason = ("ambiguous lattice axes: a sheared basis holds the barycentres on as few lines as another, "
                  + ("and no camera matrix tells the square one" if camera_matrix is None else "and neither is square"))
        return LatticeFit(np.zeros((C, 2), dtype=np.int64), np.zeros(C, dtype=bool), np.full((3, 3), np.nan), reason,
                          alternatives=alternatives)
    fit = _in_axes(ij, placed, pts, S)
    if fit is None:  # cannot happen: the growth fitted the same sites in another basis
        return failed("degenerate lattice (placed barycentres on one line)")
    # The fewest-lines basis, unique but not square: what an oblique view gives, or a sheared
    # sub-lattice of the nodes (every other row unseen, the nearest neighbour across two rows and
    # a column away: the telephoto set's frame 8). The square candidates stay for the image.
    return replace(fit, alternatives=alternatives) if alternatives else fit


def _axes_alternatives(ij: IntArray, placed: NDArray[np.bool_], pts: FloatArray, H_test: FloatArray, K: FloatArray,
                       S: IntArray, S_square: IntArray, *, thin: bool, max_square_basis_error: float) -> tuple[LatticeFit, ...]:
    """Candidates for the image (:func:`axes_image_support`) when no basis of the sites' own
    lattice is square: the square lattices of nodes through the sites (one line of nodes in two
    unseen, say); against them, the sites' own lattice in its fewest-lines basis ``S`` and in its
    squarest ``S_square`` (the answer when the view is too oblique for the square test, the image
    then showing a lattice that is not square). Empty when no candidate is square."""
    N, _ = axes_candidates(ij[placed], H_test, K, affine=thin, max_square_basis_error=max_square_basis_error)
    if not len(N):
        return ()
    bases: list[IntArray] = []
    for n in [*N, S, S_square]:
        if not any(_is_symmetry(n @ np.linalg.inv(b)) for b in bases):
            bases.append(np.asarray(n))
    errors = _square_errors(H_test, K, np.array(bases), affine=thin)
    fits = [_in_axes(ij, placed, pts, n, square_error=float(e)) for n, e in zip(bases, errors, strict=True)]
    return tuple(f for f in fits if f is not None)


def _in_axes(ij: IntArray, placed: NDArray[np.bool_], pts: FloatArray, N: IntArray, *, square_error: float = float("nan")) -> LatticeFit | None:
    """The lattice fit in board coordinates ``ij @ N.T`` shifted to start at 0; thin lattices (one
    or two lines of nodes) get an affine map: their perspective is undetermined."""
    C = len(pts)
    out = np.zeros((C, 2), dtype=np.int64)
    out[placed] = ij[placed] @ np.asarray(N).T
    out[placed] -= out[placed].min(axis=0)
    thin = min(np.unique(out[placed, 0]).size, np.unique(out[placed, 1]).size) < 3
    H = _fit_homography(out[placed], pts[placed], projective=not thin)
    return None if H is None else LatticeFit(out, placed, H / np.linalg.norm(H), square_error=square_error,
                                             index=round(abs(float(np.linalg.det(np.asarray(N, dtype=np.float64))))))


def attach_to_lattice(lat: LatticeFit, points: FloatArray, *,
                      max_site_distance_fraction: float = MAX_SITE_DISTANCE_FRACTION) -> LatticeFit:
    """``lat`` with the barycentres it left off placed on its free sites where they are near one.

    A lattice of nodes chosen finer than the barycentres' growth lattice (:attr:`LatticeFit.index`
    > 1) has sites the growth could not reach: a cluster on a row between two that the growth
    stepped over (the telephoto set's frame 8: rows 0, 2 and 4 grown, two clusters on row 1 left
    off). Each free barycentre takes the nearest site of ``lat``'s homography when within
    ``max_site_distance_fraction`` of the shorter step there and the site is free (a contested
    site goes to the nearest); the homography is then fitted again to all.

    Parameters
    ----------
    lat : LatticeFit
        A lattice found (``ok``).
    points : ndarray, shape (C, 2)
        The barycentres ``lat`` was fitted to, px.

    Returns
    -------
    LatticeFit
        ``lat`` itself when none was placed.
    """
    pts = np.asarray(points, dtype=np.float64)
    free = np.flatnonzero(~lat.on_lattice)
    if not free.size:
        return lat
    to_lattice = np.asarray(np.linalg.inv(lat.image_from_lattice), dtype=np.float64)
    site = np.rint(apply_homography(to_lattice, pts[free]))
    ok = np.all(np.isfinite(site), axis=1)
    free, site = free[ok], site[ok]
    d = np.hypot(*(lat.sites_to_image(site) - pts[free]).T)
    near = d < max_site_distance_fraction * lat.step_px(site)
    occupied = {tuple(x) for x in lat.ij[lat.on_lattice]}
    near &= np.array([tuple(x) not in occupied for x in site.astype(np.int64)], dtype=bool)
    order = np.flatnonzero(near)[np.argsort(d[near], kind="stable")]
    _, first = np.unique(site[order], axis=0, return_index=True)  # a contested site: nearest wins
    take = order[first]
    if not take.size:
        return lat
    ij, placed = lat.ij.copy(), lat.on_lattice.copy()
    ij[free[take]], placed[free[take]] = site[take].astype(np.int64), True
    ij[placed] -= ij[placed].min(axis=0)
    thin = min(np.unique(ij[placed, 0]).size, np.unique(ij[placed, 1]).size) < 3
    H = _fit_homography(ij[placed], pts[placed], projective=not thin)
    if H is None:
        return lat
    return replace(lat, ij=ij, on_lattice=placed, image_from_lattice=H / np.linalg.norm(H))


def axes_image_support(fits: tuple[LatticeFit, ...] | list[LatticeFit], view: ViewSampler, *,
                       samples_per_step: int = AXES_SAMPLES_PER_STEP) -> tuple[FloatArray, int]:
    """Residual sum of squares of the view over the observed nodes under each lattice of nodes.

    Inside the convex hull of the barycentres everything is the board's checker pattern, whatever
    the placement: the squares of the right lattice alternate, one level for each parity of the
    cell, while a lattice whose steps are two squares long, or sheared, puts two colours in one
    cell or the same colour in cells of both parities. The view is sampled once, on a square
    grid of ``samples_per_step`` samples per step of the finest lattice over the hull, so every
    lattice is judged on the same samples (a sample on an edge costs each about the same).

    Parameters
    ----------
    fits : sequence of LatticeFit
        Lattices of the same barycentres (:attr:`LatticeFit.alternatives`).
    view : ViewSampler

    Returns
    -------
    rss : ndarray, shape (K,)
        Residual sum of squares per lattice, two levels each (NaN for all when no sample).
    n : int
        Samples (in the image and lit).
    """
    placed = fits[0].on_lattice
    pts = fits[0].sites_to_image(fits[0].ij[placed].astype(np.float64))
    step = min(float(np.nanmedian(f.step_px(f.ij[f.on_lattice].astype(np.float64)))) for f in fits)
    spacing = step / samples_per_step
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    gu, gv = np.meshgrid(np.arange(lo[0], hi[0] + spacing, spacing), np.arange(lo[1], hi[1] + spacing, spacing), indexing="ij")
    grid = np.stack([gu.ravel(), gv.ravel()], axis=-1)
    hull = cv2.convexHull(pts.astype(np.float32)).reshape(-1, 2).astype(np.float64)  # (V, 2), one orientation
    edge = np.roll(hull, -1, axis=0) - hull
    cross = edge[None, :, 0] * (grid[:, None, 1] - hull[None, :, 1]) - edge[None, :, 1] * (grid[:, None, 0] - hull[None, :, 0])
    uv = grid[np.all(cross >= 0, axis=1) | np.all(cross <= 0, axis=1)]
    vals = view.sample(uv)
    ok = np.isfinite(vals)
    uv, vals = uv[ok], vals[ok]
    if not len(vals):
        return np.full(len(fits), np.nan), 0
    rss = np.empty(len(fits))
    for k, f in enumerate(fits):  # a few candidate lattices; samples vectorised
        ij = apply_homography(np.linalg.inv(f.image_from_lattice), uv)
        parity = (np.floor(ij[:, 0]) + np.floor(ij[:, 1])).astype(np.int64) % 2
        n = np.bincount(parity, minlength=2)
        total = np.bincount(parity, weights=vals, minlength=2)
        rss[k] = float(np.sum(vals**2) - np.sum(np.where(n > 0, total**2 / np.maximum(n, 1), 0.0)))
    return rss, len(vals)


def board_placements(
    ij: IntArray, *, columns: int, rows: int, min_linked: int = 1
) -> tuple[IntArray, IntArray, IntArray]:
    """Every placement of integer lattice coordinates in a ``columns × rows`` board.

    Each of the 8 symmetries maps the coordinates to (column, row) offsets from their bounding
    box's corner; every integer offset of that box follows under which at least ``min_linked``
    points fall on the board (the others are left unlinked: spurious clusters on the lattice
    beyond the board). Non-square boards thus get their 90° rotations only as far as they fit.

    Parameters
    ----------
    ij : ndarray of int, shape (n, 2)
    columns, rows : int
        Board size in nodes.
    min_linked : int
        Fewest points a placement must put on the board.

    Returns
    -------
    nodes : ndarray of int, shape (P, n)
        Node id (row · columns + column) of each point per placement, −1 outside the board.
    symmetry : ndarray of int, shape (P,)
        Index into :data:`SYMMETRIES`.
    offset : ndarray of int, shape (P, 2)
        (column, row) of the box corner.
    """
    ij = np.asarray(ij, dtype=np.int64).reshape(-1, 2)
    nodes, sym, off = [], [], []
    for s, T in enumerate(SYMMETRIES):  # 8 symmetries; offsets vectorised
        m = ij @ T.T
        m -= m.min(axis=0)
        w, h = m.max(axis=0) + 1
        OC, OR = (a.ravel() for a in np.meshgrid(np.arange(1 - w, columns), np.arange(1 - h, rows), indexing="ij"))
        col = m[None, :, 0] + OC[:, None]
        row = m[None, :, 1] + OR[:, None]
        inside = (col >= 0) & (col < columns) & (row >= 0) & (row < rows)
        keep = inside.sum(axis=1) >= max(min_linked, 1)
        nodes.append(np.where(inside, row * columns + col, -1)[keep])
        sym.append(np.full(int(keep.sum()), s))
        off.append(np.stack([OC, OR], axis=-1)[keep])
    return np.concatenate(nodes), np.concatenate(sym), np.concatenate(off)


def board_sites(ij: IntArray, symmetry: int, offset: IntArray, *, columns: int, rows: int) -> FloatArray:
    """Lattice sites of every board node under one placement (inverse of :func:`board_placements`).

    Parameters
    ----------
    ij : ndarray of int, shape (n, 2)
        The placed points' lattice coordinates (as given to :func:`board_placements`).
    symmetry : int
        Index into :data:`SYMMETRIES`.
    offset : ndarray of int, shape (2,)
        (column, row) of the box corner.

    Returns
    -------
    ndarray, shape (columns · rows, 2)
        Site (i, j) of node n = row · columns + column, in node order.
    """
    T = SYMMETRIES[symmetry]
    m_min = (np.asarray(ij, dtype=np.int64).reshape(-1, 2) @ T.T).min(axis=0)
    row, col = np.divmod(np.arange(columns * rows), columns)
    m = np.stack([col, row], axis=-1) - np.asarray(offset) + m_min
    return (m @ T).astype(np.float64)  # T is orthogonal: ij = Tᵀ m, i.e. m @ T row-wise


def undetected_in_view(
    lat: LatticeFit,
    sites: FloatArray,
    seen: NDArray[np.bool_],
    *,
    image_size: tuple[int, int],
    min_border_distance_fraction: float = MIN_BORDER_DISTANCE_FRACTION,
) -> NDArray[np.bool_]:
    """Board nodes a placement leaves without a barycentre although it predicts them in view.

    In view: the lattice homography puts the node at least ``min_border_distance_fraction`` ×
    the local lattice step inside the image.

    Parameters
    ----------
    lat : LatticeFit
    sites : ndarray, shape (N, 2)
        Lattice site of every board node under the placement (:func:`board_sites`).
    seen : ndarray of bool, shape (N,)
        Nodes the placement links to a barycentre.
    image_size : (width, height)
        Pixels.

    Returns
    -------
    ndarray of bool, shape (N,)
    """
    width, height = image_size
    img = lat.sites_to_image(sites)
    margin = min_border_distance_fraction * lat.step_px(sites)
    in_view = (img[:, 0] >= margin) & (img[:, 0] <= width - 1 - margin) & (img[:, 1] >= margin) & (img[:, 1] <= height - 1 - margin)
    return (~seen) & in_view


def within_seen_extent(seen: NDArray[np.bool_], *, columns: int, rows: int) -> NDArray[np.bool_]:
    """Board nodes inside the bounding box (columns × rows) of the ``seen`` ones, shape (N,)."""
    row, col = np.divmod(np.arange(columns * rows), columns)
    if not np.any(seen):
        return np.zeros(columns * rows, dtype=bool)
    c, r = col[seen], row[seen]
    return (col >= c.min()) & (col <= c.max()) & (row >= r.min()) & (row <= r.max())


GRID_TURNS: dict[int, IntArray] = {turn: np.array(m, dtype=np.int64) for turn, m in
                                   {0: ((1, 0), (0, 1)), 90: ((0, -1), (1, 0)), 180: ((-1, 0), (0, -1)), 270: ((0, 1), (-1, 0))}.items()}
"""The proper turns of a square grid, (column, row) → (column, row) matrices by angle (°)."""


def grid_motion(truth: IntArray, linked: IntArray, *, columns: int) -> tuple[tuple[int, int, int], NDArray[np.bool_]]:
    """The rigid motion of the board's corner grid — a turn (:data:`GRID_TURNS`) and a
    whole-square shift — that takes most ``truth`` node ids (id = row·columns + column) to their
    ``linked`` ones, as (turn°, column shift, row shift), and which of the pairs it takes there.
    A frame linked with relative ids (:attr:`plenocal.calib.extrinsics.Linking.relative_ids`)
    is linked right when every pair agrees; (0, 0, 0) is the true labelling."""
    tr, tc = np.divmod(np.asarray(truth, dtype=np.int64), columns)
    lr, lc = np.divmod(np.asarray(linked, dtype=np.int64), columns)
    best: tuple[tuple[int, int, int], NDArray[np.bool_]] = ((0, 0, 0), np.zeros(len(tr), dtype=bool))
    if not len(tr):
        return best
    for turn, m in GRID_TURNS.items():
        dc = lc - (m[0, 0] * tc + m[0, 1] * tr)
        dr = lr - (m[1, 0] * tc + m[1, 1] * tr)
        pairs, counts = np.unique(np.stack([dc, dr], axis=1), axis=0, return_counts=True)
        shift = pairs[np.argmax(counts)]
        agree = (dc == shift[0]) & (dr == shift[1])
        if agree.sum() > best[1].sum():
            best = ((turn, int(shift[0]), int(shift[1])), agree)
    return best


def placement_support(
    lat: LatticeFit,
    nodes: IntArray,
    symmetry: IntArray,
    offset: IntArray,
    *,
    columns: int,
    rows: int,
    image_size: tuple[int, int],
    min_border_distance_fraction: float = MIN_BORDER_DISTANCE_FRACTION,
    absent_edge_lines_are_evidence: bool = False,
    margin: int = 0,
) -> IntArray:
    """How well each placement explains the observations, in nodes.

    support = points on the board − points off it − board nodes without a point although in view
    (:func:`undetected_in_view`) inside the bounding box of the linked ones (anywhere with
    ``absent_edge_lines_are_evidence``: a whole edge line lost inside the image and a board cut
    by the image border look the same).

    Parameters
    ----------
    lat : LatticeFit
    nodes, symmetry, offset
        Placements of ``lat``'s points (:func:`board_placements`).
    columns, rows : int
    image_size : (width, height)
    margin : int
        Placements that cannot come within ``margin`` of the best are not scored (support ≤
        linked − off the board): they get a value ``margin`` below any score.

    Returns
    -------
    ndarray of int, shape (P,)
    """
    ij = lat.ij[lat.on_lattice]
    n_linked = (nodes >= 0).sum(axis=1)
    n_off = ij.shape[0] - n_linked
    support = np.full(len(nodes), -(ij.shape[0] + columns * rows) - margin, dtype=np.int64)
    for p in np.argsort(-n_linked, kind="stable"):  # over placements, most linked first; stops early
        if n_linked[p] - n_off[p] <= support.max() - margin:
            break
        seen = np.zeros(columns * rows, dtype=bool)
        seen[nodes[p][nodes[p] >= 0]] = True
        absent = undetected_in_view(
            lat, board_sites(ij, int(symmetry[p]), offset[p], columns=columns, rows=rows), seen,
            image_size=image_size, min_border_distance_fraction=min_border_distance_fraction,
        )
        if not absent_edge_lines_are_evidence:
            absent &= within_seen_extent(seen, columns=columns, rows=rows)
        support[p] = n_linked[p] - n_off[p] - int(absent.sum())
    return support


class ViewSampler(Protocol):
    """What :func:`image_support` reads the scene from (:class:`plenocal.detect.view.SceneView`)."""

    def sample(self, uv: FloatArray) -> FloatArray:
        """Intensity at image positions, shape (..., 2) -> (...); NaN where unknown."""
        ...


IMAGE_CELL_REACH = 3
"""Cells of the observed lattice examined beyond its extent on every side: a placement that puts
one undetected line of nodes there, its outer squares and the ring beyond them."""

IMAGE_CELL_SAMPLES = 5
"""Samples per cell side over the cell's central half (their median is the cell's value)."""

MIN_VALID_CELL_FRACTION = 0.6
"""A cell counts where at least this fraction of its samples is in the image and lit."""

IMAGE_RINGS = 3
"""Rings of cells beyond the pattern that get levels of their own (farther cells join the last)."""

IMAGE_GROUPS = 2 + 5 * IMAGE_RINGS
"""Groups of cells a placement predicts, each with its own level: checker squares of even and of
odd lattice parity; beyond the pattern, each ring (one cell wide, 1 to :data:`IMAGE_RINGS`) of
each of the four sides, and of the corner regions beyond two sides (a border, then the
background, is uniform along a side, whatever their widths)."""


def image_cells(lat: LatticeFit, view: ViewSampler, *, reach: int = IMAGE_CELL_REACH,
                samples: int = IMAGE_CELL_SAMPLES, min_valid_fraction: float = MIN_VALID_CELL_FRACTION) -> tuple[IntArray, FloatArray]:
    """Lattice cells around the observed nodes and their intensity in the view.

    Cell (i, j) is the square between sites (i, j) and (i + 1, j + 1); its value is the median of
    the view over ``samples`` × ``samples`` points of its central half, mapped by the lattice
    homography.

    Returns
    -------
    cells : ndarray of int, shape (M, 2)
        (i, j) of the cells with a value.
    values : ndarray, shape (M,)
    """
    ij = lat.ij[lat.on_lattice]
    lo, hi = ij.min(axis=0) - reach, ij.max(axis=0) + reach - 1
    gi, gj = np.meshgrid(np.arange(lo[0], hi[0] + 1), np.arange(lo[1], hi[1] + 1), indexing="ij")
    cells = np.stack([gi.ravel(), gj.ravel()], axis=-1)
    t = 0.25 + 0.5 * (np.arange(samples) + 0.5) / samples
    off = np.stack(np.meshgrid(t, t, indexing="ij"), axis=-1).reshape(-1, 2)  # (S, 2) within a cell
    pts = lat.sites_to_image(cells[:, None, :] + off[None])  # (M, S, 2)
    vals = view.sample(pts)
    ok = np.isfinite(vals)
    keep = ok.mean(axis=1) >= min_valid_fraction
    med = np.nanmedian(np.where(ok[keep], vals[keep], np.nan), axis=1) if np.any(keep) else np.zeros(0)
    return cells[keep], med


def image_support(
    lat: LatticeFit, cells: IntArray, values: FloatArray, symmetry: IntArray, offset: IntArray, *, columns: int, rows: int
) -> FloatArray:
    """Residual sum of squares of the view's cells under each placement of the lattice.

    A placement says which cells are the board's (columns + 1) × (rows + 1) checker squares
    and how far beyond which of its sides the others lie. It predicts: checker squares
    alternate (one level for each lattice parity of the cell, whichever colour the board's
    corner square is); beyond the pattern, each ring of cells along a side is uniform (a border,
    then the background, does not alternate along the side), as is each ring of the corner
    regions (:data:`IMAGE_GROUPS`). Each group's level is its mean: the residual is what the
    placement cannot explain.
    Placements differ where their patterns differ — the outer squares of a shifted board, a row
    of nodes beyond the observed ones — and there the image decides which edge of the board is
    seen.

    Parameters
    ----------
    lat : LatticeFit
    cells, values
        From :func:`image_cells`.
    symmetry, offset
        Placements (:func:`board_placements`).
    columns, rows : int

    Returns
    -------
    ndarray, shape (P,)
        Residual sum of squares per placement (same cells, same number of levels for all).
    """
    ij = lat.ij[lat.on_lattice]
    centres = cells.astype(np.float64) + 0.5
    parity = (cells[:, 0] + cells[:, 1]) % 2
    P, M = len(symmetry), len(cells)
    group = np.empty((P, M), dtype=np.int64)
    for s in np.unique(symmetry):  # the 8 symmetries; placements vectorised
        T = SYMMETRIES[s]
        m_min = (ij @ T.T).min(axis=0)
        m = centres @ T.T - m_min  # (M, 2) board (column, row) of the cell centres, before the offset
        sel = np.flatnonzero(symmetry == s)
        col = m[None, :, 0] + offset[sel, 0, None]
        row = m[None, :, 1] + offset[sel, 1, None]
        # Rings beyond the pattern (cell centres at half-integers; the pattern spans −1 … n).
        dc = np.where(col < -1, np.ceil(-1 - col), np.where(col > columns, np.ceil(col - columns), 0)).astype(np.int64)
        dr = np.where(row < -1, np.ceil(-1 - row), np.where(row > rows, np.ceil(row - rows), 0)).astype(np.int64)
        side = np.where(dr == 0, np.where(col < 0, 0, 1), np.where(dc == 0, np.where(row < 0, 2, 3), 4))
        ring = np.minimum(np.maximum(dc, dr), IMAGE_RINGS) - 1
        g = 2 + side * IMAGE_RINGS + ring
        g = np.where((dc == 0) & (dr == 0), parity[None, :], g)
        group[sel] = g
    key = (np.arange(P)[:, None] * IMAGE_GROUPS + group).ravel()
    x = np.broadcast_to(values, (P, M)).ravel()
    n = np.bincount(key, minlength=P * IMAGE_GROUPS).reshape(P, IMAGE_GROUPS)
    total = np.bincount(key, weights=x, minlength=P * IMAGE_GROUPS).reshape(P, IMAGE_GROUPS)
    explained = np.sum(np.where(n > 0, total**2 / np.maximum(n, 1), 0.0), axis=1)
    return float(np.sum(values**2)) - explained


__all__ = [
    "AXES_SAMPLES_PER_STEP",
    "MAX_GAP_SITES",
    "MAX_SITE_DISTANCE_FRACTION",
    "MAX_SQUARE_BASIS_ERROR",
    "MAX_SUBLATTICE_INDEX",
    "MIN_BORDER_DISTANCE_FRACTION",
    "SYMMETRIES",
    "LatticeFit",
    "ViewSampler",
    "apply_homography",
    "attach_to_lattice",
    "axes_candidates",
    "axes_image_support",
    "board_placements",
    "board_sites",
    "image_cells",
    "image_support",
    "lattice_coordinates",
    "placement_support",
    "site_steps",
    "undetected_in_view",
    "within_seen_extent",
]
