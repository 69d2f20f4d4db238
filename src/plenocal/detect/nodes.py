"""Board nodes predicted by a camera and a board pose, fitted where they appear (issue 24).

Near the plane conjugate to the MLA (virtual depth |υ| small) a board corner shows in only one
to three micro-images: it forms no cluster (:mod:`plenocal.detect.clusters` needs several views
for υ), so frames there are lost or keep a partial lattice. Once a frame has a pose (its linked
clusters, ≥ 4 nodes; or calibration's), every board node's micro-images are known from the
camera model (paper eq:completemodel: the chief ray from the node's virtual point through each
micro-lens centre, shifted by the pupil vignetting where corners appear): the corner is fitted
there with the frame's own estimator (:func:`plenocal.detect.corners.locate_corners`, started at
the prediction with the board's line directions), kept when the fit looks like the frame's
corners and its ray meets the board near the node (:data:`MAX_BOARD_DISTANCE_FRACTION`), and linked by node, not by
cluster size. Nodes with two or more fitted views get υ, ρ and chief-ray positions as the
detector's clusters do (:func:`plenocal.detect.pipeline.estimate_clusters`); a node seen in one
micro-image has no υ of its own (its ρ would be the model's, not an observation): it is counted,
and with ``single_views`` it gives a *single view*, a feature whose (u, v) is its chief-ray
position (the fitted corner less the pupil-vignetting shift of the pose that best explains where
such corners appear, :func:`pose_from_views`) and whose ρ is NaN, which calibration uses by its
(u, v) alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray
from scipy.spatial import cKDTree

from plenocal.detect.corners import CornerFit, locate_corners
from plenocal.detect.pipeline import (
    BORDER_MARGIN_PX,
    MicroImages,
    corner_shape_ok,
    estimate_clusters,
)
from plenocal.model.camera import PlenopticCamera
from plenocal.model.geometry import Pose, rodrigues
from plenocal.model.lattice import lens_keys
from plenocal.model.observations import BapFeatures
from plenocal.model.profile import mla_to_object_mm
from plenocal.model.projection import micro_lens_centres, project_bap, pupil_shift_px, virtual_points
from plenocal.model.target import Checkerboard

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

MAX_BOARD_DISTANCE_FRACTION = 0.25
"""A fitted corner is linked to its node only if its chief ray, taken back through the main lens
(:func:`board_points`), meets the board plane of the pose within this fraction of a square of
that node (the same quarter step that places a barycentre on a lattice site in linking,
:data:`plenocal.calib.linking.MAX_SITE_DISTANCE_FRACTION`: nearer one node than any other by a
margin for noise). It is tested on the board and not in pixels because near the MLA's
conjugate plane the micro-images magnify the virtual image by 1/|υ|: a pose 0.3 mm off in depth
moves a prediction by 5–10 px there (small r12-a at 0.95 z_c) while its ray still lands within a
few hundredths of a square of the node; a fit on the neighbouring node's corner lands a whole
square away."""

RESOLVABLE_BLUR_FRACTION = 0.6
"""A node is predicted in a micro-image only where its blur radius |ρ| (the camera's,
eq:blurradius) is at most this fraction of the acceptance disc's radius: the bound on |ρ|/disc
beyond which a node's BAP feature is no longer as good as a detected one
(``benchmarks/blur_fit.py``, small r12-a at 0.94–0.975 z_c, true camera and pose, fits started
1 px off: the features' chief-ray error, median, is 0.15 / 0.18 / 0.22 px for |ρ|/disc below
0.3 / 0.3–0.45 / 0.45–0.6, then 0.35 px at 0.6–0.75 and 0.57 px at 0.75–0.9, their |ρ| error
0.07–0.19 px then 0.26–0.36 px; a single fit still lands 0.43–0.59 px from the corner at 0.9–2,
three in four or fewer accepted). Lifted to 2 on the R12-A link set, it adds 28 features and no
linked frame, 11 of the 28 in micro-images the oracle does not list for their node."""

SINGLE_VIEW_MAX_RMS_PX = 1.0
"""Largest σ̂ (px) of a frame's single views about where they appear for the pose that best
explains them and its linked features (:func:`pose_from_views`) for them to become features:
beyond it the camera does not explain the frame near the MLA's conjugate plane well enough to take
the pupil-vignetting shift, which ρ sets, off them. Small r12-a at 0.95 z_c: 0.23 px with the true
camera, 1.7 px with F 0.5 % off, 2.6 px at 1 %; the pre-calibration cameras of the full-scale
renders: 1.4–2.8 px (the thin-lens R12-A board at 0.97 z_c among them, whose single views' chief
rays such a camera put 3.8 px off, median); their calibrated cameras: 0.15–0.27 px."""
FD_RELATIVE_STEP = float(np.sqrt(np.finfo(np.float64).eps))
"""Forward-difference step of :func:`pose_from_views`'s Jacobian, relative to max(|x_j|, 1) of
the pose update (rad, mm): √ε, scipy's ``approx_derivative`` default for two points, which halves
the digits of the residuals (≈ 1e-8 of a pixel-sized residual) and no more."""
LINE_STEP_FRACTION = 0.25
"""The board's line directions at a node are taken between the node and points this fraction
of a square away along the board's axes, projected through the same micro-lens."""


