"""``plenocal evaluate DATASET --camera CAMERA --poses POSES -o OUT``: reprojection RMSEs.

Writes ``OUT/report.json``. The report is assembled from independent sections (see
:func:`build_report`), so further evaluations (held-out frames with re-estimated poses, ε_z on
translation sequences) can add their own section without touching this one.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from plenocal import __version__
from plenocal.errors import InputFileError
from plenocal.evaluate.metrics import EvaluationReport, evaluate_observations
from plenocal.io._json import write_document
from plenocal.io.camera import read_camera
from plenocal.io.dataset import Dataset, read_dataset
from plenocal.io.observations import read_observations
from plenocal.io.poses import read_poses

HELP = "reprojection RMSEs (u, v, ρ, micro-image centres) of a camera and poses on a dataset's observations"
REPORT_FORMAT = "plenocal-evaluation"
REPORT_NAME = "report.json"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("evaluate", help=HELP, description=HELP[0].upper() + HELP[1:] + ".")
    p.add_argument("dataset", type=Path, metavar="DATASET", help="plenocal dataset folder")
    p.add_argument("--camera", type=Path, default=None, help="camera.json (default: DATASET/camera.json)")
    p.add_argument("--poses", type=Path, default=None, help="poses.json (default: DATASET/poses.json)")
    p.add_argument("--observations", type=Path, default=None, help="observations.npz (default: the dataset's)")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="OUT", help="folder for report.json")
    p.set_defaults(func=run)


def _input(explicit: Path | None, default: Path | None, dataset: Dataset, what: str, option: str) -> Path:
    if explicit is not None:
        return explicit
    if default is None:
        raise InputFileError(dataset.folder, f"no {what} in the dataset; pass {option}")
    return default


def reprojection_section(report: EvaluationReport) -> dict[str, Any]:
    """``rmse``, ``sum_squared_residuals``, ``n_bap``, ``n_mic``, ``per_frame``, ``per_type``, ``skipped``."""
    return report.to_json()


def build_report(inputs: dict[str, str], sections: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``report.json`` document: header, inputs, then each section's keys in order."""
    doc: dict[str, Any] = {"format": REPORT_FORMAT, "version": 1, "plenocal_version": __version__, "inputs": inputs}
    for s in sections:
        doc.update(s)
    return doc


def run(args: argparse.Namespace) -> int:
    dataset = read_dataset(args.dataset)
    camera_path = _input(args.camera, dataset.camera_path, dataset, "camera.json", "--camera")
    poses_path = _input(args.poses, dataset.poses_path, dataset, "poses.json", "--poses")
    obs_path = _input(args.observations, dataset.observations_path, dataset, "observations", "--observations")
    camera = read_camera(camera_path)
    poses = read_poses(poses_path)
    observations = read_observations(obs_path)
    report = evaluate_observations(camera, poses, dataset.manifest.target, observations)
    inputs = {
        "dataset": str(dataset.folder),
        "camera": str(camera_path),
        "poses": str(poses_path),
        "observations": str(obs_path),
    }
    out = write_document(Path(args.output) / REPORT_NAME, build_report(inputs, [reprojection_section(report)]))
    o = report.overall

    def fmt(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.4g}"

    skipped = sum(report.skipped_no_pose.values())
    print(
        f"uv {fmt(o.uv_px)} px, rho {fmt(o.rho_px)} px, mic {fmt(o.mic_px)} px "
        f"({o.n_bap} features, {o.n_mic} centres, {skipped} without pose); wrote {out}"
    )
    return 0
