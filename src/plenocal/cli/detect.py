"""``plenocal detect DATASET -o OUT``: BAP features in every checkerboard image.

Needs the pre-calibration (``--precalibration DIR``, default ``DATASET/precalibration`` or the
dataset's own ``camera.json`` with Ω): the micro-image grid, the type layout and Ω. Uses the
devignetting white of the manifest. Writes atomically:

- ``OUT/observations.npz`` — BAP features of every frame (calibration, evaluation and translation
  roles) linked to checkerboard nodes, and the micro-image centres of the pre-calibration;
- ``OUT/detection.json`` — per frame: counts (micro-images examined, corners, rejections by
  reason, clusters, linked features), virtual depths, linking result (why a frame was not
  linked; how equally fitting labellings were decided), timing;
- ``OUT/overlays/frame-NNN.png`` — a crop of each of the first ``--overlays`` frames with the
  detected corners and their blur circles; ``--csv`` adds libpleno-style ``bap.csv``/``mic.csv``.
"""

from __future__ import annotations

import argparse
import functools
import time
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from plenocal import __version__
from plenocal.calib.extrinsics import MIN_RELATIVE_NODE_FRACTION, FramePoseInit, initial_extrinsics, relative_ids_note
from plenocal.cli._args import DEFAULT_PUPIL_SHAPE, PUPIL_SHAPES, bounded_int
from plenocal.detect.corners import NaturalVignetting, white_levels, white_weight
from plenocal.detect.nodes import RESOLVABLE_BLUR_FRACTION, SINGLE_VIEW_MAX_RMS_PX, unresolvable_distances_mm
from plenocal.detect.pipeline import detect_frame, devignette_micro_images, micro_images
from plenocal.errors import DataError, InputFileError
from plenocal.io._json import write_document
from plenocal.io.atomic import atomic_folder
from plenocal.io.camera import read_camera_file
from plenocal.io.dataset import FRAME_ROLES, Dataset, ImageEntry, ImageRole, read_dataset
from plenocal.io.images import bit_depth_of
from plenocal.io.observations import (
    export_observations_csv,
    read_observations,
    validate_observations,
    write_observations,
)
from plenocal.io.outputs import STAGE_RECORD, check_output_folder
from plenocal.model.observations import (
    POSITIONS_AS_SEEN,
    POSITIONS_CHIEF_RAY,
    BapFeatures,
    MicroImageCentres,
    Observations,
)
from plenocal.model.profile import mla_to_object_mm
from plenocal.precalib.checks import check_white_images

LINK_MAX_RMSE_FRACTION = 0.1
LINK_MIN_CLUSTERS = 6
"""Fewest linked clusters for a frame to be kept (:func:`nodes_needed`), and fewest for a labelling
of clusters alone (:data:`plenocal.calib.extrinsics.MIN_LINKED_NODES`): a frame its clusters do not
link with fewer than this is tried by its lone corners with them (:func:`link_lone_corners`)."""
LINK_MIN_NODE_FRACTION = 0.6
PUPIL_FILE = "pupil-ellipses.npz"
"""The main aperture's preimages the first pass measured (``--pupil-shape`` white or white-centre,
where some micro-image departs from the disc model), handed to the second pass: measuring them
again from the white took 0.74 s (under cProfile) of a real-optics r12-b second pass."""
OUTPUTS = ("observations.npz", "detection.json", "overlays", "bap.csv", "mic.csv", PUPIL_FILE, STAGE_RECORD)
"""What ``detect`` writes in its output folder (replaced as a whole)."""
MAX_OVERLAYS = 10_000
HELP = "detect BAP features (corners, clusters, virtual depth, blur radius) in the checkerboard images"


def nodes_needed(n_nodes: int, *, image_decided: bool) -> int:
    """Fewest linked nodes for a frame to be kept: :data:`LINK_MIN_CLUSTERS`, and
    :data:`LINK_MIN_NODE_FRACTION` of the board's unless the image decided which part of the
    board they are (:attr:`plenocal.calib.extrinsics.FramePoseInit.image_decided`)."""
    if image_decided:
        return LINK_MIN_CLUSTERS
    return max(LINK_MIN_CLUSTERS, int(np.ceil(LINK_MIN_NODE_FRACTION * n_nodes)))


def pupil_ellipses(shape: str, white: np.ndarray, *, grid: Any, omega: Any, layout: Any, dataset: Dataset) -> Any:
    """The main aperture's preimages for ``--pupil-shape`` (None for the paper's disc); the
    ellipse's shape from every white of the dataset (role ``white``) when there are several."""
    if shape == "disc":
        return None
    from plenocal.detect.pipeline import local_radii
    from plenocal.precalib.pupil_shape import measure_pupil_ellipses

    others = [(float(e.f_number), dataset.read_image(e)) for e in dataset.manifest.with_role(ImageRole.WHITE)
              if e.f_number is not None] if shape == "white" else []
    # measured once per white with the R_a and R_b that detection uses, passed to detect_frame
    _, types, _, ra_all, rb_all, _ = local_radii(grid, omega, layout)
    return measure_pupil_ellipses(white, grid, radius_aperture_px=ra_all, radius_lens_px=rb_all, types=types,
                                  f_number=omega.f_number, shape=shape == "white", other_whites=others)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("detect", help=HELP, description=HELP[0].upper() + HELP[1:] + ".")
    p.add_argument("dataset", type=Path, metavar="DATASET", help="plenocal dataset folder")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="OUT", help="output folder")
    p.add_argument(
        "--precalibration", type=Path, default=None, metavar="DIR",
        help="output folder of 'plenocal precalibrate' (default: DATASET/precalibration, else DATASET/camera.json)",
    )
    p.add_argument("--overlays", type=bounded_int(0, MAX_OVERLAYS), default=3, metavar="N",
                   help="overlay images for the first N frames (default 3)")
    p.add_argument("--csv", action="store_true", help="also write bap.csv and mic.csv")
    p.add_argument("--no-pupil-vignetting", action="store_true", help="report corners where they appear in the micro-images (the paper's way); by default the "
                   "main aperture's vignetting of the micro-lens pupil is inverted to chief-ray positions")
    p.add_argument("--invert-estimator", action="store_true", help="chief-ray positions by inverting the corner estimator on rendered corners "
                   "instead of fitting the rendered corner to the pixels (independent, ~30 %% noisier)")
    p.add_argument("--pupil-shape", choices=PUPIL_SHAPES, default=DEFAULT_PUPIL_SHAPE,
                   help="the main aperture's preimage in each micro-image: 'disc' (the paper's, radius R_a about the grid node), "
                        "'white' (an ellipse measured from the devignetting white where it departs from the disc model) or "
                        f"'white-centre' (the disc at the white's measured centre there); default {DEFAULT_PUPIL_SHAPE}")
    p.add_argument("--natural-vignetting", action="store_true",
                   help="weigh the rendered corners' lens points by natural vignetting (cos·cos/r² of each ray; physical images "
                        "have it, the paper's model and PRISM's renders do not), with the pre-calibration camera's d and "
                        "principal point; the second pass does as its first pass did (experimental, off by default: "
                        "see docs/model.md)")
    second = p.add_argument_group("second pass (after calibration; 'plenocal run' does it)")
    second.add_argument("--previous", type=Path, default=None, metavar="DIR",
                        help="a first pass's output: frames it refused or linked partly are detected again with the camera "
                             "of --camera and the poses of --poses; frames it linked fully are kept as they are")
    second.add_argument("--camera", type=Path, default=None, metavar="FILE", help="calibrated camera.json (with --previous)")
    second.add_argument("--poses", type=Path, default=None, metavar="FILE", help="calibrated poses.json (with --previous)")
    p.set_defaults(func=run)


def _precalibration(dataset: Dataset, explicit: Path | None) -> tuple[Path, Path | None]:
    """(camera.json with Ω, observations.npz with the MICs or None)."""
    candidates = [explicit] if explicit is not None else [dataset.folder / "precalibration", dataset.folder]
    for folder in candidates:
        cam = folder / "camera.json"
        if cam.is_file():
            obs = folder / "observations.npz"
            return cam, obs if obs.is_file() else None
    where = explicit if explicit is not None else dataset.folder
    raise InputFileError(where, "no camera.json from pre-calibration here; run 'plenocal precalibrate DATASET -o DIR' and pass --precalibration DIR")


MAX_CHIEF_RAY_FAILURE_FRACTION = 0.2
"""Largest share of detected corners whose chief-ray position (the pupil-vignetting inversion)
does not converge. With the camera's configuration right it is small: 0.3 % on a simulated R12-A
crop, 1.0 % on PRISM r12-b, 2.1 % on the real-optics r12-b renders, 0.2 % on an exit-pupil set;
with a Galilean R12-A declared Keplerian, 57 % (219 of 385 corners), and the frames that remain
then fail calibration for too few frames, whose line said nothing of the configuration. It bounds
the share over all corners and the median frame's share (frames with
:data:`MIN_CORNERS_FOR_A_FRAME_SHARE` corners or more): with that wrong configuration a frame near
the camera (196 mm of the R12-A crop's 175–400 mm) inverts all its 555 corners and hides the far
frames' 33 % and 47 % in the pooled share (11 %)."""
MIN_CORNERS_FOR_A_FRAME_SHARE = 20
"""Fewest detected corners for a chief-ray failure share to count (a frame's, or all frames')."""


