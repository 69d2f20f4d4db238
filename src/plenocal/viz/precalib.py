"""Pre-calibration figures: micro-image radii versus 1/N (paper fig:radii) and a crop of a white
image with the detected centres and fitted radii."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from plenocal.viz import new_figure

TYPE_COLOURS = ("#d62728", "#2ca02c", "#1f77b4", "#9467bd", "#ff7f0e", "#8c564b")


def radii_figure(precal: Any) -> Any:
    """Micro-image radii per type as violins against 1/N, with the fitted law (paper fig:radii).

    ``precal`` is a :class:`~plenocal.precalib.pipeline.Precalibration` or, when Ω could not be
    estimated, a :class:`~plenocal.precalib.pipeline.PartialPrecalibration` (violins only, so that
    the user sees why). Left: the variance-law radius 2√(σ² − p) with the fitted
    √((m/N)² + (1 − w)·q_i²) at the centre of the sensor; right: the support radius |m|/N + |q_i|
    (eq:miradiusfnumber) with the paper's α·σ radii. Apertures left out of the fit are grey.
    """
    fig = new_figure(figsize=(10.0, 4.2))
    ax1, ax2 = fig.subplots(1, 2, sharey=True)
    internals = getattr(precal, "internals", None)
    omega = internals.omega if internals is not None else None
    apertures = internals.apertures if internals is not None else precal.apertures
    p = internals.pixel_variance_px2 if internals is not None and internals.estimator == "variance" else 1.0 / 12.0
    w = internals.unblurred_weight if internals is not None else 0.0
    layout = precal.types.layout
    n_types = max(layout.n_types, 1)
    used = {d.f_number: d.used for d in apertures}
    inv_n = np.array(sorted(1.0 / N for N in precal.moments))
    width = 0.12 * (inv_n.max() - inv_n.min() + 1e-9) / max(len(inv_n), 1)
    centre = np.zeros(2)
    for N, mom in precal.moments.items():
        centre = np.mean(mom.centre_px, axis=0)
        t = layout.type_of(mom.k, mom.l) if layout.n_types else np.zeros(len(mom.k), dtype=int)
        r_rms = 2.0 * np.sqrt(np.maximum(mom.variance_px2 - p, 0.0))
        for i in range(n_types):
            sel = t == i
            if not np.any(sel):
                continue
            offset = (i - (n_types - 1) / 2) * width
            for ax, values in ((ax1, r_rms[sel]), (ax2, mom.radius_alpha_px[sel])):
                parts = ax.violinplot([values], positions=[1.0 / N + offset], widths=width, showextrema=False)
                for body in parts["bodies"]:
                    body.set_facecolor(TYPE_COLOURS[i % len(TYPE_COLOURS)] if used.get(N, False) else "#bbbbbb")
                    body.set_alpha(0.6)
    if omega is not None:
        s = omega.pixel_size_mm
        xs = np.linspace(0, inv_n.max() * 1.05, 50)
        m_c, q_c = omega.local(np.repeat(centre[None], n_types, axis=0), np.arange(n_types))
        m_px = abs(float(m_c[0])) / s
        q_px = np.abs(q_c) / s if omega.q_mm else np.zeros(n_types)
        for i in range(n_types):
            colour = TYPE_COLOURS[i % len(TYPE_COLOURS)]
            ax1.plot(xs, np.sqrt((m_px * xs) ** 2 + (1.0 - w) * q_px[i] ** 2), color=colour, lw=1.2, label=f"type {i}")
            ax2.plot(xs, m_px * xs + q_px[i], color=colour, lw=1.2, label=f"type {i}: |m|/N + |q|")
        ax2.legend(fontsize=8, loc="upper left")
        title = f"micro-image radii (grey: apertures left out); m = {omega.m_mm * 1e3:.3f} µm at the MLA origin"
    else:
        title = "micro-image radii (grey: apertures left out); Ω could not be estimated"
    ax1.set_title(f"variance-law radius 2√(σ² − p), p = {p:.3f} px²")
    ax2.set_title("support radius |m|/N + |q_i| and the paper's α·σ")
    for ax in (ax1, ax2):
        ax.set_xlabel("1/N")
        ax.grid(alpha=0.3)
    ax1.set_ylabel("radius [px]")
    fig.suptitle(title)
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
    m_loc, q_loc = omega.local(np.stack([mic.u[sel], mic.v[sel]], axis=1), types)
    for (u, v), t, mm, qq in zip(zip(mic.u[sel], mic.v[sel], strict=True), types, m_loc, q_loc, strict=True):
        r = (abs(mm) / N + (abs(qq) if omega.q_mm else 0.0)) / s
        ax.add_patch(Circle((u, v), r, fill=False, lw=0.8, color=TYPE_COLOURS[t % len(TYPE_COLOURS)]))
    ax.plot(mic.u[sel], mic.v[sel], "+", color="yellow", ms=6, label="detected centre")
    ax.plot(nodes[:, 0], nodes[:, 1], ".", color="cyan", ms=2, label="grid node")
    ax.set_xlim(u0 - 0.5, u0 + size_px - 0.5)
    ax.set_ylim(v0 + size_px - 0.5, v0 - 0.5)
    ax.set_title(f"white N = {N:g}: centres and fitted radii (colour = type)")
    ax.legend(fontsize=8, loc="lower right")
    return fig
