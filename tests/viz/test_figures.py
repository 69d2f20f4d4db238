"""Figures: what they draw (lines, bands, panels) from plain inputs, and PNG + SVG files."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.model.profile import depth_of_field
from plenocal.viz import save_figure
from plenocal.viz.calibration import (
    OUTLIER_COLOUR,
    arrow_scale_px,
    coverage_figure,
    parameter_table_figure,
    per_frame_rmse_figure,
    residual_histograms_figure,
    residual_map_figure,
    translation_error_figure,
)
from plenocal.viz.profile import blur_profile_figure, profile_samples


def test_blur_profile_draws_each_type_its_focus_plane_and_dof(r12a_camera, tmp_path):
    dof = depth_of_field(r12a_camera)
    fig = blur_profile_figure(r12a_camera, dof)
    ax = fig.axes[0]
    assert len([ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]) == 3  # focus planes
    assert len(ax.patches) >= 3  # DoF bands
    focus = sorted(ln.get_xdata()[0] for ln in ax.get_lines() if ln.get_linestyle() == "--")
    assert focus == pytest.approx(sorted(t.focus_object_mm for t in dof.types))
    paths = save_figure(fig, tmp_path / "p")
    assert [p.suffix for p in paths] == [".png", ".svg"] and all(p.stat().st_size > 1000 for p in paths)


def test_profile_samples_vanish_at_each_focus_plane(r12a_camera):
    s = profile_samples(r12a_camera, n=4000)
    dof = depth_of_field(r12a_camera)
    for i, t in enumerate(dof.types):
        j = int(np.argmin(np.abs(s["rho_px"][i])))
        assert s["virtual_depth"][j] == pytest.approx(t.focus_virtual_depth, abs=0.01)


def test_residual_figures_have_one_panel_per_term():
    rng = np.random.default_rng(0)
    pos = rng.uniform(0, 1000, (200, 2))
    res = rng.normal(0, 0.3, (200, 2))
    fig = residual_map_figure(pos, res, image_size_px=(1000, 800), rho_residuals_px=rng.normal(0, 0.1, 200))
    assert len([a for a in fig.axes if a.get_label() != "<colorbar>"]) == 2
    types = rng.integers(0, 3, 200)
    fig = residual_histograms_figure({"e_u": res[:, 0], "e_v": res[:, 1], "e_mic": np.zeros(0)}, {"e_u": types})
    assert len(fig.axes) == 2  # empty terms are left out
    fig = translation_error_figure([10, 20, 30], [1.0, 0.5, 0.3])
    assert "0.60 %" in fig.axes[0].get_legend().get_texts()[0].get_text()
    fig = parameter_table_figure({"F": {"value": 49.7, "std": 0.01}, "D": {"value": 56.7, "std": None}})
    assert fig.axes[0].tables[0].get_celld()[(2, 2)].get_text().get_text() == "—"


def _quivers(ax):
    from matplotlib.quiver import Quiver

    return [c for c in ax.collections if isinstance(c, Quiver)]


def test_residual_map_is_scaled_to_the_typical_residual_with_outliers_clipped_and_marked():
    """200 residuals of ~0.05 px, one kept at 2 px and three rejected at 80 px: the scale follows
    the 90th percentile of the kept ones, the 2 px arrow is clipped in red, the rejected are crosses."""
    rng = np.random.default_rng(1)
    pos = rng.uniform(100, 900, (204, 2))
    res = rng.normal(0, 0.05, (204, 2))
    res[200] = [2.0, 0.0]
    res[201:] = [80.0, -5.0]
    rejected = np.zeros(204, bool)
    rejected[201:] = True
    fig = residual_map_figure(pos, res, image_size_px=(1000, 800), rejected=rejected)
    ax = fig.axes[0]
    scale, ref = arrow_scale_px(np.hypot(*res[:201].T), image_width_px=1000)
    assert ref == pytest.approx(np.percentile(np.hypot(*res[:201].T), 90))
    assert 0.05 < ref < 0.15 and scale == pytest.approx(40.0 / ref)
    assert f"arrows ×{scale:.0f}" in ax.get_title()
    normal, clipped, key = _quivers(ax)
    assert len(normal.U) == 200 and np.max(np.hypot(normal.U, normal.V)) <= 3 * ref * scale + 1e-9
    assert len(clipped.U) == 1 and np.hypot(clipped.U[0], clipped.V[0]) == pytest.approx(3 * ref * scale)
    assert tuple(clipped.get_facecolor()[0][:3]) == pytest.approx(tuple(int(OUTLIER_COLOUR[i:i + 2], 16) / 255 for i in (1, 3, 5)))
    assert key.U[0] == pytest.approx(ref * scale)  # the key arrow is the 90th percentile
    crosses = [c for c in ax.collections if c.get_offsets().shape[0] == 3]
    assert len(crosses) == 1 and "3 rejected (max 80.2 px)" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_per_frame_bars_are_the_kept_rmse_and_rejections_are_counted_beside():
    per_frame = {"0": {"rmse": {"uv_px": 0.05, "rho_px": 0.01}, "n_rejected": 0},
                 "15": {"rmse": {"uv_px": 0.06, "rho_px": 0.01}, "n_rejected": 15}}
    held = {"100": {"rmse": {"uv_px": 0.07, "rho_px": 0.02}, "n_rejected": 2}}
    fig = per_frame_rmse_figure(per_frame, held_out=held, keys=("uv_px", "rho_px"))
    ax = fig.axes[0]
    heights = sorted(round(b.get_height(), 6) for b in ax.patches)
    assert heights == [0.01, 0.01, 0.02, 0.05, 0.06, 0.07]
    assert ax.get_ylim()[1] < 0.1  # not stretched to any rejected residual
    notes = sorted(t.get_text() for t in ax.texts)
    assert "15✕" in notes and "2✕" in notes and any("held-out" in t for t in notes)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "15", "100"]


def test_coverage_figure_has_a_panel_per_type_and_the_profile_planes(r12a_camera):
    rng = np.random.default_rng(2)
    n = 300
    pos = rng.uniform(0, 800, (n, 2))
    types = rng.integers(0, 3, n)
    vd = rng.uniform(2.0, 4.0, n)
    z = rng.uniform(330.0, 380.0, n)
    profile = {"types": [{"type": i, "focus_plane": {"virtual_depth": 2.3 + 0.2 * i, "object_mm": 360.0 + 3 * i},
                          "limits": {"virtual_depth": [2.1 + 0.2 * i, 2.5 + 0.2 * i], "object_mm": [355.0 + 3 * i, 365.0 + 3 * i]}}
                         for i in range(3)]}
    fig = coverage_figure(pos, types, image_size_px=(1000, 800), virtual_depth=vd, object_distance_mm=z, profile=profile)
    maps = [a for a in fig.axes if a.get_title().startswith("type ")]
    assert len(maps) == 3
    assert sum(int(a.get_title().split(": ")[1].split(" ")[0]) for a in maps) == n
    # 800 × 800 px of the 1000 × 800 px sensor covered: 16 of the 20 columns of 50-px cells at most
    assert all(int(a.get_title().split("in ")[1].split(" %")[0]) <= 80 for a in maps)
    depth_axes = [a for a in fig.axes if "focus planes" in a.get_title()]
    assert len(depth_axes) == 2
    dashed = sorted(ln.get_xdata()[0] for ln in depth_axes[0].get_lines() if ln.get_linestyle() == "--")
    assert dashed == pytest.approx([2.3, 2.5, 2.7])
    assert len(depth_axes[1].patches) >= 3  # a DoF band per type (plus the histogram steps)


def test_residual_map_draws_the_model_field_and_the_report_finds_it(tmp_path):
    """The dashed circle of the calibrated model's field on both panels of the residual map, read by
    the report from calibration's report.json (none when the field is unlimited)."""
    from pathlib import Path

    from plenocal.viz.report import Collected, _model_field_circle

    rng = np.random.default_rng(0)
    pos = rng.uniform(0, [4080, 3068], (200, 2))
    res = rng.normal(0, 0.2, (200, 2))
    fig = residual_map_figure(pos, res, image_size_px=(4080, 3068), rho_residuals_px=res[:, 0],
                              field_circle_px=(2040.0, 1534.0, 1160.0))
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert len(panels) == 2
    for ax in panels:
        circles = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
        assert len(circles) == 1
        x, y = circles[0].get_data()
        assert np.allclose(np.hypot(x - 2040.0, y - 1534.0), 1160.0)
    c = Collected(Path(tmp_path), {"calibration": (Path(tmp_path) / "report.json", {
        "model_field": {"radius_mm": 6.4, "radius_px": 1163.6, "centre_px": [2037.0, 1535.0]}})})
    assert _model_field_circle(c) == (2037.0, 1535.0, 1163.6)
    c.documents["calibration"][1]["model_field"] = {"radius_mm": None, "radius_px": None, "centre_px": [2037.0, 1535.0]}
    assert _model_field_circle(c) is None
