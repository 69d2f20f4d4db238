"""``plenocal depth DATASET --camera CAMERA --kappa BLUR -o OUT [--frames IDS]``: per micro-image
depth of raw frames with the calibrated camera.

Each frame is devignetted by the white at its f-number (the dataset's ``devignetting`` white, or a
``white`` of the same N), every textured micro-image gets a virtual depth by blur-aware matching
over the object distances ``--distance-range`` (default: the reference's rule from F and the focus
distance), then the median of the confident estimates around it (robust aggregation; off with
``--no-aggregation``), and a camera-frame point through the model (:mod:`plenocal.depth.metric`). Writes, atomically (``OUT`` replaced as a whole):

- ``OUT/depth/frame-<id>.ply`` — binary little-endian PLY, one vertex per micro-image with a depth:
  x, y, z (mm, camera frame), confidence (0–1), grey (0–255, the micro-image's mean devignetted
  level), virtual_depth, k, l;
- ``OUT/depth/frame-<id>-depth.png`` — the depth map (z, turbo colours from near to far over the
  2nd–98th percentiles; black: no depth), one cell per micro-image, at 1/4 of the sensor's size;
- ``OUT/depth/frame-<id>-central.png`` — the micro-images' mean grey levels on the same cells
  (the scene at micro-image resolution);
- ``OUT/depth/frame-<id>-allfocus.png`` — the all-in-focus image on the same grid: every
  micro-image's patch drawn at its depth (:mod:`plenocal.depth.render`; micro-images without a
  depth take the nearest estimate's; black where nothing is drawn);
- ``OUT/depth.json`` — per frame: counts by status, z percentiles, seconds; the settings; inputs
  with their SHA-256.

Frames are independent (:mod:`plenocal.depth.sequence`): with ``--workers N`` they run on a
``distributed.LocalCluster`` of N worker processes (one task per frame), with ``--scheduler
ADDRESS`` on an existing Dask cluster (its workers must see the same paths), and by default one
after the other in this process (the kernels use every core already; see :data:`DEFAULT_LOCAL`);
the files are the same bytes whichever.

Where the calibrated ``camera.json`` limits the model's field (``model_field``: the radius beyond
which the calibration's residuals show aberrations the model does not have,
:mod:`plenocal.evaluate.field`), micro-images beyond it get no depth (status ``outside_field``);
``--whole-field`` matches them anyway.

With ``--scaling FILE`` (``plenocal depth-scaling``'s fit on the calibration frames), each
estimate's 1/υ is corrected by the fitted c0 + c1·(1/υ) when the fit was kept
(:mod:`plenocal.depth.scaling`), before the points; ``depth.json`` records it.

With ``--per-pixel``, each micro-image's depth is also refined pixel by pixel
(:mod:`plenocal.depth.pixel`) and the pixels that pass its screen (texture and a sharp cost curve)
are written too:

- ``OUT/depth/frame-<id>-pixels.ply`` — one vertex per kept pixel: the virtual point the pixel
  sees, x, y, z (mm, camera frame), confidence (0–1), grey (0–255, the pixel's devignetted level),
  virtual_depth, u, v (the pixel);
- ``OUT/depth/frame-<id>-depth-pixels.png`` — their z in the central view (each point drawn where
  the exit-pupil centre's projection puts it, X = c + e/γ), the median per cell, on the depth map's
  cells and colours (black: no kept pixel);

and ``depth.json`` gains each frame's per-pixel counts and seconds and the refinement's settings.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from numpy.typing import NDArray

from plenocal import __version__
from plenocal.cli.blur import file_sha256
from plenocal.depth.matching import (
    VirtualDepthMap,
    default_distance_range_mm,
    depth_map,
    distances_left_out_mm,
    not_searched_text,
)
from plenocal.depth.metric import points_from_virtual_depth
from plenocal.depth.pixel import (
    MIN_CONFIDENCE,
    MIN_TEXTURE_SNR,
    cell_medians,
    central_view_px,
    pixel_confidence,
    refine_pixel_depths,
    screen_pixels,
)
from plenocal.depth.render import render_all_in_focus
from plenocal.depth.scaling import DepthScaling, extrapolation, extrapolation_text, lens_radius2_mm2
from plenocal.depth.sequence import available_cores, map_frames
from plenocal.detect.corners import devignette
from plenocal.errors import DataError, InputFileError, PlenocalError, UsageError
from plenocal.io._json import load_json, write_document
from plenocal.io.atomic import atomic_folder, atomic_write_bytes
from plenocal.io.camera import CameraFile, read_camera, read_camera_file
from plenocal.io.dataset import FRAME_ROLES, Dataset, ImageEntry, ImageRole, read_dataset
from plenocal.io.outputs import STAGE_RECORD, check_output_folder
from plenocal.io.ply import ply_bytes
from plenocal.model.camera import PlenopticCamera

HELP = "per micro-image depth of raw frames with the calibrated camera (point clouds, depth maps, all-in-focus images)"
OUTPUTS = ("depth", "depth.json", STAGE_RECORD)
"""What ``depth`` writes in its output folder (replaced as a whole)."""
MAP_SCALE = 4
"""The depth map, central and all-in-focus images are 1/MAP_SCALE of the sensor's size."""
F_NUMBER_RTOL = 0.01
"""A white serves a frame whose f-number is within this fraction of its own."""
DEFAULT_LOCAL = True
"""Without ``--workers`` or ``--scheduler`` the frames run in this process. Measured on the PRISM
R12-B frames (``benchmarks/depth_sequence.py``, 2 cores shared with other jobs, load 8–12): 4
frames 44 s in this process against 72 s on a 2-worker local cluster, 20 frames 311 s against
631 s, the same bytes. The matching kernels already spread each frame over the cores, and each
worker spends ~8 CPU-s starting (importing, loading the compiled kernels, reading the white):
the cluster pays off with more cores or machines, not on 2."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("depth", help=HELP, description=HELP[0].upper() + HELP[1:] + ".")
    p.add_argument("dataset", type=Path, metavar="DATASET", help="plenocal dataset folder")
    p.add_argument("--camera", type=Path, default=None, help="camera.json (default: DATASET/camera.json)")
    p.add_argument("--kappa", default=None, metavar="BLUR",
                   help="κ of σ = κ·ρ: the kappa.json written by 'plenocal blur', or a number (0: no blur equalisation)")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="OUT", help="output folder")
    p.add_argument("--frames", default=None, metavar="IDS",
                   help="comma-separated frame ids (default: every calibration, evaluation and translation frame)")
    p.add_argument("--distance-range", type=float, nargs=2, default=None, metavar=("NEAR", "FAR"),
                   help="object distances searched, mm (default: the reference's rule from F and the focus distance)")
    p.add_argument("--scaling", type=Path, default=None, metavar="FILE",
                   help="the depth-scaling.json written by 'plenocal depth-scaling': its correction of 1/υ is applied when it was kept")
    p.add_argument("--whole-field", action="store_true",
                   help="give depth beyond the calibrated model's field too (camera.json's model_field; default: not there, "
                        "the lens's aberrations make it wrong)")
    p.add_argument("--no-aggregation", action="store_true",
                   help="keep each micro-image's own estimate (default: the median of the confident ones around it)")
    p.add_argument("--per-pixel", action="store_true",
                   help="also refine the depth pixel by pixel and write the pixels that pass the screen "
                        "(frame-<id>-pixels.ply, frame-<id>-depth-pixels.png; ~2-3x the matching's time)")
    ex = p.add_mutually_exclusive_group()
    ex.add_argument("--scheduler", default=None, metavar="ADDRESS",
                    help="run the frames on this existing Dask scheduler (e.g. tcp://host:8786; its workers must see the same paths)")
    ex.add_argument("--workers", type=int, default=None, metavar="N",
                    help="run the frames on a local Dask cluster of N worker processes (default: one after the other in this process)")
    p.set_defaults(func=run)


def read_kappa(spec: str | None) -> tuple[float, str | None]:
    """κ and the file it came from (None for a number)."""
    if spec is None:
        raise UsageError("--kappa: pass the kappa.json written by 'plenocal blur' (or a number, 0 for no blur equalisation)")
    try:
        value = float(spec)
    except ValueError:
        path = Path(spec)
        if not path.is_file():
            raise InputFileError(path, "no such file (--kappa: the kappa.json written by 'plenocal blur', or a number)") from None
        doc = load_json(path)
        found = doc.get("kappa") if isinstance(doc, dict) else None
        if not isinstance(found, (int, float)) or isinstance(found, bool):
            raise InputFileError(path, "holds no number 'kappa' (expected the kappa.json written by 'plenocal blur')") from None
        value = float(found)
        source: str | None = str(path)
    else:
        source = None
    if not np.isfinite(value) or value < 0.0:
        raise UsageError(f"--kappa: κ must be a finite number >= 0, got {value!r}")
    return float(value), source


def _frames(dataset: Dataset, spec: str | None) -> list[ImageEntry]:
    entries = {e.frame: e for e in dataset.manifest.images if e.role in FRAME_ROLES and e.frame is not None}
    if spec is None:
        chosen = sorted(entries)
    else:
        try:
            chosen = sorted({int(s) for s in spec.split(",") if s.strip()})
        except ValueError:
            raise UsageError(f"--frames: expected comma-separated frame ids, got {spec!r}") from None
        missing = [f for f in chosen if f not in entries]
        if missing:
            raise UsageError(f"--frames: no frame {missing[0]} in {dataset.folder} (frames: "
                             f"{', '.join(str(f) for f in sorted(entries)[:12])}{'...' if len(entries) > 12 else ''})")
    if not chosen:
        raise InputFileError(dataset.folder, "the manifest lists no calibration, evaluation or translation frame")
    return [entries[f] for f in chosen]


def white_for(dataset: Dataset, f_number: float | None) -> ImageEntry:
    """The devignetting white, or a white at the frame's f-number."""
    whites = [*dataset.manifest.with_role(ImageRole.DEVIGNETTING), *dataset.manifest.with_role(ImageRole.WHITE)]
    if f_number is None:
        if dataset.manifest.with_role(ImageRole.DEVIGNETTING):
            return dataset.manifest.with_role(ImageRole.DEVIGNETTING)[0]
    else:
        for w in whites:
            if w.f_number is not None and abs(w.f_number - f_number) <= F_NUMBER_RTOL * f_number:
                return w
        for w in dataset.manifest.with_role(ImageRole.DEVIGNETTING):
            if w.f_number is None:
                return w
    raise InputFileError(dataset.folder, f"no white image at the frames' f-number {f_number} to devignet them "
                                         "(add one with role 'devignetting' to the manifest)")


