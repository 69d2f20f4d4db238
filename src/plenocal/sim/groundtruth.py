"""Ground truth of simulated frames from the model: true BAP features and micro-image centres.

These use the model's projections (:func:`plenocal.model.project_bap`,
:func:`plenocal.model.micro_image_centres`) on purpose: they are what a perfect detector and the
calibration should recover from the ray-traced images.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from scipy.spatial import cKDTree

from plenocal.model import micro_image_centres, micro_lens_centres, project_bap
from plenocal.model.camera import PlenopticCamera
from plenocal.model.geometry import Pose
from plenocal.model.observations import BapFeatures, MicroImageCentres
from plenocal.model.projection import virtual_points
from plenocal.model.target import Checkerboard
from plenocal.model.white import radius_law


def micro_image_radii_px(camera: PlenopticCamera, f_number: float) -> NDArray[np.float64]:
    """|R_i(1/N)|/s per type (eq:miradiusfnumber), shape (I,)."""
    m, q = radius_law(camera)
    return np.abs(m / f_number + np.asarray(q)) / camera.sensor.pixel_size_mm


def true_mics(camera: PlenopticCamera) -> MicroImageCentres:
    """Model MICs (projection of O through each micro-lens centre) that lie on the image."""
    k, l = camera.mla.lattice.all_indices()
    c = micro_image_centres(camera, k, l)
    W, H = camera.sensor.width_px, camera.sensor.height_px
    on = (c[:, 0] >= 0) & (c[:, 0] <= W - 1) & (c[:, 1] >= 0) & (c[:, 1] <= H - 1)
    return MicroImageCentres(k[on], l[on], c[on, 0], c[on, 1])


class FeatureOracle:
    """True BAP features of camera-frame points: every micro-lens whose micro-image contains the
    point's projection (radius |R_i| at the checkerboard f-number) and that lies on the image.

    Candidate micro-lenses are those near the cone from the (distorted) virtual point through the
    main aperture, found with a k-d tree on the micro-lens centres.
    """

    def __init__(self, camera: PlenopticCamera, f_number: float | None = None) -> None:
        self.camera = camera
        self.f_number = camera.main_lens.f_number if f_number is None else float(f_number)
        k, l = camera.mla.lattice.all_indices()
        self._k, self._l = k, l
        self._C = micro_lens_centres(camera, k, l)
        self._tree = cKDTree(self._C[:, :2])
        self._mic = micro_image_centres(camera, k, l)
        self._radius = micro_image_radii_px(camera, self.f_number)[camera.mla.types.type_of(k, l)]
        self._pitch = 0.5 * sum(camera.mla.pitch_mm)

    def features(
        self, points_cam: NDArray[np.float64], *, frame: int = 0, nodes: NDArray[np.int64] | None = None
    ) -> BapFeatures:
        """BAP features of points (N, 3) in the camera frame; ``node`` = ``nodes`` (or 0..N−1)."""
        cam = self.camera
        pts = np.asarray(points_cam, dtype=np.float64).reshape(-1, 3)
        ids = np.arange(len(pts)) if nodes is None else np.asarray(nodes)
        pu = virtual_points(cam, pts)
        zc = -cam.D_mm
        scale = (zc - pu[:, 2]) / (0.0 - pu[:, 2])
        axis = pu[:, :2] * (1.0 - scale[:, None])
        cone = cam.main_lens.focal_length_mm / (2.0 * self.f_number) * np.abs(scale)
        pairs_p, pairs_lens = [], []
        for i in range(len(pts)):
            cand = self._tree.query_ball_point(axis[i], cone[i] + 2.0 * self._pitch)
            pairs_p.append(np.full(len(cand), i))
            pairs_lens.append(np.asarray(cand, dtype=np.int64))
        p_idx = np.concatenate(pairs_p) if pairs_p else np.zeros(0, dtype=np.int64)
        lens = np.concatenate(pairs_lens) if pairs_lens else np.zeros(0, dtype=np.int64)
        k, l = self._k[lens], self._l[lens]
        f = project_bap(cam, pts[p_idx], k, l)
        d = np.hypot(f[:, 0] - self._mic[lens, 0], f[:, 1] - self._mic[lens, 1])
        W, H = cam.sensor.width_px, cam.sensor.height_px
        keep = (d <= self._radius[lens]) & (f[:, 0] >= 0) & (f[:, 0] <= W - 1)
        keep &= (f[:, 1] >= 0) & (f[:, 1] <= H - 1)
        order = np.lexsort((k[keep], l[keep], p_idx[keep]))
        sel = np.flatnonzero(keep)[order]
        n = len(sel)
        return BapFeatures(
            frame=np.full(n, frame), k=k[sel], l=l[sel], u=f[sel, 0], v=f[sel, 1], rho=f[sel, 2],
            node=ids[p_idx[sel]], cluster=ids[p_idx[sel]],
        )

    def board_features(self, board: Checkerboard, cam_from_world: Pose, *, frame: int = 0) -> BapFeatures:
        """True BAP features of every node of ``board`` seen at ``cam_from_world``."""
        return self.features(cam_from_world.apply(board.node_points()), frame=frame)

    def views_per_node(self, board: Checkerboard, cam_from_world: Pose) -> NDArray[np.int64]:
        """Number of micro-images that see each node, shape (n_nodes,)."""
        feats = self.board_features(board, cam_from_world)
        return np.bincount(feats.node, minlength=board.n_nodes)
