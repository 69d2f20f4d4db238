"""Pre-calibration from white raw images (paper §3): grid, types, Ω and the initial camera.

:func:`precalibrate` chains the steps; each is a plain function of its own module:
:mod:`~plenocal.precalib.centres` (micro-image centres), :mod:`~plenocal.precalib.grid` (lattice
indices and MIA fit), :mod:`~plenocal.precalib.radii` (moments),
:mod:`~plenocal.precalib.conformity` (micro-images that do not follow the white-image model: clipped
by the lens, distorted by its pupil, dark), :mod:`~plenocal.precalib.types` (type layout),
:mod:`~plenocal.precalib.internals` (Ω) and :func:`plenocal.model.white.initial_camera`.

The micro-images that :mod:`~plenocal.precalib.conformity` rejects in a white are left out of
everything measured from that white: the grid (reference white), the type layout, Ω and the MIC
observations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from plenocal.errors import DataError
from plenocal.model.camera import Configuration, MicroImageGrid, PlenopticCamera, lattice_corner
from plenocal.model.lattice import LatticeKind, TypeLayout
from plenocal.model.observations import MicroImageCentres
from plenocal.model.spec import CameraSpec
from plenocal.model.white import InternalParameters, initial_camera, initial_tilt
from plenocal.precalib import checks
from plenocal.precalib.centres import clean_image, detect_centres, envelope, flatten_by, refine_centroids
from plenocal.precalib.conformity import Conformity, central, conformity
from plenocal.precalib.grid import GridFit, fit_grid, refit_grid
from plenocal.precalib.internals import ApertureDecision, InternalsError, InternalsFit, detrended, fit_internals
from plenocal.precalib.radii import Moments, micro_image_moments, natural_vignetting_excess_px2
from plenocal.precalib.types import TypeClassification, classify_types

UNFOCUSED_Q_PX = 1.0
"""|q_i| below this many pixels means d ≈ f: the unfocused configuration (Lytro-like). An unfocused
camera's |q| is ~0.03 px; an unknown pixel term (0 to 1/12 px², taken as 1/24 when the profile
cannot tell) makes it appear up to ~0.6 px; focused cameras have |q| of several px."""
NOT_WHITE_DARK_FRACTION = 0.15
"""A white image has (almost) no dark micro-images in the centre of the sensor; more than this
fraction there means a scene."""
NOT_WHITE_REGION_FRACTION = 0.5
"""The not-a-white test counts the micro-images in the central half of the sensor (both axes): a
quarter of its area, inside any real lens' image circle."""
DARK_LEVEL = 0.3
"""A micro-image darker than this fraction of the bright level is dark (a black square, not
vignetting: a white's brightness falls by far less across the central half of the sensor)."""


@dataclass(frozen=True)
class WhiteImage:
    """One white raw image and its main-lens f-number."""

    f_number: float
    image: NDArray
    name: str = ""


@dataclass(frozen=True)
class PartialPrecalibration:
    """What pre-calibration had measured when Ω could not be estimated (for the radii plot)."""

    grid_fit: GridFit
    types: TypeClassification
    moments: dict[float, Moments]
    apertures: tuple[ApertureDecision, ...]


class PrecalibrationError(DataError):
    """Pre-calibration failed after measuring the micro-images: carries them for the plots."""

    def __init__(self, message: str, partial: PartialPrecalibration) -> None:
        super().__init__(message)
        self.partial = partial


def mla_origin_uv(grid: MicroImageGrid) -> tuple[float, float]:
    """Image position of the MLA frame origin (the lattice's bounding-box corner), px.

    Micro-lens (k, l) sits at t + R·(c − g(k, l)) (``docs/conventions.md``): the origin, g = c, images
    at the grid's ``offset + R(θ)·c`` in pixel units. The camera model's d is defined there.
    """
    cx, cy = lattice_corner(grid.lattice, grid.pitch_px)
    c, s = np.cos(grid.rotation_rad), np.sin(grid.rotation_rad)
    return grid.offset_px[0] + c * cx - s * cy, grid.offset_px[1] + s * cx + c * cy


