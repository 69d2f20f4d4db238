"""Fixtures of the calibration tests: synthetic observations of the R12-A fixture geometry."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config, items):
    """Skip @pytest.mark.slow tests unless they are selected with ``-m slow``."""
    if "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="slow: run with `pytest -m slow`")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def r12a_synthetic(r12a_truth, r12a_poses, r12a_board):
    """(noisy, truth) observations, seed 1 (noise 0.3 / 0.05 / 0.1 px)."""
    from plenocal.calib.synthetic import synthetic_observations

    return synthetic_observations(r12a_truth, r12a_poses, r12a_board, seed=1)


@pytest.fixture(scope="session")
def r12a_calibration(r12a_camera, r12a_board, r12a_synthetic):
    """Calibration from the ±3 % / ±50 px perturbed camera, default options."""
    from plenocal.calib.calibrate import calibrate
    from plenocal.calib.synthetic import perturbed_camera

    noisy, _ = r12a_synthetic
    return calibrate(noisy, perturbed_camera(r12a_camera, seed=1), r12a_board)
