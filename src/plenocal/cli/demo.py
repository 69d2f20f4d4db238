"""``plenocal demo``: the whole pipeline on an embedded default, with the truth beside it.

Simulates once (cached in ``$PLENOCAL_CACHE`` or ``~/.cache/plenocal``) the small r12-a camera —
the reference's R12-A optics on a 1000 × 800 px crop, seeded — with white images at five
f-numbers, a devignetting white, 16 calibration, 4 evaluation and the translation frames; runs
``plenocal run`` on it into ``-o DIR`` (default ``plenocal-demo``); prints the calibrated
parameters ± σ beside the true values, the RMSEs, ε_z and the report's path.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from plenocal.errors import PlenocalError

HELP = "run the whole pipeline on a simulated small R12-A dataset and compare with the truth"
DEMO_PRESET = "r12-a"
DEMO_SEED = 7
DEMO_FRAMES = "white,devignetting,calibration=16,evaluation=4,translation"
QUICK_FRAMES = "white,devignetting,calibration=6,evaluation=2,translation=4"
DEMO_VERSION = 3


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("demo", help=HELP, description=HELP[0].upper() + HELP[1:] + ".")
    p.add_argument("-o", "--output", type=Path, default=Path("plenocal-demo"), metavar="DIR", help="output folder (default: ./plenocal-demo)")
    p.add_argument("--rays", type=int, default=96, help="rays per pixel of the simulation (default 96; fewer rays add Monte Carlo noise that is not physical)")
    p.add_argument("--force", action="store_true", help="simulate and run every stage again")
    p.add_argument("--quick", action="store_true", help="a reduced dataset (6 calibration, 2 evaluation, 4 translation frames), as CI runs it")
    p.set_defaults(func=run)


def cache_dir() -> Path:
    base = os.environ.get("PLENOCAL_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "plenocal")
    return Path(base)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from plenocal.cli.main import main as cli_main
    from plenocal.io import read_camera, read_dataset

    console = Console()
    t0 = time.perf_counter()
    frames = QUICK_FRAMES if args.quick else DEMO_FRAMES
    dataset = cache_dir() / f"demo-{DEMO_PRESET}-small-s{DEMO_SEED}-r{args.rays}{'-quick' if args.quick else ''}-v{DEMO_VERSION}"
    if args.force or not (dataset / "manifest.json").is_file():
        console.print(f"simulating the demo dataset into {dataset} (once)", style="dim")
        code = cli_main(["simulate", DEMO_PRESET, "--small", "-o", str(dataset), "--seed", str(DEMO_SEED), "--rays", str(args.rays), "--frames", frames])
        if code != 0:
            raise PlenocalError(f"simulating the demo dataset into {dataset} failed")
    else:
        console.print(f"using the cached demo dataset {dataset}", style="dim")
    t_sim = time.perf_counter() - t0
    argv = ["run", str(dataset), "-o", str(args.output)] + (["--force"] if args.force else [])
    if cli_main(argv) != 0:
        raise PlenocalError("the demo pipeline failed")
    ds = read_dataset(dataset)
    assert ds.manifest.ground_truth is not None and ds.manifest.ground_truth.camera is not None
    truth = read_camera(ds.path(ds.manifest.ground_truth.camera))
    report = json.loads((args.output / "calibration" / "report.json").read_text())
    params = report.get("parameters", {})
    table = Table(title="calibrated vs true (simulated small R12-A)")
    for col in ("parameter", "calibrated ± σ", "truth", "error / σ"):
        table.add_column(col, justify="right" if col != "parameter" else "left")
    true_values = {
        "F_mm": truth.main_lens.focal_length_mm,
        "D_mm": truth.D_mm,
        "d_mm": truth.d_mm,
        "u0_px": truth.principal_point_px[0],
        "v0_px": truth.principal_point_px[1],
        "pitch_mm": truth.mla.pitch_mm[0],
        **{f"f{i + 1}_mm": f for i, f in enumerate(truth.mla.focal_lengths_mm)},
    }
    for name, true in true_values.items():
        p = params.get(name)
        if p is None:
            continue
        err = (p["value"] - true) / p["std"] if p.get("std") else float("nan")
        table.add_row(name, f"{p['value']:.6g} ± {p['std']:.2g}", f"{true:.6g}", f"{err:+.2f}")
    console.print(table)
    console.print(f"demo finished in {time.perf_counter() - t0:.1f} s (simulation {t_sim:.1f} s); report: {args.output / 'report.html'}")
    return 0
