"""Physical ranges every file and option is checked against (DESIGN §8: validate at the boundary).

Each bound is far beyond any real camera, so that it only stops a typo or a corrupted file
(a focal length of 1e9 mm, a sensor of 10^30 pixels) before it turns into a silently absurd
camera, an allocation that cannot succeed, or a traceback deep in the pipeline.
"""

from __future__ import annotations

MAX_FOCAL_LENGTH_MM = 10_000.0
"""Main-lens focal length, mm: the longest photographic lenses are ~5 m."""

MIN_F_NUMBER = 0.5
"""The f-number of a lens in air cannot be below 1/(2·NA) = 0.5."""

MAX_F_NUMBER = 1_000.0
"""Pinhole cameras reach f/200–f/500."""

MAX_PIXEL_SIZE_MM = 1.0
"""Pixel pitch, mm (sensors have 0.001–0.03 mm)."""

MAX_SENSOR_SIDE_PX = 200_000
"""Pixels along one side of a sensor (the largest sensors have ~20 000)."""

MAX_LATTICE_SIDE = 100_000
"""Micro-lenses along one side of the array (the Lytro Illum has 541 × 434)."""

MAX_BOARD_SIDE_NODES = 10_000
"""Checkerboard nodes along one side."""

MAX_LENGTH_MM = 1e7
"""Any other length in a camera or scene file (10 km)."""

MAX_SEED = 2**63 - 1
"""Largest simulation seed (numpy's SeedSequence takes non-negative integers)."""

MAX_RAYS = 100_000
"""Rays per pixel of a simulation."""

__all__ = [
    "MAX_BOARD_SIDE_NODES",
    "MAX_FOCAL_LENGTH_MM",
    "MAX_F_NUMBER",
    "MAX_LATTICE_SIDE",
    "MAX_LENGTH_MM",
    "MAX_PIXEL_SIZE_MM",
    "MAX_RAYS",
    "MAX_SEED",
    "MAX_SENSOR_SIDE_PX",
    "MIN_F_NUMBER",
]
