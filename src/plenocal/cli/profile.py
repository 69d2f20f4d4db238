"""``plenocal profile CAMERA -o OUT``: focus planes, depths of field and blur profile (paper §2.4).

Writes ``OUT/profile.json`` (every number: r0, per-type focus planes and near/far limits in MLA
space, virtual depth and object space, per-type and total depth of field, the sampled blur
profile, the camera's SHA-256) and ``OUT/profile.png|svg`` (paper fig:blurprofileobj).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from plenocal import __version__
from plenocal.cli._args import bounded_float
from plenocal.cli.blur import file_sha256
from plenocal.errors import DataError, InputFileError, ModelError
from plenocal.io._json import write_document
from plenocal.io.atomic import atomic_folder
from plenocal.io.camera import read_camera
from plenocal.io.outputs import STAGE_RECORD, check_output_folder
from plenocal.model.profile import DEFAULT_WAVELENGTH_MM, depth_of_field

OUTPUTS = ("profile.json", "profile.png", "profile.svg", STAGE_RECORD)
"""What ``profile`` writes in its output folder (replaced as a whole)."""
MAX_WAVELENGTH_NM = 100_000.0
"""Longest wavelength accepted (far infrared); visible light is 380–750 nm."""
MAX_R0_UM = 1e6
"""Largest minimal circle of confusion, µm (1 m)."""
HELP = "depth-of-field and blur profile of a calibrated camera: focus planes, DoF per lens type and in total"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("profile", help=HELP, description=HELP[0].upper() + HELP[1:] + ".")
    p.add_argument("camera", type=Path, metavar="CAMERA", help="camera.json")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="OUT", help="output folder")
    p.add_argument("--wavelength-nm", type=bounded_float(0.0, MAX_WAVELENGTH_NM, low_open=True),
                   default=DEFAULT_WAVELENGTH_MM * 1e6,
                   help="wavelength ν of the diffraction limit r* = 1.22·ν·N* (default 750 nm, paper §7.6)")
    p.add_argument("--r0-um", type=bounded_float(0.0, MAX_R0_UM, low_open=True), default=None,
                   help="minimal circle of confusion r0 in µm (default max(r*, s/2))")
    p.add_argument("--no-plots", action="store_true", help="skip the figure")
    p.set_defaults(func=run)


def _finite_numbers(doc: object) -> bool:
    """No NaN in a JSON-ready document (∞ is written as null by the profile and allowed)."""
    if isinstance(doc, dict):
        return all(_finite_numbers(v) for v in doc.values())
    if isinstance(doc, list | tuple):
        return all(_finite_numbers(v) for v in doc)
    if isinstance(doc, float):
        return not math.isnan(doc)
    return True


def run(args: argparse.Namespace) -> int:
    from plenocal.viz.profile import profile_document

    out = Path(args.output)
    check_output_folder(out, inputs=[args.camera], owned=OUTPUTS)
    camera = read_camera(args.camera)
    if camera.n_types == 0:
        raise InputFileError(args.camera, "the camera has pinhole micro-lenses (no types): no depth of field to profile")
    wavelength = args.wavelength_nm * 1e-6
    r0 = None if args.r0_um is None else args.r0_um * 1e-3
    try:  # everything computed (figure included) before anything is written
        body = profile_document(camera, wavelength_mm=wavelength, r0_mm=r0)
        fig = None
        if not args.no_plots:
            from plenocal.viz.profile import blur_profile_figure

            fig = blur_profile_figure(camera, depth_of_field(camera, r0_mm=r0, wavelength_mm=wavelength))
    except (ModelError, DataError, ValueError, OverflowError, ZeroDivisionError) as exc:
        raise InputFileError(args.camera, f"no depth-of-field profile for this camera ({exc})") from None
    if not _finite_numbers(body):
        raise InputFileError(args.camera, "the depth-of-field profile of this camera is not finite (check F, D, d "
                                          "and the micro-lens focal lengths; e.g. a calibrated camera written with "
                                          "--allow-failed-checks)")
    doc = {
        "format": "plenocal-profile", "version": 1, "plenocal_version": __version__,
        "inputs": {"camera": {"path": str(args.camera), "sha256": file_sha256(args.camera)}},
        "settings": {"wavelength_nm": args.wavelength_nm, "r0_um": args.r0_um},
    }
    doc.update(body)
    with atomic_folder(out, owned=OUTPUTS) as tmp:
        write_document(tmp / "profile.json", doc)
        if fig is not None:
            from plenocal.viz import save_figure

            save_figure(fig, tmp / "profile")
    path = out / "profile.json"
    tot = body["total"]
    dof_mm = tot["dof_object_mm"]
    dof_txt = "∞" if dof_mm is None or not math.isfinite(dof_mm) else f"{dof_mm:.2f} mm"
    lo, hi = tot["object_mm"]
    print(
        f"total DoF {dof_txt} (objects {lo:.1f}..{'∞' if hi is None else f'{hi:.1f}'} mm, virtual depth "
        f"{tot['virtual_depth'][0]:.3f}..{tot['virtual_depth'][1]:.3f}); r0 = {body['r0_mm'] * 1e3:.2f} µm; wrote {path}"
    )
    return 0
