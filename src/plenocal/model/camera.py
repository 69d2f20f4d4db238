"""The physical parts of a plenoptic camera, as frozen dataclasses, composed into one camera.

Paper §2.1 (fig:notations); conventions in ``docs/conventions.md``. Every length is in mm, image
quantities in pixels, angles in radians.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
from numpy.typing import ArrayLike, NDArray

from plenocal.errors import ModelError
from plenocal.model.geometry import matrix_from_euler_xyz
from plenocal.model.lattice import Lattice, LatticeKind, TypeLayout

FloatArray = NDArray[np.float64]


class Configuration(Enum):
    """Internal configuration (paper eq:configuration)."""

    GALILEAN = "galilean"
    """f > d: the micro-lenses image virtual points behind the sensor (Raytrix R12)."""
    KEPLERIAN = "keplerian"
    """f < d: the micro-lenses image points in front of the MLA."""
    UNFOCUSED = "unfocused"
    """f = d: sensor in the micro-lens focal plane (Lytro-like)."""

    @property
    def radius_sign(self) -> float:
        """Sign of the metric micro-image radius R (paper eq:miradiussgn)."""
        return 1.0 if self is Configuration.KEPLERIAN else -1.0


class RhoForm(Enum):
    """How the blur radius ρ of a BAP feature depends on the micro-lens (paper eq:blurradius with
    A = λ·Δc; reference §4.7). With r = (A/2)·(d_f/f_i − 1 − d_v/a), a the signed depth of the
    virtual point from the micro-lens plane:

    - ``LEGACY`` (the paper, libpleno Dec-2020): d_f = d_v = d, the MLA–sensor distance at the MLA
      frame origin, for every lens;
    - ``HEAD`` (libpleno HEAD): d_f = d_v = d(k, l), each lens' own distance to the sensor under the
      tilted MLA;
    - ``VIRTUAL_DEPTH``: d_v = d(k, l), d_f = d: each lens' own virtual depth υ = −a/d(k, l) (what the
      disparity of the detector measures, eq:virtdepth) in eq:radiusfinal with Ω's constant term at
      the reference lens (what the detector uses: one q'_i per type, eq:radiusfinal).
    """

    LEGACY = "legacy"
    HEAD = "head"
    VIRTUAL_DEPTH = "virtual-depth"


def infer_configuration(focal_length_mm: float, d_mm: float, *, rtol: float = 0.02) -> Configuration:
    """Configuration from a micro-lens focal length and the MLA–sensor distance d.

    ``|f − d| <= rtol · d`` counts as unfocused.
    """
    if abs(focal_length_mm - d_mm) <= rtol * d_mm:
        return Configuration.UNFOCUSED
    return Configuration.GALILEAN if focal_length_mm > d_mm else Configuration.KEPLERIAN


def _positive(name: str, value: float) -> float:
    v = float(value)
    if not np.isfinite(v) or v <= 0.0:
        raise ModelError(f"{name} must be > 0, got {value!r}")
    return v


def _vec(name: str, value: ArrayLike, n: int) -> tuple[float, ...]:
    a = np.asarray(value, dtype=np.float64).reshape(-1)
    if a.shape != (n,) or not np.all(np.isfinite(a)):
        raise ModelError(f"{name} must be {n} finite numbers, got {value!r}")
    return tuple(float(x) for x in a)


@dataclass(frozen=True)
class MainLens:
    """The main lens as its paraxial equivalent: a thin lens in the plane z = 0 of the camera frame
    (paper eq:thinlens), where the object space's front principal plane H and the image space's
    rear principal plane H′ coincide, and its **exit pupil** at z = −e.

    The paper puts the aperture in the lens plane (e = 0). A real lens has its aperture stop inside
    it, so its exit pupil — the image of the stop that the micro-lenses see, whose centre they image
    onto the micro-image centres — lies a distance e from H′ (e > 0: behind H′, towards the
    sensor). For an aberration-free lens the entrance and exit pupils are conjugate through the
    lens, so the pupil magnification is m_p = 1 − e/F and the exit pupil's radius is
    (F − e)/(2N) (``docs/model.md``, "The exit pupil").

    Attributes
    ----------
    focal_length_mm : F.
    f_number : N = F / (entrance-pupil diameter).
    exit_pupil_mm : e, the exit pupil's distance behind H′ (towards the sensor), mm; 0 = the paper.
    """

    focal_length_mm: float
    f_number: float
    exit_pupil_mm: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "focal_length_mm", _positive("main_lens.focal_length_mm", self.focal_length_mm))
        object.__setattr__(self, "f_number", _positive("main_lens.f_number", self.f_number))
        e = float(self.exit_pupil_mm)
        if not np.isfinite(e) or e >= self.focal_length_mm:
            raise ModelError(
                f"main_lens.exit_pupil_mm must be finite and < the focal length {self.focal_length_mm} "
                f"(the pupil magnification 1 − e/F must be > 0), got {self.exit_pupil_mm!r}"
            )
        object.__setattr__(self, "exit_pupil_mm", e)

    @property
    def aperture_mm(self) -> float:
        """Entrance-pupil diameter F/N."""
        return self.focal_length_mm / self.f_number

    @property
    def pupil_magnification(self) -> float:
        """m_p = 1 − e/F: exit-pupil over entrance-pupil diameter (conjugate pupils)."""
        return 1.0 - self.exit_pupil_mm / self.focal_length_mm

    @property
    def exit_pupil_radius_mm(self) -> float:
        """(F − e)/(2N): the radius of the exit pupil."""
        return (self.focal_length_mm - self.exit_pupil_mm) / (2.0 * self.f_number)


@dataclass(frozen=True)
class Distortion:
    """Distortion of the virtual space: Brown–Conrady lateral distortion (paper eq:distortion) and,
    beyond the paper, a radial depth distortion.

    Q1, Q2, Q3 in mm⁻², mm⁻⁴, mm⁻⁶; P1, P2 in mm⁻¹. The depth distortion moves a virtual point
    along the axis by Δz′ = Z1·r′² + Z2·r′⁴, r′² = x′² + y′² of the (undistorted) virtual point
    (Z1 in mm⁻¹, Z2 in mm⁻³): a real main lens's curved field (its image of a plane bends towards
    the lens off axis, Z1 > 0 in the camera frame whose z points to the scene), libpleno's
    Heinze depth-distortion model with D0 = 0 (``docs/model.md``, "Field curvature").
    """

    q1: float = 0.0
    q2: float = 0.0
    q3: float = 0.0
    p1: float = 0.0
    p2: float = 0.0
    z1: float = 0.0
    z2: float = 0.0

    def depth(self, x: FloatArray, y: FloatArray) -> FloatArray:
        """Δz′ = Z1·r² + Z2·r⁴ of virtual points at lateral (x, y), mm."""
        r2 = x * x + y * y
        return self.z1 * r2 + self.z2 * r2 * r2

    @property
    def has_depth(self) -> bool:
        """Whether the depth distortion is not zero."""
        return self.z1 != 0.0 or self.z2 != 0.0

    def apply(self, x: FloatArray, y: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Distorted (x_u, y_u) of virtual-space (x, y) in mm (paper eq:distortion)."""
        r2 = x * x + y * y
        radial = self.q1 * r2 + self.q2 * r2 * r2 + self.q3 * r2 * r2 * r2
        xu = x + x * radial + self.p1 * (r2 + 2.0 * x * x) + 2.0 * self.p2 * x * y
        yu = y + y * radial + self.p2 * (r2 + 2.0 * y * y) + 2.0 * self.p1 * x * y
        return xu, yu

    def invert(self, xu: FloatArray, yu: FloatArray, *, iterations: int = 20) -> tuple[FloatArray, FloatArray]:
        """(x, y) such that ``apply(x, y) == (xu, yu)``, by fixed-point iteration."""
        x, y = np.array(xu, dtype=np.float64), np.array(yu, dtype=np.float64)
        for _ in range(iterations):
            fx, fy = self.apply(x, y)
            x = x - (fx - xu)
            y = y - (fy - yu)
        return x, y

    @property
    def is_zero(self) -> bool:
        """Whether the lateral (Brown–Conrady) distortion is zero (the depth terms are not looked at)."""
        return self.q1 == self.q2 == self.q3 == self.p1 == self.p2 == 0.0


