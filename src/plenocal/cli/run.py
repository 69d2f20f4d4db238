"""``plenocal run DATASET -o OUT``: the whole pipeline, resumable.

precalibrate → detect → calibrate (first pass, ``OUT/calibration-pass1``) → detect again
(second pass, ``OUT/detection-pass2``: the frames the first refused or linked partly, with the
calibrated camera; issue 24) → calibrate (``OUT/calibration``; pass 1's result copied when the
second pass added nothing) → blur → depth-scaling (the matcher's bias fitted on the calibration
frames) → depth → evaluate → profile → report, each stage writing to
``OUT/<stage>/`` through its own subcommand. A stage is skipped when its outputs exist and its
fingerprint (its arguments, a hash of the bytes of every input file, including the outputs of the
stages it reads, plenocal's version and a hash of its code, :func:`code_digest`) is the one recorded in ``OUT/<stage>/stage.json``; ``--force``
redoes everything. (Size and modification time alone missed an input replaced by a same-size file
with the same mtime: ``cp -p``, ``rsync -a``, an archive restore.) One run at a time per output
folder: a second one is refused with the first one's process id (:func:`lock_folder`). A dataset that already carries observations and no white images (e.g. made by
``plenocal import-libpleno``) starts at calibration. A final table summarises the run.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plenocal.cli._args import DEFAULT_PUPIL_SHAPE, PUPIL_SHAPES
from plenocal.errors import PlenocalError
from plenocal.io._json import write_document
from plenocal.io.atomic import remove_stale_temporaries
from plenocal.io.dataset import Dataset, ImageRole, read_dataset
from plenocal.io.digest import content_digest
from plenocal.io.outputs import STAGE_RECORD, check_output_folder, folder_lock

HELP = "run the whole pipeline on a dataset: precalibrate, detect, calibrate, blur, depth, evaluate, profile, report"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("run", help=HELP, description=HELP[0].upper() + HELP[1:] + ".")
    p.add_argument("dataset", type=Path, metavar="DATASET", help="plenocal dataset folder")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="OUT", help="output folder (one sub-folder per stage)")
    p.add_argument("--force", action="store_true", help="redo every stage even if its outputs are up to date")
    p.add_argument("--no-depth", action="store_true",
                   help="skip the depth stage (per micro-image depth of the evaluation and translation frames)")
    p.add_argument("--no-depth-scaling", action="store_true",
                   help="no depth scaling (the matcher's bias in virtual depth fitted on the calibration frames, applied when the data support it)")
    p.add_argument(
        "--no-pupil-vignetting", action="store_true",
        help="detect corners where they appear (the paper's way) instead of inverting the pupil vignetting to chief-ray positions",
    )
    p.add_argument("--natural-vignetting", action="store_true",
                   help="pre-calibration and detection weigh each ray by its natural vignetting (cos·cos/r²; experimental, "
                        "off by default: docs/model.md)")
    p.add_argument("--pupil-shape", choices=PUPIL_SHAPES, default=DEFAULT_PUPIL_SHAPE,
                   help="the main aperture's preimage in each micro-image for detection's corner model: 'disc' (the paper's, "
                        "radius R_a about the grid node), 'white' (an ellipse measured from the white where the white departs "
                        f"from the disc model) or 'white-centre' (the disc at the white's measured centre there); default {DEFAULT_PUPIL_SHAPE}")
    cal = p.add_argument_group("calibration options (passed to 'plenocal calibrate')")
    pitches = cal.add_mutually_exclusive_group()
    pitches.add_argument("--two-pitches", dest="calibrate_args", action="append_const", const="--two-pitches",
                         help="two MLA pitches (libpleno HEAD; the default)")
    pitches.add_argument("--one-pitch", dest="calibrate_args", action="append_const", const="--one-pitch",
                         help="one MLA pitch (the paper)")
    cal.add_argument("--no-exit-pupil", dest="calibrate_args", action="append_const", const="--no-exit-pupil",
                     help="the aperture in the main-lens plane (the paper's thin lens) instead of an estimated exit pupil")
    cal.add_argument("--no-depth-distortion", dest="calibrate_args", action="append_const", const="--no-depth-distortion",
                     help="no depth distortion of the virtual space (the paper's model)")
    cal.add_argument("--legacy-model", dest="calibrate_args", action="append_const", const="--legacy-model",
                     help="the paper's model: one pitch and the legacy ρ")
    cal.add_argument("--rho-form", choices=("legacy", "head", "virtual-depth"), default=None,
                     help="blur-radius form (default virtual-depth)")
    cal.add_argument("--weighting", choices=("none", "noise"), default=None,
                     help="the paper's unweighted Θ (default) or per-term 1/σ² weights")
    cal.add_argument("--loss", choices=("huber", "linear"), default=None, help="robust loss (default) or plain least squares")
    cal.add_argument("--prior", action="append", default=None, metavar="NAME=MEAN±STD",
                     help="Gaussian prior on a lens quantity, e.g. F_mm=50±2 or focus_distance_mm=1000±50 (repeatable)")
    cal.add_argument("--freeze", default=None, metavar="GROUP[,GROUP...]", help="parameter groups held at their initial value")
    cal.add_argument("--lens", default=None, metavar="PRESCRIPTION",
                     help="the main lens's prescription (bundled name or plenocal-lens file): its exit pupil as a prior "
                          "(see 'plenocal lens')")
    p.set_defaults(func=run)


def calibration_argv(args: argparse.Namespace) -> list[str]:
    """The calibration options of ``plenocal run`` as ``plenocal calibrate`` arguments."""
    out = list(getattr(args, "calibrate_args", None) or [])
    for name in ("rho_form", "weighting", "loss", "freeze", "lens"):
        value = getattr(args, name, None)
        if value is not None:
            out += [f"--{name.replace('_', '-')}", str(value)]
    for prior in getattr(args, "prior", None) or ():
        out += ["--prior", str(prior)]
    return out


class StageError(PlenocalError):
    """A stage of ``plenocal run`` failed: its one-line error, prefixed with the stage's name."""

    def __init__(self, stage: str, error: PlenocalError) -> None:
        self.stage = stage
        self.error = error
        super().__init__(f"stage {stage}: {error} (finished stages are kept; fix this and run again)")


