"""File I/O at the edge of plenocal: its own formats (``docs/formats.md``) and libpleno's.

plenocal formats (this namespace):

- :func:`read_dataset` / :func:`write_manifest`: the dataset folder and ``manifest.json``;
- :func:`read_camera` / :func:`read_camera_file` / :func:`write_camera`: ``camera.json``;
- :func:`read_poses` / :func:`write_poses`: ``poses.json`` (cam_from_world);
- :func:`read_observations` / :func:`write_observations` / :func:`export_observations_csv`;
- :func:`read_raw_image` / :func:`write_raw_image`: 8/16-bit PNG/TIFF, grey/RGB/Bayer RGGB;
- :func:`atomic_write_bytes` / :func:`atomic_write_text` / :func:`atomic_output`.

libpleno / COMPOTE files: :mod:`plenocal.io.libpleno`.
"""

from plenocal.io.atomic import atomic_output, atomic_write_bytes, atomic_write_text
from plenocal.io.camera import (
    CameraFile,
    read_camera,
    read_camera_file,
    read_internal_parameters,
    write_camera,
    write_internal_parameters,
)
from plenocal.io.dataset import (
    CameraSpec,
    Dataset,
    GroundTruth,
    ImageEntry,
    ImageFormat,
    ImageRole,
    Manifest,
    read_dataset,
    read_manifest,
    write_manifest,
)
from plenocal.io.images import read_raw_image, write_raw_image
from plenocal.io.observations import (
    export_observations_csv,
    read_observations,
    write_observations,
)
from plenocal.io.poses import read_poses, write_poses

__all__ = [
    "CameraFile",
    "CameraSpec",
    "Dataset",
    "GroundTruth",
    "ImageEntry",
    "ImageFormat",
    "ImageRole",
    "Manifest",
    "atomic_output",
    "atomic_write_bytes",
    "atomic_write_text",
    "export_observations_csv",
    "read_camera",
    "read_camera_file",
    "read_dataset",
    "read_internal_parameters",
    "read_manifest",
    "read_observations",
    "read_poses",
    "read_raw_image",
    "write_camera",
    "write_internal_parameters",
    "write_manifest",
    "write_observations",
    "write_poses",
    "write_raw_image",
]
