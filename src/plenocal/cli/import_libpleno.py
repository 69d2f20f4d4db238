"""``plenocal import-libpleno SRC [SRC ...] [--role ROLE SRC [SRC ...] [--step-mm MM]] ... -o DATASET``.

libpleno folders as one plenocal dataset. libpleno's ``images.js`` has no role field, so the role
of a folder's checkerboard images is given here:

- ``SRC`` given bare (before any ``--role``): a calibration source (``import-libpleno SRC -o
  DATASET`` is unchanged);
- ``--role ROLE SRC [SRC ...]``: the sources that follow, up to the next option, get ROLE
  (``calibration``, ``evaluation`` or ``translation``);
- ``--step-mm MM`` right after a ``--role translation`` group: the known displacement between
  consecutive frames of each of its sources (frames ordered by frame id; one sequence per source).

Example: ``plenocal import-libpleno calib/ --role evaluation held/ --role translation trans/
--step-mm 50 -o dataset``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from plenocal.errors import DataError, UsageError
from plenocal.io.dataset import FRAME_ROLES, ImageRole
from plenocal.io.libpleno.importer import LibplenoSource, import_libpleno_folders

HELP = (
    "convert libpleno folders (camera.js, intrinsics.js, params.js, poses.js, scene.js, images.js, observation "
    "CSVs or .bin.gz) into one plenocal dataset, each folder's checkerboards with a role (calibration, evaluation, "
    "translation)"
)
ROLES = tuple(r.value for r in FRAME_ROLES)
EPILOG = (
    "Bare SRC folders are calibration sources. '--role ROLE SRC [SRC ...]' gives ROLE to the folders that follow "
    "it, up to the next option. '--step-mm MM' right after a '--role translation' group is the known displacement "
    "between consecutive frames (ordered by frame id) of each of its folders; each translation folder is one "
    "sequence, with displacement_mm 0, MM, 2*MM, ... Example: plenocal import-libpleno calib/ --role evaluation "
    "held/ --role translation trans/ --step-mm 50 -o dataset"
)


class _Ordered(argparse.Action):
    """Record sources, role groups and steps in command-line order (``namespace.groups``)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        events = list(getattr(namespace, "groups", None) or [])
        events.append((self.dest, option_string, values))
        namespace.groups = events


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "import-libpleno", help=HELP, description=HELP[0].upper() + HELP[1:] + ".", epilog=EPILOG
    )
    p.add_argument("src", nargs="*", action=_Ordered, metavar="SRC",
                   help="folder with libpleno files whose checkerboards are calibration frames (only read)")
    p.add_argument("--role", nargs="+", action=_Ordered, metavar=("ROLE", "SRC"),
                   help=f"ROLE ({', '.join(ROLES)}) for the SRC folders that follow, up to the next option")
    p.add_argument("--step-mm", action=_Ordered, metavar="MM",
                   help="after '--role translation SRC ...': the known displacement between consecutive frames, mm")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="DATASET",
                   help="dataset folder to write (not inside a source)")
    p.add_argument("--name", default=None, help="dataset name (default: the first source folder's name)")
    p.set_defaults(func=run, groups=None)


def _step(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"--step-mm: expected a number of millimetres, got {text!r}") from None


def sources_from_args(args: argparse.Namespace) -> list[LibplenoSource]:
    """The command line's sources with their roles and steps (see the module docstring)."""
    groups: list[tuple[ImageRole, list[Path], float | None, str]] = []  # role, folders, step, as written
    after_role = False
    for dest, _option, values in args.groups or []:
        if dest == "src":
            if not values:
                continue
            if after_role:
                raise DataError(
                    f"{values[0]}: a bare SRC after a --role group is ambiguous; list calibration sources first "
                    f"or write --role calibration {values[0]}"
                )
            groups.append((ImageRole.CALIBRATION, [Path(v) for v in values], None, " ".join(values)))
        elif dest == "role":
            name, folders = values[0], values[1:]
            if name not in ROLES:
                raise DataError(f"--role: unknown role {name!r}; expected one of {', '.join(ROLES)}")
            if not folders:
                raise DataError(f"--role {name}: no source folder follows; write --role {name} SRC [SRC ...]")
            after_role = True
            groups.append((ImageRole(name), [Path(v) for v in folders], None, f"--role {' '.join(values)}"))
        else:  # step_mm
            if not groups:
                raise DataError(f"--step-mm {values}: must follow the translation sources it applies to "
                                f"(--role translation SRC --step-mm {values})")
            role, folders, step, written = groups[-1]
            if step is not None:
                raise DataError(f"--step-mm {values}: '{written}' already has --step-mm {step:g}; give it once")
            groups[-1] = (role, folders, _step(values), written)
    if not groups:
        raise DataError("no source folder given: plenocal import-libpleno SRC [SRC ...] -o DATASET")
    return [LibplenoSource(f, role, step) for role, folders, step, _ in groups for f in folders]


def run(args: argparse.Namespace) -> int:
    result = import_libpleno_folders(sources_from_args(args), args.output, name=args.name)
    for w in result.warnings:
        print(f"plenocal import-libpleno: warning: {w}", file=sys.stderr)
    names = ", ".join(p.name for p in result.written)
    counts = ", ".join(f"{n} {role}" for role, n in result.frames.items() if n)
    seq = f" in {result.sequences} sequence{'s' if result.sequences != 1 else ''}" if result.sequences else ""
    frames = f" ({counts} frames{seq})" if counts else ""
    print(f"wrote {names} to {result.dataset}{frames}")
    return 0


__all__ = ["register", "run", "sources_from_args"]
