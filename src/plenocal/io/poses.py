"""plenocal's ``poses.json`` <-> ``{frame: cam_from_world}`` (``docs/formats.md``)."""

from __future__ import annotations

from collections.abc import Mapping
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


def read_node_extents(path: str | Path) -> dict[int, tuple[int, int, int, int]]:
    """The ``node_extent`` of the poses whose frame was linked with relative node ids (``{frame:
    (first column, last column, first row, last row)}``, :func:`write_poses`); empty when none."""
    p = Path(path)
    f = read_document(p, POSES_FORMAT)
    entries = f.raw("poses")
    out: dict[int, tuple[int, int, int, int]] = {}
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        if not isinstance(entry, dict) or "node_extent" not in entry:
            continue
        e = Fields(p, entry, f"poses[{i}]")
        ext = e.raw("node_extent")
        if not (isinstance(ext, list) and len(ext) == 4 and all(isinstance(x, int) and x >= 0 for x in ext)
                and ext[0] <= ext[1] and ext[2] <= ext[3]):
            raise e.error("node_extent", "must be [first column, last column, first row, last row], non-negative integers")
        out[e.integer("frame", minimum=0)] = (ext[0], ext[1], ext[2], ext[3])
    return out


def write_poses(path: str | Path, poses: dict[int, Pose], *,
                node_extents: Mapping[int, tuple[int, int, int, int]] | None = None) -> Path:
    """Write ``{frame: cam_from_world}`` as ``poses.json`` (sorted by frame), atomically.

    Floats are written with ``repr`` precision: reading back gives bit-identical arrays.
    ``node_extents``: for frames linked with relative node ids, the rows and columns of their
    linked nodes, the only part of the board their pose places on the printed one (``relative_ids``
    and ``node_extent`` in the entry; :func:`read_node_extents`).
    """
    extents = node_extents or {}
    entries = [
        {
            "frame": int(frame),
            "rotation": [floats(row) for row in poses[frame].rotation],
            "translation_mm": floats(poses[frame].translation),
            **({"relative_ids": True, "node_extent": [int(x) for x in extents[frame]]} if frame in extents else {}),
        }
        for frame in sorted(poses)
    ]
    return write_document(
        path, {"format": POSES_FORMAT, "version": 1, "convention": "cam_from_world", "poses": entries}
    )


__all__ = ["read_node_extents", "read_poses", "write_poses"]