def cell_image(camera: PlenopticCamera, values: NDArray[np.float64], *, scale: int = MAP_SCALE) -> NDArray[np.float64]:
    """(H/scale, W/scale) image whose pixels take the value of the nearest micro-image (NaN outside the grid)."""
    H, W = camera.sensor.height_px // scale, camera.sensor.width_px // scale
    v, u = np.mgrid[0:H, 0:W]
    k, l = camera.grid.nearest((u + 0.5) * scale - 0.5, (v + 0.5) * scale - 0.5)
    lat = camera.grid.lattice
    inside = (k >= 0) & (k < lat.width) & (l >= 0) & (l < lat.height)
    flat = np.full((lat.height, lat.width), np.nan)
    kk, ll = lat.all_indices()
    flat[ll, kk] = values
    out = np.full((H, W), np.nan)
    out[inside] = flat[l[inside], k[inside]]
    return out


def depth_png(z: NDArray[np.float64]) -> bytes:
    """Turbo-coloured PNG of a depth image (near = blue... far = red over the 2nd–98th percentiles; NaN black)."""
    ok = np.isfinite(z)
    lo, hi = (np.percentile(z[ok], [2, 98]) if ok.any() else (0.0, 1.0))
    scaled = np.clip((z - lo) / max(hi - lo, 1e-9), 0, 1)
    img = cv2.applyColorMap(np.where(ok, 255 * scaled, 0).astype(np.uint8), cv2.COLORMAP_TURBO)
    img[~ok] = 0
    return cv2.imencode(".png", img)[1].tobytes()


