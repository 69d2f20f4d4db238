"""``plenocal calibrate DATASET -o OUT``: BAP calibration of the intrinsics and poses (paper §5).

Inputs (everything is read and validated before anything is written):

- observations: ``--observations`` or the dataset's ``observations.npz`` — BAP features (linked
  to nodes or with detector cluster ids) and micro-image centres (MICs). Only the frames of
  images with role ``calibration`` are used when the manifest lists checkerboard images; all
  frames otherwise. When the observations hold no MIC, those of a precalibration output
  (``--initial OUT_OF_PRECALIBRATE``) are used.
- initial camera (paper §3.3), the first that applies:

  1. ``--initial CAMERA`` (a ``camera.json``, or a ``plenocal precalibrate`` output folder);
  2. ``DATASET/camera.json`` (unless ``--from-omega``);
  3. from Ω (``DATASET/camera.json``'s ``internal_parameters``, else
     ``DATASET/internal_parameters.json``) with :func:`plenocal.model.white.initial_camera` and
     the manifest's ``camera_spec`` (F, h, configuration, sensor, lattice, types); the
     micro-image grid is the dataset camera's, else fitted to the MICs
     (:func:`plenocal.precalib.grid.fit_grid`).

The (u, v) model follows what the observations' (u, v) are (``positions``, recorded in
``observations.npz``; :data:`plenocal.model.observations.POSITIONS`): corners as plenocal's
detector sees them (``detect --no-pupil-vignetting``: ``as-seen``) are calibrated with the
pupil-vignetting shift, with its radii R_a, R_b from the white images (Ω) when known; chief-ray
positions (plenocal's ``detect``, and files without the record) and libpleno's template-fit
positions (``import-libpleno``; the shift does not describe them, docs/model.md) with the chief
ray. ``--pupil-vignetting`` / ``--no-pupil-vignetting`` override; the choice and its reason are
printed and kept in ``report.json`` and ``camera.json`` (``pupil``).

Outputs: ``OUT/camera.json`` (with Ω, ``uncertainty`` {name: Jacobian σ, ``std_frames``: {name: jackknife σ},
``std_lenslets``: {d, f_i: σ of their paraxial values when the whites show refractive micro-lenses},
``std_exit_pupil``: {name: σ through an exit pupil the images place badly}} and ``provenance``),
``OUT/poses.json``, ``OUT/report.json`` (``docs/formats.md``) and, with ``--ablation-table``,
``OUT/ablation.json`` and ``OUT/ablation.md`` (paper Table ablation: configurations 1–8 and
NOUR). A parameter table is printed to stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import math
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import numpy as np

from plenocal import __version__
from plenocal.calib.calibrate import (
    ABLATION_CONFIGURATIONS,
    DEFAULT_RHO_FORM,
    DEFAULT_WEIGHTING,
    CalibrationOptions,
    CalibrationResult,
    as_pinhole,
    calibrate,
)
from plenocal.calib.lenslets import lenslet_record
from plenocal.calib.parameters import ParameterLayout
from plenocal.calib.plausibility import (
    MIN_CALIBRATION_FRAMES,
    MIN_FRAMES_ABSOLUTE,
    radius_slope_sigma,
    result_problems,
)
from plenocal.calib.priors import Prior, check_priors
from plenocal.calib.pupil_systematic import exit_pupil_systematic
from plenocal.calib.residuals import MeasuredPupilRadii
from plenocal.errors import DataError, InputFileError, ModelError, ResultError, UsageError
from plenocal.evaluate.field import ModelField, field_of_calibration, micro_image_radius_mm
from plenocal.io._json import write_document
from plenocal.io.atomic import atomic_folder
from plenocal.io.camera import read_camera_file, read_internal_parameters, write_camera
from plenocal.io.dataset import Dataset, ImageRole, read_dataset
from plenocal.io.observations import read_observations, validate_observations
from plenocal.io.outputs import STAGE_RECORD, check_output_folder
from plenocal.io.poses import write_poses
from plenocal.model.camera import MicroImageGrid, PlenopticCamera, RhoForm
from plenocal.model.observations import POSITIONS_AS_SEEN, Observations
from plenocal.model.white import InternalParameters

HELP = "calibrate the intrinsics and poses from BAP features and micro-image centres (BAP, paper §5)"
REPORT_FORMAT = "plenocal-calibration"
ABLATION_FORMAT = "plenocal-ablation"

_GROUP_NAMES = ("tilt", "pitch", "distortion")
OUTPUTS = ("camera.json", "poses.json", "report.json", "ablation.json", "ablation.md", STAGE_RECORD)
"""What ``calibrate`` writes in its output folder (replaced as a whole)."""


@dataclasses.dataclass
class Inputs:
    """Everything read from disk, validated."""

    dataset: Dataset
    observations: Observations
    camera: PlenopticCamera
    omega: InternalParameters | None
    frames: tuple[int, ...]
    initial_source: str
    files: dict[str, Path]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("calibrate", help=HELP, description=HELP[0].upper() + HELP[1:] + ".")
    p.add_argument("dataset", type=Path, metavar="DATASET", help="plenocal dataset folder")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="OUT", help="output folder")
    p.add_argument("--initial", type=Path, default=None, metavar="CAMERA",
                   help="initial camera.json, or a 'plenocal precalibrate' output folder (default: the dataset's)")
    p.add_argument("--from-omega", action="store_true",
                   help="build the initial camera from Ω and the camera spec even if DATASET/camera.json exists")
    p.add_argument("--observations", type=Path, default=None, help="observations.npz (default: the dataset's)")
    p.add_argument("--loss", choices=("huber", "linear"), default="huber",
                   help="robust Huber loss with outlier rejection (default) or plain least squares")
    p.add_argument("--freeze", default="", metavar="GROUP[,GROUP...]",
                   help="parameter groups or names held at their initial value (e.g. tilt,pitch)")
    model = p.add_argument_group("camera model")
    pitches = model.add_mutually_exclusive_group()
    pitches.add_argument("--two-pitches", dest="two_pitches", action="store_true", default=None,
                         help="optimise two MLA pitches p0, p1 (libpleno HEAD; the default)")
    pitches.add_argument("--one-pitch", dest="two_pitches", action="store_false",
                         help="one MLA pitch (the paper)")
    model.add_argument("--rho-form", choices=[r.value for r in RhoForm], default=None,
                       help=f"blur-radius form: lens distances of ρ (default {DEFAULT_RHO_FORM}; see docs)")
    pupil = model.add_mutually_exclusive_group()
    pupil.add_argument("--exit-pupil", dest="exit_pupil", action="store_true", default=None,
                       help="estimate the main lens's exit-pupil distance e behind its rear principal plane: "
                            "micro-image centres are images of the exit-pupil centre (a real lens; by default estimated and kept when the data support it)")
    pupil.add_argument("--no-exit-pupil", dest="exit_pupil", action="store_false",
                       help="the aperture in the main-lens plane (the paper's thin lens): e held at the initial camera's")
    depth = model.add_mutually_exclusive_group()
    depth.add_argument("--depth-distortion", dest="depth_distortion", action="store_true", default=None,
                       help="estimate the depth distortion Z1·r² + Z2·r⁴ of the virtual space (a real lens's curved field; "
                            "by default estimated and kept when the data support it)")
    depth.add_argument("--no-depth-distortion", dest="depth_distortion", action="store_false",
                       help="no depth distortion (the paper's model): Z1, Z2 held at the initial camera's")
    model.add_argument("--legacy-model", action="store_true",
                       help="the paper's model: one pitch, the legacy ρ and the aperture in the lens plane "
                            "(reproduces the paper's R12-A numbers)")
    p.add_argument("--weighting", choices=("none", "noise"), default=None,
                   help="the paper's unweighted Θ (default; measured more accurate on independent data) "
                        "or per-term 1/σ² weights (maximum likelihood for pure noise; the default with --pinhole, "
                        "where nothing else pins the depth scale); σ are honest either way")
    p.add_argument("--prior", action="append", default=[], metavar="NAME=MEAN±STD",
                   help="a Gaussian prior for what you know of the lens, e.g. F_mm=50±2 or focus_distance_mm=1000±50 "
                        "(also +-); repeatable; off by default. It enters Θ as a measurement of variance STD², so σ "
                        "stays a σ; the report shows where the calibration put it")
    p.add_argument("--lens", default=None, metavar="PRESCRIPTION",
                   help="the main lens's prescription (a bundled design's name, scaled to the nominal focal length, or "
                        "a plenocal-lens JSON file): its exit pupil becomes the prior exit_pupil_mm=e±1 (see "
                        "'plenocal lens'); for lenses whose images cannot place it")
    p.add_argument("--pinhole", action="store_true", help="pinhole micro-lenses, I = 0, no ρ (NOUR baseline)")
    p.add_argument("--ablation", type=int, choices=range(1, 9), default=None, metavar="N",
                   help="paper Table ablation configuration 1..8 (tilt/pitch/distortion kept or frozen)")
    p.add_argument("--ablation-table", action="store_true",
                   help="also run configurations 1..8 and NOUR; write ablation.json and ablation.md")
    pupil = p.add_mutually_exclusive_group()
    pupil.add_argument("--pupil-vignetting", dest="pupil_vignetting", action="store_true", default=None,
                       help="model the main-aperture vignetting of the micro-lens pupil in (u, v) (beyond the paper; "
                            "default: when the observations record as-seen positions)")
    pupil.add_argument("--no-pupil-vignetting", dest="pupil_vignetting", action="store_false",
                       help="chief-ray (u, v) whatever the observations record")
    p.add_argument("--no-mic", action="store_true", help="leave the micro-image-centre term out of Θ")
    p.add_argument("--allow-failed-checks", "--allow-unconverged", dest="allow_failed_checks", action="store_true",
                   help="write the result even when it is not converged or not physically plausible (d <= 0, F far "
                        "from the nominal focal length, a single frame...); the files then say so "
                        "('checks' in report.json, 'provenance.checks_failed' in camera.json)")
    p.set_defaults(func=run)


# --- inputs ------------------------------------------------------------------------------------
def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _calibration_frames(dataset: Dataset, obs: Observations, obs_path: Path) -> tuple[int, ...]:
    """Frames of the calibration-role images (all observed frames when no checkerboard image is listed)."""
    m = dataset.manifest
    roles = (ImageRole.CALIBRATION, ImageRole.EVALUATION, ImageRole.TRANSLATION)
    listed = [e for e in m.images if e.role in roles and e.frame is not None]
    observed = {int(f) for f in np.unique(obs.bap.frame)}
    if not listed:
        frames = observed
    else:
        frames = {int(e.frame) for e in listed if e.role is ImageRole.CALIBRATION and e.frame is not None} & observed
    if not frames:
        raise InputFileError(obs_path, "no BAP features in calibration frames" if observed else "no BAP features")
    return tuple(sorted(frames))


def _fit_mia(spec_lattice: Any, obs: Observations, shape: tuple[int, int], path: Path) -> MicroImageGrid:
    """MIA grid fitted to the MICs; their labels must agree with the observations' (k, l)."""
    from plenocal.precalib.grid import fit_grid

    mic = obs.mic
    uv = np.stack([mic.u, mic.v], axis=1)
    try:
        fit = fit_grid(uv, spec_lattice, shape)
    except DataError as exc:
        raise InputFileError(path, f"cannot fit a micro-image grid to the centres: {exc}") from None
    # The fit labels the centres itself (docs/conventions.md); check against the imported labels.
    key_obs = {(float(a), float(b)): (int(k), int(l)) for a, b, k, l in zip(mic.u, mic.v, mic.k, mic.l, strict=True)}
    agree = sum(key_obs.get((float(a), float(b))) == (int(k), int(l))
                for (a, b), k, l in zip(fit.uv, fit.k, fit.l, strict=True))
    if agree < 0.9 * len(fit.uv):
        raise InputFileError(path, f"micro-image centre labels (k, l) disagree with the fitted grid's "
                                   f"({agree} of {len(fit.uv)} agree): cannot build the initial camera from Ω")
    return fit.grid