@dataclass(frozen=True)
class PredictedViews:
    """Micro-images in which the camera model puts board nodes' corners (arrays of shape (n,))."""

    node: IntArray
    index: IntArray
    """Micro-image (into :attr:`MicroImages.centres`)."""
    appear: FloatArray
    """(n, 2) where the corner appears (chief-ray position shifted by the pupil vignetting), px."""
    angles: FloatArray
    """(n, 2) line-normal angles of the board's two lines through the node, radians."""
    chief: FloatArray
    """(n, 2) chief-ray positions (the model's (u, v)), px."""
    depth_mm: FloatArray
    """(n,) z of the node's virtual point (camera frame, mm)."""
    too_blurred: FloatArray = field(default_factory=lambda: np.zeros((0, 2)))
    """(b, 2) the views left out for their blur (:data:`RESOLVABLE_BLUR_FRACTION`; the corner, or its
    chief ray, inside the disc on lit pixels): |ρ| and the largest |ρ| resolved in that micro-image,
    px (what a refusal says)."""

    def select(self, mask: NDArray) -> PredictedViews:
        """The views where ``mask`` (n,) is true (or at the indices it lists)."""
        return PredictedViews(self.node[mask], self.index[mask], self.appear[mask], self.angles[mask], self.chief[mask],
                              self.depth_mm[mask], self.too_blurred)


@dataclass(frozen=True)
class NodeDetection:
    """What :func:`detect_board_nodes` found in one frame."""

    features: BapFeatures
    """BAP features of the added nodes, ``node`` set, ``cluster`` −1."""
    fitted_node: IntArray
    """(m,) node of every accepted fit (also the nodes seen once, which give a feature only as single views)."""
    fitted_index: IntArray
    """(m,) its micro-image."""
    fitted_uv: FloatArray
    """(m, 2) where the corner was fitted (as it appears), px."""
    board_offset: FloatArray
    """(m,) distance of each accepted fit's ray from its node on the board, in squares
    (:data:`MAX_BOARD_DISTANCE_FRACTION`)."""
    counts: dict[str, int] = field(default_factory=dict)


