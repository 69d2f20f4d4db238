"""Detection overlay: a crop of a raw checkerboard image with the detected corners and blur circles."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from plenocal.viz import new_figure
from plenocal.viz.precalib import TYPE_COLOURS


def overlay_figure(image: NDArray[np.floating], features: Any, camera: Any, *, size_px: int = 200) -> Any:
    """Crop around the densest cluster: corners (+) and circles of radius |ρ| coloured by type."""
    from matplotlib.patches import Circle

    H, W = image.shape[:2]
    fig = new_figure(figsize=(6.5, 6.5))
    ax = fig.subplots()
    if len(features) == 0:
        ax.imshow(image, cmap="gray")
        ax.set_title("no features")
        return fig
    ids, counts = np.unique(features.cluster, return_counts=True)
    densest = features.cluster == ids[np.argmax(counts)]
    cu, cv = float(np.mean(features.u[densest])), float(np.mean(features.v[densest]))
    u0 = int(np.clip(cu - size_px / 2, 0, max(W - size_px, 0)))
    v0 = int(np.clip(cv - size_px / 2, 0, max(H - size_px, 0)))
    crop = image[v0 : v0 + size_px, u0 : u0 + size_px]
    ax.imshow(crop, cmap="gray", extent=(u0 - 0.5, u0 + crop.shape[1] - 0.5, v0 + crop.shape[0] - 0.5, v0 - 0.5))
    sel = (features.u >= u0) & (features.u < u0 + size_px) & (features.v >= v0) & (features.v < v0 + size_px)
    types = camera.mla.types.type_of(features.k[sel], features.l[sel]) if camera.n_types else np.zeros(int(sel.sum()), dtype=int)
    for u, v, r, t in zip(features.u[sel], features.v[sel], features.rho[sel], types, strict=True):
        if np.isfinite(r):
            ax.add_patch(Circle((u, v), abs(r), fill=False, lw=0.9, color=TYPE_COLOURS[int(t) % len(TYPE_COLOURS)]))
    ax.plot(features.u[sel], features.v[sel], "+", color="yellow", ms=7)
    grid = camera.grid
    kk, ll = grid.lattice.all_indices()
    c = grid.centres(kk, ll)
    inside = (c[:, 0] >= u0) & (c[:, 0] < u0 + size_px) & (c[:, 1] >= v0) & (c[:, 1] < v0 + size_px)
    ax.plot(c[inside, 0], c[inside, 1], ".", color="cyan", ms=2)
    ax.set_xlim(u0 - 0.5, u0 + size_px - 0.5)
    ax.set_ylim(v0 + size_px - 0.5, v0 - 0.5)
    ax.set_title(f"frame {int(features.frame[0])}: corners (+), blur circles |ρ| by type, micro-image centres (·)", fontsize=9)
    return fig