def _camera_from_omega(dataset: Dataset, obs: Observations, obs_path: Path, omega: InternalParameters,
                       omega_path: Path, mia: MicroImageGrid | None) -> PlenopticCamera:
    from plenocal.model.white import initial_camera

    spec = dataset.manifest.camera_spec
    manifest = dataset.folder / "manifest.json"
    if spec.main_lens_focal_length_mm is None:
        raise InputFileError(manifest, "camera_spec has no main-lens focal length: the initial camera cannot be built from Ω")
    if spec.configuration is None:
        raise InputFileError(manifest, "camera_spec has no configuration: the initial camera cannot be built from Ω")
    if spec.lattice is None:
        raise InputFileError(manifest, "camera_spec has no lattice: the initial camera cannot be built from Ω")
    if mia is None:
        if len(obs.mic) < 10:
            raise InputFileError(obs_path, "no micro-image grid known and too few micro-image centres to fit one")
        mia = _fit_mia(spec.lattice, obs, (spec.height_px, spec.width_px), obs_path)
    f_numbers = {e.f_number for e in dataset.manifest.with_role(ImageRole.CALIBRATION) if e.f_number is not None}
    n = float(f_numbers.pop()) if len(f_numbers) == 1 else None
    try:
        camera, _ = initial_camera(
            omega, focal_length_mm=spec.main_lens_focal_length_mm, focus_distance_mm=spec.focus_distance_mm,
            configuration=spec.configuration, sensor_size_px=(spec.width_px, spec.height_px), mia=mia,
            type_layout=spec.type_layout, f_number=n,
        )
    except ModelError as exc:
        raise InputFileError(omega_path, f"cannot build the initial camera from Ω: {exc}") from None
    return camera


