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


REFERENCE_PERCENTILE = 90.0
"""Residual maps scale their arrows so that this percentile of ‖e_uv‖ (kept features) is drawn
:data:`REFERENCE_ARROW_FRACTION` of the image width long: the typical residual is visible."""

REFERENCE_ARROW_FRACTION = 0.04
REFERENCE_FLOOR_PX = 1e-3
"""The reference residual is at least this (no detector is that precise): noise-free residuals
(rounding errors) stay invisible instead of being magnified to the image size."""

CLIP_FACTOR = 3.0
"""Arrows longer than this many reference lengths are clipped to it and drawn in red."""

OUTLIER_COLOUR = "#d62728"


def arrow_scale_px(norms_px: ArrayLike, *, image_width_px: float, percentile: float = REFERENCE_PERCENTILE,
                   fraction: float = REFERENCE_ARROW_FRACTION) -> tuple[float, float]:
    """(scale, reference residual): sensor pixels of arrow per pixel of residual, so that the
    ``percentile`` of ``norms_px`` is drawn ``fraction`` of the image width long.

    >>> arrow_scale_px([0.1, 0.2, 10.0], image_width_px=1000, percentile=50)
    (200.0, 0.2)
    """
    n = np.asarray(norms_px, dtype=np.float64).reshape(-1)
    n = n[np.isfinite(n)]
    ref = max(float(np.percentile(n, percentile)) if n.size else 1.0, REFERENCE_FLOOR_PX)
    return fraction * float(image_width_px) / ref, ref