@dataclass(frozen=True)
class Precalibration:
    grid_fit: GridFit
    mic: MicroImageCentres
    """Micro-image centres averaged over the usable apertures (calibration's MIC observations)."""
    types: TypeClassification
    internals: InternalsFit
    camera: PlenopticCamera
    """The initial camera (paper §3.3)."""
    omega: InternalParameters
    configuration: Configuration
    configuration_inferred: bool
    moments: dict[float, Moments]
    """Per f-number, the moments of the micro-images that follow the white-image model."""
    n_centres_detected: int
    conformity: dict[float, Conformity] = field(default_factory=dict)
    """Per f-number, which micro-images follow the white-image model (:mod:`.conformity`)."""
    grid_rms_all_px: float = float("nan")
    """RMS residual of every lit micro-image's centroid in the reference white against the grid,
    those left out included: how far the lens' micro-image lattice departs from a linear one."""


def _check_whites(whites: list[WhiteImage]) -> tuple[int, int]:
    if len(whites) < 2:
        raise DataError(
            f"pre-calibration needs white images at >= 2 different f-numbers, got {len(whites)}; "
            "add whites taken at other apertures"
        )
    shapes = {np.asarray(w.image).shape[:2] for w in whites}
    if len(shapes) != 1:
        desc = ", ".join(f"{w.name or w.f_number}: {np.asarray(w.image).shape[1]}x{np.asarray(w.image).shape[0]}" for w in whites)
        raise DataError(f"white images have different sizes ({desc}); all must come from the same sensor")
    ns = [w.f_number for w in whites]
    if len(set(ns)) != len(ns):
        raise DataError(f"two white images share an f-number ({sorted(ns)}); give one white per aperture")
    for w in whites:
        img = np.asarray(w.image)
        if img.size == 0 or float(img.max()) <= float(img.min()):
            raise DataError(f"white image {w.name or w.f_number} is empty or uniform: no micro-images in it")
    H, W = next(iter(shapes))
    return H, W


def _check_spec(spec: CameraSpec, shape: tuple[int, int]) -> None:
    """What pre-calibration needs of the camera spec, and that it says the whites' size."""
    H, W = shape
    if spec.lattice is None or spec.n_types is None or spec.main_lens_focal_length_mm is None:
        missing = [n for n in ("lattice", "n_types", "main_lens_focal_length_mm") if getattr(spec, n) is None]
        raise DataError(f"camera_spec needs {', '.join(missing)} for pre-calibration")
    if (spec.height_px, spec.width_px) != (H, W):
        raise DataError(f"white images are {W}x{H} px but camera_spec says {spec.width_px}x{spec.height_px}")


def _white_moments(
    cleaned: dict[float, NDArray], grid: MicroImageGrid, k_all: NDArray[np.int64], l_all: NDArray[np.int64], *,
    labels: dict[float, Any],
) -> tuple[dict[float, Moments], dict[float, NDArray[np.float64]], dict[float, NDArray[np.float32]]]:
    """Per aperture, every micro-image's moments of the white flattened by its envelope, its mass
    (mean intensity times the envelope there), and the flattened white. A white with more than
    :data:`NOT_WHITE_DARK_FRACTION` dark micro-images is refused: it is not a white image."""
    all_moments: dict[float, Moments] = {}
    masses: dict[float, NDArray[np.float64]] = {}
    flats: dict[float, NDArray[np.float32]] = {}
    for N, img in cleaned.items():
        dark = _dark_fraction(img, grid, k_all, l_all)
        if dark > NOT_WHITE_DARK_FRACTION:
            raise DataError(
                f"white image {labels[N]} has {100 * dark:.0f} % dark micro-images: it is not a white "
                "image (a checkerboard or scene?); give images of a uniform diffuser"
            )
        env = envelope(img, grid.diameter_px)
        flats[N] = flatten_by(img, env)
        all_moments[N] = micro_image_moments(flats[N], grid, k_all, l_all)
        masses[N] = all_moments[N].mean_intensity * _sample(env, all_moments[N].centre_px)
    return all_moments, masses, flats


