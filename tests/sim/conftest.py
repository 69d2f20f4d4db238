"""Shared simulator fixtures: small presets (central crops, same optics)."""

from __future__ import annotations

from pathlib import Path

import pytest

from plenocal.sim.presets import preset

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    """Skip this folder's @pytest.mark.slow (full-scale) tests unless run with ``-m slow``."""
    if "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="slow: full-scale, run with `pytest -m slow`")
    for item in items:
        if "slow" in item.keywords and _HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def r12a_small():
    return preset("r12-a", small=True)
