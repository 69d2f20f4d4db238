"""Micro-lenses of the real-optics simulator: refractive plano-convex caps on a substrate, or
thin ideal lenslets (``docs/simulator.md``).

**Real lenslets** (the validation set's kind): spherical caps of index n, curved side towards the
main lens, standing on the front face of one flat substrate of thickness t_s, whose flat rear
face is an air gap g in front of the sensor. An opaque mask on the substrate's front face blocks
everything outside each lenslet's clear aperture (radius r_c <= pitch/2, the cap's edge). A type
of paraxial focal length f_i has the cap radius R_i = f_i·(n − 1) (a plano-convex lens's power
does not depend on its thickness), the sag s_i = R_i − √(R_i² − r_c²) and the centre thickness
t_i = s_i + t_s. Its front principal plane H is at the curved vertex and its rear one H′ at
t_i·(1 − 1/n) behind it (thick-lens formulas, checked against the y–nu trace in the tests).
Caps of different radii on one substrate have different sags, so their vertices — and H, H′ —
are not at the same height: per-type D_i and d_i differ by about a micrometre.

**Thin lenslets** (the paper's and plenocal's thin tracer's): an ideal thin lens of focal length
f_i in the lenslet plane, with a disc aperture of radius pitch/2 (full pitch, as
``plenocal.sim.tracer``) or r_c; H = H′ in that plane.

Each type is traced as a small prescription in **lenslet coordinates**: z from the lenslet's
front vertex (its H) along its axis, positive towards the sensor, x and y along the MLA's axes.
Real: the cap (sphere, semi-diameter r_c, glass after), the mask plane at z = s_i (semi-diameter
r_c, glass on both sides), the rear face at z = t_i (air after). Thin: one ideal surface with its
aperture.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from plenocal.errors import ModelError
from plenocal.sim.optics.prescription import Prescription, Surface, SurfaceKind

FUSED_SILICA_ND = 1.45846
"""n_d of fused silica (Corning 7980 / Suprasil, 587.56 nm): the validation set's lenslets."""
DEFAULT_SUBSTRATE_MM = 0.1
"""Substrate thickness of the validation set's MLA."""
DEFAULT_CLEAR_FRACTION = 0.0626 / (0.127454 / 2.0)
"""Clear-aperture radius / (pitch/2) of the validation set's real lenslets (0.0626 mm on a
0.127454 mm pitch: 0.982)."""


class LensletKind(Enum):
    """How the micro-lenses are traced."""

    REAL = "real"
    """Refractive plano-convex caps on a substrate, mask outside the clear aperture."""
    THIN = "thin"
    """Ideal thin lenses with a disc aperture (the paper's idealisation)."""


@dataclass(frozen=True)
class LensletDesign:
    """The micro-lenses' build, shared by every type.

    Attributes
    ----------
    kind : LensletKind
    index : float
        Refractive index of caps and substrate (REAL).
    substrate_mm : float
        Substrate thickness t_s (REAL), >= 0.
    clear_radius_mm : float or None
        Clear-aperture radius r_c; None: :data:`DEFAULT_CLEAR_FRACTION` × pitch/2 for REAL,
        pitch/2 (full pitch) for THIN.
    """

    kind: LensletKind = LensletKind.REAL
    index: float = FUSED_SILICA_ND
    substrate_mm: float = DEFAULT_SUBSTRATE_MM
    clear_radius_mm: float | None = None

    def __post_init__(self) -> None:
        if not (1.0 < self.index <= 4.0):
            raise ModelError(f"lenslet index must be in (1, 4], got {self.index}")
        if not (math.isfinite(self.substrate_mm) and self.substrate_mm >= 0.0):
            raise ModelError(f"lenslet substrate thickness must be >= 0 mm, got {self.substrate_mm}")
        if self.clear_radius_mm is not None and not self.clear_radius_mm > 0.0:
            raise ModelError(f"lenslet clear radius must be > 0 mm, got {self.clear_radius_mm}")

    def clear_radius(self, pitch_mm: float) -> float:
        """r_c for a lattice of (mean) pitch ``pitch_mm``; must not exceed pitch/2 (no overlap)."""
        r = self.clear_radius_mm
        if r is None:
            r = pitch_mm / 2.0 * (DEFAULT_CLEAR_FRACTION if self.kind is LensletKind.REAL else 1.0)
        if r > pitch_mm / 2.0 * (1.0 + 1e-12):
            raise ModelError(f"lenslet clear radius {r:g} mm exceeds half the pitch ({pitch_mm / 2:g} mm): apertures would overlap")
        return float(r)


@dataclass(frozen=True)
class LensletType:
    """One lenslet type, in lenslet coordinates (module docstring), lengths in mm.

    Attributes
    ----------
    focal_length_mm : float
        Paraxial focal length f_i.
    cap_radius_mm : float
        R_i = f_i·(n − 1) (REAL; ``inf`` for THIN).
    sag_mm : float
        Height of the cap over the substrate's front face (0 for THIN).
    thickness_mm : float
        Centre thickness t_i = sag + substrate (0 for THIN).
    principal_gap_mm : float
        H → H′ = t_i·(1 − 1/n) (0 for THIN).
    clear_radius_mm : float
    """

    focal_length_mm: float
    cap_radius_mm: float
    sag_mm: float
    thickness_mm: float
    principal_gap_mm: float
    clear_radius_mm: float


def lenslet_types(design: LensletDesign, focal_lengths_mm: tuple[float, ...], pitch_mm: float) -> tuple[LensletType, ...]:
    """Per-type geometry for paraxial focal lengths ``focal_lengths_mm`` on a lattice of pitch
    ``pitch_mm``.

    Raises
    ------
    ModelError
        A cap too steep for its clear aperture (R_i <= r_c).
    """
    r_c = design.clear_radius(pitch_mm)
    out = []
    for f in focal_lengths_mm:
        if design.kind is LensletKind.THIN:
            out.append(LensletType(float(f), math.inf, 0.0, 0.0, 0.0, r_c))
            continue
        n = design.index
        R = f * (n - 1.0)
        if not R > r_c:
            raise ModelError(
                f"lenslet focal length {f:g} mm gives a cap radius {R:g} mm <= its clear radius {r_c:g} mm "
                f"(index {n:g}): no spherical cap can have that aperture"
            )
        sag = R - math.sqrt(R * R - r_c * r_c)
        t = sag + design.substrate_mm
        out.append(LensletType(float(f), R, sag, t, t * (1.0 - 1.0 / n), r_c))
    return tuple(out)


def lenslet_prescription(design: LensletDesign, kind: LensletType, *, back_focus_mm: float = 1.0) -> Prescription:
    """The lenslet as a prescription from its front vertex (module docstring); the mask is the
    stop. ``back_focus_mm``: thickness after the last surface (air gap to the sensor, or any)."""
    r_c = kind.clear_radius_mm
    if design.kind is LensletKind.THIN:
        return Prescription("thin lenslet", (Surface(
            thickness_mm=back_focus_mm, kind=SurfaceKind.IDEAL, focal_length_mm=kind.focal_length_mm,
            semi_diameter_mm=r_c, is_stop=True,
        ),))
    n = design.index
    return Prescription("lenslet", (
        Surface(thickness_mm=kind.sag_mm, index_after=n, radius_mm=kind.cap_radius_mm, semi_diameter_mm=r_c),
        Surface(thickness_mm=design.substrate_mm, index_after=n, semi_diameter_mm=r_c, is_stop=True),
        Surface(thickness_mm=back_focus_mm),
    ))