def residual_map_figure(
    positions_px: ArrayLike,
    residuals_px: ArrayLike,
    *,
    image_size_px: tuple[int, int],
    rho_residuals_px: ArrayLike | None = None,
    rejected: ArrayLike | None = None,
    title: str = "BAP reprojection residuals over the sensor",
    arrow_scale: float | None = None,
    percentile: float = REFERENCE_PERCENTILE,
    clip_factor: float = CLIP_FACTOR,
    field_circle_px: tuple[float, float, float] | None = None,
) -> Any:
    """Residual vectors (u, v) at their observed positions, scaled to the typical residual; and e_ρ.

    The arrow scale is set from the ``percentile`` of ‖e_uv‖ over the kept features (stated in the
    title and drawn as a key arrow), so a few long arrows cannot shrink every other one to a dot.
    Arrows longer than ``clip_factor`` key lengths are clipped to it and drawn in red; rejected
    features (``rejected``) are red crosses, left out of the scale and the colour range.

    Parameters
    ----------
    positions_px : array, shape (N, 2)
        Observed (u, v) in pixels.
    residuals_px : array, shape (N, 2)
        Residuals observed − model (u, v), pixels.
    image_size_px : (W, H)
    rho_residuals_px : array, shape (N,), optional
        Blur radius residuals e_ρ (pixels): a second panel.
    rejected : array of bool, shape (N,), optional
        Features rejected by calibration's rule.
    arrow_scale : float, optional
        Pixels of arrow per pixel of residual (default: from the percentile, see above).
    percentile, clip_factor : float
        See above.
    field_circle_px : (u, v, radius), optional
        The calibrated model's field (:mod:`plenocal.evaluate.field`), drawn as a dashed circle on
        every panel.
    """
    pos = np.asarray(positions_px, dtype=np.float64).reshape(-1, 2)
    res = np.asarray(residuals_px, dtype=np.float64).reshape(-1, 2)
    rej = np.zeros(pos.shape[0], bool) if rejected is None else np.asarray(rejected, dtype=bool).reshape(-1)
    W, H = image_size_px
    panels = 2 if rho_residuals_px is not None else 1
    fig = new_figure(figsize=(6.2 * panels, 4.9))
    axes = np.atleast_1d(fig.subplots(1, panels))
    norm = np.hypot(res[:, 0], res[:, 1])
    kept = ~rej
    scale, ref = arrow_scale_px(norm[kept], image_width_px=W, percentile=percentile)
    if arrow_scale is not None:
        scale = float(arrow_scale)
    clip_px = clip_factor * ref
    long_ = kept & (norm > clip_px)
    shown = np.where(long_, clip_px / np.maximum(norm, 1e-300), 1.0)[:, None] * res * scale
    ax = axes[0]
    vmax = max(float(np.percentile(norm[kept], 95)) if kept.any() else 1.0, 1e-6)
    sc = ax.scatter(pos[kept, 0], pos[kept, 1], c=norm[kept], s=4, cmap="viridis", vmin=0, vmax=vmax)
    normal = kept & ~long_
    ax.quiver(pos[normal, 0], pos[normal, 1], shown[normal, 0], shown[normal, 1], angles="xy",
              scale_units="xy", scale=1, width=0.0025, color="k", alpha=0.7)
    if long_.any():
        ax.quiver(pos[long_, 0], pos[long_, 1], shown[long_, 0], shown[long_, 1], angles="xy", scale_units="xy",
                  scale=1, width=0.004, color=OUTLIER_COLOUR, label=f"{int(long_.sum())} clipped at {clip_px:.3g} px")
    if rej.any():
        ax.scatter(pos[rej, 0], pos[rej, 1], marker="x", s=28, color=OUTLIER_COLOUR, lw=1.2,
                   label=f"{int(rej.sum())} rejected (max {norm[rej].max():.3g} px)")
    ax.quiver([0.06 * W], [0.05 * H], [ref * scale], [0.0], angles="xy", scale_units="xy", scale=1,
              width=0.004, color="#1f77b4")
    ax.annotate(f"key: {percentile:.0f}th percentile ‖e_uv‖ = {ref:.3g} px", (0.06 * W, 0.05 * H), xytext=(0, 5),
                textcoords="offset points", fontsize=8, color="#1f77b4",
                bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.8})
    fig.colorbar(sc, ax=ax, label="‖e_uv‖ [px] (kept)")
    ax.set_title(f"{title}\narrows ×{scale:.0f}: the blue key is the {percentile:.0f}th percentile", fontsize=9)
    if long_.any() or rej.any():
        ax.legend(fontsize=7, loc="lower right")
    if rho_residuals_px is not None:
        er = np.asarray(rho_residuals_px, dtype=np.float64).reshape(-1)
        lim = float(np.percentile(np.abs(er[kept]), 95)) if kept.any() else 1.0
        sc2 = axes[1].scatter(pos[kept, 0], pos[kept, 1], c=er[kept], s=4, cmap="coolwarm", vmin=-lim, vmax=lim)
        if rej.any():
            axes[1].scatter(pos[rej, 0], pos[rej, 1], marker="x", s=28, color="k", lw=1.2, label=f"{int(rej.sum())} rejected")
            axes[1].legend(fontsize=7, loc="lower right")
        fig.colorbar(sc2, ax=axes[1], label="e_ρ [px] (colour range: 95th percentile of |e_ρ|)")
        axes[1].set_title("blur radius residuals e_ρ (kept features)", fontsize=9)
    for a in axes:
        if field_circle_px is not None:
            cu, cv, r = field_circle_px
            t = np.linspace(0.0, 2.0 * np.pi, 361)
            a.plot(cu + r * np.cos(t), cv + r * np.sin(t), ls="--", lw=1.0, color="#d62728")
            a.annotate("model's field", (cu, cv - r), xytext=(0, 3), textcoords="offset points", ha="center",
                       fontsize=7, color="#d62728")
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


