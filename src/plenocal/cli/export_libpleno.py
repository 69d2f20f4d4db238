"""``plenocal export-libpleno CAMERA -o DIR``: a plenocal camera as libpleno files."""

from __future__ import annotations

import argparse
from pathlib import Path

from plenocal.errors import DataError, InputFileError
from plenocal.io.camera import read_camera_file
from plenocal.io.libpleno import write_intrinsics, write_params
from plenocal.io.libpleno import write_poses as write_poses_js
from plenocal.io.poses import read_poses

HELP = "write a plenocal camera.json as libpleno intrinsics.js (+ params.js when it carries Ω)"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("export-libpleno", help=HELP, description=HELP[0].upper() + HELP[1:] + ".")
    p.add_argument("camera", type=Path, metavar="CAMERA", help="plenocal camera.json")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="DIR", help="folder to write into")
    p.add_argument("--poses", type=Path, default=None, help="also write this plenocal poses.json as poses.js")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cam_file = read_camera_file(args.camera)
    poses = read_poses(args.poses) if args.poses is not None else None
    out: Path = args.output
    if out.exists() and not out.is_dir():
        raise InputFileError(out, "expected an output folder, got a file")
    try:
        written = [write_intrinsics(out / "intrinsics.js", cam_file.camera)]
    except DataError as exc:  # not expressible in libpleno's conventions
        raise InputFileError(args.camera, str(exc)) from None
    if cam_file.internal_parameters is not None:
        written.append(write_params(out / "params.js", cam_file.internal_parameters))
    if poses is not None:
        written.append(write_poses_js(out / "poses.js", poses))
    print(f"wrote {', '.join(p.name for p in written)} to {out}")
    return 0
