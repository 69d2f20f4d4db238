"""``plenocal evaluate DATASET --camera CAMERA [--poses POSES] -o OUT``: reprojection, held-out, ε_z.

Writes ``OUT/report.json``, assembled from independent sections (see :func:`build_report`):

- reprojection (top-level keys ``rmse``, ``per_frame``, ...): the camera and the given poses on
  the observations (when poses are available: ``--poses`` or ``DATASET/poses.json``);
- ``holdout``: frames of images with role ``evaluation`` — each pose re-estimated with the
  intrinsics fixed (:mod:`plenocal.evaluate.holdout`), RMSE per term, per lens type, per frame
  (reference §9.1);
- ``translation``: frames of images with role ``translation`` (manifest ``sequence`` and
  ``displacement_mm``) — poses re-estimated the same way, then ε_z over all pairs of each
  sequence, grouped by ground-truth displacement, and per step (paper §7.3,
  :mod:`plenocal.evaluate.translation`).

The frames' features come from the observations file (all roles, with frame numbers).

Every section's headline RMSEs count the *kept* observations; the rejected ones are counted per
reason and per frame, listed, and their effect given as ``rmse_all_observations`` (key
``rejected`` of each section; :mod:`plenocal.evaluate.outliers`). The reprojection section
applies calibration's rule with calibration's ``reject_probability``, read from the calibration
``report.json`` (``--calibration-report``, default: the ``report.json`` beside ``--poses``;
``loss: linear`` there means nothing was rejected, so nothing is), and writes calibration's own
counts beside its own (``rejected.calibration_counts``). Held-out and translation frames use the
held-out rule (:mod:`plenocal.evaluate.holdout`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from plenocal import __version__
from plenocal.errors import DataError, InputFileError
from plenocal.evaluate.holdout import evaluate_holdout
from plenocal.evaluate.metrics import EvaluationReport, evaluate_observations
from plenocal.evaluate.outliers import DEFAULT_REJECT_PROBABILITY
from plenocal.evaluate.translation import MIN_FEATURES_WITH_BLUR, frames_without_depth, translation_errors
from plenocal.io._json import load_json, write_document
from plenocal.io.atomic import atomic_folder
from plenocal.io.camera import read_camera
from plenocal.io.dataset import Dataset, ImageRole, read_dataset
from plenocal.io.digest import content_digest
from plenocal.io.observations import read_observations, validate_observations
from plenocal.io.outputs import STAGE_RECORD, check_output_folder
from plenocal.io.poses import read_poses
from plenocal.model.camera import PlenopticCamera
from plenocal.model.geometry import Pose
from plenocal.model.observations import Observations

HELP = ("reprojection RMSEs (u, v, ρ, micro-image centres) of a camera and poses on a dataset's observations; "
        "held-out frames (poses re-estimated, intrinsics fixed) and ε_z on translation sequences")
REPORT_FORMAT = "plenocal-evaluation"
REPORT_NAME = "report.json"
OUTPUTS = (REPORT_NAME, STAGE_RECORD)
"""What ``evaluate`` writes in its output folder (replaced as a whole)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("evaluate", help=HELP, description=HELP[0].upper() + HELP[1:] + ".")
    p.add_argument("dataset", type=Path, metavar="DATASET", help="plenocal dataset folder")
    p.add_argument("--camera", type=Path, default=None, help="camera.json (default: DATASET/camera.json)")
    p.add_argument("--poses", type=Path, default=None,
                   help="poses.json for the reprojection section (default: DATASET/poses.json)")
    p.add_argument("--observations", type=Path, default=None, help="observations.npz (default: the dataset's)")
    p.add_argument("--calibration-report", type=Path, default=None, metavar="REPORT",
                   help="the calibration's report.json, for its rejection rule and counts (default: report.json beside --poses)")
    p.add_argument("--depth", type=Path, default=None, metavar="DEPTH",
                   help="a 'plenocal depth' output folder: its point clouds against the board planes and the "
                        "translation frames' known displacements")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="OUT", help="folder for report.json")
    p.set_defaults(func=run)


def _input(explicit: Path | None, default: Path | None, dataset: Dataset, what: str, option: str) -> Path:
    if explicit is not None:
        return explicit
    if default is None:
        raise InputFileError(dataset.folder, f"no {what} in the dataset; pass {option}")
    return default


