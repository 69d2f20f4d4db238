"""Figures (matplotlib, imported lazily): functions take results and return a Figure; they never
show or save. :func:`save_figure` writes PNG and SVG atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def new_figure(*, figsize: tuple[float, float] = (7.0, 4.5)) -> Any:
    """A matplotlib Figure on the non-interactive Agg canvas (no display needed)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Any, path_stem: str | Path, *, formats: tuple[str, ...] = ("png", "svg"), dpi: int = 150) -> list[Path]:
    """Save ``fig`` as ``<stem>.png`` and ``<stem>.svg`` (atomic renames). Returns the paths."""
    from plenocal.io.atomic import atomic_output

    out = []
    stem = Path(path_stem)
    for ext in formats:
        dest = stem.with_suffix("." + ext)
        with atomic_output(dest, suffix="." + ext) as tmp:
            fig.savefig(tmp, format=ext, dpi=dpi)
        out.append(dest)
    return out
