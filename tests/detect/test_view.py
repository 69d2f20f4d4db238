"""The scene view (detect.view): weighted block means, sampling, and thread-count independence."""

from __future__ import annotations

import numba
import numpy as np

from plenocal.detect._kernels import weighted_block_means_kernel
from plenocal.detect.view import SceneView, scene_view


def _images(seed=0, shape=(203, 311)):
    rng = np.random.default_rng(seed)
    dv = rng.uniform(0.0, 1.2, shape)
    weight = np.clip(rng.uniform(-0.3, 1.0, shape), 0.0, None)  # a third of the pixels unlit
    return dv, weight


def test_block_sums_match_numpy():
    dv, w = _images()
    step = 7
    h, wd = dv.shape[0] // step, dv.shape[1] // step
    num, den = weighted_block_means_kernel(dv, w, step, h, wd)
    crop = (slice(0, h * step), slice(0, wd * step))
    ref_num = (dv * w)[crop].reshape(h, step, wd, step).sum(axis=(1, 3))
    ref_den = w[crop].reshape(h, step, wd, step).sum(axis=(1, 3))
    np.testing.assert_allclose(num, ref_num, rtol=1e-12)
    np.testing.assert_allclose(den, ref_den, rtol=1e-12)


def test_same_view_for_any_thread_count():
    dv, w = _images(1, (480, 640))
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = scene_view(dv, w, pitch_px=14.0)
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        two = scene_view(dv, w, pitch_px=14.0)
    finally:
        numba.set_num_threads(before)
    assert one.image.tobytes() == two.image.tobytes()


