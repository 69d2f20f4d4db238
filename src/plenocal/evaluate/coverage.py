"""Where the observations put the calibration on data: each feature's depth (paper §2.4, §4.1).

A feature observes a checkerboard node; with the calibrated camera and its frame's pose, that node
has an object distance (its camera-frame z) and a virtual depth υ = −a/d (a: the signed distance
of its virtual image from the MLA plane, :func:`plenocal.model.projection.depth_in_mla`). Their
spread per micro-lens type, against the types' focus planes and depths of field, shows where the
calibration is supported by observations and where it extrapolates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from plenocal.errors import DataError
from plenocal.model.camera import PlenopticCamera
from plenocal.model.geometry import Pose
from plenocal.model.observations import BapFeatures
from plenocal.model.profile import virtual_depth
from plenocal.model.projection import depth_in_mla, virtual_points
from plenocal.model.target import Checkerboard

FloatArray = NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class FeatureDepths:
    """Per feature (in the order of the features given): object distance (mm) and virtual depth."""

    object_mm: FloatArray
    virtual_depth: FloatArray


def feature_depths(camera: PlenopticCamera, poses: dict[int, Pose], board: Checkerboard,
                   features: BapFeatures) -> FeatureDepths:
    """Object distance and virtual depth of the node each feature observes.

    Parameters
    ----------
    camera : PlenopticCamera
    poses : dict[int, Pose]
        ``cam_from_world`` of every frame of ``features``.
    board : Checkerboard
    features : BapFeatures
        Linked features (``node >= 0``).

    Returns
    -------
    FeatureDepths
        Arrays of shape (N,): camera-frame z (mm) and υ = −a/d.
    """
    if np.any(features.node < 0):
        raise DataError("feature depths need linked features (node >= 0)")
    missing = sorted(set(np.unique(features.frame).tolist()) - set(poses))
    if missing:
        raise DataError(f"no pose for frame(s) {missing}")
    frames = sorted(poses)
    R = np.stack([poses[f].rotation for f in frames])
    t = np.stack([poses[f].translation for f in frames])
    idx = np.searchsorted(np.asarray(frames), features.frame)
    p_cam = np.einsum("nij,nj->ni", R[idx], board.node_points(features.node)) + t[idx]
    a = depth_in_mla(camera, virtual_points(camera, p_cam))
    return FeatureDepths(p_cam[:, 2].astype(np.float64), virtual_depth(camera, a))


__all__ = ["FeatureDepths", "feature_depths"]