def _lens_types(moments: dict[float, Moments], n_ref: float, n_types: int
                ) -> tuple[TypeClassification, TypeLayout, dict[float, NDArray[np.int64]]]:
    """The micro-lens types (:func:`classify_types`), their layout and each aperture's micro-images'
    types. Types come from the variance at every aperture (features joined on (k, l)), less the
    smooth trend across the sensor that a tilted MLA gives every type alike."""
    common = _common_nodes(moments)
    feats = np.stack([detrended(moments[N].variance_px2[idx], moments[N].centre_px[idx]) for N, idx in common.items()], axis=1)
    ref_mom = moments[n_ref]
    kc = ref_mom.k[common[n_ref]]
    lc = ref_mom.l[common[n_ref]]
    types = classify_types(kc, lc, feats, max(n_types, 1)) if n_types > 0 else classify_types(kc, lc, feats, 1)
    layout = types.layout if n_types > 0 else TypeLayout(0)
    type_of = {N: layout.type_of(moments[N].k, moments[N].l) if n_types > 0 else np.zeros(len(moments[N].k), dtype=np.int64)
               for N in moments}
    return types, layout, type_of


def _inferred_configuration(fit: InternalsFit, pixel_size_mm: float) -> Configuration:
    """The configuration the whites imply when the spec gives none: unfocused when every |q_i| is
    below :data:`UNFOCUSED_Q_PX`; a Galilean and a Keplerian camera give the same radius law, so
    otherwise the user must say."""
    q_px = np.abs(np.array(fit.omega.q_mm)) / pixel_size_mm
    if len(q_px) and float(q_px.max()) < UNFOCUSED_Q_PX:
        return Configuration.UNFOCUSED
    raise DataError(
        "white images cannot tell a Galilean from a Keplerian camera (the radius law has the same "
        f"magnitude in both; |q_i| = {np.round(q_px, 2).tolist()} px rules out unfocused): "
        "set camera_spec.configuration"
    )


def _without_stray_whites(
    fit: InternalsFit, moments: dict[float, Moments], type_of: dict[float, NDArray[np.int64]], white_stats: dict[float, Any],
    names: dict[float, str], n_types: int, *, configuration: Configuration, fit_args: dict[str, Any],
) -> tuple[InternalsFit, list[float]]:
    """Ω without the whites that the aperture hardly shapes and that leave the radius law
    (:func:`checks.check_used_whites`), checked again; (the fit, the whites left out)."""
    left_out = checks.check_used_whites(white_stats, moments, type_of, [d.f_number for d in fit.apertures if d.used],
                                        names, n_types)
    if left_out:
        fit = fit_internals(moments, type_of, configuration=configuration, left_out=left_out, **fit_args)
        again = checks.check_used_whites(white_stats, moments, type_of, [d.f_number for d in fit.apertures if d.used],
                                         names, n_types)
        if again:
            raise checks.WhiteImageError(f"white images {', '.join(names[N] for N in (*left_out, *again))} leave the "
                                         "radius law of the others: check their f_numbers in manifest.json")
    return fit, left_out