@dataclass(frozen=True)
class MicroLensArray:
    """The micro-lens array (MLA): lattice, pitch, pose in the camera frame, focal lengths.

    Micro-lens (k, l) has its centre at ``C = t + R · (c − g(k, l), 0)`` in the camera frame, with
    ``g`` the lattice position, ``c`` the lattice's bounding-box corner (so the MLA frame origin
    is the corner of the array at the most negative camera x and y, paper §2.1), ``R`` the tilt
    (XYZ Euler angles) and ``t`` its translation (t_z = −D). See ``docs/conventions.md``.
    """

    lattice: Lattice
    pitch_mm: tuple[float, float]
    rotation_xyz_rad: tuple[float, float, float] = (0.0, 0.0, 0.0)
    translation_mm: tuple[float, float, float] = (0.0, 0.0, -1.0)
    focal_lengths_mm: tuple[float, ...] = ()
    types: TypeLayout = field(default_factory=lambda: TypeLayout(0))

    def __post_init__(self) -> None:
        p = _vec("mla.pitch_mm", self.pitch_mm, 2)
        _positive("mla.pitch_mm[0]", p[0])
        _positive("mla.pitch_mm[1]", p[1])
        object.__setattr__(self, "pitch_mm", p)
        object.__setattr__(self, "rotation_xyz_rad", _vec("mla.rotation_xyz_rad", self.rotation_xyz_rad, 3))
        object.__setattr__(self, "translation_mm", _vec("mla.translation_mm", self.translation_mm, 3))
        f = tuple(float(x) for x in self.focal_lengths_mm)
        for i, fi in enumerate(f):
            _positive(f"mla.focal_lengths_mm[{i}]", fi)
        if len(f) != self.types.n_types:
            raise ModelError(
                f"mla.focal_lengths_mm has {len(f)} values but the type layout has "
                f"{self.types.n_types} types"
            )
        object.__setattr__(self, "focal_lengths_mm", f)

    @property
    def n_types(self) -> int:
        return self.types.n_types

    @property
    def rotation(self) -> FloatArray:
        return matrix_from_euler_xyz(self.rotation_xyz_rad)

    @property
    def corner(self) -> tuple[float, float]:
        """The bounding-box corner ``c`` of the lattice positions, in mm."""
        return lattice_corner(self.lattice, self.pitch_mm)