@dataclass(frozen=True)
class Stage:
    name: str
    argv: list[str]
    inputs: list[Path]
    outputs: list[Path]
    same_as_if_nothing_added: tuple[Path, Path] | None = None
    """(a second pass's detection.json, a folder): when that pass added no feature, this stage's
    outputs are that folder's (copied) instead of being computed again from the same data."""


def nothing_added(detection_json: Path) -> bool:
    """A second detection pass's detection.json says it added no feature to the calibration frames
    (evaluation and translation frames do not enter calibration); a file written before it counted
    them apart: no feature at all."""
    try:
        doc = json.loads(detection_json.read_text())
    except (OSError, json.JSONDecodeError):
        return False
    sp = doc.get("second_pass") or {}
    return sp.get("added_calibration_features", sp.get("added_features")) == 0


def copy_stage_outputs(source: Path, folder: Path) -> None:
    """``source``'s files (not its stage record) as ``folder``, atomically."""
    import shutil

    from plenocal.io.atomic import atomic_folder

    names = [p.name for p in source.iterdir() if p.name != STAGE_RECORD]
    with atomic_folder(folder, owned=[*names, STAGE_RECORD]) as tmp:
        for name in names:
            src = source / name
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, tmp / name)


FINGERPRINTED_DEPENDENCIES = ("numpy", "scipy", "numba", "opencv-python-headless", "scikit-learn")
"""Distributions whose version is part of every stage's fingerprint: their numerics are in the
stages' results."""


@functools.cache
def code_digest() -> str:
    """A hash of the bytes of every file of the installed plenocal package (its code and bundled
    data) and of the versions of :data:`FINGERPRINTED_DEPENDENCIES`.

    plenocal's version number stays the same between releases' commits; a stage done by other
    code (an upgrade that fixes a bug, a developer's edit) is not up to date. 12 ms."""
    import importlib.metadata

    import plenocal

    root = Path(plenocal.__file__).resolve().parent
    h = hashlib.sha256()
    for p in sorted(q for q in root.rglob("*") if q.is_file() and "__pycache__" not in q.parts and q.suffix != ".pyc"):
        h.update(f"{p.relative_to(root).as_posix()}:{content_digest(p)};".encode())
    for name in FINGERPRINTED_DEPENDENCIES:
        try:
            h.update(f"{name}=={importlib.metadata.version(name)};".encode())
        except importlib.metadata.PackageNotFoundError:
            h.update(f"{name} absent;".encode())
    return h.hexdigest()


