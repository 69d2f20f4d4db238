"""``plenocal blur DATASET --camera CAMERA -o OUT``: calibrate κ (σ = κ·ρ) from relative blur.

Paper §5.3, reference §8.1. Reads the dataset's checkerboard images (devignetted by the
``devignetting`` white when the dataset has one), the BAP features (``--observations``, default
the dataset's) and the camera (lens types, micro-image centres). Writes, atomically:

- ``OUT/kappa.json`` — κ, Θ(κ) and Θ(0), pairs used, κ per frame and its spread, the sampled cost
  curve, the settings and the inputs with their SHA-256;
- ``OUT/kappa.png|svg`` — cost curve and per-frame κ; ``OUT/relative_blur.png|svg`` — one pair as
  in the paper's fig:blur (reference, sharper view before and after the added blur, the PSF).
"""

from __future__ import annotations

import argparse
import hashlib
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from plenocal import __version__
from plenocal.calib.kappa import (
    KAPPA_BOUNDS,
    MARGIN_PX,
    WINDOW_PX,
    central_features,
    default_max_offset_px,
    extract_pair_windows,
    kappa_from_windows,
    relative_blur_pairs,
)
from plenocal.cli._args import bounded_float
from plenocal.errors import InputFileError, UsageError
from plenocal.io._json import write_document
from plenocal.io.atomic import atomic_folder
from plenocal.io.camera import read_camera
from plenocal.io.dataset import Dataset, ImageRole, read_dataset
from plenocal.io.observations import read_observations, validate_observations
from plenocal.io.outputs import STAGE_RECORD, check_output_folder

HELP = "calibrate the blur proportionality κ (σ = κ·ρ) from the relative blur of BAP features of different lens types"
ROLES = ("calibration", "evaluation", "translation")
OUTPUTS = ("kappa.json", "kappa.png", "kappa.svg", "relative_blur.png", "relative_blur.svg", STAGE_RECORD)
"""What ``blur`` writes in its output folder (replaced as a whole)."""
MAX_KAPPA = 100.0
"""Largest κ search bound (σ = κ·ρ; measured κ are ~0.3–1)."""
MIN_WHITE = 0.02
"""Pixels of the devignetting white below this fraction of its maximum are set to 0 (gaps)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("blur", help=HELP, description=HELP[0].upper() + HELP[1:] + ".")
    p.add_argument("dataset", type=Path, metavar="DATASET", help="plenocal dataset folder")
    p.add_argument("--camera", type=Path, default=None, help="camera.json (default: DATASET/camera.json)")
    p.add_argument("--observations", type=Path, default=None, help="observations.npz with BAP features (default: the dataset's)")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="OUT", help="output folder")
    p.add_argument("--roles", default="calibration", help=f"comma-separated image roles to use, among {', '.join(ROLES)} (default: calibration)")
    p.add_argument("--max-offset", type=bounded_float(0.0, 1e6, low_open=True), default=None, metavar="PX",
                   help="use features at most PX from their micro-image centre (default: 0.17 micro-image pitch)")
    p.add_argument("--bounds", type=bounded_float(0.0, MAX_KAPPA), nargs=2, default=KAPPA_BOUNDS, metavar=("LOW", "HIGH"),
                   help=f"κ search interval, 0 <= LOW < HIGH <= {MAX_KAPPA:g} (default {KAPPA_BOUNDS[0]:g} {KAPPA_BOUNDS[1]:g})")
    p.add_argument("--no-plots", action="store_true", help="skip the figures")
    p.set_defaults(func=run)


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes (hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class _Devignetter:
    """``image / white`` where the white is lit (≥ MIN_WHITE of its maximum), 0 elsewhere; the
    white's mask and divisor computed once for all frames."""

    def __init__(self, white: NDArray[np.floating] | None) -> None:
        self._divisor: NDArray[np.float64] | None = None
        if white is not None:
            w = np.asarray(white, dtype=np.float64)
            self._dark = w < MIN_WHITE * float(w.max())
            self._divisor = np.where(self._dark, 1.0, w)

    def __call__(self, image: NDArray[np.floating]) -> NDArray[np.float64]:
        img = np.asarray(image, dtype=np.float64)
        if self._divisor is None:
            return img
        out = img / self._divisor
        out[self._dark] = 0.0
        return out


class _DevignettedFrames(Mapping[int, NDArray[np.float64]]):
    """Frame → devignetted image, read when asked: one or two images in memory instead of the
    whole set (16 full-scale R12 frames are 1.6 GB of float64). Asking for a frame starts reading
    the next one (in frame order) on ``reader``: PNG decoding and the division release the GIL."""

    def __init__(self, dataset: Dataset, entries: dict[int, Any], white: NDArray[np.floating] | None, reader: ThreadPoolExecutor) -> None:
        self._dataset, self._entries, self._reader = dataset, entries, reader
        self._order = sorted(entries)
        self._devignette = _Devignetter(white)
        self._pending: dict[int, Future[NDArray[np.float64]]] = {}

    def _read(self, frame: int) -> NDArray[np.float64]:
        return self._devignette(self._dataset.read_image(self._entries[frame]))

    def __getitem__(self, frame: int) -> NDArray[np.float64]:
        if frame not in self._entries:
            raise KeyError(frame)
        pending = self._pending.pop(frame, None)
        image = pending.result() if pending is not None else self._read(frame)
        later = [f for f in self._order if f > frame and f not in self._pending]
        if later:
            self._pending[later[0]] = self._reader.submit(self._read, later[0])
        return image

    def __iter__(self) -> Iterator[int]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)


def _input(explicit: Path | None, default: Path | None, dataset: Dataset, what: str, option: str) -> Path:
    if explicit is not None:
        return explicit
    if default is None:
        raise InputFileError(dataset.folder, f"no {what} in the dataset; pass {option}")
    return default