def grey_png(g: NDArray[np.float64]) -> bytes:
    ok = np.isfinite(g)
    return cv2.imencode(".png", np.where(ok, np.clip(g, 0, 1) * 255, 0).astype(np.uint8))[1].tobytes()


def metric_points_only(ok: NDArray[np.bool_], pts: NDArray[np.float64]) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """``ok`` without the micro-images whose point (rows of ``pts``, one per ``ok``) is not finite,
    and which rows of ``pts`` are finite. A camera whose lateral distortion does not invert over
    the image (an unconverged or wrong calibration: the 6-frame quick demo's 3 linked frames gave
    F +24 % and q1…q3 that overflow in 643 of frame 202's 1 515 points) maps a virtual depth to no
    point; those micro-images keep their depth in the virtual space only."""
    finite = np.all(np.isfinite(pts), axis=1)
    if finite.all():
        return ok, finite
    kept = ok.copy()
    kept[np.flatnonzero(ok)[~finite]] = False
    return kept, finite


def frame_summary(vd: VirtualDepthMap, z: NDArray[np.float64]) -> dict[str, Any]:
    ok = vd.ok & np.isfinite(z)
    zs = z[ok]
    return {
        "counts": vd.counts(),
        "textured": int(np.sum(vd.textured)),
        "z_percentiles_mm": {str(p): float(np.percentile(zs, p)) for p in (5, 25, 50, 75, 95)} if zs.size else {},
        "median_confidence": float(np.median(vd.confidence[ok])) if ok.any() else None,
        "wall_time_s": vd.wall_time_s,
    }


