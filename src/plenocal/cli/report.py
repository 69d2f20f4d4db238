"""``plenocal report OUT``: one self-contained HTML page (``OUT/report.html``) from the stage outputs
found in OUT and its direct sub-folders (see :mod:`plenocal.viz.report`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from plenocal.errors import InputFileError
from plenocal.io.atomic import atomic_write_text
from plenocal.io.outputs import check_output_file

HELP = "one self-contained HTML report (summary, parameters ± σ, figures, provenance) from a folder of stage outputs"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("report", help=HELP, description=HELP[0].upper() + HELP[1:] + ".")
    p.add_argument("folder", type=Path, metavar="OUT", help="folder holding the stage outputs")
    p.add_argument("-o", "--output", type=Path, default=None, help="HTML file (default: OUT/report.html)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from plenocal.viz.report import build_report

    folder = Path(args.folder)
    if not folder.is_dir():
        raise InputFileError(folder, "is not a folder of stage outputs")
    page, found = build_report(folder)
    if not found.documents and not found.images:
        raise InputFileError(folder, "holds no plenocal stage output (precalibration.json, report.json, kappa.json, profile.json, ...)")
    out = args.output if args.output is not None else folder / "report.html"
    check_output_file(out, inputs=[path for path, _ in found.documents.values()] + list(found.images.values()),
                      suffixes=(".html", ".htm"))
    atomic_write_text(out, page)
    print(f"report with {', '.join(sorted(found.documents)) or 'figures only'}; {len(found.notes)} notes; wrote {out}")
    return 0
