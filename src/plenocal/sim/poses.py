"""Checkerboard poses for simulated datasets (paper §6.3–6.4, Table datasets).

- free-hand frames: random valid poses from a seeded generator, their depths uniform over the
  plan's range (whole boards where they fit, partial views nearer);
- controlled translation: the board facing the camera, moved along the optical axis.

A whole view is valid when the whole pattern of squares lies in front of the camera and
inside the image (its corners' central projections from O, one micro-image pitch inside the
border), and every node is seen in at least ``min_views`` micro-images (model check); a partial
view, when the board's centre is on the image and a given fraction of its nodes is seen so.
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


def _inside_image(
    camera: PlenopticCamera, points_cam: np.ndarray, margin_px: float, image_radius_px: float | None = None
) -> np.ndarray:
    """(N,) bool: each point's central projection from O onto the sensor plane is inside the image
    with a margin (and within ``image_radius_px`` of the principal point when given), the point
    in front of the lens."""
    z = points_cam[:, 2]
    s = camera.sensor.pixel_size_mm
    u0, v0 = camera.sensor.principal_point_px
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = camera.sensor.distance_mm / (z * s)
        u = u0 + points_cam[:, 0] * scale
        v = v0 + points_cam[:, 1] * scale
    W, H = camera.sensor.width_px, camera.sensor.height_px
    inside = (z > camera.main_lens.focal_length_mm * 1.05) & (u >= margin_px) & (u <= W - 1 - margin_px) \
        & (v >= margin_px) & (v <= H - 1 - margin_px)
    if image_radius_px is not None:
        inside &= np.hypot(u - u0, v - v0) <= image_radius_px
    return inside


def _on_image(
    camera: PlenopticCamera, points_cam: np.ndarray, margin_px: float, image_radius_px: float | None = None
) -> bool:
    """Every point inside the image (:func:`_inside_image`)."""
    return bool(np.all(_inside_image(camera, points_cam, margin_px, image_radius_px)))


def is_valid_pose(
    camera: PlenopticCamera, board: Checkerboard, cam_from_world: Pose, oracle: FeatureOracle, *, min_views: int = 2,
    image_radius_px: float | None = None, min_node_fraction: float = 1.0,
) -> bool:
    """Whole board visible (within ``image_radius_px`` of the principal point when given: a real
    lens's lit image circle) and every node seen in >= ``min_views`` micro-images; with
    ``min_node_fraction`` < 1, a partial view: the board's centre on the image and at least that
    fraction of its nodes seen so (and within ``image_radius_px``, when given)."""
    views = oracle.views_per_node(board, cam_from_world)
    if min_node_fraction < 1.0:
        centre = cam_from_world.apply(board_centre(board)[None])
        lit = _inside_image(camera, cam_from_world.apply(board.node_points()), 0.0, image_radius_px)  # dark beyond the lit circle
        return (_on_image(camera, centre, camera.grid.diameter_px, image_radius_px)
                and float(np.mean((views >= min_views) & lit)) >= min_node_fraction)
    outline = cam_from_world.apply(board_outline(board))
    if not _on_image(camera, outline, camera.grid.diameter_px, image_radius_px):
        return False
    return bool(np.all(views >= min_views))


PLACEMENTS_PER_DEPTH = 64
"""Placements (orientation and lateral position) tried at each drawn depth for a view of the
whole board before the depth is given a partial view (:data:`NEAR_NODE_FRACTION`). Drawing a
depth, then one placement, and rejecting both together (the sampler before 2026-11-27) weights
each depth by the share of placements that keep the whole board on the image: on the full-scale
presets that share grows from 0 at the plan's near end to 13–63 % at its far end, so the
calibration frames of every render lay in the far part of the plan's range (seed 0: R12-A at
295–371 mm of 175–400, R12-C at 945–2 471 mm of 500–2 500; ``docs/simulator.md``). With 64
placements a depth where 1 % of them show the whole board still gets a whole view half the time."""
NEAR_NODE_FRACTION = 0.5
"""At a drawn depth where none of :data:`PLACEMENTS_PER_DEPTH` placements keeps the whole board on
the image (nearer, the board outgrows it), the frame is a partial view, as a user's near frames
are: the board's centre on the image and at least this fraction of its nodes seen in
``min_views`` micro-images or more (as the extrapolation frames of :mod:`plenocal.sim.dataset`).
Where the whole board fits the image but its nodes fall in fewer than ``min_views`` micro-images
(near the MLA's conjugate plane: at 378 mm of the R12-A crop 8.8 % of placements keep it on the
image, 1.8 % with every node in two), another depth is drawn, as before: partial views there gave
the 6-frame quick demo two frames of ~3 views per node, and a calibration that did not converge."""


def _draw_placement(camera: PlenopticCamera, board: Checkerboard, z: float, *, rng: np.random.Generator,
                    max_tilt_rad: float, max_roll_rad: float) -> Pose:
    """One placement of the board with its centre at depth ``z``: the normal tilted from the
    optical axis by an angle uniform in [0, max_tilt] about a random in-plane axis, rolled by up to
    ``max_roll`` about itself, the centre uniform over the image's footprint at that depth."""
    s = camera.sensor.pixel_size_mm
    u0, v0 = camera.sensor.principal_point_px
    W, H = camera.sensor.width_px, camera.sensor.height_px
    phi = rng.uniform(0.0, 2.0 * np.pi)
    tilt = rng.uniform(0.0, max_tilt_rad)
    roll = rng.uniform(-max_roll_rad, max_roll_rad)
    R = rodrigues(tilt * np.array([np.cos(phi), np.sin(phi), 0.0])) @ rodrigues([0.0, 0.0, roll])
    k = z * s / camera.sensor.distance_mm
    x = rng.uniform((0 - u0) * k, (W - 1 - u0) * k)
    y = rng.uniform((0 - v0) * k, (H - 1 - v0) * k)
    return Pose(R, np.array([x, y, z]) - R @ board_centre(board))