def _roles(spec: str) -> tuple[ImageRole, ...]:
    names = [s.strip() for s in spec.split(",") if s.strip()]
    bad = [n for n in names if n not in ROLES]
    if bad or not names:
        raise UsageError(f"--roles: expected names among {', '.join(ROLES)}, got {spec!r}")
    return tuple(ImageRole(n) for n in names)


def run(args: argparse.Namespace) -> int:
    if not args.bounds[0] < args.bounds[1]:
        raise UsageError(f"--bounds {args.bounds[0]:g} {args.bounds[1]:g}: LOW must be below HIGH")
    roles = _roles(args.roles)
    dataset = read_dataset(args.dataset)
    camera_path = _input(args.camera, dataset.camera_path, dataset, "camera.json", "--camera")
    obs_path = _input(args.observations, dataset.observations_path, dataset, "observations", "--observations")
    out = Path(args.output)
    check_output_folder(out, inputs=[dataset.folder, *dataset.files(), camera_path, obs_path], owned=OUTPUTS)
    camera = read_camera(camera_path)
    obs = read_observations(obs_path)
    spec = dataset.manifest.camera_spec
    if (camera.sensor.width_px, camera.sensor.height_px) != (spec.width_px, spec.height_px):
        raise InputFileError(camera_path, f"sensor {camera.sensor.width_px} x {camera.sensor.height_px} px differs from "
                                          f"the dataset's {spec.width_px} x {spec.height_px} px")
    validate_observations(obs, obs_path, lattice=camera.mla.lattice, image_size=(spec.width_px, spec.height_px),
                          n_nodes=dataset.manifest.target.n_nodes)
    bap = obs.bap
    if camera.n_types < 2:
        raise InputFileError(camera_path, f"κ needs micro-lenses of >= 2 types, the camera has {camera.n_types}")
    if len(bap) == 0:
        raise InputFileError(obs_path, "holds no BAP features (run detection first)")
    entries = {e.frame: e for e in dataset.manifest.images if e.role in roles and e.frame is not None}
    frames = sorted(set(np.unique(bap.frame).tolist()) & set(entries))
    if not frames:
        raise InputFileError(obs_path, f"no BAP feature belongs to a frame with a {'/'.join(r.value for r in roles)} image")
    missing = [str(dataset.path(entries[f].path)) for f in frames if not dataset.path(entries[f].path).is_file()]
    if missing:
        raise InputFileError(missing[0], "image listed in the manifest does not exist")
    white_entries = dataset.manifest.with_role(ImageRole.DEVIGNETTING)
    white = dataset.read_image(white_entries[0]) if white_entries else None
    feats = bap.select(np.isin(bap.frame, frames))
    max_offset = default_max_offset_px(camera) if args.max_offset is None else float(args.max_offset)
    eligible = central_features(camera, feats, max_offset)
    central = feats.select(eligible)
    pairs = relative_blur_pairs(central, camera.mla.types)
    pairs = pairs.select(pairs.rho_r_px >= 0.0)
    t0 = time.perf_counter()
    # The images are read once, frame by frame, for the pairs' windows (Θ and the figure use them).
    with ThreadPoolExecutor(max_workers=1) as reader:
        images = _DevignettedFrames(dataset, {f: entries[f] for f in frames}, white, reader)
        pw = extract_pair_windows(images, central, pairs)
    t1 = time.perf_counter()
    res = kappa_from_windows(pw, bounds=tuple(args.bounds))
    wall = time.perf_counter() - t1

    inputs: dict[str, Any] = {
        "dataset": str(dataset.folder),
        "camera": {"path": str(camera_path), "sha256": file_sha256(camera_path)},
        "observations": {"path": str(obs_path), "sha256": file_sha256(obs_path)},
        "images": {str(f): {"path": entries[f].path, "sha256": file_sha256(dataset.path(entries[f].path))} for f in frames},
    }
    if white_entries:
        inputs["devignetting"] = {"path": white_entries[0].path, "sha256": file_sha256(dataset.path(white_entries[0].path))}
    doc: dict[str, Any] = {
        "format": "plenocal-kappa", "version": 1, "plenocal_version": __version__,
        "inputs": inputs,
        "settings": {
            "roles": [r.value for r in roles], "window_px": WINDOW_PX, "margin_px": MARGIN_PX,
            "max_offset_px": max_offset, "bounds": list(args.bounds), "devignetted": bool(white_entries),
            "n_features_eligible": int(eligible.sum()), "n_features": len(feats),
        },
        "wall_time_s": wall,
        "windows_wall_time_s": t1 - t0,
    }
    doc.update(res.to_json())
    with atomic_folder(out, owned=OUTPUTS) as tmp:
        write_document(tmp / "kappa.json", doc)
        if not args.no_plots:
            from plenocal.viz import save_figure
            from plenocal.viz.calibration import kappa_figure, relative_blur_figure

            save_figure(kappa_figure(doc), tmp / "kappa")
            save_figure(relative_blur_figure(pw, res.kappa), tmp / "relative_blur")
    path = out / "kappa.json"
    s = res.spread
    print(
        f"κ = {res.kappa:.4f} from {res.n_pairs} pairs in {len(res.per_frame)} frames "
        f"(per frame {s['mean']:.3f} ± {s['std']:.3f}, {s['min']:.3f}..{s['max']:.3f}); "
        f"Θ {res.cost:.4g} vs {res.cost_no_blur:.4g} without blur; {wall:.2f} s; wrote {path}"
    )
    if res.at_bound:
        print(f"warning: κ sits at a search bound {tuple(args.bounds)}; the minimum may lie outside")
    return 0
