"""Relative translation error ε_z on controlled-translation sequences (paper §7.3).

For every pair of frames (i, j) of one sequence, with ground-truth displacement
δ = |d_j − d_i| (the sequence's ``displacement_mm``) and estimated displacement
δ̂ = |ẑ_j − ẑ_i| (ẑ: the z of the board in the camera frame, i.e. ``cam_from_world`` t_z; or the
norm of the translation difference with ``axis="norm"``):

    ε(i, j) = |δ − δ̂| / δ              (paper eq. of ε_z, as a percentage)

ε_z(δ) is the mean over all pairs with the same δ (paper: "all pairs grouped by ground-truth
displacement"); the report gives each group's mean ± std and count, the mean ± std over all
pairs, and the consecutive-frame ("per step") errors of the reference's legacy app.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from plenocal.errors import DataError
from plenocal.model.geometry import Pose


@dataclass(frozen=True)
class TranslationErrors:
    """ε_z results; percentages."""

    groups: dict[float, tuple[float, float, int]]
    """δ (mm) → (mean %, std %, number of pairs)."""
    mean_percent: float
    std_percent: float
    n_pairs: int
    steps: list[dict[str, float]]
    """Consecutive pairs: sequence, frames, δ, δ̂, ε (%)."""
    repeated: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """Frames of one sequence declared at the same position: each such pair has no displacement
    to compare and is left out (sequence, frames, displacement_mm)."""

    @property
    def scale(self) -> float:
        """Median over pairs of δ̂/δ: 1 for a right camera and right units."""
        r = [s["estimated_mm"] / s["displacement_mm"] for s in self.steps if s["displacement_mm"] > 0]
        return float(np.median(r)) if r else float("nan")

    def unit_hint(self) -> str | None:
        """A sentence when the estimated steps are off the declared ones by a unit factor
        (:data:`UNIT_FACTORS`, within :data:`UNIT_FACTOR_TOLERANCE`), e.g. displacements in cm."""
        r = self.scale
        if not np.isfinite(r) or abs(r - 1.0) <= UNIT_FACTOR_TOLERANCE:
            return None
        for factor, what in UNIT_FACTORS:
            if abs(r / factor - 1.0) <= UNIT_FACTOR_TOLERANCE:
                return (f"the estimated steps are {r:.3g}× the declared displacement_mm: the displacements look "
                        f"{what} (the manifest's displacement_mm is in mm)")
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "epsilon_z_percent": {"mean": self.mean_percent, "std": self.std_percent, "n_pairs": self.n_pairs},
            "by_displacement": [
                {"displacement_mm": d, "mean_percent": m, "std_percent": s, "n_pairs": n}
                for d, (m, s, n) in sorted(self.groups.items())
            ],
            "per_step": self.steps,
            "estimated_over_declared": self.scale,
            "repeated_positions": self.repeated,
            "unit_hint": self.unit_hint(),
        }


UNIT_FACTORS = ((10.0, "given in cm"), (0.1, "given in tenths of a mm, or the steps in cm"), (25.4, "given in inches"),
                (1.0 / 25.4, "given in mm where inches were meant"), (1000.0, "given in metres"))
"""Factors between the estimated and declared steps that a unit mistake makes, and which."""
UNIT_FACTOR_TOLERANCE = 0.15
"""|δ̂/δ ÷ factor − 1| within which the median ratio is taken for that unit mistake (a camera
off by 15 % in scale is broken anyway; the factors above are ≥ 10 apart)."""


MIN_FEATURES_WITH_BLUR = 6
"""A translation frame with fewer BAP features that carry a blur radius ρ (a corner seen in two or
more micro-images) is left out of ε_z: its depth rests on the perspective of a few single views
alone, which does not determine it. The Tessar R12-A render's frame at 385 mm, near the MLA's
conjugate: six single views, pose fits from its own start and from the truth ending 12 mm apart
(368.4 and 380.8 mm, truth 385) with a Jacobian σ of t_z of 0.15 mm; its 20 mm step came out 3.3 mm
and ε_z 5.6 % over the sequence instead of ~0.5 %."""


def frames_without_depth(rho: np.ndarray, frame: np.ndarray, frames: list[int], *,
                         minimum: int = MIN_FEATURES_WITH_BLUR) -> list[int]:
    """The ``frames`` with fewer than ``minimum`` features whose ρ is finite (:data:`MIN_FEATURES_WITH_BLUR`)."""
    counts = {int(f): int(n) for f, n in zip(*np.unique(frame[np.isfinite(rho)], return_counts=True), strict=True)}
    return [f for f in frames if counts.get(int(f), 0) < minimum]


def _position(pose: Pose, axis: str) -> np.ndarray:
    return pose.translation if axis == "norm" else pose.translation[2:3]


def translation_errors(
    poses: Mapping[int, Pose],
    displacement_mm: Mapping[int, float],
    sequence: Mapping[int, int] | None = None,
    *,
    axis: str = "z",
    decimals: int = 6,
) -> TranslationErrors:
    """ε_z of estimated poses against ground-truth displacements (paper §7.3).

    Parameters
    ----------
    poses : mapping frame → cam_from_world Pose
        Estimated poses (frames without a pose are ignored).
    displacement_mm : mapping frame → float
        Ground-truth position along the motion, relative to the sequence's first frame, mm.
    sequence : mapping frame → int, optional
        Sequence of each frame (default: one sequence).
    axis : {"z", "norm"}
        Estimated displacement from t_z (paper) or from the norm of the translation difference.
    decimals : int
        Ground-truth displacements are grouped after rounding to this many decimals (mm).

    Returns
    -------
    TranslationErrors
    """
    if axis not in ("z", "norm"):
        raise ValueError(f"axis must be 'z' or 'norm', got {axis!r}")
    frames = sorted(f for f in displacement_mm if f in poses)
    seq = {f: (sequence[f] if sequence is not None else 0) for f in frames}
    errs: list[float] = []
    deltas: list[float] = []
    steps: list[dict[str, float]] = []
    repeated: list[dict[str, Any]] = []
    for s in sorted(set(seq.values())):
        fr = sorted((f for f in frames if seq[f] == s), key=lambda f: displacement_mm[f])
        for a in range(len(fr)):
            for b in range(a + 1, len(fr)):
                i, j = fr[a], fr[b]
                delta = abs(displacement_mm[j] - displacement_mm[i])
                if round(delta, decimals) == 0:
                    repeated.append({"sequence": s, "frames": [i, j], "displacement_mm": displacement_mm[i]})
                    continue
                est = float(np.linalg.norm(_position(poses[j], axis) - _position(poses[i], axis)))
                e = 100.0 * abs(delta - est) / delta
                errs.append(e)
                deltas.append(round(delta, decimals))
                if b == a + 1:
                    steps.append({"sequence": s, "frame_i": i, "frame_j": j, "displacement_mm": delta,
                                  "estimated_mm": est, "error_percent": e})
    if not errs:
        raise DataError("no pair of translation frames with a pose and a non-zero displacement")
    e_arr, d_arr = np.asarray(errs), np.asarray(deltas)
    groups = {
        float(d): (float(e_arr[d_arr == d].mean()), float(e_arr[d_arr == d].std()), int(np.sum(d_arr == d)))
        for d in np.unique(d_arr)
    }
    return TranslationErrors(groups, float(e_arr.mean()), float(e_arr.std()), int(e_arr.size), steps, repeated)


__all__ = ["MIN_FEATURES_WITH_BLUR", "TranslationErrors", "frames_without_depth", "translation_errors"]