def read_inputs(args: argparse.Namespace) -> Inputs:
    """Read and validate the dataset, observations and initial camera (see the module docstring)."""
    dataset = read_dataset(args.dataset)
    files: dict[str, Path] = {"manifest": dataset.folder / "manifest.json"}
    obs_path = args.observations if args.observations is not None else dataset.observations_path
    if obs_path is None:
        raise InputFileError(dataset.folder, "no observations in the dataset (observations.npz); pass --observations")
    obs = read_observations(obs_path)
    files["observations"] = Path(obs_path)
    frames = _calibration_frames(dataset, obs, Path(obs_path))

    initial_cam_path: Path | None = None
    if args.initial is not None:
        initial_cam_path = args.initial / "camera.json" if args.initial.is_dir() else args.initial
        if args.initial.is_dir() and len(obs.mic) == 0 and (args.initial / "observations.npz").is_file():
            pre = read_observations(args.initial / "observations.npz")
            obs = Observations(obs.bap, pre.mic, obs.positions)
            files["initial_observations"] = args.initial / "observations.npz"
    initial_file = read_camera_file(initial_cam_path) if initial_cam_path is not None else None
    ds_file = read_camera_file(dataset.camera_path) if dataset.camera_path is not None else None
    if initial_file is not None:
        assert initial_cam_path is not None
        files["initial_camera"] = initial_cam_path
        camera, omega, source = initial_file.camera, initial_file.internal_parameters, str(initial_cam_path)
    elif ds_file is not None and not args.from_omega:
        assert dataset.camera_path is not None
        files["initial_camera"] = dataset.camera_path
        camera, omega, source = ds_file.camera, ds_file.internal_parameters, str(dataset.camera_path)
    else:
        if ds_file is not None and ds_file.internal_parameters is not None:
            assert dataset.camera_path is not None
            omega, omega_path = ds_file.internal_parameters, dataset.camera_path
        elif dataset.internal_parameters_path is not None:
            omega_path = dataset.internal_parameters_path
            omega = read_internal_parameters(omega_path)
        else:
            raise InputFileError(dataset.folder, "no initial camera: no camera.json and no Ω "
                                 "(internal_parameters.json); run 'plenocal precalibrate' and pass --initial")
        files["internal_parameters"] = omega_path
        mia = ds_file.camera.grid if ds_file is not None else None
        camera = _camera_from_omega(dataset, obs, Path(obs_path), omega, omega_path, mia)
        source = f"Ω of {omega_path}" + ("" if mia is not None else " + micro-image grid fitted to the centres")
    if not args.no_mic and len(obs.mic) == 0:
        raise InputFileError(obs_path, "no micro-image centres (the MIC term of Θ needs them); "
                             "pass --initial PRECALIBRATION_OUT or --no-mic")
    if camera.n_types == 0 and not args.pinhole:
        raise InputFileError(Path(files.get("initial_camera", obs_path)),
                             "the initial camera has no micro-lens types (I = 0); use --pinhole")
    spec = dataset.manifest.camera_spec
    sensor = (camera.sensor.width_px, camera.sensor.height_px)
    if sensor != (spec.width_px, spec.height_px):
        raise InputFileError(Path(files.get("initial_camera", obs_path)),
                             f"sensor {sensor[0]} x {sensor[1]} px differs from the dataset's {spec.width_px} x "
                             f"{spec.height_px} px (manifest.json camera_spec): a camera of another dataset")
    # Indices on the camera's lattice, positions on its sensor, nodes on the target.
    validate_observations(obs, obs_path, lattice=camera.mla.lattice, image_size=sensor,
                          n_nodes=dataset.manifest.target.n_nodes)
    if len(frames) < MIN_FRAMES_ABSOLUTE:
        raise InputFileError(obs_path, f"BAP features in {len(frames)} calibration frame(s) ({list(frames)}), need >= "
                                       f"{MIN_CALIBRATION_FRAMES}: one view of a plane leaves the principal point and "
                                       "the depth scale undetermined")
    if len(frames) < MIN_CALIBRATION_FRAMES and not getattr(args, "allow_failed_checks", False):
        raise InputFileError(obs_path, f"BAP features in {len(frames)} calibration frames ({list(frames)}), need >= "
                                       f"{MIN_CALIBRATION_FRAMES}: with fewer the σ of the principal point and the scale "
                                       "cannot be checked by frame resampling and the Jacobian σ alone is several times "
                                       "too small; add views of the board at other tilts (--allow-failed-checks "
                                       "calibrates them anyway, marked)")
    return Inputs(dataset, obs, camera, omega, frames, source, files)


