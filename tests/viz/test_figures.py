"""Figures: what they draw (lines, bands, panels) from plain inputs, and PNG + SVG files."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.model.profile import depth_of_field
from plenocal.viz import save_figure
from plenocal.viz.calibration import (
    parameter_table_figure,
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
