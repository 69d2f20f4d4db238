"""``plenocal export-libpleno CAMERA -o DIR``: a plenocal camera as libpleno files."""

from __future__ import annotations

import argparse
from pathlib import Path

from plenocal.errors import DataError, InputFileError
from plenocal.io.atomic import atomic_files
from plenocal.io.camera import read_camera_file
from plenocal.io.libpleno import write_intrinsics, write_params
from plenocal.io.libpleno import write_poses as write_poses_js
from plenocal.io.outputs import check_output_folder
from plenocal.io.poses import read_poses

WRITES = ("intrinsics.js", "params.js", "poses.js")
"""What ``export-libpleno`` writes into its folder (which may hold other files: a libpleno folder)."""
HELP = "write a plenocal camera.json as libpleno intrinsics.js (+ params.js when it carries Ω)"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("export-libpleno", help=HELP, description=HELP[0].upper() + HELP[1:] + ".")
    p.add_argument("camera", type=Path, metavar="CAMERA", help="plenocal camera.json")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="DIR", help="folder to write into")
    p.add_argument("--poses", type=Path, default=None, help="also write this plenocal poses.json as poses.js")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    out: Path = args.output
    check_output_folder(out, inputs=[args.camera, args.poses], owned=None, writes=WRITES)
    cam_file = read_camera_file(args.camera)
    poses = read_poses(args.poses) if args.poses is not None else None
    with atomic_files(out) as tmp:  # the files join the folder together, or none does
        try:
            written = [write_intrinsics(tmp / "intrinsics.js", cam_file.camera)]
        except DataError as exc:  # not expressible in libpleno's conventions
            raise InputFileError(args.camera, str(exc)) from None
        if cam_file.internal_parameters is not None:
            written.append(write_params(tmp / "params.js", cam_file.internal_parameters))
        if poses is not None:
            written.append(write_poses_js(tmp / "poses.js", poses))
    print(f"wrote {', '.join(p.name for p in written)} to {out}")
    return 0
