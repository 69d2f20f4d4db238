"""An analytic white-image renderer, independent of plenocal.sim, for pre-calibration tests.

A white micro-image is the main-aperture disc (radius R_a = |m|/N) convolved with the micro-lens
blur disc (R_b = |q_i|): its intensity at distance r from the micro-image centre is the area of
the intersection of two discs of radii R_a and R_b whose centres are r apart. Each lens has its own
m, q_i (a tilted MLA: :func:`plenocal.model.white.radius_law_at`). Pixels are supersampled
``supersample``² times over their area (1: one point at the pixel centre, as PRISM does);
``unblurred_weight`` adds that fraction of light through the aperture without the lens blur (PRISM's
chief ray: 1/31); overlapping micro-images add. Noise is added over ``black_level`` and the result
clipped to [0, 255] (noise on a zero black level is clipped, which biases dark pixels by +0.4σ).
"""

from __future__ import annotations

import numpy as np

from plenocal.model.camera import PlenopticCamera
from plenocal.model.projection import micro_image_centres
from plenocal.model.white import radius_law_at


def disc_overlap_area(d, r1, r2):
    d = np.asarray(d, dtype=np.float64)
    r1 = np.broadcast_to(r1, d.shape).astype(np.float64)
    r2 = np.broadcast_to(r2, d.shape).astype(np.float64)
    out = np.zeros_like(d)
    full = d <= np.abs(r1 - r2)
    out[full] = np.pi * np.minimum(r1, r2)[full] ** 2
    part = (d < r1 + r2) & ~full
    dd, a, b = d[part], r1[part], r2[part]
    c1 = np.clip((dd**2 + a**2 - b**2) / (2 * dd * a), -1, 1)
    c2 = np.clip((dd**2 + b**2 - a**2) / (2 * dd * b), -1, 1)
    k = np.clip((-dd + a + b) * (dd + a - b) * (dd - a + b) * (dd + a + b), 0, None)
    out[part] = a**2 * np.arccos(c1) + b**2 * np.arccos(c2) - 0.5 * np.sqrt(k)
    return out


def render_white(
    camera: PlenopticCamera,
    f_number: float,
    *,
    peak: float = 180.0,
    noise: float = 0.0,
    vignetting: float = 0.0,
    hot_pixels: int = 0,
    seed: int = 0,
    supersample: int = 4,
    unblurred_weight: float = 0.0,
    black_level: float = 0.0,
) -> np.ndarray:
    """Float image (H, W) of a white diffuser at aperture N."""
    H, W = camera.sensor.height_px, camera.sensor.width_px
    s = camera.sensor.pixel_size_mm
    k, l = camera.mla.lattice.all_indices()
    m, q = radius_law_at(camera, k, l)
    ra_all = np.abs(m) / f_number / s
    c = micro_image_centres(camera, k, l)
    rb = np.abs(q) / s
    img = np.zeros((H, W))
    R = int(np.ceil(ra_all.max() + rb.max())) + 1
    offs = (np.arange(supersample) + 0.5) / supersample - 0.5
    sy, sx = np.meshgrid(offs, offs, indexing="ij")
    oy, ox = np.meshgrid(np.arange(-R, R + 1), np.arange(-R, R + 1), indexing="ij")
    cu, cv = np.rint(c[:, 0]).astype(int), np.rint(c[:, 1]).astype(int)
    for chunk in np.array_split(np.arange(len(k)), max(1, len(k) // 2000)):
        pu = cu[chunk, None, None] + ox[None]
        pv = cv[chunk, None, None] + oy[None]
        acc = np.zeros(pu.shape)
        ra = ra_all[chunk, None, None]
        for a, b in zip(sx.ravel(), sy.ravel(), strict=False):
            d = np.hypot(pu + a - c[chunk, 0, None, None], pv + b - c[chunk, 1, None, None])
            blurred = disc_overlap_area(d, ra, rb[chunk, None, None]) / (np.pi * rb[chunk, None, None] ** 2)
            acc += (1.0 - unblurred_weight) * blurred + unblurred_weight * (d <= ra)
        # Unit peak for an unvignetted lens (the plateau of the smaller disc's area ratio).
        acc /= supersample**2 * np.minimum(1.0, (ra / rb[chunk, None, None]) ** 2)
        ok = (pu >= 0) & (pu < W) & (pv >= 0) & (pv < H)
        np.add.at(img, (pv[ok], pu[ok]), acc[ok])
    img *= peak
    if vignetting:
        yy, xx = np.mgrid[0:H, 0:W]
        rr2 = ((xx - W / 2) ** 2 + (yy - H / 2) ** 2) / ((W / 2) ** 2 + (H / 2) ** 2)
        img *= 1.0 - vignetting * rr2
    img += black_level
    rng = np.random.default_rng(seed)
    if noise:
        img += rng.normal(0, noise, img.shape)
    if hot_pixels:
        idx = rng.integers(0, img.size, hot_pixels)
        img.ravel()[idx] = np.where(rng.uniform(size=hot_pixels) < 0.5, 0.0, 255.0)
    return np.clip(img, 0, 255)
