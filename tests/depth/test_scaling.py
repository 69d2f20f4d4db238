"""Depth scaling (:mod:`plenocal.depth.scaling`): the board plane's virtual depth along each line of
sight, the per-frame fit of w_true = c0 + c1·w_matched with its jackknife covariance and Wald
test, its application, and its document."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.depth.metric import points_from_virtual_depth
from plenocal.depth.scaling import (
    MAX_EXTRAPOLATION_SIGMA_RATIO,
    DepthScaling,
    board_virtual_depths,
    extrapolation,
    extrapolation_text,
    fit_depth_scaling,
)
from plenocal.model.geometry import Pose
from plenocal.model.target import Checkerboard
from plenocal.sim.presets import preset

BOARD = Checkerboard(10, 8, 2.5, 1.25)
BIAS = (0.0026, 0.977)
"""c0, c1 of the PRISM R12-B set's matcher (docs/depth.md, "Depth scaling")."""
FRAME_SCATTER = 0.003
"""Relative scatter of a frame's w error about the fit (0.29 % RMS on the PRISM set)."""
POINT_SCATTER = 0.015
"""Relative scatter of one micro-image's aggregated w about its frame's (0.8–1.5 % there)."""


def _rotation(ax: float, ay: float) -> np.ndarray:
    cx, sx, cy, sy = np.cos(ax), np.sin(ax), np.cos(ay), np.sin(ay)
    return np.array([[1, 0, 0], [0, cx, -sx], [0, sx, cx]]) @ np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])


def test_board_virtual_depths_put_each_line_of_sight_on_the_board_plane():
    cam = preset("r12-a", small=True).camera
    k, l = cam.grid.lattice.all_indices()
    R = _rotation(0.3, -0.2)
    centre = np.array([0.0, 0.0, 300.0])
    t = centre - R @ np.array([BOARD.columns - 1, BOARD.rows - 1, 0.0]) * BOARD.square_mm / 2
    on, ups = board_virtual_depths(cam, k, l, Pose(R, t), BOARD)
    assert 200 < on.sum() < len(k)
    pts = points_from_virtual_depth(cam, k[on], l[on], ups[on])
    distance = (pts - t) @ R[:, 2]
    assert np.max(np.abs(distance)) < 1e-6 * 300.0
    local = (pts - t) @ R
    m = 0.5 * BOARD.square_mm
    assert np.all(local[:, 0] > -m - 1e-9) and np.all(local[:, 0] < (BOARD.columns - 1) * BOARD.square_mm + m + 1e-9)
    # a wider margin sees more of the plane, never less
    on_wide, _ = board_virtual_depths(cam, k, l, Pose(R, t), BOARD, margin_squares=1.0)
    assert on_wide.sum() > on.sum() and np.all(on_wide[on])


def test_a_relative_frame_takes_only_its_linked_nodes_for_the_board():
    """With a node extent (a frame linked with relative node ids) only the lines of sight that meet
    the plane over those nodes' rows and columns, widened by the margin, count; the full extent's
    result is the same as giving every node."""
    cam = preset("r12-a", small=True).camera
    k, l = cam.grid.lattice.all_indices()
    R = _rotation(0.1, 0.05)
    t = np.array([0.0, 0.0, 300.0]) - R @ np.array([BOARD.columns - 1, BOARD.rows - 1, 0.0]) * BOARD.square_mm / 2
    pose = Pose(R, t)
    on, _ = board_virtual_depths(cam, k, l, pose, BOARD)
    full, _ = board_virtual_depths(cam, k, l, pose, BOARD, node_extent=(0, BOARD.columns - 1, 0, BOARD.rows - 1))
    assert np.array_equal(on, full)
    part, ups_part = board_virtual_depths(cam, k, l, pose, BOARD, node_extent=(2, 5, 1, 4))
    assert 0 < part.sum() < on.sum() and np.all(on[part])
    local = (points_from_virtual_depth(cam, k[part], l[part], ups_part[part]) - t) @ R
    m, sq = 0.5 * BOARD.square_mm, BOARD.square_mm
    assert np.all((local[:, 0] >= 2 * sq - m - 1e-9) & (local[:, 0] <= 5 * sq + m + 1e-9))
    assert np.all((local[:, 1] >= 1 * sq - m - 1e-9) & (local[:, 1] <= 4 * sq + m + 1e-9))