# --- options -----------------------------------------------------------------------------------
VIGNETTED_POSITIONS = frozenset({POSITIONS_AS_SEEN})
"""Observations whose (u, v) the pupil-vignetting model is chosen for when no option says
otherwise: the corners plenocal's estimator reports where they appear. On PRISM's r12-b renders
(exact truth), as-seen detections calibrated with the chief ray put d and f_i 29 % off (76σ); with
the shift and the white images' radii d is 0.3 % and F 0.06 % off. Not libpleno's template fit:
on the real R12-A observations the shift with the whites' radii raises the least-squares cost by
17 % (docs/model.md)."""


def pupil_choice(args: argparse.Namespace, positions: str) -> tuple[bool, str]:
    """Whether to model the pupil vignetting, and why (an explicit option, else the observations'
    recorded ``positions``: :data:`VIGNETTED_POSITIONS`)."""
    explicit = getattr(args, "pupil_vignetting", None)
    if explicit is not None:
        return bool(explicit), "--pupil-vignetting" if explicit else "--no-pupil-vignetting"
    on = positions in VIGNETTED_POSITIONS
    return on, f"the observations' (u, v) are {positions} positions"


def options_from_args(args: argparse.Namespace, camera: PlenopticCamera | None = None, *,
                      positions: str = "chief-ray") -> CalibrationOptions:
    """Calibration options from the command line; with ``camera``, ``--freeze`` names are checked
    against its parameters (one line naming the option); the pupil model from the options or the
    observations' ``positions`` (:func:`pupil_choice`)."""
    freeze = [g.strip() for g in args.freeze.split(",") if g.strip()]
    if args.ablation is not None:
        freeze += list(ABLATION_CONFIGURATIONS[args.ablation])
    legacy = getattr(args, "legacy_model", False)
    two_pitches = getattr(args, "two_pitches", None)
    rho_form = getattr(args, "rho_form", None)
    if legacy and (two_pitches or (rho_form not in (None, RhoForm.LEGACY.value))):
        raise UsageError("--legacy-model is one pitch and the legacy ρ: it cannot go with --two-pitches or another --rho-form")
    two_pitches = (not legacy) if two_pitches is None else two_pitches
    exit_pupil = getattr(args, "exit_pupil", None)
    if legacy and exit_pupil:
        raise UsageError("--legacy-model has the aperture in the lens plane: it cannot go with --exit-pupil")
    exit_pupil = (False if legacy else None) if exit_pupil is None else exit_pupil  # None: the data choose
    depth_distortion = getattr(args, "depth_distortion", None)
    if legacy and depth_distortion:
        raise UsageError("--legacy-model has no depth distortion: it cannot go with --depth-distortion")
    depth_distortion = (False if legacy else None) if depth_distortion is None else depth_distortion
    if camera is not None and freeze:
        template = as_pinhole(camera) if args.pinhole else camera
        try:
            lay = ParameterLayout(template, (), two_pitches=two_pitches, frozen=frozenset(freeze),
                                  exit_pupil=exit_pupil is not False, depth_distortion=depth_distortion is not False)
        except ModelError as exc:
            raise UsageError(f"--freeze {args.freeze}: {exc}") from None
        if "poses" in freeze and not lay.free_mask.any():
            raise UsageError(f"--freeze {args.freeze}: leaves nothing to calibrate (every intrinsic and every pose frozen)")
    priors = tuple(Prior.parse(t) for t in getattr(args, "prior", None) or ())
    if camera is not None and priors:
        template = as_pinhole(camera) if args.pinhole else camera
        check_priors(ParameterLayout(template, (), two_pitches=two_pitches, frozen=frozenset(freeze),
                                     exit_pupil=exit_pupil is not False, depth_distortion=depth_distortion is not False),
                     priors)
    return CalibrationOptions(
        freeze=tuple(dict.fromkeys(freeze)),
        two_pitches=two_pitches,
        rho_form=RhoForm.LEGACY.value if legacy else (rho_form or DEFAULT_RHO_FORM),
        pinhole_micro_lenses=args.pinhole,
        loss=args.loss,
        weighting=getattr(args, "weighting", None) or ("noise" if args.pinhole else DEFAULT_WEIGHTING),
        use_mic=not args.no_mic,
        pupil_vignetting=pupil_choice(args, positions)[0],
        priors=priors,
        exit_pupil=exit_pupil,
        depth_distortion=depth_distortion,
    )