def lattice_corner(lattice: Lattice, pitch: tuple[float, float]) -> tuple[float, float]:
    """Largest x and y over the lattice positions g(k, l) (unit of ``pitch``)."""
    w, h = lattice.width, lattice.height
    ks = np.array([w - 1, w - 1, max(w - 2, 0)])
    ls = np.array([h - 1, max(h - 2, 0), h - 1])
    gx, gy = lattice.positions(ks, ls, pitch)
    return float(gx.max()), float(gy.max())


@dataclass(frozen=True)
class Sensor:
    """The sensor plane, parallel to the main lens at z = −distance_mm (= −(D + d)).

    A sensor point (X, Y) in camera coordinates is at pixel (u0 − X/s, v0 − Y/s).
    """

    pixel_size_mm: float
    width_px: int
    height_px: int
    principal_point_px: tuple[float, float]
    distance_mm: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "pixel_size_mm", _positive("sensor.pixel_size_mm", self.pixel_size_mm))
        for name in ("width_px", "height_px"):
            v = getattr(self, name)
            if int(v) != v or v < 1:
                raise ModelError(f"sensor.{name} must be a positive integer, got {v!r}")
            object.__setattr__(self, name, int(v))
        object.__setattr__(self, "principal_point_px", _vec("sensor.principal_point_px", self.principal_point_px, 2))
        object.__setattr__(self, "distance_mm", _positive("sensor.distance_mm", self.distance_mm))

    @property
    def shape(self) -> tuple[int, int]:
        """Image array shape (height, width)."""
        return self.height_px, self.width_px


