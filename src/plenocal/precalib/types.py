"""Micro-lens type layout from white images (paper §3.2: types differ in radius and intensity).

Candidate layouts ``type(k, l) = (k + row_shift[l mod P]) mod I`` with ``row_shift[0] = 0`` (type 0
is the lens at k ≡ 0 mod I on even rows, so the labels are positional and reproducible) are scored
by how well they separate the per-micro-image features (radius-law variance, brightness). The
best one is verified across the array: every micro-image is assigned to the type whose mean
feature is nearest, and the fraction that agrees with the layout is the confidence.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from plenocal.errors import DataError
from plenocal.model.lattice import TypeLayout


@dataclass(frozen=True)
class TypeClassification:
    layout: TypeLayout
    confidence: float
    """Fraction of micro-images whose nearest type mean is their layout type."""
    separation: float
    """Smallest gap between type means over the pooled within-type standard deviation."""
    candidates: tuple[tuple[tuple[int, ...], float], ...]
    """(row_shift, separation) of every candidate, best first."""


def classify_types(
    k: NDArray[np.int64],
    l: NDArray[np.int64],
    features: NDArray[np.float64],
    n_types: int,
    *,
    periods: tuple[int, ...] = (1, 2, 3),
) -> TypeClassification:
    """Find the periodic type layout that best explains per-micro-image features.

    Parameters
    ----------
    k, l : (M,) micro-image indices.
    features : (M,) or (M, F) features (e.g. radius-law variance at several apertures).
    n_types : I ≥ 1.
    """
    if n_types < 1:
        raise DataError("type classification needs at least one micro-lens type")
    feats = np.asarray(features, dtype=np.float64)
    if feats.ndim == 1:
        feats = feats[:, None]
    feats = (feats - np.median(feats, axis=0)) / (np.std(feats, axis=0) + 1e-12)
    if n_types == 1:
        return TypeClassification(TypeLayout(1), 1.0, float("inf"), (((0,), float("inf")),))
    scored = []
    seen: set[tuple[int, ...]] = set()
    for period in periods:
        for tail in itertools.product(range(n_types), repeat=period - 1):
            shift = (0, *tail)
            layout = TypeLayout(n_types, shift)
            # Layouts equal on a 6×6 patch (e.g. (0,) and (0, 0)) are the same layout.
            pk, pl = np.meshgrid(np.arange(6), np.arange(6))
            key = tuple(layout.type_of(pk.ravel(), pl.ravel()))
            if key in seen:
                continue
            seen.add(key)
            scored.append((shift, _separation(feats, layout.type_of(k, l), n_types)))
    scored.sort(key=lambda x: -x[1])
    best_shift, best_sep = scored[0]
    layout = TypeLayout(n_types, best_shift)
    t = layout.type_of(k, l)
    means = np.stack([feats[t == i].mean(axis=0) for i in range(n_types)])
    nearest = np.argmin(((feats[:, None, :] - means[None]) ** 2).sum(axis=2), axis=1)
    confidence = float(np.mean(nearest == t))
    return TypeClassification(layout, confidence, float(best_sep), tuple(scored))


def _separation(feats: NDArray[np.float64], t: NDArray[np.int64], n: int) -> float:
    means, var, counts = [], 0.0, 0
    for i in range(n):
        f = feats[t == i]
        if len(f) < 2:
            return 0.0
        means.append(f.mean(axis=0))
        var += ((f - f.mean(axis=0)) ** 2).sum()
        counts += len(f)
    pooled = np.sqrt(var / max(counts - n, 1) / feats.shape[1])
    m = np.stack(means)
    gaps = [np.linalg.norm(m[i] - m[j]) for i in range(n) for j in range(i + 1, n)]
    return float(min(gaps) / (pooled + 1e-12))
