"""The leave-one-frame-out jackknife: warm-started re-solves, the same whatever the parallelism."""

from __future__ import annotations

import multiprocessing

import numpy as np
import pytest

from plenocal.calib.parameters import ParameterLayout
from plenocal.calib.resampling import frame_jackknife, without_frame
from plenocal.calib.residuals import Residuals
from plenocal.calib.solver import levenberg_marquardt

SIGMA = {"uv": 0.3, "rho": 0.05, "mic": 0.1}


@pytest.fixture(scope="module")
def solved(r12a_camera, r12a_poses, r12a_board, r12a_synthetic):
    """Five frames and every 8th micro-image centre, solved from the truth."""
    noisy, _ = r12a_synthetic
    frames = tuple(sorted(r12a_poses))[:5]
    bap = noisy.bap.select(np.isin(noisy.bap.frame, frames))
    mic = noisy.mic.select(np.arange(len(noisy.mic)) % 8 == 0)
    layout = ParameterLayout(r12a_camera, frames, two_pitches=True)
    res = Residuals(layout, bap, mic, r12a_board)
    x0 = layout.pack(r12a_camera, {f: r12a_poses[f] for f in frames})
    x, rep = levenberg_marquardt(res, x0, sigma=SIGMA)
    assert rep.converged
    return res, x


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork start method")
def test_identical_for_any_number_of_workers(solved):
    res, x = solved
    active = np.ones(res.n_rows)
    one = frame_jackknife(res, x, sigma=SIGMA, active=active, workers=1)
    two = frame_jackknife(res, x, sigma=SIGMA, active=active, workers=2)
    assert one is not None and two is not None
    assert one.workers == 1 and two.workers == 2
    np.testing.assert_array_equal(one.estimates, two.estimates)
    np.testing.assert_array_equal(one.std, two.std)
    np.testing.assert_array_equal(one.iterations, two.iterations)
    assert one.derived_std == two.derived_std
    assert one.converged.all() and np.all(one.iterations > 0)


def test_estimates_are_the_leave_one_out_optima(solved):
    """Each estimate is the optimum without its frame: a re-solve from elsewhere lands on it."""
    res, x = solved
    active = np.ones(res.n_rows)
    jk = frame_jackknife(res, x, sigma=SIGMA, active=active, workers=1)
    assert jk is not None
    i = 2
    res_i, x_i, act_i = without_frame(res, x, active, i)
    start = x_i.copy()
    n = res.layout.n_intrinsics
    start[:n] += 0.5 * res.layout.scale[:n] * np.where(res.layout.free_mask[:n], 1.0, 0.0)
    xi, rep = levenberg_marquardt(res_i, start, sigma=SIGMA, active=act_i, ftol=1e-13)
    assert rep.converged
    np.testing.assert_allclose(jk.estimates[i], xi[:n], rtol=0, atol=1e-3 * np.max(res.layout.scale[:n]))
    z = np.abs(jk.estimates[i] - xi[:n]) / np.where(jk.std > 0, jk.std, np.inf)
    assert np.all(z < 1e-3)


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork start method")
def test_workers_end_quietly_under_a_raising_sigterm_handler(solved, capfd):
    """The CLI's SIGTERM handler raises; forked workers must not inherit it (nor print a
    traceback when the pool ends)."""
    import signal

    res, x = solved

    def raising(signum, frame):
        raise RuntimeError("terminated")

    previous = signal.signal(signal.SIGTERM, raising)
    try:
        jk = frame_jackknife(res, x, sigma=SIGMA, active=np.ones(res.n_rows), workers=2)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert jk is not None and jk.workers == 2
    assert capfd.readouterr().err == ""
