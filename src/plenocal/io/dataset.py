"""The dataset folder and its ``manifest.json`` (``docs/formats.md``).

A :class:`Manifest` is what ``manifest.json`` says; a :class:`Dataset` is a manifest bound to
its folder, which resolves paths and finds the optional files (``camera.json``, ``poses.json``,
``observations.npz``, ``internal_parameters.json``, ``ground_truth/``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from plenocal.errors import InputFileError, ModelError
from plenocal.io._json import Fields, read_document, write_document
from plenocal.io.camera import lattice_from_json, lattice_to_json
from plenocal.io.images import COLORS, read_raw_image
from plenocal.io.limits import (
    MAX_BOARD_SIDE_NODES,
    MAX_F_NUMBER,
    MAX_FOCAL_LENGTH_MM,
    MAX_LENGTH_MM,
    MAX_PIXEL_SIZE_MM,
    MAX_SENSOR_SIDE_PX,
    MIN_F_NUMBER,
)
from plenocal.model.camera import Configuration
from plenocal.model.spec import CameraSpec
from plenocal.model.target import Checkerboard

MANIFEST_FORMAT = "plenocal-dataset"
MANIFEST_NAME = "manifest.json"
CAMERA_NAME = "camera.json"
POSES_NAME = "poses.json"
OBSERVATIONS_NAME = "observations.npz"
INTERNAL_PARAMETERS_NAME = "internal_parameters.json"
_CONFIGURATIONS = tuple(c.value for c in Configuration)
MAX_MICRO_LENS_TYPES = 64
"""Most micro-lens types a camera spec may declare (Raytrix cameras have 3)."""


class ImageRole(Enum):
    """What an image is for (``docs/formats.md``, "Image roles")."""

    WHITE = "white"
    DEVIGNETTING = "devignetting"
    CALIBRATION = "calibration"
    EVALUATION = "evaluation"
    TRANSLATION = "translation"


FRAME_ROLES = (ImageRole.CALIBRATION, ImageRole.EVALUATION, ImageRole.TRANSLATION)
_ROLES = tuple(r.value for r in ImageRole)


@dataclass(frozen=True)
class ImageEntry:
    """One image of the dataset.

    Attributes
    ----------
    path : str
        Relative to the dataset folder (absolute paths are allowed: imported datasets may
        reference images elsewhere).
    role : ImageRole
    f_number : float or None
        Main-lens f-number N (required for white and devignetting images).
    frame : int or None
        Frame number (required for calibration, evaluation and translation images; unique).
    sequence : int or None
        Translation images: the motion sequence.
    displacement_mm : float or None
        Translation images: true position along the motion from the sequence's first frame.
    """

    path: str
    role: ImageRole
    f_number: float | None = None
    frame: int | None = None
    sequence: int | None = None
    displacement_mm: float | None = None


@dataclass(frozen=True)
class ImageFormat:
    """How raw images are stored: ``bit_depth`` 8 or 16, ``color`` grey / rgb / bayer-rggb."""

    bit_depth: int = 8
    color: str = "grey"


@dataclass(frozen=True)
class GroundTruth:
    """Paths (relative to the dataset) of the true camera, poses and noise-free observations."""

    camera: str | None = None
    poses: str | None = None
    observations: str | None = None


@dataclass(frozen=True)
class Manifest:
    """The content of ``manifest.json``."""

    camera_spec: CameraSpec
    target: Checkerboard
    images: tuple[ImageEntry, ...] = ()
    image_format: ImageFormat = field(default_factory=ImageFormat)
    name: str = ""
    observations: str | None = None
    ground_truth: GroundTruth | None = None
    provenance: dict[str, Any] | None = None

    def with_role(self, role: ImageRole | str) -> tuple[ImageEntry, ...]:
        r = ImageRole(role)
        return tuple(e for e in self.images if e.role is r)


@dataclass(frozen=True)
class Dataset:
    """A manifest bound to its folder."""

    folder: Path
    manifest: Manifest

    def path(self, relative: str | Path) -> Path:
        """Absolute-or-folder-relative path of a manifest entry."""
        return self.folder / relative

    def _optional(self, name: str) -> Path | None:
        p = self.folder / name
        return p if p.is_file() else None

    @property
    def camera_path(self) -> Path | None:
        return self._optional(CAMERA_NAME)

    @property
    def poses_path(self) -> Path | None:
        return self._optional(POSES_NAME)

    @property
    def internal_parameters_path(self) -> Path | None:
        return self._optional(INTERNAL_PARAMETERS_NAME)

    @property
    def observations_path(self) -> Path | None:
        """The manifest's ``observations`` (or ``observations.npz`` when present)."""
        if self.manifest.observations is not None:
            return self.path(self.manifest.observations)
        return self._optional(OBSERVATIONS_NAME)

    def files(self) -> list[Path]:
        """Every file of the dataset a stage may read: manifest, images and the optional files."""
        out = [self.folder / MANIFEST_NAME, *(self.path(e.path) for e in self.manifest.images)]
        out += [p for p in (self.camera_path, self.poses_path, self.observations_path,
                            self.internal_parameters_path) if p is not None]
        return out

    def missing_images(self) -> list[ImageEntry]:
        """Entries whose file does not exist."""
        return [e for e in self.manifest.images if not self.path(e.path).is_file()]

    def read_image(self, entry: ImageEntry, *, as_grey: bool = True, keep: bool = True) -> NDArray[np.float64]:
        """Read an image with the manifest's colour format, checking the sensor size (``keep``:
        :func:`plenocal.io.images.read_raw_image`'s)."""
        spec = self.manifest.camera_spec
        return read_raw_image(
            self.path(entry.path),
            color=self.manifest.image_format.color,  # type: ignore[arg-type]
            as_grey=as_grey,
            expected_shape=(spec.height_px, spec.width_px),
            bit_depth=self.manifest.image_format.bit_depth,
            keep=keep,
        )


