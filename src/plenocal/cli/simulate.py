"""``plenocal simulate PRESET -o DIR``: ray-trace a dataset like the paper's, with ground truth.

Writes a plenocal dataset folder (``docs/formats.md``): ``images/``, ``manifest.json`` and
``ground_truth/`` (true camera, poses, BAP features and MICs). Presets: ``r12-a``, ``r12-b``,
``r12-c``, ``r12-d``, ``upc-s``, ``kep-3`` (``plenocal.sim.presets``); ``--small`` renders a
central crop of at most 1000 × 800 px with the same optics.

``--lens DESIGN_OR_FILE`` traces the images through real optics instead (``plenocal.sim.optics``):
a bundled design (double-gauss, tessar, telephoto, field-corrector, thin, thick-ideal,
ideal-stop-front, ideal-stop-behind) or a ``plenocal-lens`` file, scaled to the preset's F and
placed in its geometry, with real refractive lenslets (``--lenslets real``, default) or thin ones;
the ground truth is then the thin-lens equivalent (``camera.json``) and ``optics.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from pathlib import Path
from typing import Any

from plenocal.cli._args import bounded_float, bounded_int
from plenocal.errors import DataError, UsageError
from plenocal.io.atomic import atomic_folder
from plenocal.io.limits import MAX_RAYS, MAX_SEED
from plenocal.io.outputs import check_output_folder
from plenocal.sim.dataset import FrameSelection, simulate_dataset
from plenocal.sim.presets import PRESET_NAMES, REAL_OPTICS_TILT_SCALE, TILT_SCALE, preset
from plenocal.sim.sensor import COLORS, SensorResponse

DATASET_ENTRIES = ("manifest.json", "images", "ground_truth")
"""What ``simulate`` writes in its dataset folder."""
MAX_FRAMES_PER_ROLE = 10_000
"""Largest image count of one role in ``--frames``."""
HELP = "ray-trace a simulated dataset (white, checkerboard and translation images + ground truth)"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("simulate", help=HELP, description=HELP[0].upper() + HELP[1:] + ".")
    p.add_argument("preset", choices=PRESET_NAMES, metavar="PRESET", help=f"one of {', '.join(PRESET_NAMES)}")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="DIR", help="dataset folder to write")
    p.add_argument("--seed", type=bounded_int(0, MAX_SEED), default=0,
                   help="seed of poses, ray sampling and noise, an integer >= 0 (default 0)")
    p.add_argument("--rays", type=bounded_int(1, MAX_RAYS), default=30, metavar="N",
                   help="rays per pixel and micro-lens, >= 1 (default 30)")
    p.add_argument("--small", action="store_true", help="central crop of at most 1000x800 px (same optics)")
    p.add_argument(
        "--frames",
        default=None,
        metavar="SPEC",
        help="images to render, e.g. 'white,devignetting,calibration=4,evaluation=2,translation=3' "
        "(ROLE alone = the paper's count; roles not listed are skipped; default: everything)",
    )
    p.add_argument("--extrapolation", default=None, metavar="NEAR,FAR",
                   help="also 2 held-out frames at NEAR × the nearest and 2 at FAR × the farthest calibration frame's "
                        "depth (frames 180..; e.g. 0.7,1.5: how the camera extrapolates beyond its calibrated volume)")
    p.add_argument("--bit-depth", type=int, choices=(8, 16), default=8, help="stored bit depth (default 8)")
    p.add_argument("--color", choices=COLORS, default="grey", help="grey, rgb or bayer-rggb (default grey)")
    p.add_argument("--no-noise", action="store_true", help="no photon or read noise (quantisation only)")
    p.add_argument(
        "--tilt-scale", type=float, default=None,
        help="factor on the paper's MLA tilt θx, θy (default 0.01, and 1 with --lens: a real camera's tilt, which is "
             "what lets its images place the exit pupil; 1 = the paper's, see plenocal.sim.presets)",
    )
    real = p.add_argument_group("real optics (plenocal.sim.optics)")
    real.add_argument(
        "--lens", default=None, metavar="DESIGN_OR_FILE",
        help="trace through this main lens: a bundled design (double-gauss, tessar, telephoto, field-corrector, "
        "thin, thick-ideal, ideal-stop-front, ideal-stop-behind) or a plenocal-lens JSON file",
    )
    real.add_argument("--lenslets", choices=("real", "thin"), default=None,
                      help="refractive plano-convex caps on a substrate (default) or thin ideal lenslets")
    real.add_argument("--substrate-mm", type=bounded_float(0.0, 10.0), default=None, metavar="T",
                      help="substrate thickness of real lenslets, mm (default 0.1)")
    real.add_argument("--lenslet-index", type=bounded_float(1.0, 4.0, low_open=True), default=None, metavar="N",
                      help="refractive index of real lenslets (default 1.45846, fused silica n_d)")
    real.add_argument("--clear-radius-mm", type=bounded_float(0.0, 10.0, low_open=True), default=None, metavar="R",
                      help="clear-aperture radius of the lenslets, mm, <= pitch/2 (default: 0.982 pitch/2 real, "
                      "pitch/2 thin)")
    real.add_argument("--no-natural-vignetting", action="store_true",
                      help="weigh rays as fractions of the aperture (the thin tracer's) instead of cos·cos/r²")
    p.add_argument("--f-number", type=bounded_float(0.5, 64.0), default=None, metavar="N",
                   help="the checkerboards' main-lens f-number; whites at it and at the preset's slower ones (default: the "
                        "preset's, matched to the micro-lenses; slower only: a lens designed for a slower aperture, e.g. "
                        "the telephoto at 5.66)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def frame_selection(spec: str | None, extrapolation: str | None = None) -> FrameSelection:
    """``--frames`` parsed, each count within [0, MAX_FRAMES_PER_ROLE], with ``--extrapolation``."""
    try:
        frames = FrameSelection.parse(spec)
    except DataError as exc:
        raise UsageError(str(exc)) from None
    for role, count in frames.counts.items():
        if count is not None and not 0 <= count <= MAX_FRAMES_PER_ROLE:
            raise UsageError(f"--frames: {role}={count} must be a count in 0..{MAX_FRAMES_PER_ROLE}")
    if extrapolation is None:
        return frames
    try:
        near, far = (float(x) for x in extrapolation.split(","))
    except ValueError:
        raise UsageError(f"--extrapolation {extrapolation}: expected NEAR,FAR, e.g. 0.7,1.5") from None
    if not (0.1 <= near <= 1.0 <= far <= 10.0):
        raise UsageError(f"--extrapolation {extrapolation}: NEAR must be in 0.1..1 and FAR in 1..10 (factors on the "
                         "nearest and farthest calibration depths)")
    return dataclasses.replace(frames, extrapolation=(near, far))


_REAL_ONLY = ("lenslets", "substrate_mm", "lenslet_index", "clear_radius_mm")


F_NUMBER_MATCH = 0.02
"""A preset white within this relative difference of ``--f-number`` is that white (5.66 for 4√2)."""


def at_f_number(chosen: Any, n: float) -> Any:
    """The preset at main-lens f-number ``n``: the checkerboards and the true camera at n, the
    whites the preset's at n or slower, with n itself (a white at the frames' aperture); refused
    faster than the preset's N (matched to the micro-lenses: the micro-images would overlap) or
    when fewer than three whites remain (pre-calibration's f-number check needs three)."""
    plan = chosen.plan
    fastest = plan.checkerboard_f_number
    if n < fastest - 1e-9:
        raise UsageError(f"--f-number {n:g}: faster than the preset's f/{fastest:g}, which is matched to its micro-lenses "
                         f"(the micro-images would overlap); use f/{fastest:g} or slower")
    slower = [w for w in plan.white_f_numbers if w > n * (1.0 + F_NUMBER_MATCH)]
    whites = (float(n), *slower)
    if len(whites) < 3:
        raise UsageError(f"--f-number {n:g}: the preset's whites slower than it are {len(slower)} (its slowest is "
                         f"f/{max(plan.white_f_numbers):g}); pre-calibration needs three whites — use a faster f-number")
    camera = chosen.camera.replace(main_lens=dataclasses.replace(chosen.camera.main_lens, f_number=float(n)))
    return dataclasses.replace(chosen, camera=camera,
                               plan=dataclasses.replace(plan, checkerboard_f_number=float(n), white_f_numbers=whites))


def _renderer(args: argparse.Namespace, chosen: Any) -> Any:
    """The real-optics renderer of ``--lens`` (None without it)."""
    if args.lens is None:
        used = [name for name in _REAL_ONLY if getattr(args, name) is not None]
        if args.no_natural_vignetting:
            used.append("no_natural_vignetting")
        if used:
            raise UsageError(f"--{used[0].replace('_', '-')} needs --lens (a real-optics main lens)")
        return None
    from plenocal.sim.optics import load_lens
    from plenocal.sim.optics.camera import real_optics_camera
    from plenocal.sim.optics.dataset import RealOpticsRenderer
    from plenocal.sim.optics.lenslets import DEFAULT_SUBSTRATE_MM, FUSED_SILICA_ND, LensletDesign, LensletKind

    design = LensletDesign(
        LensletKind(args.lenslets or "real"),
        index=FUSED_SILICA_ND if args.lenslet_index is None else args.lenslet_index,
        substrate_mm=DEFAULT_SUBSTRATE_MM if args.substrate_mm is None else args.substrate_mm,
        clear_radius_mm=args.clear_radius_mm,
    )
    camera = real_optics_camera(chosen.camera, load_lens(args.lens), lenslets=design)
    from plenocal.sim.optics.paraxial import axial_clipping, fastest_f_number

    fastest = min((*chosen.plan.white_f_numbers, chosen.plan.checkerboard_f_number))
    clip = axial_clipping(camera.lens, fastest)
    if clip is not None:
        i, semi, needed = clip
        raise UsageError(f"--lens {args.lens}: the lens cannot open to f/{fastest:g} (the preset's fastest white or "
                         f"checkerboard aperture): surface {i + 1}'s clear semi-diameter {semi:.2f} mm clips the axial beam "
                         f"({needed:.2f} mm needed), so its images would be at a slower f-number than declared; this lens "
                         f"opens to f/{fastest_f_number(camera.lens):.2f} — use a lens or a preset that agree")
    return RealOpticsRenderer(camera, str(args.lens), chosen.plan.checkerboard_f_number,
                              natural_vignetting=not args.no_natural_vignetting)


def tilt_scale_of(tilt_scale: float | None, *, lens: str | None) -> float:
    """The MLA tilt factor of a render: the user's, else the paper's tilt through a real main lens
    (:data:`plenocal.sim.presets.REAL_OPTICS_TILT_SCALE`) and the presets' small one otherwise."""
    if tilt_scale is not None:
        return tilt_scale
    return REAL_OPTICS_TILT_SCALE if lens is not None else TILT_SCALE


def run(args: argparse.Namespace) -> int:
    if args.tilt_scale is not None and not (math.isfinite(args.tilt_scale) and 0 <= args.tilt_scale <= 100):
        raise UsageError(f"--tilt-scale must be a number in 0..100 (1 = the paper's tilt), got {args.tilt_scale:g}")
    frames = frame_selection(args.frames, args.extrapolation)
    lens_file = None
    if args.lens is not None:
        from plenocal.sim.optics.library import DESIGN_NAMES

        lens_file = None if args.lens in DESIGN_NAMES else Path(args.lens)
    check_output_folder(args.output, inputs=[lens_file], owned=DATASET_ENTRIES)
    chosen = preset(args.preset, small=args.small, tilt_scale=tilt_scale_of(args.tilt_scale, lens=args.lens))
    if getattr(args, "f_number", None) is not None:
        chosen = at_f_number(chosen, args.f_number)
    renderer = _renderer(args, chosen)
    response = SensorResponse(
        bit_depth=args.bit_depth, color=args.color,
        photon_noise=not args.no_noise, read_noise=not args.no_noise,
    )
    started = time.perf_counter()
    with atomic_folder(args.output, owned=DATASET_ENTRIES) as tmp:
        manifest = _simulate(args, chosen, tmp, frames, response, renderer)
    if not args.quiet:
        print(
            f"wrote {len(manifest.images)} images and ground truth to {args.output} "
            f"in {time.perf_counter() - started:.1f} s"
        )
    return 0


def _simulate(
    args: argparse.Namespace, chosen: Any, out: Path, frames: FrameSelection, response: SensorResponse, renderer: Any
) -> Any:
    """Render into ``out`` (with a progress bar unless ``--quiet``); returns the manifest."""
    if args.quiet:
        return simulate_dataset(chosen, out, seed=args.seed, rays=args.rays, frames=frames, response=response,
                                renderer=renderer)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("[bold]simulate[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), transient=False,
    ) as bar:
        task = bar.add_task(chosen.name, total=None)

        def progress(label: str, done: int, total: int) -> None:
            bar.update(task, completed=done, total=total, description=f"{chosen.name}: {label}")

        return simulate_dataset(
            chosen, out, seed=args.seed, rays=args.rays, frames=frames, response=response,
            progress=progress, renderer=renderer,
        )
