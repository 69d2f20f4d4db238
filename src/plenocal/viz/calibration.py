"""Calibration figures: residual maps and histograms, per-frame RMSE, poses in 3-D, ε_z, the
parameter table, and the relative blur (κ) figures.

Every function takes plain arrays or dicts (the contents of the stage outputs), so it depends on
no calibration internals, and returns a matplotlib Figure (never shown or saved here).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from plenocal.viz import new_figure
from plenocal.viz.precalib import TYPE_COLOURS


def _colour(i: int) -> str:
    return TYPE_COLOURS[int(i) % len(TYPE_COLOURS)] if i >= 0 else "#555555"


def residual_map_figure(
    positions_px: ArrayLike,
    residuals_px: ArrayLike,
    *,
    image_size_px: tuple[int, int],
    rho_residuals_px: ArrayLike | None = None,
    title: str = "BAP reprojection residuals over the sensor",
    arrow_scale: float | None = None,
) -> Any:
    """Residual vectors (u, v) at their observed positions, coloured by ‖e_uv‖; and e_ρ if given.

    Parameters
    ----------
    positions_px : array, shape (N, 2)
        Observed (u, v) in pixels.
    residuals_px : array, shape (N, 2)
        Residuals observed − model (u, v), pixels.
    image_size_px : (W, H)
    rho_residuals_px : array, shape (N,), optional
        Blur radius residuals e_ρ (pixels): a second panel.
    arrow_scale : float, optional
        Pixels of arrow per pixel of residual (default: 0.05 of the image width per 95th percentile).
    """
    pos = np.asarray(positions_px, dtype=np.float64).reshape(-1, 2)
    res = np.asarray(residuals_px, dtype=np.float64).reshape(-1, 2)
    W, H = image_size_px
    panels = 2 if rho_residuals_px is not None else 1
    fig = new_figure(figsize=(6.0 * panels, 4.4))
    axes = np.atleast_1d(fig.subplots(1, panels))
    norm = np.hypot(res[:, 0], res[:, 1])
    p95 = float(np.percentile(norm, 95)) if norm.size else 1.0
    scale = arrow_scale if arrow_scale is not None else 0.05 * W / max(p95, 1e-2)
    ax = axes[0]
    sc = ax.scatter(pos[:, 0], pos[:, 1], c=norm, s=3, cmap="viridis", vmin=0, vmax=max(p95, 1e-6))
    step = max(1, pos.shape[0] // 1500)
    ax.quiver(pos[::step, 0], pos[::step, 1], res[::step, 0] * scale, res[::step, 1] * scale, angles="xy",
              scale_units="xy", scale=1, width=0.002, color="k", alpha=0.6)
    fig.colorbar(sc, ax=ax, label="‖e_uv‖ [px]")
    ax.set_title(f"{title} (arrows ×{scale:.0f})", fontsize=9)
    if rho_residuals_px is not None:
        er = np.asarray(rho_residuals_px, dtype=np.float64).reshape(-1)
        lim = float(np.percentile(np.abs(er), 95)) if er.size else 1.0
        sc2 = axes[1].scatter(pos[:, 0], pos[:, 1], c=er, s=3, cmap="coolwarm", vmin=-lim, vmax=lim)
        fig.colorbar(sc2, ax=axes[1], label="e_ρ [px]")
        axes[1].set_title("blur radius residuals e_ρ", fontsize=9)
    for a in axes:
        a.set_xlim(0, W - 1)
        a.set_ylim(H - 1, 0)
        a.set_aspect("equal")
        a.set_xlabel("u [px]")
        a.set_ylabel("v [px]")
    return fig


def residual_histograms_figure(terms: Mapping[str, ArrayLike], lens_types: Mapping[str, ArrayLike] | None = None, *, bins: int = 60) -> Any:
    """One histogram per residual term (e.g. ``e_u``, ``e_v``, ``e_ρ``, ``e_mic``), split by lens type.

    Parameters
    ----------
    terms : mapping name → array (N_t,)
        Residuals in pixels.
    lens_types : mapping name → array (N_t,) of int, optional
        Lens type of each residual (−1: none); a term absent here is drawn as one histogram.
    """
    names = [n for n, v in terms.items() if np.asarray(v).size]
    fig = new_figure(figsize=(3.4 * max(len(names), 1), 3.2))
    axes = np.atleast_1d(fig.subplots(1, max(len(names), 1)))
    for ax, name in zip(axes, names, strict=False):
        values = np.asarray(terms[name], dtype=np.float64).reshape(-1)
        lim = float(np.percentile(np.abs(values), 99.5)) or 1.0
        edges = np.linspace(-lim, lim, bins + 1)
        types = None if lens_types is None or name not in lens_types else np.asarray(lens_types[name]).reshape(-1)
        if types is None:
            ax.hist(values, bins=edges, color="#444444", alpha=0.8)
        else:
            for t in np.unique(types):
                sel = types == t
                rms = float(np.sqrt(np.mean(values[sel] ** 2)))
                ax.hist(values[sel], bins=edges, histtype="step", lw=1.3, color=_colour(int(t)),
                        label=f"type {t + 1}: rms {rms:.3f}" if t >= 0 else f"rms {rms:.3f}")
            ax.legend(fontsize=7)
        ax.set_title(f"{name} (rms {np.sqrt(np.mean(values**2)):.3f} px, n={values.size})", fontsize=9)
        ax.set_xlabel("residual [px]")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("count")
    return fig


def per_frame_rmse_figure(per_frame: Mapping[str, Mapping[str, Any]], *, keys: Sequence[str] = ("uv_px", "rho_px", "bap_px")) -> Any:
    """Per-frame RMSE bars from an evaluation report's ``per_frame`` section.

    Parameters
    ----------
    per_frame : mapping frame (str) → {"rmse": {key: value|None}, "n_bap": int}
    keys : RMSE keys to draw (missing or null values are skipped).
    """
    frames = sorted(per_frame, key=lambda f: int(f))
    fig = new_figure(figsize=(max(5.0, 0.35 * len(frames) + 2.5), 3.6))
    ax = fig.subplots()
    x = np.arange(len(frames))
    width = 0.8 / max(len(keys), 1)
    for j, key in enumerate(keys):
        vals = [per_frame[f].get("rmse", {}).get(key) for f in frames]
        y = np.array([np.nan if v is None else float(v) for v in vals])
        if np.all(np.isnan(y)):
            continue
        ax.bar(x + (j - (len(keys) - 1) / 2) * width, y, width, label=key.replace("_px", ""))
    ax.set_xticks(x)
    ax.set_xticklabels(frames, fontsize=7)
    ax.set_xlabel("frame")
    ax.set_ylabel("RMSE [px]")
    ax.set_title("reprojection RMSE per frame")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return fig


def poses_3d_figure(
    rotations: ArrayLike, translations_mm: ArrayLike, *, frames: Sequence[int] | None = None,
    board_size_mm: tuple[float, float] | None = None,
) -> Any:
    """Board poses seen from the camera frame in 3-D (camera at the origin, z towards the scene).

    Parameters
    ----------
    rotations : array, shape (F, 3, 3)
        ``cam_from_world`` rotations.
    translations_mm : array, shape (F, 3)
        ``cam_from_world`` translations (board node 0 in the camera frame).
    board_size_mm : (width, height), optional
        Extent of the node grid, drawn as each board's outline.
    """
    R = np.asarray(rotations, dtype=np.float64).reshape(-1, 3, 3)
    t = np.asarray(translations_mm, dtype=np.float64).reshape(-1, 3)
    fig = new_figure(figsize=(6.0, 5.0))
    ax = fig.add_subplot(projection="3d")
    if board_size_mm is not None:
        w, h = board_size_mm
        corners = np.array([[0, 0, 0], [w, 0, 0], [w, h, 0], [0, h, 0], [0, 0, 0]], dtype=np.float64)
        for i in range(R.shape[0]):  # one outline per frame
            c = corners @ R[i].T + t[i]
            ax.plot(c[:, 0], c[:, 2], -c[:, 1], lw=0.8, color="#1f77b4")
    ax.scatter(t[:, 0], t[:, 2], -t[:, 1], s=8, color="#d62728")
    if frames is not None:
        for i, f in enumerate(frames):
            ax.text(t[i, 0], t[i, 2], -t[i, 1], str(f), fontsize=6)
    zmax = float(np.max(t[:, 2])) if t.size else 1.0
    L = 0.1 * zmax
    for axis, colour in ((np.array([L, 0, 0]), "r"), (np.array([0, L, 0]), "g"), (np.array([0, 0, L]), "b")):
        ax.plot([0, axis[0]], [0, axis[2]], [0, -axis[1]], color=colour, lw=2)
    ax.set_xlabel("x [mm]")
    ax.set_ylabel("z [mm]")
    ax.set_zlabel("−y [mm]")
    ax.set_title("board poses in the camera frame")
    return fig


def translation_error_figure(displacements_mm: ArrayLike, errors_percent: ArrayLike, *, label: str = "plenocal") -> Any:
    """Relative translation error ε_z (%) versus ground-truth displacement (paper fig:translationerror).

    Parameters
    ----------
    displacements_mm : array, shape (K,)
    errors_percent : array, shape (K,)
        ε_z(δ_z) in percent.
    """
    d = np.asarray(displacements_mm, dtype=np.float64).reshape(-1)
    e = np.asarray(errors_percent, dtype=np.float64).reshape(-1)
    order = np.argsort(d)
    fig = new_figure(figsize=(6.0, 3.6))
    ax = fig.subplots()
    ax.plot(d[order], e[order], "o-", ms=3, label=f"{label}: mean {np.mean(e):.2f} %")
    ax.set_xlabel("displacement δ_z [mm]")
    ax.set_ylabel("ε_z [%]")
    ax.set_title("relative translation error along z")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def parameter_table_figure(parameters: Mapping[str, Mapping[str, Any]]) -> Any:
    """The calibrated parameters with their standard deviations as a table figure.

    Parameters
    ----------
    parameters : mapping name → {"value": float, "std": float | None}
    """
    rows = []
    for name, p in parameters.items():
        v, s = p.get("value"), p.get("std")
        rows.append([name, "—" if v is None else f"{float(v):.6g}", "—" if s is None else f"{float(s):.3g}"])
    fig = new_figure(figsize=(5.5, 0.28 * (len(rows) + 2)))
    ax = fig.subplots()
    ax.axis("off")
    if rows:
        table = ax.table(cellText=rows, colLabels=["parameter", "value", "σ"], loc="center", cellLoc="left")
        table.auto_set_font_size(False)
        table.set_fontsize(8)
    return fig


def kappa_figure(kappa_doc: Mapping[str, Any]) -> Any:
    """Θ(κ) (normalised by Θ(0)) with the optimum, and κ per frame, from ``kappa.json``."""
    fig = new_figure(figsize=(10.0, 3.6))
    ax1, ax2 = fig.subplots(1, 2)
    curve = kappa_doc.get("curve", {})
    k = np.asarray(curve.get("kappa", []), dtype=np.float64)
    c = np.asarray(curve.get("cost", []), dtype=np.float64)
    kappa = float(kappa_doc["kappa"])
    c0 = float(kappa_doc.get("cost_no_blur") or (c[0] if c.size else 1.0))
    if k.size:
        ax1.plot(k, c / c0, ".-", color="#1f77b4")
    ax1.axvline(kappa, color="#d62728", ls="--", label=f"κ = {kappa:.4f}")
    ax1.set_xlabel("κ")
    ax1.set_ylabel("Θ(κ) / Θ(0)")
    ax1.set_title(f"relative blur cost over {kappa_doc.get('n_pairs', '?')} pairs")
    ax1.legend(fontsize=8)
    ax1.grid(alpha=0.3)
    per = kappa_doc.get("per_frame", {})
    frames = sorted(per, key=lambda f: int(f))
    vals = np.array([per[f]["kappa"] for f in frames], dtype=np.float64)
    ax2.plot(np.arange(len(frames)), vals, "o", color="#2ca02c")
    if vals.size:
        m, s = float(vals.mean()), float(vals.std(ddof=1)) if vals.size > 1 else 0.0
        ax2.axhspan(m - s, m + s, color="#2ca02c", alpha=0.15, label=f"mean {m:.3f} ± {s:.3f}")
    ax2.axhline(kappa, color="#d62728", ls="--", label="all frames")
    ax2.set_xticks(np.arange(len(frames)))
    ax2.set_xticklabels(frames, fontsize=7)
    ax2.set_xlabel("frame")
    ax2.set_ylabel("κ")
    ax2.set_title("κ per frame")
    ax2.legend(fontsize=8)
    ax2.grid(alpha=0.3)
    return fig


def relative_blur_figure(pair_windows: Any, kappa: float, *, index: int | None = None) -> Any:
    """Paper fig:blur for one pair: (a) reference (more blurred), (b) sharper view, (c) (b) with the
    relative blur G(κ·ρ_r) added, (d) that Gaussian PSF.

    Parameters
    ----------
    pair_windows : plenocal.calib.kappa.PairWindows
    kappa : float
    index : int, optional
        Pair to show (default: the one whose residual drops most with the added blur).
    """
    from plenocal.calib.kappa import blur_windows

    pw = pair_windows
    if index is None:
        gain = pw.residuals(0.0) - pw.residuals(kappa)
        index = int(np.argmax(gain))
    m = pw.margin
    sigma = kappa * pw.pairs.rho_r_px[index]
    ref = pw.ref[index]
    edi = pw.edi[index]
    blurred = blur_windows(edi[None], np.array([sigma]), margin=m)[0]
    t = np.arange(-m, m + 1)
    g = np.exp(-0.5 * (t / max(sigma, 1e-3)) ** 2)
    psf = np.outer(g, g)
    psf /= psf.sum()
    fig = new_figure(figsize=(9.0, 2.7))
    axes = fig.subplots(1, 4)
    lo, hi = float(min(ref.min(), edi.min())), float(max(ref.max(), edi.max()))
    panels: list[tuple[NDArray, str]] = [
        (ref, f"(a) reference, type {pw.pairs.type_ref[index] + 1}"),
        (edi[m:-m, m:-m], f"(b) sharper, type {pw.pairs.type_edi[index] + 1}"),
        (blurred, f"(c) (b) + blur σ_r = {sigma:.2f} px"),
        (psf, "(d) relative blur PSF"),
    ]
    for ax, (img, title) in zip(axes, panels, strict=True):
        if title.startswith("(d)"):
            ax.imshow(img, cmap="magma")
        else:
            ax.imshow(img, cmap="gray", vmin=lo, vmax=hi)
        ax.set_title(title, fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(f"relative blur, ρ_r = {pw.pairs.rho_r_px[index]:.2f} px, κ = {kappa:.3f}", fontsize=9)
    return fig
