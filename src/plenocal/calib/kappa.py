"""Relative blur calibration of κ, the blur proportionality coefficient σ = κ·ρ (paper §5.3).

A checkerboard node seen through two micro-lenses of different types (i), (j) appears with
different amounts of blur (eq:imgformation). With a Gaussian PSF (eq:psf, eq:sigma2rho) the more
blurred view equals the sharper one blurred by a Gaussian of spread σ_r = √|σ_i² − σ_j²|
(the equally-defocused representation, eq:relblurimgformation), and with σ = κ·ρ,
σ_r = κ·ρ_r, ρ_r = √|ρ_i² − ρ_j²| (eq:relblur, eq:relblurradius). κ minimises

    Θ(κ) = Σ_n Σ_pairs ‖W(ref) − G(κ·ρ_r) ∗ W(edi)‖²

over every pair of BAP features of one cluster (one frame, one node) whose lens types differ, where
``ref`` is the more blurred feature (larger |ρ|), ``edi`` the sharper one, and W a 9 × 9 window
sampled bilinearly at the feature's sub-pixel (u, v) (reference §8.1, OpenCV ``getRectSubPix``:
border pixels replicated).

Unlike the reference, the sharper view's window is extracted with a margin of ``margin_px`` pixels
on every side and blurred as a *valid* convolution (kernel truncated at ±margin and normalised),
so the 9 × 9 result holds no border artefacts. The blur of all pairs is one batched product
K·W·Kᵀ with per-pair separable 1-D Gaussian kernels K (shape (P, 9, 9 + 2·margin)).

The 1-D problem in κ is solved by sampling Θ on a grid of κ (the cost curve, also reported) and
refining the best bracket with a bounded Brent search; each frame's κ is found the same way on its
own pairs, so the spread of κ across frames is reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import minimize_scalar

from plenocal.errors import DataError
from plenocal.model.camera import PlenopticCamera
from plenocal.model.lattice import TypeLayout
from plenocal.model.observations import BapFeatures
from plenocal.model.projection import micro_image_centres

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

WINDOW_PX = 9
"""Side of the compared windows (paper §5.3: the relative blur radius stays below ~2.5 px)."""
MARGIN_PX = 6
"""Extra border of the sharper view's window: the Gaussian is truncated at ±6 px (≥ 3σ for σ ≤ 2 px)."""
KAPPA_BOUNDS = (0.02, 2.0)
"""Search interval of κ."""
GRID_POINTS = 25
"""Number of κ values of the sampled cost curve."""


@dataclass(frozen=True, eq=False)
class BlurPairs:
    """P pairs of BAP features of one cluster with different lens types (indices into the features).

    Attributes
    ----------
    ref, edi : ndarray of int, shape (P,)
        The more blurred feature (larger |ρ|, the reference) and the sharper one (to be blurred).
    frame : ndarray of int, shape (P,)
    rho_r_px : ndarray, shape (P,)
        Relative blur radius ρ_r = √|ρ_ref² − ρ_edi²| (eq:relblurradius), pixels.
    type_ref, type_edi : ndarray of int, shape (P,)
    """

    ref: IntArray
    edi: IntArray
    frame: IntArray
    rho_r_px: FloatArray
    type_ref: IntArray
    type_edi: IntArray

    def __len__(self) -> int:
        return int(self.ref.size)

    def select(self, mask: NDArray[np.bool_]) -> BlurPairs:
        return BlurPairs(*(getattr(self, n)[mask] for n in ("ref", "edi", "frame", "rho_r_px", "type_ref", "type_edi")))


