"""Deterministic, stratified sample patterns and counter-based hashing for the ray tracer.

Randomness never comes from a stateful generator shared between threads (the reference's PRISM
seeds one ``mt19937`` per thread from ``std::random_device``, so its images differ run to run).
Here:

- a table of ``n_patterns`` evenly spread 4-D patterns of ``n`` samples — (pixel offset u, v) ×
  (micro-lens disc point x, y) — is drawn once per image from ``(seed, image_id)``;
- every (pixel, micro-lens) pair picks a pattern, a toroidal shift of the pixel offsets and a
  rotation of the disc points from a counter-based hash of ``(seed, image_id, pixel, lens)``.

Each pixel's value therefore depends only on (seed, image, pixel): the image is byte-identical for
any number of threads and any scheduling (pbrt-v4's principle).
"""

from __future__ import annotations

import numba
import numpy as np
from numpy.typing import NDArray

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
_INV53 = 1.0 / 9007199254740992.0  # 2**-53


@numba.njit(cache=True, inline="always")
def mix64(z: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    """SplitMix64 finaliser: a bijective 64-bit mixing function."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@numba.njit(cache=True, inline="always")
def hash4(a: np.uint64, b: np.uint64, c: np.uint64, d: np.uint64) -> np.uint64:  # pragma: no cover
    """Hash of four 64-bit counters (seed, image, pixel, lens)."""
    h = mix64(a + _GOLDEN)
    h = mix64(h ^ (b + _GOLDEN))
    h = mix64(h ^ (c + _GOLDEN))
    return mix64(h ^ (d + _GOLDEN))


@numba.njit(cache=True, inline="always")
def unit_float(h: np.uint64) -> float:  # pragma: no cover - compiled
    """A float in [0, 1) from the top 53 bits of a hash."""
    return float(h >> _S11) * _INV53


def sample_patterns(n: int, *, seed: int, image_id: int, n_patterns: int = 64) -> NDArray[np.float64]:
    """Evenly spread 4-D sample patterns for one image.

    Each pattern holds ``n`` samples: a pixel offset (du, dv) ∈ [−½, ½)² on a Fibonacci lattice
    (x_k = (k + ½)/n, y_k = frac(k·φ⁻¹)) and a point of the unit disc (the micro-lens aperture) on
    a Vogel sunflower spiral (r_k = √((k + ½)/n), θ_k = k·golden angle), both evenly spread for
    any n; each pattern pairs them by its own random permutation. The tracer randomises each
    (pixel, micro-lens) further by a toroidal shift of the pixel offsets and a rotation of the
    disc points (randomised quasi-Monte Carlo: unbiased, and about 20 % less noise than jittered
    strata at 30 rays).

    Parameters
    ----------
    n : int
        Samples (rays) per pattern, >= 1.
    seed, image_id : int
        The pattern table depends on these only.
    n_patterns : int
        Number of distinct pairings.

    Returns
    -------
    ndarray, shape (n_patterns, n, 4)
        Columns du, dv (pixels), x, y (unit disc).
    """
    if n < 1:
        raise ValueError(f"rays per pixel must be >= 1, got {n}")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(image_id), 0x5EED]))
    k = np.arange(n, dtype=np.float64)
    r = np.sqrt((k + 0.5) / n)
    theta = k * np.pi * (3.0 - np.sqrt(5.0))
    disc = np.stack([r * np.cos(theta), r * np.sin(theta)], axis=-1)
    pixel = np.stack([(k + 0.5) / n, np.mod(k * (np.sqrt(5.0) - 1.0) / 2.0, 1.0)], axis=-1) - 0.5
    out = np.empty((n_patterns, n, 4))
    for p in range(n_patterns):
        out[p, :, 0:2] = pixel
        out[p, :, 2:4] = disc[rng.permutation(n)]
    return out
