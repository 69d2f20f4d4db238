"""Scenes for the ray tracer: textured planar plates, textured spheres, a point-like light, a white
diffuser; and the exact distance along any ray to the first surface it meets (:func:`first_hit`),
the depth truth of renders of such scenes.

Radiances are relative: 1.0 is the radiance of the white diffuser used for white images, so a
micro-image pixel fully lit through the main aperture by the diffuser has value 1.0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from plenocal.errors import ModelError
from plenocal.model.geometry import Pose
from plenocal.model.target import Checkerboard

# Plate kinds in the packed array (see :func:`pack_scene`).
KIND_CHECKERBOARD = 0
KIND_TEXTURE = 1
KIND_DISC = 2
KIND_SPHERE = 3
PLATE_FIELDS = 24


@dataclass(frozen=True)
class WhiteDiffuser:
    """A uniform diffuser in front of the main lens: every ray through the aperture has radiance
    ``level`` (white images, paper §3)."""

    level: float = 1.0


@dataclass(frozen=True, eq=False)
class CheckerboardPlate:
    """A printed checkerboard (``board``) seen at ``cam_from_world`` (world = the board frame).

    The printed area has ``columns + 1`` × ``rows + 1`` squares, from ``−square`` to
    ``square·columns`` in x (and likewise in y), so that node (0, 0) is the inner corner at the
    world origin; the top-left square is black. A white margin of ``board.border_mm`` surrounds
    it (``docs/conventions.md``, "Frames and poses").
    """

    board: Checkerboard
    cam_from_world: Pose
    black: float = 0.03
    white: float = 0.9


@dataclass(frozen=True, eq=False)
class TexturePlate:
    """Any texture image on a plate of ``width_mm`` × ``height_mm`` at ``cam_from_plate``.

    Texel (0, 0) covers the plate corner at the plate-frame origin; x runs along the texture's
    columns, y along its rows; texels are sampled bilinearly at their centres.

    Parameters
    ----------
    texture : ndarray, shape (h, w) or (h, w, 3)
        Radiances (float, 1.0 = the white diffuser).
    """

    texture: NDArray[np.floating]
    cam_from_plate: Pose
    width_mm: float
    height_mm: float


@dataclass(frozen=True, eq=False)
class TexturedSphere:
    """A sphere of ``radius_mm`` centred at ``cam_from_sphere``'s translation, its texture wrapped
    round it equirectangularly in the sphere frame: columns follow the longitude atan2(y, x) from
    −π to π, rows the colatitude acos(z / R) from 0 to π (bilinear at texel centres, clamped at the
    seam and the poles). It shares the scene's one texture image with the texture plates.

    Parameters
    ----------
    texture : ndarray, shape (h, w) or (h, w, 3)
        Radiances (float, 1.0 = the white diffuser).
    """

    texture: NDArray[np.floating]
    cam_from_sphere: Pose
    radius_mm: float


@dataclass(frozen=True)
class DiscLight:
    """A small uniform emitting disc facing the camera (normal along the optical axis).

    The ray tracer cannot hit a mathematical point; a disc of small ``radius_mm`` stands in for a
    point light at ``centre_mm`` (camera frame).
    """

    centre_mm: tuple[float, float, float]
    radius_mm: float
    level: float = 1.0


@dataclass(frozen=True)
class Scene:
    """Plates in front of the camera and the radiance of rays that hit none of them."""

    plates: tuple[CheckerboardPlate | TexturePlate | TexturedSphere | DiscLight, ...] = field(default_factory=tuple)
    background: float = 0.0


def _pose_fields(pose: Pose) -> list[float]:
    return [*pose.rotation.reshape(-1).tolist(), *pose.translation.tolist()]


def _texture_of(plate: TexturePlate | TexturedSphere) -> NDArray[np.float32]:
    tex = np.asarray(plate.texture, dtype=np.float32)
    if tex.ndim == 2:
        tex = tex[:, :, None]
    if tex.ndim != 3 or tex.shape[2] not in (1, 3):
        raise ModelError(f"texture must have shape (h, w) or (h, w, 3), got {tex.shape}")
    return tex


def pack_scene(scene: Scene) -> tuple[NDArray[np.float64], NDArray[np.float32], int]:
    """Plates as one float array for the numba kernel.

    Returns
    -------
    plates : ndarray, shape (n_plates, 24)
        Per plate: cam_from_plate rotation (9, row-major) and translation (3); extent x0, x1, y0,
        y1 (mm, plate frame); kind; 7 kind-specific parameters.
    texture : ndarray, shape (h, w, channels), float32
        The one texture image shared by texture plates (1×1×1 zeros when none).
    channels : int
        1 (grey) or 3 (RGB): 3 when a texture is RGB.
    """
    rows: list[list[float]] = []
    texture: NDArray[np.float32] | None = None
    channels = 1
    for plate in scene.plates:
        if isinstance(plate, CheckerboardPlate):
            b = plate.board
            sq, border = b.square_mm, b.border_mm
            extent = [-sq - border, sq * b.columns + border, -sq - border, sq * b.rows + border]
            params = [sq, b.columns, b.rows, plate.black, plate.white, 0.0, 0.0]
            rows.append([*_pose_fields(plate.cam_from_world), *extent, KIND_CHECKERBOARD, *params])
        elif isinstance(plate, TexturePlate | TexturedSphere):
            tex = _texture_of(plate)
            if texture is not None and not (texture.shape == tex.shape and np.array_equal(texture, tex)):
                raise ModelError("the tracer supports one texture image per scene")
            texture = tex
            channels = max(channels, tex.shape[2])
            h, w = tex.shape[:2]
            if isinstance(plate, TexturePlate):
                extent = [0.0, plate.width_mm, 0.0, plate.height_mm]
                params = [plate.width_mm / w, plate.height_mm / h, 0.0, 0.0, 0.0, 0.0, 0.0]
                rows.append([*_pose_fields(plate.cam_from_plate), *extent, KIND_TEXTURE, *params])
            else:
                r = plate.radius_mm
                if not r > 0:
                    raise ModelError(f"sphere radius must be > 0, got {r}")
                params = [r, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
                rows.append([*_pose_fields(plate.cam_from_sphere), -r, r, -r, r, KIND_SPHERE, *params])
        elif isinstance(plate, DiscLight):
            if not plate.radius_mm > 0:
                raise ModelError(f"disc light radius must be > 0, got {plate.radius_mm}")
            pose = Pose(np.eye(3), np.asarray(plate.centre_mm, dtype=np.float64))
            r = plate.radius_mm
            params = [r, plate.level, 0.0, 0.0, 0.0, 0.0, 0.0]
            rows.append([*_pose_fields(pose), -r, r, -r, r, KIND_DISC, *params])
        else:
            raise ModelError(f"unknown plate type {type(plate).__name__}")
    packed = np.asarray(rows, dtype=np.float64).reshape(-1, PLATE_FIELDS)
    if texture is None:
        texture = np.zeros((1, 1, 1), dtype=np.float32)
    return packed, np.ascontiguousarray(texture), channels


def first_hit(scene: Scene, origins: NDArray[np.float64], directions: NDArray[np.float64]) -> NDArray[np.float64]:
    """Distance t (in units of ``directions``) along rays o + t·d to the first surface of
    ``scene`` they meet (plates within their extent, spheres' near side, disc lights), inf for
    none: the exact depth truth of a render (camera frame, mm). Reads the scene as the tracer
    does (:func:`pack_scene`: each plate's pose, extent and kind).

    Parameters
    ----------
    origins, directions : ndarray, shape (N, 3)

    Returns
    -------
    t : ndarray, shape (N,)
    """
    o = np.asarray(origins, dtype=np.float64).reshape(-1, 3)
    d = np.asarray(directions, dtype=np.float64).reshape(-1, 3)
    best = np.full(len(o), np.inf)
    plates, _, _ = pack_scene(scene)
    with np.errstate(divide="ignore", invalid="ignore"):
        for row in plates:
            R, c = row[:9].reshape(3, 3), row[9:12]
            x0, x1, y0, y1 = row[12:16]
            kind, radius = int(row[16]), row[17]
            if kind == KIND_SPHERE:
                oc = o - c
                a = np.einsum("ij,ij->i", d, d)
                b = np.einsum("ij,ij->i", d, oc)
                disc = b * b - a * (np.einsum("ij,ij->i", oc, oc) - radius**2)
                t = (-b - np.sqrt(disc)) / a
                hit = (disc >= 0.0) & (t > 0.0)
            else:
                n = R[:, 2]
                t = ((c - o) @ n) / (d @ n)
                local = (o + t[:, None] * d - c) @ R  # plate frame (x, y, ~0)
                x, y = local[:, 0], local[:, 1]
                if kind == KIND_DISC:
                    inside = x * x + y * y <= radius**2
                else:
                    inside = (x >= x0) & (x < x1) & (y >= y0) & (y < y1)
                hit = (t > 0.0) & inside
            best = np.where(hit & (t < best), t, best)
    return best


SILHOUETTE_REACH_MM = 0.5
"""A depth point is on a silhouette when the truth changes by more than :data:`SILHOUETTE_JUMP`
within this lateral distance (mm, at the scene's depth) of its line of sight."""
SILHOUETTE_JUMP = 0.02
"""Relative change of the true depth that marks a silhouette (:data:`SILHOUETTE_REACH_MM`)."""


def depth_truth(
    scene: Scene,
    points_mm: NDArray[np.float64],
    *,
    reach_mm: float = SILHOUETTE_REACH_MM,
    jump: float = SILHOUETTE_JUMP,
) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """The true depth z of each point's line of sight from the camera origin (where it first
    meets ``scene``, :func:`first_hit`) and whether it lies on a silhouette: the truth changes by
    more than ``jump`` (relative) within ``reach_mm`` of that line, checked in 12 directions (a
    micro-image's depth there mixes two surfaces).

    Returns
    -------
    z_true : ndarray, shape (N,) (inf for a line of sight that meets nothing)
    silhouette : ndarray of bool, shape (N,)
    """
    X = np.asarray(points_mm, dtype=np.float64).reshape(-1, 3)
    sight = X / np.linalg.norm(X, axis=1, keepdims=True)
    origin = np.zeros_like(X)
    z_true = first_hit(scene, origin, sight) * sight[:, 2]
    silhouette = np.zeros(len(X), dtype=bool)
    for angle in np.linspace(0.0, 2.0 * np.pi, 12, endpoint=False):
        step = reach_mm / z_true[:, None] * np.array([np.cos(angle), np.sin(angle), 0.0])
        near = first_hit(scene, origin, sight + step) * (sight + step)[:, 2]
        silhouette |= ~(np.abs(near - z_true) < jump * z_true)
    return z_true, silhouette