def calibration_rejection(report_path: Path | None, *, required: bool = False) -> tuple[float | None, dict[str, Any]]:
    """The rule's p and what calibration says it rejected, from its ``report.json``.

    Returns ``(p, info)``: p = ``options.reject_probability`` (None when ``options.loss`` is
    ``"linear"``: calibration rejected nothing), and info = ``{"source": ..., "calibration_counts":
    report["rejected"] or None}``. Without a calibration report p is calibration's default, unless
    ``required`` (the user named the file): then a missing or foreign file is an error.
    """
    default = (DEFAULT_REJECT_PROBABILITY, {"source": "calibration's default (no calibration report.json found)",
                                            "calibration_counts": None})
    if report_path is None or (not required and not report_path.is_file()):
        return default
    try:
        doc = load_json(report_path)
    except InputFileError:
        if required:
            raise
        return default
    if not isinstance(doc, dict) or doc.get("format") != "plenocal-calibration":
        if required:
            raise InputFileError(report_path, "is not a calibration report (key 'format' must be 'plenocal-calibration')")
        return default
    options = doc.get("options") if isinstance(doc.get("options"), dict) else {}
    counts = doc.get("rejected") if isinstance(doc.get("rejected"), dict) else None
    if options.get("loss") == "linear":
        return None, {"source": f"{report_path} (loss linear: nothing rejected)", "calibration_counts": counts}
    p = options.get("reject_probability", DEFAULT_REJECT_PROBABILITY)
    if not isinstance(p, int | float) or not 0 < p < 1:
        raise InputFileError(report_path, f"options.reject_probability must be in (0, 1), got {p!r}")
    return float(p), {"source": str(report_path), "calibration_counts": counts}


def reprojection_section(report: EvaluationReport, rejection_info: dict[str, Any] | None = None) -> dict[str, Any]:
    """``rmse``, ``sum_squared_residuals``, ``n_bap``, ``n_mic`` (kept), ``per_frame``, ``per_type``,
    ``rejected`` (+ the rule's source and calibration's own counts), ``skipped``."""
    out = report.to_json()
    if "rejected" in out and rejection_info:
        out["rejected"] = {**out["rejected"], **rejection_info}
    return out


