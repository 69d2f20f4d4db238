"""Main-lens prescriptions: sequential surfaces from the object side (``docs/simulator.md``).

A :class:`Prescription` is data, like pbrt's lens files: surfaces in order from the scene towards
the sensor, each with

- its kind: an exact sphere (``SPHERE``; radius ``inf`` = plane) or an **ideal** (paraxial)
  thin-lens surface (``IDEAL``) of focal length f, which maps every ray exactly by the thin-lens
  law on direction tangents, tan′ = tan − y/f (perfect imaging of planes, no aberration), so that
  idealised systems — the paper's thin lens, an ideal thick lens, an ideal lens with its stop in
  front or behind — are prescriptions too; optional third-order terms on an ideal surface add one
  aberration at a time (:class:`Surface`: spherical, field curvature, distortion);
- the radius of curvature R (mm, ``inf`` = plane; **R > 0: centre of curvature on the sensor
  side**), the thickness after it (mm, vertex to next vertex) and the refractive index after it
  (one wavelength, the d-line 587.56 nm); the medium before surface 1 is air (n = 1);
- its clear semi-diameter (mm; ``inf`` = unlimited), and whether it is the **aperture stop**,
  whose semi-diameter is set from the f-number N = EFL / paraxial entrance-pupil diameter
  (:func:`plenocal.sim.optics.paraxial.stop_semi_diameter_mm`).

Positions along the axis (``plenocal.sim.optics.paraxial``) are measured from the vertex of
surface 1, positive towards the sensor ("lens coordinates"); the camera frame of
:mod:`plenocal.sim.optics.camera` is derived from them.

This module is pure: reading a prescription file is :mod:`plenocal.io.prescription`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from enum import Enum

from plenocal.errors import ModelError

AIR_INDEX = 1.0
"""Refractive index of air (the medium before surface 1, and around ideal surfaces)."""
MAX_INDEX = 4.0
"""Largest refractive index accepted (germanium in the infrared is ~4; optical glasses < 2.1)."""


class SurfaceKind(Enum):
    """How a surface acts on rays."""

    SPHERE = "sphere"
    """An exact sphere (plane when the radius is infinite): Snell's law at the true intersection."""
    IDEAL = "ideal"
    """A paraxial thin lens in a plane: tan′ = tan − y/f exactly, in air on both sides."""


@dataclass(frozen=True)
class Surface:
    """One surface of a sequential main lens (see the module docstring for signs).

    Attributes
    ----------
    thickness_mm : float
        Distance along the axis from this vertex to the next one (>= 0; the last surface's
        thickness is the design's back focus and is not used to place the lens in a camera).
    index_after : float
        Refractive index of the medium after the surface (d-line), >= 1.
    kind : SurfaceKind
    radius_mm : float
        Radius of curvature (``inf`` = plane), SPHERE only.
    focal_length_mm : float
        Focal length of an IDEAL surface (non-zero; ``inf`` = no power).
    semi_diameter_mm : float
        Clear semi-diameter (``inf`` = unlimited). For the stop: the design's value, replaced by
        the f-number's when a camera is built.
    is_stop : bool
    glass : str
        The glass's catalogue name (documentation only; the index is what is traced).
    spherical, field_curvature, distortion : float
        Third-order terms of an IDEAL surface, each alone an aberration of that kind. With y the
        ray's height on the surface and t its object-side direction tangent (the field angle's
        tangent for an object at infinity), the image-side tangent is

            t′ = t − y/f − spherical·|y|²·y − field_curvature·|t|²·y − distortion·|t|²·t

        (mm⁻³, mm⁻¹ and unitless): spherical aberration (a ray from infinity at height y crosses
        the axis at f/(1 + spherical·f·y²), about spherical·f²·y² in front of the focus), a
        defocus growing with the field angle squared, the same in every azimuth (a curved field
        without astigmatism: a bundle at field tangent t focuses at f/(1 + field_curvature·f·|t|²)),
        and radial distortion of the chief ray (image height f·t·(1 − distortion·|t|²) for an
        object at infinity). No paraxial effect.
    """

    thickness_mm: float
    index_after: float = AIR_INDEX
    kind: SurfaceKind = SurfaceKind.SPHERE
    radius_mm: float = math.inf
    focal_length_mm: float = math.inf
    semi_diameter_mm: float = math.inf
    is_stop: bool = False
    glass: str = ""
    spherical: float = 0.0
    field_curvature: float = 0.0
    distortion: float = 0.0

    def __post_init__(self) -> None:
        for name in ("thickness_mm", "index_after", "radius_mm", "focal_length_mm", "semi_diameter_mm",
                     "spherical", "field_curvature", "distortion"):
            v = float(getattr(self, name))
            if math.isnan(v):
                raise ModelError(f"surface {name} must be a number, got nan")
            object.__setattr__(self, name, v)
        if not math.isfinite(self.thickness_mm) or self.thickness_mm < 0.0:
            raise ModelError(f"surface thickness_mm must be finite and >= 0, got {self.thickness_mm}")
        if not (AIR_INDEX <= self.index_after <= MAX_INDEX):
            raise ModelError(f"surface index_after must be in [1, {MAX_INDEX:g}], got {self.index_after}")
        if self.radius_mm == 0.0:
            raise ModelError("surface radius_mm must be non-zero (inf for a plane)")
        if self.focal_length_mm == 0.0:
            raise ModelError("ideal surface focal_length_mm must be non-zero")
        if not self.semi_diameter_mm > 0.0:
            raise ModelError(f"surface semi_diameter_mm must be > 0, got {self.semi_diameter_mm}")
        terms = (self.spherical, self.field_curvature, self.distortion)
        if any(not math.isfinite(x) for x in terms):
            raise ModelError("aberration terms must be finite")
        if self.kind is not SurfaceKind.IDEAL and any(terms):
            raise ModelError("aberration terms (spherical, field_curvature, distortion) are for ideal surfaces only")

    @property
    def curvature(self) -> float:
        """1/R (mm⁻¹), 0 for a plane or an ideal surface."""
        return 0.0 if self.kind is SurfaceKind.IDEAL else 1.0 / self.radius_mm

    @property
    def power_ideal(self) -> float:
        """1/f of an ideal surface (mm⁻¹), 0 otherwise."""
        return 1.0 / self.focal_length_mm if self.kind is SurfaceKind.IDEAL else 0.0