def _finite(x: Any) -> Any:
    """JSON-safe copy: NaN/inf → None, numpy scalars → Python."""
    if isinstance(x, dict):
        return {str(k): _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    if isinstance(x, np.ndarray):
        return _finite(x.tolist())
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, float | np.floating):
        return float(x) if math.isfinite(float(x)) else None
    return x


def _run(obs: Observations, camera: PlenopticCamera, board: Any, frames: tuple[int, ...],
         opt: CalibrationOptions, where: Path, *, pupil_radii: MeasuredPupilRadii | None = None) -> CalibrationResult:
    try:
        return calibrate(obs, camera, board, options=opt, frames=frames, pupil_radii=pupil_radii)
    except (DataError, ModelError) as exc:
        raise DataError(f"{where}: {exc}") from None


def pupil_record(result: CalibrationResult, positions: str, reason: str) -> dict[str, Any]:
    """What report.json and camera.json say of the (u, v) model: the observations' positions, the
    model, why, and where the shift's radii came from."""
    return {"positions": positions, "model": "pupil-vignetting" if result.pupil.get("vignetting") else "chief-ray",
            "chosen_by": reason, **({"radii": result.pupil["radii"]} if "radii" in result.pupil else {})}


def pupil_line(pupil: dict[str, Any]) -> str:
    """One line for the console: the (u, v) model and why."""
    radii = f"; shift radii from the {pupil['radii']}" if "radii" in pupil else ""
    return f"(u, v) model: {pupil['model']} ({pupil['chosen_by']}{radii})"