def chief_ray_failure(per_frame: list[dict[str, Any]], spec: Any) -> str | None:
    """The line when too many corners' chief-ray inversion failed
    (:data:`MAX_CHIEF_RAY_FAILURE_FRACTION`): the declared configuration (or Ω) does not describe
    the camera. None otherwise."""
    counts = [(int((r.get("counts") or {}).get("corners", 0)), int((r.get("counts") or {}).get("rejected_chief_ray_not_converged", 0)))
              for r in per_frame]
    corners = sum(c for c, _ in counts)
    failed = sum(f for _, f in counts)
    shares = [f / c for c, f in counts if c >= MIN_CORNERS_FOR_A_FRAME_SHARE]
    typical = float(np.median(shares)) if shares else 0.0
    if corners < MIN_CORNERS_FOR_A_FRAME_SHARE or (failed <= MAX_CHIEF_RAY_FAILURE_FRACTION * corners
                                                   and typical <= MAX_CHIEF_RAY_FAILURE_FRACTION):
        return None
    conf = getattr(getattr(spec, "configuration", None), "value", None)
    return (f"the chief-ray positions of {failed} of {corners} detected corners ({100 * failed / corners:.0f} %; "
            f"{100 * typical:.0f} % in the median frame; a right camera: a few %) did not converge: the camera "
            f"model does not describe these images; check "
            f"camera_spec.configuration" + (f" (declared {conf}: Galilean and Keplerian cameras give the same "
                                           "white images)" if conf else "") + " and the white images' f-numbers")


def no_frame_linked(board: Any, per_frame: list[dict[str, Any]], n_features: int) -> str:
    """The line for corners found in the frames but none linked to the declared board: the fault is
    most likely the manifest's ``target`` (it wrote observations with no feature, and calibration
    then said "observations.npz: no BAP features")."""
    reasons: dict[str, int] = {}
    for rec in per_frame:
        why = str((rec.get("linking") or {}).get("reason") or "no features")
        why = why.split(":")[0].split(";")[0]
        reasons[why] = reasons.get(why, 0) + 1
    common = max(reasons.items(), key=lambda kv: kv[1])
    if common[0] == "no features" or "barycentres (a lattice needs" in common[0]:
        return (f"no checkerboard frame could be linked: only {n_features} corner features were found in "
                f"{len(per_frame)} frames (in {common[1]} frames: {common[0]}), too few to place the board; check "
                "that the devignetting white and the checkerboards share one f-number, camera_spec.configuration "
                "and that the board is in focus range")
    return (f"no checkerboard frame could be linked to the board it declares (target: {board.columns} x {board.rows} "
            f"inner corners, {board.square_mm:g} mm squares): {n_features} corner features were found in "
            f"{len(per_frame)} frames but none fits that board (in {common[1]} frames: {common[0]}); check target.columns, "
            "target.rows (inner corners, not squares) and target.square_mm")


def too_few_clusters_hint(counts: dict[str, int]) -> str:
    """What detection saw in a frame left with too few clusters for a labelling (< 6, or none), for its
    refusal reason: the corner-like micro-images, the corners fitted there and why the others
    failed, and the corners in no cluster. Near the MLA's conjugate plane a corner shows in one
    micro-image and forms no cluster (the telephoto set's frames 210–212 at 365–385 mm: 46–68
    corners, 44–61 of them alone); beyond it the lenslets blur a corner over most of the
    micro-image (182, 183 at 542, 571 mm: |ρ| ≈ 6.8 px against a usable radius of 7.3 px,
    X-junction fits from the true position end 15–21 px wide, none within 1 px of it). The condition
    is :data:`LINK_MIN_CLUSTERS`."""
    return (f"{counts.get('corners', 0)} corners fitted in {counts.get('class_corner', 0)} corner-like micro-images "
            f"({counts.get('rejected_not_converged', 0)} fits did not converge, {counts.get('rejected_photometric', 0)} too faint, "
            f"blurred or misfitting), {counts.get('clusters_noise', 0)} of them in no cluster; a board near the MLA's conjugate "
            "plane shows each corner in one micro-image, one beyond it blurs the corners past the corner model")


def frames_with_too_few_nodes(linked: BapFeatures, status: dict[int, Any], board: Any) -> dict[int, int]:
    """Frames whose linked nodes are fewer than :func:`nodes_needed` (frame -> linked nodes).

    With few clusters a wrong labelling of a symmetric board fits as well as the right one (PnP
    has the freedom): such frames are not linked unless the image decided which part of the
    board they are, or their ids are relative (:data:`RELATIVE_ROLES`, :func:`link_frame`); nor are
    they completed by prediction (a wrong pose would predict wrong nodes)."""
    out: dict[int, int] = {}
    for frame in np.unique(linked.frame):
        rows = (linked.frame == frame) & (linked.node >= 0)
        n_nodes = len(np.unique(linked.node[rows]))
        r = status.get(int(frame))
        decided = r is not None and (r.image_decided or r.relative_ids)
        if n_nodes and n_nodes < nodes_needed(board.n_nodes, image_decided=decided):
            out[int(frame)] = n_nodes
    return out


def complete_frame_nodes(
    frame: int, pose: Any, known: BapFeatures, *, camera: Any, board: Any, micro: Any,
    devignetted: Callable[[np.ndarray], np.ndarray], rms_bound: float, pitch_px: float, fit_rendered: bool,
    single_views: bool = False, within_extent: bool = False,
) -> tuple[BapFeatures, dict[str, Any]]:
    """Board nodes a posed frame misses although some micro-image sees them, predicted with ``camera`` and ``pose``
    and fitted (:func:`plenocal.detect.nodes.detect_board_nodes`). ``micro``: the micro-images
    (the white's alone decide them); ``devignetted(index)`` gives the frame's devignetted image,
    valid at least in the micro-images ``index`` (the only ones the fits read), called only when
    some missing node is predicted in two or more micro-images (a node seen once gives no
    feature), or in one with ``single_views`` (a node fitted once then gives a single-view
    feature, ρ NaN: :func:`plenocal.detect.nodes.detect_board_nodes`). Returns the added features
    (``node`` set) and a record: ``action`` ("complete": no
    unseen node predicted in a micro-image; "predicted in ≤ 1 view": nothing to fit;
    "predicted"), the unseen nodes predicted in a micro-image (``missing_in_view``), the fit's
    counts and its wall time. ``within_extent``: only the nodes inside the rows and columns of the
    linked ones (a frame with relative ids, :attr:`~plenocal.calib.extrinsics.FramePoseInit.relative_ids`:
    beyond them its labelling may put nodes past the printed board's edge, where no corner is)."""
    from plenocal.calib.linking import within_seen_extent
    from plenocal.detect.nodes import detect_board_nodes, predict_node_views, views_to_fit

    t0 = time.perf_counter()
    known = known.select((known.frame == frame) & (known.node >= 0))
    seen = np.zeros(board.n_nodes, dtype=bool)
    seen[known.node] = True
    if within_extent:
        seen |= ~within_seen_extent(seen, columns=board.columns, rows=board.rows)
    if seen.all():
        return BapFeatures.empty(), {"action": "complete", "missing_in_view": 0}
    # In view means predicted in a micro-image, not inside the central view: the micro-images
    # along the sensor's border see a strip beyond it (R12-C, a row cut off the central view:
    # its nodes in 15–38 whole micro-images).
    views = predict_node_views(camera, pose, board, micro=micro, nodes=np.flatnonzero(~seen))
    blurred = too_blurred_record(views)
    per_node = np.bincount(views.node, minlength=board.n_nodes)
    missing = per_node > 0
    if not missing.any():  # the one record whose reason names the blur (unfitted_text): where a board would do
        return BapFeatures.empty(), {"action": "complete", "missing_in_view": 0, **blurred, **unresolvable_record(blurred, camera)}
    if not np.any(per_node >= 2) and (not single_views or np.count_nonzero(per_node == 1) < MIN_SINGLE_VIEW_NODES):
        return BapFeatures.empty(), {"action": "predicted in <= 1 view each (no feature possible)" if not single_views else
                                     f"predicted in <= 1 view each, in one for fewer than {MIN_SINGLE_VIEW_NODES} nodes (not fitted)",
                                     "missing_in_view": int(missing.sum()), **blurred, "wall_time_s": time.perf_counter() - t0}
    dv = devignetted(np.unique(views_to_fit(views, micro, known).index))
    nd = detect_board_nodes(dv, micro, camera=camera, cam_from_world=pose, board=board, known=known, rms_bound=rms_bound,
                            pitch_px=pitch_px, frame=frame, fit_rendered=fit_rendered, views=views, single_views=single_views)
    return nd.features, {"action": "predicted", "missing_in_view": int(missing.sum()), **nd.counts, **blurred,
                         "wall_time_s": time.perf_counter() - t0}


def too_blurred_record(views: Any) -> dict[str, Any]:
    """What a completion record says of the views :func:`~plenocal.detect.nodes.predict_node_views`
    left out for their blur alone: how many, their |ρ| (least and median, px) and the largest |ρ|
    resolved there (median over them, px); empty when there are none."""
    tb = np.asarray(views.too_blurred, dtype=np.float64).reshape(-1, 2)
    if not len(tb):
        return {}
    return {"too_blurred_views": len(tb), "too_blurred_rho_px": [round(float(np.min(tb[:, 0])), 2), round(float(np.median(tb[:, 0])), 2)],
            "resolvable_rho_px": round(float(np.median(tb[:, 1])), 2)}