def relative_blur_pairs(features: BapFeatures, types: TypeLayout) -> BlurPairs:
    """Every pair of features of one cluster (same frame, same cluster) whose lens types differ.

    The cluster of a feature is its ``cluster`` id, else (``cluster`` = −1) its ``node``; features
    with neither are left out. Vectorised: one pass per offset within the sorted clusters (at most
    the largest cluster size), never per feature.

    Parameters
    ----------
    features : BapFeatures
        N features with ``frame``, ``k``, ``l``, ``rho`` and ``cluster`` or ``node``.
    types : TypeLayout
        Micro-lens type layout (paper's i = type + 1).

    Returns
    -------
    BlurPairs
        Ordered by (frame, cluster, first index).
    """
    n = len(features)
    group = np.where(features.cluster >= 0, features.cluster, features.node).astype(np.int64)
    t = types.type_of(features.k, features.l)
    ok = np.flatnonzero((group >= 0) & (t >= 0) & features.has_rho)  # single views (ρ NaN) pair with nothing
    order = ok[np.lexsort((group[ok], features.frame[ok].astype(np.int64)))]
    frame = features.frame.astype(np.int64)
    firsts: list[IntArray] = []
    seconds: list[IntArray] = []
    for offset in range(1, order.size):
        a, b = order[:-offset], order[offset:]
        same = (frame[a] == frame[b]) & (group[a] == group[b])
        if not np.any(same):
            break  # sorted: no cluster holds more than `offset` members
        firsts.append(a[same])
        seconds.append(b[same])
    if firsts:
        i, j = np.concatenate(firsts), np.concatenate(seconds)
    else:
        i = j = np.zeros(0, dtype=np.int64)
    diff = t[i] != t[j]
    i, j = i[diff], j[diff]
    swap = np.abs(features.rho[i]) < np.abs(features.rho[j])
    ref, edi = np.where(swap, j, i), np.where(swap, i, j)
    key = np.lexsort((np.minimum(i, j), group[ref], frame[ref]))
    ref, edi = ref[key], edi[key]
    rho_r = np.sqrt(np.abs(features.rho[ref] ** 2 - features.rho[edi] ** 2))
    assert ref.size == 0 or ref.max() < n
    return BlurPairs(ref, edi, frame[ref], rho_r, t[ref], t[edi])


def sample_windows(image: NDArray[np.floating], u: FloatArray, v: FloatArray, size: int) -> NDArray[np.float32]:
    """Bilinear ``size × size`` windows centred at sub-pixel (u, v), like OpenCV ``getRectSubPix``.

    Pixel (c, r) of window n samples the image at (u_n + c − (size−1)/2, v_n + r − (size−1)/2)
    (pixel centres at integer coordinates, ``docs/conventions.md``); outside the image the border
    pixels are replicated.

    Parameters
    ----------
    image : ndarray, shape (H, W)
    u, v : ndarray, shape (N,)
        Window centres, pixels.
    size : int
        Odd window side.

    Returns
    -------
    ndarray, shape (N, size, size), float32, indexed [n, row, column].
    """
    img = np.asarray(image, dtype=np.float32)
    H, W = img.shape
    half = (size - 1) / 2.0
    x0f = np.floor(np.asarray(u, dtype=np.float64) - half)
    y0f = np.floor(np.asarray(v, dtype=np.float64) - half)
    fx = (np.asarray(u, dtype=np.float64) - half - x0f).astype(np.float32)[:, None, None]
    fy = (np.asarray(v, dtype=np.float64) - half - y0f).astype(np.float32)[:, None, None]
    steps = np.arange(size + 1)
    cols = np.clip(x0f.astype(np.int64)[:, None] + steps, 0, W - 1)
    rows = np.clip(y0f.astype(np.int64)[:, None] + steps, 0, H - 1)
    p = img[rows[:, :, None], cols[:, None, :]]
    top = p[:, :-1, :-1] * (1 - fx) + p[:, :-1, 1:] * fx
    bottom = p[:, 1:, :-1] * (1 - fx) + p[:, 1:, 1:] * fx
    return np.ascontiguousarray(top * (1 - fy) + bottom * fy, dtype=np.float32)


def gaussian_band_matrices(sigma_px: NDArray[np.floating], size: int, margin: int) -> NDArray[np.float32]:
    """Per-pair 1-D Gaussian blur as band matrices K, so that K·W·Kᵀ blurs W (valid convolution).

    Row r of K_p holds the Gaussian of spread σ_p (eq:psf, separable), truncated at ±margin and
    normalised to sum 1, centred on column r + margin. σ = 0 gives the identity (a crop).

    Parameters
    ----------
    sigma_px : ndarray, shape (P,)
    size, margin : int
        Output window side and the margin of the input window (input side size + 2·margin).

    Returns
    -------
    ndarray, shape (P, size, size + 2·margin), float32.
    """
    s = np.maximum(np.asarray(sigma_px, dtype=np.float32), np.float32(1e-3))
    t = np.arange(-margin, margin + 1, dtype=np.float32)
    g = np.exp(-0.5 * (t[None, :] / s[:, None]) ** 2)
    g /= g.sum(axis=1, keepdims=True)
    K = np.zeros((s.size, size, size + 2 * margin), dtype=np.float32)
    for r in range(size):  # one slice per output row (9), not per pair
        K[:, r, r : r + 2 * margin + 1] = g
    return K