def predict_node_views(
    camera: PlenopticCamera, cam_from_world: Pose, board: Checkerboard, *, micro: MicroImages,
    nodes: IntArray | None = None,
) -> PredictedViews:
    """The micro-images in which board nodes' corners appear, per the camera model.

    Candidate micro-lenses are those near the cone from each node's virtual point through the
    main aperture (as the simulator's :class:`~plenocal.sim.groundtruth.FeatureOracle`); each
    pair is projected (:func:`~plenocal.model.projection.project_bap`, eq:completemodel) and kept
    where the corner appears inside the micro-image's acceptance disc (usable radius −
    :data:`~plenocal.detect.pipeline.BORDER_MARGIN_PX`) on lit pixels, sharp enough to fit
    (:data:`RESOLVABLE_BLUR_FRACTION`).

    Parameters
    ----------
    camera : the camera (pre-calibration's initial one, or calibrated).
    cam_from_world : the board's pose.
    board : the checkerboard.
    micro : the frame's micro-images (:func:`plenocal.detect.pipeline.frame_micro_images`);
        needs ``k`` and ``l``.
    nodes : (N,) nodes to predict (default all).
    """
    if micro.k is None or micro.l is None:
        raise ValueError("micro-images without micro-lens indices (k, l)")
    nodes = np.arange(board.n_nodes) if nodes is None else np.asarray(nodes, dtype=np.int64)
    z2 = np.zeros((0, 2))
    empty = PredictedViews(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), z2, z2, z2, np.zeros(0))
    if not len(nodes) or not len(micro.on_idx):
        return empty
    world = board.node_points(nodes)
    pts = cam_from_world.apply(world)
    F = camera.main_lens.focal_length_mm
    if np.any(pts[:, 2] <= F):
        keep = pts[:, 2] > F
        nodes, world, pts = nodes[keep], world[keep], pts[keep]
    on = micro.on_idx
    C = micro_lens_centres(camera, micro.k[on], micro.l[on])
    pu = virtual_points(camera, pts)
    zc = float(np.mean(C[:, 2]))
    scale = (zc - pu[:, 2]) / (0.0 - pu[:, 2])
    axis = pu[:, :2] * (1.0 - scale[:, None])
    cone = F / (2.0 * camera.main_lens.f_number) * np.abs(scale)
    pitch = 0.5 * sum(camera.mla.pitch_mm)
    reach = cone + 2.0 * pitch
    # Only the lenses inside the box about every node's reach can be in one: the tree holds those
    # (the board covers part of the MLA; a tree of all its 26 000 lenses was most of a call). Their
    # order is the lenses', so the lists are the same as from a tree of all of them.
    finite = np.all(np.isfinite(axis), axis=1) & np.isfinite(reach)
    if not np.any(finite):
        return empty
    lo = np.min(axis[finite] - reach[finite, None], axis=0)
    hi = np.max(axis[finite] + reach[finite, None], axis=0)
    box = np.flatnonzero(np.all((C[:, :2] >= lo) & (C[:, :2] <= hi), axis=1))
    if not len(box):
        return empty
    lists = cKDTree(C[box, :2]).query_ball_point(axis, reach)
    n = np.fromiter((len(x) for x in lists), dtype=np.int64, count=len(lists))
    if not n.sum():
        return empty
    p = np.repeat(np.arange(len(nodes)), n)
    idx = on[box[np.concatenate([np.asarray(x, dtype=np.int64) for x in lists if len(x)])]]
    k, l = micro.k[idx], micro.l[idx]
    chief, appear, rho = _views_of(camera, pts[p], idx, micro)
    centres, usable = micro.centres[idx], micro.usable[idx]
    disc = usable - BORDER_MARGIN_PX
    resolved = RESOLVABLE_BLUR_FRACTION * disc
    sharp = np.abs(rho) <= resolved if micro.typed else np.ones(len(rho), dtype=bool)
    H, W = micro.weight.shape

    def lit_in_disc(xy: FloatArray) -> NDArray[np.bool_]:
        """Positions (n, 2) inside their micro-image's acceptance disc, on a lit pixel."""
        iu = np.clip(np.rint(np.nan_to_num(xy[:, 0])).astype(np.int64), 0, W - 1)
        iv = np.clip(np.rint(np.nan_to_num(xy[:, 1])).astype(np.int64), 0, H - 1)
        return (np.hypot(*(xy - centres).T) <= disc) & (micro.weight[iv, iu] > 0.0)

    seen = lit_in_disc(appear) & np.all(np.isfinite(appear), axis=1)
    keep = seen & sharp
    # too blurred: the corner or its chief ray in the disc (where the corner appears is no guide
    # there: the pupil-vignetting shift grows with ρ, by hundreds of px on the conjugate plane)
    too_blurred = np.column_stack([np.abs(rho), resolved])[(seen | lit_in_disc(chief)) & ~sharp & np.isfinite(rho)]
    p, idx, k, l, chief, appear = p[keep], idx[keep], k[keep], l[keep], chief[keep], appear[keep]
    # The board's two lines through the node, as the same micro-lens images them.
    step = LINE_STEP_FRACTION * board.square_mm
    angles = np.empty((len(p), 2))
    for j, axis_w in enumerate((np.array([step, 0.0, 0.0]), np.array([0.0, step, 0.0]))):
        along = project_bap(camera, cam_from_world.apply(world[p] + axis_w), k, l)[:, :2] - chief
        angles[:, j] = np.arctan2(along[:, 1], along[:, 0]) + np.pi / 2.0
    return PredictedViews(nodes[p], idx, appear, angles, chief, pu[p, 2], too_blurred)