def _samples(rng: np.random.Generator, c: tuple[float, float], n_frames: int = 8) -> dict:
    out = {}
    for f, w0 in enumerate(np.linspace(0.07, 0.25, n_frames)):
        wt = w0 * (1 + 0.1 * rng.uniform(-1, 1, 3000))  # a tilted board spans ±10 % of w
        wm = (wt - c[0]) / c[1]
        wm = wm * (1 + FRAME_SCATTER * rng.standard_normal()) * (1 + POINT_SCATTER * rng.standard_normal(len(wt)))
        wm[:75] *= 1.4  # 5 % in wrong minima, on either side (a one-sided 5 % moves the median, and the fit with it)
        wm[75:150] *= 0.7
        out[f] = (wm, wt, 50.0 / wt)
    return out


def test_fit_recovers_the_matchers_bias_within_its_sigma_and_keeps_it():
    s = fit_depth_scaling(_samples(np.random.default_rng(1), BIAS))
    sd = np.sqrt(np.diag(s.covariance))
    assert s.kept and s.wald > s.threshold
    delta = np.array(s.coefficients) - BIAS  # c0 and c1 are correlated (−0.9): their joint distance
    assert delta @ np.linalg.solve(np.asarray(s.covariance), delta) < s.threshold
    assert sd[1] < 0.01
    after = [v["w_error_after_percent"] for v in s.per_frame.values()]
    before = [v["w_error_before_percent"] for v in s.per_frame.values()]
    assert np.sqrt(np.mean(np.square(after))) < 0.5 * np.sqrt(np.mean(np.square(before)))


def test_an_unbiased_matcher_gets_no_scaling():
    s = fit_depth_scaling(_samples(np.random.default_rng(2), (0.0, 1.0)))
    assert not s.kept and s.wald <= s.threshold
    ups = np.array([4.0, 7.5, np.nan])
    np.testing.assert_array_equal(s.apply(ups), ups)


def test_too_few_frames_give_no_scaling():
    samples = _samples(np.random.default_rng(3), BIAS, n_frames=3)
    s = fit_depth_scaling(samples)
    assert not s.kept and s.n_frames == 0 and "need >= 4" in s.reason


def test_apply_and_the_document_round_trip():
    s = fit_depth_scaling(_samples(np.random.default_rng(1), BIAS))
    ups = np.array([4.0, 7.5, 12.0, np.nan])
    c0, c1 = s.coefficients
    np.testing.assert_allclose(s.apply(ups)[:3], 1.0 / (c0 + c1 / ups[:3]))
    assert np.isnan(s.apply(ups)[3])
    back = DepthScaling.from_json(s.to_json())
    assert back.coefficients == pytest.approx(s.coefficients) and back.kept == s.kept
    np.testing.assert_allclose(back.covariance, s.covariance)
    assert back.per_frame.keys() == s.per_frame.keys()
    sig = np.array([v["correction_sigma_percent"] for v in s.per_frame.values()])
    assert np.all((sig > 0) & (sig < 1.0))  # the correction is known to better than 1 % of w


def test_no_scaling_writes_a_plain_json_document():
    import json

    s = fit_depth_scaling({})
    doc = json.loads(json.dumps(s.to_json(), allow_nan=False))
    assert doc["kept"] is False and doc["wald"] is None
    back = DepthScaling.from_json(doc)
    assert not back.kept and np.isnan(back.wald)


FIELD = (-0.0022, 5.4e-5)
"""b, c of the real-optics R12-B's calibration frames (mean of 8 frames' fits: each −0.0011 … −0.0030
and 1.7e-5 … 8.9e-5; w_matched = w · (1 + b·r² + c·r⁴), r in mm)."""


def _field_samples(rng: np.random.Generator, field: tuple[float, float], c: tuple[float, float] = BIAS) -> dict:
    """:func:`_samples` with radii (a tilted board over 0–7 mm of the MLA) and the matcher's w scaled
    by the field's shape, each frame's own shape scaled by 1 ± 0.3 (the real frames' b and c vary
    together: the same shape, stronger or weaker)."""
    out = {}
    for f, (wm, wt, z) in _samples(rng, c).items():
        r2 = rng.uniform(0.0, 7.0, len(wm)) ** 2
        g = 1 + 0.3 * rng.standard_normal()
        out[f] = (wm * (1 + g * (field[0] * r2 + field[1] * r2 * r2)), wt, z, r2)
    return out