# --- JSON <-> dataclasses ----------------------------------------------------------------
def _spec_from_json(f: Fields) -> CameraSpec:
    h = f.number("focus_distance_mm", positive=True, maximum=MAX_LENGTH_MM) if f.has("focus_distance_mm") else None
    conf = f.raw("configuration", None)
    focal_length = (
        f.number("main_lens_focal_length_mm", positive=True, maximum=MAX_FOCAL_LENGTH_MM)
        if f.has("main_lens_focal_length_mm") else None
    )
    if h is not None and focal_length is not None and h <= focal_length:
        raise f.error("focus_distance_mm", f"must be beyond the main-lens focal length {focal_length:g} mm "
                                           f"(a lens cannot focus nearer), got {h:g}")
    return CameraSpec(
        pixel_size_mm=f.number("pixel_size_mm", positive=True, maximum=MAX_PIXEL_SIZE_MM),
        width_px=f.integer("width_px", minimum=1, maximum=MAX_SENSOR_SIDE_PX),
        height_px=f.integer("height_px", minimum=1, maximum=MAX_SENSOR_SIDE_PX),
        lattice=lattice_from_json(f.sub("lattice")) if f.has("lattice") else None,
        n_types=f.integer("n_types", minimum=0, maximum=MAX_MICRO_LENS_TYPES) if f.has("n_types") else None,
        type_row_shift=f.integers("type_row_shift") if f.has("type_row_shift") else None,
        main_lens_focal_length_mm=focal_length,
        focus_distance_mm=math.inf if h is None else h,
        configuration=None if conf is None else Configuration(f.string("configuration", choices=_CONFIGURATIONS)),
    )


def _spec_to_json(s: CameraSpec) -> dict[str, Any]:
    out: dict[str, Any] = {
        "pixel_size_mm": float(s.pixel_size_mm),
        "width_px": int(s.width_px),
        "height_px": int(s.height_px),
    }
    if s.lattice is not None:
        out["lattice"] = lattice_to_json(s.lattice)
    if s.n_types is not None:
        out["n_types"] = int(s.n_types)
    if s.type_row_shift is not None:
        out["type_row_shift"] = [int(x) for x in s.type_row_shift]
    if s.main_lens_focal_length_mm is not None:
        out["main_lens_focal_length_mm"] = float(s.main_lens_focal_length_mm)
    out["focus_distance_mm"] = None if math.isinf(s.focus_distance_mm) else float(s.focus_distance_mm)
    out["configuration"] = None if s.configuration is None else s.configuration.value
    return out


def _entry_from_json(f: Fields) -> ImageEntry:
    role = ImageRole(f.string("role", choices=_ROLES))
    entry = ImageEntry(
        path=f.string("path"),
        role=role,
        f_number=f.number("f_number", minimum=MIN_F_NUMBER, maximum=MAX_F_NUMBER) if f.has("f_number") else None,
        frame=f.integer("frame", minimum=0) if f.has("frame") else None,
        sequence=f.integer("sequence", minimum=0) if f.has("sequence") else None,
        displacement_mm=(f.number("displacement_mm", minimum=-MAX_LENGTH_MM, maximum=MAX_LENGTH_MM)
                         if f.has("displacement_mm") else None),
    )
    if role in (ImageRole.WHITE, ImageRole.DEVIGNETTING) and entry.f_number is None:
        raise f.error("f_number", f"is required for a {role.value} image")
    if role in FRAME_ROLES and entry.frame is None:
        raise InputFileError(f.path, f"missing key '{f.key('frame')}' (required for a {role.value} image)")
    if role is ImageRole.TRANSLATION and (entry.sequence is None or entry.displacement_mm is None):
        raise InputFileError(
            f.path, f"key '{f.prefix}' is a translation image: 'sequence' and 'displacement_mm' are required"
        )
    return entry


def _entry_to_json(e: ImageEntry) -> dict[str, Any]:
    out: dict[str, Any] = {"path": e.path, "role": e.role.value}
    if e.f_number is not None:
        out["f_number"] = float(e.f_number)
    if e.frame is not None:
        out["frame"] = int(e.frame)
    if e.sequence is not None:
        out["sequence"] = int(e.sequence)
    if e.displacement_mm is not None:
        out["displacement_mm"] = float(e.displacement_mm)
    return out