def unresolvable_record(blurred: dict[str, Any], camera: Any) -> dict[str, Any]:
    """For a :func:`too_blurred_record` ``blurred``: the on-axis distances where ``camera`` resolves
    no corner at its bound (``unresolvable_mm``: :func:`~plenocal.detect.nodes.unresolvable_distances_mm`,
    [nearest, farthest or None]) and its conjugate plane's distance (``conjugate_mm``); empty when
    nothing was too blurred or there is no such stretch (9 ms: computed only for the refusal that
    names it)."""
    band = unresolvable_distances_mm(camera, resolved_px=blurred["resolvable_rho_px"]) if blurred else None
    if band is None:
        return {}
    return {"unresolvable_mm": [round(band[0], 1), None if band[1] is None else round(band[1], 1)],
            "conjugate_mm": round(float(mla_to_object_mm(camera, 0.0)), 1)}


def unfitted_text(record: dict[str, Any]) -> str:
    """"; …" saying why a posed frame's completion fitted nothing when its pose predicts no node in
    a micro-image (``missing_in_view`` 0): too blurred (:func:`too_blurred_text`), or no node's
    corner inside any micro-image's usable disc; "" otherwise."""
    if record.get("missing_in_view", 1):
        return ""
    return too_blurred_text(record) or "; this camera and pose predict no node inside a micro-image's usable disc"


def too_blurred_text(record: dict[str, Any]) -> str:
    """"; …" naming the blur that left a posed frame's nodes unfitted (:func:`too_blurred_record`),
    or "" when the record has none."""
    if not record.get("too_blurred_views"):
        return ""
    lo, med = record["too_blurred_rho_px"]
    text = (f"; its nodes' corners are blurred over |ρ| {lo:.1f} px and more (median {med:.1f} px) in the "
            f"{record['too_blurred_views']} micro-images that see them, where a corner is fitted up to {record['resolvable_rho_px']:.1f} px "
            f"({RESOLVABLE_BLUR_FRACTION:g} of the disc)")
    band = record.get("unresolvable_mm")
    if not band:
        return text + ": a board nearer or farther from the plane conjugate to the MLA gives features"
    near, far = band
    where = f"between {near:.0f} and {far:.0f} mm" if far is not None else f"beyond {near:.0f} mm"
    return (text + f": with this camera no board on the axis {where} from the lens shows a corner sharp enough to fit "
                   f"(the plane conjugate to the MLA at {record['conjugate_mm']:.0f} mm); a board "
                   + ("nearer or farther" if far is not None else "nearer") + " gives features")


MIN_SINGLE_VIEW_NODES = 3
"""Fewest nodes predicted in one micro-image each for a frame whose other missing nodes are
predicted in none to be fitted for single views: a node or two adds little and costs the frame's
image (read and devignetted again in the second pass, 0.13–0.16 s of a full-scale R12 frame)."""
MIN_LONE_CORNERS = 6
"""Fewest points (lone corners, :attr:`plenocal.detect.pipeline.FrameDetection.lone_index`, and
the frame's few cluster barycentres) for :func:`link_lone_corners` to try a lattice of them (as
:data:`LINK_MIN_CLUSTERS` nodes)."""
LATTICE_FROM_LONE_CORNERS = "its lone corners' lattice"
LATTICE_FROM_SCENE_VIEW = "its scene view's lattice"
"""What a refused frame's ``lone_links`` were linked from (its completion record's
``lone_links_from``; :func:`link_lone_corners`), as the second pass names them."""
MIN_LONE_FEATURE_NODES = 4
"""Fewest nodes with features (fitted in two or more micro-images, or in one: single views) for a
frame linked by its lone corners to be kept (the issue's "≥ 4 corners"). :data:`LINK_MIN_CLUSTERS`' 6
guards a labelling made from those nodes alone (PnP on 4–5 coplanar points cannot check it); here
the labelling is the lone corners' lattice (tens of nodes there) that the image decided."""
LONE_COVERED_PITCHES = 2.0
"""A lone corner whose micro-image centre is within this many micro-image pitches of a cluster's
barycentre is taken for that cluster's node and left out of the lattice (the barycentre places the
node to a pixel or two, the centre to about a pitch). Nodes are 12 pitches apart or more there:
the DG R12-A render's frame 211 (375 mm), 276 px = 11.9 pitches, its 40 lone corners' centres
2.6–14 px from their nodes' true projections (0.6 pitch at most), none within 2 pitches of its 5
clusters' barycentres."""


def link_lone_corners(det: Any, frame: int, *, camera: Any, board: Any, fit_rendered: bool, n_clusters: int,
                      grid_camera: Any = None, scene_corners: np.ndarray | None = None,
                      ) -> tuple[BapFeatures, Any, dict[str, Any]] | None:
    """A frame with too few clusters for a labelling, linked by its lone corners and clusters,
    then completed.

    Near the MLA's conjugate plane a corner shows in one micro-image (|υ| small, the cone from its
    virtual point through the aperture a pitch or two wide) and forms no cluster, so a frame may
    hold its nodes' corners with none or a handful of clusters. Each lone corner's micro-image
    centre is then within about a pitch of its node's barycentre — a tenth of a node spacing or
    less there — so the centres are linked as barycentres, together with the clusters'
    barycentres (a lone corner within :data:`LONE_COVERED_PITCHES` of one is that cluster's node
    and left out; :func:`~plenocal.calib.extrinsics.init_frame`, the lattice's tolerance leaving
    off the false corners among them). The frame is kept only when the image decided which part
    of the board they are (a lattice of noisy points needs that check) and its nodes with features
    make :data:`MIN_LONE_FEATURE_NODES`: the clusters linked to a node, and the nodes the pose
    predicts and :func:`complete_frame_nodes` fits, in two or more micro-images (υ, ρ) or in one
    (a single view: (u, v) alone, ρ NaN; the lone corners are fitted again there, from the
    board's lines as their micro-lens images them). The telephoto set's frame 102 at 371 mm (95 corners, 37 of
    them within 3 px of a true view, one cluster of 2): 37 centres linked, 36 on their true node
    and none on another; the completion then fits 9 nodes twice, 18 features, each in a
    micro-image that sees its node (the true pose and camera: 10 nodes). The DG R12-A render's
    frame 211 at 375 mm (5 clusters of 2, 40 lone corners, each in a true view of its nearest
    node): see docs/detection.md.

    ``scene_corners`` ((n, 2) px): the board's inner corners found in the frame's scene view
    (:func:`plenocal.detect.view.board_corners`), linked in place of the lone corners, the same way.

    Returns (features with ``node`` set, the :class:`~plenocal.calib.extrinsics.FramePoseInit`,
    the completion's record) or None when there are fewer than :data:`MIN_LONE_CORNERS` points
    or the images were not kept.
    """
    from plenocal.calib.extrinsics import cluster_barycentres, init_frame

    feats = det.features.select(det.features.cluster >= 0)
    cid, bary = cluster_barycentres(feats.cluster, feats.u, feats.v)
    if scene_corners is not None:
        centres = np.asarray(scene_corners, dtype=np.float64).reshape(-1, 2)
    else:
        centres = det.micro.centres[det.lone_index] if det.micro is not None else np.zeros((0, 2))
    pitch = (camera if grid_camera is None else grid_camera).grid.diameter_px
    if len(cid) and len(centres):
        gap = np.min(np.hypot(*(centres[:, None] - bary[None]).transpose(2, 0, 1)), axis=1)
        centres = centres[~(gap <= LONE_COVERED_PITCHES * pitch)]
    n_lone = len(centres)
    if not n_lone or n_lone + len(cid) < MIN_LONE_CORNERS or det.devignetted is None or det.micro is None:
        return None
    # one id per cluster (its observations, averaged by init_frame) and one per lone corner after them
    lone_ids = int(cid.max(initial=-1)) + 1 + np.arange(n_lone)
    ids = np.concatenate([feats.cluster, lone_ids])
    r, node_of = init_frame(camera, board, ids, np.concatenate([feats.u, centres[:, 0]]), np.concatenate([feats.v, centres[:, 1]]),
                            frame=frame, linked=False, max_rmse_fraction=LINK_MAX_RMSE_FRACTION, view=det.view)
    head = (f"{n_lone} lone corners (each in one micro-image)" if scene_corners is None else
            f"{n_lone} of the board's inner corners in its scene view") + (f" and {len(cid)} cluster{'s' * (len(cid) > 1)}" if len(cid) else "")
    if not r.ok or r.pose is None:
        return BapFeatures.empty(), replace(r, reason=f"{head}: {r.reason}", n_clusters=n_clusters), {"action": "no pose"}
    if not r.image_decided:
        return BapFeatures.empty(), replace(r, ok=False, reason=f"{head} linked, but the image did not decide which part of the "
                                                                 "board they are", n_clusters=n_clusters), {"action": "no pose"}
    lut = np.full(int(ids.max(initial=0)) + 1, -1, dtype=np.int64)
    for i, n in node_of.items():
        lut[i] = n
    cols = feats.columns()
    cols["node"] = lut[feats.cluster] if len(feats) else feats.node
    known = BapFeatures(**cols)
    known = known.select(known.node >= 0)
    added, record = complete_frame_nodes(frame, r.pose, known, camera=camera, board=board, micro=det.micro,
                                         devignetted=lambda _index: det.devignetted, rms_bound=det.rms_bound,
                                         pitch_px=pitch, fit_rendered=fit_rendered, single_views=True)
    out = BapFeatures.concatenate([known, added])
    n_nodes = len(np.unique(out.node))
    n_cluster_nodes = len(np.unique(known.node))
    if n_nodes < MIN_LONE_FEATURE_NODES:
        fitted = (f"{n_nodes} nodes with features ({n_cluster_nodes} its clusters', {n_nodes - n_cluster_nodes} predicted from "
                  "their pose and fitted)" if len(cid) else
                  f"{n_nodes} nodes predicted from their pose were fitted")
        # the lattice the image placed, for the second pass to pose again with the calibrated
        # camera without detecting the frame again: each linked point's node and position
        points = zip(np.concatenate([cid, lone_ids]).tolist(), np.concatenate([bary, centres]).tolist(), strict=True)
        record["lone_links"] = [[int(node_of[i]), round(u, 3), round(v, 3)] for i, (u, v) in sorted(points) if i in node_of]
        record["lone_links_from"] = LATTICE_FROM_SCENE_VIEW if scene_corners is not None else LATTICE_FROM_LONE_CORNERS
        refused = int(record.get("single_views_refused", 0))
        sigma = record.get("single_views_sigma_px")
        why = (f"; {refused} nodes fitted in one micro-image left out: "
               + (f"the camera and their best pose leave them {sigma:.2f} px off (σ̂, over {SINGLE_VIEW_MAX_RMS_PX:g})"
                  if sigma is not None else "no pose of the board explains where they appear (too few to fit one)")
               + ", the calibrated camera tries them again" if refused else "")
        why += unfitted_text(record)
        return BapFeatures.empty(), replace(r, ok=False, reason=f"{head} linked ({r.n_points} nodes), but only {fitted} "
                                                                 f"(need >= {MIN_LONE_FEATURE_NODES}){why}", n_clusters=n_clusters), record
    n_single = int(record.get("single_views", 0))
    note = (f"linked by {r.n_points} of {n_lone + len(cid)} points, its {head}; its features those of "
            + (f"{n_cluster_nodes} cluster{'s' * (n_cluster_nodes != 1)} and " if len(cid) else "")
            + f"the nodes their pose predicts ({n_single} of them seen in one micro-image: single views, (u, v) only); {r.note}")
    return out, replace(r, note=note, n_clusters=n_clusters), record


