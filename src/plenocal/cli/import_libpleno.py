"""``plenocal import-libpleno SRC -o DATASET``: a libpleno folder as a plenocal dataset."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from plenocal.io.libpleno.importer import import_libpleno_folder

HELP = "convert a folder of libpleno files (camera.js, intrinsics.js, params.js, poses.js, scene.js, images.js, observation CSVs or .bin.gz) into a plenocal dataset"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("import-libpleno", help=HELP, description=HELP[0].upper() + HELP[1:] + ".")
    p.add_argument("src", type=Path, metavar="SRC", help="folder with libpleno files (only read)")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="DATASET", help="dataset folder to write")
    p.add_argument("--name", default=None, help="dataset name (default: the source folder's name)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = import_libpleno_folder(args.src, args.output, name=args.name)
    for w in result.warnings:
        print(f"plenocal import-libpleno: warning: {w}", file=sys.stderr)
    names = ", ".join(p.name for p in result.written)
    print(f"wrote {names} to {result.dataset}")
    return 0
