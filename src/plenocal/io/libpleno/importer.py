"""Import folders of libpleno files as one plenocal dataset (``plenocal import-libpleno``).

Each source folder is a :class:`LibplenoSource`: a folder and the role of its checkerboard
images (``calibration``, ``evaluation`` or ``translation``; libpleno's ``images.js`` has no role
field). Each source is read for whichever of ``camera.js``, ``intrinsics.js``, ``params.js``,
``poses.js``, ``scene.js``, ``images.js``, ``linked-observations*.bin.gz``, ``bap*.csv`` /
``center*.csv`` it holds, and the dataset folder receives:

- ``manifest.json`` (camera spec from ``camera.js``, else ``intrinsics.js``; target from
  ``scene.js``; whites and mask from ``images.js``; one image entry per checkerboard of every
  source, with the source's role), written last;
- ``camera.json`` from ``intrinsics.js``, carrying Ω when ``params.js`` is present;
- ``internal_parameters.json`` from ``params.js`` when there is no ``intrinsics.js``;
- ``poses.json`` from the ``poses.js`` files;
- ``observations.npz`` from the ``.bin.gz`` (preferred: full precision) or the CSVs.

Sources of one dataset describe one camera: ``camera.js``, ``intrinsics.js``, ``params.js``,
``scene.js`` (its first checkerboard), whites, mask and image format are taken from the first
source that has them, and any other source that has them must agree (else an error says which
file and key differ). ``poses.js`` and observations are merged by frame. Frame ids must be unique
across the dataset: a clash is refused, never renumbered (frame ids link images, ``poses.js`` and
observation files). A translation source's frames, ordered by frame id, are one motion sequence
(``sequence`` 0, 1, ... in source order) with ``displacement_mm`` = 0, step, 2·step, ...

Everything is read and validated before anything is written; the sources are only read.
"""

from __future__ import annotations

import dataclasses
import filecmp
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from plenocal import __version__
from plenocal.errors import DataError, InputFileError, ModelError, PlenocalError
from plenocal.io._json import Fields
from plenocal.io._quiet import captured_stderr
from plenocal.io.atomic import atomic_folder
from plenocal.io.camera import camera_from_json, camera_to_json, write_camera, write_internal_parameters
from plenocal.io.dataset import (
    CAMERA_NAME,
    FRAME_ROLES,
    INTERNAL_PARAMETERS_NAME,
    MANIFEST_NAME,
    OBSERVATIONS_NAME,
    POSES_NAME,
    CameraSpec,
    ImageEntry,
    ImageFormat,
    ImageRole,
    Manifest,
    manifest_from_json,
    manifest_to_json,
    write_manifest,
)
from plenocal.io.libpleno.convert import (
    GEOMETRY_TO_KIND,
    INFINITY_MM,
    MODE_TO_CONFIGURATION,
    board_from_scene,
    camera_from_config,
    omega_from_params,
    plenocal_lattice_of,
    poses_from_doc,
)
from plenocal.io.libpleno.documents import (
    CameraConfigDoc,
    FramePoseDoc,
    ImageDoc,
    ImagesDoc,
    ParamsDoc,
    read_camera_config,
    read_images_doc,
    read_params_doc,
    read_poses_doc,
    read_scene_doc,
)
from plenocal.io.libpleno.observations import read_observations_bin, read_observations_csv
from plenocal.io.limits import (
    MAX_F_NUMBER,
    MAX_FOCAL_LENGTH_MM,
    MAX_LATTICE_SIDE,
    MAX_PIXEL_SIZE_MM,
    MAX_SENSOR_SIDE_PX,
    MIN_F_NUMBER,
)
from plenocal.io.observations import validate_observations, write_observations
from plenocal.io.poses import write_poses
from plenocal.model.lattice import Lattice, TypeLayout
from plenocal.model.observations import BapFeatures, Observations
from plenocal.model.target import Checkerboard

_MODES = ", ".join(f"{k} ({v.value})" for k, v in MODE_TO_CONFIGURATION.items())
DATASET_FILES = (MANIFEST_NAME, CAMERA_NAME, INTERNAL_PARAMETERS_NAME, POSES_NAME, OBSERVATIONS_NAME, "stage.json")
"""What an import writes in its dataset folder, which it replaces as a whole."""