def link_scene_corners(det: Any, frame: int, *, camera: Any, board: Any, fit_rendered: bool, n_clusters: int,
                       grid_camera: Any = None) -> tuple[BapFeatures, Any, dict[str, Any]] | None:
    """A frame its clusters do not link, linked by the board's inner corners in its scene view
    (:func:`plenocal.detect.view.board_corners`) and its clusters, then completed, as
    :func:`link_lone_corners` does with lone corners (tried next when this gives nothing: the
    view's corners are all the board's nodes, to a few pixels; the lone corners some of them, to a
    pitch, with false ones among them); None when the view does not show the board's whole
    pattern (or the images were not kept).

    Near the MLA's conjugate plane the view is the board's sharpest picture (each micro-image sees a
    patch a few pitches wide), while in the raw image the corners are blurred over most of their
    micro-images: the R12-A link set's frames at 1.05 and 1.10 z_c (|ρ| 9–18 px in micro-images of
    11.6 px) hold a few dozen lone corners, a third of them false, on no lattice; their views give all
    45 corners within 3–4 px of the barycentre pinhole's projections. Such a frame is posed, but
    keeps no feature unless the pose predicts its nodes sharp enough to fit; its refusal then says
    how blurred they are (:func:`too_blurred_text`), and its linked lattice (``lone_links``) lets the
    second pass pose it again with the calibrated camera."""
    from plenocal.detect.view import board_corners

    if det.view is None or det.micro is None or det.devignetted is None:
        return None
    corners = board_corners(det.view, columns=board.columns, rows=board.rows)
    if corners is None:
        return None
    return link_lone_corners(det, frame, camera=camera, board=board, fit_rendered=fit_rendered, n_clusters=n_clusters,
                             grid_camera=grid_camera, scene_corners=corners)


def link_frame(det: Any, frame: int, *, camera: Any, board: Any, fit_rendered: bool,
               grid_camera: Any = None, relative_ids: bool = False) -> tuple[BapFeatures, Any, int | None, dict[str, Any]]:
    """One frame's features linked (:func:`initial_extrinsics`, with its scene view) and, when
    kept, completed with the nodes its pose predicts (:func:`complete_frame_nodes`, in the
    detection's own devignetted image; nodes fitted in one micro-image become single views when
    the camera explains them). Returns the features (``node`` set, −1 unlinked), the
    frame's :class:`~plenocal.calib.extrinsics.FramePoseInit` (None without features nor a lone
    corner to try), its linked nodes when too few (:func:`frames_with_too_few_nodes`) and the
    completion's record. A frame its clusters do not link, with fewer than :data:`LINK_MIN_CLUSTERS`
    of them (too few for a labelling) or fewer than its lone corners (most corners in no cluster:
    near the MLA's conjugate plane), is tried by the board's inner corners in its scene view and
    those clusters (:func:`link_scene_corners`), then, when the view does not show the whole board
    or its corners neither link the frame nor leave a lattice for the second pass, by its lone
    corners and those clusters (:func:`link_lone_corners`).
    ``grid_camera``: the camera whose micro-image grid the detection used (default ``camera``).
    ``relative_ids``: the frame's pose is free (:data:`RELATIVE_ROLES`), so a labelling of its
    clusters that neither the barycentres, the image nor the upright convention decides links it
    with relative ids (:func:`~plenocal.calib.extrinsics.link_barycentres`), as does a labelling
    of fewer nodes than :func:`nodes_needed` asks of an undecided one — both only when they link
    :data:`~plenocal.calib.extrinsics.MIN_RELATIVE_NODE_FRACTION` of the board's nodes (a frame
    refused for fewer is tried by its scene view's or lone corners' lattice, as before); such a
    frame is completed only inside its linked nodes' rows and columns. Its lone corners are not
    linked that way: their lattice of noisy points needs the image's decision as a check."""
    r = None
    if len(det.features):
        views = {frame: det.view} if det.view is not None else None
        ext = initial_extrinsics(camera, det.features, board, max_rmse_fraction=LINK_MAX_RMSE_FRACTION, views=views,
                                 relative_frames=(frame,) if relative_ids else ())
        r = ext.frames[0]
    if r is None or (not r.ok and (r.n_clusters < LINK_MIN_CLUSTERS or len(det.lone_index) > r.n_clusters)):
        lone = link_scene_corners(det, frame, camera=camera, board=board, fit_rendered=fit_rendered,
                                  n_clusters=0 if r is None else r.n_clusters, grid_camera=grid_camera)
        if lone is None or not (lone[1].ok or "lone_links" in lone[2]):
            lone = link_lone_corners(det, frame, camera=camera, board=board, fit_rendered=fit_rendered,
                                     n_clusters=0 if r is None else r.n_clusters, grid_camera=grid_camera)
        if lone is not None:
            added, r_lone, record = lone
            if r_lone.ok:  # the clusters linked by node and the nodes the pose predicts
                return added, r_lone, None, record
            return det.features, replace(r_lone, reason=f"{'no features' if r is None else r.reason}; {r_lone.reason}"), None, record
        if r is None:
            return det.features, None, None, {"action": "no pose"}
    linked = ext.bap if ext.bap is not None else det.features
    if relative_ids and r.ok and not (r.image_decided or r.relative_ids):
        n_nodes = len(np.unique(linked.node[linked.node >= 0]))
        if MIN_RELATIVE_NODE_FRACTION * board.n_nodes <= n_nodes < nodes_needed(board.n_nodes, image_decided=False):
            why = f"{n_nodes} linked clusters, and the image did not decide which part of the board they are"
            r = replace(r, relative_ids=True, note="; ".join(filter(None, [r.note, relative_ids_note(why)])))
    few = frames_with_too_few_nodes(linked, {frame: r}, board).get(frame)
    if not r.ok or r.pose is None or few is not None:
        return linked, r, few, {"action": "no pose" if not r.ok else "not completed (too few nodes for a trusted pose)"}
    if det.devignetted is None or det.micro is None:
        return linked, r, few, {"action": "not completed (no images kept)"}
    added, record = complete_frame_nodes(frame, r.pose, linked, camera=camera, board=board, micro=det.micro,
                                         devignetted=lambda _index: det.devignetted, rms_bound=det.rms_bound,
                                         pitch_px=(camera if grid_camera is None else grid_camera).grid.diameter_px,
                                         fit_rendered=fit_rendered, single_views=True, within_extent=r.relative_ids)
    return BapFeatures.concatenate([linked, added]), r, few, record


@dataclass(frozen=True)
class _DetectInputs:
    """What the first pass reads, checked: the dataset, the pre-calibration and the white."""

    dataset: Dataset
    cam_path: Path
    out: Path
    camera: Any
    omega: Any
    white: np.ndarray
    frames: list[ImageEntry]
    mic: MicroImageCentres


