"""Checkerboard poses for simulated datasets (paper §6.3–6.4, Table datasets).

- free-hand frames: random valid poses, rejection-sampled from a seeded generator;
- controlled translation: the board facing the camera, moved along the optical axis.

A pose is valid when the whole pattern of squares lies in front of the camera and
inside the image (its corners' central projections from O, one micro-image pitch inside the
border), and every node is seen in at least ``min_views`` micro-images (model check).
"""

from __future__ import annotations

import math

import numpy as np

from plenocal.errors import DataError
from plenocal.model.camera import PlenopticCamera
from plenocal.model.geometry import Pose, rodrigues
from plenocal.model.target import Checkerboard
from plenocal.sim.groundtruth import FeatureOracle


def board_centre(board: Checkerboard) -> np.ndarray:
    """Centre of the node grid in the world frame, shape (3,)."""
    return np.array([(board.columns - 1) * board.square_mm / 2.0, (board.rows - 1) * board.square_mm / 2.0, 0.0])


def board_outline(board: Checkerboard) -> np.ndarray:
    """Corners of the printed squares (without the white margin), world frame, shape (4, 3)."""
    e = board.square_mm
    x1 = board.square_mm * board.columns
    y1 = board.square_mm * board.rows
    return np.array([[-e, -e, 0.0], [x1, -e, 0.0], [x1, y1, 0.0], [-e, y1, 0.0]])


def _on_image(
    camera: PlenopticCamera, points_cam: np.ndarray, margin_px: float, image_radius_px: float | None = None
) -> bool:
    """Central projection from O onto the sensor plane, inside the image with a margin (and
    within ``image_radius_px`` of the principal point when given)."""
    z = points_cam[:, 2]
    if np.any(z <= camera.main_lens.focal_length_mm * 1.05):
        return False
    s = camera.sensor.pixel_size_mm
    u0, v0 = camera.sensor.principal_point_px
    scale = camera.sensor.distance_mm / (z * s)
    u = u0 + points_cam[:, 0] * scale
    v = v0 + points_cam[:, 1] * scale
    W, H = camera.sensor.width_px, camera.sensor.height_px
    inside = (u >= margin_px) & (u <= W - 1 - margin_px) & (v >= margin_px) & (v <= H - 1 - margin_px)
    if image_radius_px is not None:
        inside &= np.hypot(u - u0, v - v0) <= image_radius_px
    return bool(np.all(inside))


def is_valid_pose(
    camera: PlenopticCamera, board: Checkerboard, cam_from_world: Pose, oracle: FeatureOracle, *, min_views: int = 2,
    image_radius_px: float | None = None, min_node_fraction: float = 1.0,
) -> bool:
    """Whole board visible (within ``image_radius_px`` of the principal point when given: a real
    lens's lit image circle) and every node seen in >= ``min_views`` micro-images; with
    ``min_node_fraction`` < 1, a partial view: the board's centre on the image and at least that
    fraction of its nodes seen so."""
    views = oracle.views_per_node(board, cam_from_world)
    if min_node_fraction < 1.0:
        centre = cam_from_world.apply(board_centre(board)[None])
        return (_on_image(camera, centre, camera.grid.diameter_px, image_radius_px)
                and float(np.mean(views >= min_views)) >= min_node_fraction)
    outline = cam_from_world.apply(board_outline(board))
    if not _on_image(camera, outline, camera.grid.diameter_px, image_radius_px):
        return False
    return bool(np.all(views >= min_views))


def random_poses(
    camera: PlenopticCamera,
    board: Checkerboard,
    n: int,
    *,
    distance_range_mm: tuple[float, float],
    max_tilt_rad: float = math.radians(30.0),
    max_roll_rad: float = math.radians(15.0),
    rng: np.random.Generator,
    oracle: FeatureOracle | None = None,
    min_views: int = 2,
    max_attempts: int = 20000,
    image_radius_px: float | None = None,
    min_node_fraction: float = 1.0,
) -> list[Pose]:
    """``n`` random valid ``cam_from_world`` poses.

    The board centre's depth is uniform in ``distance_range_mm``; the board normal is tilted
    from the optical axis by an angle uniform in [0, max_tilt] about a random in-plane axis, and
    rolled by up to ``max_roll`` about its normal; its centre is placed uniformly where the
    board's outline stays on the image (and within ``image_radius_px`` of the principal point,
    when given), or with ``min_node_fraction`` < 1 where that fraction of its nodes is seen
    (:func:`is_valid_pose`).

    Raises
    ------
    DataError
        When fewer than ``n`` valid poses are found in ``max_attempts`` draws.
    """
    oracle = FeatureOracle(camera) if oracle is None else oracle
    centre = board_centre(board)
    s = camera.sensor.pixel_size_mm
    u0, v0 = camera.sensor.principal_point_px
    W, H = camera.sensor.width_px, camera.sensor.height_px
    poses: list[Pose] = []
    for _ in range(max_attempts):
        if len(poses) == n:
            break
        z = rng.uniform(*distance_range_mm)
        phi = rng.uniform(0.0, 2.0 * np.pi)
        tilt = rng.uniform(0.0, max_tilt_rad)
        roll = rng.uniform(-max_roll_rad, max_roll_rad)
        R = rodrigues(tilt * np.array([np.cos(phi), np.sin(phi), 0.0])) @ rodrigues([0.0, 0.0, roll])
        # Lateral position of the board centre: uniform over the image's footprint at depth z.
        k = z * s / camera.sensor.distance_mm
        x = rng.uniform((0 - u0) * k, (W - 1 - u0) * k)
        y = rng.uniform((0 - v0) * k, (H - 1 - v0) * k)
        pose = Pose(R, np.array([x, y, z]) - R @ centre)
        if is_valid_pose(camera, board, pose, oracle, min_views=min_views, image_radius_px=image_radius_px,
                         min_node_fraction=min_node_fraction):
            poses.append(pose)
    if len(poses) < n:
        raise DataError(
            f"found only {len(poses)} of {n} valid board poses in {max_attempts} draws "
            f"(distances {distance_range_mm} mm); widen the range or shrink the board"
        )
    return poses


def translation_poses(board: Checkerboard, distances_mm: tuple[float, ...], *, camera: PlenopticCamera) -> list[Pose]:
    """The board facing the camera (R = I), its centre on the line of sight of the image centre,
    at each distance along the optical axis (paper's linear motion table)."""
    centre = board_centre(board)
    s = camera.sensor.pixel_size_mm
    u0, v0 = camera.sensor.principal_point_px
    W, H = camera.sensor.width_px, camera.sensor.height_px
    du, dv = (W - 1) / 2.0 - u0, (H - 1) / 2.0 - v0
    # Fixed lateral offset (the motion is along z only): aim at the image centre at the first
    # distance.
    z0 = distances_mm[0]
    k0 = z0 * s / camera.sensor.distance_mm
    x, y = du * k0, dv * k0
    return [Pose(np.eye(3), np.array([x, y, z]) - centre) for z in distances_mm]