@dataclass(frozen=True)
class LibplenoSource:
    """One libpleno folder to import and the role of its checkerboard images.

    Attributes
    ----------
    folder : Path
        Folder of libpleno files (only read).
    role : ImageRole
        Role of every ``checkerboards`` entry of its ``images.js``: calibration, evaluation or
        translation.
    step_mm : float or None
        Translation sources only: the known displacement between consecutive frames (ordered by
        frame id), mm, finite and > 0.
    """

    folder: Path
    role: ImageRole = ImageRole.CALIBRATION
    step_mm: float | None = None


@dataclass
class ImportResult:
    """What :func:`import_libpleno_folders` wrote and what the user should know."""

    dataset: Path
    written: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    frames: dict[str, int] = field(default_factory=dict)
    """Number of frame images per role."""
    sequences: int = 0
    """Number of translation sequences."""


@dataclass
class _Read:
    """Everything read from one source folder (None: the file is absent)."""

    source: LibplenoSource
    camera: tuple[Path, CameraConfigDoc] | None = None
    intrinsics: tuple[Path, CameraConfigDoc] | None = None
    params: tuple[Path, ParamsDoc] | None = None
    poses: tuple[Path, tuple[FramePoseDoc, ...]] | None = None
    scene: tuple[Path, Checkerboard] | None = None
    images: tuple[Path, ImagesDoc] | None = None
    observations: tuple[list[Path], Observations] | None = None
    files: list[str] = field(default_factory=list)

    @property
    def folder(self) -> Path:
        return self.source.folder


# --- small helpers -----------------------------------------------------------------------
def _short(value: Any) -> str:
    r = repr(value)
    return r if len(r) <= 40 else r[:37] + "..."