def _fingerprint(stage: Stage, cache: dict[Path, str] | None = None) -> str:
    from plenocal import __version__

    h = hashlib.sha256(json.dumps([__version__, code_digest(), *stage.argv]).encode())
    for p in sorted(stage.inputs, key=str):
        h.update(f"{p}:{content_digest(p, cache)}".encode())
    return h.hexdigest()


def _up_to_date(stage: Stage, folder: Path, cache: dict[Path, str] | None = None) -> bool:
    record = folder / "stage.json"
    if not record.is_file() or not all(p.exists() for p in stage.outputs):
        return False
    try:
        return json.loads(record.read_text()).get("fingerprint") == _fingerprint(stage, cache)
    except (OSError, json.JSONDecodeError):
        return False


def option_files(calibrate_options: list[str] | None) -> list[Path]:
    """The files the calibration options read (``--lens FILE``; a bundled design's name is not a
    file): inputs of the calibration stages, so that editing one runs them again."""
    from plenocal.sim.optics.library import DESIGN_NAMES

    opts = list(calibrate_options or [])
    return [Path(v) for k, v in itertools.pairwise(opts) if k == "--lens" and v not in DESIGN_NAMES]


def plan(dataset: Dataset, out: Path, *, vignetting: bool, calibrate_options: list[str] | None = None,
         depth: bool = True, depth_scaling: bool = True, pupil_shape: str = DEFAULT_PUPIL_SHAPE,
         natural_vignetting: bool = False) -> list[Stage]:
    """The stages to run on ``dataset`` (see the module docstring); ``natural_vignetting`` passes
    ``--natural-vignetting`` to pre-calibration and the first detection pass (the second follows
    the first)."""
    nv = ["--natural-vignetting"] if natural_vignetting else []
    m = dataset.manifest
    ds = str(dataset.folder)
    manifest = dataset.folder / "manifest.json"
    images = [dataset.path(e.path) for e in m.images]
    has_whites = bool(m.with_role(ImageRole.WHITE))
    pre, det, cal = out / "precalibration", out / "detection", out / "calibration"
    stages: list[Stage] = []
    if has_whites:
        whites = [dataset.path(e.path) for e in m.with_role(ImageRole.WHITE)]
        stages.append(Stage("precalibrate", ["precalibrate", ds, "-o", str(pre), *nv], [manifest, *whites],
                            [pre / "camera.json", pre / "observations.npz"]))
        stages.append(
            Stage(
                "detect",
                ["detect", ds, "-o", str(det), "--precalibration", str(pre), *([] if vignetting else ["--no-pupil-vignetting"]),
                 *([] if pupil_shape == DEFAULT_PUPIL_SHAPE else ["--pupil-shape", pupil_shape]), *nv],
                [manifest, *images, pre / "camera.json", pre / "observations.npz"],
                [det / "observations.npz", det / "detection.json"],
            )
        )
        cal1, det2 = out / "calibration-pass1", out / "detection-pass2"
        stages.append(
            Stage(
                "calibrate-pass1",
                ["calibrate", ds, "-o", str(cal1), "--observations", str(det / "observations.npz"), "--initial", str(pre),
                 *(calibrate_options or [])],
                [manifest, det / "observations.npz", pre / "camera.json", *option_files(calibrate_options)],
                [cal1 / "camera.json", cal1 / "poses.json", cal1 / "report.json"],
            )
        )
        stages.append(
            Stage(
                "detect-pass2",
                ["detect", ds, "-o", str(det2), "--precalibration", str(pre), "--previous", str(det),
                 "--camera", str(cal1 / "camera.json"), "--poses", str(cal1 / "poses.json")],
                [manifest, *images, pre / "camera.json", pre / "observations.npz", det / "observations.npz",
                 det / "detection.json", cal1 / "camera.json", cal1 / "poses.json"],
                [det2 / "observations.npz", det2 / "detection.json"],
            )
        )
        obs, initial = det2 / "observations.npz", ["--initial", str(pre)]
        cal_inputs = [manifest, obs, pre / "camera.json"]
    else:
        if dataset.observations_path is None:
            raise PlenocalError(f"{manifest}: no white images to pre-calibrate and no observations to calibrate from")
        obs, initial = dataset.observations_path, []
        cal_inputs = [manifest, obs, *(p for p in (dataset.camera_path, dataset.internal_parameters_path) if p)]
    stages.append(
        Stage(
            "calibrate",
            ["calibrate", ds, "-o", str(cal), "--observations", str(obs), *initial, *(calibrate_options or [])],
            [*cal_inputs, *option_files(calibrate_options)],
            [cal / "camera.json", cal / "poses.json", cal / "report.json"],
            (out / "detection-pass2" / "detection.json", out / "calibration-pass1") if has_whites else None,
        )
    )
    camera, poses = cal / "camera.json", cal / "poses.json"
    # κ is relative blur between micro-lens types: a single-type (e.g. unfocused) camera has none.
    multi_type = m.camera_spec is None or m.camera_spec.n_types is None or m.camera_spec.n_types >= 2
    if has_whites and m.with_role(ImageRole.DEVIGNETTING) and multi_type:
        stages.append(
            Stage(
                "blur",
                ["blur", ds, "--camera", str(camera), "--observations", str(obs), "-o", str(out / "blur")],
                [manifest, *images, camera, obs],
                [out / "blur" / "kappa.json"],
            )
        )
    # Depth of the frames a user measures with (evaluation and translation), with κ from the blur stage.
    depth_frames = sorted(e.frame for e in m.images if e.role in (ImageRole.EVALUATION, ImageRole.TRANSLATION)
                          and e.frame is not None)
    if depth and depth_frames and any(s.name == "blur" for s in stages):
        depth_images = [dataset.path(e.path) for e in m.images if e.frame in depth_frames]
        kappa = out / "blur" / "kappa.json"
        scaling_argv: list[str] = []
        scaling_inputs: list[Path] = []
        if depth_scaling and m.with_role(ImageRole.CALIBRATION):
            # The matcher's bias in 1/υ, fitted on the calibration frames against their calibrated poses.
            cal_images = [dataset.path(e.path) for e in m.with_role(ImageRole.CALIBRATION)]
            scaling = out / "depth-scaling" / "depth-scaling.json"
            stages.append(
                Stage(
                    "depth-scaling",
                    ["depth-scaling", ds, "--camera", str(camera), "--poses", str(poses), "--kappa", str(kappa),
                     "-o", str(out / "depth-scaling")],
                    [manifest, *cal_images, camera, poses, kappa],
                    [scaling],
                )
            )
            scaling_argv, scaling_inputs = ["--scaling", str(scaling)], [scaling]
        stages.append(
            Stage(
                "depth",
                ["depth", ds, "--camera", str(camera), "--kappa", str(kappa), "-o", str(out / "depth"),
                 "--frames", ",".join(str(f) for f in depth_frames), *scaling_argv],
                [manifest, *depth_images, camera, kappa, *scaling_inputs],
                [out / "depth" / "depth.json"],
            )
        )
    has_depth = any(s.name == "depth" for s in stages)
    stages.append(
        Stage(
            "evaluate",
            ["evaluate", ds, "--camera", str(camera), "--poses", str(poses), "--observations", str(obs), "-o", str(out / "evaluation"),
             *(["--depth", str(out / "depth")] if has_depth else [])],
            [manifest, camera, poses, obs, *([out / "depth" / "depth.json"] if has_depth else [])],
            [out / "evaluation" / "report.json"],
        )
    )
    stages.append(Stage("profile", ["profile", str(camera), "-o", str(out / "profile")], [camera], [out / "profile" / "profile.json"]))
    stages.append(
        Stage(
            "report",
            ["report", str(out), "-o", str(out / "report.html")],
            [p for s in stages for p in s.outputs],
            [out / "report.html"],
        )
    )
    return stages


