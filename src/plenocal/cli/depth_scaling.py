"""``plenocal depth-scaling DATASET --camera CAMERA --kappa BLUR --poses POSES -o OUT``: the
matcher's depth bias, fitted on the calibration frames (:mod:`plenocal.depth.scaling`).

Each calibration frame with a pose is devignetted as ``plenocal depth`` does and its micro-images
that see the board are matched and aggregated; their inverse virtual depths are fitted against the
board plane's (w_true = c0 + c1·w_matched), with the frame jackknife's covariance and a Wald test
against the identity. Writes ``OUT/depth-scaling.json`` atomically; ``plenocal depth --scaling``
applies it when it is kept.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from plenocal import __version__
from plenocal.cli.blur import file_sha256
from plenocal.cli.depth import field_radius_of, read_kappa, white_for
from plenocal.depth.scaling import DepthScaling, board_samples, fit_depth_scaling
from plenocal.detect.corners import devignette
from plenocal.errors import InputFileError
from plenocal.io._json import load_json, write_document
from plenocal.io.atomic import atomic_folder
from plenocal.io.camera import read_camera_file
from plenocal.io.dataset import ImageEntry, ImageRole, read_dataset
from plenocal.io.outputs import STAGE_RECORD, check_output_folder
from plenocal.io.poses import read_node_extents, read_poses

HELP = "fit the depth matcher's bias in virtual depth on the calibration frames (depth scaling)"
OUTPUTS = ("depth-scaling.json", STAGE_RECORD)
FORMAT = "plenocal-depth-scaling"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("depth-scaling", help=HELP, description=HELP[0].upper() + HELP[1:] + ".")
    p.add_argument("dataset", type=Path, metavar="DATASET", help="plenocal dataset folder")
    p.add_argument("--camera", type=Path, default=None, help="camera.json (default: DATASET/camera.json)")
    p.add_argument("--poses", type=Path, default=None, help="poses.json of the calibration frames (default: DATASET/poses.json)")
    p.add_argument("--kappa", default=None, metavar="BLUR",
                   help="κ of σ = κ·ρ: the kappa.json written by 'plenocal blur', or a number (as for 'plenocal depth')")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="OUT", help="output folder")
    p.set_defaults(func=run)


def read_scaling(path: Path) -> DepthScaling:
    """The depth scaling of a depth-scaling.json; one line naming the file if it is not one."""
    if not Path(path).is_file():
        raise InputFileError(path, "no such file (--scaling: the depth-scaling.json written by 'plenocal depth-scaling')")
    doc = load_json(path)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise InputFileError(path, f"is not a {FORMAT} document (expected the depth-scaling.json written by 'plenocal depth-scaling')")
    try:
        return DepthScaling.from_json(doc["scaling"])
    except (KeyError, TypeError, ValueError) as exc:
        raise InputFileError(path, f"malformed scaling ({exc}); write it again with 'plenocal depth-scaling'") from None


def run(args: argparse.Namespace) -> int:
    kappa, kappa_path = read_kappa(args.kappa)
    dataset = read_dataset(args.dataset)
    camera_path = args.camera if args.camera is not None else dataset.camera_path
    if camera_path is None:
        raise InputFileError(dataset.folder, "no camera.json in the dataset; pass --camera")
    poses_path = args.poses if args.poses is not None else dataset.poses_path
    if poses_path is None:
        raise InputFileError(dataset.folder, "no poses.json in the dataset; pass --poses (the calibration's)")
    out = Path(args.output)
    camera_file = read_camera_file(camera_path)
    camera = camera_file.camera
    field_radius_px = field_radius_of(camera_file)
    poses = read_poses(poses_path)
    extents = read_node_extents(poses_path)  # frames linked with relative node ids: their linked part of the board
    entries: list[ImageEntry] = []
    whites: dict[int | None, ImageEntry] = {}
    skipped: dict[str, str] = {}
    for e in dataset.manifest.with_role(ImageRole.CALIBRATION):
        if e.frame not in poses:
            continue
        try:
            whites[e.frame] = white_for(dataset, e.f_number)
        except InputFileError:  # a frame without a white at its f-number is not matched, not fatal
            skipped[str(e.frame)] = f"no white at its f-number {e.f_number}"
            continue
        entries.append(e)
    inputs_read = [dataset.folder, camera_path, poses_path, *(dataset.path(e.path) for e in entries),
                   *(dataset.path(w.path) for w in whites.values()), *([Path(kappa_path)] if kappa_path else [])]
    check_output_folder(out, inputs=inputs_read, owned=OUTPUTS)
    if camera.n_types == 0:
        raise InputFileError(camera_path, "the camera has no micro-lens types (focal lengths): depth needs them")
    board = dataset.manifest.target
    t0 = time.perf_counter()
    samples = {}
    white_cache: dict[str, Any] = {}
    for e in entries:
        w = whites[e.frame]
        if w.path not in white_cache:
            white_cache = {w.path: dataset.read_image(w)}
        dv, weight = devignette(dataset.read_image(e), white_cache[w.path])
        assert e.frame is not None
        samples[e.frame] = board_samples(dv, weight, camera, poses[e.frame], board, kappa=kappa, f_number=e.f_number,
                                         field_radius_px=field_radius_px, node_extent=extents.get(e.frame))
        print(f"frame {e.frame}: {len(samples[e.frame][0])} board micro-images with a depth", flush=True)
    scaling = fit_depth_scaling(samples)
    wall = time.perf_counter() - t0
    doc = {
        "format": FORMAT, "version": 1, "plenocal_version": __version__,
        "inputs": {"dataset": str(dataset.folder),
                   "camera": {"path": str(camera_path), "sha256": file_sha256(camera_path)},
                   "poses": {"path": str(poses_path), "sha256": file_sha256(poses_path)},
                   "kappa": {"value": kappa, "path": kappa_path},
                   "images": {str(e.frame): {"path": e.path, "sha256": file_sha256(dataset.path(e.path))} for e in entries}},
        "scaling": scaling.to_json(),
        "model_field": {"radius_mm": camera_file.field_radius_mm, "applied": field_radius_px is not None},
        "frames_skipped": skipped,
        "wall_time_s": wall,
    }
    with atomic_folder(out, owned=OUTPUTS) as tmp:
        write_document(tmp / "depth-scaling.json", doc)
    c0, c1 = scaling.coefficients
    sd = np.sqrt(np.diag(np.asarray(scaling.covariance)))
    verdict = "kept" if scaling.kept else "not applied"
    sig = [v["correction_sigma_percent"] for v in scaling.per_frame.values()]
    spread = f", its σ {min(sig):.2f}–{max(sig):.2f} % of 1/υ over the frames" if sig else ""
    print(f"depth scaling {verdict}: 1/υ ← {c0:.5f} ± {sd[0]:.5f} + {c1:.4f} ± {sd[1]:.4f} · 1/υ{spread} ({scaling.reason}); "
          f"{wall:.1f} s; wrote {out / 'depth-scaling.json'}")
    return 0