def _placement_at_depth(camera: PlenopticCamera, board: Checkerboard, z: float, oracle: FeatureOracle, *, tries: int,
                        rng: np.random.Generator, max_tilt_rad: float, max_roll_rad: float, min_views: int,
                        image_radius_px: float | None, min_node_fraction: float) -> tuple[Pose | None, int, bool]:
    """The first valid (:func:`is_valid_pose`) of up to ``tries`` placements at depth ``z``, or
    None; how many were drawn; and whether any of them had the whole board on the image (valid or
    not: its nodes may be seen in too few micro-images)."""
    fits = False
    for i in range(tries):
        pose = _draw_placement(camera, board, z, rng=rng, max_tilt_rad=max_tilt_rad, max_roll_rad=max_roll_rad)
        if min_node_fraction >= 1.0:
            if not _on_image(camera, pose.apply(board_outline(board)), camera.grid.diameter_px, image_radius_px):
                continue
            fits = True
        if is_valid_pose(camera, board, pose, oracle, min_views=min_views, image_radius_px=image_radius_px,
                         min_node_fraction=min_node_fraction):
            return pose, i + 1, True
    return None, tries, fits


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
    placements_per_depth: int = PLACEMENTS_PER_DEPTH,
    near_node_fraction: float | None = NEAR_NODE_FRACTION,
) -> list[Pose]:
    """``n`` random valid ``cam_from_world`` poses, their board centres' depths uniform in
    ``distance_range_mm``.

    For each drawn depth, up to ``placements_per_depth`` placements (:func:`_draw_placement`) are
    tried for a view of the whole board (within ``image_radius_px`` of the principal point, when
    given: a real lens's lit image circle); where none is found the depth gets a partial view
    (``near_node_fraction`` of the nodes seen, the board's centre on the image; None: the depth
    is drawn again). With ``min_node_fraction`` < 1 every placement may be a partial view with
    that fraction (:func:`is_valid_pose`).

    Raises
    ------
    DataError
        When fewer than ``n`` valid poses are found in ``max_attempts`` placements.
    """
    oracle = FeatureOracle(camera) if oracle is None else oracle
    fractions = [min_node_fraction]
    if min_node_fraction >= 1.0 and near_node_fraction is not None:
        fractions.append(near_node_fraction)
    poses: list[Pose] = []
    attempts = 0
    while len(poses) < n and attempts < max_attempts:
        z = rng.uniform(*distance_range_mm)
        for fraction in fractions:
            tries = min(placements_per_depth, max_attempts - attempts)
            pose, used, fits = _placement_at_depth(camera, board, z, oracle, tries=tries, rng=rng, max_tilt_rad=max_tilt_rad,
                                                   max_roll_rad=max_roll_rad, min_views=min_views,
                                                   image_radius_px=image_radius_px, min_node_fraction=fraction)
            attempts += used
            if pose is not None:
                poses.append(pose)
                break
            if fits:  # the board fits the image here, its nodes are seen too seldom (the MLA's conjugate): another depth
                break
    if len(poses) < n:
        raise DataError(
            f"found only {len(poses)} of {n} valid board poses in {max_attempts} placements "
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