def precalibrate(
    whites: list[WhiteImage],
    spec: CameraSpec,
    *,
    checkerboard_f_number: float,
    estimator: str = "variance",
    color: str = "grey",
    full_scale: float | None = None,
    natural_vignetting: bool = False,
) -> Precalibration:
    """White images → micro-image grid, types, Ω and the initial camera (paper §3).

    Parameters
    ----------
    whites : white raw images at ≥ 2 apertures.
    spec : the camera's nominal specification.
    checkerboard_f_number : N of the calibration images (stored in Ω and the camera).
    estimator : ``"variance"`` (exact moment law, default) or ``"paper"`` (α·σ line fit).
    color : how the whites were stored (the manifest's ``image_format.color``), for the white-image
        checks (:mod:`plenocal.precalib.checks`).
    full_scale : the images' value at the stored full-scale code (1.0 for images read by
        :func:`plenocal.io.images.read_raw_image`); None skips the image checks (exposure, mosaic,
        JPEG), which need it; the f-number checks run whatever it is.
    natural_vignetting : the whites' micro-image variances less what natural vignetting adds to
        them (:func:`plenocal.precalib.radii.natural_vignetting_excess_px2` at the first fit's
        R_a, R_b and d), Ω fitted again (experimental, off: ``docs/model.md``, "Natural vignetting").
    """
    H, W = _check_whites(whites)
    _check_spec(spec, (H, W))
    assert spec.lattice is not None and spec.n_types is not None
    by_n = {float(w.f_number): w for w in whites}
    names = {N: w.name or f"f/{N:g}" for N, w in by_n.items()}
    labels = {N: w.name or N for N, w in by_n.items()}  # the refusals' own wording of a white
    stats = checks.check_white_images([(names[N], np.asarray(w.image) / full_scale) for N, w in by_n.items()],
                                      color=color) if full_scale is not None else {}
    cleaned = {N: clean_image(w.image) for N, w in by_n.items()}
    hexagonal = spec.lattice.kind is not LatticeKind.ORTHOGONAL
    n_ref = reference_white(cleaned)
    det = detect_centres(cleaned[n_ref], hexagonal=hexagonal)
    first_fit = fit_grid(det.uv, spec.lattice, (H, W))
    k_all, l_all = spec.lattice.all_indices()
    all_moments, masses, flats = _white_moments(cleaned, first_fit.grid, k_all, l_all, labels=labels)
    # Micro-images that do not follow the white-image model (clipped, distorted by the lens'
    # pupil, dark) are left out of the grid, the types, Ω and the MIC observations.
    grid_fit, conformities = _conforming_grid(first_fit, all_moments, masses, n_ref, (H, W))
    grid = grid_fit.grid
    moments = {N: all_moments[N].select(conformities[N].ok) for N in all_moments}
    for N, m in moments.items():
        if len(m.k) < MIN_CONFORMING_MICRO_IMAGES:
            raise DataError(
                f"white image {labels[N]}: only {len(m.k)} micro-images follow the white-image model "
                f"(need {MIN_CONFORMING_MICRO_IMAGES}; {conformities[N].summary()}): the lens clips or distorts almost "
                "every micro-image; check that the white is evenly lit and in focus range, or use whites at smaller apertures"
            )
    n_types = spec.n_types
    types, layout, type_of = _lens_types(moments, n_ref, n_types)
    checks.check_aperture_order(moments, type_of, names, n_types)

    fit_args = dict(n_types=n_types, pixel_size_mm=spec.pixel_size_mm, micro_image_pitch_px=grid.diameter_px,
                    f_number=checkerboard_f_number, estimator=estimator, reference_uv_px=mla_origin_uv(grid), images=flats)
    configuration = spec.configuration
    inferred = configuration is None
    try:
        fit = fit_internals(moments, type_of, configuration=configuration or Configuration.GALILEAN, **fit_args)
    except InternalsError as exc:
        raise PrecalibrationError(str(exc), PartialPrecalibration(grid_fit, types, moments, exc.apertures)) from None
    if configuration is None:
        configuration = _inferred_configuration(fit, spec.pixel_size_mm)
        fit = fit_internals(moments, type_of, configuration=configuration, **fit_args)
    white_stats = {N: stats[names[N]] for N in by_n if names[N] in stats}
    fit, left_out = _without_stray_whites(fit, moments, type_of, white_stats, names, n_types,
                                          configuration=configuration, fit_args=fit_args)
    camera, omega = _initial_camera(fit, spec, configuration=configuration, size=(W, H), grid=grid, layout=layout,
                                    f_number=checkerboard_f_number)
    if natural_vignetting:
        excess = natural_vignetting_excess(fit.omega, list(moments), d_px=camera.d_mm / spec.pixel_size_mm)
        fit = fit_internals(moments, type_of, configuration=configuration, left_out=left_out or None, excess_px2=excess,
                            **fit_args)
        camera, omega = _initial_camera(fit, spec, configuration=configuration, size=(W, H), grid=grid, layout=layout,
                                        f_number=checkerboard_f_number)
    used = [d.f_number for d in fit.apertures if d.used]
    mic = _averaged_centres(flats, used, grid, k_all, l_all, conformities)
    return Precalibration(
        grid_fit=grid_fit,
        mic=mic,
        types=types,
        internals=fit,
        camera=camera,
        omega=omega,
        configuration=configuration,
        configuration_inferred=inferred,
        moments=moments,
        n_centres_detected=len(det.uv),
        conformity=conformities,
        grid_rms_all_px=_rms_against(grid, all_moments[n_ref]),
    )


