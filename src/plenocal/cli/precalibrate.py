"""``plenocal precalibrate DATASET -o OUT``: white images → grid, types, Ω, initial camera.

Writes, atomically:

- ``OUT/camera.json`` — the initial camera (paper §3.3) with Ω;
- ``OUT/observations.npz`` — the micro-image centres (MIC observations for calibration; no BAP
  features yet);
- ``OUT/precalibration.json`` — grid fit, type layout and its confidence, each aperture's
  decision and reason, Ω, the configuration and whether it was inferred;
- ``OUT/radii.png|svg`` (paper fig:radii) and ``OUT/centres.png`` (a crop with centres and radii).

When Ω cannot be estimated nothing is written to ``OUT``; the radii figure that shows why goes to
a folder of its own in the system's temporary directory, named in the error line.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from plenocal import __version__
from plenocal.errors import DataError, InputFileError
from plenocal.io._json import write_document
from plenocal.io.atomic import atomic_folder
from plenocal.io.camera import write_camera
from plenocal.io.dataset import Dataset, ImageRole, read_dataset
from plenocal.io.observations import write_observations
from plenocal.io.outputs import STAGE_RECORD, check_output_folder
from plenocal.model.observations import BapFeatures, Observations
from plenocal.precalib.pipeline import Precalibration, PrecalibrationError, WhiteImage, precalibrate

OUTPUTS = ("camera.json", "observations.npz", "precalibration.json", "radii.png", "radii.svg", "centres.png",
           STAGE_RECORD)
"""What ``precalibrate`` writes in its output folder (replaced as a whole)."""
HELP = "pre-calibrate from white images: micro-image grid, lens types, internal parameters Ω, initial camera"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("precalibrate", help=HELP, description=HELP[0].upper() + HELP[1:] + ".")
    p.add_argument("dataset", type=Path, metavar="DATASET", help="plenocal dataset folder with white images")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="OUT", help="output folder")
    p.add_argument(
        "--estimator",
        choices=("variance", "paper"),
        default="variance",
        help="Ω estimator: exact second-moment law (default) or the paper's α·σ line fit",
    )
    p.add_argument("--no-plots", action="store_true", help="skip the figures")
    p.add_argument("--natural-vignetting", action="store_true",
                   help="take natural vignetting (cos·cos/r² of each ray) out of the whites' micro-image variances before "
                        "fitting Ω (experimental, off by default; with 'plenocal detect --natural-vignetting': docs/model.md)")
    p.set_defaults(func=run)


def _where_excluded(pc: Precalibration, conf: Any) -> str:
    """Where ``conf``'s excluded micro-images are, for the console line ('' when none)."""
    from plenocal.precalib.conformity import exclusion_by_radius

    info = exclusion_by_radius(conf, pc.camera.sensor.principal_point_px, pc.camera.sensor.pixel_size_mm)
    r = info["excluded_radius_mm"]
    return "" if r is None else f" (from {r['p05']:.1f} mm of the principal point, median {r['median']:.1f} mm)"


def checkerboard_f_number(dataset: Dataset) -> float:
    """The f-number of the checkerboard images (they must share one), else of the devignetting white."""
    m = dataset.manifest
    entries = [e for e in m.images if e.role in (ImageRole.CALIBRATION, ImageRole.EVALUATION, ImageRole.TRANSLATION, ImageRole.DEVIGNETTING)]
    ns = {e.f_number for e in entries if e.f_number is not None}
    if len(ns) > 1:
        raise InputFileError(dataset.folder / "manifest.json", f"checkerboard and devignetting images must share one f-number, got {sorted(ns)}")
    if not ns:
        raise InputFileError(dataset.folder / "manifest.json", "no f-number for the checkerboard images: set f_number on the calibration or devignetting images")
    return float(ns.pop())


def load_whites(dataset: Dataset) -> list[WhiteImage]:
    entries = dataset.manifest.with_role(ImageRole.WHITE)
    if not entries:
        raise InputFileError(dataset.folder / "manifest.json", "no images with role 'white': pre-calibration needs white images at >= 2 f-numbers")
    whites = []
    for e in entries:
        if e.f_number is None:
            raise InputFileError(dataset.folder / "manifest.json", f"white image {e.path} has no f_number")
        whites.append(WhiteImage(float(e.f_number), dataset.read_image(e), e.path))
    return whites


