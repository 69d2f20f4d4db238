"""``plenocal`` entry point.

Each subcommand lives in its own module ``plenocal.cli.<name>`` exposing ``register(subparsers)``
which adds its parser and sets ``func`` (a callable taking the parsed ``argparse.Namespace`` and
returning an exit code). Expected errors (:class:`plenocal.errors.PlenocalError`) are printed as
one line on stderr with exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from plenocal import __version__
from plenocal.errors import PlenocalError

# Subcommand modules, in the order shown by --help. Each exists only once it works.
SUBCOMMANDS: tuple[str, ...] = ("demo", "run", "simulate", "precalibrate", "detect", "import_libpleno", "export_libpleno", "calibrate", "evaluate", "blur", "profile", "report")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="plenocal",
        description="Blur Aware Plenoptic calibration of plenoptic cameras from raw images.",
    )
    parser.add_argument("--version", action="version", version=f"plenocal {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"plenocal.cli.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except PlenocalError as exc:
        print(f"plenocal {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"plenocal {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