def _initial_camera(fit: InternalsFit, spec: CameraSpec, *, configuration: Configuration, size: tuple[int, int],
                    grid: MicroImageGrid, layout: TypeLayout, f_number: float) -> tuple[PlenopticCamera, InternalParameters]:
    """The initial camera and Ω from a fit of Ω (:func:`plenocal.model.white.initial_camera`)."""
    W, H = size
    return initial_camera(
        fit.omega,
        tilt_xy_rad=initial_tilt(fit.omega, focal_length_mm=spec.main_lens_focal_length_mm,
                                 focus_distance_mm=spec.focus_distance_mm, configuration=configuration),
        focal_length_mm=spec.main_lens_focal_length_mm,
        focus_distance_mm=spec.focus_distance_mm,
        configuration=configuration,
        sensor_size_px=(W, H),
        mia=grid,
        type_layout=layout,
        f_number=f_number,
    )


def natural_vignetting_excess(omega: InternalParameters, f_numbers: list[float], *, d_px: float
                              ) -> dict[float, tuple[float, ...]]:
    """Per f-number and type, the variance natural vignetting adds to a central white micro-image
    (:func:`plenocal.precalib.radii.natural_vignetting_excess_px2` at Ω's R_a = |m|/N and R_b =
    |q_i|, px), for :func:`~plenocal.precalib.internals.fit_internals`' ``excess_px2``."""
    s = omega.pixel_size_mm
    lens_px = omega.micro_lens_pitch_mm / 2.0 / s
    q_px = np.abs(np.asarray(omega.q_mm, dtype=np.float64)) / s if omega.n_types else np.zeros(1)
    return {N: tuple(natural_vignetting_excess_px2(abs(omega.m_mm) / N / s, float(q), lens_radius_px=lens_px, d_px=d_px)
                     for q in q_px) for N in f_numbers}


GAP_FRACTION = 0.15
"""A white whose micro-images are separated has at least this fraction of dark (gap) pixels."""


