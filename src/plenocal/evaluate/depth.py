"""Depth against what is known of the scene (beyond the paper; issue "metric depth").

Two measures of the point clouds of ``plenocal depth`` (camera frame, mm):

- **Distance to the board plane** of every point whose foot on the plane falls on the printed board
  (the inner corners' extent plus one square on every side), the plane given by the frame's pose
  (re-estimated from its BAP features with the intrinsics fixed, as the held-out evaluation does):
  signed and absolute, relative to the point's depth.
- **Coverage of the board**: the fraction of the micro-images whose line of sight meets the board
  that got a depth (:func:`board_coverage`).
- **Displacements** (translation frames, the reference's protocol): each frame's board depth (the
  median z of its on-board points) against the known displacement of every pair of frames of a
  sequence, as the error of the measured step in % of the true step, grouped by displacement.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from plenocal.model.camera import PlenopticCamera
from plenocal.model.geometry import Pose
from plenocal.model.lattice import lens_keys
from plenocal.model.target import Checkerboard

BOARD_MARGIN_SQUARES = 1.0
"""Points whose foot on the board plane lies within the inner corners' extent widened by this many
squares on every side count as on the board (the printed squares reach one square beyond the
outer inner corners)."""


def on_board(points_mm: NDArray[np.float64], pose: Pose, board: Checkerboard, *,
             margin_squares: float = BOARD_MARGIN_SQUARES,
             node_extent: tuple[int, int, int, int] | None = None) -> tuple[NDArray[np.bool_], NDArray[np.float64]]:
    """Which points (N, 3, camera frame) lie over the printed board, and their signed distance to
    its plane along its normal (mm; ``pose`` maps board to camera coordinates). ``node_extent``
    (first column, last column, first row, last row): the nodes to take for the board's extent
    instead of all of them (a frame linked with relative node ids,
    :meth:`plenocal.model.observations.Observations.node_extent`)."""
    local = pose.inverse().apply(points_mm)  # board frame
    return board.covers(local, margin_squares=margin_squares, node_extent=node_extent), local[:, 2]


def plane_errors(points_mm: NDArray[np.float64], pose: Pose, board: Checkerboard, *,
                 node_extent: tuple[int, int, int, int] | None = None) -> dict[str, float | int]:
    """Distance of the on-board points to the board plane, relative to their depth: median of the
    absolute and of the signed value (%), 90th percentile of the absolute, the fraction within 1 %,
    the board depth (median z, mm) and the number of points (``node_extent`` as :func:`on_board`'s)."""
    inside, dist = on_board(points_mm, pose, board, node_extent=node_extent)
    z = points_mm[inside, 2]
    rel = 100.0 * dist[inside] / np.where(z != 0, z, np.nan)
    if not inside.any():
        return {"n_points": 0}
    a = np.abs(rel)
    return {"n_points": int(inside.sum()), "board_depth_mm": float(np.median(z)),
            "median_abs_percent": float(np.nanmedian(a)), "median_signed_percent": float(np.nanmedian(rel)),
            "p90_abs_percent": float(np.nanpercentile(a, 90)), "within_1_percent": float(np.mean(a <= 1.0))}


def board_coverage(camera: PlenopticCamera, pose: Pose, board: Checkerboard, k: NDArray[np.int64],
                   l: NDArray[np.int64], *, node_extent: tuple[int, int, int, int] | None = None) -> dict[str, float | int]:
    """How much of the board got a depth: of the micro-images whose line of sight meets the printed
    board (:func:`plenocal.depth.scaling.board_virtual_depths`, the inner corners' extent and
    :data:`BOARD_MARGIN_SQUARES` more), the fraction with a point (``k``, ``l`` of the point cloud).
    Untextured micro-images (inside a square) count as not covered: this is the board's coverage,
    not the textured micro-images' of ``benchmarks/depth.py``. ``node_extent`` as :func:`on_board`'s."""
    from plenocal.depth.scaling import board_virtual_depths

    k_all, l_all = camera.grid.lattice.all_indices()
    seen, _ = board_virtual_depths(camera, k_all, l_all, pose, board, margin_squares=BOARD_MARGIN_SQUARES,
                                   node_extent=node_extent)
    have = np.isin(lens_keys(k_all[seen], l_all[seen]), lens_keys(k, l))
    return {"board_micro_images": int(seen.sum()), "board_coverage": float(have.mean()) if seen.any() else 0.0}


NO_BOARD_DEPTH = ("none: the board lies where no micro-image can measure a depth (virtual depth |υ| < 2, near the "
                  "plane conjugate to the MLA); left out of the displacements")


def measured_board_depth(frame: Mapping[str, Any]) -> tuple[float | None, str | None]:
    """A frame's board depth for the displacements (its record's ``board_depth_mm``) and why there
    is none: (None, :data:`NO_BOARD_DEPTH`) when its whole board lies where the virtual depth is
    not estimable (``board_micro_images`` 0, :func:`board_coverage`): its points there are stray
    matches. The Tessar R12-A render's translation frames at 365 and 385 mm (277 and 109 such
    points, −2.5 % and −7.4 % off the plane) made the mean displacement error 13.3 % instead of
    1.15 %. (None, None) without points."""
    if frame.get("board_micro_images", 1) == 0:
        return None, NO_BOARD_DEPTH
    return (float(frame["board_depth_mm"]) if frame.get("n_points") else None), None


def displacement_errors(board_depth_mm: Mapping[int, float], displacement_mm: Mapping[int, float],
                        sequence: Mapping[int, int]) -> dict[str, object]:
    """Per pair of frames of one sequence: the measured step (difference of board depths) against
    the true one, error in % of the true step; grouped by true displacement (mean, std, n)."""
    pairs = []
    for a, b in itertools.combinations(sorted(board_depth_mm), 2):
        if sequence.get(a) != sequence.get(b):
            continue
        true = abs(displacement_mm[b] - displacement_mm[a])
        if true <= 0:
            continue
        measured = abs(board_depth_mm[b] - board_depth_mm[a])
        pairs.append({"frames": [a, b], "true_mm": true, "measured_mm": measured,
                      "error_percent": 100.0 * (measured - true) / true})
    groups: dict[float, list[float]] = {}
    for p in pairs:
        groups.setdefault(round(float(p["true_mm"]), 6), []).append(float(p["error_percent"]))
    by = [{"displacement_mm": k, "mean_abs_percent": float(np.mean(np.abs(v))), "std_percent": float(np.std(v)),
           "n_pairs": len(v)} for k, v in sorted(groups.items())]
    errs = np.array([p["error_percent"] for p in pairs], dtype=float)
    return {"pairs": pairs, "by_displacement": by,
            "mean_abs_percent": float(np.mean(np.abs(errs))) if len(errs) else None, "n_pairs": len(pairs)}
