"""Micro-image centre detection on white raw images (paper §3.1).

Pipeline (vectorised over micro-images):

1. grey float image, 3×3 median filter (dead and hot pixels);
2. flattening by a wide Gaussian envelope (vignetting towards the sensor corners);
3. micro-image pitch from the image spectrum (:func:`estimate_pitch_px`);
4. candidate centres: local maxima of the image smoothed at a quarter pitch;
5. sub-pixel refinement: iterated intensity centroid over a disc of radius ≈ pitch/2 − 1 around
   each candidate, above a local background (:func:`refine_centroids`).

Centres whose window leaves the image, or whose mass is too small, are rejected and counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
from numpy.typing import NDArray
from scipy import ndimage

from plenocal.errors import DataError
from plenocal.precalib._kernels import refine_centroids_kernel

FloatArray = NDArray[np.float64]


def to_grey(image: NDArray) -> NDArray[np.float32]:
    """Grey float32 image from grey (H, W) or colour (H, W, 3) input, any integer or float dtype."""
    img = np.asarray(image)
    if img.ndim == 3:
        img = img.astype(np.float32).mean(axis=2)
    if img.ndim != 2:
        raise DataError(f"expected a 2-D grey or 3-channel image, got shape {np.asarray(image).shape}")
    return np.ascontiguousarray(img, dtype=np.float32)


HOT_PIXEL_FRACTION = 0.35
"""A pixel farther than this fraction of the image's dynamic range from its 3×3 median is dead or hot."""


