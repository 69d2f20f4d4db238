"""Pre-calibration figures: micro-image radii versus 1/N (paper fig:radii) and a crop of a white
image with the detected centres and fitted radii."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from plenocal.viz import new_figure

TYPE_COLOURS = ("#d62728", "#2ca02c", "#1f77b4", "#9467bd", "#ff7f0e", "#8c564b")


def radii_figure(precal: Any) -> Any:
    """Micro-image radii per type as violins against 1/N, with the fitted support-radius lines.

    Left: the variance-law radius √(R_a² + R_b²) = 2√(σ² − 1/12) and the fitted
    √((m/N)² + q_i²); right: the support radius |R_i(N)| = |m|/N + |q_i| (eq:miradiusfnumber)
    with the paper's α·σ radii for comparison. Apertures left out of the fit are greyed.
    """
    fig = new_figure(figsize=(10.0, 4.2))
    ax1, ax2 = fig.subplots(1, 2, sharey=True)
    omega = precal.internals.omega
    s = omega.pixel_size_mm
    n_types = max(len(omega.q_mm), 1)
    used = {d.f_number: d.used for d in precal.internals.apertures}
    layout = precal.types.layout
    inv_n = np.array(sorted(1.0 / N for N in precal.moments))
    width = 0.12 * (inv_n.max() - inv_n.min() + 1e-9) / max(len(inv_n), 1)
    m_px = abs(omega.m_mm) / s
    q_px = np.abs(np.array(omega.q_mm if omega.q_mm else (0.0,))) / s
    xs = np.linspace(0, inv_n.max() * 1.05, 50)
    for N, mom in precal.moments.items():
        t = layout.type_of(mom.k, mom.l) if len(omega.q_mm) else np.zeros(len(mom.k), dtype=int)
        for i in range(n_types):
            sel = t == i
            if not np.any(sel):
                continue
            offset = (i - (n_types - 1) / 2) * width
            for ax, values in ((ax1, mom.radius_rms_px[sel]), (ax2, mom.radius_alpha_px[sel])):
                parts = ax.violinplot([values], positions=[1.0 / N + offset], widths=width, showextrema=False)
                for body in parts["bodies"]:
                    body.set_facecolor(TYPE_COLOURS[i % len(TYPE_COLOURS)] if used.get(N, False) else "#bbbbbb")
                    body.set_alpha(0.6)
    for i in range(n_types):
        colour = TYPE_COLOURS[i % len(TYPE_COLOURS)]
        ax1.plot(xs, np.sqrt((m_px * xs) ** 2 + q_px[i] ** 2), color=colour, lw=1.2, label=f"type {i}")
        ax2.plot(xs, m_px * xs + q_px[i], color=colour, lw=1.2, label=f"type {i}: |m|/N + |q|")
    ax1.set_title("variance-law radius 2√(σ² − 1/12) (fit)")
    ax2.set_title("support radius |m|/N + |q_i| and the paper's α·σ")
    for ax in (ax1, ax2):
        ax.set_xlabel("1/N")
        ax.grid(alpha=0.3)
    ax1.set_ylabel("radius [px]")
    ax2.legend(fontsize=8, loc="upper left")
    fig.suptitle(f"micro-image radii (grey: apertures left out); m = {omega.m_mm * 1e3:.3f} µm")
    return fig


def centres_crop_figure(image: NDArray[np.floating], f_number: float, precal: Any, *, size_px: int = 160) -> Any:
    """A central crop of a white image with detected centres (+), grid nodes (·) and the fitted
    support radius at this image's aperture drawn per type."""
    from matplotlib.patches import Circle

    H, W = image.shape[:2]
    c0 = np.array([W / 2.0, H / 2.0])
    u0, v0 = int(c0[0] - size_px / 2), int(c0[1] - size_px / 2)
    crop = image[v0 : v0 + size_px, u0 : u0 + size_px]
    fig = new_figure(figsize=(6.0, 6.0))
    ax = fig.subplots()
    ax.imshow(crop, cmap="gray", extent=(u0 - 0.5, u0 + size_px - 0.5, v0 + size_px - 0.5, v0 - 0.5))
    mic = precal.mic
    sel = (mic.u > u0) & (mic.u < u0 + size_px) & (mic.v > v0) & (mic.v < v0 + size_px)
    grid = precal.grid_fit.grid
    nodes = grid.centres(mic.k[sel], mic.l[sel])
    omega = precal.internals.omega
    s = omega.pixel_size_mm
    N = f_number
    types = precal.types.layout.type_of(mic.k[sel], mic.l[sel]) if omega.q_mm else np.zeros(int(sel.sum()), dtype=int)
    for (u, v), t in zip(zip(mic.u[sel], mic.v[sel], strict=True), types, strict=True):
        q = abs(omega.q_mm[t]) if omega.q_mm else 0.0
        r = (abs(omega.m_mm) / N + q) / s
        ax.add_patch(Circle((u, v), r, fill=False, lw=0.8, color=TYPE_COLOURS[t % len(TYPE_COLOURS)]))
    ax.plot(mic.u[sel], mic.v[sel], "+", color="yellow", ms=6, label="detected centre")
    ax.plot(nodes[:, 0], nodes[:, 1], ".", color="cyan", ms=2, label="grid node")
    ax.set_xlim(u0 - 0.5, u0 + size_px - 0.5)
    ax.set_ylim(v0 + size_px - 0.5, v0 - 0.5)
    ax.set_title(f"white N = {N:g}: centres and fitted radii (colour = type)")
    ax.legend(fontsize=8, loc="lower right")
    return fig