def model_line(result: CalibrationResult) -> str | None:
    """One line for the console: which real-lens terms the data chose, and why (None: none left
    to the data)."""
    sel = result.model_selection
    if not sel:
        return None
    words = {"exit_pupil": "exit pupil e", "depth_distortion": "depth distortion Z1, Z2"}
    parts = [f"{words[t]} {'kept' if ev['kept'] else 'left out'} ({ev['reason']})" for t, ev in sel.items()]
    return "main-lens model chosen by the data: " + "; ".join(parts)


def ablation_rows(inputs: Inputs, base: CalibrationOptions, *,
                  pupil_radii: MeasuredPupilRadii | None = None) -> list[dict[str, Any]]:
    """Configurations 1..8 of paper Table ablation and NOUR, each from the same initial camera (and
    the same (u, v) model)."""
    rows = []
    board = inputs.dataset.manifest.target
    configs: list[tuple[str, CalibrationOptions]] = [
        (str(n), dataclasses.replace(base, freeze=tuple(dict.fromkeys(base.freeze + fr)), pinhole_micro_lenses=False))
        for n, fr in ABLATION_CONFIGURATIONS.items()
    ]
    # NOUR with the unweighted Θ walks F to 0: without ρ only the noise-weighted centres pin the depth scale.
    configs.append(("NOUR", dataclasses.replace(base, pinhole_micro_lenses=True, weighting="noise")))
    for name, opt in configs:
        fr = set(opt.freeze)
        row: dict[str, Any] = {"configuration": name}
        row.update({g: ("removed" if g in fr else "kept") for g in _GROUP_NAMES})
        if name == "NOUR":
            row.update({g: "kept" for g in _GROUP_NAMES})
        try:
            r = _run(inputs.observations, inputs.camera, board, inputs.frames, opt, inputs.files["observations"],
                     pupil_radii=pupil_radii)
        except DataError as exc:
            row.update(converged=False, error=str(exc))
            rows.append(row)
            continue
        p = {q.name: q for q in r.parameters()}
        row.update(
            converged=r.converged, termination=r.solver.termination, iterations=r.solver.iterations,
            rmse=dict(r.rmse), n_bap=r.n_bap, n_mic=r.n_mic, rejected=dict(r.rejected),
            wall_time_s=r.timings_s.get("total"),
            parameters={n: {"value": p[n].value, "std": p[n].std} for n in
                        ("F_mm", "D_mm", "d_mm", "u0_px", "v0_px", "theta_x_rad", "theta_y_rad", "pitch_mm", "pitch0_mm", "pitch1_mm",
                         *sorted(k for k in p if k[0] == "f" and k[1:-3].isdigit() and k.endswith("_mm")))
                        if n in p},
        )
        rows.append(row)
    return rows


