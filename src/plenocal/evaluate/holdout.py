"""Held-out evaluation: intrinsics fixed, each frame's pose re-estimated on (u, v, ρ) (reference §9.1).

For every held-out frame: the pose is initialised from its cluster barycentres (PnP with the
*calibrated* camera, :mod:`plenocal.calib.extrinsics`), refined from triangulated virtual points,
then optimised alone on the (u, v, ρ) residuals with the intrinsics fixed (no MIC term). The
RMSEs per term, per frame and per lens type come from :mod:`plenocal.evaluate.metrics` with M = 0.

Held-out frames were not part of the calibration, so calibration's rejections do not cover them:
they get their own robust rule (:data:`HOLDOUT_RULE`). After the plain least-squares pose fit,
the χ² rule of :mod:`plenocal.evaluate.outliers` is applied with σ̂_t = 1.4826·median |e| of the
held-out residuals themselves, frame by frame, never below the σ̂ pooled over all held-out frames
(u and v pooled). Not calibration's σ: a camera that fits held-out data worse raises σ̂ and is
*seen* in the RMSE rather than hidden by rejections. Frame by frame: ρ's noise grows with the
distance from the focus planes (0.003 px to 0.04 px RMS along the demo's translation sequence),
and against a pooled σ̂ the far frames' ρ would all be "outliers". The poses are re-fitted on
the kept features and the rule applied again, until the kept set no longer changes (at most
:data:`HOLDOUT_MAX_ROUNDS` fits).
When the rule would reject more than :data:`HOLDOUT_MAX_REJECTED_FRACTION` of the features it
rejects nothing and says so: that many are not outliers, the camera does not fit the frames.
A gross outlier (a corner linked to the wrong node) is then rejected, listed, and kept out of
the headline RMSE; its pull on its frame's pose is removed by the re-fit.
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
from plenocal.evaluate.metrics import EvaluationReport, compute_residuals, summarize_split
from plenocal.evaluate.outliers import DEFAULT_REJECT_PROBABILITY, split_outliers
from plenocal.model.camera import PlenopticCamera
from plenocal.model.geometry import Pose
from plenocal.model.observations import BapFeatures, MicroImageCentres, Observations
from plenocal.model.target import Checkerboard

HOLDOUT_MAX_ROUNDS = 5
"""Pose fits of the held-out rule at most (the first on every feature)."""

HOLDOUT_MIN_FEATURES = 6
"""A frame left with fewer kept features keeps its previous pose (a pose has 6 unknowns)."""

HOLDOUT_MAX_REJECTED_FRACTION = 0.2
"""Beyond this fraction of held-out features the rule is suspended: they are not outliers."""

HOLDOUT_RULE = ("held-out rule: calibration's χ² rule with σ̂_t = 1.4826·median|e| of the held-out residuals, "
                "frame by frame, at least the σ̂ of all held-out frames (u and v pooled); poses re-fitted on the kept features "
                "until the kept set no longer changes; suspended (nothing rejected) if it would reject more than "
                f"{HOLDOUT_MAX_REJECTED_FRACTION:.0%} of them")


@dataclass
class HoldoutResult:
    """Re-estimated poses, RMSEs (kept features) and what was rejected or could not be evaluated."""

    poses: dict[int, Pose]
    evaluation: EvaluationReport
    extrinsics: ExtrinsicsInit
    solver: SolverReport
    rounds: int = 1

    def to_json(self) -> dict[str, Any]:
        out = self.evaluation.to_json()
        out["frames_evaluated"] = sorted(self.poses)
        out["frames_failed"] = [
            {"frame": f.frame, "reason": f.reason} for f in self.extrinsics.frames if not f.ok
        ]
        out["solver"] = self.solver.to_dict()
        out["pose_fits"] = self.rounds
        return out


def _counts(frames: np.ndarray) -> dict[int, int]:
    f, n = np.unique(frames, return_counts=True)
    return {int(a): int(b) for a, b in zip(f, n, strict=True)}


def _fit_poses(camera: PlenopticCamera, features: BapFeatures, board: Checkerboard,
               poses: dict[int, Pose]) -> tuple[dict[int, Pose], SolverReport]:
    """Each pose alone on (u, v, ρ) with the intrinsics fixed, plain least squares (reference §9.1)."""
    layout = ParameterLayout(camera, tuple(sorted(poses)), frozen=frozenset({"intrinsics"}))
    res = Residuals(layout, features, MicroImageCentres.empty(), board)
    x0 = layout.pack(camera, poses)
    sig = {"uv": 1.0, "rho": 1.0, "mic": 1.0}  # each pose is independent (block-diagonal system)
    x, rep = levenberg_marquardt(res, x0, sigma=sig, loss="linear", ftol=1e-12)
    return layout.unpack_poses(x), rep


def evaluate_holdout(
    camera: PlenopticCamera,
    observations: Observations,
    board: Checkerboard,
    *,
    frames: list[int] | None = None,
    reject_probability: float | None = DEFAULT_REJECT_PROBABILITY,
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
    reject_probability : float or None
        p of the held-out rule (module docstring); None keeps every feature (one plain fit).

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
        poses = plenoptic_poses(camera, linked, board, ext.poses)
        held = Observations(linked, MicroImageCentres.empty())
        keep = np.ones(len(linked), dtype=bool)
        total = _counts(linked.frame)
        poses, rep = _fit_poses(camera, linked, board, poses)
        for rounds in range(1, HOLDOUT_MAX_ROUNDS + 1):
            if rounds > 1:  # re-fit on the kept features, unless a frame has too few left
                kept = linked.select(keep)
                counts = _counts(kept.frame)
                fit = {f: p for f, p in poses.items()
                       if counts.get(f, 0) >= min(HOLDOUT_MIN_FEATURES, total.get(f, 0)) and counts.get(f, 0) > 0}
                if fit:
                    refit, rep = _fit_poses(camera, kept.select(np.isin(kept.frame, list(fit))), board, fit)
                    poses = poses | refit
            res = compute_residuals(camera, poses, board, held)
            split = split_outliers(res, probability=reject_probability, per_frame=True,
                                   max_rejected_fraction=HOLDOUT_MAX_REJECTED_FRACTION)
            new_keep = np.ones(len(linked), dtype=bool)
            new_keep[res.bap_index[~split.keep_bap]] = False
            if np.array_equal(new_keep, keep):
                break
            keep = new_keep
    report = summarize_split(res, split, held, rule=HOLDOUT_RULE)
    return HoldoutResult(poses, report, ext, rep, rounds)


__all__ = ["HOLDOUT_RULE", "HoldoutResult", "evaluate_holdout"]
