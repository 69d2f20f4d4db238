"""Shared fixtures: the reference's R12-A configuration files (../shared/fixtures)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
R12A_DIR = (ROOT / ".." / "shared" / "fixtures" / "libpleno-r12a-configs").resolve()


@pytest.fixture(scope="session")
def r12a_dir() -> Path:
    if not R12A_DIR.is_dir():
        pytest.fail(f"reference fixtures not found at {R12A_DIR} (shared/ must sit beside the repo)")
    return R12A_DIR


@pytest.fixture(scope="session")
def r12a_camera(r12a_dir: Path):
    from plenocal.io.libpleno import camera_from_intrinsics

    return camera_from_intrinsics(r12a_dir / "intrinsics.js")


@pytest.fixture(scope="session")
def r12a_poses(r12a_dir: Path):
    from plenocal.io.libpleno import read_poses

    return read_poses(r12a_dir / "poses.js")


@pytest.fixture(scope="session")
def r12a_board(r12a_dir: Path):
    from plenocal.io.libpleno import read_scene

    return read_scene(r12a_dir / "scene.js")


@pytest.fixture(scope="session")
def r12a_params(r12a_dir: Path):
    from plenocal.io.libpleno import read_params

    return read_params(r12a_dir / "params.js")