def _difference(a: Any, b: Any, key: str = "") -> tuple[str, Any, Any] | None:
    """First (dotted key, value in a, value in b) where two nested values differ, or None."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            sub = f"{key}.{k}" if key else str(k)
            if k not in a or k not in b:
                return sub, a.get(k, "(absent)"), b.get(k, "(absent)")
            d = _difference(a[k], b[k], sub)
            if d is not None:
                return d
        return None
    if isinstance(a, list | tuple) and isinstance(b, list | tuple) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            d = _difference(x, y, f"{key}[{i}]")
            if d is not None:
                return d
        return None
    return None if a == b else (key or "value", a, b)


def _doc_key(key: str) -> str:
    """A typed document's field path as the file's key (``extra.D`` -> ``D``, ``mia.pitch`` ->
    ``mia.mesh.pitch``...)."""
    for prefix, file_prefix in (("extra.", ""), ("meta_extra.", "meta."), ("mla_extra.", "mla."),
                                ("mia.", "mia.mesh."), ("mla.", "mla.mesh."), ("lambda_", "lambda")):
        if key.startswith(prefix):
            return file_prefix + key[len(prefix):]
    if key.startswith("focal_lengths"):
        return "mla." + key
    return key


def _disagree(a: Path, b: Path, key: str, va: Any, vb: Any) -> InputFileError:
    def show(v: Any) -> str:
        return v if isinstance(v, str) else _short(v)

    return InputFileError(
        b,
        f"disagrees with {a} on {key} ({show(va)} vs {show(vb)}): the sources of one dataset must agree on it; "
        "make the files agree or import the sources into separate datasets",
    )


def _check_same_doc(first: tuple[Path, Any], other: tuple[Path, Any]) -> None:
    d = _difference(dataclasses.asdict(first[1]), dataclasses.asdict(other[1]))
    if d is not None:
        raise _disagree(first[0], other[0], _doc_key(d[0]), d[1], d[2])


def _one(src: Path, pattern: str, result: ImportResult) -> Path | None:
    found = sorted(src.glob(pattern))
    if len(found) > 1:
        result.warnings.append(f"{src}: several files match {pattern}; using {found[0].name}")
    return found[0] if found else None


def _resolve(src: Path, image: ImageDoc) -> tuple[str, bool, str]:
    """Path to store for an image, whether it exists (then stored absolute), and the key that
    identifies the file (absolute, normalised) for duplicate and agreement checks."""
    p = Path(image.path)
    c = p if p.is_absolute() else src / p
    key = os.path.normpath(c.resolve() if c.exists() else c.absolute())
    if c.is_file():
        return str(c.resolve()), True, key
    return image.path, False, key


def _same_file(a: str, b: str) -> bool:
    """Two image files are the same: one path, or byte-identical existing files."""
    if a == b:
        return True
    return os.path.isfile(a) and os.path.isfile(b) and filecmp.cmp(a, b, shallow=False)


# --- validation of the sources and of what they say ----------------------------------------
def _check_sources(sources: Sequence[LibplenoSource], out: Path) -> None:
    if not sources:
        raise DataError("no libpleno source folder given")
    out_r = out.resolve()
    seen: dict[Path, Path] = {}
    for s in sources:
        folder = s.folder
        if s.role not in FRAME_ROLES:
            raise DataError(
                f"{folder}: role must be one of {', '.join(r.value for r in FRAME_ROLES)}, got {s.role.value}"
            )
        if s.role is ImageRole.TRANSLATION:
            if s.step_mm is None:
                raise DataError(
                    f"{folder}: a translation source needs the known step between consecutive frames: "
                    "give --step-mm MM after it"
                )
            if not (math.isfinite(s.step_mm) and s.step_mm > 0):
                raise DataError(
                    f"{folder}: the translation step (--step-mm) must be a finite number > 0 mm, got {s.step_mm:g}"
                )
        elif s.step_mm is not None:
            raise DataError(
                f"{folder}: --step-mm {s.step_mm:g} given for a source of role {s.role.value}; it applies only to "
                "translation sources (--role translation SRC --step-mm MM)"
            )
        if not folder.is_dir():
            raise InputFileError(
                folder, "source folder does not exist" if not folder.exists() else "expected a folder of libpleno files"
            )
        r = folder.resolve()
        if r in seen:
            raise InputFileError(folder, "listed twice as a source; list each folder once")
        seen[r] = folder
        if out_r == r or r in out_r.parents:
            where = "the" if out_r == r else "inside the"
            raise InputFileError(
                out, f"the dataset folder must not be {where} libpleno source folder {folder} (sources are only read); "
                "choose an output folder outside every source"
            )


def _check_config(path: Path, doc: CameraConfigDoc, *, trust_mode: bool) -> None:
    """What a ``camera.js`` / ``intrinsics.js`` must say for a usable camera spec."""
    s = doc.sensor
    if not (math.isfinite(s.scale) and s.scale > 0):
        raise InputFileError(path, f"key 'sensor.scale' (pixel size, mm) must be > 0, got {s.scale:g}")
    if s.scale > MAX_PIXEL_SIZE_MM:
        raise InputFileError(path, f"key 'sensor.scale' (pixel size, mm) must be <= {MAX_PIXEL_SIZE_MM:g}, got {s.scale:g}")
    for key, value in (("sensor.width", s.width), ("sensor.height", s.height)):
        if not 1 <= value <= MAX_SENSOR_SIDE_PX:
            raise InputFileError(path, f"key '{key}' (pixels) must be in 1..{MAX_SENSOR_SIDE_PX}, got {value}")
    mesh = doc.mia or doc.mla
    if mesh is not None and not (1 <= mesh.width <= MAX_LATTICE_SIDE and 1 <= mesh.height <= MAX_LATTICE_SIDE):
        raise InputFileError(path, f"micro-lens array size {mesh.width} x {mesh.height} must be within "
                                   f"1..{MAX_LATTICE_SIDE} per side")
    if not (math.isfinite(doc.main_lens.f) and 0 < doc.main_lens.f <= MAX_FOCAL_LENGTH_MM):
        raise InputFileError(path, f"key 'main_lens.f' (focal length, mm) must be > 0 and <= {MAX_FOCAL_LENGTH_MM:g}, "
                                   f"got {doc.main_lens.f:g}")
    n = doc.main_lens.aperture
    if n is not None and not (math.isfinite(n) and MIN_F_NUMBER <= n <= MAX_F_NUMBER):
        raise InputFileError(path, f"key 'main_lens.aperture' (f-number) must be in {MIN_F_NUMBER:g}..{MAX_F_NUMBER:g}, "
                                   f"got {n:g}")
    if doc.I < 0:
        raise InputFileError(path, f"key 'I' (number of micro-lens types) must be >= 0, got {doc.I}")
    if trust_mode and doc.mode is not None and doc.mode not in MODE_TO_CONFIGURATION:
        raise InputFileError(path, f"key 'mode' must be one of {_MODES}, got {doc.mode}")


def _spec(path: Path, doc: CameraConfigDoc, *, trust_mode: bool) -> CameraSpec:
    _check_config(path, doc, trust_mode=trust_mode)
    lattice = None
    mesh = doc.mia or doc.mla
    try:
        if mesh is not None and mesh.geometry in GEOMETRY_TO_KIND:
            lattice = Lattice(GEOMETRY_TO_KIND[mesh.geometry], mesh.width, mesh.height)
        lattice = plenocal_lattice_of(doc, path) or lattice  # a plenocal export's own lattice, without its padding
        h = doc.dist_focus
        return CameraSpec(
            pixel_size_mm=doc.sensor.scale,
            width_px=doc.sensor.width,
            height_px=doc.sensor.height,
            lattice=lattice,
            n_types=doc.I,
            type_row_shift=TypeLayout.raytrix(doc.I).row_shift,
            main_lens_focal_length_mm=doc.main_lens.f,
            focus_distance_mm=math.inf if h is None or h >= INFINITY_MM else h,
            configuration=MODE_TO_CONFIGURATION[doc.mode if doc.mode is not None else 2] if trust_mode else None,
        )
    except ModelError as exc:
        raise InputFileError(path, str(exc)) from None


def _image_format(doc: ImagesDoc) -> ImageFormat:
    debayered = True if doc.debayered is None else doc.debayered
    rgb = True if doc.rgb is None else doc.rgb
    color = "bayer-rggb" if not debayered else ("rgb" if rgb else "grey")
    return ImageFormat(bit_depth=doc.bit_depth if doc.bit_depth in (8, 16) else 8, color=color)


# --- reading -----------------------------------------------------------------------------
def _read_source(source: LibplenoSource, result: ImportResult) -> _Read:
    src = source.folder
    r = _Read(source)
    paths = {n: src / n for n in ("camera.js", "intrinsics.js", "params.js", "poses.js", "scene.js", "images.js")}
    if paths["camera.js"].is_file():
        r.camera = (paths["camera.js"], read_camera_config(paths["camera.js"]))
        _check_config(*r.camera, trust_mode=True)
    if paths["intrinsics.js"].is_file():
        r.intrinsics = (paths["intrinsics.js"], read_camera_config(paths["intrinsics.js"]))
    if paths["params.js"].is_file():
        r.params = (paths["params.js"], read_params_doc(paths["params.js"]))
    if paths["poses.js"].is_file():
        r.poses = (paths["poses.js"], read_poses_doc(paths["poses.js"]))
    if paths["scene.js"].is_file():
        r.scene = (paths["scene.js"], board_from_scene(read_scene_doc(paths["scene.js"]), paths["scene.js"]))
    if paths["images.js"].is_file():
        r.images = (paths["images.js"], read_images_doc(paths["images.js"]))
    r.files = [n for n, p in paths.items() if p.is_file()]
    bin_gz = _one(src, "*.bin.gz", result)
    if bin_gz is not None:
        r.observations = ([bin_gz], read_observations_bin(bin_gz))
    else:
        bap_csv = _one(src, "bap*.csv", result)
        if bap_csv is not None:
            center_csv = _one(src, "center*.csv", result)
            files = [p for p in (bap_csv, center_csv) if p is not None]
            r.observations = (files, read_observations_csv(bap_csv, center_csv))
    if r.observations is not None:
        r.files += [p.name for p in r.observations[0]]
    return r


# --- merging -----------------------------------------------------------------------------
def _first(reads: list[_Read], attr: str) -> Any:
    """The first source's value of ``attr``; every other source that has one must agree."""
    values = [getattr(r, attr) for r in reads if getattr(r, attr) is not None]
    for other in values[1:]:
        _check_same_doc(values[0], other)
    return values[0] if values else None