def execute(stages: list[Stage], out: Path, *, force: bool, log: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    """Run (or skip) each stage in order; returns per-stage status and wall time.

    Each stage writes its folder atomically (complete or absent); ``stage.json`` is written after
    it, so a stage without one is run again. Temporaries of killed runs are removed first. A
    stage's error is raised as one line naming the stage (Ctrl-C and SIGTERM pass through).
    """
    from plenocal.cli.main import dispatch

    remove_stale_temporaries(out)
    for stage in stages:
        remove_stale_temporaries(stage.outputs[0].parent)
    status: dict[str, dict[str, Any]] = {}
    digests: dict[Path, str] = {}  # inputs' content hashes; a stage's outputs are hashed after it ran
    for stage in stages:
        folder = stage.outputs[0].parent
        if not force and _up_to_date(stage, folder, digests):
            status[stage.name] = {"status": "up to date", "wall_time_s": 0.0}
            log(f"[{stage.name}] up to date, skipped")
            continue
        t0 = time.perf_counter()
        if stage.same_as_if_nothing_added is not None and nothing_added(stage.same_as_if_nothing_added[0]):
            source = stage.same_as_if_nothing_added[1]
            log(f"[{stage.name}] the second detection pass added nothing: {source.name}'s result kept")
            copy_stage_outputs(source, folder)
        else:
            log(f"[{stage.name}] plenocal {' '.join(stage.argv)}")
            try:
                dispatch(stage.argv)
            except PlenocalError as exc:
                raise StageError(stage.name, exc) from None
        wall = time.perf_counter() - t0
        for p in stage.outputs:
            digests.pop(p, None)
        if stage.name != "report":
            write_document(folder / STAGE_RECORD, {"format": "plenocal-stage", "version": 1, "stage": stage.name, "argv": stage.argv, "fingerprint": _fingerprint(stage, digests), "wall_time_s": wall})
        status[stage.name] = {"status": "done", "wall_time_s": wall}
    return status


def _depth_summary(doc: dict[str, Any]) -> str:
    """'100: 464, 101: 517, …' from the depth stage's depth.json (frame ids and median z)."""
    frames = doc.get("frames")
    items = frames.items() if isinstance(frames, dict) else ((f.get("frame"), f) for f in frames or [] if isinstance(f, dict))
    parts = []
    for fid, f in items:
        z = (f.get("z_percentiles_mm") or {}).get("50") if isinstance(f, dict) else None
        parts.append(f"{fid}: {z:.0f}" if isinstance(z, int | float) else f"{fid}: —")
    return ", ".join(parts) if parts else "—"


def scaling_text(sc: dict[str, Any]) -> str:
    """'c0 ± σ + c1 ± σ · 1/υ, applied (W …)' from a depth-scaling.json's "scaling"."""
    head = "applied" if sc.get("kept") else "not applied"
    return (f"{head}: {sc.get('c0', float('nan')):+.5f} ± {sc.get('c0_std', float('nan')):.5f} + "
            f"{sc.get('c1', float('nan')):.4f} ± {sc.get('c1_std', float('nan')):.4f} · 1/υ ({sc.get('reason', '')})")


def summary_rows(out: Path) -> list[tuple[str, str]]:
    """(label, value) pairs of the headline results found in ``out``."""
    rows: list[tuple[str, str]] = []

    def load(p: Path) -> dict[str, Any] | None:
        try:
            return json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            return None

    cal = load(out / "calibration" / "report.json")
    if cal:
        r = cal.get("rmse", {})
        rows.append(("calibration RMSE u,v / ρ / MIC [px]", f"{r.get('uv_px', float('nan')):.3f} / {r.get('rho_px', float('nan')):.4f} / {r.get('mic_px', float('nan')):.3f}"))
        rows.append(("features / centres / frames", f"{cal.get('n_bap')} / {cal.get('n_mic')} / {cal.get('n_frames')}"))
        rows.append(("converged (iterations, solve s)", f"{cal.get('converged')} ({cal.get('iterations')}, {cal.get('wall_time_s', float('nan')):.2f})"))
        sel = cal.get("model_selection") or {}
        if sel:
            from plenocal.viz.verdict import chosen_model_text

            rows.append(("main-lens model (chosen by the data)", chosen_model_text(sel, thin="thin lens (the paper's)")))
        field = cal.get("model_field") if isinstance(cal.get("model_field"), dict) else None
        if field is not None and isinstance(field.get("reach_mm"), int | float):
            r = field.get("radius_mm")
            rows.append(("model's field (residuals as the centre's)",
                         f"to {r:.1f} mm from the principal point (features reach {field['reach_mm']:.1f} mm): no depth beyond"
                         if isinstance(r, int | float) else f"everywhere the features reach ({field['reach_mm']:.1f} mm)"))
    d2 = load(out / "detection-pass2" / "detection.json")
    if d2 and d2.get("second_pass"):
        sp = d2["second_pass"]
        rows.append(("second detection pass (calibrated camera)",
                     f"+{sp.get('added_features')} features in {sp.get('frames_with_added_features')} frames; "
                     f"{d2.get('n_frames_linked')}/{d2.get('n_frames')} frames linked"
                     + ("; calibration not run again" if sp.get("added_calibration_features", sp.get("added_features")) == 0
                        else "")))
    ev = load(out / "evaluation" / "report.json")
    if ev:
        held = ev.get("holdout") or {}
        if held.get("rmse"):
            hr = held["rmse"]
            n_held = len(held.get("frames_evaluated") or [])
            rows.append((f"held-out RMSE u,v / ρ [px] ({n_held} frames)", f"{hr.get('uv_px', float('nan')):.3f} / {hr.get('rho_px', float('nan')):.4f}"))
        tr = ev.get("translation") or {}
        if tr.get("epsilon_z_percent") is not None:
            e = tr["epsilon_z_percent"]
            rows.append(("ε_z [%]", f"{e.get('mean', float('nan')):.2f} ± {e.get('std', float('nan')):.2f}"))
    sc = load(out / "depth-scaling" / "depth-scaling.json")
    if sc and isinstance(sc.get("scaling"), dict):
        rows.append(("depth scaling (1/υ, calibration frames)", scaling_text(sc["scaling"])))
    dj = load(out / "depth" / "depth.json")
    if dj:
        rows.append(("depth (frames: median z mm)", _depth_summary(dj)))
    kp = load(out / "blur" / "kappa.json")
    if kp and kp.get("kappa") is not None:
        rows.append(("κ (σ = κ·ρ)", f"{kp['kappa']:.3f}"))
    pr = load(out / "profile" / "profile.json")
    if pr:
        tot = pr.get("total") or {}
        if tot.get("dof_object_mm") is not None:
            rows.append(("total depth of field [mm]", f"{tot['dof_object_mm']:.2f}"))
    if (out / "report.html").is_file():
        rows.append(("report", str(out / "report.html")))
    return rows


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    dataset = read_dataset(args.dataset)
    out = Path(args.output)
    # The run's folder holds one folder per stage and report.html; each stage checks its own.
    check_output_folder(out, inputs=[dataset.folder, *dataset.files()], owned=None)
    stages = plan(dataset, out, vignetting=not args.no_pupil_vignetting, calibrate_options=calibration_argv(args),
                  depth=not args.no_depth, depth_scaling=not args.no_depth_scaling, pupil_shape=args.pupil_shape,
                  natural_vignetting=args.natural_vignetting)
    t0 = time.perf_counter()
    with folder_lock(out):
        status = execute(stages, out, force=args.force, log=lambda s: console.print(s, style="dim", markup=False, highlight=False))
    table = Table(title=f"plenocal run: {dataset.folder.name} ({time.perf_counter() - t0:.1f} s)")
    table.add_column("result")
    table.add_column("value")
    for label, value in summary_rows(out):
        table.add_row(label, value)
    table.add_row("stages", ", ".join(f"{k} {v['wall_time_s']:.1f}s" if v["status"] == "done" else f"{k} (kept)" for k, v in status.items()))
    console.print(table)
    from plenocal.cli.main import verdict_exit_code

    return verdict_exit_code(out, command="run", written=f"every output is written ({out / 'report.html'})")