@dataclass(frozen=True)
class Prescription:
    """A main lens: surfaces from the object side, exactly one of them the aperture stop.

    Attributes
    ----------
    name : str
    surfaces : tuple of Surface
    description : str
        Source and notes (design reference, how clear apertures were set).
    """

    name: str
    surfaces: tuple[Surface, ...]
    description: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "surfaces", tuple(self.surfaces))
        if len(self.surfaces) == 0:
            raise ModelError(f"lens '{self.name}' has no surfaces")
        stops = [i for i, s in enumerate(self.surfaces) if s.is_stop]
        if len(stops) != 1:
            raise ModelError(f"lens '{self.name}' must have exactly one stop surface, got {len(stops)}")
        if self.surfaces[-1].index_after != AIR_INDEX:
            raise ModelError(f"lens '{self.name}': the medium after the last surface must be air (n = 1)")
        for i, s in enumerate(self.surfaces):
            if s.kind is SurfaceKind.IDEAL and (self.index_before(i) != AIR_INDEX or s.index_after != AIR_INDEX):
                raise ModelError(f"lens '{self.name}': ideal surface {i + 1} must have air on both sides")

    @property
    def stop_index(self) -> int:
        """0-based index of the aperture stop."""
        return next(i for i, s in enumerate(self.surfaces) if s.is_stop)

    def index_before(self, i: int) -> float:
        """Refractive index of the medium before surface ``i`` (0-based)."""
        return AIR_INDEX if i == 0 else self.surfaces[i - 1].index_after

    @property
    def vertex_z_mm(self) -> tuple[float, ...]:
        """Vertex positions in lens coordinates (surface 1 at 0, + towards the sensor)."""
        z, out = 0.0, []
        for s in self.surfaces:
            out.append(z)
            z += s.thickness_mm
        return tuple(out)

    def scaled(self, factor: float) -> Prescription:
        """Every length multiplied by ``factor`` (> 0): same f-numbers, EFL × factor."""
        if not (math.isfinite(factor) and factor > 0.0):
            raise ModelError(f"scale factor must be finite and > 0, got {factor}")
        surfaces = tuple(
            dataclasses.replace(
                s,
                thickness_mm=s.thickness_mm * factor,
                radius_mm=s.radius_mm * factor,
                focal_length_mm=s.focal_length_mm * factor,
                semi_diameter_mm=s.semi_diameter_mm * factor,
                # t′ − t is unitless: the |y|²y term scales as 1/length³, |t|²y as 1/length.
                spherical=s.spherical / factor**3,
                field_curvature=s.field_curvature / factor,
            )
            for s in self.surfaces
        )
        return dataclasses.replace(self, surfaces=surfaces)

    def scaled_to_efl(self, efl_mm: float) -> Prescription:
        """The prescription scaled so that its paraxial EFL is ``efl_mm``."""
        from plenocal.sim.optics.paraxial import system_matrix

        efl = 1.0 / -system_matrix(self)[1, 0]
        if not (math.isfinite(efl) and efl > 0.0):
            raise ModelError(f"lens '{self.name}' has no positive focal length (EFL = {efl})")
        return self.scaled(efl_mm / efl)

    def with_stop_semi_diameter(self, semi_diameter_mm: float) -> Prescription:
        """A copy whose stop has this clear semi-diameter."""
        i = self.stop_index
        surfaces = list(self.surfaces)
        surfaces[i] = dataclasses.replace(surfaces[i], semi_diameter_mm=float(semi_diameter_mm))
        return dataclasses.replace(self, surfaces=tuple(surfaces))

    def with_semi_diameters(self, semi_diameters_mm: tuple[float, ...]) -> Prescription:
        """A copy with every clear semi-diameter replaced (one per surface)."""
        if len(semi_diameters_mm) != len(self.surfaces):
            raise ModelError(f"expected {len(self.surfaces)} semi-diameters, got {len(semi_diameters_mm)}")
        surfaces = tuple(
            dataclasses.replace(s, semi_diameter_mm=float(h)) for s, h in zip(self.surfaces, semi_diameters_mm, strict=True)
        )
        return dataclasses.replace(self, surfaces=surfaces)


def thin_lens(focal_length_mm: float, *, name: str = "thin") -> Prescription:
    """The paper's idealisation: one ideal surface of focal length f with the stop in it."""
    return Prescription(
        name,
        (Surface(thickness_mm=focal_length_mm, kind=SurfaceKind.IDEAL, focal_length_mm=focal_length_mm, is_stop=True),),
        "the paper's thin main lens: one ideal surface, aperture stop in the lens plane",
    )