def test_a_field_shape_of_the_matchers_error_is_found_and_taken_off():
    """The real-optics shape (w −1 % near the axis against 5 mm out, every frame alike) is kept by its
    T², recovered within its σ, and taken off with c0, c1 after it: the corrected w follow the truth
    across the field, where the scale alone leaves the shape."""
    from plenocal.depth.scaling import FieldTerm

    samples = _field_samples(np.random.default_rng(3), FIELD)
    s = fit_depth_scaling(samples)
    f = s.field
    assert f is not None and f.kept and f.t2 > 3 * f.threshold
    sd = np.sqrt(np.diag(np.asarray(f.covariance)))
    assert abs(f.coefficients[0] - FIELD[0]) < 3 * sd[0] and abs(f.coefficients[1] - FIELD[1]) < 3 * sd[1]
    scale_only = DepthScaling(s.coefficients, s.covariance, s.wald, s.threshold, True, s.n_frames, s.n_points, s.reason)

    def gaps(scaling: DepthScaling) -> np.ndarray:  # per frame: median relative w error, centre (< 2 mm) less 4–6 mm
        out = []
        for wm, wt, _z, r2 in samples.values():
            rel = 1.0 / scaling.apply(1.0 / wm, r2) / wt - 1.0
            out.append(np.median(rel[r2 < 4.0]) - np.median(rel[(r2 > 16.0) & (r2 < 36.0)]))
        return np.array(out)

    # each frame's shape is 1 ± 0.3 of the mean's: the mean is taken off, each frame keeps its part
    assert abs(gaps(s).mean()) < 0.002 and abs(gaps(scale_only).mean()) > 0.01
    # applied: a micro-lens at 5 mm gets its w divided by the field factor, then c0, c1
    ups, r2 = np.array([3.0, 3.0]), np.array([0.0, 25.0])
    factor = 1 + f.offset + f.coefficients[0] * r2 + f.coefficients[1] * r2**2
    c0, c1 = s.coefficients if s.kept else (0.0, 1.0)
    np.testing.assert_allclose(s.apply(ups, r2), 1.0 / (c0 + c1 * (1.0 / ups) / factor))
    np.testing.assert_allclose(s.apply(ups), 1.0 / (c0 + c1 / ups))  # without radii: the scale alone
    again = DepthScaling.from_json(s.to_json())
    assert isinstance(again.field, FieldTerm) and again.field == f
    np.testing.assert_allclose(again.apply(ups, r2), s.apply(ups, r2))


def test_no_field_shape_is_not_applied():
    """A matcher whose error does not depend on the field: T² below its threshold, nothing applied there."""
    s = fit_depth_scaling(_field_samples(np.random.default_rng(4), (0.0, 0.0)))
    assert s.field is not None and not s.field.kept and s.field.t2 < s.field.threshold
    ups, r2 = np.array([3.0, 4.0]), np.array([0.0, 25.0])
    c0, c1 = s.coefficients
    np.testing.assert_allclose(s.apply(ups, r2), 1.0 / (c0 + c1 / ups))


def test_frames_beyond_the_calibration_frames_are_said_to_extrapolate_the_scaling():
    """The line's σ grows away from the calibration frames' span of w (0.07–0.25 here): a frame
    within it is not flagged, one at w 0.02 (its σ several times the frames') is — as farther, these
    samples' z being 50/w — and the document keeps what the test needs (each frame's matched w)."""
    s = DepthScaling.from_json(fit_depth_scaling(_samples(np.random.default_rng(1), BIAS)).to_json())
    lo, hi = s.support_w
    assert lo == pytest.approx(0.07 / BIAS[1], rel=0.05) and hi == pytest.approx(0.25 / BIAS[1], rel=0.05)
    inside = extrapolation(s, 0.15, 50.0 / 0.15)
    assert inside is not None and inside["extrapolated"] is None
    assert inside["correction_sigma_percent"] <= inside["calibration_sigma_percent"][1]
    near = extrapolation(s, 0.02, 50.0 / 0.02)
    assert near["correction_sigma_percent"] > MAX_EXTRAPOLATION_SIGMA_RATIO * near["calibration_sigma_percent"][1]
    assert near["extrapolated"] == "farther"
    lines = extrapolation_text({7: near, 8: inside, 9: None})
    assert len(lines) == 1 and lines[0].startswith("frame 7: depths farther than every calibration frame")
    assert extrapolation(s, 0.30, 50.0 / 0.30)["extrapolated"] is None  # just beyond the span, σ not yet doubled
    unkept = fit_depth_scaling(_samples(np.random.default_rng(2), (0.0, 1.0)))
    assert extrapolation(unkept, 0.02, 2500.0) is None