def build_report(inputs: dict[str, str], sections: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``report.json`` document: header, inputs, then each section's keys in order."""
    doc: dict[str, Any] = {"format": REPORT_FORMAT, "version": 1, "plenocal_version": __version__, "inputs": inputs}
    for s in sections:
        doc.update(s)
    return doc


def _frames_with_role(dataset: Dataset, role: ImageRole, observations: Observations) -> list[int]:
    observed = {int(f) for f in np.unique(observations.bap.frame)}
    return sorted({int(e.frame) for e in dataset.manifest.with_role(role) if e.frame is not None} & observed)


def calibration_copies(dataset: Dataset, role: ImageRole, frames: list[int]) -> list[dict[str, Any]]:
    """The frames of ``role`` whose image is a calibration frame's: the same file listed twice, or a
    file with identical bytes (a copy). Such a frame is no independent check of the camera."""
    cal = [e for e in dataset.manifest.with_role(ImageRole.CALIBRATION) if e.frame is not None]
    if not cal:
        return []
    digests: dict[Path, str] = {}
    by_path = {dataset.path(e.path).resolve(): int(e.frame) for e in cal if e.frame is not None}
    by_bytes: dict[str, int] = {}
    for e in cal:
        d = content_digest(dataset.path(e.path), digests)
        if d != "missing" and e.frame is not None:
            by_bytes.setdefault(d, int(e.frame))
    out = []
    for e in dataset.manifest.with_role(role):
        if e.frame is None or int(e.frame) not in frames:
            continue
        p = dataset.path(e.path)
        if p.resolve() in by_path:
            out.append({"frame": int(e.frame), "calibration_frame": by_path[p.resolve()], "how": "the same image file"})
            continue
        d = content_digest(p, digests)
        if d in by_bytes:
            out.append({"frame": int(e.frame), "calibration_frame": by_bytes[d], "how": "a byte-identical copy"})
    return out


def holdout_section(camera: PlenopticCamera, dataset: Dataset, observations: Observations,
                    frames: list[int], where: Path) -> tuple[dict[str, Any], dict[int, Pose]]:
    """``holdout``: RMSEs of the evaluation frames with re-estimated poses (reference §9.1), and
    which of them are calibration frames (``calibration_copies``); and those poses."""
    try:
        res = evaluate_holdout(camera, observations, dataset.manifest.target, frames=frames)
    except DataError as exc:
        raise DataError(f"{where}: evaluation frames {frames}: {exc}") from None
    return ({"holdout": res.to_json() | {"calibration_copies": calibration_copies(dataset, ImageRole.EVALUATION, frames)}},
            res.poses)


def translation_section(camera: PlenopticCamera, dataset: Dataset, observations: Observations,
                        frames: list[int], where: Path) -> tuple[dict[str, Any], dict[int, Pose]]:
    """``translation``: ε_z over all pairs grouped by ground-truth displacement, and per step; and
    the frames' re-estimated poses."""
    entries = {int(e.frame): e for e in dataset.manifest.with_role(ImageRole.TRANSLATION) if e.frame is not None}
    missing = [f for f in frames if entries[f].displacement_mm is None]
    if missing:
        raise InputFileError(dataset.folder / "manifest.json",
                             f"translation images of frames {missing} have no displacement_mm")
    bap = observations.bap.select(observations.bap.node >= 0)
    no_depth = frames_without_depth(bap.rho, bap.frame, frames)
    try:
        res = evaluate_holdout(camera, observations, dataset.manifest.target, frames=frames)
        errs = translation_errors(
            {f: p for f, p in res.poses.items() if f not in no_depth},
            {f: float(entries[f].displacement_mm) for f in frames},  # type: ignore[arg-type]
            {f: int(entries[f].sequence or 0) for f in frames},
        )
    except DataError as exc:
        raise DataError(f"{where}: translation frames {frames}: {exc}") from None
    out = errs.to_json()
    out["frames_without_depth"] = [
        {"frame": f, "reason": f"fewer than {MIN_FEATURES_WITH_BLUR} features with a blur radius (corners seen in two or "
                               "more micro-images): its depth is not measured, and it is left out of ε_z"}
        for f in no_depth if f in res.poses]
    out["calibration_copies"] = calibration_copies(dataset, ImageRole.TRANSLATION, frames)
    out["frames_evaluated"] = sorted(res.poses)
    out["frames_failed"] = [{"frame": f.frame, "reason": f.reason} for f in res.extrinsics.frames if not f.ok]
    ev = res.evaluation.to_json()
    out["rmse"] = ev["rmse"]
    out["n_bap"] = ev["n_bap"]
    if "rejected" in ev:
        out["rejected"] = ev["rejected"]
    return {"translation": out}, res.poses


POSE_WITHOUT_DEPTH = (f"not judged: fewer than {MIN_FEATURES_WITH_BLUR} of its features have a blur radius ρ, so its pose "
                      "places the board's plane by the perspective of its corners alone (a translation frame so is left "
                      "out of ε_z too); its points are not put against that plane nor its board depth in the displacements")
"""A depth frame's record when its pose has no measured depth (:func:`plenocal.evaluate.translation.frames_without_depth`):
the Tessar R12-A render's single-view frame near the MLA's conjugate plane was posed 12 mm apart
from two starts, its Jacobian σ 0.15 mm."""


def depth_section(camera: PlenopticCamera, dataset: Dataset, observations: Observations, folder: Path,
                  where: Path, *, poses: Mapping[int, Pose]) -> dict[str, Any]:
    """``depth``: each depth frame's points against its board plane (pose re-estimated from its
    features: ``poses`` holds those the held-out and translation sections re-estimated, the others
    are re-estimated here) and, for translation frames, the board depths against the known
    displacements (:mod:`plenocal.evaluate.depth`)."""
    from plenocal.evaluate.depth import board_coverage, displacement_errors, measured_board_depth, plane_errors
    from plenocal.io.ply import read_ply

    doc_path = folder / "depth.json"
    try:
        doc = json.loads(doc_path.read_text())
        frames = sorted(int(f) for f in doc["frames"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputFileError(doc_path, f"not a 'plenocal depth' record ({exc}); run 'plenocal depth' into {folder}") from None
    missing = sorted((set(frames) - set(poses)) & set(np.unique(observations.bap.frame).tolist()))
    try:
        res = evaluate_holdout(camera, observations, dataset.manifest.target, frames=missing) if missing else None
    except DataError as exc:
        raise DataError(f"{where}: depth frames {missing}: {exc}") from None
    poses = {**poses, **(res.poses if res is not None else {})}
    # a pose fitted to (u, v) alone places the board's plane by the perspective of a few points
    linked = observations.bap.select(observations.bap.node >= 0)  # as the translation section counts them
    flat = set(frames_without_depth(linked.rho, linked.frame, frames))
    board = dataset.manifest.target
    per_frame: dict[str, Any] = {}
    board_depth: dict[int, float] = {}
    for f in frames:
        ply_path = folder / "depth" / f"frame-{f}.ply"
        try:
            cols = read_ply(ply_path)
            pts = np.column_stack([cols["x"], cols["y"], cols["z"]]).astype(np.float64)
            kl = (np.asarray(cols["k"], dtype=np.int64), np.asarray(cols["l"], dtype=np.int64)) if "k" in cols and "l" in cols else None
        except (OSError, ValueError, KeyError) as exc:
            raise InputFileError(ply_path, f"cannot read the point cloud ({exc}); run 'plenocal depth' again") from None
        if f not in poses:
            per_frame[str(f)] = {"n_points": len(pts), "pose": "none (no linked features)"}
            continue
        if f in flat:
            per_frame[str(f)] = {"n_points": len(pts), "pose": POSE_WITHOUT_DEPTH}
            continue
        extent = observations.node_extent(f, columns=board.columns) if f in observations.relative_frames else None
        per_frame[str(f)] = plane_errors(pts, poses[f], board, node_extent=extent)
        if extent is not None:  # linked with relative node ids: only its linked nodes are known to be on the board
            per_frame[str(f)]["node_extent"] = list(extent)
        if kl is not None:
            per_frame[str(f)] |= board_coverage(camera, poses[f], board, *kl, node_extent=extent)
        depth_of_board, why_none = measured_board_depth(per_frame[str(f)])
        if why_none is not None:
            per_frame[str(f)]["board_depth"] = why_none
        if depth_of_board is not None:
            board_depth[f] = depth_of_board
    entries = {int(e.frame): e for e in dataset.manifest.with_role(ImageRole.TRANSLATION)
               if e.frame is not None and e.displacement_mm is not None}
    trans = {f: d for f, d in board_depth.items() if f in entries}
    out: dict[str, Any] = {"frames": per_frame, "source": str(folder)}
    if len(trans) >= 2:
        out["displacements"] = displacement_errors(trans, {f: float(entries[f].displacement_mm) for f in trans},  # type: ignore[arg-type]
                                                   {f: int(entries[f].sequence or 0) for f in trans})
    return {"depth": out}


def run(args: argparse.Namespace) -> int:
    dataset = read_dataset(args.dataset)
    camera_path = _input(args.camera, dataset.camera_path, dataset, "camera.json", "--camera")
    obs_path = _input(args.observations, dataset.observations_path, dataset, "observations", "--observations")
    camera = read_camera(camera_path)
    observations = read_observations(obs_path)
    spec = dataset.manifest.camera_spec
    if (camera.sensor.width_px, camera.sensor.height_px) != (spec.width_px, spec.height_px):
        raise InputFileError(camera_path, f"sensor {camera.sensor.width_px} x {camera.sensor.height_px} px differs from "
                                          f"the dataset's {spec.width_px} x {spec.height_px} px")
    validate_observations(observations, obs_path, lattice=camera.mla.lattice,
                          image_size=(spec.width_px, spec.height_px), n_nodes=dataset.manifest.target.n_nodes)
    eval_frames = _frames_with_role(dataset, ImageRole.EVALUATION, observations)
    trans_frames = _frames_with_role(dataset, ImageRole.TRANSLATION, observations)
    # The reprojection section needs poses; without any, held-out and translation frames may
    # still be evaluated (their poses are re-estimated).
    if args.poses is None and dataset.poses_path is None and (eval_frames or trans_frames):
        poses_path = None
    else:
        poses_path = _input(args.poses, dataset.poses_path, dataset, "poses.json", "--poses")
    out_folder = Path(args.output)
    check_output_folder(out_folder, inputs=[dataset.folder, *dataset.files(), camera_path, obs_path, poses_path],
                        owned=OUTPUTS)
    poses = read_poses(poses_path) if poses_path is not None else None
    sections: list[dict[str, Any]] = []
    report = None
    if poses is not None:
        assert poses_path is not None
        explicit = args.calibration_report is not None
        cal_report = args.calibration_report if explicit else Path(poses_path).parent / "report.json"
        p, rejection_info = calibration_rejection(cal_report, required=explicit)
        report = evaluate_observations(camera, poses, dataset.manifest.target, observations, reject_probability=p)
        sections.append(reprojection_section(report, rejection_info))
    reestimated: dict[int, Pose] = {}
    if eval_frames:
        section, frame_poses = holdout_section(camera, dataset, observations, eval_frames, Path(obs_path))
        sections.append(section)
        reestimated |= frame_poses
    if trans_frames:
        section, frame_poses = translation_section(camera, dataset, observations, trans_frames, Path(obs_path))
        sections.append(section)
        reestimated |= frame_poses
    if getattr(args, "depth", None) is not None:
        sections.append(depth_section(camera, dataset, observations, Path(args.depth), Path(obs_path), poses=reestimated))
    inputs = {
        "dataset": str(dataset.folder),
        "camera": str(camera_path),
        "poses": str(poses_path) if poses_path is not None else None,
        "observations": str(obs_path),
    }
    with atomic_folder(out_folder, owned=OUTPUTS) as tmp:
        write_document(tmp / REPORT_NAME, build_report(inputs, sections))
    out = out_folder / REPORT_NAME

    def fmt(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.4g}"

    def rejected(sec: dict[str, Any]) -> str:
        c = (sec.get("rejected") or {}).get("counts") or {}
        return f"{c.get('bap', 0)} features, {c.get('mic', 0)} centres rejected"

    lines = []
    if report is not None:
        o = report.overall
        skipped = sum(report.skipped_no_pose.values())
        lines.append(
            f"uv {fmt(o.uv_px)} px, rho {fmt(o.rho_px)} px, mic {fmt(o.mic_px)} px "
            f"({o.n_bap} features, {o.n_mic} centres kept; {rejected(sections[0])}; {skipped} without pose)"
        )
    for sec in sections:
        if "holdout" in sec:
            r = sec["holdout"]["rmse"]
            lines.append(f"held-out ({len(sec['holdout']['frames_evaluated'])} frames, poses re-estimated): "
                         f"uv {fmt(r['uv_px'])} px, rho {fmt(r['rho_px'])} px ({rejected(sec['holdout'])})")
        if "translation" in sec:
            t = sec["translation"]["epsilon_z_percent"]
            left = [d["frame"] for d in sec["translation"].get("frames_without_depth", [])]
            lines.append(f"epsilon_z {t['mean']:.3g} ± {t['std']:.3g} % over {t['n_pairs']} pairs"
                         + (f" (frames {left} left out: too few corners seen in two or more micro-images to measure "
                            "their depth)" if left else ""))
        if "depth" in sec:
            med = [v["median_abs_percent"] for v in sec["depth"]["frames"].values() if "median_abs_percent" in v]
            disp = (sec["depth"].get("displacements") or {}).get("mean_abs_percent")
            cov = [v["board_coverage"] for v in sec["depth"]["frames"].values() if "board_coverage" in v]
            lines.append(f"depth: median |distance to the board plane| {min(med):.2g}–{max(med):.2g} % of z over "
                         f"{len(med)} frames" + (f", {min(cov):.0%}–{max(cov):.0%} of the board's micro-images with a depth"
                                                 if cov else "") if med else "depth: no frame with a pose")
            if disp is not None:
                lines.append(f"depth displacement error {disp:.3g} % (mean |error|)")
    print("; ".join(lines) + f"; wrote {out}")
    for line in warnings(sections):
        print(f"plenocal evaluate: warning: {line}", file=sys.stderr)
    return 0


def warnings(sections: list[dict[str, Any]]) -> list[str]:
    """What makes a section's figures mean less than they say: held-out or translation frames
    that are calibration frames, repeated translation positions, a unit mistake in the steps."""
    out = []
    for sec in sections:
        for key, what in (("holdout", "held-out"), ("translation", "translation")):
            body = sec.get(key)
            if not isinstance(body, dict):
                continue
            for c in body.get("calibration_copies") or []:
                out.append(f"{what} frame {c['frame']} is calibration frame {c['calibration_frame']} ({c['how']}): "
                           f"its figures are no independent check of the camera")
            for r in body.get("repeated_positions") or []:
                out.append(f"translation frames {r['frames'][0]} and {r['frames'][1]} are declared at the same position "
                           f"({r['displacement_mm']:g} mm): that pair has no displacement and is left out of ε_z")
            if body.get("unit_hint"):
                out.append(f"ε_z: {body['unit_hint']}")
    return out