def blur_windows(windows: NDArray[np.float32], sigma_px: NDArray[np.floating], *, margin: int = MARGIN_PX) -> NDArray[np.float32]:
    """Gaussian-blur P windows of side m + 2·margin into P windows of side m (K·W·Kᵀ).

    Parameters
    ----------
    windows : ndarray, shape (P, m + 2·margin, m + 2·margin)
    sigma_px : ndarray, shape (P,)
        Gaussian spread per window (pixels).

    Returns
    -------
    ndarray, shape (P, m, m)
    """
    size = windows.shape[1] - 2 * margin
    K = gaussian_band_matrices(sigma_px, size, margin)
    return K @ windows @ K.transpose(0, 2, 1)


@dataclass(frozen=True, eq=False)
class PairWindows:
    """The windows of P pairs: the reference (P, m, m) and the sharper view with a margin."""

    pairs: BlurPairs
    ref: NDArray[np.float32]
    edi: NDArray[np.float32]
    margin: int

    def residuals(self, kappa: float, mask: NDArray[np.bool_] | slice = slice(None)) -> NDArray[np.float32]:
        """Per-pair ‖W(ref) − G(κ·ρ_r) ∗ W(edi)‖₂, shape (P,) (the terms of Θ(κ))."""
        sigma = kappa * self.pairs.rho_r_px[mask]
        d = self.ref[mask] - blur_windows(self.edi[mask], sigma, margin=self.margin)
        return np.sqrt(np.einsum("pij,pij->p", d, d))


def extract_pair_windows(
    images: Mapping[int, NDArray[np.floating]],
    features: BapFeatures,
    pairs: BlurPairs,
    *,
    window: int = WINDOW_PX,
    margin: int = MARGIN_PX,
) -> PairWindows:
    """Sample the windows of every pair, one vectorised pass per frame.

    Raises
    ------
    DataError
        When a frame of the pairs has no image.
    """
    P = len(pairs)
    ref = np.empty((P, window, window), dtype=np.float32)
    big = window + 2 * margin
    edi = np.empty((P, big, big), dtype=np.float32)
    for frame in np.unique(pairs.frame):  # a loop over frames (16), not over pairs
        if int(frame) not in images:
            raise DataError(f"no image for frame {int(frame)} (features of that frame need it)")
        img = images[int(frame)]
        sel = np.flatnonzero(pairs.frame == frame)
        r, e = pairs.ref[sel], pairs.edi[sel]
        ref[sel] = sample_windows(img, features.u[r], features.v[r], window)
        edi[sel] = sample_windows(img, features.u[e], features.v[e], big)
    return PairWindows(pairs, ref, edi, margin)


@dataclass(frozen=True)
class FrameKappa:
    """κ fitted on one frame's pairs alone."""

    kappa: float
    n_pairs: int
    cost: float


