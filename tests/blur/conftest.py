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


@pytest.fixture(scope="session")
def traced_r12a(kappa_range_mm):
    """(camera, devignetted images by frame, true features) for 8 free-hand frames."""
    p = preset("r12-a", small=True)
    camera = p.camera
    oracle = FeatureOracle(camera)
    poses = random_poses(camera, p.plan.board, N_FRAMES, distance_range_mm=kappa_range_mm,
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
