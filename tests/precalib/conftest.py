"""A small R12-like camera (44×35 micro-lenses, 1020×710 px) and its white images, rendered once."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from render import render_white
from small_r12 import small_r12_camera

from plenocal.model import PlenopticCamera

R12_F_NUMBERS = (4.0, 5.656854249, 8.0, 11.313708499, 16.0)


@pytest.fixture(scope="session")
def small_camera() -> PlenopticCamera:
    return small_r12_camera()


@pytest.fixture(scope="session")
def small_whites(small_camera):
    from plenocal.precalib.pipeline import WhiteImage

    return [
        WhiteImage(N, render_white(small_camera, N, noise=1.0, vignetting=0.3, hot_pixels=40, seed=i), f"white-{N:g}")
        for i, N in enumerate(R12_F_NUMBERS)
    ]
