"""Import a folder of libpleno files as a plenocal dataset (``plenocal import-libpleno``).

Reads whichever of ``camera.js``, ``intrinsics.js``, ``params.js``, ``poses.js``, ``scene.js``,
``images.js``, ``linked-observations*.bin.gz``, ``bap*.csv`` / ``center*.csv`` are present and
writes, into the dataset folder:

- ``manifest.json`` (camera spec from ``camera.js``, else ``intrinsics.js``; target from
  ``scene.js``; image entries from ``images.js``), written last;
- ``camera.json`` from ``intrinsics.js``, carrying Ω when ``params.js`` is present;
- ``internal_parameters.json`` from ``params.js`` when there is no ``intrinsics.js``;
- ``poses.json`` from ``poses.js``;
- ``observations.npz`` from the ``.bin.gz`` (preferred: full precision) or the CSVs.

The source folder is only read.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

from plenocal import __version__
from plenocal.errors import InputFileError
from plenocal.io.camera import write_camera, write_internal_parameters
from plenocal.io.dataset import (
    CAMERA_NAME,
    INTERNAL_PARAMETERS_NAME,
    OBSERVATIONS_NAME,
    POSES_NAME,
    CameraSpec,
    ImageEntry,
    ImageFormat,
    ImageRole,
    Manifest,
    write_manifest,
)
from plenocal.io.libpleno.convert import (
    GEOMETRY_TO_KIND,
    INFINITY_MM,
    MODE_TO_CONFIGURATION,
    board_from_scene,
    camera_from_config,
    omega_from_params,
    poses_from_doc,
)
from plenocal.io.libpleno.documents import (
    CameraConfigDoc,
    ImageDoc,
    ImagesDoc,
    read_camera_config,
    read_images_doc,
    read_params_doc,
    read_poses_doc,
    read_scene_doc,
)
from plenocal.io.libpleno.observations import read_observations_bin, read_observations_csv
from plenocal.io.observations import write_observations
from plenocal.io.poses import write_poses
from plenocal.model.lattice import Lattice, TypeLayout


@dataclass
class ImportResult:
    """What :func:`import_libpleno_folder` wrote and what the user should know."""

    dataset: Path
    written: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _spec(doc: CameraConfigDoc, *, trust_mode: bool) -> CameraSpec:
    lattice = None
    mesh = doc.mia or doc.mla
    if mesh is not None and mesh.geometry in GEOMETRY_TO_KIND:
        lattice = Lattice(GEOMETRY_TO_KIND[mesh.geometry], mesh.width, mesh.height)
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
        configuration=MODE_TO_CONFIGURATION.get(doc.mode if doc.mode is not None else 2) if trust_mode else None,
    )


def _resolve(src: Path, image: ImageDoc) -> tuple[str, bool]:
    """Path to store for an image and whether it exists (absolute when found)."""
    p = Path(image.path)
    candidates = [p] if p.is_absolute() else [src / p]
    for c in candidates:
        if c.is_file():
            return str(c.resolve()), True
    return image.path, False


def _entries(src: Path, doc: ImagesDoc) -> tuple[tuple[ImageEntry, ...], list[str]]:
    entries: list[ImageEntry] = []
    missing: list[str] = []

    def add(image: ImageDoc, role: ImageRole, frame: int | None) -> None:
        path, found = _resolve(src, image)
        if not found:
            missing.append(image.path)
        entries.append(ImageEntry(path, role, f_number=image.fnumber, frame=frame))

    for w in doc.whites:
        add(w, ImageRole.WHITE, None)
    if doc.mask is not None:
        add(doc.mask, ImageRole.DEVIGNETTING, None)
    for i, c in enumerate(doc.checkerboards):
        add(c, ImageRole.CALIBRATION, c.frame if c.frame is not None else i)  # reference §6.7
    return tuple(entries), missing


def _image_format(doc: ImagesDoc) -> ImageFormat:
    debayered = True if doc.debayered is None else doc.debayered
    rgb = True if doc.rgb is None else doc.rgb
    color = "bayer-rggb" if not debayered else ("rgb" if rgb else "grey")
    return ImageFormat(bit_depth=doc.bit_depth if doc.bit_depth in (8, 16) else 8, color=color)


def _one(src: Path, pattern: str, result: ImportResult) -> Path | None:
    found = sorted(src.glob(pattern))
    if len(found) > 1:
        result.warnings.append(f"{src}: several files match {pattern}; using {found[0].name}")
    return found[0] if found else None


def import_libpleno_folder(src: str | Path, dataset: str | Path, *, name: str | None = None) -> ImportResult:
    """Convert a folder of libpleno files into a plenocal dataset folder.

    Parameters
    ----------
    src : folder with libpleno files (only read).
    dataset : output dataset folder (created if needed).
    name : dataset name (default: the source folder's name).

    Returns
    -------
    ImportResult
        Files written and warnings (e.g. images listed in ``images.js`` that do not exist).

    Raises
    ------
    InputFileError
        No ``camera.js``/``intrinsics.js`` or no ``scene.js`` in ``src``, or any malformed file.
    """
    src_p = Path(src)
    out = Path(dataset)
    if not src_p.is_dir():
        raise InputFileError(
            src_p, "source folder does not exist" if not src_p.exists() else "expected a folder of libpleno files"
        )
    if out.resolve() == src_p.resolve():
        raise InputFileError(out, "the dataset folder must differ from the libpleno source folder")
    result = ImportResult(out)
    camera_js, intrinsics_js = src_p / "camera.js", src_p / "intrinsics.js"
    params_js, poses_js = src_p / "params.js", src_p / "poses.js"
    scene_js, images_js = src_p / "scene.js", src_p / "images.js"

    # Read and validate everything before writing anything.
    cam_doc = read_camera_config(camera_js) if camera_js.is_file() else None
    intr_doc = read_camera_config(intrinsics_js) if intrinsics_js.is_file() else None
    if cam_doc is None and intr_doc is None:
        raise InputFileError(
            src_p, "no camera.js or intrinsics.js: the camera spec (sensor, lattice, main lens) is unknown"
        )
    if not scene_js.is_file():
        raise InputFileError(src_p, "no scene.js: the checkerboard geometry (lph, x_grid, y_grid) is unknown")
    board = board_from_scene(read_scene_doc(scene_js), scene_js)
    camera = camera_from_config(intr_doc, intrinsics_js) if intr_doc is not None else None
    if cam_doc is not None:
        spec = _spec(cam_doc, trust_mode=True)
    else:
        assert intr_doc is not None and camera is not None
        spec = _spec(intr_doc, trust_mode=False)
        spec = dataclasses.replace(spec, configuration=camera.configuration)
    omega = omega_from_params(read_params_doc(params_js), params_js) if params_js.is_file() else None
    poses = poses_from_doc(read_poses_doc(poses_js)) if poses_js.is_file() else None
    entries: tuple[ImageEntry, ...] = ()
    image_format = ImageFormat()
    if images_js.is_file():
        images_doc = read_images_doc(images_js)
        entries, missing = _entries(src_p, images_doc)
        image_format = _image_format(images_doc)
        if missing:
            result.warnings.append(
                f"{images_js}: {len(missing)} of {len(entries)} images do not exist (relative to "
                f"{src_p} or absolute), e.g. {missing[0]}; their entries are kept"
            )
    bin_gz = _one(src_p, "*.bin.gz", result)
    observations = None
    observation_files: list[Path] = []
    if bin_gz is not None:
        observations = read_observations_bin(bin_gz)
        observation_files = [bin_gz]
    else:
        bap_csv = _one(src_p, "bap*.csv", result)
        if bap_csv is not None:
            center_csv = _one(src_p, "center*.csv", result)
            observations = read_observations_csv(bap_csv, center_csv)
            observation_files = [p for p in (bap_csv, center_csv) if p is not None]

    # Write the data files, then the manifest last.
    if camera is not None:
        result.written.append(write_camera(out / CAMERA_NAME, camera, internal_parameters=omega))
    elif omega is not None:
        result.written.append(write_internal_parameters(out / INTERNAL_PARAMETERS_NAME, omega))
    if poses is not None:
        result.written.append(write_poses(out / POSES_NAME, poses))
    if observations is not None:
        result.written.append(write_observations(out / OBSERVATIONS_NAME, observations))
    used = [p.name for p in (camera_js, intrinsics_js, params_js, poses_js, scene_js, images_js) if p.is_file()]
    used += [p.name for p in observation_files]
    manifest = Manifest(
        camera_spec=spec,
        target=board,
        images=entries,
        image_format=image_format,
        name=name if name is not None else src_p.resolve().name,
        observations=OBSERVATIONS_NAME if observations is not None else None,
        provenance={
            "generator": "plenocal import-libpleno",
            "version": __version__,
            "source": str(src_p.resolve()),
            "files": used,
        },
    )
    result.written.append(write_manifest(out, manifest))
    return result


__all__ = ["ImportResult", "import_libpleno_folder"]
