"""Shared simulator fixtures: small presets (central crops, same optics)."""

from __future__ import annotations

import pytest

from plenocal.sim.presets import preset


@pytest.fixture(scope="session")
def r12a_small():
    return preset("r12-a", small=True)