def ablation_markdown(rows: list[dict[str, Any]]) -> str:
    def f(x: Any) -> str:
        return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.4f}"

    lines = ["| config | tilt | pitch | distortion | converged | RMSE uv (px) | RMSE ρ (px) | RMSE MIC (px) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        rm = r.get("rmse", {})
        mark = {"kept": "✓", "removed": "✗"}
        lines.append(
            f"| {r['configuration']} | {mark[r['tilt']]} | {mark[r['pitch']]} | {mark[r['distortion']]} | "
            f"{'yes' if r.get('converged') else 'no'} | {f(rm.get('uv_px'))} | {f(rm.get('rho_px'))} | {f(rm.get('mic_px'))} |"
        )
    return "\n".join(lines) + "\n"


def build_report(result: CalibrationResult, inputs: Inputs, *, wall_s: float, read_s: float) -> dict[str, Any]:
    rep = result.report()
    doc: dict[str, Any] = {"format": REPORT_FORMAT, "version": 1, "plenocal_version": __version__,
                           "dataset": str(inputs.dataset.folder), "initial_camera": inputs.initial_source,
                           "inputs": {k: str(v) for k, v in inputs.files.items()}, "frames": list(inputs.frames)}
    doc.update(rep)
    lenslets = lenslet_record(inputs.omega.lenslet_trend if inputs.omega is not None else None,
                              {p.name: p.value for p in result.parameters() if not p.frozen})
    if lenslets is not None:
        doc["lenslets"] = lenslets
        for name, sd in lenslets["systematic"].items():
            doc["parameters"][name]["std_lenslets"] = sd
    pupil = exit_pupil_systematic(doc)  # how far the intrinsics rest on a pupil the images place badly
    for name, rel in (pupil.relative.items() if pupil is not None else ()):
        doc["parameters"][name]["std_exit_pupil"] = rel * abs(float(doc["parameters"][name]["value"]))
    for name, sd in (pupil.absolute.items() if pupil is not None else ()):
        if name in doc["parameters"]:
            doc["parameters"][name]["std_exit_pupil"] = sd
    timings: dict[str, Any] = dict(cast("dict[str, float]", rep["timings_s"]))
    timings["read_inputs"] = read_s
    doc["timings_s"] = timings
    doc["command_wall_time_s"] = wall_s
    return _finite(doc)


def relative_extents(observations: Observations, poses: Mapping[int, Any], board: Any) -> dict[int, tuple[int, int, int, int]]:
    """{frame: its linked nodes' columns and rows} of the posed frames linked with relative node
    ids (``poses.json``'s ``node_extent``: where their pose places the printed board)."""
    out = {}
    for f in observations.relative_frames:
        ext = observations.node_extent(f, columns=board.columns) if f in poses else None
        if ext is not None:
            out[f] = ext
    return out


def input_paths(args: argparse.Namespace, inputs: Inputs) -> list[Path]:
    """Every file and folder the command reads (for the output-folder check)."""
    return [inputs.dataset.folder, *inputs.dataset.files(), *inputs.files.values(),
            *([args.initial] if args.initial is not None else [])]


def checks(result: CalibrationResult, inputs: Inputs, *, allow: bool) -> list[str]:
    """The result checks (:func:`plenocal.calib.plausibility.result_problems`); raises
    :class:`ResultError` when one fails, unless ``allow``; returns the failed ones."""
    problems = result_problems(result, nominal_focal_length_mm=inputs.dataset.manifest.camera_spec.main_lens_focal_length_mm,
                               omega=inputs.omega)
    if problems and not allow:
        raise ResultError(f"{inputs.files['observations']}: calibration not written: {'; '.join(problems)} "
                          "(--allow-failed-checks writes it anyway, marked)")
    return problems


def consistency_record(result: CalibrationResult, inputs: Inputs) -> dict[str, Any]:
    """What report.json keeps of the checks against the declarations: the nominal focal length and
    the radius-law slope of the calibrated camera against the white images' (Ω)."""
    out: dict[str, Any] = {"nominal_focal_length_mm": inputs.dataset.manifest.camera_spec.main_lens_focal_length_mm}
    m_white = inputs.omega.m_mm if inputs.omega is not None else None
    if m_white:
        m, std, std_frames = radius_slope_sigma(result)
        out["radius_slope"] = _finite({"calibrated_mm": m, "std_mm": std, "std_frames_mm": std_frames,
                                       "white_images_mm": m_white, "relative": m / m_white - 1.0})
    return out


def beyond_field(result: CalibrationResult, field: ModelField) -> dict[str, int]:
    """How many of calibration's features (``features_beyond``: kept and rejected) and of those it
    rejected (``rejected_beyond``) lie beyond the model's field: the verdict judges the rejections
    within it (:data:`plenocal.viz.verdict.REJECTED_FRACTION_ERROR`)."""
    if not field.limited:
        return {"rejected_beyond": 0, "features_beyond": 0}
    cam = result.camera
    rej, kept = result.rejected_features, result.kept_bap
    n_rej = int(np.sum(micro_image_radius_mm(cam, rej.k, rej.l) > field.radius_mm))
    n_kept = int(np.sum(micro_image_radius_mm(cam, kept.k, kept.l) > field.radius_mm))
    return {"rejected_beyond": n_rej, "features_beyond": n_rej + n_kept}


def run(args: argparse.Namespace) -> int:
    t_start = time.perf_counter()
    inputs = read_inputs(args)
    out = Path(args.output)
    check_output_folder(out, inputs=input_paths(args, inputs), owned=OUTPUTS)
    read_s = time.perf_counter() - t_start
    positions = inputs.observations.positions
    if getattr(args, "lens", None):
        from plenocal.cli.lens import lens_exit_pupil_prior

        nominal = inputs.dataset.manifest.camera_spec.main_lens_focal_length_mm or inputs.camera.main_lens.focal_length_mm
        legacy = getattr(args, "legacy_model", False)
        args.prior = [*(args.prior or []), str(lens_exit_pupil_prior(
            args.lens, focal_length_mm=nominal, priors=tuple(args.prior or ()),
            exit_pupil=False if legacy else getattr(args, "exit_pupil", None)))]
    opt = options_from_args(args, inputs.camera, positions=positions)
    if inputs.omega is not None and inputs.omega.m_mm:  # the whites judge the exit pupil the data choose
        opt = dataclasses.replace(opt, white_radius_slope_mm=float(inputs.omega.m_mm))
    board = inputs.dataset.manifest.target
    radii = MeasuredPupilRadii(inputs.omega, inputs.camera.grid) \
        if opt.pupil_vignetting and inputs.omega is not None and not opt.pinhole_micro_lenses else None
    result = _run(inputs.observations, inputs.camera, board, inputs.frames, opt, inputs.files["observations"],
                  pupil_radii=radii)
    pupil = pupil_record(result, positions, pupil_choice(args, positions)[1])
    failed = checks(result, inputs, allow=args.allow_failed_checks)
    # Every ablation row in the main-lens model the data chose for the calibration.
    rows = ablation_rows(inputs, dataclasses.replace(opt, freeze=tuple(g for g in opt.freeze if g not in
                                                                       ("tilt", "pitch", "distortion")),
                                                     exit_pupil=result.options.exit_pupil,
                                                     depth_distortion=result.options.depth_distortion),
                         pupil_radii=radii) if args.ablation_table else None
    uncertainty: dict[str, Any] = {p.name: p.std for p in result.parameters() if not p.frozen}
    frames_sd = {p.name: p.std_frames for p in result.parameters() if not p.frozen and p.std_frames is not None}
    if frames_sd:
        uncertainty["std_frames"] = frames_sd  # {name: σ} from the leave-one-frame-out jackknife
    provenance = {
        "stage": "calibrate",
        "plenocal_version": __version__,
        "settings": _finite(dataclasses.asdict(opt)),
        "initial_camera": inputs.initial_source,
        "inputs": {k: {"path": str(v), "sha256": _sha256(v)} for k, v in inputs.files.items()},
    }
    provenance["pupil"] = pupil
    if opt.priors:
        provenance["priors"] = _finite(result.prior_summary())
    report = build_report(result, inputs, wall_s=time.perf_counter() - t_start, read_s=read_s)
    lenslet_sd = dict((report.get("lenslets") or {}).get("systematic") or {})
    if lenslet_sd:
        uncertainty["std_lenslets"] = lenslet_sd  # {name: σ} of the paraxial d, f_i (refractive micro-lenses)
    pupil_sd = {n: q["std_exit_pupil"] for n, q in report["parameters"].items() if "std_exit_pupil" in q}
    if pupil_sd:
        uncertainty["std_exit_pupil"] = pupil_sd  # {name: σ} of F, D through a badly placed exit pupil
    report["pupil"] = pupil
    report["checks"] = {"passed": not failed, "failed": failed, "written_anyway": bool(failed)}
    report["consistency"] = consistency_record(result, inputs)
    field = field_of_calibration(result.camera, result.poses, board, inputs.observations)
    field_json = {**field.to_json(), "centre_px": list(result.camera.principal_point_px),
                  "radius_px": field.radius_mm / result.camera.sensor.pixel_size_mm}
    report["model_field"] = _finite({**field_json, **beyond_field(result, field)})
    if failed:
        provenance["checks_failed"] = failed
    # Everything computed and checked: now write, all files or none.
    with atomic_folder(out, owned=OUTPUTS) as tmp:
        written = [
            write_camera(tmp / "camera.json", result.camera, internal_parameters=inputs.omega,
                         uncertainty=_finite(uncertainty), provenance=provenance,
                         model_field=_finite(field_json)),
            write_poses(tmp / "poses.json", result.poses, node_extents=relative_extents(inputs.observations, result.poses, board)),
            write_document(tmp / "report.json", report),
        ]
        if rows is not None:
            written.append(write_document(tmp / "ablation.json", _finite(
                {"format": ABLATION_FORMAT, "version": 1, "plenocal_version": __version__, "configurations": rows})))
            from plenocal.io.atomic import atomic_write_text

            written.append(atomic_write_text(tmp / "ablation.md", ablation_markdown(rows)))
    print(pupil_line(pupil))
    if (line := model_line(result)) is not None:
        print(line)
    print(result.parameter_table())
    if lenslet_sd:
        rel = report["lenslets"]["relative_systematic"]
        print(f"micro-lenses: {report['lenslets']['reason']}; the paraxial values of d and f_i lie ±"
              f"{100 * rel['d']:.1f} % and ±{100 * rel['f']:.1f} % (1σ) from these effective ones (std_lenslets)")
    print(field.line())
    rm = result.rmse
    print(
        f"rmse uv {rm['uv_px']:.4g} px, rho {rm['rho_px']:.4g} px, mic {rm['mic_px']:.4g} px; "
        f"{result.n_bap} features, {result.n_mic} centres, {len(result.poses)} frames; "
        f"{'converged' if result.converged else 'NOT converged'} ({result.solver.termination}) "
        f"in {result.timings_s['total']:.2f} s; wrote {', '.join(p.name for p in written)} to {out}"
    )
    for w in result.uncertainty_warnings():
        print(f"warning: {w}")
    if rows is not None:
        print(ablation_markdown(rows), end="")
    if failed:
        print(f"plenocal calibrate: warning: written despite failed checks (--allow-failed-checks): {'; '.join(failed)}",
              file=sys.stderr)
    from plenocal.cli.main import verdict_exit_code

    return verdict_exit_code(out, command="calibrate", written=f"written to {out} anyway", quiet=bool(failed))
