"""Held-out evaluation: intrinsics fixed, each frame's pose re-estimated on (u, v, ρ) (reference §9.1).

For every held-out frame: the pose is initialised from its cluster barycentres (PnP with the
*calibrated* camera, :mod:`plenocal.calib.extrinsics`), refined from triangulated virtual points,
then optimised alone on the (u, v, ρ) residuals with the intrinsics fixed (no MIC term). The
RMSEs per term, per frame and per lens type come from :mod:`plenocal.evaluate.metrics` with M = 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from plenocal.calib.extrinsics import ExtrinsicsInit, initial_extrinsics, plenoptic_poses
from plenocal.calib.parameters import ParameterLayout
from plenocal.calib.residuals import Residuals
from plenocal.calib.solver import SolverReport, levenberg_marquardt
from plenocal.errors import DataError
from plenocal.evaluate.metrics import EvaluationReport, evaluate_observations
from plenocal.model.camera import PlenopticCamera
from plenocal.model.geometry import Pose
from plenocal.model.observations import MicroImageCentres, Observations
from plenocal.model.target import Checkerboard


@dataclass
class HoldoutResult:
    """Re-estimated poses, RMSEs and what could not be evaluated."""

    poses: dict[int, Pose]
    evaluation: EvaluationReport
    extrinsics: ExtrinsicsInit
    solver: SolverReport

    def to_json(self) -> dict[str, Any]:
        out = self.evaluation.to_json()
        out["frames_evaluated"] = sorted(self.poses)
        out["frames_failed"] = [
            {"frame": f.frame, "reason": f.reason} for f in self.extrinsics.frames if not f.ok
        ]
        out["solver"] = self.solver.to_dict()
        return out


def evaluate_holdout(
    camera: PlenopticCamera,
    observations: Observations,
    board: Checkerboard,
    *,
    frames: list[int] | None = None,
) -> HoldoutResult:
    """Re-estimate the pose of each held-out frame with the intrinsics fixed; RMSEs (ref. §9.1).

    Parameters
    ----------
    camera : PlenopticCamera
        The calibrated camera (not modified).
    observations : Observations
        BAP features of the held-out frames (linked or with cluster ids); MICs are ignored.
    board : Checkerboard
    frames : list of int, optional
        Frames to evaluate (default: all frames of the features).

    Returns
    -------
    HoldoutResult
    """
    bap = observations.bap
    if frames is not None:
        bap = bap.select(np.isin(bap.frame, np.asarray(frames)))
    if len(bap) == 0:
        raise DataError("no BAP features in the held-out frames")
    with threadpool_limits(limits=1, user_api="blas"):
        ext = initial_extrinsics(camera, bap, board)
        if not ext.poses:
            raise DataError("no held-out frame could be initialised")
        assert ext.bap is not None
        linked = ext.bap.select(np.isin(ext.bap.frame, np.array(sorted(ext.poses))) & (ext.bap.node >= 0))
        poses0 = plenoptic_poses(camera, linked, board, ext.poses)
        layout = ParameterLayout(camera, tuple(sorted(poses0)), frozen=frozenset({"intrinsics"}))
        res = Residuals(layout, linked, MicroImageCentres.empty(), board)
        x0 = layout.pack(camera, poses0)
        # Plain least squares (reference §9.1); each pose is independent (block-diagonal system).
        sig = {"uv": 1.0, "rho": 1.0, "mic": 1.0}
        x, rep = levenberg_marquardt(res, x0, sigma=sig, loss="linear", ftol=1e-12)
        poses = layout.unpack_poses(x)
    report = evaluate_observations(camera, poses, board, Observations(linked, MicroImageCentres.empty()))
    return HoldoutResult(poses, report, ext, rep)


__all__ = ["HoldoutResult", "evaluate_holdout"]