def _board(reads: list[_Read]) -> Checkerboard:
    boards = [r.scene for r in reads if r.scene is not None]
    if not boards:
        more = " (nor in the other sources)" if len(reads) > 1 else ""
        raise InputFileError(
            reads[0].folder, f"no scene.js{more}: the checkerboard geometry (lph, x_grid, y_grid) is unknown"
        )
    (p0, b0), rest = boards[0], boards[1:]
    for p, b in rest:
        if (b.columns, b.rows, b.square_mm) != (b0.columns, b0.rows, b0.square_mm):
            raise _disagree(p0, p, "checkerboards[0]", f"{b0.columns}x{b0.rows} nodes of {b0.square_mm:g} mm",
                            f"{b.columns}x{b.rows} nodes of {b.square_mm:g} mm")
    return b0


def _stored_bit_depth(read: _Read) -> int | None:
    """The bit depth of the first existing image an ``images.js`` lists (None: none exists)."""
    assert read.images is not None
    _, doc = read.images
    for im in (*doc.whites, *([doc.mask] if doc.mask is not None else []), *doc.checkerboards):
        stored, found, _ = _resolve(read.folder, im)
        if not found:
            continue
        try:
            with captured_stderr():
                img = cv2.imdecode(np.fromfile(stored, dtype=np.uint8), cv2.IMREAD_UNCHANGED)
        except OSError:
            continue
        if img is not None:
            return 16 if img.dtype == np.uint16 else 8
    return None