def _detect_inputs(args: argparse.Namespace) -> _DetectInputs:
    """The first pass's inputs, each checked with one line naming the file at fault."""
    dataset = read_dataset(args.dataset)
    cam_path, mic_path = _precalibration(dataset, args.precalibration)
    out = Path(args.output)
    check_output_folder(out, inputs=[dataset.folder, *dataset.files(), cam_path.parent, cam_path, mic_path],
                        owned=OUTPUTS)
    cam_file = read_camera_file(cam_path)
    omega = cam_file.internal_parameters
    if omega is None:
        raise InputFileError(cam_path, "has no internal_parameters (Ω); use the camera.json written by 'plenocal precalibrate'")
    camera = cam_file.camera
    m = dataset.manifest
    whites = m.with_role(ImageRole.DEVIGNETTING)
    if not whites:
        raise InputFileError(dataset.folder / "manifest.json", "no image with role 'devignetting' (a white at the checkerboard f-number)")
    frames = [e for e in m.images if e.role in FRAME_ROLES]
    if not frames:
        raise InputFileError(dataset.folder / "manifest.json", "no checkerboard images (roles calibration, evaluation, translation)")
    white = dataset.read_image(whites[0])
    try:  # a mosaic read as grey, JPEG blocks (plenocal.precalib.checks), as pre-calibration checks its whites
        check_white_images([(whites[0].path, white)], color=m.image_format.color)
    except DataError as exc:
        raise InputFileError(dataset.folder / "manifest.json", f"devignetting {exc}") from None
    sensor = (camera.sensor.width_px, camera.sensor.height_px)
    if sensor != (m.camera_spec.width_px, m.camera_spec.height_px):
        raise InputFileError(cam_path, f"sensor {sensor[0]} x {sensor[1]} px differs from the dataset's "
                                       f"{m.camera_spec.width_px} x {m.camera_spec.height_px} px: a pre-calibration of "
                                       "another camera")
    mic = MicroImageCentres.empty()
    if mic_path is not None:
        mic_obs = read_observations(mic_path)
        validate_observations(mic_obs, mic_path, lattice=camera.mla.lattice, image_size=sensor)
        mic = mic_obs.mic
    return _DetectInputs(dataset, cam_path, out, camera, omega, white, frames, mic)


@dataclass
class _FramesDetected:
    """The first pass's frames, detected and linked one by one (:func:`_detect_frames`)."""

    parts: list[BapFeatures] = field(default_factory=list)  # per frame, its features linked (node −1 where not)
    per_frame: list[dict[str, Any]] = field(default_factory=list)
    statuses: list[FramePoseInit] = field(default_factory=list)
    too_few: dict[int, int] = field(default_factory=dict)  # frame -> its linked nodes, too few to keep it
    node_records: dict[int, dict[str, Any]] = field(default_factory=dict)  # frame -> what predicting its missing nodes did
    overlays: list[tuple[int, np.ndarray, BapFeatures]] = field(default_factory=list)
    n_detected: int = 0


def _detect_frames(inp: _DetectInputs, args: argparse.Namespace, pupil: Any) -> _FramesDetected:
    """Detect and link every checkerboard frame, the next image read while one is detected."""
    from rich.progress import Progress

    camera, frames, board = inp.camera, inp.frames, inp.dataset.manifest.target
    done = _FramesDetected()
    with Progress(transient=True) as progress, ThreadPoolExecutor(max_workers=1) as reader:
        task = progress.add_task("detecting", total=len(frames))
        # The next image is read (PNG decoding releases the GIL) while this one is detected.
        pending = reader.submit(inp.dataset.read_image, frames[0]) if frames else None
        for i, entry in enumerate(frames):
            assert entry.frame is not None and pending is not None
            t0 = time.perf_counter()
            image = pending.result()
            pending = reader.submit(inp.dataset.read_image, frames[i + 1]) if i + 1 < len(frames) else None
            det = detect_frame(
                image, inp.white, grid=camera.grid, omega=inp.omega, layout=camera.mla.types, frame=entry.frame,
                pupil_vignetting=not args.no_pupil_vignetting, fit_rendered=not args.invert_estimator, keep_images=True,
                pupil=pupil, natural=NaturalVignetting.of_camera(camera) if args.natural_vignetting else None,
            )
            t_detect = time.perf_counter() - t0
            # Linked right away (frames are linked independently), so that the nodes its pose
            # predicts are fitted in the devignetted image still in memory.
            linked_f, r, few, done.node_records[entry.frame] = link_frame(
                det, entry.frame, camera=camera, board=board, fit_rendered=not args.invert_estimator,
                relative_ids=entry.role in RELATIVE_ROLES)
            done.n_detected += len(det.features)
            done.parts.append(linked_f)
            if r is not None:
                done.statuses.append(r)
            if few is not None:
                done.too_few[entry.frame] = few
            done.per_frame.append(
                {
                    "frame": entry.frame,
                    "role": entry.role.value,
                    "image": entry.path,
                    "counts": det.counts,
                    "rms_bound": det.rms_bound if np.isfinite(det.rms_bound) else None,
                    "virtual_depths": [float(x) for x in det.virtual_depth if np.isfinite(x)],
                    "wall_time_s": t_detect,
                    "linking_s": time.perf_counter() - t0 - t_detect,
                }
            )
            if len(done.overlays) < args.overlays:
                done.overlays.append((entry.frame, image, det.features))
            del det
            progress.advance(task)
    return done


def _linking_records(done: _FramesDetected, linked: BapFeatures, *, board: Any, camera: Any) -> NDArray[np.bool_]:
    """Each frame's ``linking`` and ``predicted_nodes`` records (in ``done.per_frame``); returns
    which of the ``linked`` features are kept (on a node, in a frame with enough of them)."""
    status = {r.frame: r for r in done.statuses}
    keep = linked.node >= 0
    for frame in done.too_few:
        keep &= linked.frame != frame
    min_clusters = nodes_needed(board.n_nodes, image_decided=False)
    for rec in done.per_frame:
        r = status.get(rec["frame"])
        rows = linked.frame == rec["frame"]
        few = done.too_few.get(rec["frame"])
        rec["linking"] = {
            "ok": bool(r.ok) and few is None if r else False,
            "reason": (f"only {few} linked clusters (need >= {min_clusters} unless the image decides which part of the board they are)"
                       if few is not None else r.reason) if r else "no features",
            "image_decided": bool(r.image_decided) if r else False,
            "relative_ids": bool(r.relative_ids) if r else False,
            "note": r.note if r else "",
            "rmse_px": float(r.rmse_px) if r and np.isfinite(r.rmse_px) else None,
            "n_clusters": int(r.n_clusters) if r else 0,
            "linked_features": int((rows & keep).sum()),
            "single_views": single_views(linked.has_rho[rows & keep], typed=bool(camera.n_types)),
            "unlinked_features": int((rows & ~keep).sum()),
        }
        if r is None or (not r.ok and r.n_clusters < LINK_MIN_CLUSTERS):
            rec["linking"]["reason"] += ": " + too_few_clusters_hint(rec["counts"])
        rec["predicted_nodes"] = done.node_records.get(rec["frame"], {"action": "no pose"})
    return keep


def run(args: argparse.Namespace) -> int:
    if args.previous is not None or args.camera is not None or args.poses is not None:
        return run_second_pass(args)
    inp = _detect_inputs(args)
    dataset, camera, frames, m = inp.dataset, inp.camera, inp.frames, inp.dataset.manifest
    board = m.target
    pupil = pupil_ellipses(args.pupil_shape, inp.white, grid=camera.grid, omega=inp.omega, layout=camera.mla.types, dataset=dataset)
    t_all = time.perf_counter()
    done = _detect_frames(inp, args, pupil)
    per_frame, n_detected = done.per_frame, done.n_detected
    linked = BapFeatures.concatenate(done.parts)
    config_problem = chief_ray_failure(per_frame, m.camera_spec)
    if config_problem is not None:
        raise InputFileError(dataset.folder / "manifest.json", config_problem)
    if n_detected == 0:
        raise DataError(f"{dataset.folder}: no corners found in any checkerboard image; check the devignetting white and the f-numbers")
    n_added = sum(int(r.get("features_added", 0)) for r in done.node_records.values())
    keep = _linking_records(done, linked, board=board, camera=camera)
    if not keep.any():
        raise InputFileError(dataset.folder / "manifest.json", no_frame_linked(board, per_frame, n_detected))
    relative = tuple(sorted(r.frame for r in done.statuses if r.ok and r.relative_ids and r.frame not in done.too_few))
    obs = Observations(linked.select(keep), inp.mic, POSITIONS_AS_SEEN if args.no_pupil_vignetting else POSITIONS_CHIEF_RAY,
                       relative_frames=relative)
    doc = {
        "format": "plenocal-detection",
        "version": 1,
        "plenocal_version": __version__,
        "dataset": str(dataset.folder),
        "precalibration": str(inp.cam_path),
        "pupil_vignetting": not args.no_pupil_vignetting,
        "positions": obs.positions,
        "fit_rendered": not args.invert_estimator,
        "pupil_shape": args.pupil_shape,
        **({"natural_vignetting": True} if args.natural_vignetting else {}),
        **({} if pupil is None else {"pupil_ellipses": int(pupil.elliptical.sum())}),
        "n_bap": len(obs.bap),
        "n_mic": len(obs.mic),
        "n_frames": len(frames),
        "n_frames_linked": sum(1 for r in done.statuses if r.ok and r.frame not in done.too_few),
        "wall_time_s": time.perf_counter() - t_all,
        "frames": per_frame,
    }
    out = inp.out
    with atomic_folder(out, owned=OUTPUTS) as tmp:
        write_observations(tmp / "observations.npz", obs)
        if pupil is not None and pupil.elliptical.any():
            _write_pupil_ellipses(tmp / PUPIL_FILE, pupil)
        if args.csv:
            export_observations_csv(tmp, obs)
        write_document(tmp / "detection.json", doc)
        if done.overlays:
            from plenocal.viz import save_figure
            from plenocal.viz.detect import overlay_figure

            for frame, image, feats in done.overlays:
                save_figure(overlay_figure(image, feats, camera), tmp / "overlays" / f"frame-{frame:03d}",
                            formats=("png",))
    n_ok = doc["n_frames_linked"]
    n_single = sum(rec["linking"]["single_views"] for rec in per_frame)
    n_relative = len(obs.relative_frames)
    print(
        f"{len(obs.bap)} BAP features linked to nodes in {n_ok}/{len(frames)} frames "
        f"({int((~keep).sum())} unlinked dropped; {n_added} from predicted nodes"
        + (f", {n_single} of them single views: (u, v) only" if n_single else "")
        + (f"; {n_relative} frames with relative node ids: placements no image decides, which their poses take"
           if n_relative else "")
        + f"), {len(obs.mic)} micro-image centres; "
        f"{doc['wall_time_s']:.1f} s; wrote {out}"
    )
    return 0