@dataclass(frozen=True)
class FrameJob:
    """What one frame's task needs (picklable: paths, not images)."""

    dataset: Path
    frame: ImageEntry
    white: ImageEntry
    camera_path: Path
    kappa: float
    distance_range_mm: tuple[float, float] | None
    aggregate: bool
    threads: int | None = None
    """numba threads of the task (None: as configured)."""
    scaling: DepthScaling | None = None
    """Correction of 1/υ (``plenocal depth-scaling``), applied when kept."""
    field_radius_px: float | None = None
    """The model's field about the principal point (None: no limit)."""
    per_pixel: bool = False
    """Refine per pixel and write the screened pixels too."""


@dataclass(frozen=True)
class FrameDepth:
    """One frame's files (bytes), its depth.json entry and its line of output."""

    frame: int
    ply: bytes
    depth_png: bytes
    central_png: bytes
    allfocus_png: bytes
    pixels_ply: bytes | None
    pixels_png: bytes | None
    summary: dict[str, Any]
    settings: dict[str, Any]
    message: str


@functools.lru_cache(maxsize=2)
def _white(folder: Path, entry: ImageEntry) -> NDArray[np.float64]:
    """The white image (kept: the frames of a sequence share it)."""
    return read_dataset(folder).read_image(entry)


@functools.lru_cache(maxsize=2)
def _camera(path: Path) -> PlenopticCamera:
    return read_camera(path)


def depth_of_frame(job: FrameJob) -> FrameDepth:
    """Depth of one frame: devignetting, matching, aggregation, points, and the bytes of its files.

    The task of :func:`plenocal.depth.sequence.map_frames` (runs on a Dask worker or here).
    """
    try:
        return _depth_of_frame(job)
    except PlenocalError as exc:  # its own exceptions may not unpickle on the client: one line
        raise DataError(str(exc)) from None