def clean_image(image: NDArray) -> NDArray[np.float32]:
    """Grey image with dead and hot pixels replaced by their 3×3 median.

    Only outliers are replaced: filtering every pixel would round the micro-image edges and bias
    their second moments (by ≈ 0.6 % on R12-like micro-images).
    """
    grey = to_grey(image)
    med = cv2.medianBlur(grey, 3)
    lo, hi = np.percentile(grey[:: max(1, grey.shape[0] // 256), :: max(1, grey.shape[1] // 256)], [0.1, 99.9])
    bad = np.abs(grey - med) > HOT_PIXEL_FRACTION * max(float(hi - lo), 1e-6)
    out = grey.copy()
    out[bad] = med[bad]
    return out


def estimate_pitch_px(image: NDArray[np.float32], *, hexagonal: bool, crop: int = 512) -> float:
    """Micro-image pitch (px) from the strongest non-DC peak of the spectrum of a central crop.

    The strongest peak of a hexagonal rows-aligned lattice lies at the row spacing p·√3/2; of an
    orthogonal one at p. Accuracy ≈ 1 %; the grid fit refines it.
    """
    H, W = image.shape
    c = min(crop, H, W)
    y0, x0 = (H - c) // 2, (W - c) // 2
    patch = image[y0 : y0 + c, x0 : x0 + c].astype(np.float64)
    patch = patch - patch.mean()
    win = np.hanning(c)
    spec = np.abs(np.fft.fftshift(np.fft.fft2(patch * win[:, None] * win[None, :])))
    fy, fx = np.meshgrid(np.arange(c) - c // 2, np.arange(c) - c // 2, indexing="ij")
    radius = np.hypot(fx, fy)
    spec[radius < 4] = 0.0  # DC and the vignetting envelope
    spec[radius > c // 4] = 0.0  # pitches below 4 px are not micro-images
    iy, ix = np.unravel_index(np.argmax(spec), spec.shape)
    # Sub-bin peak by parabolic interpolation along the radius.
    f = float(np.hypot(fx[iy, ix], fy[iy, ix]))
    spacing = c / f
    return spacing / (np.sqrt(3.0) / 2.0) if hexagonal else spacing


def envelope(image: NDArray[np.float32], pitch_px: float) -> NDArray[np.float32]:
    """The image's smooth brightness envelope: its local mean over several pitches (Gaussian,
    σ = 2 pitches), shape (H, W). Its value at a micro-image's centre times the micro-image's mass
    in :func:`flatten`'s image is the micro-image's mass in ``image``."""
    sigma = 2.0 * pitch_px
    # The envelope is smooth: blur a 1/f-downsampled copy (same result, f² fewer pixels).
    H, W = image.shape
    f = max(1, int(pitch_px // 4))
    small = cv2.resize(image, (max(W // f, 1), max(H // f, 1)), interpolation=cv2.INTER_AREA)
    small = cv2.GaussianBlur(small, (0, 0), sigma / f)
    return cv2.resize(small, (W, H), interpolation=cv2.INTER_LINEAR)


def flatten_by(image: NDArray[np.float32], env: NDArray[np.float32]) -> NDArray[np.float32]:
    """``image`` divided by its :func:`envelope` ``env`` (floored at 1e-3 of its maximum)."""
    floor = max(float(env.max()) * 1e-3, 1e-6)
    return image / np.maximum(env, floor)


def flatten(image: NDArray[np.float32], pitch_px: float) -> NDArray[np.float32]:
    """Divide by the local mean over several pitches, removing smooth vignetting."""
    return flatten_by(image, envelope(image, pitch_px))


def candidate_centres(flat: NDArray[np.float32], pitch_px: float) -> NDArray[np.float64]:
    """Integer positions (u, v) of local maxima, one per micro-image, shape (M, 2)."""
    smooth = cv2.GaussianBlur(flat, (0, 0), max(pitch_px / 4.0, 1.0))
    size = max(round(0.7 * pitch_px), 3)
    peaks = smooth == ndimage.maximum_filter(smooth, size=size, mode="nearest")
    peaks &= smooth > 0.5 * float(np.median(smooth[smooth > 0])) if np.any(smooth > 0) else peaks
    v, u = np.nonzero(peaks)
    return np.stack([u, v], axis=1).astype(np.float64)


@dataclass(frozen=True)
class CentroidResult:
    """Refined centres and what was rejected."""

    uv: FloatArray
    """(M, 2) sub-pixel centres (pixel centre at integer coordinates)."""
    mass: FloatArray
    """(M,) background-subtracted intensity sum."""
    n_rejected_border: int
    n_rejected_faint: int


def refine_centroids(
    image: NDArray[np.float32],
    initial_uv: NDArray[np.float64],
    radius_px: float,
    *,
    iterations: int = 4,
    min_mass_fraction: float = 0.25,
) -> CentroidResult:
    """Iterated intensity centroids over discs of radius ``radius_px`` (vectorised).

    The background of each window is the mean over the disc's boundary ring (the dark gaps
    between micro-images); weights are ``max(I − background, 0)``.

    Parameters
    ----------
    image : (H, W) float32, flattened.
    initial_uv : (M, 2) starting points.
    radius_px : window radius, ≈ pitch/2 − 1.
    """
    H, W = image.shape
    r = int(np.ceil(radius_px)) + 1
    uv = np.asarray(initial_uv, dtype=np.float64)
    inside = (uv[:, 0] - r >= 0) & (uv[:, 0] + r < W) & (uv[:, 1] - r >= 0) & (uv[:, 1] + r < H)
    n_border = int((~inside).sum())
    uv, mass = refine_centroids_kernel(np.ascontiguousarray(image, dtype=np.float32), np.ascontiguousarray(uv[inside]), float(radius_px), int(iterations))
    ok = mass > min_mass_fraction * np.median(mass) if len(mass) else mass > 0
    return CentroidResult(uv=uv[ok], mass=mass[ok], n_rejected_border=n_border, n_rejected_faint=int((~ok).sum()))


@dataclass(frozen=True)
class CentreDetection:
    """Detected micro-image centres of one white image."""

    uv: FloatArray
    pitch_px: float
    n_candidates: int
    n_rejected_border: int
    n_rejected_faint: int


def detect_centres(image: NDArray, *, hexagonal: bool = True, pitch_px: float | None = None) -> CentreDetection:
    """Sub-pixel micro-image centres of a white raw image.

    Parameters
    ----------
    image : (H, W) or (H, W, 3), any dtype.
    hexagonal : lattice kind (for the spectral pitch estimate).
    pitch_px : known approximate pitch; estimated from the spectrum when None.
    """
    clean = clean_image(image)
    if float(clean.max()) <= float(clean.min()):
        raise DataError("white image is uniform (empty or saturated): no micro-images to detect")
    pitch = estimate_pitch_px(clean, hexagonal=hexagonal) if pitch_px is None else float(pitch_px)
    flat = flatten(clean, pitch)
    cand = candidate_centres(flat, pitch)
    res = refine_centroids(flat, cand, radius_px=pitch / 2.0 - 1.0)
    # Two candidates converging on the same micro-image: keep one.
    uv = _deduplicate(res.uv, 0.3 * pitch)
    return CentreDetection(
        uv=uv,
        pitch_px=pitch,
        n_candidates=len(cand),
        n_rejected_border=res.n_rejected_border,
        n_rejected_faint=res.n_rejected_faint + (len(res.uv) - len(uv)),
    )


def _deduplicate(uv: FloatArray, tol: float) -> FloatArray:
    from scipy.spatial import cKDTree

    if len(uv) == 0:
        return uv
    tree = cKDTree(uv)
    pairs = tree.query_pairs(tol, output_type="ndarray")
    keep = np.ones(len(uv), dtype=bool)
    keep[pairs[:, 1]] = False
    return uv[keep]