def test_a_uniform_scene_is_its_level_where_lit_and_nan_where_dark():
    """A scene of uniform brightness 0.7 under a white that is dark on the left third: the view is
    0.7 wherever enough light falls, NaN where none does."""
    H, W = 300, 450
    dv = np.full((H, W), 0.7)
    weight = np.ones((H, W))
    weight[:, : W // 3] = 0.0
    view = scene_view(dv, weight, pitch_px=20.0)
    lit = np.isfinite(view.image)
    np.testing.assert_allclose(view.image[lit], 0.7, rtol=1e-5)
    assert not lit[:, :3].any() and lit[:, -3:].all()
    v = view.sample(np.array([[W - 50.0, H / 2], [20.0, H / 2], [-5.0, 10.0], [W + 10.0, 10.0]]))
    assert np.isclose(v[0], 0.7, rtol=1e-5) and np.all(np.isnan(v[1:]))


def test_sample_is_bilinear_at_the_view_pixel_centres():
    image = np.arange(12, dtype=np.float32).reshape(3, 4)
    view = SceneView(image, 10.0)
    # view pixel (i, j) is centred at raw ((j + 0.5)·10 − 0.5, (i + 0.5)·10 − 0.5)
    np.testing.assert_allclose(view.sample(np.array([[4.5, 4.5], [14.5, 24.5], [9.5, 9.5]])), [0.0, 9.0, 2.5])


def _board_view(*, columns=9, rows=5, square=21.0, shape=(255, 340), step=12.0, cut=0.0, seed=0):
    """A SceneView of a checkerboard (``columns`` × ``rows`` inner corners, a one-square white border,
    black beyond) under a rotation and a slight perspective, Gaussian-blurred by one pitch (two view
    pixels) as :func:`scene_view` blurs, with noise; ``cut`` view pixels of its right side unlit
    (NaN). Returns the view and the inner corners' raw-image positions."""
    import cv2

    rng = np.random.default_rng(seed)
    s = 8  # drawn s times finer, then averaged down
    cols, rws = columns + 1, rows + 1
    pattern = np.kron((np.add.outer(np.arange(rws), np.arange(cols)) % 2 == 0).astype(np.float32), np.ones((s * 10, s * 10), np.float32))
    printed = np.pad(0.05 + 0.85 * (1 - pattern), s * 10, constant_values=0.9)
    src = np.float32([[0, 0], [printed.shape[1], 0], [printed.shape[1], printed.shape[0]], [0, printed.shape[0]]])
    h, w = shape
    c = np.array([w / 2, h / 2])
    half = 0.5 * square * np.array([cols + 2, rws + 2])
    a = np.radians(8.0)
    R = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    quad = np.array([[-1, -1], [1, -1], [1.06, 1], [-0.94, 1]]) * half  # a little perspective
    dst = (quad @ R.T + c) * s
    H = cv2.getPerspectiveTransform(src, np.float32(dst))
    fine = cv2.warpPerspective(printed, H, (w * s, h * s), flags=cv2.INTER_AREA, borderValue=0.0)
    image = fine.reshape(h, s, w, s).mean(axis=(1, 3))
    image = cv2.GaussianBlur(image, (0, 0), 2.0) + rng.normal(0.0, 0.01, (h, w))
    if cut:
        image[:, int(w - cut):] = np.nan
    ij = np.stack(np.meshgrid(np.arange(1, columns + 1), np.arange(1, rows + 1)), axis=-1).reshape(-1, 2) * 10.0 * s + 10.0 * s - 0.5
    corners_fine = cv2.perspectiveTransform(ij[None].astype(np.float64), H)[0]
    view_xy = (corners_fine + 0.5) / s - 0.5  # the fine image's pixel centres, averaged s × s
    return SceneView(image.astype(np.float32), step), (view_xy + 0.5) * step - 0.5


def test_board_corners_are_found_where_the_board_projects():
    """The whole pattern of a 9 × 5 board in a view like a full-scale R12-A frame's (squares of 21
    view pixels, blurred by a pitch): every inner corner found, within half a view pixel (6 raw px;
    0.25 found here) of
    where it is drawn, returned in raw-image pixels. Linking needs a tenth of the node spacing
    (``LINK_MAX_RMSE_FRACTION``): 2 view pixels here."""
    from plenocal.detect.view import board_corners

    view, truth = _board_view()
    xy = board_corners(view, columns=9, rows=5)
    assert xy is not None and xy.shape == (45, 2)
    d = np.min(np.hypot(*(xy[:, None] - truth[None]).transpose(2, 0, 1)), axis=1)
    assert np.max(d) < 0.5 * view.step_px, np.max(d)
    assert len(np.unique(np.argmin(np.hypot(*(xy[:, None] - truth[None]).transpose(2, 0, 1)), axis=1))) == 45


def test_board_corners_need_the_whole_pattern():
    """A column of the board unlit (beyond the image circle), another board size, a uniform view:
    no pattern (None), never a part of one."""
    from plenocal.detect.view import board_corners

    view, _ = _board_view(cut=100)
    assert board_corners(view, columns=9, rows=5) is None
    full, _ = _board_view()
    assert board_corners(full, columns=7, rows=5) is None
    assert board_corners(SceneView(np.full((255, 340), 0.5, np.float32), 12.0), columns=9, rows=5) is None
    assert board_corners(SceneView(np.full((255, 340), np.nan, np.float32), 12.0), columns=9, rows=5) is None


def test_small_views_are_enlarged_for_the_search():
    """A 5 × 4 board whose squares span 6 view pixels (the small r12-a renders' views): found (as
    it is, or enlarged for the search when not) within half a view pixel of where it is drawn
    (0.38 here; a tenth of the spacing is 0.6)."""
    from plenocal.detect.view import board_corners

    view, truth = _board_view(columns=5, rows=4, square=6.0, shape=(66, 83), step=7.0, seed=3)
    xy = board_corners(view, columns=5, rows=4)
    assert xy is not None
    d = np.min(np.hypot(*(xy[:, None] - truth[None]).transpose(2, 0, 1)), axis=1)
    assert np.max(d) < 0.5 * view.step_px, np.max(d)