@dataclass(frozen=True, eq=False)
class KappaResult:
    """The calibrated κ (eq:sigma2rho) and how well the data determine it.

    Attributes
    ----------
    kappa : float
        Minimiser of Θ(κ) over all pairs.
    cost : float
        Θ(κ) at the minimum (sum of squared window differences, in squared image units).
    cost_no_blur : float
        Θ(0): the windows compared without any added blur.
    n_pairs, n_features : int
        Pairs used, features involved.
    per_frame : dict[int, FrameKappa]
        κ fitted per frame (frames with pairs only).
    pairs_by_types : dict[tuple[int, int], int]
        Number of pairs per (ref type, edi type).
    curve_kappa, curve_cost : ndarray, shape (G,)
        The sampled cost curve Θ(κ).
    bounds : (float, float)
    at_bound : bool
        True when κ sits at a search bound (the minimum may lie outside).
    """

    kappa: float
    cost: float
    cost_no_blur: float
    n_pairs: int
    n_features: int
    per_frame: dict[int, FrameKappa]
    pairs_by_types: dict[tuple[int, int], int]
    curve_kappa: FloatArray
    curve_cost: FloatArray
    bounds: tuple[float, float]
    at_bound: bool
    window_px: int = WINDOW_PX
    margin_px: int = MARGIN_PX
    rho_r_px_percentiles: tuple[float, float, float] = field(default=(np.nan, np.nan, np.nan))

    @property
    def frame_kappas(self) -> FloatArray:
        """κ of every frame, shape (F,), in frame order."""
        return np.array([self.per_frame[f].kappa for f in sorted(self.per_frame)], dtype=np.float64)

    @property
    def spread(self) -> dict[str, float]:
        """Spread of the per-frame κ: mean, standard deviation, min, max."""
        k = self.frame_kappas
        if k.size == 0:
            return {"mean": float("nan"), "std": float("nan"), "min": float("nan"), "max": float("nan")}
        return {
            "mean": float(k.mean()),
            "std": float(k.std(ddof=1)) if k.size > 1 else 0.0,
            "min": float(k.min()),
            "max": float(k.max()),
        }

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON summary (``kappa.json`` body)."""
        lo, med, hi = self.rho_r_px_percentiles
        return {
            "kappa": self.kappa,
            "cost": self.cost,
            "cost_no_blur": self.cost_no_blur,
            "rms_residual": float(np.sqrt(self.cost / max(self.n_pairs * self.window_px**2, 1))),
            "n_pairs": self.n_pairs,
            "n_features": self.n_features,
            "at_bound": self.at_bound,
            "bounds": list(self.bounds),
            "window_px": self.window_px,
            "margin_px": self.margin_px,
            "rho_r_px": {"p5": lo, "median": med, "p95": hi},
            "per_frame": {
                str(f): {"kappa": fk.kappa, "n_pairs": fk.n_pairs, "cost": fk.cost} for f, fk in sorted(self.per_frame.items())
            },
            "spread": self.spread,
            "pairs_by_types": {f"{a}-{b}": n for (a, b), n in sorted(self.pairs_by_types.items())},
            "curve": {"kappa": self.curve_kappa.tolist(), "cost": self.curve_cost.tolist()},
        }


def central_features(camera: PlenopticCamera, features: BapFeatures, max_offset_px: float) -> NDArray[np.bool_]:
    """Features at most ``max_offset_px`` from their micro-image centre (model MIC), shape (N,).

    Away from its centre a micro-image is vignetted by the main-lens aperture: the lit part of the
    micro-lens disc shrinks (the white image falls to ~70 % at 4 px from the centre on the R12
    presets, to ~0 at the micro-image radius), so a point's PSF there is a truncated disc and its
    9 × 9 window reaches into the dark gaps between micro-images. Pairs of such windows do not
    follow eq:relblurimgformation; keeping central features only makes Θ(κ) meaningful.
    """
    c = micro_image_centres(camera, features.k, features.l)
    return np.hypot(features.u - c[:, 0], features.v - c[:, 1]) <= max_offset_px


def default_max_offset_px(camera: PlenopticCamera) -> float:
    """Default radius of :func:`central_features`: 0.17 micro-image pitch (4.0 px on the R12)."""
    return 0.17 * camera.grid.diameter_px


def _minimise(cost: Any, grid: FloatArray, values: FloatArray, bounds: tuple[float, float], xatol: float) -> tuple[float, float]:
    """Bounded Brent search in the grid bracket around the best sampled κ."""
    i = int(np.argmin(values))
    lo = grid[max(i - 1, 0)]
    hi = grid[min(i + 1, grid.size - 1)]
    res = minimize_scalar(cost, bounds=(lo, hi), method="bounded", options={"xatol": xatol})
    k, c = float(res.x), float(res.fun)
    if values[i] < c:
        k, c = float(grid[i]), float(values[i])
    return min(max(k, bounds[0]), bounds[1]), c


def calibrate_kappa(
    images: Mapping[int, NDArray[np.floating]],
    features: BapFeatures,
    types: TypeLayout,
    *,
    window: int = WINDOW_PX,
    margin: int = MARGIN_PX,
    bounds: tuple[float, float] = KAPPA_BOUNDS,
    grid_points: int = GRID_POINTS,
    min_rho_r_px: float = 0.0,
    eligible: NDArray[np.bool_] | None = None,
    xatol: float = 1e-4,
) -> KappaResult:
    """Calibrate κ (σ = κ·ρ, eq:sigma2rho) from BAP features and their images (paper §5.3).

    Parameters
    ----------
    images : mapping frame → ndarray (H, W)
        Devignetted grey images (float), one per frame of ``features``.
    features : BapFeatures
        BAP features with their cluster (or node) ids; features of one cluster see the same point.
    types : TypeLayout
        Micro-lens type of each (k, l).
    window : int
        Side of the compared windows (9, paper §5.3).
    margin : int
        Margin of the sharper window; the Gaussian is truncated at ±margin.
    bounds : (float, float)
        Search interval of κ.
    grid_points : int
        Samples of the cost curve Θ(κ) over ``bounds`` (plus κ = 0).
    min_rho_r_px : float
        Pairs with a smaller relative blur radius are left out (they carry no information on κ).
    eligible : ndarray of bool, shape (N,), optional
        Features allowed in pairs (default: all); see :func:`central_features`.
    xatol : float
        Absolute tolerance on κ.

    Returns
    -------
    KappaResult

    Raises
    ------
    DataError
        No pair of features of different types in one cluster, or a frame without an image.
    """
    if window < 1 or window % 2 == 0:
        raise DataError(f"window must be a positive odd number of pixels, got {window}")
    if eligible is not None:
        eligible = np.asarray(eligible, dtype=bool)
        if eligible.shape != (len(features),):
            raise DataError(f"eligible must have shape ({len(features)},), got {eligible.shape}")
        features = features.select(eligible)
    pairs = relative_blur_pairs(features, types)
    pairs = pairs.select(pairs.rho_r_px >= min_rho_r_px)
    pw = extract_pair_windows(images, features, pairs, window=window, margin=margin)
    return kappa_from_windows(pw, bounds=bounds, grid_points=grid_points, xatol=xatol)


def kappa_from_windows(
    pw: PairWindows,
    *,
    bounds: tuple[float, float] = KAPPA_BOUNDS,
    grid_points: int = GRID_POINTS,
    xatol: float = 1e-4,
) -> KappaResult:
    """κ from the sampled windows of the pairs (:func:`extract_pair_windows`): the cost Θ(κ) of
    eq:sigma2rho sampled on ``grid_points`` over ``bounds`` and minimised, over all pairs and
    per frame (the rest of :func:`calibrate_kappa`, for a caller that keeps the windows)."""
    if not 0.0 <= bounds[0] < bounds[1]:
        raise DataError(f"κ bounds must satisfy 0 <= low < high, got {bounds}")
    pairs = pw.pairs
    if len(pairs) == 0:
        raise DataError(
            "no pair of BAP features of different micro-lens types in one cluster: κ needs clusters seen through >= 2 types"
        )
    window, margin = int(pw.ref.shape[1]), pw.margin
    grid = np.linspace(bounds[0], bounds[1], grid_points)
    sq = np.stack([pw.residuals(float(k)).astype(np.float64) ** 2 for k in grid])  # (G, P)
    no_blur = float(np.sum(pw.residuals(0.0).astype(np.float64) ** 2))
    curve = sq.sum(axis=1)

    def total(k: float) -> float:
        return float(np.sum(pw.residuals(float(k)).astype(np.float64) ** 2))

    kappa, cost = _minimise(total, grid, curve, bounds, xatol)

    per_frame: dict[int, FrameKappa] = {}
    frames, inverse = np.unique(pairs.frame, return_inverse=True)
    frame_curves = np.zeros((grid.size, frames.size))
    np.add.at(frame_curves.T, inverse, sq.T)
    for fi, frame in enumerate(frames):  # one 1-D search per frame
        mask = inverse == fi

        def frame_cost(k: float, mask: NDArray[np.bool_] = mask) -> float:
            return float(np.sum(pw.residuals(float(k), mask).astype(np.float64) ** 2))

        kf, cf = _minimise(frame_cost, grid, frame_curves[:, fi], bounds, xatol * 10)
        per_frame[int(frame)] = FrameKappa(kf, int(mask.sum()), cf)

    combos, counts = np.unique(np.stack([pairs.type_ref, pairs.type_edi], axis=1), axis=0, return_counts=True)
    span = bounds[1] - bounds[0]
    return KappaResult(
        kappa=kappa,
        cost=cost,
        cost_no_blur=no_blur,
        n_pairs=len(pairs),
        n_features=int(np.unique(np.concatenate([pairs.ref, pairs.edi])).size),
        per_frame=per_frame,
        pairs_by_types={(int(a), int(b)): int(n) for (a, b), n in zip(combos, counts, strict=True)},
        curve_kappa=np.concatenate([[0.0], grid]),
        curve_cost=np.concatenate([[no_blur], curve]),
        bounds=(float(bounds[0]), float(bounds[1])),
        at_bound=bool(min(kappa - bounds[0], bounds[1] - kappa) < 1e-3 * span),
        window_px=window,
        margin_px=margin,
        rho_r_px_percentiles=tuple(float(x) for x in np.percentile(pairs.rho_r_px, [5, 50, 95])),  # type: ignore[arg-type]
    )