def _whites(reads: list[_Read], result: ImportResult | None = None) -> tuple[list[ImageEntry], list[str], ImageFormat]:
    """White and devignetting entries (from the first source that lists them, in its order), the
    keys of their files, and the image format; every other source that lists them must agree.

    Without a ``meta.format`` the bit depth is that of the first image that exists (it was taken as
    8, and a 16-bit dataset then refused its own images). Without a ``mask`` entry, a white at the
    checkerboards' f-number is the devignetting white, and ``result`` gets a warning saying so
    (libpleno's mask is that white: "no image with role 'devignetting'" stopped detection)."""
    listed = [r for r in reads if r.images is not None]
    fmt = ImageFormat()
    if listed:
        p0, d0 = listed[0].images  # type: ignore[misc]
        fmt = _image_format(d0)
        if d0.bit_depth is None:
            probed = _stored_bit_depth(listed[0])
            if probed is not None:
                fmt = dataclasses.replace(fmt, bit_depth=probed)
        for r in listed[1:]:
            p, d = r.images  # type: ignore[misc]
            f = _image_format(d)
            if f != fmt:
                raise _disagree(p0, p, "meta (image format)", f"{fmt.bit_depth}-bit {fmt.color}",
                                f"{f.bit_depth}-bit {f.color}")
    entries: list[ImageEntry] = []
    keys: list[str] = []
    for what, role in (("whites", ImageRole.WHITE), ("mask", ImageRole.DEVIGNETTING)):
        ref: tuple[Path, list[tuple[float, str, str]]] | None = None
        for r in listed:
            path, doc = r.images  # type: ignore[misc]
            images = list(doc.whites) if what == "whites" else ([doc.mask] if doc.mask is not None else [])
            if not images:
                continue
            resolved: list[tuple[float, str, str]] = []
            seen: dict[str, int] = {}
            for i, im in enumerate(images):
                where = f"{what}[{i}]" if what == "whites" else "mask"
                if im.fnumber is None or not (math.isfinite(im.fnumber) and im.fnumber > 0):
                    got = "none" if im.fnumber is None else f"{im.fnumber:g}"
                    raise InputFileError(
                        path, f"key '{where}.fnumber' (main-lens f-number of a white image) must be > 0, got {got}"
                    )
                stored, _found, key = _resolve(r.folder, im)
                if key in seen:
                    raise InputFileError(
                        path, f"{where} {im.path} is also {what}[{seen[key]}]: list each white image once"
                    )
                seen[key] = i
                resolved.append((im.fnumber, stored, key))
            if ref is None:
                ref = (path, resolved)
                entries += [ImageEntry(stored, role, f_number=fnumber) for fnumber, stored, _ in resolved]
                keys += [key for _, _, key in resolved]
                continue
            a, b = sorted(ref[1]), sorted(resolved)
            same = len(a) == len(b) and all(
                x[0] == y[0] and _same_file(x[2], y[2]) for x, y in zip(a, b, strict=True)
            )
            if not same:
                show = ", ".join(f"N={x[0]:g} {Path(x[2]).name}" for x in a)
                other = ", ".join(f"N={x[0]:g} {Path(x[2]).name}" for x in b)
                raise _disagree(ref[0], path, what, show, other)
    if listed and not any(e.role is ImageRole.DEVIGNETTING for e in entries):
        boards = {im.fnumber for r in listed for im in r.images[1].checkerboards if im.fnumber is not None}  # type: ignore[index]
        same = [e for e in entries if e.role is ImageRole.WHITE and len(boards) == 1 and e.f_number in boards]
        if same:
            entries.append(ImageEntry(same[0].path, ImageRole.DEVIGNETTING, f_number=same[0].f_number))
            keys.append(keys[entries.index(same[0])])
            if result is not None:
                result.warnings.append(
                    f"{listed[0].images[0]}: no 'mask' entry; the white {Path(same[0].path).name} at the checkerboards' "  # type: ignore[index]
                    f"f/{same[0].f_number:g} is used as the devignetting white")
    return entries, keys, fmt