RELATIVE_ROLES = (ImageRole.CALIBRATION, ImageRole.EVALUATION)
"""The frames that may be linked with relative node ids (:func:`link_frame`): those whose pose is
free — calibration frames, and evaluation frames, whose pose the evaluation estimates again with
the intrinsics fixed and whose depth it compares with the plane over their linked nodes
(``node_extent``). Not translation frames: a sequence's poses share one origin."""

MIN_CLUSTERS_TO_RELINK = 5
"""A refused frame is detected again in the second pass only if its first pass found at least this
many clusters (a lattice needs 5 barycentres, :func:`plenocal.calib.linking.lattice_coordinates`;
with fewer, linking fails whatever the camera, and the frame's detection does not depend on it),
or if its lone corners or its scene view's corners made a lattice the image placed but too few
nodes were fitted (:func:`link_lone_corners`, :func:`link_scene_corners`; its completion record's ``lone_links``, which :func:`_repose_lone_lattice`
poses again without detecting the frame again): near the MLA's conjugate plane their nodes show in
one micro-image each, and only a camera that explains the frame there, the calibrated one, turns
them into single views (:data:`plenocal.detect.nodes.SINGLE_VIEW_MAX_RMS_PX`: the pre-calibration
camera leaves the thin-lens R12-A render's board at 0.97 z_c σ̂ 1.9 px off, the calibrated one
0.27 px)."""


def frame_pose(camera: Any, known: BapFeatures, board: Any, frame: int) -> Any:
    """The pose of a linked frame that calibration did not pose (an evaluation or translation frame)
    from its own linked features with ``camera`` fixed, as the held-out evaluation estimates it
    (:func:`plenocal.evaluate.holdout.evaluate_holdout`: initial extrinsics, plain least squares,
    its rejection rule); None when they give none."""
    from plenocal.evaluate.holdout import evaluate_holdout

    mine = known.select((known.frame == frame) & (known.node >= 0))
    if len(mine) == 0:
        return None
    try:
        return evaluate_holdout(camera, Observations(mine, MicroImageCentres.empty()), board, frames=[frame]).poses.get(frame)
    except DataError:
        return None


@dataclass(frozen=True)
class _SecondPassInputs:
    """What the second pass reads, checked: the dataset, the pre-calibration, the first pass's
    outputs and the calibrated camera and poses."""

    dataset: Dataset
    cam_path: Path
    previous: Path
    out: Path
    pre: Any
    omega: Any
    calibrated: Any
    poses: dict[int, Any]
    observations: Observations
    doc: dict[str, Any]
    entries: dict[int, ImageEntry]
    pupil_vignetting: bool
    fit_rendered: bool
    pupil_shape: str
    natural_vignetting: bool = False
    """The first pass weighed its rendered corners by natural vignetting: the second does too."""

    @property
    def natural(self) -> NaturalVignetting | None:
        """The weights' inputs from pre-calibration's camera, as the first pass took them; None
        without natural vignetting."""
        return NaturalVignetting.of_camera(self.pre.camera) if self.natural_vignetting else None


