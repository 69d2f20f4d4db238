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
from plenocal.cli.blur import file_sha256
from plenocal.errors import InputFileError, ModelError
from plenocal.io._json import write_document
from plenocal.io.camera import read_camera
from plenocal.model.profile import DEFAULT_WAVELENGTH_MM, depth_of_field

HELP = "depth-of-field and blur profile of a calibrated camera: focus planes, DoF per lens type and in total"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("profile", help=HELP, description=HELP[0].upper() + HELP[1:] + ".")
    p.add_argument("camera", type=Path, metavar="CAMERA", help="camera.json")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="OUT", help="output folder")
    p.add_argument("--wavelength-nm", type=float, default=DEFAULT_WAVELENGTH_MM * 1e6,
                   help="wavelength ν of the diffraction limit r* = 1.22·ν·N* (default 750 nm, paper §7.6)")
    p.add_argument("--r0-um", type=float, default=None,
                   help="minimal circle of confusion r0 in µm (default max(r*, s/2))")
    p.add_argument("--no-plots", action="store_true", help="skip the figure")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from plenocal.viz.profile import profile_document

    camera = read_camera(args.camera)
    if camera.n_types == 0:
        raise InputFileError(args.camera, "the camera has pinhole micro-lenses (no types): no depth of field to profile")
    if not args.wavelength_nm > 0:
        raise ModelError(f"--wavelength-nm must be > 0, got {args.wavelength_nm}")
    if args.r0_um is not None and not args.r0_um > 0:
        raise ModelError(f"--r0-um must be > 0, got {args.r0_um}")
    wavelength = args.wavelength_nm * 1e-6
    r0 = None if args.r0_um is None else args.r0_um * 1e-3
    body = profile_document(camera, wavelength_mm=wavelength, r0_mm=r0)
    doc = {
        "format": "plenocal-profile", "version": 1, "plenocal_version": __version__,
        "inputs": {"camera": {"path": str(args.camera), "sha256": file_sha256(args.camera)}},
        "settings": {"wavelength_nm": args.wavelength_nm, "r0_um": args.r0_um},
    }
    doc.update(body)
    out = Path(args.output)
    path = write_document(out / "profile.json", doc)
    if not args.no_plots:
        from plenocal.viz import save_figure
        from plenocal.viz.profile import blur_profile_figure

        save_figure(blur_profile_figure(camera, depth_of_field(camera, r0_mm=r0, wavelength_mm=wavelength)), out / "profile")
    tot = body["total"]
    dof_mm = tot["dof_object_mm"]
    dof_txt = "∞" if dof_mm is None or not math.isfinite(dof_mm) else f"{dof_mm:.2f} mm"
    lo, hi = tot["object_mm"]
    print(
        f"total DoF {dof_txt} (objects {lo:.1f}..{'∞' if hi is None else f'{hi:.1f}'} mm, virtual depth "
        f"{tot['virtual_depth'][0]:.3f}..{tot['virtual_depth'][1]:.3f}); r0 = {body['r0_mm'] * 1e3:.2f} µm; wrote {path}"
    )
    return 0