def _warn_missing(reads: list[_Read], result: ImportResult) -> None:
    """One warning per images.js that lists images which do not exist (their entries are kept)."""
    for r in reads:
        if r.images is None:
            continue
        path, doc = r.images
        listed = [*doc.whites, *([doc.mask] if doc.mask is not None else []), *doc.checkerboards]
        missing = [im.path for im in listed if not _resolve(r.folder, im)[1]]
        if missing:
            result.warnings.append(
                f"{path}: {len(missing)} of {len(listed)} images do not exist (relative to {r.folder} or absolute), "
                f"e.g. {missing[0]}; their entries are kept"
            )


def _frame_entries(reads: list[_Read], white_keys: list[str], result: ImportResult) -> list[ImageEntry]:
    entries: list[ImageEntry] = []
    frames: dict[int, str] = {}
    files: dict[str, str] = {}
    whites = set(white_keys)
    sequence = 0
    for r in reads:
        s = r.source
        if r.images is None:
            if s.role is not ImageRole.CALIBRATION:
                raise InputFileError(
                    r.folder, f"no images.js: a {s.role.value} source needs its checkerboard images listed there"
                )
            continue
        path, doc = r.images
        listed = []
        for i, c in enumerate(doc.checkerboards):
            where = f"{path} checkerboards[{i}]"
            frame = c.frame if c.frame is not None else i  # reference §6.7
            how = "" if c.frame is not None else " (its position: the entry has no 'frame')"
            if frame < 0:
                raise InputFileError(path, f"key 'checkerboards[{i}].frame' must be >= 0, got {frame}")
            if frame in frames:
                raise InputFileError(
                    path, f"checkerboards[{i}] has frame {frame}{how}, already used by {frames[frame]}: frame ids "
                    "must be unique across the dataset; give the frames distinct 'frame' values in images.js"
                )
            frames[frame] = where
            stored, _found, key = _resolve(r.folder, c)
            if key in files:
                raise InputFileError(
                    path, f"checkerboards[{i}] {c.path} is also {files[key]}: an image belongs to one frame and "
                    "one role; list it once"
                )
            if key in whites:
                raise InputFileError(
                    path, f"checkerboards[{i}] {c.path} is also listed as a white image: an image has one role; "
                    "remove it from one list"
                )
            files[key] = where
            listed.append((frame, stored, c))
        if s.role is ImageRole.TRANSLATION:
            if len(listed) < 2:
                raise InputFileError(
                    path, f"a translation source needs >= 2 checkerboard frames to measure displacements, "
                    f"got {len(listed)}; list its frames in 'checkerboards' or give it another role"
                )
            assert s.step_mm is not None
            for j, (frame, stored, c) in enumerate(sorted(listed, key=lambda x: x[0])):
                entries.append(ImageEntry(stored, s.role, f_number=c.fnumber, frame=frame, sequence=sequence,
                                          displacement_mm=j * s.step_mm))
            sequence += 1
        else:
            if s.role is ImageRole.EVALUATION and not listed:
                raise InputFileError(
                    path, "an evaluation source needs >= 1 checkerboard image, got none; list them in 'checkerboards'"
                )
            entries += [ImageEntry(stored, s.role, f_number=c.fnumber, frame=frame) for frame, stored, c in listed]
        result.frames[s.role.value] = result.frames.get(s.role.value, 0) + len(listed)
    result.sequences = sequence
    return entries


