"""plenocal's ``poses.json`` <-> ``{frame: cam_from_world}`` (``docs/formats.md``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from plenocal.errors import InputFileError
from plenocal.io._json import Fields, floats, read_document, write_document
from plenocal.model.geometry import Pose

POSES_FORMAT = "plenocal-poses"
_ORTHONORMAL_TOL = 1e-6


def read_poses(path: str | Path) -> dict[int, Pose]:
    """Read ``poses.json`` as ``{frame: cam_from_world}``.

    Rotations must be orthonormal with determinant +1 (to 1e-6); frames must be unique.

    Raises
    ------
    InputFileError
        One line naming the file and the bad entry.
    """
    p = Path(path)
    f = read_document(p, POSES_FORMAT)
    convention = f.string("convention", "cam_from_world")
    if convention != "cam_from_world":
        raise InputFileError(p, f"key 'convention' must be 'cam_from_world', got {convention!r}")
    entries = f.raw("poses")
    if not isinstance(entries, list):
        raise InputFileError(p, f"key 'poses' must be a list, got {type(entries).__name__}")
    out: dict[int, Pose] = {}
    for i, entry in enumerate(entries):
        e = Fields(p, entry, f"poses[{i}]")
        frame = e.integer("frame", minimum=0)
        if frame in out:
            raise InputFileError(p, f"frame {frame} appears twice (key 'poses[{i}].frame')")
        R = e.matrix("rotation", (3, 3))
        t = np.asarray(e.numbers("translation_mm", 3))
        err = np.abs(R @ R.T - np.eye(3)).max()
        if err > _ORTHONORMAL_TOL or np.linalg.det(R) < 0:
            raise e.error(
                "rotation", f"must be a rotation matrix (|R Rᵀ − I| = {err:.2g}, det = {np.linalg.det(R):.6g})"
            )
        out[frame] = Pose(R, t)
    return out


def write_poses(path: str | Path, poses: dict[int, Pose]) -> Path:
    """Write ``{frame: cam_from_world}`` as ``poses.json`` (sorted by frame), atomically.

    Floats are written with ``repr`` precision: reading back gives bit-identical arrays.
    """
    entries = [
        {
            "frame": int(frame),
            "rotation": [floats(row) for row in poses[frame].rotation],
            "translation_mm": floats(poses[frame].translation),
        }
        for frame in sorted(poses)
    ]
    return write_document(
        path, {"format": POSES_FORMAT, "version": 1, "convention": "cam_from_world", "poses": entries}
    )


__all__ = ["read_poses", "write_poses"]
