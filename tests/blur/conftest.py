"""Ray-traced checkerboard frames of the small R12-A preset with their true BAP features."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.model.observations import BapFeatures
from plenocal.sim.groundtruth import FeatureOracle
from plenocal.sim.poses import random_poses
from plenocal.sim.presets import preset
from plenocal.sim.scene import CheckerboardPlate, Scene, WhiteDiffuser
from plenocal.sim.tracer import build_optics, render

N_FRAMES = 8
RAYS = 64
KAPPA_RANGE_MM = (280.0, 400.0)
"""The far part of the preset's 175–400 mm, where its micro-images' blur radius |ρ| stays ≲ 3.8 px
and the 9 px windows of ``calibrate_kappa`` hold the blur (paper §5.3). Nearer (|ρ| 4.2 px at
225 mm) the window truncates it and κ grows with |ρ|: per frame 0.64 at 320–335 mm, 0.78 at
225–228 mm, κ 0.75 over frames at 225–335 mm (0.58 with 13 px windows, no trend; 2026-11-27).
Before that date the simulator's poses lay beyond ~280 mm whatever the range."""


@pytest.fixture(scope="session")
def traced_r12a():
    """(camera, devignetted images by frame, true features) for 8 free-hand frames."""
    p = preset("r12-a", small=True)
    camera = p.camera
    oracle = FeatureOracle(camera)
    poses = random_poses(camera, p.plan.board, N_FRAMES, distance_range_mm=KAPPA_RANGE_MM,
                         rng=np.random.default_rng(1), oracle=oracle)
    optics = build_optics(camera)
    white = render(camera, WhiteDiffuser(), rays=256, seed=0, image_id=999, optics=optics)
    images, feats = {}, []
    for frame, pose in enumerate(poses):
        img = render(camera, Scene((CheckerboardPlate(p.plan.board, pose),), background=0.3), rays=RAYS, seed=0,
                     image_id=frame, optics=optics)
        images[frame] = np.where(white > 0.02, img / np.maximum(white, 1e-9), 0.0)
        feats.append(oracle.board_features(p.plan.board, pose, frame=frame))
    return camera, images, BapFeatures.concatenate(feats)