def _depth_of_frame(job: FrameJob) -> FrameDepth:
    if job.threads is not None:
        import numba

        numba.set_num_threads(min(job.threads, numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]
    dataset = read_dataset(job.dataset)
    camera = _camera(job.camera_path)
    e = job.frame
    dv, weight = devignette(dataset.read_image(e, keep=False), _white(job.dataset, job.white))  # a sequence's frames are read once
    vd = depth_map(dv, weight, camera, aggregate=job.aggregate, kappa=job.kappa, f_number=e.f_number,
                   distance_range_mm=job.distance_range_mm, field_radius_px=job.field_radius_px)
    # the image's geometry is the matched disparity's: drawn with υ as matched, before the scaling
    allfocus = render_all_in_focus(dv, weight, camera, vd.virtual_depth, kappa=job.kappa, f_number=e.f_number, scale=MAP_SCALE)
    pixels = _pixel_depths(job, camera, dv, weight, vd) if job.per_pixel else None
    del dv, weight
    w_matched_median = float(np.median(1.0 / vd.virtual_depth[vd.ok])) if vd.ok.any() else float("nan")
    if job.scaling is not None and job.scaling.applied:
        vd = dataclasses.replace(vd, virtual_depth=job.scaling.apply(vd.virtual_depth, lens_radius2_mm2(camera, vd.k, vd.l)))
    ok = vd.ok
    # each point where its micro-image's texture is (matching.texture_offsets), at its υ
    pts = points_from_virtual_depth(camera, vd.k[ok], vd.l[ok], vd.virtual_depth[ok], offset_px=vd.texture_offset_px[ok])
    ok, metric = metric_points_only(ok, pts)
    pts, no_point = pts[metric], int((~metric).sum())
    z = np.full(len(vd.k), np.nan)
    z[ok] = pts[:, 2]
    ply = ply_bytes({
        "x": pts[:, 0].astype(np.float32), "y": pts[:, 1].astype(np.float32), "z": pts[:, 2].astype(np.float32),
        "confidence": vd.confidence[ok].astype(np.float32),
        "grey": np.clip(np.rint(255 * vd.grey[ok]), 0, 255).astype(np.uint8),
        "virtual_depth": vd.virtual_depth[ok].astype(np.float32),
        "k": vd.k[ok].astype(np.int32), "l": vd.l[ok].astype(np.int32),
    }, comments=(f"plenocal {__version__} depth, frame {e.frame}", "x y z in mm in the camera frame"))
    c = vd.counts()
    message = (f"frame {e.frame}: {c['estimated']} micro-images with a depth ({c['untextured']} untextured, "
               f"{c['at_bound']} out of range, {c['at_limit']} too near the MLA's conjugate"
               + (f", {c['outside_field']} beyond the model's field" if c["outside_field"] else "")
               + (f", {c['at_edge']} at depth edges" if c.get("at_edge") else "")
               + f"), median z {np.nanmedian(z) if ok.any() else float('nan'):.1f} mm, "
               f"{vd.wall_time_s:.1f} s (all-in-focus image {allfocus.wall_time_s:.1f} s"
               + (f", per pixel {pixels.summary['kept']} kept of {pixels.summary['refined']} in "
                  f"{pixels.summary['wall_time_s']:.1f} s" if pixels is not None else "") + ")")
    assert e.frame is not None  # _frames lists frames only
    summary = {**frame_summary(vd, z), "allfocus": {"drawn": allfocus.drawn, "filled": allfocus.filled,
                                                    "wall_time_s": allfocus.wall_time_s}}
    if no_point:
        summary["no_metric_point"] = no_point
        message += (f"; {no_point} depths have no point: the calibrated camera does not map them into object space "
                    "(its distortion does not invert there), so it does not describe these images")
    ext = None if job.scaling is None else extrapolation(job.scaling, w_matched_median, float(np.nanmedian(z)) if ok.any() else float("nan"))
    if ext is not None:
        summary["scaling"] = ext
    settings = {**vd.settings, "allfocus": allfocus.settings}
    if pixels is not None:
        summary["per_pixel"] = pixels.summary
        settings["per_pixel"] = pixels.settings
    return FrameDepth(e.frame, ply, depth_png(cell_image(camera, z)), grey_png(cell_image(camera, vd.grey)),
                      grey_png(allfocus.image), None if pixels is None else pixels.ply,
                      None if pixels is None else pixels.png, summary, settings, message)


@dataclass(frozen=True)
class PixelOutputs:
    """One frame's per-pixel files (bytes), depth.json entry and settings."""

    ply: bytes
    png: bytes
    summary: dict[str, Any]
    settings: dict[str, Any]


def _pixel_depths(
    job: FrameJob, camera: PlenopticCamera, dv: NDArray, weight: NDArray, vd: VirtualDepthMap
) -> PixelOutputs:
    """Per-pixel depths refined from the (matched, unscaled) micro-image depths, screened, scaled
    like the micro-images' when a scaling is kept, and their files."""
    e = job.frame
    px = refine_pixel_depths(dv, weight, camera, vd, kappa=job.kappa, f_number=e.f_number)
    t0 = time.perf_counter()
    keep = screen_pixels(px)
    ups = px.virtual_depth[keep]
    # the pixels' places in the central view are the matched disparity's, before the scaling
    X = central_view_px(px, vd, camera.lambda_)[keep]
    mi = px.micro_image[keep]
    if job.scaling is not None and job.scaling.applied:
        ups = job.scaling.apply(ups, lens_radius2_mm2(camera, vd.k[mi], vd.l[mi]))
    pts = points_from_virtual_depth(camera, vd.k[mi], vd.l[mi], ups, offset_px=px.offset_px[keep])
    keep, metric = metric_points_only(keep, pts)  # a camera may map some depths to no point
    pts, ups, X, mi = pts[metric], ups[metric], X[metric], mi[metric]
    H, W = camera.sensor.height_px // MAP_SCALE, camera.sensor.width_px // MAP_SCALE
    png = depth_png(cell_medians(X, pts[:, 2], (H, W), scale=MAP_SCALE))
    grey = dv[px.y[keep], px.x[keep]]
    ply = ply_bytes({
        "x": pts[:, 0].astype(np.float32), "y": pts[:, 1].astype(np.float32), "z": pts[:, 2].astype(np.float32),
        "confidence": pixel_confidence(px)[keep].astype(np.float32),
        "grey": np.clip(np.rint(255 * grey), 0, 255).astype(np.uint8),
        "virtual_depth": ups.astype(np.float32),
        "u": px.x[keep].astype(np.int32), "v": px.y[keep].astype(np.int32),
    }, comments=(f"plenocal {__version__} per-pixel depth, frame {e.frame}", "x y z in mm in the camera frame"))
    z = pts[:, 2]
    summary = {
        "refined": len(px.x), "with_depth": int(np.isfinite(px.virtual_depth).sum()), "kept": int(keep.sum()),
        "micro_images": int(px.settings["micro_images"]),
        "z_percentiles_mm": {str(p): float(np.percentile(z, p)) for p in (5, 25, 50, 75, 95)} if z.size else {},
        "wall_time_s": px.wall_time_s + time.perf_counter() - t0,
    }
    settings = {**px.settings, "min_confidence": MIN_CONFIDENCE, "min_texture_snr": MIN_TEXTURE_SNR}
    return PixelOutputs(ply, png, summary, settings)


def field_radius_of(camera_file: CameraFile, *, whole_field: bool = False) -> float | None:
    """The model's field radius in px about the principal point (None: no limit, or ``whole_field``)."""
    r = camera_file.field_radius_mm
    return None if r is None or whole_field else r / camera_file.camera.sensor.pixel_size_mm


def run(args: argparse.Namespace) -> int:
    kappa, kappa_path = read_kappa(args.kappa)
    dataset = read_dataset(args.dataset)
    camera_path = args.camera if args.camera is not None else dataset.camera_path
    if camera_path is None:
        raise InputFileError(dataset.folder, "no camera.json in the dataset; pass --camera")
    frames = _frames(dataset, args.frames)
    whites = {e.frame: white_for(dataset, e.f_number) for e in frames}
    out = Path(args.output)
    inputs_read = [dataset.folder, camera_path, *(dataset.path(e.path) for e in frames), *(dataset.path(w.path) for w in whites.values())]
    if kappa_path:
        inputs_read.append(Path(kappa_path))
    scaling = None
    if args.scaling is not None:
        from plenocal.cli.depth_scaling import read_scaling

        scaling = read_scaling(args.scaling)
        inputs_read.append(Path(args.scaling))
    check_output_folder(out, inputs=inputs_read, owned=OUTPUTS)
    camera_file = read_camera_file(camera_path)
    camera = camera_file.camera
    field_radius_px = field_radius_of(camera_file, whole_field=getattr(args, "whole_field", False))
    spec = dataset.manifest.camera_spec
    if (camera.sensor.width_px, camera.sensor.height_px) != (spec.width_px, spec.height_px):
        raise InputFileError(camera_path, f"sensor {camera.sensor.width_px} x {camera.sensor.height_px} px differs from "
                                          f"the dataset's {spec.width_px} x {spec.height_px} px")
    if camera.n_types == 0:
        raise InputFileError(camera_path, "the camera has no micro-lens types (focal lengths): metric depth needs them")
    missing = [e for e in [*frames, *whites.values()] if not dataset.path(e.path).is_file()]
    if missing:
        raise InputFileError(dataset.path(missing[0].path), "image listed in the manifest does not exist")
    distance_range = None if args.distance_range is None else (float(args.distance_range[0]), float(args.distance_range[1]))
    F = camera.main_lens.focal_length_mm
    if distance_range is not None and not (F < distance_range[0] < distance_range[1]):
        raise UsageError(f"--distance-range {distance_range[0]:g} {distance_range[1]:g}: expected F = {F:.4g} mm < NEAR < FAR")
    searched = distance_range if distance_range is not None else default_distance_range_mm(camera)
    left_out = distances_left_out_mm(camera, searched)
    workers = getattr(args, "workers", None)
    if workers is not None and workers < 1:
        raise UsageError(f"--workers: expected a number of worker processes >= 1, got {workers}")
    scheduler = getattr(args, "scheduler", None)
    local = DEFAULT_LOCAL and scheduler is None and workers is None
    n_workers = max(1, min(workers if workers is not None else available_cores(), len(frames)))
    # one numba thread per worker of the local cluster when they fill the cores
    threads = None if local or scheduler is not None else max(1, available_cores() // n_workers)
    jobs = [FrameJob(Path(dataset.folder).resolve(), e, whites[e.frame], Path(camera_path).resolve(), kappa, distance_range, not args.no_aggregation, threads, scaling,
                     field_radius_px, bool(getattr(args, "per_pixel", False))) for e in frames]
    t_all = time.perf_counter()
    summaries: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    with atomic_folder(out, owned=OUTPUTS) as tmp:
        folder = tmp / "depth"
        folder.mkdir()
        for _, res in map_frames(depth_of_frame, jobs, scheduler=scheduler, workers=n_workers, local=local):
            atomic_write_bytes(folder / f"frame-{res.frame}.ply", res.ply)
            atomic_write_bytes(folder / f"frame-{res.frame}-depth.png", res.depth_png)
            atomic_write_bytes(folder / f"frame-{res.frame}-central.png", res.central_png)
            atomic_write_bytes(folder / f"frame-{res.frame}-allfocus.png", res.allfocus_png)
            if res.pixels_ply is not None and res.pixels_png is not None:
                atomic_write_bytes(folder / f"frame-{res.frame}-pixels.ply", res.pixels_ply)
                atomic_write_bytes(folder / f"frame-{res.frame}-depth-pixels.png", res.pixels_png)
            summaries[str(res.frame)] = res.summary
            settings = res.settings
            print(res.message, flush=True)
        summaries = {str(e.frame): summaries[str(e.frame)] for e in frames}
        doc = {
            "format": "plenocal-depth", "version": 1, "plenocal_version": __version__,
            "inputs": {
                "dataset": str(dataset.folder),
                "camera": {"path": str(camera_path), "sha256": file_sha256(camera_path)},
                "kappa": {"value": kappa, "path": kappa_path, "sha256": file_sha256(kappa_path) if kappa_path else None},
                "scaling": None if scaling is None else {"path": str(args.scaling), "sha256": file_sha256(args.scaling)},
                "images": {str(e.frame): {"path": e.path, "sha256": file_sha256(dataset.path(e.path)),
                                          "white": whites[e.frame].path} for e in frames},
            },
            "settings": settings,
            "search": {"distance_range_mm": list(searched), "default": distance_range is None,
                       "distances_not_searched_mm": None if left_out is None else list(left_out)},
            "model_field": {"radius_mm": camera_file.field_radius_mm, "applied": field_radius_px is not None},
            "scaling": None if scaling is None else {**scaling.to_json(), "applied": scaling.kept, "field_applied": scaling.field_kept},
            "frames": summaries,
            "execution": {"where": "this process" if local else (f"scheduler {scheduler}" if scheduler else f"local Dask cluster of {n_workers} workers")},
            "wall_time_s": time.perf_counter() - t_all,
        }
        write_document(tmp / "depth.json", doc)
    where = "" if local else (f" on {scheduler}" if scheduler else f" on a local Dask cluster of {n_workers} workers")
    print(f"depth of {len(frames)} frame(s){where} in {time.perf_counter() - t_all:.1f} s; wrote {out / 'depth'}")
    if left_out is not None:
        print(f"warning: {not_searched_text(searched, left_out, default=distance_range is None)}")
    for line in extrapolation_text({f: v.get("scaling") for f, v in summaries.items()}):
        print(f"warning: {line}")
    return 0
