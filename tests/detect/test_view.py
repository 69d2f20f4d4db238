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