def _poses(reads: list[_Read]) -> tuple[FramePoseDoc, ...] | None:
    merged: dict[int, tuple[Path, FramePoseDoc]] = {}
    for r in reads:
        if r.poses is None:
            continue
        path, doc = r.poses
        for e in doc:
            if e.frame in merged and merged[e.frame][1] != e:
                raise InputFileError(
                    path, f"frame {e.frame} has a different pose in {merged[e.frame][0]}: frame ids must be unique "
                    "across the dataset"
                )
            merged.setdefault(e.frame, (path, e))
    return tuple(e for _, e in merged.values()) if merged else None


def _same_observations(a: Observations, b: Observations) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(
        [*a.bap.columns().values(), *a.mic.columns().values()],
        [*b.bap.columns().values(), *b.mic.columns().values()], strict=True))


def _observations(reads: list[_Read]) -> Observations | None:
    """Observations of all sources: identical files count once; otherwise features are merged by
    frame (frames disjoint) and the micro-image centres must be the same."""
    parts: list[tuple[Path, Observations]] = []
    for r in reads:
        if r.observations is not None and not any(_same_observations(o, r.observations[1]) for _, o in parts):
            parts.append((r.observations[0][0], r.observations[1]))
    if not parts:
        return None
    p0, first = parts[0]
    frames = {int(f): p0 for f in np.unique(first.bap.frame)}
    for p, obs in parts[1:]:
        for f in np.unique(obs.bap.frame):
            if int(f) in frames:
                raise InputFileError(
                    p, f"frame {int(f)} also has features in {frames[int(f)]}: frame ids must be unique across "
                    "the dataset"
                )
            frames[int(f)] = p
        m0, m = first.mic, obs.mic
        if not all(np.array_equal(getattr(m0, c), getattr(m, c)) for c in ("k", "l", "u", "v")):
            raise _disagree(p0, p, "micro-image centres", f"{len(m0)} centres", f"{len(m)} other centres")
    if len(parts) == 1:
        return first
    return Observations(BapFeatures.concatenate([o.bap for _, o in parts]), first.mic, first.positions)


