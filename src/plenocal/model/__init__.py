"""The plenoptic camera model: physical parts, lattices, projections, blur and depth of field.

Pure, vectorised numpy; no I/O. Conventions: ``docs/conventions.md``.
"""

from plenocal.model.camera import (
    Configuration,
    Distortion,
    MainLens,
    MicroImageGrid,
    MicroLensArray,
    PlenopticCamera,
    Sensor,
)
from plenocal.model.geometry import Pose, euler_xyz_from_matrix, matrix_from_euler_xyz, rodrigues
from plenocal.model.lattice import Lattice, LatticeKind, TypeLayout
from plenocal.model.projection import (
    back_project_bap,
    micro_image_centres,
    micro_lens_centres,
    project_bap,
    project_mic,
)

__all__ = [
    "Configuration",
    "Distortion",
    "Lattice",
    "LatticeKind",
    "MainLens",
    "MicroImageGrid",
    "MicroLensArray",
    "PlenopticCamera",
    "Pose",
    "Sensor",
    "TypeLayout",
    "back_project_bap",
    "euler_xyz_from_matrix",
    "matrix_from_euler_xyz",
    "micro_image_centres",
    "micro_lens_centres",
    "project_bap",
    "project_mic",
    "rodrigues",
]