def per_frame_rmse_figure(
    per_frame: Mapping[str, Mapping[str, Any]],
    *,
    held_out: Mapping[str, Mapping[str, Any]] | None = None,
    keys: Sequence[str] = ("uv_px", "rho_px", "bap_px"),
    title: str = "reprojection RMSE per frame (kept features)",
) -> Any:
    """Per-frame RMSE bars of the kept features from an evaluation report's ``per_frame`` section
    (and its held-out frames after a gap); each frame's rejected features are counted in red above
    its bars, never in them.

    Parameters
    ----------
    per_frame : mapping frame (str) → {"rmse": {key: value|None}, "n_bap": int, "n_rejected": int}
        Frames with the calibrated poses.
    held_out : same, optional
        Held-out frames (poses re-estimated), drawn to the right of a dotted line.
    keys : RMSE keys to draw (missing or null values are skipped).
    """
    groups = [(sorted(per_frame, key=int), per_frame)]
    if held_out:
        groups.append((sorted(held_out, key=int), held_out))
    labels: list[str] = []
    entries: list[Mapping[str, Any]] = []
    xs: list[float] = []
    x0 = 0.0
    for g, (frames, data) in enumerate(groups):
        if g:
            x0 += 1.0  # a gap before the held-out frames
        for f in frames:
            labels.append(f)
            entries.append(data[f])
            xs.append(x0)
            x0 += 1.0
    x = np.asarray(xs)
    fig = new_figure(figsize=(max(5.0, 0.38 * len(x) + 2.5), 3.6))
    ax = fig.subplots()
    width = 0.8 / max(len(keys), 1)
    top = np.zeros(len(x))
    for j, key in enumerate(keys):
        y = np.array([np.nan if (e.get("rmse") or {}).get(key) is None else float(e["rmse"][key]) for e in entries])
        if y.size == 0 or np.all(np.isnan(y)):
            continue
        ax.bar(x + (j - (len(keys) - 1) / 2) * width, y, width, label=key.replace("_px", ""), color=f"C{j}")
        top = np.fmax(top, np.nan_to_num(y))
    n_rej = np.array([int(e.get("n_rejected") or 0) for e in entries], dtype=int)
    for i in np.flatnonzero(n_rej):
        ax.annotate(f"{n_rej[i]}✕", (x[i], top[i]), xytext=(0, 2), textcoords="offset points", ha="center",
                    fontsize=7, color=OUTLIER_COLOUR)
    if n_rej.any():
        ax.plot([], [], ls="none", marker="$✕$", color=OUTLIER_COLOUR, label=f"rejected features ({int(n_rej.sum())}, not in the bars)")
    if held_out and per_frame:
        split_x = x[len(per_frame)] - 1.0
        ax.axvline(split_x, color="#888888", ls=":", lw=1)
        ax.text(split_x + 0.2, 1.0, "held-out frames, poses re-estimated →", transform=ax.get_xaxis_transform(),
                fontsize=7, color="#555555", va="top")
    ax.set_xticks(x)
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_xlabel("frame")
    ax.set_ylabel("RMSE [px]")
    ax.set_ylim(0, max(float(top.max()) if top.size else 0.0, 1e-6) * 1.25)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    return fig