def manifest_from_json(f: Fields) -> Manifest:
    """Parse a ``manifest.json`` document (``f`` at its top level)."""
    try:
        t = f.sub("target")
        target = Checkerboard(
            columns=t.integer("columns", maximum=MAX_BOARD_SIDE_NODES),
            rows=t.integer("rows", maximum=MAX_BOARD_SIDE_NODES),
            square_mm=t.number("square_mm", positive=True, maximum=MAX_LENGTH_MM),
            border_mm=t.number("border_mm", 0.0, minimum=0.0, maximum=MAX_LENGTH_MM),
        )
    except ModelError as exc:
        raise InputFileError(f.path, f"target: {exc}") from None
    spec = _spec_from_json(f.sub("camera_spec"))
    fmt = f.sub("image_format") if f.has("image_format") else None
    image_format = ImageFormat(
        bit_depth=fmt.integer("bit_depth", 8) if fmt else 8,
        color=fmt.string("color", "grey", choices=COLORS) if fmt else "grey",
    )
    if image_format.bit_depth not in (8, 16):
        raise InputFileError(f.path, f"key 'image_format.bit_depth' must be 8 or 16, got {image_format.bit_depth}")
    raw_images = f.raw("images", [])
    if not isinstance(raw_images, list):
        raise InputFileError(f.path, f"key 'images' must be a list, got {type(raw_images).__name__}")
    images = tuple(_entry_from_json(Fields(f.path, e, f"images[{i}]")) for i, e in enumerate(raw_images))
    seen: dict[int, int] = {}
    for i, e in enumerate(images):
        if e.frame is None:
            continue
        if e.frame in seen:
            raise InputFileError(
                f.path, f"frame {e.frame} is used by images[{seen[e.frame]}] and images[{i}] (frames must be unique)"
            )
        seen[e.frame] = i
    gt = None
    if f.has("ground_truth"):
        g = f.sub("ground_truth")
        gt = GroundTruth(*(g.string(k) if g.has(k) else None for k in ("camera", "poses", "observations")))
    return Manifest(
        camera_spec=spec,
        target=target,
        images=images,
        image_format=image_format,
        name=f.string("name", ""),
        observations=f.string("observations") if f.has("observations") else None,
        ground_truth=gt,
        provenance=f.dict_or_none("provenance"),
    )


def manifest_to_json(m: Manifest) -> dict[str, Any]:
    """The ``manifest.json`` document of a manifest (JSON-ready dict)."""
    b = m.target
    doc: dict[str, Any] = {
        "format": MANIFEST_FORMAT,
        "version": 1,
        "name": m.name,
        "camera_spec": _spec_to_json(m.camera_spec),
        "target": {"columns": b.columns, "rows": b.rows, "square_mm": float(b.square_mm)},
        "image_format": {"bit_depth": int(m.image_format.bit_depth), "color": m.image_format.color},
        "images": [_entry_to_json(e) for e in m.images],
    }
    if b.border_mm:
        doc["target"]["border_mm"] = float(b.border_mm)
    if m.observations is not None:
        doc["observations"] = m.observations
    if m.ground_truth is not None:
        g = m.ground_truth
        doc["ground_truth"] = {
            k: v for k, v in (("camera", g.camera), ("poses", g.poses), ("observations", g.observations)) if v
        }
    if m.provenance is not None:
        doc["provenance"] = m.provenance
    return doc


def read_manifest(path: str | Path) -> Manifest:
    """Read a ``manifest.json`` file."""
    return manifest_from_json(read_document(path, MANIFEST_FORMAT))


def read_dataset(folder: str | Path) -> Dataset:
    """Open a dataset folder (reads and validates its ``manifest.json``).

    Image files are not opened here; :meth:`Dataset.missing_images` lists absent ones.
    """
    d = Path(folder)
    if not d.is_dir():
        raise InputFileError(
            d, "dataset folder does not exist" if not d.exists() else "expected a dataset folder, got a file"
        )
    return Dataset(d, read_manifest(d / MANIFEST_NAME))


def write_manifest(folder: str | Path, manifest: Manifest) -> Path:
    """Write ``folder/manifest.json`` atomically; returns its path."""
    if manifest.image_format.color not in COLORS:
        raise ValueError(f"image_format.color must be one of {COLORS}, got {manifest.image_format.color!r}")
    return write_document(Path(folder) / MANIFEST_NAME, manifest_to_json(manifest))


__all__ = [
    "CAMERA_NAME",
    "INTERNAL_PARAMETERS_NAME",
    "MANIFEST_NAME",
    "OBSERVATIONS_NAME",
    "POSES_NAME",
    "CameraSpec",
    "Dataset",
    "GroundTruth",
    "ImageEntry",
    "ImageFormat",
    "ImageRole",
    "Manifest",
    "manifest_from_json",
    "manifest_to_json",
    "read_dataset",
    "read_manifest",
    "write_manifest",
]