def _second_pass_inputs(args: argparse.Namespace) -> _SecondPassInputs:
    """The second pass's inputs, each checked with one line naming the file at fault."""
    import json

    from plenocal.io.poses import read_poses

    if args.previous is None or args.camera is None or args.poses is None:
        raise InputFileError(Path(args.output), "a second pass needs --previous, --camera and --poses together")
    dataset = read_dataset(args.dataset)
    cam_path, _mic_path = _precalibration(dataset, args.precalibration)
    prev = Path(args.previous)
    out = Path(args.output)
    check_output_folder(out, inputs=[dataset.folder, *dataset.files(), cam_path, prev / "observations.npz", prev / "detection.json",
                                     prev / PUPIL_FILE, args.camera, args.poses], owned=OUTPUTS)
    pre = read_camera_file(cam_path)
    if pre.internal_parameters is None:
        raise InputFileError(cam_path, "has no internal_parameters (Ω); use the camera.json written by 'plenocal precalibrate'")
    calibrated = read_camera_file(args.camera).camera
    poses = read_poses(args.poses)
    prev_obs = read_observations(prev / "observations.npz")
    try:
        doc = json.loads((prev / "detection.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputFileError(prev / "detection.json", f"cannot be read ({exc}); run the first pass again") from None
    shape = str(doc.get("pupil_shape", "disc"))
    if shape not in PUPIL_SHAPES:
        raise InputFileError(prev / "detection.json", f"pupil_shape {shape!r} is none of {', '.join(PUPIL_SHAPES)}; run the first pass again")
    entries = {e.frame: e for e in dataset.manifest.images if e.role in FRAME_ROLES and e.frame is not None}
    return _SecondPassInputs(dataset, cam_path, prev, out, pre, pre.internal_parameters, calibrated, poses, prev_obs, doc, entries,
                             bool(doc.get("pupil_vignetting", True)), bool(doc.get("fit_rendered", True)), shape,
                             bool(doc.get("natural_vignetting", False)))


class _WhiteOnDemand:
    """The white, its pupil shapes and micro-images, set up once, when a frame first needs them (a
    set whose frames the first pass linked fully needs none: PRISM r12-b, 0.39 s of nothing)."""

    def __init__(self, inp: _SecondPassInputs, images: _ImagesAhead) -> None:
        self.inp = inp
        self.images = images

    @functools.cached_property
    def stored(self) -> tuple[np.ndarray, float]:
        """A grey white's integers and their scale, converted where used, not whole."""
        return self.images.image("stored", white_entry(self.inp.dataset))

    @functools.cached_property
    def white(self) -> np.ndarray:
        """The grey white, as detection reads it (the pupil measurement, frames detected again)."""
        raw, scale = self.stored
        return raw / scale if scale != 1.0 else raw

    @functools.cached_property
    def levels(self) -> Any:
        return white_levels(self.stored[0], scale=self.stored[1])

    @functools.cached_property
    def pupil(self) -> Any:
        """The first pass's pupil shapes: where it found no micro-image off the disc model the disc is
        what detection used (0.66 s of a full-scale R12-A second pass not measured again)."""
        inp = self.inp
        if inp.pupil_shape != "disc" and inp.doc.get("pupil_ellipses") == 0:
            return None
        same_precalibration = Path(str(inp.doc.get("precalibration", ""))).resolve() == inp.cam_path.resolve()
        handed = inp.previous / PUPIL_FILE if same_precalibration else None
        camera = inp.pre.camera
        return _pupil_ellipses_again(handed, len(camera.grid.lattice.all_indices()[0]), lambda: pupil_ellipses(
            inp.pupil_shape, self.white, grid=camera.grid, omega=inp.omega, layout=camera.mla.types, dataset=inp.dataset))

    @functools.cached_property
    def micro(self) -> Any:
        """The white's micro-images (its weight alone, not the white divided by itself): each frame
        then devignettes only the micro-images its predicted nodes are fitted in."""
        camera = self.inp.pre.camera
        return micro_images(white_weight(self.stored[0], levels=self.levels, scale=self.stored[1]), grid=camera.grid,
                            omega=self.inp.omega, layout=camera.mla.types, pupil_vignetting=self.inp.pupil_vignetting,
                            pupil=self.pupil, natural=self.inp.natural)


def _kept_as_linked(rec: dict[str, Any]) -> str | None:
    """Why the second pass keeps the first pass's frame ``rec`` as it was linked, without reading its
    image: fully linked, or every view its pose predicted fitted (the calibrated camera predicts the
    same nodes); None when the frame is worked on again."""
    first = rec.get("predicted_nodes") or {}
    if not (rec.get("linking") or {}).get("ok"):
        return None
    if first.get("action") == "complete":
        return "kept (fully linked in the first pass)"
    if (first.get("action") == "predicted" and not (first.get("rejected_fit", 0) + first.get("rejected_far_from_prediction", 0))
            and not first.get("single_views_refused")):
        return "kept (every view its pose predicted was fitted in the first pass)"
    return None


def _image_read(rec: dict[str, Any], inp: _SecondPassInputs) -> str | None:
    """Which form of its image the second pass reads for the first pass's frame ``rec``
    (:class:`_ImagesAhead`), which is what it does there (:func:`_second_pass_frame`): ``"stored"``
    (:func:`_raw_image`: a linked frame, or a refused one whose lone corners' or scene view's lattice
    was linked, completed where its nodes are predicted), ``"grey"`` (refused with enough clusters: detected
    again), None (kept as it was: no image)."""
    if _kept_as_linked(rec) is not None or int(rec["frame"]) not in inp.entries:
        return None
    linking = rec.get("linking") or {}
    if linking.get("ok") or (rec.get("predicted_nodes") or {}).get("lone_links"):
        return "stored"
    return "grey" if int(linking.get("n_clusters", 0)) >= MIN_CLUSTERS_TO_RELINK else None


def _read_ahead(rec: dict[str, Any]) -> bool:
    """Whether the second pass reads the first pass's frame ``rec``'s image ahead (when it reads it
    at all, :func:`_image_read`): not for a refused frame posed again from its stored lattice, which
    reads its image only if the calibrated camera predicts a node sharp enough to fit (near the
    MLA's conjugate plane, often none: the R12-A link set's boards at 1.0–1.10 z_c, whose three
    images were decoded ahead for nothing beside the frames' fits: its second pass 0.87–0.88 s
    with them, 0.78–0.82 s without, two runs each; the one such frame that fits reads on demand)."""
    return bool((rec.get("linking") or {}).get("ok")) or not (rec.get("predicted_nodes") or {}).get("lone_links")


IMAGES_AHEAD = 2
"""Images the second pass reads ahead, on as many threads (PNG decoding releases the GIL), while it
fits the frame before: decoding a full-scale R12 frame takes ~0.15 s, most of a frame's work there."""


class _ImagesAhead:
    """The second pass's image reads, in the order it needs them (``plan``: (form, entry), form as
    :func:`_image_read` says), :data:`IMAGES_AHEAD` in flight at a time on ``pool``. A read asked
    for and not planned next (a frame that ended up reading nothing skips its planned read) is
    done then; the last image taken is kept for a second request."""

    def __init__(self, dataset: Dataset, plan: list[tuple[str, ImageEntry]], pool: ThreadPoolExecutor) -> None:
        self.dataset = dataset
        self.plan = list(plan)
        self.pool = pool
        self.pending: list[tuple[tuple[str, str], Any]] = []
        self.last: tuple[tuple[str, str], Any] | None = None
        self._fill()

    def _read(self, form: str, entry: ImageEntry) -> Any:
        return _raw_image(self.dataset, entry) if form == "stored" else self.dataset.read_image(entry)

    def _fill(self) -> None:
        while self.plan and len(self.pending) < IMAGES_AHEAD:
            form, entry = self.plan.pop(0)
            self.pending.append(((form, entry.path), self.pool.submit(self._read, form, entry)))

    def image(self, form: str, entry: ImageEntry) -> Any:
        key = (form, entry.path)
        if self.last is not None and self.last[0] == key:
            return self.last[1]
        planned = [k for k, _ in self.pending] + [(f, e.path) for f, e in self.plan]
        if key in planned:
            while self.pending[0][0] != key:  # planned reads before it that nothing asked for
                self.pending.pop(0)
                self._fill()
            value = self.pending.pop(0)[1].result()
            self._fill()
        else:
            value = self._read(form, entry)
        self.last = (key, value)
        return value


def _second_pass_frame(rec: dict[str, Any], inp: _SecondPassInputs, white: _WhiteOnDemand) -> BapFeatures | None:
    """What the second pass does with the first pass's frame ``rec`` (its detection.json record):
    the features it adds (None: the frame is kept as it was), its account in ``rec["second_pass"]``."""
    frame = int(rec["frame"])
    first = rec.get("predicted_nodes") or {}
    linked_ok = bool((rec.get("linking") or {}).get("ok"))
    kept = _kept_as_linked(rec)
    if kept is not None:
        rec["second_pass"] = {"action": kept}
        return None
    if frame not in inp.entries:
        return None
    form = _image_read(rec, inp)  # the one place that decides which frames are worked on, and how
    if form is None:
        rec["second_pass"] = {"action": "kept refused (too few clusters for a pose, and no lattice of lone corners or of "
                                        "the scene view's corners: no camera can link them)"}
        return None
    board = inp.dataset.manifest.target
    known = inp.observations.bap.select(inp.observations.bap.frame == frame)
    bound = rec.get("rms_bound")
    rms = float(bound) if bound is not None else float("inf")
    pitch = inp.pre.camera.grid.diameter_px
    pose, how = (inp.poses[frame], "calibrated camera and pose") if frame in inp.poses else (None, "")
    if linked_ok and pose is None:  # an evaluation or translation frame: its pose from its own features
        pose, how = frame_pose(inp.calibrated, known, board, frame), "calibrated camera, pose from its linked features"
    devignetted = functools.partial(_devignetted, inp.entries[frame], white)
    record: dict[str, Any]
    if linked_ok and pose is not None:
        added, record = complete_frame_nodes(frame, pose, known, camera=inp.calibrated, board=board, micro=white.micro,
                                             devignetted=devignetted, rms_bound=rms, pitch_px=pitch, fit_rendered=inp.fit_rendered,
                                             single_views=True, within_extent=bool(rec["linking"].get("relative_ids")))
        record["action"] = f"{record['action']} ({how})"
    elif not linked_ok and form == "stored":  # refused, its lone corners' or scene view's lattice linked
        links = _lone_links(first["lone_links"], inp.previous / "detection.json", frame, board.n_nodes)
        added, record = _repose_lone_lattice(frame, links, calibrated=inp.calibrated, board=board, micro=white.micro,
                                             source=str(first.get("lone_links_from", LATTICE_FROM_LONE_CORNERS)),
                                             devignetted=devignetted, rms_bound=rms, pitch_px=pitch, fit_rendered=inp.fit_rendered)
    elif not linked_ok:  # form "grey": detected again
        grey_white = white.white  # read first, as planned
        added, record = _relink_refused(white.images.image("grey", inp.entries[frame]), inp.entries[frame], grey_white,
                                        pre=inp.pre, calibrated=inp.calibrated,
                                        board=board, pupil_vignetting=inp.pupil_vignetting, fit_rendered=inp.fit_rendered,
                                        pupil=white.pupil,
                                        natural=inp.natural)
    else:
        rec["second_pass"] = {"action": "kept (its linked features give no pose)"}
        return None
    record["added_features"] = len(added)
    rec["second_pass"] = record
    if len(added):
        _count_second_pass(rec, added, refused=not linked_ok, typed=bool(inp.calibrated.n_types))
    elif not linked_ok and record.get("reason"):
        _refused_again(rec, str(record["reason"]))
    return added


def _refused_again(rec: dict[str, Any], reason: str) -> None:
    """A frame's ``linking`` record when the second pass refused it again for ``reason``: that
    reason, the calibrated camera's (the report lists the frames left out with it), the first
    pass's kept as ``first_pass_reason``."""
    link = rec.setdefault("linking", {})
    link["first_pass_reason"] = link.get("reason", "")
    link["reason"] = f"second pass: {reason}"


def run_second_pass(args: argparse.Namespace) -> int:
    """``detect --previous DIR --camera CAM --poses POSES``: the first pass's frames again, with the
    calibrated camera (issue 24). Frames it linked fully are kept untouched; frames it linked
    partly get their missing nodes predicted with the calibrated camera and pose (for evaluation
    and translation frames, which calibration does not pose, the pose their linked features give
    with that camera: :func:`frame_pose`) and fitted; frames
    it refused are detected again and linked with the calibrated camera (its barycentre pinhole),
    then completed the same way (:func:`_second_pass_frame`). Writes the first pass's features plus
    the added ones, and in detection.json per frame what the second pass did (``second_pass``) and
    in total (``second_pass.added_features``; ``added_calibration_features``, in calibration
    frames: 0 means calibration need not run again)."""
    t_all = time.perf_counter()
    inp = _second_pass_inputs(args)
    doc, prev_obs = inp.doc, inp.observations
    frames = doc.get("frames", [])
    reads = [(form, inp.entries[int(rec["frame"])]) for rec in frames
             if (form := _image_read(rec, inp)) is not None and _read_ahead(rec)]
    parts = [prev_obs.bap]
    n_added_frames = n_added_calibration = 0
    with ThreadPoolExecutor(max_workers=IMAGES_AHEAD) as pool:
        images = _ImagesAhead(inp.dataset, [("stored", white_entry(inp.dataset)), *reads] if reads else [], pool)
        white = _WhiteOnDemand(inp, images)
        for rec in frames:
            t0 = time.perf_counter()
            added = _second_pass_frame(rec, inp, white)
            if added is None:
                continue
            rec["second_pass"]["wall_time_s"] = time.perf_counter() - t0
            if len(added):
                parts.append(added)
                n_added_frames += 1
                n_added_calibration += len(added) if inp.entries[int(rec["frame"])].role is ImageRole.CALIBRATION else 0
    bap = BapFeatures.concatenate(parts)
    n_added = len(bap) - len(prev_obs.bap)
    relinked = {int(rec["frame"]) for rec in frames if (rec.get("second_pass") or {}).get("relative_ids")
                and (rec.get("second_pass") or {}).get("added_features")}
    obs = Observations(bap, prev_obs.mic, prev_obs.positions, tuple(sorted(set(prev_obs.relative_frames) | relinked)))
    doc["n_bap"] = len(bap)
    doc["n_frames_linked"] = len({int(f) for f in np.unique(bap.frame)})
    doc["second_pass"] = {"camera": str(args.camera), "poses": str(args.poses), "previous": str(inp.previous),
                          "added_features": n_added, "added_calibration_features": n_added_calibration,
                          "frames_with_added_features": n_added_frames,
                          "wall_time_s": time.perf_counter() - t_all}
    with atomic_folder(inp.out, owned=OUTPUTS) as tmp:
        write_observations(tmp / "observations.npz", obs)
        write_document(tmp / "detection.json", doc)
    print(f"second pass: {n_added} BAP features added in {n_added_frames} frames ({len(bap)} in "
          f"{doc['n_frames_linked']} frames); {doc['second_pass']['wall_time_s']:.1f} s; wrote {inp.out}")
    return 0


def _write_pupil_ellipses(path: Path, pupil: Any) -> None:
    """:data:`PUPIL_FILE`: the arrays of a :class:`~plenocal.model.pupil_ellipse.PupilEllipses`."""
    with open(path, "wb") as fh:
        np.savez(fh, offset_px=pupil.offset_px, matrix=pupil.matrix, elliptical=pupil.elliptical)


def _pupil_ellipses_again(path: Path | None, n: int, measure: Callable[[], Any]) -> Any:
    """The second pass's pupil ellipses: those the first pass wrote (``path``, :data:`PUPIL_FILE`;
    None when it used another pre-calibration) for the grid's ``n`` micro-images, else
    ``measure()`` (a first pass that wrote none, e.g. of an earlier release)."""
    from plenocal.model.pupil_ellipse import PupilEllipses

    if path is None or not path.is_file():
        return measure()
    try:
        with np.load(path) as z:
            pupil = PupilEllipses(np.asarray(z["offset_px"], dtype=np.float64), np.asarray(z["matrix"], dtype=np.float64),
                                  np.asarray(z["elliptical"], dtype=bool))
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError) as exc:
        raise InputFileError(path, f"cannot be read ({exc}); run the first pass again") from None
    if pupil.offset_px.shape != (n, 2) or pupil.matrix.shape != (n, 3) or pupil.elliptical.shape != (n,):
        raise InputFileError(path, f"holds {pupil.elliptical.shape} ellipses with offsets {pupil.offset_px.shape} and matrices "
                                   f"{pupil.matrix.shape}, not the pre-calibration grid's {n}; run the first pass again")
    return pupil


def white_entry(dataset: Dataset) -> ImageEntry:
    """The dataset's devignetting white (its first)."""
    return dataset.manifest.with_role(ImageRole.DEVIGNETTING)[0]


def _raw_image(dataset: Dataset, entry: Any) -> tuple[np.ndarray, float]:
    """An image and the scale that makes it grey in [0, 1]: a grey image's stored integers and
    2^bits − 1 (:func:`plenocal.io.images.read_raw_image`'s rule, ``stored / scale`` in float64,
    applied by the caller only to the pixels it uses: converting a whole 4080 × 3068 image to
    float took 0.03–0.6 s, filling 100 MB), else the grey image and 1."""
    if dataset.manifest.image_format.color == "grey":
        stored = dataset.read_image(entry, as_grey=False)
        return stored, float(2 ** bit_depth_of(stored) - 1)
    return dataset.read_image(entry), 1.0


def single_views(has_rho: NDArray[np.bool_], *, typed: bool) -> int:
    """How many of the features whose ``has_rho`` is given are single views (a node seen in one
    micro-image: (u, v), no ρ); a camera without micro-lens types (``typed`` False) has no ρ at all,
    so none of its features is."""
    return int(np.count_nonzero(~has_rho)) if typed else 0


def _count_second_pass(rec: dict[str, Any], added: BapFeatures, *, refused: bool, typed: bool) -> None:
    """A frame's ``linking`` record with the second pass's features counted in, and, for a frame the
    first pass refused, marked linked (its first reason kept as ``first_pass_reason``): the report
    lists the frames left out from it."""
    link = rec.setdefault("linking", {})
    link["linked_features"] = int(link.get("linked_features", 0)) + len(added)
    link["single_views"] = int(link.get("single_views", 0)) + single_views(added.has_rho, typed=typed)
    if refused:
        link["first_pass_reason"] = link.get("reason", "")
        link.update(ok=True, reason="", note=f"linked in the second pass (calibrated camera): {rec['second_pass'].get('action', '')}")


def _devignetted(entry: Any, white: _WhiteOnDemand, index: np.ndarray) -> np.ndarray:
    """A frame devignetted in the micro-images ``index`` only (the second pass's fits read no others)."""
    raw, scale = white.images.image("stored", entry)
    stored, white_scale = white.stored
    return devignette_micro_images(raw, stored, white.micro, index, scale=scale, white_scale=white_scale, threshold=white.levels[0])


def _lone_links(links: Any, where: Path, frame: int, n_nodes: int) -> np.ndarray:
    """A first pass's ``lone_links`` of ``frame`` as an (n, 3) array (node, u, v), or one line naming
    the file when it is not that."""
    try:
        a = np.asarray(links, dtype=np.float64).reshape(-1, 3)
    except (TypeError, ValueError):
        a = np.zeros((0, 3))
    nodes = a[:, 0]
    if not len(a) or not np.all(np.isfinite(a)) or np.any((nodes < 0) | (nodes >= n_nodes) | (nodes != np.round(nodes))):
        raise InputFileError(where, f"frame {frame}'s lone_links is not a list of [node, u, v] (node an integer in 0 … "
                                    f"{n_nodes - 1}, u, v finite); run the first pass again")
    return a


def _repose_lone_lattice(frame: int, links: np.ndarray, *, calibrated: Any, board: Any, micro: Any,
                         devignetted: Callable[[np.ndarray], np.ndarray], rms_bound: float, pitch_px: float,
                         fit_rendered: bool, source: str = LATTICE_FROM_LONE_CORNERS) -> tuple[BapFeatures, dict[str, Any]]:
    """A frame the first pass refused after its lone corners' lattice was linked and placed by the
    image, but too few nodes were fitted (its single views not explained by the pre-calibration
    camera): posed again from that lattice (``links``: (n, 3), node, u, v of each linked point) with the
    calibrated camera's barycentre pinhole, and completed with it (single views included), without
    detecting it again (``source`` names the lattice in what happened: the first pass's
    ``lone_links_from``, the lone corners' or the scene view's). Returns the features and what
    happened."""
    from plenocal.calib.extrinsics import initial_extrinsics

    a = np.asarray(links, dtype=np.float64).reshape(-1, 3)
    n = len(a)
    z = np.zeros(n, dtype=np.int64)
    points = BapFeatures(frame=np.full(n, frame), k=z, l=z, u=a[:, 1], v=a[:, 2], rho=np.full(n, np.nan), node=a[:, 0].astype(np.int64),
                         cluster=np.full(n, -1))
    r = initial_extrinsics(calibrated, points, board, max_rmse_fraction=LINK_MAX_RMSE_FRACTION).frames[0]
    if not r.ok or r.pose is None:
        return BapFeatures.empty(), {"action": "refused again", "reason": f"its lattice gives no pose with the calibrated camera: {r.reason}"}
    added, record = complete_frame_nodes(frame, r.pose, BapFeatures.empty(), camera=calibrated, board=board, micro=micro,
                                         devignetted=devignetted, rms_bound=rms_bound, pitch_px=pitch_px, fit_rendered=fit_rendered,
                                         single_views=True)
    n_nodes = len(np.unique(added.node))
    if n_nodes < MIN_LONE_FEATURE_NODES:
        return BapFeatures.empty(), {**record, "action": "refused again",
                                     "reason": f"its lattice posed with the calibrated camera, {n_nodes} nodes fitted "
                                               f"(need >= {MIN_LONE_FEATURE_NODES}){unfitted_text(record)}"}
    return added, {**record, "action": f"{source} posed with the calibrated camera; {record['action']}"}


def _relink_refused(image: np.ndarray, entry: Any, white: np.ndarray, *, pre: Any, calibrated: Any, board: Any,
                    pupil_vignetting: bool, fit_rendered: bool, pupil: Any = None,
                    natural: NaturalVignetting | None = None) -> tuple[BapFeatures, dict[str, Any]]:
    """A frame the first pass refused (``image``: its grey image): detected again, linked with the
    calibrated camera (its barycentre pinhole; :func:`link_frame`, as the first pass links) and
    completed with its pose. Returns the linked features and what happened."""
    det = detect_frame(image, white, grid=pre.camera.grid, omega=pre.internal_parameters,
                       layout=pre.camera.mla.types, frame=entry.frame, pupil_vignetting=pupil_vignetting,
                       fit_rendered=fit_rendered, keep_images=True, pupil=pupil, natural=natural)
    linked, r, few, record = link_frame(det, entry.frame, camera=calibrated, board=board, fit_rendered=fit_rendered,
                                        grid_camera=pre.camera, relative_ids=entry.role in RELATIVE_ROLES)
    if r is None or not r.ok or few is not None:
        why = "no features" if r is None else (r.reason or f"only {few} linked nodes")
        return BapFeatures.empty(), {"action": "refused again", "reason": why}
    return linked.select(linked.node >= 0), {**record, "action": f"linked with the calibrated camera; {record['action']}",
                                             "note": r.note, **({"relative_ids": True} if r.relative_ids else {})}