# --- the import --------------------------------------------------------------------------
def import_libpleno_folders(
    sources: Sequence[LibplenoSource], dataset: str | Path, *, name: str | None = None
) -> ImportResult:
    """Convert libpleno folders, each with a role, into one plenocal dataset folder.

    Parameters
    ----------
    sources : the folders (only read) and the roles of their checkerboard images, in order;
        translation sources carry ``step_mm``.
    dataset : output dataset folder (created if needed); must not be or lie inside a source.
    name : dataset name (default: the first source folder's name).

    Returns
    -------
    ImportResult
        Files written, frames per role, and warnings (e.g. images listed in ``images.js`` that
        do not exist).

    Raises
    ------
    DataError
        A role other than calibration / evaluation / translation, a translation source without a
        finite step > 0 mm, a step given for another role.
    InputFileError
        A missing source folder or a source listed twice; the dataset folder equal to or inside a
        source; no ``camera.js``/``intrinsics.js`` or no ``scene.js`` in any source; a malformed
        file or an impossible value in one (pixel size <= 0, ``mode`` other than 0, 1, 2...);
        sources that disagree (camera, target, whites, mask, image format, poses, micro-image
        centres); a frame id or image used twice; a translation source with < 2 frames.
    """
    out = Path(dataset)
    sources = [dataclasses.replace(s, folder=Path(s.folder)) for s in sources]
    _check_sources(sources, out)
    result = ImportResult(out)

    # Read and validate everything before writing anything.
    reads = [_read_source(s, result) for s in sources]
    cam = _first(reads, "camera")
    intr = _first(reads, "intrinsics")
    if cam is None and intr is None:
        more = " (nor in the other sources)" if len(reads) > 1 else ""
        raise InputFileError(
            reads[0].folder,
            f"no camera.js or intrinsics.js{more}: the camera spec (sensor, lattice, main lens) is unknown",
        )
    board = _board(reads)
    camera = camera_from_config(intr[1], intr[0]) if intr is not None else None
    if cam is not None:
        spec = _spec(*cam, trust_mode=True)
    else:
        assert intr is not None and camera is not None
        spec = dataclasses.replace(_spec(*intr, trust_mode=False), configuration=camera.configuration)
    params = _first(reads, "params")
    omega = omega_from_params(params[1], params[0]) if params is not None else None
    pose_docs = _poses(reads)
    poses = poses_from_doc(pose_docs) if pose_docs is not None else None
    white_entries, white_keys, image_format = _whites(reads, result)
    entries = tuple(white_entries + _frame_entries(reads, white_keys, result))
    for r in reads:  # values finite, indices on the lattice, positions on the sensor, no duplicates
        if r.observations is not None:
            validate_observations(r.observations[1], r.observations[0][0], lattice=spec.lattice,
                                  image_size=(spec.width_px, spec.height_px), n_nodes=board.n_nodes)
    observations = _observations(reads)
    _warn_missing(reads, result)
    provenance_sources = []
    for r in reads:
        d: dict[str, Any] = {"folder": str(r.folder.resolve()), "role": r.source.role.value, "files": r.files}
        if r.source.role is ImageRole.TRANSLATION:
            d["step_mm"] = float(r.source.step_mm)  # type: ignore[arg-type]
        provenance_sources.append(d)
    manifest = Manifest(
        camera_spec=spec,
        target=board,
        images=entries,
        image_format=image_format,
        name=name if name is not None else sources[0].folder.resolve().name,
        observations=OBSERVATIONS_NAME if observations is not None else None,
        provenance={"generator": "plenocal import-libpleno", "version": __version__, "sources": provenance_sources},
    )
    try:  # the manifest must read back: never write a dataset that a later stage refuses
        manifest_from_json(Fields(out / MANIFEST_NAME, manifest_to_json(manifest)))
    except PlenocalError as exc:
        raise DataError(
            f"{sources[0].folder}: the imported manifest would be invalid ({exc}); nothing was written"
        ) from None
    if camera is not None:  # and so must the camera (ranges: focal length, f-number, sizes...)
        assert intr is not None
        try:
            camera_from_json(Fields(out / CAMERA_NAME, camera_to_json(camera, internal_parameters=omega)))
        except PlenocalError as exc:
            problem = exc.problem if isinstance(exc, InputFileError) else str(exc)
            raise InputFileError(intr[0], f"the imported camera would be invalid: {problem} (in plenocal's "
                                          "camera.json terms); nothing was written") from None

    # Write the files into a temporary folder that then takes the dataset folder's place: the
    # dataset is complete or absent, never half written (an existing one holding anything but a
    # previous import's files is refused).
    with atomic_folder(out, owned=DATASET_FILES) as tmp:
        if camera is not None:
            write_camera(tmp / CAMERA_NAME, camera, internal_parameters=omega)
            result.written.append(out / CAMERA_NAME)
        elif omega is not None:
            write_internal_parameters(tmp / INTERNAL_PARAMETERS_NAME, omega)
            result.written.append(out / INTERNAL_PARAMETERS_NAME)
        if poses is not None:
            write_poses(tmp / POSES_NAME, poses)
            result.written.append(out / POSES_NAME)
        if observations is not None:
            write_observations(tmp / OBSERVATIONS_NAME, observations)
            result.written.append(out / OBSERVATIONS_NAME)
        write_manifest(tmp, manifest)
        result.written.append(out / MANIFEST_NAME)
    return result


def import_libpleno_folder(src: str | Path, dataset: str | Path, *, name: str | None = None) -> ImportResult:
    """Convert one folder of libpleno files into a plenocal dataset (all checkerboards calibration).

    See :func:`import_libpleno_folders`.
    """
    return import_libpleno_folders([LibplenoSource(Path(src))], dataset, name=name)


__all__ = ["ImportResult", "LibplenoSource", "import_libpleno_folder", "import_libpleno_folders"]