def _views_of(camera: PlenopticCamera, points_cam: FloatArray, idx: IntArray, micro: MicroImages
              ) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Chief-ray positions (n, 2), where the corners appear (n, 2: shifted by the pupil vignetting
    as the frame's micro-images model it) and ρ (n,) of camera-frame points through the
    micro-images ``idx`` (eq:completemodel)."""
    assert micro.k is not None and micro.l is not None
    f = project_bap(camera, points_cam, micro.k[idx], micro.l[idx])
    chief, rho = f[:, :2], f[:, 2]
    appear = chief
    if micro.vignetted:
        pc, pra = micro.first_order_pupil(idx)
        appear = pupil_shift_px(chief, np.nan_to_num(rho) + micro.blur_offset[idx], pc, pra, micro.radius_lens_px[idx])
    return chief, appear, rho


def pose_from_views(
    camera: PlenopticCamera, cam_from_world: Pose, board: Checkerboard, micro: MicroImages, *,
    node: IntArray, idx: IntArray, appear: FloatArray, known: BapFeatures | None = None,
) -> tuple[Pose, FloatArray, float]:
    """The board pose that best explains corners where they appear (single views: their shift by
    the pupil vignetting depends on ρ, hence on the pose's depth) and, with ``known``, the chief-ray
    positions of features already linked (``node`` ≥ 0), ``camera`` fixed; Levenberg–Marquardt
    from ``cam_from_world`` (:func:`scipy.optimize.least_squares`, deterministic).

    Near the MLA's conjugate plane the pose a lattice of barycentres gives is rough in depth, and
    ρ there changes by pixels per millimetre: its shifts leave single views' chief rays 0.9 px off
    (small r12-a at 0.95 z_c); the pose that explains the corners where they appear puts them
    within 0.3 px. Returns the pose, the appearing corners' residuals (n,), px, and the larger of
    two σ̂ (px per coordinate, the pose's 6 degrees of freedom taken off): of the whole fit (a few
    views fit any pose by themselves), and of the appearing corners alone, the degrees of freedom
    taken off in proportion to their share (many linked features must not hide them)."""
    from scipy.optimize import least_squares

    world = board.node_points(node)
    kn = known.select(known.node >= 0) if known is not None else BapFeatures.empty()
    kn_world, kn_uv = board.node_points(kn.node), kn.uv
    R0, t0 = cam_from_world.rotation, cam_from_world.translation

    def pose_of(x: FloatArray) -> Pose:
        return Pose(rodrigues(x[:3]) @ R0, t0 + x[3:])

    def residuals_of(X: FloatArray) -> FloatArray:
        """The residuals of every pose update in ``X`` (m, 6) at once, (m, n_res): one projection
        of the m poses' points, not m."""
        R = rodrigues(X[:, :3]) @ R0
        t = t0 + X[:, 3:]
        m = len(X)
        with np.errstate(all="ignore"):  # a pose the model cannot project gives non-finite residuals, handled below
            pts = np.einsum("mij,nj->mni", R, world) + t[:, None, :]
            _, app, _ = _views_of(camera, pts.reshape(-1, 3), np.tile(idx, m), micro)
            parts = [(app.reshape(m, -1, 2) - appear).reshape(m, -1)]
            if len(kn):
                kpts = np.einsum("mij,nj->mni", R, kn_world) + t[:, None, :]
                uv = project_bap(camera, kpts.reshape(-1, 3), np.tile(kn.k, m), np.tile(kn.l, m))[:, :2]
                parts.append((uv.reshape(m, -1, 2) - kn_uv).reshape(m, -1))
        return np.concatenate(parts, axis=1)

    def residuals(x: FloatArray) -> FloatArray:
        return residuals_of(x[None, :])[0]

    def jacobian(x: FloatArray) -> FloatArray:
        """Forward differences (:data:`FD_RELATIVE_STEP`), the 7 poses in one projection: a
        seventh of the projections, and the same Jacobian whatever scipy's own differences do."""
        h = FD_RELATIVE_STEP * np.maximum(np.abs(x), 1.0)
        step = (x + h) - x
        r = residuals_of(np.vstack([x, x + np.diag(step)]))
        return ((r[1:] - r[0]) / step[:, None]).T

    x0 = np.zeros(6)
    n_res = 2 * (len(node) + len(kn))
    r0 = residuals(x0)
    unposed = (cam_from_world, np.hypot(*(r0[: 2 * len(node)].reshape(-1, 2)).T), float("inf"))  # no pose to judge by
    if n_res <= 6 or not np.all(np.isfinite(r0)):
        return unposed
    try:
        sol = least_squares(residuals, x0, jac=jacobian, method="lm", x_scale=np.array([1e-3, 1e-3, 1e-3, 0.1, 0.1, 0.1]))
    except ValueError:  # a trial pose the model cannot project (non-finite residuals)
        return unposed
    r_all = residuals(sol.x)
    if not np.all(np.isfinite(r_all)):
        return unposed
    r = r_all[: 2 * len(node)]
    sigma_views = float(np.sqrt(np.sum(r**2) / (r.size * (1.0 - 6.0 / n_res))))
    sigma_all = float(np.sqrt(np.sum(r_all**2) / (n_res - 6)))
    return pose_of(sol.x), np.hypot(*r.reshape(-1, 2).T), max(sigma_views, sigma_all)


def board_points(
    camera: PlenopticCamera, cam_from_world: Pose, chief_uv: FloatArray, k: IntArray, l: IntArray, depth_mm: FloatArray,
) -> FloatArray:
    """Where chief rays meet the board plane, in board coordinates (x, y) mm, shape (n, 2).

    The chief ray of a feature runs from its sensor point through the micro-lens centre C(k, l)
    to the virtual point (eq:completemodel); its stretch about the virtual depth ``depth_mm``
    (z in the camera frame) is taken back through the inverse distortion and the inverse thin
    lens (p = F/(z′ + F)·p′, eq:thinlens) to a line in object space, which meets the board
    plane of ``cam_from_world``.

    Parameters
    ----------
    chief_uv : (n, 2) chief-ray positions, px; k, l : (n,) micro-lenses; depth_mm : (n,) the
        virtual points' z (e.g. the prediction's), mm.
    """
    s_mm = camera.sensor.pixel_size_mm
    u0, v0 = camera.sensor.principal_point_px
    uv = np.asarray(chief_uv, dtype=np.float64).reshape(-1, 2)
    S = np.stack([(u0 - uv[:, 0]) * s_mm, (v0 - uv[:, 1]) * s_mm, np.full(len(uv), -camera.sensor.distance_mm)], axis=-1)
    C = micro_lens_centres(camera, k, l)
    ray = C - S
    F = camera.main_lens.focal_length_mm
    ends = []
    for dz in (0.0, 0.5 * camera.d_mm):  # two points of the ray near the virtual point
        t = (np.asarray(depth_mm, dtype=np.float64) + dz - S[:, 2]) / ray[:, 2]
        p = S + t[:, None] * ray
        x, y = camera.distortion.invert(p[:, 0], p[:, 1])
        z = p[:, 2] - camera.distortion.depth(x, y) if camera.distortion.has_depth else p[:, 2]
        factor = F / (z + F)
        ends.append(np.stack([x * factor, y * factor, z * factor], axis=-1))
    R, t0 = cam_from_world.rotation, cam_from_world.translation
    a, b = (ends[0] - t0) @ R, (ends[1] - t0) @ R  # board frame: world = Rᵀ(cam − t)
    lam = a[:, 2] / np.where(a[:, 2] != b[:, 2], a[:, 2] - b[:, 2], np.nan)
    return a[:, :2] + lam[:, None] * (b[:, :2] - a[:, :2])


def micro_image_index(k: NDArray, l: NDArray, k_query: NDArray, l_query: NDArray) -> NDArray[np.int64]:
    """(Q,) the position of each queried lens (``k_query``, ``l_query``) among the lenses (``k``,
    ``l``), −1 where it is not one of them (vectorised: a sorted search of the pairs as one key)."""
    keys, query = lens_keys(k, l), lens_keys(k_query, l_query)
    if not len(keys):
        return np.full(len(query), -1, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    pos = np.clip(np.searchsorted(keys[order], query), 0, len(keys) - 1)
    return np.where(keys[order][pos] == query, order[pos], -1).astype(np.int64)


def views_to_fit(views: PredictedViews, micro: MicroImages, known: BapFeatures) -> PredictedViews:
    """The predicted views :func:`detect_board_nodes` fits: not in a micro-image of a ``known``
    feature (``node`` ≥ 0), nor in one predicted for two nodes (which corner it shows is not known).
    Their micro-images (``.index``) are the only ones whose pixels the fits read."""
    known = known.select(known.node >= 0)
    taken = micro_image_index(micro.k, micro.l, known.k, known.l)
    fresh = ~np.isin(views.index, taken)
    idx_sorted, counts_idx = np.unique(views.index, return_counts=True)
    fresh &= ~np.isin(views.index, idx_sorted[counts_idx > 1])
    return views.select(fresh)


def detect_board_nodes(
    dv: FloatArray, micro: MicroImages, *, camera: PlenopticCamera, cam_from_world: Pose, board: Checkerboard,
    known: BapFeatures, rms_bound: float, pitch_px: float, frame: int = 0, fit_rendered: bool = True,
    max_board_distance_fraction: float = MAX_BOARD_DISTANCE_FRACTION, views: PredictedViews | None = None,
    single_views: bool = False,
) -> NodeDetection:
    """Corners of the board nodes the frame's features miss, fitted where the camera predicts them.

    Parameters
    ----------
    dv : (H, W) the devignetted image; micro : its micro-images
        (:func:`plenocal.detect.pipeline.frame_micro_images`). Only the pixels of the micro-images
        of :func:`views_to_fit` are read (:func:`plenocal.detect.pipeline.devignette_micro_images`
        makes no others).
    camera, cam_from_world, board : the camera, the board's pose in this frame, the board.
    known : the frame's features linked so far (``node`` ≥ 0): their nodes are not fitted again,
        their micro-images not reused.
    rms_bound : the frame's residual-outlier bound (:attr:`plenocal.detect.pipeline.FrameDetection.rms_bound`).
    pitch_px : micro-image pitch; fit_rendered : as :func:`plenocal.detect.pipeline.detect_frame`'s.
    views : :func:`predict_node_views` of the nodes ``known`` lacks, when the caller has it
        already (None: predicted here).
    single_views : a node fitted in one micro-image gives a single-view feature (ρ NaN, (u, v)
        its chief-ray position; :func:`_single_views`) when the camera explains it; default: none.

    Returns
    -------
    NodeDetection
        Counts: ``nodes_predicted`` (nodes without a feature predicted in ≥ 1 micro-image),
        ``views_predicted``, ``rejected_fit`` (not converged, outside the disc, not corner-like,
        residual outlier), ``rejected_far_from_prediction`` (its ray is not near its node on the
        board, :data:`MAX_BOARD_DISTANCE_FRACTION`), ``views_fitted``, ``nodes_fitted``,
        ``nodes_seen_once`` (no υ: a feature only with ``single_views``), ``single_views`` (features
        added for them), ``nodes_added``, ``features_added``.
    """
    known = known.select(known.node >= 0)
    if views is None:
        todo = np.setdiff1d(np.arange(board.n_nodes), known.node)
        views = predict_node_views(camera, cam_from_world, board, micro=micro, nodes=todo)
    counts = {"nodes_predicted": len(np.unique(views.node))}
    fresh = views_to_fit(views, micro, known)
    node, idx, appear, angles = fresh.node, fresh.index, fresh.appear, fresh.angles
    counts["views_predicted"] = len(node)
    corner, fit = locate_corners(dv, micro.weight, micro.centres[idx], micro.usable[idx], appear, angles)
    good = fit.converged & corner_shape_ok(fit) & (fit.rms <= rms_bound)
    good &= np.hypot(*(corner - micro.centres[idx]).T) <= micro.usable[idx] - BORDER_MARGIN_PX
    # Where the fitted corner's chief ray meets the board, against its node (chief-ray position
    # from the prediction's blur: the pupil-vignetting shift moves it by a pixel or two at most).
    chief = corner - (appear - fresh.chief)
    on_board = board_points(camera, cam_from_world, chief, micro.k[idx], micro.l[idx], fresh.depth_mm)
    offset = np.hypot(*(on_board - board.node_points(node)[:, :2]).T) / board.square_mm
    near = offset <= max_board_distance_fraction
    ok = good & near
    counts["rejected_fit"] = int((~good).sum())
    counts["rejected_far_from_prediction"] = int((good & ~near).sum())
    node, idx, corner, fit, chief = node[ok], idx[ok], corner[ok], fit.select(ok), chief[ok]
    per_node = np.bincount(node, minlength=board.n_nodes) if len(node) else np.zeros(board.n_nodes, dtype=np.int64)
    counts.update({"views_fitted": len(node), "nodes_fitted": int((per_node > 0).sum()),
                   "nodes_seen_once": int((per_node == 1).sum())})
    feats = _node_features(dv, micro, idx, corner, fit, node, per_node, pitch_px=pitch_px, fit_rendered=fit_rendered, frame=frame)
    singles = BapFeatures.empty()
    if single_views:
        singles, single_counts = _single_views(camera, cam_from_world, board, micro, idx, corner, node, per_node,
                                               known=BapFeatures.concatenate([known, feats]), frame=frame)
        counts.update(single_counts)
    counts["single_views"] = len(singles)
    feats = BapFeatures.concatenate([feats, singles])
    counts.update({"nodes_added": len(np.unique(feats.node)), "features_added": len(feats)})
    return NodeDetection(feats, node, idx, corner, offset[ok], counts)


def _single_views(
    camera: PlenopticCamera, cam_from_world: Pose, board: Checkerboard, micro: MicroImages, idx: IntArray,
    corner: FloatArray, node: IntArray, per_node: IntArray, *, known: BapFeatures, frame: int,
) -> tuple[BapFeatures, dict[str, float | int | None]]:
    """Single-view features of the nodes fitted in exactly one micro-image: (u, v) the fitted
    corner's chief-ray position, ρ NaN (no υ). The corner less the pupil-vignetting shift of the
    pose that explains where the corners appear (:func:`pose_from_views`, with the frame's
    linked features); none when that fit's residual σ̂ exceeds :data:`SINGLE_VIEW_MAX_RMS_PX`: the
    camera does not explain the frame there."""
    once = per_node[node] == 1
    if not once.any():
        return BapFeatures.empty(), {}
    node, idx, corner = node[once], idx[once], corner[once]
    pose, _res, sigma = pose_from_views(camera, cam_from_world, board, micro, node=node, idx=idx, appear=corner, known=known)
    if not sigma <= SINGLE_VIEW_MAX_RMS_PX:  # σ̂ None in the record: no pose explains them (too few, or unprojectable)
        return BapFeatures.empty(), {"single_views_sigma_px": sigma if np.isfinite(sigma) else None,
                                     "single_views_refused": int(once.sum())}
    chief, appear, _ = _views_of(camera, pose.apply(board.node_points(node)), idx, micro)
    uv = corner - (appear - chief)
    n = len(node)
    assert micro.k is not None and micro.l is not None
    return BapFeatures(frame=np.full(n, frame), k=micro.k[idx], l=micro.l[idx], u=uv[:, 0], v=uv[:, 1],
                       rho=np.full(n, np.nan), node=node, cluster=np.full(n, -1)), {"single_views_sigma_px": sigma}


def _node_features(dv, micro, idx, corner, fit: CornerFit, node, per_node, *, pitch_px, fit_rendered, frame) -> BapFeatures:
    """BAP features of the nodes fitted in two or more micro-images: each node is one cluster for
    υ, ρ and the chief-ray positions (:func:`plenocal.detect.pipeline.estimate_clusters`, exact rounds)."""
    multi = per_node[node] >= 2
    if not np.any(multi):
        return BapFeatures.empty()
    idx, corner, fit, node = idx[multi], corner[multi], fit.select(multi), node[multi]
    ids, labels0 = np.unique(node, return_inverse=True)
    labels, v_obs, _v, rho, chief, _counts = estimate_clusters(dv, micro, idx, corner, fit, labels0.astype(np.int64),
                                                      pitch_px=pitch_px, fit_rendered=fit_rendered, exact=True)
    keep = (labels >= 0) & np.isfinite(v_obs) & (np.isfinite(rho) | (not micro.typed))
    n = int(keep.sum())
    assert micro.k is not None and micro.l is not None
    return BapFeatures(
        frame=np.full(n, frame), k=micro.k[idx][keep], l=micro.l[idx][keep], u=chief[keep, 0], v=chief[keep, 1],
        rho=rho[keep], node=ids[labels[keep]], cluster=np.full(n, -1),
    )


UNRESOLVABLE_SEARCH_SPAN = (0.25, 4.0)
"""On-axis object distances :func:`unresolvable_distances_mm` searches, as fractions of the
distance of the plane conjugate to the MLA."""
UNRESOLVABLE_SEARCH_SAMPLES = 4000
"""Geometrically spaced samples of that span (0.07 % of the distance apart)."""


def unresolvable_distances_mm(camera: PlenopticCamera, *, resolved_px: float) -> tuple[float, float | None] | None:
    """The on-axis object distances (mm, camera frame) around the plane conjugate to the MLA where
    no lens type images a point sharply enough for a corner fit: every type's blur radius |ρ|
    (eq:blurradius, through the lens of that type nearest the principal point) exceeds
    ``resolved_px`` (:data:`RESOLVABLE_BLUR_FRACTION` of the acceptance disc). Returns (nearest,
    farthest) of the contiguous stretch that holds the conjugate plane, farthest None when it
    reaches beyond :data:`UNRESOLVABLE_SEARCH_SPAN`; None for a camera whose MLA is conjugate to no
    real object (z_c ≤ F) or without lens types (ρ undefined). The R12-A link set's calibrated
    camera at f/4 (5.2 px): 386–771 mm, z_c 404 mm — its boards at 1.3–1.37 z_c show no corner
    either (docs/model.md, the double-Gauss case)."""
    zc = float(mla_to_object_mm(camera, 0.0))
    F = camera.main_lens.focal_length_mm
    if not camera.n_types or not np.isfinite(zc) or zc <= F:
        return None
    k, l = central_lenses(camera)
    lo, hi = UNRESOLVABLE_SEARCH_SPAN
    z = zc * np.geomspace(lo, hi, UNRESOLVABLE_SEARCH_SAMPLES)
    z = z[z > F * 1.01]
    points = np.column_stack([np.zeros_like(z), np.zeros_like(z), z])
    rho = np.stack([project_bap(camera, points, np.full(len(z), kt), np.full(len(z), lt))[:, 2] for kt, lt in zip(k, l, strict=True)])
    blurred = np.all(~(np.abs(rho) <= resolved_px), axis=0)  # NaN counts as blurred
    at = int(np.searchsorted(z, zc)) - 1  # the last sample before the conjugate plane
    if not (0 <= at < len(z) - 1) or not blurred[at]:
        return None
    clear = np.flatnonzero(~blurred)
    before, after = clear[clear < at], clear[clear > at]
    first = int(before[-1]) + 1 if before.size else 0
    return float(z[first]), (float(z[int(after[0]) - 1]) if after.size else None)


def central_lenses(camera: PlenopticCamera) -> tuple[IntArray, IntArray]:
    """(k, l) of the micro-lens of each type nearest the principal point (types with no lens left
    out), in the types' order."""
    k, l = camera.mla.lattice.all_indices()
    types = camera.mla.types.type_of(k, l)
    gap = np.hypot(*(camera.grid.centres(k, l) - np.asarray(camera.principal_point_px, dtype=np.float64)).T)
    pick = np.array([np.flatnonzero(types == t)[np.argmin(gap[types == t])] for t in range(camera.n_types) if np.any(types == t)],
                    dtype=np.int64)
    return k[pick], l[pick]


__all__ = [
    "MAX_BOARD_DISTANCE_FRACTION",
    "RESOLVABLE_BLUR_FRACTION",
    "SINGLE_VIEW_MAX_RMS_PX",
    "NodeDetection",
    "PredictedViews",
    "board_points",
    "central_lenses",
    "complete_frame",
    "detect_board_nodes",
    "pose_from_views",
    "predict_node_views",
    "unresolvable_distances_mm",
    "views_to_fit",
]


def complete_frame(
    image: NDArray, white: NDArray, *, grid, omega, layout, camera: PlenopticCamera, cam_from_world: Pose,
    board: Checkerboard, known: BapFeatures, rms_bound: float, frame: int = 0, pupil_vignetting: bool = True,
    fit_rendered: bool = True, pupil=None,
) -> NodeDetection:
    """:func:`detect_board_nodes` on a raw image: devignetted and its micro-images set up as
    :func:`plenocal.detect.pipeline.detect_frame` does (same arguments)."""
    from plenocal.detect.pipeline import frame_micro_images

    dv, micro = frame_micro_images(image, white, grid=grid, omega=omega, layout=layout, pupil_vignetting=pupil_vignetting,
                                   pupil=pupil)
    return detect_board_nodes(dv, micro, camera=camera, cam_from_world=cam_from_world, board=board, known=known,
                              rms_bound=rms_bound, pitch_px=grid.diameter_px, frame=frame, fit_rendered=fit_rendered)