def reference_white(cleaned: dict[float, NDArray[np.float32]]) -> float:
    """f-number of the white used to detect centres and fit the grid.

    The widest aperture whose micro-images are still separated by dark gaps (≥ 15 % of pixels
    below 10 % of the bright level): the brightest, least noisy micro-images that do not touch.
    Falls back to the smallest aperture.
    """
    for N in sorted(cleaned):
        img = cleaned[N]
        sub = img[:: max(1, img.shape[0] // 512), :: max(1, img.shape[1] // 512)]
        bright = float(np.percentile(sub, 99))
        if bright > 0 and float(np.mean(sub < 0.1 * bright)) >= GAP_FRACTION:
            return N
    return max(cleaned)


def _dark_fraction(image: NDArray[np.float32], grid, k: NDArray[np.int64], l: NDArray[np.int64]) -> float:
    """Fraction of the micro-images in the central half of the sensor (both axes) that are darker
    than :data:`DARK_LEVEL` of the bright level there (their 90th percentile).

    Only the centre counts: a real lens may leave the sensor's corners dark (an image circle
    smaller than the sensor), a scene has dark micro-images everywhere.
    """
    H, W = image.shape
    c = grid.centres(k, l)
    ok = central(c, (H, W), fraction=NOT_WHITE_REGION_FRACTION) & (c[:, 0] >= 1) & (c[:, 0] <= W - 2) & (c[:, 1] >= 1) & (c[:, 1] <= H - 2)
    c = c[ok]
    if len(c) == 0:
        return 0.0
    u, v = np.rint(c[:, 0]).astype(np.int64), np.rint(c[:, 1]).astype(np.int64)
    val = sum(image[v + dy, u + dx] for dy in (-1, 0, 1) for dx in (-1, 0, 1)) / 9.0
    bright = float(np.percentile(val, 90))
    return float(np.mean(val < DARK_LEVEL * max(bright, 1e-6)))


def _common_nodes(moments: dict[float, Moments]) -> dict[float, NDArray[np.int64]]:
    """Indices into each aperture's moments of the nodes present at every aperture."""
    keys = {N: m.l.astype(np.int64) * 100000 + m.k for N, m in moments.items()}
    common = None
    for v in keys.values():
        common = v if common is None else np.intersect1d(common, v)
    assert common is not None
    return {N: np.searchsorted(v, common) if np.all(np.diff(v) > 0) else np.nonzero(np.isin(v, common))[0] for N, v in keys.items()}


def _averaged_centres(
    flats: dict[float, NDArray[np.float32]],
    f_numbers: list[float],
    grid,
    k_all: NDArray[np.int64],
    l_all: NDArray[np.int64],
    conformities: dict[float, Conformity],
) -> MicroImageCentres:
    """Sub-pixel centres at the grid nodes, averaged over the usable apertures where each follows
    the white-image model."""
    c0 = grid.centres(k_all, l_all)
    sums = np.zeros_like(c0)
    counts = np.zeros(len(c0))
    lin_all = l_all * grid.lattice.width + k_all
    for N in f_numbers:
        conf = conformities[N]
        lin_ok = np.sort(conf.l[conf.ok] * grid.lattice.width + conf.k[conf.ok])
        res = refine_centroids(flats[N], c0, grid.diameter_px / 2.0 - 1.0)
        # Map refined centres back to their node (refine drops border and faint ones).
        kk, ll = grid.nearest(res.uv[:, 0], res.uv[:, 1])
        lin = ll * grid.lattice.width + kk
        pos = np.searchsorted(lin_all, lin)
        ok = (pos < len(lin_all)) & (lin_all[np.minimum(pos, len(lin_all) - 1)] == lin)
        ok &= np.isin(lin, lin_ok, assume_unique=False)
        np.add.at(sums, pos[ok], res.uv[ok])
        np.add.at(counts, pos[ok], 1)
    have = counts > 0
    uv = sums[have] / counts[have, None]
    return MicroImageCentres(k_all[have], l_all[have], uv[:, 0], uv[:, 1])


MIN_CONFORMING_MICRO_IMAGES = 100
"""Fewer micro-images that follow the white-image model in one white: pre-calibration fails
(Ω and the grid would rest on too few)."""


def _sample(image: NDArray[np.float32], uv_px: NDArray[np.float64]) -> NDArray[np.float64]:
    """``image`` at the nearest pixel of each (u, v) (M, 2), clipped to the image."""
    H, W = image.shape
    u = np.clip(np.rint(uv_px[:, 0]).astype(np.int64), 0, W - 1)
    v = np.clip(np.rint(uv_px[:, 1]).astype(np.int64), 0, H - 1)
    return image[v, u].astype(np.float64)


def _rms_against(grid, moments: Moments) -> float:
    r = moments.centre_px - grid.centres(moments.k, moments.l)
    return float(np.sqrt(np.mean(np.sum(r * r, axis=1)))) if len(r) else float("nan")


def _conforming_grid(
    first_fit: GridFit,
    moments: dict[float, Moments],
    masses: dict[float, NDArray[np.float64]],
    n_ref: float,
    image_shape: tuple[int, int],
) -> tuple[GridFit, dict[float, Conformity]]:
    """Every white's conformity, and the grid refitted to the reference white's conforming centres."""
    lattice = first_fit.grid.lattice
    out = {N: conformity(m, masses[N], lattice, image_shape, f_number=N) for N, m in moments.items()}
    ref = out[n_ref]
    keep = np.isin(first_fit.l * lattice.width + first_fit.k, ref.l[ref.ok] * lattice.width + ref.k[ref.ok])
    if np.all(keep) or int(keep.sum()) < MIN_CONFORMING_MICRO_IMAGES:
        return first_fit, out
    return refit_grid(first_fit, keep), out
