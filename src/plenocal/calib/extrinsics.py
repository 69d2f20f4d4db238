"""Initial frame poses from cluster barycentres (paper §5.1; reference §7.1, with a real PnP).

The barycentre of a node's BAP features is, for a symmetric set of micro-lenses, exactly on the
line from the main-lens centre O through the node's virtual point; it is therefore the central
projection of the node through O onto the sensor plane z = −(D + d): a pinhole camera with focal
length (D + d)/s pixels and principal point (u0, v0), independent of F (reference §7.1).

Per frame:

1. barycentres of the clusters (by node id when the features are linked, else by detector cluster);
2. linking, when node ids are unknown: the four extreme barycentres (the largest quadrilateral in
   their convex hull; the reference's farthest-point search fails on tilted boards) give a
   coarse pose for each labelling of the board's corners compatible with
   its size; all nodes are projected and every node claims its nearest barycentre within
   0.6 × the projected inter-node spacing; the labelling that links the most clusters with the
   lowest RMSE wins (ties: the rotation closest to the identity, i.e. an upright board);
3. PnP (OpenCV SQPnP, then Levenberg–Marquardt refinement) over all linked barycentres;
4. a check: finite pose, board in front of the camera, reprojection RMSE below
   ``max_rmse_fraction`` × the inter-node spacing. Frames that fail are reported and skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import cv2
import numpy as np
from numpy.typing import NDArray

from plenocal.model.camera import PlenopticCamera
from plenocal.model.geometry import Pose, rodrigues, rotvec_from_matrix
from plenocal.model.observations import BapFeatures
from plenocal.model.target import Checkerboard

FloatArray = NDArray[np.float64]

LINK_RADIUS_FRACTION = 0.6
"""A node claims its nearest barycentre within this fraction of the inter-node spacing (ref §7.1)."""


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
                {"frame": f.frame, "ok": f.ok, "reason": f.reason, "rmse_px": f.rmse_px,
                 "n_points": f.n_points, "n_clusters": f.n_clusters}
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
    """cam_from_world from ≥ 4 world–pixel correspondences (SQPnP, then LM refinement)."""
    if len(points_world) < 4:
        return None
    K = pinhole_matrix(camera)
    obj = np.ascontiguousarray(points_world, dtype=np.float64).reshape(-1, 1, 3)
    img = np.ascontiguousarray(image_points, dtype=np.float64).reshape(-1, 1, 2)
    ok, rvec, tvec = cv2.solvePnP(obj, img, K, None, flags=cv2.SOLVEPNP_SQPNP)
    if not ok:
        return None
    rvec, tvec = cv2.solvePnPRefineLM(obj, img, K, None, rvec, tvec)
    pose = Pose.from_rotvec(rvec.reshape(3), tvec.reshape(3))
    if not (np.all(np.isfinite(pose.rotation)) and np.all(np.isfinite(pose.translation))):
        return None
    return pose


def _extreme_corners(bary: FloatArray) -> tuple[int, int, int, int]:
    """Indices of the four board-corner barycentres, in cyclic order.

    The reference's farthest-point search fails on strongly tilted boards (it can return the
    corners out of cyclic order); here the corners are the vertices of the largest-area
    quadrilateral inscribed in the convex hull of the barycentres, sorted by angle around
    their centroid.
    """
    hull = cv2.convexHull(np.ascontiguousarray(bary, dtype=np.float32), returnPoints=False).reshape(-1)
    if hull.size < 4:
        raise ValueError("fewer than 4 hull vertices")
    if hull.size > 40:  # keep the brute force small: the 40 hull vertices farthest from the centroid
        c = bary[hull].mean(axis=0)
        hull = hull[np.argsort(-np.hypot(*(bary[hull] - c).T))[:40]]
        hull = hull[np.argsort(np.arctan2(*(bary[hull] - c).T[::-1]))]
    n = hull.size
    idx = np.array(np.meshgrid(*[np.arange(n)] * 4, indexing="ij")).reshape(4, -1)
    idx = idx[:, (idx[0] < idx[1]) & (idx[1] < idx[2]) & (idx[2] < idx[3])]
    P = bary[hull][idx]  # (4, n_combos, 2), hull order is cyclic
    x, y = P[..., 0], P[..., 1]
    area = 0.5 * np.abs(np.sum(x * np.roll(y, -1, axis=0) - np.roll(x, -1, axis=0) * y, axis=0))
    best = hull[idx[:, int(np.argmax(area))]]
    return tuple(int(i) for i in best)  # type: ignore[return-value]


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


def _coarse_candidates(board: Checkerboard) -> list[tuple[int, int, int, int]]:
    """Node ids for the (TL, TR, BR, BL) barycentres: the 8 cyclic labellings of the board corners.

    The farthest-point search finds the four extreme barycentres in cyclic order but not which
    board corner each one is (a tilted board breaks the reference's upright assumption), so every
    rotation and direction of the cycle is tried; wrong ones leave clusters unlinked or a large
    reprojection error.
    """
    C, R = board.columns, board.rows
    cycle = [0, C - 1, C * R - 1, (R - 1) * C]
    cands = []
    for direction in (1, -1):
        for start in range(4):
            cands.append(tuple(cycle[(start + direction * i) % 4] for i in range(4)))
    return cands  # type: ignore[return-value]


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
) -> tuple[FramePoseInit, dict[int, int]]:
    """Initialise one frame's pose from its features.

    Parameters
    ----------
    ids : ndarray of int, shape (N,)
        Node ids (``linked=True``) or detector cluster ids of the frame's features.

    Returns
    -------
    result : FramePoseInit
    node_of_id : dict
        id → node (identity when already linked).
    """
    uid, bary = cluster_barycentres(np.asarray(ids), u, v)
    n_cl = int(uid.size)
    if n_cl < 4:
        return FramePoseInit(frame, False, f"only {n_cl} clusters (need >= 4)", n_clusters=n_cl), {}
    if linked:
        valid = (uid >= 0) & (uid < board.n_nodes)
        nodes = uid[valid]
        pose = solve_pnp(camera, board.node_points(nodes), bary[valid])
        mapping = {int(i): int(i) for i in nodes}
        pts_w, pts_i = board.node_points(nodes), bary[valid]
    else:
        best = None
        try:
            corners = _extreme_corners(bary)
        except ValueError:
            return FramePoseInit(frame, False, "degenerate cluster layout", n_clusters=n_cl), {}
        for cand in _coarse_candidates(board):
            p0 = solve_pnp(camera, board.node_points(np.array(cand)), bary[list(corners)])
            if p0 is None or p0.translation[2] <= 0:
                continue
            node_of, _ = link_nodes(camera, board, p0, bary)
            ok = node_of >= 0
            p1 = solve_pnp(camera, board.node_points(node_of[ok]), bary[ok])
            if p1 is None or p1.translation[2] <= 0:
                continue
            node_of, _ = link_nodes(camera, board, p1, bary)
            ok = node_of >= 0
            p2 = solve_pnp(camera, board.node_points(node_of[ok]), bary[ok])
            if p2 is None:
                continue
            err = project_pinhole(camera, p2, board.node_points(node_of[ok])) - bary[ok]
            rmse = float(np.sqrt(np.mean(np.sum(err**2, axis=1))))
            angle = float(np.linalg.norm(rotvec_from_matrix(p2.rotation)))
            score = (-int(ok.sum()), round(rmse, 1), angle)
            if best is None or score < best[0]:
                best = (score, p2, node_of)
        if best is None:
            return FramePoseInit(frame, False, "no consistent board labelling", n_clusters=n_cl), {}
        _, pose, node_of = best
        ok = node_of >= 0
        mapping = {int(uid[i]): int(node_of[i]) for i in np.flatnonzero(ok)}
        pts_w, pts_i = board.node_points(node_of[ok]), bary[ok]
    if pose is None:
        return FramePoseInit(frame, False, "PnP failed", n_clusters=n_cl), {}
    err = project_pinhole(camera, pose, pts_w) - pts_i
    rmse = float(np.sqrt(np.mean(np.sum(err**2, axis=1))))
    _, spacing = link_nodes(camera, board, pose, pts_i[:1])
    if pose.translation[2] <= 0 or np.any(pose.apply(board.node_points())[:, 2] <= camera.main_lens.focal_length_mm):
        return FramePoseInit(frame, False, "board not in front of the camera", pose, rmse, len(pts_w), n_cl), {}
    if not rmse <= max_rmse_fraction * spacing:
        return FramePoseInit(
            frame, False, f"barycentre reprojection RMSE {rmse:.2f} px > {max_rmse_fraction} × spacing {spacing:.1f} px",
            pose, rmse, len(pts_w), n_cl,
        ), {}
    return FramePoseInit(frame, True, "", pose, rmse, len(pts_w), n_cl), mapping


def initial_extrinsics(
    camera: PlenopticCamera,
    bap: BapFeatures,
    board: Checkerboard,
    *,
    max_rmse_fraction: float = 0.25,
) -> ExtrinsicsInit:
    """Initial pose of every frame (paper §5.1), linking clusters to nodes when needed.

    Features whose ``node`` is set (>= 0) are used as linked; frames whose features carry only
    ``cluster`` ids are linked here. Frames that cannot be initialised are reported in
    ``frames`` (``ok=False`` with a reason) and left out of ``poses``.

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
            max_rmse_fraction=max_rmse_fraction,
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
    "cluster_barycentres",
    "initial_extrinsics",
    "link_nodes",
    "pinhole_matrix",
    "plenoptic_poses",
    "project_pinhole",
    "rodrigues",
    "solve_pnp",
]
