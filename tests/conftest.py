"""Shared fixtures: the R12-A camera of the libpleno examples, from ``tests/data/r12a`` (plenocal's
own formats; ``tests/data/README.md`` says where the numbers come from)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

R12A_DATA = Path(__file__).resolve().parent / "data" / "r12a"


@pytest.fixture(scope="session")
def kappa_range_mm() -> tuple[float, float]:
    """The κ tests' frame depths: the far part of the R12-A preset's 175–400 mm, where its
    micro-images' blur radius |ρ| stays ≲ 3.8 px and the 9 px windows of ``calibrate_kappa`` hold
    the blur (paper §5.3). Nearer (|ρ| 4.2 px at 225 mm) the window truncates it and κ grows with
    |ρ|: per frame 0.64 at 320–335 mm, 0.78 at 225–228 mm, κ 0.75 over frames at 225–335 mm (0.58
    with 13 px windows, no trend; 2026-11-27). Before that date the simulator's poses lay beyond
    ~280 mm whatever the range."""
    return (280.0, 400.0)


@pytest.fixture(scope="session")
def r12a_manifest():
    """Camera spec, target and image list (libpleno's camera.js, scene.js, images.js)."""
    from plenocal.io import read_manifest

    return read_manifest(R12A_DATA / "manifest.json")


@pytest.fixture(scope="session")
def r12a_camera_file():
    from plenocal.io import read_camera_file

    return read_camera_file(R12A_DATA / "camera.json")


@pytest.fixture(scope="session")
def r12a_camera(r12a_camera_file):
    """The calibrated camera (libpleno's intrinsics.js)."""
    return r12a_camera_file.camera


@pytest.fixture(scope="session")
def r12a_truth(r12a_camera):
    """The same camera with the calibration's default ρ form: the truth of synthetic
    observations that the default calibration models (the reference files are legacy)."""
    from plenocal.calib.calibrate import DEFAULT_RHO_FORM
    from plenocal.model.camera import RhoForm

    return r12a_camera.replace(rho_form=RhoForm(DEFAULT_RHO_FORM))


@pytest.fixture(scope="session")
def r12a_params(r12a_camera_file):
    """Ω (libpleno's params.js)."""
    assert r12a_camera_file.internal_parameters is not None
    return r12a_camera_file.internal_parameters


@pytest.fixture(scope="session")
def r12a_poses():
    """{frame: cam_from_world} of the 16 checkerboard frames (libpleno's poses.js)."""
    from plenocal.io import read_poses

    return read_poses(R12A_DATA / "poses.json")


@pytest.fixture(scope="session")
def r12a_board(r12a_manifest):
    """The 9×5-node, 10 mm checkerboard (libpleno's scene.js)."""
    return r12a_manifest.target


def write_libpleno_folder(folder: Path, manifest, camera, omega, poses) -> Path:
    """Write a camera spec, camera, Ω, poses, target and image list as a libpleno folder
    (``camera.js``, ``intrinsics.js``, ``params.js``, ``poses.js``, ``scene.js``, ``images.js``)
    with plenocal's libpleno writers."""
    from plenocal.io.dataset import ImageRole
    from plenocal.io.libpleno import (
        CONFIGURATION_TO_MODE,
        INFINITY_MM,
        KIND_TO_GEOMETRY,
        CameraConfigDoc,
        ImageDoc,
        ImagesDoc,
        MainLensDoc,
        MeshDoc,
        SensorDoc,
        write_camera_config,
        write_images_doc,
        write_intrinsics,
        write_params,
        write_poses,
        write_scene,
    )

    folder.mkdir(parents=True, exist_ok=True)
    spec = manifest.camera_spec
    calibration = manifest.with_role(ImageRole.CALIBRATION)
    (mask,) = manifest.with_role(ImageRole.DEVIGNETTING)
    write_camera_config(
        folder / "camera.js",
        CameraConfigDoc(
            I=spec.n_types,
            sensor=SensorDoc(spec.pixel_size_mm, spec.width_px, spec.height_px),
            main_lens=MainLensDoc(spec.main_lens_focal_length_mm, aperture=calibration[0].f_number),
            dist_focus=INFINITY_MM if math.isinf(spec.focus_distance_mm) else spec.focus_distance_mm,
            mode=CONFIGURATION_TO_MODE[spec.configuration],
            mia=MeshDoc(KIND_TO_GEOMETRY[spec.lattice.kind], spec.lattice.width, spec.lattice.height),
        ),
    )
    write_intrinsics(folder / "intrinsics.js", camera)
    write_params(folder / "params.js", omega)
    write_poses(folder / "poses.js", poses)
    write_scene(folder / "scene.js", manifest.target)
    color = manifest.image_format.color
    write_images_doc(
        folder / "images.js",
        ImagesDoc(
            whites=tuple(ImageDoc(e.path, e.f_number) for e in manifest.with_role(ImageRole.WHITE)),
            checkerboards=tuple(ImageDoc(e.path, e.f_number, e.frame) for e in calibration),
            mask=ImageDoc(mask.path, mask.f_number),
            debayered=color != "bayer-rggb",
            rgb=color == "rgb",
            bit_depth=manifest.image_format.bit_depth,
        ),
    )
    return folder


@pytest.fixture(scope="session")
def r12a_libpleno_dir(tmp_path_factory, r12a_manifest, r12a_camera, r12a_params, r12a_poses) -> Path:
    """The R12-A data as a libpleno folder, written by plenocal in a temporary directory.

    Tests copy it before changing anything in it.
    """
    return write_libpleno_folder(
        tmp_path_factory.mktemp("libpleno-r12a"), r12a_manifest, r12a_camera, r12a_params, r12a_poses
    )