@dataclass(frozen=True)
class MicroImageGrid:
    """The micro-image array (MIA) in pixels: ``c(k, l) = offset + R(θ) · g(k, l)``."""

    lattice: Lattice
    pitch_px: tuple[float, float]
    rotation_rad: float = 0.0
    offset_px: tuple[float, float] = (0.0, 0.0)

    def __post_init__(self) -> None:
        p = _vec("mia.pitch_px", self.pitch_px, 2)
        _positive("mia.pitch_px[0]", p[0])
        _positive("mia.pitch_px[1]", p[1])
        object.__setattr__(self, "pitch_px", p)
        object.__setattr__(self, "rotation_rad", float(self.rotation_rad))
        object.__setattr__(self, "offset_px", _vec("mia.offset_px", self.offset_px, 2))

    @property
    def diameter_px(self) -> float:
        """Mean pitch (p0 + p1)/2, the micro-image "diameter" (reference §2.1)."""
        return 0.5 * (self.pitch_px[0] + self.pitch_px[1])

    def centres(self, k: ArrayLike, l: ArrayLike) -> FloatArray:
        """Grid node positions (u, v), shape (..., 2)."""
        gx, gy = self.lattice.positions(k, l, self.pitch_px)
        c, s = np.cos(self.rotation_rad), np.sin(self.rotation_rad)
        u = self.offset_px[0] + c * gx - s * gy
        v = self.offset_px[1] + s * gx + c * gy
        return np.stack([u, v], axis=-1)

    def nearest(self, u: ArrayLike, v: ArrayLike) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Index (k, l) of the grid node nearest to pixel positions (unbounded)."""
        du = np.asarray(u, dtype=np.float64) - self.offset_px[0]
        dv = np.asarray(v, dtype=np.float64) - self.offset_px[1]
        c, s = np.cos(self.rotation_rad), np.sin(self.rotation_rad)
        return self.lattice.nearest_index(c * du + s * dv, -s * du + c * dv, self.pitch_px)


@dataclass(frozen=True)
class PlenopticCamera:
    """A plenoptic camera built from its named parts (paper eq:completemodel).

    Parameters
    ----------
    main_lens, distortion, mla, sensor : the physical parts.
    mia : MicroImageGrid, optional
        The micro-image grid (default: the central projection of the MLA from the exit pupil); its metric pitch Δc = s·(p0 + p1)/2 sets the micro-lens aperture
        A = λ·Δc used by the blur model (paper eq:mlinterdist, eq:radiusfinal).
    configuration : Configuration
        Internal configuration (Galilean, Keplerian or unfocused).
    focus_distance_mm : float
        Main-lens focus distance h (``inf`` for infinity).
    rho_form : RhoForm
        Which lens distances the blur radius uses (:class:`RhoForm`).
    """

    main_lens: MainLens
    distortion: Distortion
    mla: MicroLensArray
    sensor: Sensor
    mia: MicroImageGrid | None = None
    configuration: Configuration = Configuration.GALILEAN
    focus_distance_mm: float = float("inf")
    rho_form: RhoForm = RhoForm.VIRTUAL_DEPTH

    def __post_init__(self) -> None:
        if self.D_mm <= 0.0:
            raise ModelError(f"MLA must lie behind the main lens (mla.translation_mm[2] < 0), got D = {self.D_mm}")
        if self.d_mm <= 0.0:
            raise ModelError(
                f"sensor must lie behind the MLA: d = sensor.distance_mm − D = {self.d_mm} <= 0"
            )
        if self.D_mm - self.main_lens.exit_pupil_mm <= 0.0:
            raise ModelError(
                f"the exit pupil must lie in front of the MLA: D − e = {self.D_mm - self.main_lens.exit_pupil_mm} <= 0"
            )
        if self.mia is None:
            object.__setattr__(self, "mia", consistent_mia(self))
        if self.grid.lattice != self.mla.lattice:
            raise ModelError("mia and mla must share the same lattice (kind, width, height)")

    # --- distances (paper fig:notations) -------------------------------------------------
    @property
    def grid(self) -> MicroImageGrid:
        """The micro-image grid (never None after construction)."""
        assert self.mia is not None
        return self.mia

    @property
    def D_mm(self) -> float:
        """Main lens – MLA distance D (at the MLA frame origin)."""
        return -self.mla.translation_mm[2]

    @property
    def d_mm(self) -> float:
        """MLA – sensor distance d (at the MLA frame origin)."""
        return self.sensor.distance_mm - self.D_mm

    @property
    def exit_pupil_z_mm(self) -> float:
        """z of the exit-pupil centre in the camera frame, −e (0: the paper's lens plane)."""
        return -self.main_lens.exit_pupil_mm

    @property
    def lambda_(self) -> float:
        """λ = (D − e)/(D + d − e), the ratio of the micro-lens pitch to the micro-image pitch
        (paper eq:mlinterdist, whose D/(D + d) is the e = 0 case): micro-image centres are the
        central projection of the micro-lens centres from the exit-pupil centre."""
        e = self.main_lens.exit_pupil_mm
        return (self.D_mm - e) / (self.sensor.distance_mm - e)

    @property
    def micro_image_pitch_mm(self) -> float:
        """Δc = s · (p0 + p1)/2 of the micro-image grid, in mm."""
        return self.sensor.pixel_size_mm * self.grid.diameter_px

    @property
    def micro_lens_aperture_mm(self) -> float:
        """A = λ·Δc, the micro-lens aperture of the blur model (paper eq:radiusfinal)."""
        return self.lambda_ * self.micro_image_pitch_mm

    @property
    def n_types(self) -> int:
        return self.mla.n_types

    @property
    def principal_point_px(self) -> tuple[float, float]:
        return self.sensor.principal_point_px

    def replace(self, **changes: object) -> PlenopticCamera:
        """A copy with some parts replaced (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def with_consistent_mia(self) -> PlenopticCamera:
        """A copy whose micro-image grid is the central projection of the MLA from the exit pupil."""
        return self.replace(mia=consistent_mia(self))


def consistent_mia(camera: PlenopticCamera) -> MicroImageGrid:
    """The micro-image grid produced by projecting every micro-lens centre from the exit-pupil
    centre (MIC model; O when e = 0).

    Least-squares fit of pitch, rotation and offset to the projected centres (exact when the MLA
    is not tilted).
    """
    from plenocal.model.projection import micro_image_centres

    lattice = camera.mla.lattice
    k, l = lattice.all_indices()
    c = micro_image_centres(camera, k, l)
    gx, gy = lattice.positions(k, l, (1.0, 1.0))
    A = np.stack([np.ones_like(gx), gx, gy], axis=1)
    sol, *_ = np.linalg.lstsq(A, c, rcond=None)
    offset = sol[0]
    M = sol[1:].T  # c = offset + M @ (gx, gy)
    p0 = float(np.hypot(M[0, 0], M[1, 0]))
    p1 = float(np.hypot(M[0, 1], M[1, 1]))
    theta = float(np.arctan2(M[1, 0], M[0, 0]))
    return MicroImageGrid(lattice, (p0, p1), theta, (float(offset[0]), float(offset[1])))


__all__ = [
    "Configuration",
    "Distortion",
    "LatticeKind",
    "MainLens",
    "MicroImageGrid",
    "MicroLensArray",
    "PlenopticCamera",
    "RhoForm",
    "Sensor",
    "consistent_mia",
    "infer_configuration",
    "lattice_corner",
]
