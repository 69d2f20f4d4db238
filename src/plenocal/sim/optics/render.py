"""Backward Monte-Carlo rendering of raw images through real optics (``docs/simulator.md``).

For each pixel and each candidate lenslet, ``rays`` samples, each:

1. a point X on the pixel's area (hash-derived patterns of :mod:`plenocal.sim.sampling`, as the
   thin tracer: the image does not depend on the thread count, and a ``roi`` window equals the
   same window of a full render);
2. a point P uniform in a disc on the substrate's rear face that covers the exact footprint of the
   lenslet's clear aperture seen from the pixel (real lenslets), or on the thin lenslet's aperture
   disc; the sample's weight is the disc's area × cos θ_X · cos θ_P / |P − X|² (the first air
   segment's geometric term), so the estimate of the pixel's irradiance is unbiased and natural
   vignetting is physical;
3. the ray X → P is traced exactly: Snell at the flat rear face, through the substrate, the mask
   on its front face (outside r_c it is blocked), the spherical cap (total internal reflection
   kills it), into air; then every main-lens surface in reverse order (exact spheres and Snell,
   each clear semi-diameter and the stop clip it; ideal surfaces by the thin-lens law);
4. the ray that leaves the front surface meets the scene: radiance ``level`` for the white
   diffuser, the nearest plate (checkerboard, texture, disc light) or the background otherwise.

Pixel value = Σ over lenslets of the mean weighted radiance, divided by the projected solid angle
of a fully lit micro-image centre (so that it is ≈ 1 for the white diffuser there). Lenslet
apertures do not overlap (r_c <= pitch/2), so summing over candidate lenslets with each
lenslet's own aperture is exact (crosstalk included). Candidates come from a sensor-space cell
grid of micro-image bounds (the paraxial image of the exit pupil through each lenslet, +10 %
+ 2 px); pixels outside every bound cost nothing. Rows are rendered in bands with a progress
callback between them (Ctrl-C ends between bands).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from plenocal.sim.optics._kernels import render_kernel
from plenocal.sim.optics.camera import RealOpticsCamera
from plenocal.sim.optics.lenslets import LensletKind
from plenocal.sim.sampling import sample_patterns
from plenocal.sim.scene import Scene, WhiteDiffuser, pack_scene
from plenocal.sim.tracer import _ROTATIONS, CELL_SIZE_PX, _build_cells

BOUND_SCALE = 1.1
BOUND_MARGIN_PX = 2.0
"""Culling bound of a micro-image: BOUND_SCALE × its paraxial support radius + BOUND_MARGIN_PX
(pupil aberration, the lenslet's spherical aberration and vignetting only move or shrink the
support by a fraction of a pixel; the tests render with bounds twice as large and find the same
image)."""
_MASK64 = (1 << 64) - 1


@dataclass(frozen=True, eq=False)
class RealTracerOptics:
    """A :class:`RealOpticsCamera` as flat arrays for the kernel, at one f-number."""

    f_number: float
    natural_vignetting: bool
    vertices: NDArray[np.float64]
    lens_type: NDArray[np.int64]
    axes: NDArray[np.float64]
    lenslet_tables: NDArray[np.float64]
    sample_z: NDArray[np.float64]
    lenslet: NDArray[np.float64]
    main_table: NDArray[np.float64]
    h_z: float
    sensor: NDArray[np.float64]
    width_px: int
    height_px: int
    mic: NDArray[np.float64]
    bound2: NDArray[np.float64]
    cell_start: NDArray[np.int64]
    cell_lens: NDArray[np.int32]
    cells_x: int


def build_real_optics(
    camera: RealOpticsCamera, f_number: float | None = None, *, natural_vignetting: bool = True,
    bound_scale: float = BOUND_SCALE,
) -> RealTracerOptics:
    """Flatten ``camera`` for the kernel at ``f_number`` (default: the camera's).

    ``natural_vignetting``: weigh samples by cos θ_X · cos θ_P / r² (physical irradiance,
    default); False weighs each by its disc's area only, the thin tracer's "fraction of rays
    through the aperture" (every lit direction counts the same), so that radiometric effects can
    be told from geometric ones (on R12-B, 9 mm off axis, the weighting moves white micro-image
    centroids by 0.04 px). ``bound_scale``: factor on the micro-image culling bounds (tests use a
    larger one).
    """
    n = camera.f_number if f_number is None else float(f_number)
    sensor = camera.thin.sensor
    mic = np.ascontiguousarray(camera.micro_image_centres_px(n))
    bound = bound_scale * camera.micro_image_radii_px(n) + BOUND_MARGIN_PX
    starts, entries, nx = _build_cells(mic[:, 0], mic[:, 1], bound, sensor.width_px, sensor.height_px, CELL_SIZE_PX)
    real = camera.lenslets.kind is LensletKind.REAL
    sample_z = np.array([t.thickness_mm if real else 0.0 for t in camera.types])
    r_c = camera.types[0].clear_radius_mm
    if natural_vignetting:
        k_full = camera.full_aperture_projected_solid_angle()
    else:
        # Area of the aperture's footprint from the on-axis point: the rear face sees it scaled
        # by the paraxial κ = g/(g + t_s/n) (real), the lens disc itself (thin).
        g = camera.air_gap_mm
        kappa = g / (g + camera.lenslets.substrate_mm / camera.lenslets.index) if real else 1.0
        k_full = np.pi * (kappa * r_c) ** 2
    lenslet = np.array([
        1.0 if real else 0.0, camera.lenslets.index, camera.lenslets.substrate_mm, r_c, 1.0 / k_full,
        1.0 if natural_vignetting else 0.0,
    ])
    u0, v0 = sensor.principal_point_px
    return RealTracerOptics(
        f_number=n,
        natural_vignetting=natural_vignetting,
        vertices=camera.vertices,
        lens_type=camera.lens_type,
        axes=np.ascontiguousarray(camera.thin.mla.rotation),
        lenslet_tables=camera.lenslet_tables(),
        sample_z=sample_z,
        lenslet=lenslet,
        main_table=camera.lens_table(n),
        h_z=float(camera.h_z),
        sensor=np.array([sensor.pixel_size_mm, u0, v0, camera.sensor_z_mm]),
        width_px=sensor.width_px,
        height_px=sensor.height_px,
        mic=mic,
        bound2=np.ascontiguousarray((bound + 0.7072) ** 2),
        cell_start=starts,
        cell_lens=entries,
        cells_x=int(nx),
    )


def render_real(
    camera: RealOpticsCamera,
    scene: Scene | WhiteDiffuser,
    *,
    f_number: float | None = None,
    rays: int = 16,
    seed: int = 0,
    image_id: int = 0,
    roi: tuple[int, int, int, int] | None = None,
    optics: RealTracerOptics | None = None,
    progress: Callable[[int, int], None] | None = None,
    band_rows: int = 64,
    natural_vignetting: bool = True,
) -> NDArray[np.float32]:
    """Render a noise-free raw image through real optics (relative irradiance, module docstring).

    Parameters
    ----------
    camera : RealOpticsCamera
    scene : Scene or WhiteDiffuser
    f_number : float, optional
        Main-lens f-number (default: the camera's); sets the stop's semi-diameter.
    rays : int
        Samples per pixel and per candidate lenslet.
    seed, image_id : int
        The image is a deterministic function of (camera, scene, rays, seed, image_id).
    roi : (u_start, v_start, u_stop, v_stop), optional
        Only this pixel window (half-open); other pixels are 0.
    optics : RealTracerOptics, optional
        Pre-built :func:`build_real_optics` (its f-number and ``natural_vignetting`` win).
    progress : callable(done_rows, total_rows), optional
        Called after each band of rows.
    band_rows : int
    natural_vignetting : bool
        Radiometric cos·cos/r² weights (default) or the thin tracer's ray fractions
        (:func:`build_real_optics`).

    Returns
    -------
    ndarray, shape (H, W) float32 (grey scenes), (H, W, 3) (RGB textures).
    """
    if optics is None:
        optics = build_real_optics(camera, f_number, natural_vignetting=natural_vignetting)
    H, W = optics.height_px, optics.width_px
    i0, j0, i1, j1 = (0, 0, W, H) if roi is None else roi
    i0, j0 = max(int(i0), 0), max(int(j0), 0)
    i1, j1 = min(int(i1), W), min(int(j1), H)
    white = isinstance(scene, WhiteDiffuser)
    if isinstance(scene, WhiteDiffuser):
        plates = np.zeros((0, 24))
        texture = np.zeros((1, 1, 1), dtype=np.float32)
        channels, background, level = 1, 0.0, float(scene.level)
    else:
        plates, texture, channels = pack_scene(scene)
        background, level = float(scene.background), 0.0
    table = sample_patterns(int(rays), seed=seed, image_id=image_id)
    patterns = np.ascontiguousarray(table.transpose(0, 2, 1))
    patterns[:, 0:2] += 0.5
    out = np.zeros((H, W, channels), dtype=np.float32)
    total = max(j1 - j0, 0)
    for start in range(j0, j1, band_rows):
        stop = min(start + band_rows, j1)
        render_kernel(
            out, start, stop, i0, i1,
            optics.vertices, optics.lens_type, optics.axes, optics.lenslet_tables, optics.sample_z,
            optics.lenslet, optics.main_table, optics.h_z, optics.sensor, W, optics.mic, optics.bound2,
            optics.cell_start, optics.cell_lens, optics.cells_x, CELL_SIZE_PX, patterns, _ROTATIONS,
            np.uint64(seed & _MASK64), np.uint64(image_id & _MASK64), white, level, plates, texture, background,
        )
        if progress is not None:
            progress(stop - j0, total)
    return out[:, :, 0] if channels == 1 else out
