"""Initial frame poses from cluster barycentres (paper §5.1; reference §7.1, with a real PnP).

The barycentre of a node's BAP features is, for a symmetric set of micro-lenses, exactly on the
line from the main-lens centre O through the node's virtual point; it is therefore the central
projection of the node through O onto the sensor plane z = −(D + d): a pinhole camera with focal
length (D + d)/s pixels and principal point (u0, v0), independent of F (reference §7.1).

Per frame:

1. barycentres of the clusters (by node id when the features are linked, else by detector cluster);
2. linking, when node ids are unknown (:func:`link_barycentres`; no barycentre is assumed to be a
   board corner, so partial boards, missing nodes and spurious clusters are fine): integer
   lattice coordinates of the barycentres (:mod:`plenocal.calib.linking`), then every placement
   of them in the board (8 lattice symmetries × offsets); with the frame's scene view, those
   the image rules out (the board's printed extent is elsewhere) go; the placements that best
   explain which nodes were seen and put the board in front of the camera, facing it, remain.
   The barycentres cannot tell a 180° (square boards: 90°) in-plane rotation of the labels, nor
   a shift of a partial board, from the truth; the image tells the shift where the board's
   edge is in view: the rotation is decided by the datasets' convention (node 0 top-left in
   the image, when one labelling is clearly the most upright) and said in the report's
   ``note``; anything else is reported as ambiguous and the frame is not linked;
3. PnP (OpenCV SQPnP, then Levenberg–Marquardt refinement) over all linked barycentres;
4. a check: finite pose, board in front of the camera, reprojection RMSE below
   ``max_rmse_fraction`` × the inter-node spacing. Frames that fail are reported and skipped.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace

import cv2
import numpy as np
from numpy.typing import NDArray

from plenocal.calib.linking import (
    IMAGE_GROUPS,
    MAX_GAP_SITES,
    MAX_SITE_DISTANCE_FRACTION,
    MAX_SQUARE_BASIS_ERROR,
    MIN_BORDER_DISTANCE_FRACTION,
    SYMMETRIES,
    LatticeFit,
    ViewSampler,
    attach_to_lattice,
    axes_image_support,
    board_placements,
    image_cells,
    image_support,
    lattice_coordinates,
    placement_support,
)
from plenocal.model.camera import PlenopticCamera
from plenocal.model.geometry import Pose, rodrigues
from plenocal.model.observations import BapFeatures
from plenocal.model.target import Checkerboard

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

LINK_RADIUS_FRACTION = 0.6
"""A node claims its nearest barycentre within this fraction of the inter-node spacing (ref §7.1)."""

MIN_LINKED_NODES = 6
"""Fewest barycentres a labelling must link (PnP on 4–5 coplanar points has no redundancy left to
check the labelling)."""

MIN_SUPPORT_MARGIN = 2
"""Labellings whose support (see :func:`link_barycentres`, in nodes) is within this margin of the
best count as fitting equally: one lost node or one spurious cluster must not decide."""

MIN_UPRIGHT_ROLL_GAP_DEG = 60.0
"""The upright convention (node 0 top-left) picks between labellings the barycentres cannot tell
apart only when the chosen one's in-plane roll |angle of the board's column axis from +u| is
smaller than every alternative's by at least this much (0°/180°: rolls up to 60°; the 90°
alternatives of square views: up to 15°)."""


MIN_RELATIVE_NODE_FRACTION = 0.5
"""A labelling that neither the image nor the upright convention decides is linked with relative ids
(:func:`link_barycentres`'s ``relative``) only when it links at least this fraction of the board's
nodes: a lattice of a few clusters can be a wrong one. The tilted Tessar R12-A render's frame 8
(366 mm, near the MLA's conjugate plane): 11 clusters whose lattice ran along the board's diagonals
(|roll| 44–46°), 10 of its 22 features left off it, 5 of its 6 linked nodes wrong (its scene view's
corners then link it right). The frames linked right with relative ids on that render and the
double-Gauss one hold 25–35 of 45 nodes, every cluster on the lattice."""


MIN_IMAGE_LOG_LIKELIHOOD_RATIO = 10.0
"""A placement of the observed lattice is ruled out by the image when its residual sum of squares
over the view's cells (:func:`plenocal.calib.linking.image_support`) exceeds the best one's by
this log-likelihood ratio, ΔRSS / (2σ²), with σ² the best placement's residual variance per cell
(odds e¹⁰ ≈ 2·10⁴ under Gaussian cell noise; misfit that is not noise only inflates σ²). On the
real-optics r12-b frames (16) the right placement and its 180° turn tie at 0 and the nearest
ruled-out one is at 165–4250 (median ≈ 1000), on PRISM r12-b (13) at 1800–8100."""

VIEW_NOISE_FLOOR = 0.02
"""Smallest σ of a view cell for :data:`MIN_IMAGE_LOG_LIKELIHOOD_RATIO`, in units of the white
(noise-free renders fit to 0.001, which would turn any small misfit into certainty)."""

MIN_AXES_SAMPLES = 30
"""Fewest lit view samples over the barycentres' hull for the image to choose the lattice axes
(:func:`image_axes`; two levels are fitted)."""

MIN_IMAGE_CELLS = 12
"""Fewest view cells for the image to take part in the choice (a level per group of
:data:`plenocal.calib.linking.IMAGE_GROUPS` leaves too few otherwise)."""


@dataclass(frozen=True)
class FramePoseInit:
    """Outcome of one frame's initialisation."""

    frame: int
    ok: bool
    reason: str = ""
    pose: Pose | None = None
    rmse_px: float = float("nan")
    n_points: int = 0
    n_clusters: int = 0
    note: str = ""
    """How the linking chose among labellings the barycentres fit equally (empty if unique)."""
    image_decided: bool = False
    """The image decided which part of the board the linked nodes are (:attr:`Linking.image_decided`)."""
    relative_ids: bool = False
    """The node ids are the board's up to a rigid motion in its plane (:attr:`Linking.relative_ids`)."""


@dataclass
class ExtrinsicsInit:
    """Initial poses of every frame that could be initialised, and what happened to the rest."""

    poses: dict[int, Pose] = field(default_factory=dict)
    frames: list[FramePoseInit] = field(default_factory=list)
    bap: BapFeatures | None = None
    """The input features with ``node`` filled in by linking (−1 for unlinked clusters)."""

    @property
    def failed(self) -> list[FramePoseInit]:
        return [f for f in self.frames if not f.ok]

    def to_dict(self) -> dict[str, object]:
        return {
            "n_frames": len(self.frames),
            "n_initialised": len(self.poses),
            "frames": [
                {"frame": f.frame, "ok": f.ok, "reason": f.reason, "note": f.note, "rmse_px": f.rmse_px,
                 "n_points": f.n_points, "n_clusters": f.n_clusters, "image_decided": f.image_decided,
                 "relative_ids": f.relative_ids}
                for f in self.frames
            ],
        }


def pinhole_matrix(camera: PlenopticCamera) -> FloatArray:
    """K of the barycentre pinhole: focal (D + d)/s px, principal point (u0, v0), shape (3, 3)."""
    f = camera.sensor.distance_mm / camera.sensor.pixel_size_mm
    u0, v0 = camera.sensor.principal_point_px
    return np.array([[f, 0.0, u0], [0.0, f, v0], [0.0, 0.0, 1.0]])


def project_pinhole(camera: PlenopticCamera, pose: Pose, points_world: FloatArray) -> FloatArray:
    """Pinhole projection of world points (barycentre model), shape (N, 3) -> (N, 2) px."""
    pc = pose.apply(points_world)
    K = pinhole_matrix(camera)
    return np.stack([K[0, 0] * pc[:, 0] / pc[:, 2] + K[0, 2], K[1, 1] * pc[:, 1] / pc[:, 2] + K[1, 2]], axis=-1)


def cluster_barycentres(ids: NDArray[np.integer], u: FloatArray, v: FloatArray) -> tuple[NDArray[np.int64], FloatArray]:
    """Mean (u, v) of each id (ids < 0 ignored).

    Returns
    -------
    unique_ids : ndarray of int, shape (C,)
    barycentres : ndarray, shape (C, 2)
    """
    ok = ids >= 0
    uid, inv = np.unique(ids[ok], return_inverse=True)
    cnt = np.bincount(inv, minlength=uid.size).astype(np.float64)
    bu = np.bincount(inv, weights=u[ok], minlength=uid.size) / cnt
    bv = np.bincount(inv, weights=v[ok], minlength=uid.size) / cnt
    return uid.astype(np.int64), np.stack([bu, bv], axis=-1)


def solve_pnp(camera: PlenopticCamera, points_world: FloatArray, image_points: FloatArray) -> Pose | None:
    """cam_from_world from ≥ 4 world–pixel correspondences (SQPnP, then LM refinement).

    SQPnP refuses (an OpenCV assertion, ``point_coordinate_variance``) points whose normalised
    image coordinates spread less than its threshold: a few barycentres one or two micro-image
    pitches apart, as a partial view's lone corners give, span ~50 px of a 10 000 px focal length.
    The board's nodes are planar, so IPPE (planar PnP) solves those; a set neither accepts has no
    pose (None), never an exception.
    """
    if len(points_world) < 4:
        return None
    K = pinhole_matrix(camera)
    obj = np.ascontiguousarray(points_world, dtype=np.float64).reshape(-1, 1, 3)
    img = np.ascontiguousarray(image_points, dtype=np.float64).reshape(-1, 1, 2)
    ok = False
    for flags in (cv2.SOLVEPNP_SQPNP, cv2.SOLVEPNP_IPPE):
        try:
            ok, rvec, tvec = cv2.solvePnP(obj, img, K, None, flags=flags)
        except cv2.error:
            continue
        if ok:
            break
    if not ok:
        return None
    rvec, tvec = cv2.solvePnPRefineLM(obj, img, K, None, rvec, tvec)
    pose = Pose.from_rotvec(rvec.reshape(3), tvec.reshape(3))
    if not (np.all(np.isfinite(pose.rotation)) and np.all(np.isfinite(pose.translation))):
        return None
    return pose


def link_nodes(
    camera: PlenopticCamera, board: Checkerboard, pose: Pose, bary: FloatArray
) -> tuple[NDArray[np.int64], float]:
    """Node id of each barycentre (−1 if none) given a pose (reference ``link_cluster_to_node_index``).

    Every node, in node order, claims its nearest unclaimed barycentre within
    0.6 × the projected inter-node spacing.

    Returns
    -------
    node_of_cluster : ndarray of int, shape (C,)
    spacing_px : float
    """
    proj = project_pinhole(camera, pose, board.node_points())
    K, L = board.columns - 1, board.rows - 1
    spacing = 0.5 * (
        np.hypot(*(proj[0] - proj[K])) / K + np.hypot(*(proj[0] - proj[L * board.columns])) / L
    )
    d = np.hypot(proj[:, None, 0] - bary[None, :, 0], proj[:, None, 1] - bary[None, :, 1])
    node_of = np.full(len(bary), -1, dtype=np.int64)
    radius = LINK_RADIUS_FRACTION * spacing
    for n in np.argsort(d.min(axis=1)):  # closest claims first; over nodes (≤ a few hundred)
        d_n = np.where(node_of < 0, d[n], np.inf)
        j = int(np.argmin(d_n))
        if d_n[j] < radius:
            node_of[j] = n
    return node_of, float(spacing)


@dataclass(frozen=True)
class Linking:
    """Node of each barycentre of one frame (:func:`link_barycentres`)."""

    node: NDArray[np.int64]
    """(C,) node id of each barycentre, −1 for unlinked ones (all −1 when the frame failed)."""
    pose: Pose | None = None
    """cam_from_world from PnP on the linked barycentres."""
    reason: str = ""
    """Why the frame could not be linked (empty on success)."""
    note: str = ""
    """How a choice between labellings the barycentres fit equally was made (empty if unique)."""
    image_decided: bool = False
    """The image ruled out every placement but the chosen one and those that put the same
    points on the same corners of the board turned or mirrored (:func:`board_symmetric_nodes`):
    which part of the board is seen is the image's answer, not the barycentres' count."""
    relative_ids: bool = False
    """Several placements fit equally and neither the image nor the upright convention chose one
    (``link_barycentres(relative=True)``): the node ids are the board's up to a whole-square shift
    and a turn in its plane, a rigid motion of the board that a free pose takes."""

    @property
    def ok(self) -> bool:
        return not self.reason


def board_symmetric_nodes(nodes: NDArray[np.int64], *, columns: int, rows: int) -> list[NDArray[np.int64]]:
    """``nodes`` (−1 kept) under every symmetry of the board's corner grid: itself, turned by
    180°, mirrored along each axis, and, for a square grid, the 90° turns and the diagonal mirrors
    (the same corner positions: no observation can tell them apart from the corners alone)."""
    n = np.asarray(nodes, dtype=np.int64)
    row, col = np.divmod(np.clip(n, 0, None), columns)
    maps = [(col, row), (columns - 1 - col, rows - 1 - row), (columns - 1 - col, row), (col, rows - 1 - row)]
    if columns == rows:
        maps += [(row, col), (rows - 1 - row, columns - 1 - col), (rows - 1 - row, col), (row, columns - 1 - col)]
    return [np.where(n >= 0, r * columns + c, -1) for c, r in maps]


def board_roll_deg(camera: PlenopticCamera, board: Checkerboard, pose: Pose, nodes: NDArray[np.integer]) -> float:
    """In-plane roll of the board in the image: angle of its column axis (+x) from +u, degrees.

    Measured at the centroid of ``nodes`` (pinhole projection of one square along +x); 0 for an
    upright board (node 0 top-left), ±180 for one upside down.
    """
    c = board.node_points(nodes).mean(axis=0)
    p = project_pinhole(camera, pose, np.stack([c, c + np.array([board.square_mm, 0.0, 0.0])]))
    d = p[1] - p[0]
    return float(np.degrees(np.arctan2(d[1], d[0])))


def _lattice_the_image_chooses(lat: LatticeFit, bary: FloatArray, view: ViewSampler, *, max_site_distance_fraction: float,
                               min_log_likelihood_ratio: float) -> tuple[LatticeFit, str | None]:
    """Step 1 of :func:`link_barycentres` where the barycentres left the lattice's axes ambiguous,
    or took them in a basis that is not square: the image chooses a square lattice of nodes if it
    can (:func:`image_axes`; the barycentres it left off then placed on its free sites); a lattice
    the barycentres decided stays when it cannot. Returns (the lattice, the image's note; None when
    the image chose none)."""
    chosen, axes_note = image_axes(lat, view, min_log_likelihood_ratio=min_log_likelihood_ratio)
    if chosen.ok:
        return attach_to_lattice(chosen, bary, max_site_distance_fraction=max_site_distance_fraction), axes_note
    return (lat if lat.ok else chosen), None


def _posed_in_front(camera: PlenopticCamera, board: Checkerboard, nodes: IntArray, candidates: IntArray,
                    bary: FloatArray) -> list[tuple[float, int, Pose]]:
    """Step 4 of :func:`link_barycentres`: each candidate placement's PnP pose (rows of ``nodes``,
    −1 where a barycentre of ``bary`` is off the board) kept when the board is in front of the
    camera and faces it (its +z axis away from the camera, R[:, 2] · t > 0: a mirror labelling sees
    it from behind); (|roll|°, placement, pose), least |roll| first."""
    survivors: list[tuple[float, int, Pose]] = []
    for p in candidates:
        ok = nodes[p] >= 0
        pose = solve_pnp(camera, board.node_points(nodes[p][ok]), bary[ok])
        if pose is None or pose.translation[2] <= 0 or pose.rotation[:, 2] @ pose.translation <= 0:
            continue
        survivors.append((abs(board_roll_deg(camera, board, pose, nodes[p][ok])), int(p), pose))
    survivors.sort(key=lambda s: s[0])
    return survivors


def _ambiguous_labelling(survivors: list[tuple[float, int, Pose]], offsets: IntArray, *, observed: tuple[int, int],
                         board: tuple[int, int], min_upright_roll_gap_deg: float) -> str:
    """The refusal of step 5 of :func:`link_barycentres`: several placements of the observed
    lattice fit equally and none is upright by the margin; how many offsets of a partial view
    among them (which board edge is unseen is then unknown)."""
    roll = survivors[0][0]
    rolls = ", ".join(f"{s[0]:.0f}°" for s in survivors)
    shifts = len({tuple(offsets[s[1]]) for s in survivors if s[0] - roll < min_upright_roll_gap_deg})
    return (f"ambiguous labelling: {len(survivors)} placements of the observed {observed[0]} × {observed[1]} lattice in the "
            f"{board[0]} × {board[1]} board fit the barycentres equally (|roll| {rolls}"
            + (f"; {shifts} offsets of a partial view: which board edge is unseen is unknown" if shifts > 1 else "")
            + f"); the upright convention needs one |roll| {min_upright_roll_gap_deg:.0f}° below the others")


def link_barycentres(
    camera: PlenopticCamera,
    board: Checkerboard,
    bary: FloatArray,
    *,
    max_site_distance_fraction: float = MAX_SITE_DISTANCE_FRACTION,
    max_gap_sites: int = MAX_GAP_SITES,
    min_linked_nodes: int = MIN_LINKED_NODES,
    min_border_distance_fraction: float = MIN_BORDER_DISTANCE_FRACTION,
    min_support_margin: int = MIN_SUPPORT_MARGIN,
    absent_edge_lines_are_evidence: bool = False,
    min_upright_roll_gap_deg: float = MIN_UPRIGHT_ROLL_GAP_DEG,
    view: ViewSampler | None = None,
    min_image_log_likelihood_ratio: float = MIN_IMAGE_LOG_LIKELIHOOD_RATIO,
    relative: bool = False,
    min_relative_node_fraction: float = MIN_RELATIVE_NODE_FRACTION,
) -> Linking:
    """Node ids of one frame's cluster barycentres, without assuming any is a board corner.

    1. Integer lattice coordinates (:func:`plenocal.calib.linking.lattice_coordinates`);
       barycentres off the lattice stay unlinked. Where the barycentres leave the lattice axes
       ambiguous (few clusters, lines of nodes between them unseen near the MLA's conjugate
       plane), the ``view`` chooses among the candidate lattices of nodes (:func:`image_axes`).
    2. Every placement of them in the board (:func:`plenocal.calib.linking.board_placements`).
       With the frame's ``view`` (the scene through the barycentre pinhole,
       :mod:`plenocal.detect.view`), only the placements the image cannot rule out remain: each
       predicts which cells around the observed nodes are checker squares (alternating), the
       border or the background beyond each side (uniform), and those whose residual exceeds
       the best one's by ``min_image_log_likelihood_ratio`` go
       (:func:`plenocal.calib.linking.image_support`): the printed extent of the board decides
       which edge of a partial view is unseen, and spurious clusters just beyond the board
       (where the pattern meets the border) are left off it.
    3. Keep those that agree best with the observations, within ``min_support_margin``
       (:func:`plenocal.calib.linking.placement_support`: barycentres linked − barycentres left
       off the board − board nodes without a barycentre although in view, inside the bounding
       box of the linked ones). A spurious cluster on the lattice just beyond the board (e.g. at
       a corner of the outer squares) is thus left out: taking it in pushes a line of nodes off
       the board or opens a line of undetected ones. Nodes beyond the box are no evidence by
       default: a board cut by the image border and a board whose edge line was not detected
       inside the image (focus plane, occlusion, glare) give the same barycentres, and a partial
       board's offset stays ambiguous. ``absent_edge_lines_are_evidence`` counts them too (for
       detections known to be complete inside the image).
    4. PnP (:func:`solve_pnp`) for each; keep the poses with the board in front of the camera and
       facing it (camera on the board's −z side: mirror labellings see it from behind).
    5. Several left: they are the same barycentres relabelled by a rotation of the board in its
       plane, or a shift of a partial board: rigid motions of the board, so PnP fits them with
       exactly the same RMSE. The upright convention picks the one whose column axis is nearest
       the image's +u if its |roll| is smaller than all the others' by
       ``min_upright_roll_gap_deg`` (said in ``note``); otherwise the frame is reported
       ambiguous. (The old linker and the reference assume an upright board too: the
       reference takes the top-left barycentre for node 0.) With ``relative`` the frame is
       linked instead, by the first of them (least |roll|, then the first offset), and its ids
       marked relative (:attr:`Linking.relative_ids`): for a frame whose pose is free — a
       calibration or evaluation frame — the placements differ by a rigid motion of the board's
       plane, which the pose takes, so its features constrain the intrinsics exactly as the true
       labelling's would. Not for frames whose poses must share one origin (a translation
       sequence); where the board's extent is read, only the linked nodes' rows and columns are
       known to be on it (:meth:`plenocal.model.observations.Observations.node_extent`).

    Parameters
    ----------
    bary : ndarray, shape (C, 2)
        Cluster barycentres, px.
    max_site_distance_fraction, max_gap_sites
        Lattice growth (see :func:`plenocal.calib.linking.lattice_coordinates`).
    min_linked_nodes : int
        Fewest barycentres the chosen labelling must link.
    min_border_distance_fraction : float
        Step 3, see :data:`plenocal.calib.linking.MIN_BORDER_DISTANCE_FRACTION`.
    min_support_margin : int
        Step 3, see :data:`MIN_SUPPORT_MARGIN`.
    absent_edge_lines_are_evidence : bool
        Step 3: also count undetected in-view nodes beyond the linked ones' box. Links
        partial boards cut by the image border, but mislabels a board with an undetected edge
        line inside the image when its other edge is at the image border.
    min_upright_roll_gap_deg : float
        See :data:`MIN_UPRIGHT_ROLL_GAP_DEG`.
    view : ViewSampler, optional
        The frame's :class:`plenocal.detect.view.SceneView` (step 2).
    min_image_log_likelihood_ratio : float
        See :data:`MIN_IMAGE_LOG_LIKELIHOOD_RATIO`.
    relative : bool
        Step 5: link an ambiguous frame with relative ids rather than refuse it, when its
        labelling links ``min_relative_node_fraction`` of the board's nodes
        (:data:`MIN_RELATIVE_NODE_FRACTION`).

    Returns
    -------
    Linking
    """
    bary = np.asarray(bary, dtype=np.float64)
    unlinked = np.full(len(bary), -1, dtype=np.int64)
    lat = lattice_coordinates(
        bary, max_site_distance_fraction=max_site_distance_fraction, max_gap_sites=max_gap_sites,
        camera_matrix=pinhole_matrix(camera),
    )
    notes: list[str] = []
    if lat.alternatives and view is not None:
        lat, axes_note = _lattice_the_image_chooses(lat, bary, view, max_site_distance_fraction=max_site_distance_fraction,
                                                    min_log_likelihood_ratio=min_image_log_likelihood_ratio)
        notes += [] if axes_note is None else [axes_note]
    if not lat.ok:
        return Linking(unlinked, reason=lat.reason)
    idx = np.flatnonzero(lat.on_lattice)
    ij = lat.ij[idx]
    C, R = board.columns, board.rows
    nodes, sym, off = board_placements(ij, columns=C, rows=R, min_linked=min_linked_nodes)
    if len(nodes) == 0:
        return Linking(unlinked, reason=f"only {ij.shape[0]} barycentres on a lattice (need >= {min_linked_nodes} on the board)")
    image_ruled = False
    if view is not None:
        keep, image_note = image_plausible(lat, view, sym, off, columns=C, rows=R,
                                           min_log_likelihood_ratio=min_image_log_likelihood_ratio)
        nodes, sym, off = nodes[keep], sym[keep], off[keep]
        notes += [image_note] if image_note else []
        image_ruled = bool(image_note)
    support = placement_support(
        lat, nodes, sym, off, columns=C, rows=R, image_size=(camera.sensor.width_px, camera.sensor.height_px),
        min_border_distance_fraction=min_border_distance_fraction,
        absent_edge_lines_are_evidence=absent_edge_lines_are_evidence, margin=min_support_margin,
    )
    cand = np.flatnonzero(support > support.max() - min_support_margin)
    n_linked = (nodes >= 0).sum(axis=1)
    n_rejected = int(np.sum((n_linked >= n_linked[cand].max()) & (support <= support.max() - min_support_margin)))
    survivors = _posed_in_front(camera, board, nodes, cand, bary[idx])
    if not survivors:
        return Linking(unlinked, reason="no labelling puts the board in front of the camera, facing it")
    roll, best, pose = survivors[0]
    w, h = np.ptp(ij @ SYMMETRIES[sym[best]].T, axis=0) + 1  # observed extent, as the board's columns × rows
    notes += [f"{n_rejected} labellings linking as many rejected: they leave nodes in view undetected"] if n_rejected else []
    ambiguous = len(survivors) > 1 and survivors[1][0] - roll < min_upright_roll_gap_deg
    if ambiguous:
        why = _ambiguous_labelling(survivors, off, observed=(w, h), board=(C, R), min_upright_roll_gap_deg=min_upright_roll_gap_deg)
        if not relative or n_linked[best] < min_relative_node_fraction * board.n_nodes:
            return Linking(unlinked, reason=why)
        notes.append(relative_ids_note(why))
    elif len(survivors) > 1:
        rolls = ", ".join(f"{s[0]:.0f}°" for s in survivors)
        notes.append(f"upright convention: node 0 top-left chosen among {len(survivors)} labellings fitting equally (|roll| {rolls})")
    node_of = unlinked.copy()
    node_of[idx] = nodes[best]
    decided, n_off = image_left_only_the_same_corners(nodes, best, n_linked, columns=C, rows=R, margin=min_support_margin)
    decided &= image_ruled and not ambiguous
    if decided and n_off:
        notes.append(f"the image left {n_off} placements that put >= {min_support_margin} detected corners off the board")
    return Linking(node_of, pose, note="; ".join(notes), image_decided=decided, relative_ids=ambiguous)


def relative_ids_note(why: str) -> str:
    """The note of a frame linked with relative ids, from why its labelling is undecided (a
    refusal's text, :func:`_ambiguous_labelling`, or the upright convention's)."""
    why = why.removeprefix("ambiguous labelling: ").split("; the upright convention needs")[0]
    return (f"node ids relative ({why}): linked by the first placement; the frame's free pose takes the "
            "whole-square shift or turn between them, so its features constrain the camera as the true labelling's do")


def image_left_only_the_same_corners(nodes: NDArray[np.int64], best: int, n_linked: NDArray[np.integer], *,
                                     columns: int, rows: int, margin: int = MIN_SUPPORT_MARGIN) -> tuple[bool, int]:
    """Whether the placements the image left (``nodes``, (P, C)) are all the chosen one (``best``)
    up to the board's symmetries (:func:`board_symmetric_nodes`: the same points on the same
    corners, turned or mirrored), or put at least ``margin`` of the observed lattice's barycentres
    off the board (``n_linked``, (P,), that many fewer than the chosen one).

    A partial view cut by the image on two sides (the telephoto set's frame 181 at 190 mm: a board
    corner in view, the image's top and right edges through the pattern) leaves placements turned
    by 90° that run out of the image where the printed extent would tell: the image cannot rule
    them out, but they hold a line of the observed nodes beyond the board's short side, leaving
    that many detected corners — clusters seen through the MLA with their own virtual depth, not
    a chance — unexplained. A spurious cluster or two near the board's edge is what
    ``margin`` (:data:`MIN_SUPPORT_MARGIN`) allows for. A turned placement that links as many
    (running on out of view, :func:`link_barycentres`'s upright case) still leaves the frame
    undecided.

    Returns
    -------
    decided : bool
    n_off : int
        Placements, not the chosen one's symmetric images, that only the corners they put off the
        board rule out."""
    same = board_symmetric_nodes(nodes[best], columns=columns, rows=rows)
    symmetric = np.array([any(np.array_equal(nodes[p], g) for g in same) for p in range(len(nodes))], dtype=bool)
    fewer = np.asarray(n_linked) <= n_linked[best] - margin
    return bool(np.all(symmetric | fewer)), int(np.sum(~symmetric & fewer))


def image_plausible(
    lat, view: ViewSampler, symmetry: NDArray[np.int64], offset: NDArray[np.int64], *, columns: int, rows: int,
    min_log_likelihood_ratio: float = MIN_IMAGE_LOG_LIKELIHOOD_RATIO, noise_floor: float = VIEW_NOISE_FLOOR,
    min_cells: int = MIN_IMAGE_CELLS,
) -> tuple[NDArray[np.bool_], str]:
    """Placements the view does not rule out, and a note saying what the image decided.

    Parameters
    ----------
    lat : LatticeFit
    view : ViewSampler
    symmetry, offset
        Placements (:func:`plenocal.calib.linking.board_placements`).
    columns, rows : int
    min_log_likelihood_ratio : float
        See :data:`MIN_IMAGE_LOG_LIKELIHOOD_RATIO`.
    noise_floor : float
        See :data:`VIEW_NOISE_FLOOR`.
    min_cells : int
        See :data:`MIN_IMAGE_CELLS`.

    Returns
    -------
    keep : ndarray of bool, shape (P,)
    note : str
        Empty when the image ruled nothing out.
    """
    keep = np.ones(len(symmetry), dtype=bool)
    cells, values = image_cells(lat, view)
    if len(cells) < min_cells or not len(symmetry):
        return keep, ""
    rss = image_support(lat, cells, values, symmetry, offset, columns=columns, rows=rows)
    sigma2 = max(float(rss.min()) / max(len(cells) - IMAGE_GROUPS, 1), noise_floor**2)
    llr = (rss - rss.min()) / (2.0 * sigma2)
    keep = llr < min_log_likelihood_ratio
    n_out = int((~keep).sum())
    if not n_out:
        return keep, ""
    nearest = float(llr[~keep].min())
    return keep, (f"the board's printed extent in the image rules out {n_out} of {len(keep)} placements "
                  f"(log-likelihood ratio ≥ {nearest:.0f} over {len(cells)} cells)")


def image_axes(
    lat: LatticeFit, view: ViewSampler, *, min_log_likelihood_ratio: float = MIN_IMAGE_LOG_LIKELIHOOD_RATIO,
    noise_floor: float = VIEW_NOISE_FLOOR, min_samples: int = MIN_AXES_SAMPLES,
    max_square_basis_error: float = MAX_SQUARE_BASIS_ERROR,
) -> tuple[LatticeFit, str]:
    """The lattice of nodes the view supports among those the barycentres leave open.

    ``lat`` failed with ambiguous axes and lists :attr:`LatticeFit.alternatives`: the square
    lattices of nodes through the barycentres (every other line of nodes unseen, say) and the
    fewest-lines basis. :func:`plenocal.calib.linking.axes_image_support` scores each against the
    checker pattern inside the barycentres' hull; the best is taken when it is square and every
    other one's residual exceeds it by the log-likelihood ratio ``min_log_likelihood_ratio``
    (ΔRSS / 2σ², σ² the best one's residual per sample, at least ``noise_floor``²).

    Returns
    -------
    lat : LatticeFit
        The chosen lattice, or ``lat`` with its reason extended by why the image did not decide.
    note : str
        What the image decided (empty when it did not).
    """
    alts = lat.alternatives
    rss, n = axes_image_support(alts, view)

    def refused(why: str) -> tuple[LatticeFit, str]:
        return replace(lat, reason=f"{lat.reason}; {why}", alternatives=()), ""

    if n < min_samples:
        return refused(f"the image cannot decide: {n} lit samples over the nodes (need >= {min_samples})")
    best = int(np.argmin(rss))
    sigma2 = max(float(rss[best]) / max(n - 2, 1), noise_floor**2)
    llr = (rss - rss[best]) / (2.0 * sigma2)
    others = np.delete(llr, best)
    nearest = float(others.min()) if others.size else float("inf")
    if not alts[best].square_error <= max_square_basis_error:
        return refused(f"the image prefers a lattice that is not square (log-likelihood ratio {nearest:.0f} over {n} samples)")
    if nearest < min_log_likelihood_ratio:
        return refused(f"the image does not decide them ({len(alts)} candidate lattices, the nearest at log-likelihood "
                       f"ratio {nearest:.1f} < {min_log_likelihood_ratio:.0f} over {n} samples)")
    step = alts[best].index
    return alts[best], (f"the image decided the lattice axes among {len(alts)} candidates"
                        + (f" (the barycentres a sub-lattice of index {step}: lines of nodes between them unseen)" if step > 1 else "")
                        + f"; log-likelihood ratio ≥ {nearest:.0f} over {n} samples")


def init_frame(
    camera: PlenopticCamera,
    board: Checkerboard,
    ids: NDArray[np.integer],
    u: FloatArray,
    v: FloatArray,
    *,
    frame: int,
    linked: bool,
    max_rmse_fraction: float = 0.25,
    view: ViewSampler | None = None,
    relative_ids: bool = False,
) -> tuple[FramePoseInit, dict[int, int]]:
    """Initialise one frame's pose from its features.

    Parameters
    ----------
    ids : ndarray of int, shape (N,)
        Node ids (``linked=True``) or detector cluster ids of the frame's features.
    view : ViewSampler, optional
        The frame's scene view, for linking (:func:`link_barycentres`).
    relative_ids : bool
        The frame's pose is free (a calibration or evaluation frame): an ambiguous labelling is
        linked with relative ids (:func:`link_barycentres`'s ``relative``).

    Returns
    -------
    result : FramePoseInit
    node_of_id : dict
        id → node (identity when already linked).
    """
    uid, bary = cluster_barycentres(np.asarray(ids), u, v)
    n_cl = int(uid.size)
    note = ""
    decided = relative = False
    if n_cl < 4:
        return FramePoseInit(frame, False, f"only {n_cl} clusters (need >= 4)", n_clusters=n_cl), {}
    if linked:
        valid = (uid >= 0) & (uid < board.n_nodes)
        nodes = uid[valid]
        pose = solve_pnp(camera, board.node_points(nodes), bary[valid])
        mapping = {int(i): int(i) for i in nodes}
        pts_w, pts_i = board.node_points(nodes), bary[valid]
    else:
        link = link_barycentres(camera, board, bary, view=view, relative=relative_ids)
        if not link.ok:
            return FramePoseInit(frame, False, link.reason, n_clusters=n_cl), {}
        pose, node_of, note, decided, relative = link.pose, link.node, link.note, link.image_decided, link.relative_ids
        ok = node_of >= 0
        mapping = {int(uid[i]): int(node_of[i]) for i in np.flatnonzero(ok)}
        pts_w, pts_i = board.node_points(node_of[ok]), bary[ok]
    if pose is None:
        return FramePoseInit(frame, False, "PnP failed", n_clusters=n_cl), {}
    err = project_pinhole(camera, pose, pts_w) - pts_i
    rmse = float(np.sqrt(np.mean(np.sum(err**2, axis=1))))
    _, spacing = link_nodes(camera, board, pose, pts_i[:1])
    if pose.translation[2] <= 0 or np.any(pose.apply(board.node_points())[:, 2] <= camera.main_lens.focal_length_mm):
        return FramePoseInit(frame, False, "board not in front of the camera", pose, rmse, len(pts_w), n_cl, note), {}
    if not rmse <= max_rmse_fraction * spacing:
        return FramePoseInit(
            frame, False, f"barycentre reprojection RMSE {rmse:.2f} px > {max_rmse_fraction} × spacing {spacing:.1f} px",
            pose, rmse, len(pts_w), n_cl, note,
        ), {}
    return FramePoseInit(frame, True, "", pose, rmse, len(pts_w), n_cl, note, decided, relative), mapping


def initial_extrinsics(
    camera: PlenopticCamera,
    bap: BapFeatures,
    board: Checkerboard,
    *,
    max_rmse_fraction: float = 0.25,
    views: Mapping[int, ViewSampler] | None = None,
    relative_frames: Collection[int] = (),
) -> ExtrinsicsInit:
    """Initial pose of every frame (paper §5.1), linking clusters to nodes when needed.

    Features whose ``node`` is set (>= 0) are used as linked; frames whose features carry only
    ``cluster`` ids are linked here, with the frame's scene view from ``views`` when given
    (:func:`link_barycentres`). Frames that cannot be initialised are reported in ``frames``
    (``ok=False`` with a reason) and left out of ``poses``. Frames in ``relative_frames`` (free
    poses: calibration and evaluation frames) are linked with relative ids where the labelling is ambiguous
    (:func:`init_frame`).

    Returns
    -------
    ExtrinsicsInit
        ``bap`` has ``node`` filled in from the linking (−1 where no node claimed the cluster).
    """
    out = ExtrinsicsInit()
    node = bap.node.copy()
    for frame in np.unique(bap.frame):
        rows = np.flatnonzero(bap.frame == frame)
        linked = bool(np.all(bap.node[rows] >= 0))
        ids = bap.node[rows] if linked else bap.cluster[rows]
        res, mapping = init_frame(
            camera, board, ids, bap.u[rows], bap.v[rows], frame=int(frame), linked=linked,
            max_rmse_fraction=max_rmse_fraction, view=None if views is None else views.get(int(frame)),
            relative_ids=int(frame) in relative_frames,
        )
        out.frames.append(res)
        if res.ok:
            assert res.pose is not None
            out.poses[int(frame)] = res.pose
            if not linked:
                lut = np.full(int(max(ids.max(initial=0), 0)) + 1, -1, dtype=np.int64)
                for cid, n in mapping.items():
                    if cid >= 0:
                        lut[cid] = n
                node[rows] = np.where(ids >= 0, lut[np.clip(ids, 0, None)], -1)
        else:
            node[rows] = np.where(linked, node[rows], -1)
    cols = bap.columns()
    cols["node"] = node
    out.bap = BapFeatures(**cols)
    return out


def triangulate_virtual_points(
    camera: PlenopticCamera, bap: BapFeatures, key: NDArray[np.int64]
) -> tuple[NDArray[np.int64], FloatArray, NDArray[np.int64]]:
    """Virtual point of each cluster: least-squares intersection of its chief rays.

    Each feature (u, v) through micro-lens (k, l) defines the ray from its sensor point through the
    micro-lens centre C(k, l); the rays of one cluster meet at the cluster's (distorted) virtual
    point p_u (paper eq:completemodel). Independent of F and of the micro-lens focal lengths.

    Parameters
    ----------
    key : ndarray of int, shape (N,)
        Cluster key of each feature (e.g. frame·n_nodes + node); negative keys are ignored.

    Returns
    -------
    keys : ndarray, shape (K,)
    points : ndarray, shape (K, 3)
        Virtual points in the camera frame, mm.
    counts : ndarray, shape (K,)
    """
    from plenocal.model.projection import micro_lens_centres

    ok = key >= 0
    uk, inv = np.unique(key[ok], return_inverse=True)
    s = camera.sensor.pixel_size_mm
    u0, v0 = camera.sensor.principal_point_px
    S = np.stack([(u0 - bap.u[ok]) * s, (v0 - bap.v[ok]) * s, np.full(int(ok.sum()), -camera.sensor.distance_mm)], axis=-1)
    C = micro_lens_centres(camera, bap.k[ok], bap.l[ok])
    n = C - S
    n /= np.linalg.norm(n, axis=1, keepdims=True)
    P = np.eye(3)[None] - n[:, :, None] * n[:, None, :]  # (N, 3, 3) projectors orthogonal to the rays
    Pc = np.einsum("nij,nj->ni", P, C)
    m = uk.size
    w = np.ones(inv.size)
    X = np.full((m, 3), np.nan)
    counts = np.bincount(inv, minlength=m)
    for _ in range(4):  # least squares, then 3 rounds of rejecting rays far from the point
        A = np.stack([np.bincount(inv, weights=w * P[:, i, j], minlength=m) for i in range(3) for j in range(3)], axis=-1)
        rhs = np.stack([np.bincount(inv, weights=w * Pc[:, i], minlength=m) for i in range(3)], axis=-1)
        A = A.reshape(m, 3, 3)
        counts = np.bincount(inv, weights=w, minlength=m)
        good = (counts >= 3) & (np.abs(np.linalg.det(A)) > 1e-18)
        X = np.full((m, 3), np.nan)
        if np.any(good):
            X[good] = np.linalg.solve(A[good], rhs[good][..., None])[..., 0]
        # Distance of each ray to its cluster's point, against the cluster's median distance.
        dist = np.linalg.norm(np.einsum("nij,nj->ni", P, X[inv] - C), axis=1)
        dist = np.where(np.isfinite(dist), dist, np.inf)
        med = np.zeros(m)
        order = np.lexsort((dist, inv))
        starts = np.searchsorted(inv[order], np.arange(m))
        ends = np.searchsorted(inv[order], np.arange(m), side="right")
        mid = np.clip((starts + ends - 1) // 2, 0, max(inv.size - 1, 0))
        med = dist[order][mid] if inv.size else med
        w = (dist <= 3.0 * med[inv] + 1e-9).astype(np.float64)
    return uk, X, counts


def rigid_fit(world: FloatArray, cam: FloatArray) -> Pose:
    """Least-squares rigid transform cam ≈ R·world + t (Kabsch), shapes (N, 3)."""
    mw, mc = world.mean(axis=0), cam.mean(axis=0)
    U, _, Vt = np.linalg.svd((cam - mc).T @ (world - mw))
    D = np.diag([1.0, 1.0, np.sign(np.linalg.det(U @ Vt))])
    R = U @ D @ Vt
    return Pose(R, mc - R @ mw)


def plenoptic_poses(
    camera: PlenopticCamera, bap: BapFeatures, board: Checkerboard, poses: dict[int, Pose]
) -> dict[int, Pose]:
    """Poses re-estimated from triangulated virtual points (consistent with the camera model).

    The barycentre pinhole ignores the main lens, so with an inexact F or D its poses put the
    virtual points at depths that do not match the features' spread in the micro-images (up to
    the pole a = 0 of eq:blurradius). Here each node's virtual point is triangulated from its
    features, mapped back through the inverse distortion and the inverse thin lens, and the
    board is fitted rigidly to those 3-D points. Frames whose fit is not usable keep their pose.
    """
    key = np.where(bap.node >= 0, bap.frame.astype(np.int64) * board.n_nodes + bap.node, -1)
    keys, pu, _counts = triangulate_virtual_points(camera, bap, key)
    x, y = camera.distortion.invert(pu[:, 0], pu[:, 1])
    F = camera.main_lens.focal_length_mm
    factor = F / (pu[:, 2] + F)
    pc = np.stack([x * factor, y * factor, pu[:, 2] * factor], axis=-1)
    out = dict(poses)
    frames_k, nodes_k = keys // board.n_nodes, keys % board.n_nodes
    for f in poses:
        m = (frames_k == f) & np.all(np.isfinite(pc), axis=1) & (pc[:, 2] > F)
        if m.sum() < 4:
            continue
        pose = rigid_fit(board.node_points(nodes_k[m]), pc[m])
        if np.all(np.isfinite(pose.translation)) and np.all(pose.apply(board.node_points())[:, 2] > F):
            out[f] = pose
    return out


__all__ = [
    "ExtrinsicsInit",
    "FramePoseInit",
    "Linking",
    "board_roll_deg",
    "board_symmetric_nodes",
    "cluster_barycentres",
    "initial_extrinsics",
    "link_barycentres",
    "link_nodes",
    "pinhole_matrix",
    "plenoptic_poses",
    "project_pinhole",
    "rodrigues",
    "solve_pnp",
]