def summary(pc: Precalibration) -> dict[str, Any]:
    g = pc.grid_fit
    o = pc.omega
    return {
        "grid": {
            "lattice": g.grid.lattice.kind.value,
            "pitch_px": list(g.grid.pitch_px),
            "rotation_rad": g.grid.rotation_rad,
            "offset_px": list(g.grid.offset_px),
            "rms_px": g.rms_px,
            "rms_all_px": pc.grid_rms_all_px,
            "n_linked": len(g.uv),
            "n_rejected": g.n_rejected,
            "n_detected": pc.n_centres_detected,
        },
        "types": {
            "row_shift": list(pc.types.layout.row_shift),
            "n_types": pc.types.layout.n_types,
            "confidence": pc.types.confidence,
            "separation": pc.types.separation if np.isfinite(pc.types.separation) else None,
        },
        "apertures": [
            {"f_number": d.f_number, "used": d.used, "reason": d.reason, "median_radius_alpha_px": list(d.mean_radius_alpha_px),
             "type_confusion": d.type_confusion if np.isfinite(d.type_confusion) else None}
            for d in pc.internals.apertures
        ],
        "excluded_micro_images": excluded_summary(pc),
        "type_confusion": pc.internals.type_confusion,
        "estimator": pc.internals.estimator,
        "pixel_variance_px2": pc.internals.pixel_variance_px2,
        "unblurred_weight": pc.internals.unblurred_weight,
        "profile_fits": [
            {"f_number": N, "type": t, "radius_aperture_px": f.radius_aperture_px, "radius_lens_px": f.radius_lens_px,
             "spread_px": f.spread_px, "unblurred_weight": f.unblurred_weight, "rms_residual": f.rms_residual,
             "converged": f.converged}
            for N, t, f in pc.internals.profile_fits
        ],
        "warnings": list(pc.internals.warnings),
        "internal_parameters": {
            "m_mm": o.m_mm,
            "q_mm": list(o.q_mm),
            "q_prime_mm": list(o.q_prime_mm),
            "micro_image_pitch_mm": o.micro_image_pitch_mm,
            "lambda": o.lambda_,
            "f_number": o.f_number,
        },
        "configuration": pc.configuration.value,
        "configuration_inferred": pc.configuration_inferred,
        "lenslet_trend": None if o.lenslet_trend is None else o.lenslet_trend.to_dict(),
        "radius_law_field": None if o.field is None else {
            "reference_uv_px": list(o.field.reference_uv_px),
            "m_gradient_mm_per_px": list(o.field.m_gradient_mm_per_px),
            "q_gradient_mm_per_px": [list(g) for g in o.field.q_gradient_mm_per_px],
        },
        "initial_camera": {"D_mm": pc.camera.D_mm, "d_mm": pc.camera.d_mm, "focal_lengths_mm": list(pc.camera.mla.focal_lengths_mm),
                           "mla_tilt_xy_rad": list(pc.camera.mla.rotation_xyz_rad[:2])},
        "n_mic": len(pc.mic),
    }


def failure_figure(exc: PrecalibrationError) -> Path:
    """The radii figure of a failed pre-calibration, written to a new folder in the system's
    temporary directory (tempfile; ``TMPDIR`` chooses it); returns the file."""
    import tempfile

    from plenocal.viz import save_figure
    from plenocal.viz.precalib import radii_figure

    folder = Path(tempfile.mkdtemp(prefix="plenocal-precalibrate-failed-"))
    save_figure(radii_figure(exc.partial), folder / "radii", formats=("png",))
    return folder / "radii.png"


def excluded_summary(pc: Precalibration) -> dict[str, Any]:
    """The micro-images left out as not following the white-image model, per white, and the rules."""
    from plenocal.precalib import conformity as cf

    pp = pc.camera.sensor.principal_point_px
    s = pc.camera.sensor.pixel_size_mm
    per_white = []
    for N, c in sorted(pc.conformity.items()):
        entry = {"f_number": N, "n_micro_images": len(c.k), "n_excluded": int((~c.ok).sum()), "n_dark": int(c.dark.sum()),
                 "n_anisotropic": int(c.anisotropic.sum()), "n_off_lattice": int(c.off_lattice.sum()),
                 "anisotropy_sigma": c.anisotropy_sigma, "lattice_sigma_px": c.lattice_sigma_px}
        entry.update(cf.exclusion_by_radius(c, pp, s))
        per_white.append(entry)
    return {
        "rules": {"min_relative_mass": cf.MIN_RELATIVE_MASS, "max_anisotropy": cf.MAX_ANISOTROPY,
                  "max_lattice_departure_px": cf.MAX_LATTICE_DEPARTURE_PX, "noise_sigmas": cf.NOISE_SIGMAS,
                  "neighbourhood_nodes": cf.NEIGHBOURHOOD_NODES},
        "principal_point_px": list(pp),
        "per_white": per_white,
    }


