"""Micro-images that do not follow the white-image model, recognised from the image (beyond the paper).

Pre-calibration models a white micro-image as the image of the whole main-lens exit pupil (a
disc) blurred by its micro-lens (a disc), centred on a linear lattice (:mod:`.grid`,
:mod:`.radii`, :mod:`.internals`). A real lens breaks the model away from its axis:

- **mechanical vignetting**: seen from an off-axis lenslet, the exit pupil is clipped by the rims
  of other elements; the micro-image becomes a cat's-eye (the intersection of two or more discs):
  dimmer, smaller, elongated, its centroid pulled towards the clipped side, more so at wide
  apertures;
- **pupil aberration**: the exit pupil seen from off-axis lenslets is displaced and compressed
  radially. On the real-optics R12-B set (a Cooke triplet with a field corrector, traced through
  its glass) the micro-image centres leave a linear lattice by +1.2 px at 8 mm from the axis and
  +3.6 px at 10 mm, and the micro-images become elliptical (anisotropy 0.05 at 8 mm, 0.19 at
  10 mm), the same at every aperture;
- **beyond the image circle**: dark micro-images.

Their moments and centroids would bias the grid, Ω and the type classification. Each white is
tested on its own, with three statistics measured from it, per micro-image:

1. *dark*: lit mass (in the un-flattened image) relative to the median of the micro-images in the
   central third of the sensor, below :data:`MIN_RELATIVE_MASS`;
2. *anisotropic*: the second-moment anisotropy vector ``a`` (:attr:`.radii.Moments.anisotropy`),
   zero for any disc ⊗ disc, less the central micro-images' median, beyond :data:`MAX_ANISOTROPY`;
3. *off the lattice*: the centroid's residual against the projective lattice fitted to the
   white's conforming micro-images (:func:`projective_lattice`) beyond
   :data:`MAX_LATTICE_DEPARTURE_PX`.

Statistics 2 and 3 are noisy vectors. Each is tested twice, against its tolerance plus
:data:`NOISE_SIGMAS` times its noise: the micro-image alone (a single clipped micro-image), and the
mean over its neighbourhood (:data:`NEIGHBOURHOOD_NODES`), which brings a systematic departure
that grows across the sensor out of the noise where it reaches the tolerance. The noise is
measured from the image: the robust spread of each micro-image's value about its neighbourhood
mean in the central third of the sensor, scaled by 1/√(lit mass) for dimmer micro-images.
Each white gets its own projective lattice (on R12-B the N = 11.31 micro-images sit 0.08 px
below the N = 4 ones, uniformly), fitted first to the central micro-images and then to the
conforming ones until the set stops changing.
No rule depends on the lens: a camera whose micro-images follow the model everywhere (a thin
lens, an image circle that covers the sensor) keeps them all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import ndimage

from plenocal.model.lattice import Lattice
from plenocal.precalib.radii import Moments

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

MIN_RELATIVE_MASS = 0.5
"""A micro-image whose lit mass is below this fraction of the central micro-images' median has lost
light to clipping or lies beyond the image circle: natural (cos⁴) vignetting alone takes half the
light only at 33° chief-ray angle, far beyond what an f/4-matched micro-lens array sees."""
MAX_ANISOTROPY = 0.01
"""Largest tolerated anisotropy |a| = (λ_max − λ_min)/(λ_max + λ_min) of a micro-image's second
moments. A micro-image compressed along one axis (a cat's-eye, the pupil's radial compression) has
its mean variance σ² lowered by |a|·σ²: this bounds that bias of the radius law's input at 1 % of
σ² (0.5 % of the radius)."""
MAX_LATTICE_DEPARTURE_PX = 0.1
"""Largest tolerated systematic residual (px) of micro-image centroids against the projective
lattice of a (tilted) MLA: bounds the bias of the grid nodes (detection's micro-image centres) and
of the MIC observations that the camera model cannot explain at a tenth of a pixel."""
NOISE_SIGMAS = 4.0
"""A statistic is beyond its tolerance when it exceeds it by this many of its noise σ (a noise-only
2-D vector does so with probability exp(−NOISE_SIGMAS²/2) = 3·10⁻⁴)."""
NEIGHBOURHOOD_NODES = 2
"""The neighbourhood mean is over lattice indices within ±this many of the micro-image's (k, l):
up to 25 micro-images, a 5-pitch square, which divides the noise σ by ≈ 5."""
CENTRAL_FRACTION = 1.0 / 3.0
"""The reference population for the lit mass: micro-images in the central third of the sensor
(both axes), where the main aperture is seen unclipped."""


@dataclass(frozen=True)
class Conformity:
    """Which micro-images of one white follow the white-image model (module docstring).

    Arrays have the shape (M,) of the white's :class:`~plenocal.precalib.radii.Moments`.
    """

    f_number: float
    k: NDArray[np.int64]
    l: NDArray[np.int64]
    centre_px: FloatArray
    """(M, 2) the micro-images' centroids."""
    dark: BoolArray
    anisotropic: BoolArray
    off_lattice: BoolArray
    anisotropy_sigma: float
    """Median noise σ of one anisotropy component of one micro-image."""
    lattice_sigma_px: float
    """Median noise σ (px) of one centroid coordinate of one micro-image."""

    @property
    def ok(self) -> BoolArray:
        return ~(self.dark | self.anisotropic | self.off_lattice)

    def summary(self) -> str:
        """One line: how many were left out and why (a micro-image may fail several tests)."""
        return (f"{int((~self.ok).sum())} of {len(self.k)} left out: {int(self.dark.sum())} dark, "
                f"{int(self.anisotropic.sum())} anisotropic, {int(self.off_lattice.sum())} off the lattice")


def neighbourhood_mean(
    values: FloatArray, k: NDArray[np.int64], l: NDArray[np.int64], lattice: Lattice, *, nodes: int = NEIGHBOURHOOD_NODES
) -> tuple[FloatArray, FloatArray]:
    """Mean of ``values`` (M,) or (M, F) over the micro-images within ±``nodes`` lattice indices
    of each (k, l), and how many there are (M,). Only the M given micro-images count."""
    v = np.asarray(values, dtype=np.float64)
    v2 = v[:, None] if v.ndim == 1 else v
    shape = (lattice.height, lattice.width)
    count = np.zeros(shape)
    count[l, k] = 1.0
    size = 2 * nodes + 1
    n = ndimage.uniform_filter(count, size=size, mode="constant")[l, k] * size * size
    out = np.empty_like(v2)
    for j in range(v2.shape[1]):
        grid = np.zeros(shape)
        grid[l, k] = v2[:, j]
        out[:, j] = ndimage.uniform_filter(grid, size=size, mode="constant")[l, k] * size * size / np.maximum(n, 1.0)
    return (out[:, 0] if v.ndim == 1 else out), np.rint(n)


def departs(
    values: FloatArray,
    k: NDArray[np.int64],
    l: NDArray[np.int64],
    lattice: Lattice,
    tolerance: float,
    *,
    reference: BoolArray,
    noise_scale: FloatArray | None = None,
    sigmas: float = NOISE_SIGMAS,
) -> tuple[BoolArray, float]:
    """Micro-images whose 2-D statistic ``values`` (M, 2), alone or as a neighbourhood mean, is
    farther from zero than ``tolerance`` plus ``sigmas`` times its noise; and the noise σ of one
    component of one micro-image in the reference population.

    The noise is measured on the ``reference`` micro-images (M,) (the centre of the sensor, where
    the model holds): the robust spread of each value about its neighbourhood mean, which a
    systematic departure elsewhere cannot inflate. ``noise_scale`` (M,) scales it per micro-image
    (dimmer ones are noisier); the neighbourhood mean of n values has σ/√n.
    """
    x = np.asarray(values, dtype=np.float64)
    if len(x) < 2:
        return np.zeros(len(x), dtype=bool), float("nan")
    mean, n = neighbourhood_mean(x, k, l, lattice)
    # A value is part of its own mean: its deviation underestimates the noise by √((n − 1)/n).
    dev = (x - mean) * np.sqrt(n / np.maximum(n - 1.0, 1.0))[:, None]
    ref = dev[reference] if int(np.sum(reference)) >= 10 else dev
    sigma = float(np.mean(1.4826 * np.median(np.abs(ref), axis=0)))
    s = sigma * (np.ones(len(x)) if noise_scale is None else np.asarray(noise_scale, dtype=np.float64))
    alone = np.hypot(x[:, 0], x[:, 1]) > tolerance + sigmas * s
    together = np.hypot(mean[:, 0], mean[:, 1]) > tolerance + sigmas * s / np.sqrt(np.maximum(n, 1.0))
    return alone | together, sigma


def central(uv_px: FloatArray, image_shape: tuple[int, int], *, fraction: float = CENTRAL_FRACTION) -> BoolArray:
    """Micro-images whose centre lies in the central ``fraction`` of the sensor on both axes."""
    H, W = image_shape
    uv = np.asarray(uv_px, dtype=np.float64)
    return (np.abs(uv[:, 0] - (W - 1) / 2.0) <= fraction * W / 2.0) & (np.abs(uv[:, 1] - (H - 1) / 2.0) <= fraction * H / 2.0)


def dark_micro_images(moments: Moments, mass: FloatArray, image_shape: tuple[int, int]) -> tuple[BoolArray, float]:
    """Micro-images whose lit ``mass`` (M,) is below :data:`MIN_RELATIVE_MASS` of the central ones'
    median (rule 1 of the module docstring), and that median."""
    mass = np.asarray(mass, dtype=np.float64)
    ref_sel = central(moments.centre_px, image_shape)
    ref = float(np.median(mass[ref_sel])) if np.any(ref_sel) else float(np.median(mass))
    return ~(mass >= MIN_RELATIVE_MASS * ref), ref


MAX_LATTICE_REFITS = 5
"""The projective lattice and the lattice test are alternated at most this many times (until the
conforming set stops changing)."""


def projective_lattice(uv_px: FloatArray, k: NDArray[np.int64], l: NDArray[np.int64], lattice: Lattice, fit: BoolArray) -> FloatArray:
    """Positions (M, 2) predicted for every micro-image by the homography from the unit-pitch
    lattice positions g(k, l) to the image that best fits the centroids ``uv_px`` where ``fit``.

    A tilted MLA images its lens lattice projectively (every lens at its own distance from the
    main lens): the lattice test measures departures from this, not from a linear lattice, so
    that the tilt's (0.3 px at the corners at 0.6 mrad) is not taken for a departure. Linear
    least squares on u·(1 + h₇x + h₈y) = h₁x + h₂y + h₃ (and v alike), in centred, scaled
    coordinates.
    """
    gx, gy = lattice.positions(k, l, (1.0, 1.0))
    g = np.stack([gx, gy], axis=1)
    uv = np.asarray(uv_px, dtype=np.float64)
    g0, gs = g[fit].mean(axis=0), float(np.std(g[fit])) + 1e-12
    u0, us = uv[fit].mean(axis=0), float(np.std(uv[fit])) + 1e-12
    x, y = ((g - g0) / gs).T
    u, v = ((uv - u0) / us).T
    n = len(u)
    zeros, ones = np.zeros(n), np.ones(n)
    A = np.concatenate([np.stack([x, y, ones, zeros, zeros, zeros, -x * u, -y * u], axis=1),
                        np.stack([zeros, zeros, zeros, x, y, ones, -x * v, -y * v], axis=1)])
    b = np.concatenate([u, v])
    rows = np.concatenate([fit, fit])
    # Normal equations: 8 unknowns, well conditioned in these coordinates (lstsq on the 2M × 8
    # system costs ten times more).
    Af = A[rows]
    h = np.linalg.solve(Af.T @ Af, Af.T @ b[rows])
    w = 1.0 + h[6] * x + h[7] * y
    pred = np.stack([(h[0] * x + h[1] * y + h[2]) / w, (h[3] * x + h[4] * y + h[5]) / w], axis=1)
    return pred * us + u0


def conformity(
    moments: Moments,
    mass: FloatArray,
    lattice: Lattice,
    image_shape: tuple[int, int],
    *,
    f_number: float,
) -> Conformity:
    """Test every micro-image of one white against the white-image model (module docstring).

    Parameters
    ----------
    moments : the white's micro-image moments (on the flattened image).
    mass : (M,) each micro-image's lit mass in the un-flattened image (any unit).
    lattice : the micro-lens lattice (neighbourhoods, lattice positions).
    image_shape : (H, W).
    f_number : the white's N (stored).
    """
    k, l = moments.k, moments.l
    mass = np.asarray(mass, dtype=np.float64)
    dark, mass_ref = dark_micro_images(moments, mass, image_shape)
    lit = ~dark
    anisotropic = np.zeros(len(k), dtype=bool)
    off = np.zeros(len(k), dtype=bool)
    a_sigma, c_sigma = float("nan"), float("nan")
    if int(lit.sum()) >= 10:
        kl, ll = k[lit], l[lit]
        uv = moments.centre_px[lit]
        ref = central(uv, image_shape)
        # Photon-like noise: σ ∝ 1/√(light); never below the centre's.
        scale = np.sqrt(np.maximum(mass_ref / np.maximum(mass[lit], 1e-300), 1.0))
        aniso = np.nan_to_num(moments.anisotropy[lit], nan=1.0)
        # Against the central micro-images' shape (an astigmatic lenslet, non-square pixels): a
        # departure is a change across the sensor.
        if int(ref.sum()) >= 10:
            aniso = aniso - np.median(aniso[ref], axis=0)
        flags, a_sigma = departs(aniso, kl, ll, lattice, MAX_ANISOTROPY, reference=ref, noise_scale=scale)
        anisotropic[lit] = flags
        # Start from the central micro-images: a lattice fitted where the lens distorts it would
        # move the centre off too.
        fit = ~flags & ref
        if int(fit.sum()) < 10:
            fit = ~flags
        for _ in range(MAX_LATTICE_REFITS):
            if int(fit.sum()) < 10:
                break
            residual = uv - projective_lattice(uv, kl, ll, lattice, fit)
            off_lit, c_sigma = departs(residual, kl, ll, lattice, MAX_LATTICE_DEPARTURE_PX, reference=ref & fit,
                                       noise_scale=scale)
            new_fit = ~(flags | off_lit)
            off[lit] = off_lit
            if np.array_equal(new_fit, fit):
                break
            fit = new_fit
    return Conformity(float(f_number), k, l, moments.centre_px, dark, anisotropic, off, a_sigma, c_sigma)


RING_WIDTH_MM = 1.0
"""Width of the rings (from the principal point) in which :func:`exclusion_by_radius` counts."""


def exclusion_by_radius(conf: Conformity, principal_point_px: tuple[float, float], pixel_size_mm: float) -> dict[str, object]:
    """Where a white's micro-images were left out: radii (mm from the principal point) of the
    excluded ones (min, 5th percentile, median) and the excluded fraction per ring of
    :data:`RING_WIDTH_MM`."""
    r = np.hypot(*(np.asarray(conf.centre_px) - np.asarray(principal_point_px)).T) * pixel_size_mm
    out = ~conf.ok
    ring = np.floor(r / RING_WIDTH_MM).astype(np.int64)
    n_rings = int(ring.max()) + 1 if len(ring) else 0
    total = np.bincount(ring, minlength=n_rings)
    excl = np.bincount(ring[out], minlength=n_rings)
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(total > 0, excl / np.maximum(total, 1), np.nan)
    return {
        "excluded_radius_mm": None if not np.any(out) else {
            "min": float(r[out].min()), "p05": float(np.percentile(r[out], 5)), "median": float(np.median(r[out]))},
        "ring_width_mm": RING_WIDTH_MM,
        "excluded_fraction_by_ring": [None if not np.isfinite(f) else float(f) for f in frac],
    }