def coverage_figure(
    positions_px: ArrayLike,
    lens_types: ArrayLike,
    *,
    image_size_px: tuple[int, int],
    virtual_depth: ArrayLike,
    object_distance_mm: ArrayLike,
    profile: Mapping[str, Any] | None = None,
    cell_px: float | None = None,
) -> Any:
    """Where the calibration is supported by data: kept features over the sensor and over depth,
    per micro-lens type.

    Top row: one panel per type, the number of features in each sensor cell (empty cells white).
    Bottom row: histograms of the virtual depth and of the object distance per type, with each
    type's calibrated focus plane (dashed) and depth of field (band) from ``profile.json``; depths
    outside the observed range are extrapolated.

    Parameters
    ----------
    positions_px : array, shape (N, 2)
    lens_types : array of int, shape (N,)
    image_size_px : (W, H)
    virtual_depth, object_distance_mm : array, shape (N,)
        Per feature: υ of its node's virtual image and its node's camera-frame z (mm).
    profile : mapping, optional
        ``profile.json``: ``types[i].focus_plane`` / ``limits`` (``virtual_depth``, ``object_mm``).
    cell_px : float, optional
        Side of the sensor cells (default: 1/20 of the image width).
    """
    pos = np.asarray(positions_px, dtype=np.float64).reshape(-1, 2)
    t = np.asarray(lens_types).reshape(-1).astype(int)
    vd = np.asarray(virtual_depth, dtype=np.float64).reshape(-1)
    z = np.asarray(object_distance_mm, dtype=np.float64).reshape(-1)
    W, H = image_size_px
    types = [int(i) for i in np.unique(t)] or [0]
    n_types = len(types)
    fig = new_figure(figsize=(max(10.0, 3.6 * n_types), 6.6))
    grid = fig.add_gridspec(2, 2 * n_types)  # top: two columns per type; bottom: two halves
    cell = cell_px if cell_px is not None else W / 20.0
    xe = np.arange(0.0, W + cell, cell)
    ye = np.arange(0.0, H + cell, cell)
    import matplotlib.colors as mcolors

    counts = [np.histogram2d(pos[t == i, 0], pos[t == i, 1], bins=(xe, ye))[0] for i in types]
    vmax = max(float(max(c.max() for c in counts)), 1.0)
    for j, (i, c) in enumerate(zip(types, counts, strict=True)):
        ax = fig.add_subplot(grid[0, 2 * j:2 * j + 2])
        cmap = mcolors.LinearSegmentedColormap.from_list("cov", ["#ffffff", _colour(i)])
        im = ax.pcolormesh(xe, ye, np.ma.masked_equal(c.T, 0), cmap=cmap, vmin=0, vmax=vmax)
        covered = float(np.mean(c > 0)) * 100.0
        ax.set_title(f"type {i + 1}: {int(np.sum(t == i))} features, in {covered:.0f} % of the {cell:.0f}-px cells", fontsize=8)
        ax.set_xlim(0, W)
        ax.set_ylim(H, 0)
        ax.set_aspect("equal")
        ax.set_xlabel("u [px]", fontsize=8)
        ax.tick_params(labelsize=7)
        if j == 0:
            ax.set_ylabel("v [px]", fontsize=8)
        if j == n_types - 1:
            fig.colorbar(im, ax=ax, label="features per cell")
    prof_types = {int(p.get("type", k)): p for k, p in enumerate((profile or {}).get("types", []))}
    for col, (values, key, label) in enumerate(((vd, "virtual_depth", "virtual depth υ"),
                                                 (z, "object_mm", "object distance z [mm]"))):
        ax = fig.add_subplot(grid[1, col * n_types:(col + 1) * n_types])
        finite = np.isfinite(values)
        lo_hi = [float(np.min(values[finite])), float(np.max(values[finite]))] if finite.any() else [0.0, 1.0]
        for i in types:
            p = prof_types.get(i)
            if p is None:
                continue
            lim = [x for x in (p.get("limits") or {}).get(key, []) if x is not None]
            focus = (p.get("focus_plane") or {}).get(key)
            if len(lim) == 2:
                ax.axvspan(min(lim), max(lim), color=_colour(i), alpha=0.12)
                lo_hi += [min(lim), max(lim)]
            if focus is not None:
                ax.axvline(focus, color=_colour(i), ls="--", lw=1.2)
        span = max(lo_hi) - min(lo_hi)
        edges = np.linspace(min(lo_hi) - 0.05 * span, max(lo_hi) + 0.05 * span, 41) if span > 0 else 40
        for i in types:
            sel = (t == i) & finite
            if sel.any():
                ax.hist(values[sel], bins=edges, histtype="step", lw=1.5, color=_colour(i),
                        label=f"type {i + 1}: {values[sel].min():.4g} .. {values[sel].max():.4g}")
        ax.set_xlabel(label, fontsize=8)
        ax.set_ylabel("features", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, title="observed range", title_fontsize=7)
        ax.set_title(f"{label.split(' [')[0]} of the kept features; dashed: focus planes, bands: depths of field",
                     fontsize=8)
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


def translation_error_figure(displacements_mm: ArrayLike, errors_percent: ArrayLike, *, label: str = "plenocal",
                             mean_percent: float | None = None) -> Any:
    """Relative translation error ε_z (%) versus ground-truth displacement (paper fig:translationerror).

    Parameters
    ----------
    displacements_mm : array, shape (K,)
    errors_percent : array, shape (K,)
        ε_z(δ_z) in percent.
    mean_percent : float, optional
        The mean over all pairs (the evaluation's headline), shown in the legend instead of the
        mean of the K points (which weighs each displacement alike).
    """
    d = np.asarray(displacements_mm, dtype=np.float64).reshape(-1)
    e = np.asarray(errors_percent, dtype=np.float64).reshape(-1)
    order = np.argsort(d)
    fig = new_figure(figsize=(6.0, 3.6))
    ax = fig.subplots()
    legend = (f"{label}: mean over all pairs {mean_percent:.2f} %" if mean_percent is not None
              else f"{label}: mean {np.mean(e):.2f} %")
    ax.plot(d[order], e[order], "o-", ms=3, label=legend)
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