def run(args: argparse.Namespace) -> int:
    dataset = read_dataset(args.dataset)
    out = Path(args.output)
    check_output_folder(out, inputs=[dataset.folder, *dataset.files()], owned=OUTPUTS)
    spec = dataset.manifest.camera_spec
    n_cb = checkerboard_f_number(dataset)
    whites = load_whites(dataset)
    t0 = time.perf_counter()
    try:
        pc = precalibrate(whites, spec, checkerboard_f_number=n_cb, estimator=args.estimator,
                          color=dataset.manifest.image_format.color, full_scale=1.0,
                          natural_vignetting=args.natural_vignetting)
    except PrecalibrationError as exc:
        # Ω could not be estimated: show why (the radii per type and aperture). A stage is complete or
        # absent, so the figure goes to a folder of its own in the system's temporary directory,
        # named in the line, never into OUT.
        where = "" if args.no_plots else f" (radii per type and aperture, for the diagnosis: {failure_figure(exc)}; {out} not written)"
        raise DataError(f"{dataset.folder}: {exc}{where}") from None
    except DataError as exc:
        raise DataError(f"{dataset.folder}: {exc}") from None
    wall = time.perf_counter() - t0
    doc = {"format": "plenocal-precalibration", "version": 1, "plenocal_version": __version__, "dataset": str(dataset.folder), "wall_time_s": wall}
    doc.update(summary(pc))
    provenance = {"stage": "precalibrate", "plenocal_version": __version__, "dataset": str(dataset.folder)}
    with atomic_folder(out, owned=OUTPUTS) as tmp:
        write_camera(tmp / "camera.json", pc.camera, internal_parameters=pc.omega, provenance=provenance)
        write_observations(tmp / "observations.npz", Observations(BapFeatures.empty(), pc.mic))
        write_document(tmp / "precalibration.json", doc)
        if not args.no_plots:
            from plenocal.viz import save_figure
            from plenocal.viz.precalib import centres_crop_figure, radii_figure

            save_figure(radii_figure(pc), tmp / "radii")
            ref = max(whites, key=lambda w: w.f_number)
            save_figure(centres_crop_figure(ref.image, ref.f_number, pc), tmp / "centres", formats=("png",))
    used = [f"{d.f_number:g}" for d in pc.internals.apertures if d.used]
    excluded = [c for c in pc.conformity.values() if not np.all(c.ok)]
    if excluded:
        counts = ", ".join(f"N = {c.f_number:g}: {int((~c.ok).sum())} of {len(c.k)}" for c in sorted(pc.conformity.values(), key=lambda c: c.f_number))
        where = _where_excluded(pc, max(excluded, key=lambda c: int((~c.ok).sum())))
        print(f"micro-images left out as not following the white-image model (clipped, distorted or dark): {counts}{where}")
    print(
        f"grid pitch {pc.grid_fit.grid.diameter_px:.4f} px (rms {pc.grid_fit.rms_px:.3f} px, {len(pc.mic)} centres); "
        f"types {pc.types.layout.row_shift} (confidence {pc.types.confidence:.3f}); "
        f"m = {pc.omega.m_mm * 1e3:.3f} µm from N = {', '.join(used)}; "
        f"{pc.configuration.value}{' (inferred)' if pc.configuration_inferred else ''}; "
        f"MLA tilt ({pc.camera.mla.rotation_xyz_rad[0] * 1e6:.0f}, {pc.camera.mla.rotation_xyz_rad[1] * 1e6:.0f}) µrad; "
        f"d = {pc.camera.d_mm * 1e3:.2f} µm, D = {pc.camera.D_mm:.3f} mm; {wall:.1f} s; wrote {out}"
    )
    for w in pc.internals.warnings:
        print(f"warning: {w}")
    return 0
