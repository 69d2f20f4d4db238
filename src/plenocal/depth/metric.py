"""Metric depth: a micro-image's virtual point back-projected through the calibrated camera.

The virtual point of micro-image (k, l) at virtual depth υ is the point seen at the micro-image
centre: on the chief ray from the model's micro-image centre (the exit-pupil centre projected
through C(k, l)) through C(k, l), at the signed depth a = −υ·d(k, l) from the lens (eq:virtdepth with the lens' own distance to
the sensor: what the disparity between micro-images measures, whatever the camera's ρ form). It is handed to the model's own back-projection of
BAP features (:func:`plenocal.model.projection.back_project_bap`: inverse distortion, depth
distortion, thin main lens) as the feature (u, v, ρ) with ρ the blur radius that depth gives
(eq:blurradius), so that no optics is derived twice here.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from plenocal.model.camera import PlenopticCamera
from plenocal.model.projection import (
    back_project_bap,
    blur_radius_mm,
    lens_distances,
    micro_image_centres,
    micro_lens_centres,
)

FloatArray = NDArray[np.float64]


def points_from_virtual_depth(
    camera: PlenopticCamera, k: ArrayLike, l: ArrayLike, virtual_depth: ArrayLike, *, offset_px: ArrayLike | None = None
) -> FloatArray:
    """Camera-frame points (mm) seen at the centres of micro-images (k, l) at virtual depths υ.

    Parameters
    ----------
    k, l : (N,) micro-lens indices; virtual_depth : (N,) υ (NaN gives NaN).
    offset_px : (N, 2) chief-ray offsets from the micro-image centres (px), optional: the points
        seen there instead (the per-pixel depths of :mod:`plenocal.depth.pixel`): the virtual
        point at the same υ on the chief ray from c + offset through C(k, l) — a virtual depth is
        a plane of the virtual image, whatever the offset. In the central view it lies at
        X = c + offset/γ, γ = (1 − λ) + λ/υ (:func:`~plenocal.model.projection.central_view_px`).

    Returns
    -------
    ndarray, shape (N, 3): x, y, z in mm (z > 0 in front of the camera).
    """
    k = np.asarray(k, dtype=np.int64)
    l = np.asarray(l, dtype=np.int64)
    ups = np.asarray(virtual_depth, dtype=np.float64)
    if camera.n_types == 0:
        raise ValueError("metric depth needs the micro-lens focal lengths (a camera with lens types)")
    C = micro_lens_centres(camera, k, l)
    _, d_k = lens_distances(camera, C)
    # The disparity measures each lens' own υ = −a/d(k, l), whatever the ρ form: the legacy form's
    # d (at the MLA frame's corner) is 3 % off d(k, l) under the PRISM camera's tilted MLA.
    a = -ups * d_k
    types = camera.mla.types.type_of(k, l)
    rho = blur_radius_mm(camera, a, types, d_lens_mm=d_k) / camera.sensor.pixel_size_mm
    uv = micro_image_centres(camera, k, l)
    if offset_px is not None:
        uv = uv + np.asarray(offset_px, dtype=np.float64).reshape(uv.shape)
    return back_project_bap(camera, np.column_stack([uv, rho]), k, l)


def virtual_depth_of_points(camera: PlenopticCamera, points_cam: ArrayLike, k: ArrayLike, l: ArrayLike) -> FloatArray:
    """υ of camera-frame points seen through micro-lenses (k, l): −a/d(k, l) with a the virtual point's
    depth from the lens (the inverse of :func:`points_from_virtual_depth` along the depth; tests)."""
    from plenocal.model.projection import virtual_points

    k = np.asarray(k, dtype=np.int64)
    l = np.asarray(l, dtype=np.int64)
    pu = virtual_points(camera, points_cam)
    C = micro_lens_centres(camera, k, l)
    D_k, d_k = lens_distances(camera, C)
    return -(pu[..., 2] + D_k) / d_k
