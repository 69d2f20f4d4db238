"""``plenocal demo``: the whole pipeline on an embedded default, with the truth beside it.

Simulates once (cached in ``$PLENOCAL_CACHE`` or ``~/.cache/plenocal``) the small r12-a camera —
the reference's R12-A optics on a 1000 × 800 px crop, seeded — with white images at five
f-numbers, a devignetting white, 16 calibration, 4 evaluation and the translation frames; runs
``plenocal run`` on it into ``-o DIR`` (default ``plenocal-demo``); prints the calibrated
parameters ± σ beside the true values, the RMSEs, ε_z and the report's path.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from plenocal.cli._args import bounded_int
from plenocal.errors import PlenocalError
from plenocal.io.limits import MAX_RAYS

HELP = "run the whole pipeline on a simulated small R12-A dataset and compare with the truth"
DEMO_PRESET = "r12-a"
DEMO_SEED = 7
DEMO_FRAMES = "white,devignetting,calibration=16,evaluation=4,translation"
QUICK_FRAMES = "white,devignetting,calibration=6,evaluation=2,translation=4"
DEMO_VERSION = 4
"""Part of the cached demo dataset's name: raised when the same preset, seed and rays render other
images (4: the poses' depths spread over the plan's range, 2026-11-27), so a cache from older code
is not reused."""
DEMO_MIN_RAYS = 16
"""Fewest rays per pixel of the demo's simulation: below, Monte Carlo noise (not physical) makes
the white micro-images too noisy for the demo's pre-calibration (measured: 8 rays fail it)."""
CACHE_RECORD = "plenocal-demo-cache.json"
"""Written beside the cached dataset's files: the SHA-256 of each, checked before every use."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("demo", help=HELP, description=HELP[0].upper() + HELP[1:] + ".")
    p.add_argument("-o", "--output", type=Path, default=Path("plenocal-demo"), metavar="DIR", help="output folder (default: ./plenocal-demo)")
    p.add_argument("--rays", type=bounded_int(DEMO_MIN_RAYS, MAX_RAYS), default=96,
                   help=f"rays per pixel of the simulation, >= {DEMO_MIN_RAYS} (default 96; fewer rays add Monte Carlo "
                        "noise that is not physical)")
    p.add_argument("--force", action="store_true", help="simulate and run every stage again")
    p.add_argument("--quick", action="store_true", help="a reduced dataset (6 calibration, 2 evaluation, 4 translation frames), as CI runs it "
                   "(with --rays 16); six frames of this small crop determine the camera's scale only to a few %% "
                   "and its principal point poorly (at the default 96 rays: F +0.3 %%, v0 106 px off, 3.7 of its larger sigma), "
                   "so read it as a smoke test of every stage, not as a calibration")
    p.set_defaults(func=run)


def cache_dir() -> Path:
    base = os.environ.get("PLENOCAL_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "plenocal")
    return Path(base)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != CACHE_RECORD)


def record_cache(folder: Path) -> None:
    """Write the SHA-256 of every file of a freshly simulated demo dataset (:data:`CACHE_RECORD`)."""
    from plenocal.io._json import write_document

    files = {str(p.relative_to(folder)): _sha256(p) for p in _files(folder)}
    write_document(folder / CACHE_RECORD, {"format": "plenocal-demo-cache", "version": 1, "files": files})


def cache_problem(folder: Path) -> str | None:
    """Why the cached demo dataset in ``folder`` cannot be used (None: it is intact)."""
    record = folder / CACHE_RECORD
    if not (folder / "manifest.json").is_file():
        return "no manifest.json"
    if not record.exists():
        return _unrecorded_problem(folder)
    try:
        files = json.loads(record.read_text(encoding="utf-8"))["files"]
        assert isinstance(files, dict)
    except (OSError, ValueError, KeyError, TypeError, AssertionError):
        return f"no readable {CACHE_RECORD}"
    present = {str(p.relative_to(folder)) for p in _files(folder)}
    if present != set(files):
        missing = sorted(set(files) - present) or sorted(present - set(files))
        return f"files differ from those simulated ({missing[0]})"
    for name, digest in files.items():
        if _sha256(folder / name) != digest:
            return f"{name} changed since it was simulated"
    return None


def _unrecorded_problem(folder: Path) -> str | None:
    """A cache written before :data:`CACHE_RECORD` existed: intact when its manifest, ground truth
    and every image read; then it is recorded."""
    from plenocal.io import read_camera, read_dataset

    try:
        ds = read_dataset(folder)
        for entry in ds.manifest.images:
            ds.read_image(entry)
        gt = ds.manifest.ground_truth
        if gt is None or gt.camera is None:
            return "no ground truth"
        read_camera(ds.path(gt.camera))
        record_cache(folder)
    except PlenocalError as exc:
        return str(exc)
    return None


def _remove(folder: Path) -> None:
    try:
        shutil.rmtree(folder)
    except OSError as exc:
        raise PlenocalError(f"{folder}: cannot remove the damaged demo cache ({exc.strerror}); delete it, or set "
                            "PLENOCAL_CACHE to another folder") from None


def demo_dataset(*, rays: int, quick: bool, force: bool, log: Any) -> Path:
    """The cached demo dataset, simulated (again) when absent, damaged or ``force``."""
    from plenocal.cli.main import dispatch

    frames = QUICK_FRAMES if quick else DEMO_FRAMES
    dataset = cache_dir() / f"demo-{DEMO_PRESET}-small-s{DEMO_SEED}-r{rays}{'-quick' if quick else ''}-v{DEMO_VERSION}"
    problem = None if force or not dataset.exists() else cache_problem(dataset)
    if not force and dataset.exists() and problem is None:
        log(f"using the cached demo dataset {dataset}")
        return dataset
    if dataset.exists():
        if problem is not None:
            log(f"the cached demo dataset {dataset} is damaged ({problem}): simulating it again")
        _remove(dataset)
    log(f"simulating the demo dataset into {dataset} (once)")
    try:
        dispatch(["simulate", DEMO_PRESET, "--small", "-o", str(dataset), "--seed", str(DEMO_SEED),
                  "--rays", str(rays), "--frames", frames])
    except PlenocalError as exc:
        raise PlenocalError(f"simulating the demo dataset (cache {cache_dir()}; set PLENOCAL_CACHE to move it): {exc}") from None
    record_cache(dataset)
    return dataset


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from plenocal.cli.main import dispatch
    from plenocal.io import read_camera, read_dataset
    from plenocal.viz.verdict import parameter_sigmas

    console = Console()
    t0 = time.perf_counter()
    dataset = demo_dataset(rays=args.rays, quick=args.quick, force=args.force,
                           log=lambda s: console.print(s, style="dim", markup=False, highlight=False))
    t_sim = time.perf_counter() - t0
    argv = ["run", str(dataset), "-o", str(args.output)] + (["--force"] if args.force else [])
    try:
        code = dispatch(argv)
    except PlenocalError as exc:
        raise PlenocalError(f"on the simulated dataset {dataset}: {exc}") from None
    ds = read_dataset(dataset)
    assert ds.manifest.ground_truth is not None and ds.manifest.ground_truth.camera is not None
    truth = read_camera(ds.path(ds.manifest.ground_truth.camera))
    report = json.loads((args.output / "calibration" / "report.json").read_text())
    params = report.get("parameters", {})
    # each error over the larger of the Jacobian and frame-resampling σ, the one the calibration's
    # own warnings say to trust (the Jacobian σ alone put the crop's principal point 3.3σ and 2.6σ off)
    sigmas = parameter_sigmas(report)
    table = Table(title="calibrated vs true (simulated small R12-A)")
    for col in ("parameter", "calibrated ± σ (the larger)", "truth", "error / σ"):
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
        sigma = sigmas[name].sigma
        err = (p["value"] - true) / sigma if sigma else float("nan")
        table.add_row(name, f"{p['value']:.6g} ± {sigma:.2g}", f"{true:.6g}", f"{err:+.2f}")
    console.print(table)
    console.print(f"demo finished in {time.perf_counter() - t0:.1f} s (simulation {t_sim:.1f} s); report: {args.output / 'report.html'}")
    return code
