"""``plenocal export-libpleno CAMERA -o DIR [--generation head|legacy] [--poses POSES]``: a plenocal camera as libpleno files.

``--generation head`` (default) writes what libpleno HEAD, COMPOTE and PRISM read: ``intrinsics.js``
with ``distortions_inverse`` fitted to the forward distortion and HEAD's computed fields, and
``params.js`` (Ω of the camera file, or the camera's own when the file has none). ``--generation
legacy`` writes the Dec-2020 layout of the paper's files (``params.js`` only when the camera file
carries Ω). ``docs/formats.md`` describes both.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from plenocal.errors import DataError, InputFileError
from plenocal.io.atomic import atomic_files
from plenocal.io.camera import read_camera_file
from plenocal.io.libpleno import write_params
from plenocal.io.libpleno import write_poses as write_poses_js
from plenocal.io.libpleno.convert import Generation, libpleno_lattice, write_intrinsics
from plenocal.io.libpleno.inverse_distortion import (
    InverseDistortionFit,
    error_on_sensor_px,
    fit_camera_inverse_distortion,
)
from plenocal.io.outputs import check_output_folder
from plenocal.io.poses import read_poses
from plenocal.model.camera import Configuration, PlenopticCamera, RhoForm
from plenocal.model.white import internal_parameters

WRITES = ("intrinsics.js", "params.js", "poses.js")
"""What ``export-libpleno`` writes into its folder (which may hold other files: a libpleno folder)."""
HELP = "write a plenocal camera.json as libpleno intrinsics.js + params.js (HEAD generation, or legacy)"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("export-libpleno", help=HELP, description=HELP[0].upper() + HELP[1:] + ".")
    p.add_argument("camera", type=Path, metavar="CAMERA", help="plenocal camera.json")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="DIR", help="folder to write into")
    p.add_argument(
        "--generation", choices=[g.value for g in Generation], default=Generation.HEAD.value,
        help="intrinsics.js layout: 'head' (libpleno HEAD, COMPOTE, PRISM; default) or 'legacy' (Dec-2020, the paper's files)",
    )
    p.add_argument("--poses", type=Path, default=None, help="also write this plenocal poses.json as poses.js")
    p.set_defaults(func=run)


def exit_pupil_note(camera: PlenopticCamera) -> str:
    """What libpleno loses of a camera whose exit pupil is off the lens plane (e ≠ 0): its model
    projects the micro-image centres from the main-lens centre, so they move by up to the returned
    number of pixels; BAP features (chief rays) and ρ are unchanged."""
    from plenocal.model.camera import MainLens
    from plenocal.model.projection import micro_image_centres

    ml = camera.main_lens
    k, l = camera.mla.lattice.all_indices()
    lens_plane = camera.replace(main_lens=MainLens(ml.focal_length_mm, ml.f_number))
    shift = np.hypot(*(micro_image_centres(camera, k, l) - micro_image_centres(lens_plane, k, l)).T)
    return (f"libpleno has no exit pupil (this camera's is {ml.exit_pupil_mm:+.2f} mm from the main lens): it projects "
            f"the micro-image centres from the lens centre, {shift.max():.2f} px (RMS {np.sqrt(np.mean(shift**2)):.2f} px) "
            f"away from this camera's; its BAP features and ρ are unchanged")


def notes(camera: PlenopticCamera, generation: Generation, fit: InverseDistortionFit | None) -> list[str]:
    """What the user should know about an export: padding, ρ form, HEAD's mode, the inverse fit."""
    out = []
    lat = camera.mla.lattice
    padded = libpleno_lattice(lat)
    if padded != lat:
        what = "row" if padded.height != lat.height else "column"
        out.append(
            f"MLA {lat.width}x{lat.height} written as {padded.width}x{padded.height}: one {what} added beyond the last "
            f"for libpleno's {what} parity (docs/formats.md); import-libpleno removes it"
        )
    libpleno_rho = RhoForm.HEAD if generation is Generation.HEAD else RhoForm.LEGACY
    if camera.rho_form is not libpleno_rho:
        out.append(
            f"libpleno {generation.value} computes ρ in the {libpleno_rho.value} form; this camera's is "
            f"{camera.rho_form.value} (docs/formats.md gives the differences)"
        )
    if generation is Generation.HEAD and camera.n_types > 0 and camera.configuration is Configuration.KEPLERIAN:
        out.append("libpleno HEAD treats a Keplerian multi-focus camera as unfocused (mode 0; reference §15 item 11)")
    if camera.main_lens.exit_pupil_mm != 0.0:
        out.append(exit_pupil_note(camera))
    if camera.distortion.has_depth:
        dist = camera.distortion
        r = float(np.hypot(camera.sensor.width_px, camera.sensor.height_px)) / 2.0 * camera.sensor.pixel_size_mm
        out.append(f"libpleno does not apply this camera's depth distortion (Z1 {dist.z1:.3g} /mm, Z2 {dist.z2:.3g} /mm³; "
                   f"its Heinze model with D0 = 0, left off by its calibration): its virtual points lie up to "
                   f"{abs(float(dist.depth(np.array(r), np.array(0.0)))):.3g} mm off along the axis at the sensor's corner")
    if fit is not None:
        px = error_on_sensor_px(camera, fit.max_error_mm)
        out.append(
            f"distortions_inverse fitted over x {fit.x_range_mm[0]:.2f}..{fit.x_range_mm[1]:.2f} mm, "
            f"y {fit.y_range_mm[0]:.2f}..{fit.y_range_mm[1]:.2f} mm: inverse∘forward within {fit.max_error_mm * 1e3:.2f} µm "
            f"(RMS {fit.rms_error_mm * 1e3:.2f} µm) of identity, about {px:.2g} px on the sensor in PRISM's rays; "
            f"the distortion moves points up to {fit.max_shift_mm * 1e3:.0f} µm"
        )
    return out


def run(args: argparse.Namespace) -> int:
    out: Path = args.output
    check_output_folder(out, inputs=[args.camera, args.poses], owned=None, writes=WRITES)
    cam_file = read_camera_file(args.camera)
    camera = cam_file.camera
    generation = Generation(args.generation)
    poses = read_poses(args.poses) if args.poses is not None else None
    fit = fit_camera_inverse_distortion(camera) if generation is Generation.HEAD else None
    omega = cam_file.internal_parameters
    messages = notes(camera, generation, fit)
    if omega is None and generation is Generation.HEAD:
        omega = internal_parameters(camera)  # libpleno's ρ reads dc from params.js
        messages.append("params.js: Ω of the camera itself (the camera file has none)")
    with atomic_files(out) as tmp:  # the files join the folder together, or none does
        try:
            written = [
                write_intrinsics(tmp / "intrinsics.js", camera, generation=generation,
                                 inverse_distortion=None if fit is None else fit.inverse)
            ]
        except DataError as exc:  # not expressible in libpleno's conventions
            raise InputFileError(args.camera, str(exc)) from None
        if omega is not None:
            written.append(write_params(tmp / "params.js", omega))
        if poses is not None:
            written.append(write_poses_js(tmp / "poses.js", poses))
    print(f"wrote {', '.join(p.name for p in written)} ({generation.value} generation) to {out}")
    for line in messages:
        print(f"  note: {line}")
    return 0
