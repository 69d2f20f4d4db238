"""A rendered textured plate with exact truth, shared by the all-in-focus and per-pixel tests.

The small R12-A preset (1000 × 800 px), a fronto-parallel plate at 345 mm (``noise_plate.Z_MM``)
(υ ≈ 4.3) printed with band-limited noise (Gaussian-smoothed, σ 0.15 mm: about the all-in-focus
image's resolution there, a sample every |υ| sensor px of the central view ≈ 0.14 mm on the
plate), 32 rays per pixel, the white at the same f-number (64 rays); its depths estimated and
aggregated with the defaults.
"""

from __future__ import annotations

import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from noise_plate import KAPPA, PLATE_MM, RAYS, TEXEL_MM, TEXTURE_SIGMA_TEXELS, Z_MM

from plenocal.depth.matching import aggregate_virtual_depths, estimate_virtual_depths
from plenocal.detect.corners import devignette
from plenocal.model.geometry import Pose
from plenocal.sim.presets import preset
from plenocal.sim.scene import Scene, TexturePlate, WhiteDiffuser
from plenocal.sim.tracer import build_optics, render


@pytest.fixture(scope="session")
def noise_texture() -> np.ndarray:
    rng = np.random.default_rng(1)
    noise = cv2.GaussianBlur(rng.normal(size=(int(PLATE_MM[1] / TEXEL_MM), int(PLATE_MM[0] / TEXEL_MM))), (0, 0),
                             TEXTURE_SIGMA_TEXELS)
    return np.clip(0.5 + 0.2 * noise / noise.std(), 0.05, 1.0).astype(np.float32)


@pytest.fixture(scope="session")
def noise_plate(noise_texture):
    """(devignetted, weight, aggregated VirtualDepthMap) of the plate at :data:`Z_MM`."""
    cam = preset("r12-a", small=True).camera
    optics = build_optics(cam)
    white = render(cam, WhiteDiffuser(), rays=2 * RAYS, seed=0, image_id=999, optics=optics)
    pose = Pose(np.eye(3), np.array([-PLATE_MM[0] / 2, -PLATE_MM[1] / 2, Z_MM]))
    img = render(cam, Scene((TexturePlate(noise_texture, pose, *PLATE_MM),), background=0.3), rays=RAYS, seed=0,
                 image_id=7, optics=optics)
    dv, weight = devignette(img, white)
    vd = aggregate_virtual_depths(estimate_virtual_depths(dv, weight, cam, kappa=KAPPA), cam)
    return dv, weight, vd
