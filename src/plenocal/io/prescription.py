"""Main-lens prescription files (format ``plenocal-lens``, ``docs/formats.md``).

A JSON object with ``format``, ``version``, ``name``, an optional ``description`` and
``surfaces``: a list, from the object side, of objects with

- ``thickness_mm`` (required, >= 0): to the next vertex;
- ``radius_mm``: radius of curvature, R > 0 when the centre of curvature is on the sensor side;
  ``null`` or absent for a plane;
- ``index`` (default 1 = air): refractive index after the surface (d-line); ``glass``: its name
  (documentation only);
- ``semi_diameter_mm``: clear semi-diameter, ``null`` or absent = unlimited (the stop's is set
  from the f-number when a camera is built);
- ``stop``: true on exactly one surface;
- ``kind``: ``"sphere"`` (default) or ``"ideal"`` with ``focal_length_mm`` (a paraxial thin lens,
  air on both sides) and optional third-order terms ``spherical`` (mm⁻³), ``field_curvature``
  (mm⁻¹), ``distortion`` (unitless), default 0 (``prescription.Surface``).

Every problem is one :class:`~plenocal.errors.InputFileError` line naming the file and the key.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from plenocal.errors import InputFileError, ModelError
from plenocal.io._json import Fields, read_document, write_document
from plenocal.sim.optics.prescription import MAX_INDEX, Prescription, Surface, SurfaceKind

LENS_FORMAT = "plenocal-lens"
MAX_LENGTH_MM = 1.0e5
"""Largest radius, thickness, focal length or semi-diameter accepted (100 m; a typo guard)."""
_ABERRATIONS = ("spherical", "field_curvature", "distortion")
_SURFACE_KEYS = {"thickness_mm", "radius_mm", "index", "glass", "semi_diameter_mm", "stop", "kind", "focal_length_mm",
                 *_ABERRATIONS}


def _surface(f: Fields, i: int) -> Surface:
    unknown = sorted(set(f.doc) - _SURFACE_KEYS)
    if unknown:
        raise f.error(unknown[0], f"is not a surface key (expected {', '.join(sorted(_SURFACE_KEYS))})")
    kind = SurfaceKind(f.string("kind", "sphere", choices=[k.value for k in SurfaceKind]))
    thickness = f.number("thickness_mm", minimum=0.0, maximum=MAX_LENGTH_MM)
    index = f.number("index", 1.0, minimum=1.0, maximum=MAX_INDEX)
    radius = math.inf
    if f.has("radius_mm"):
        radius = f.number("radius_mm", maximum=MAX_LENGTH_MM, minimum=-MAX_LENGTH_MM)
        if radius == 0.0:
            raise f.error("radius_mm", "must be non-zero (null for a plane)")
    focal = math.inf
    if kind is SurfaceKind.IDEAL:
        focal = f.number("focal_length_mm", maximum=MAX_LENGTH_MM, minimum=-MAX_LENGTH_MM)
        if focal == 0.0:
            raise f.error("focal_length_mm", "must be non-zero")
        if f.has("radius_mm"):
            raise f.error("radius_mm", "must be absent on an ideal surface (it has a focal length)")
    else:
        for key in ("focal_length_mm", *_ABERRATIONS):
            if f.has(key):
                raise f.error(key, "is for ideal surfaces only (add \"kind\": \"ideal\")")
    terms = {key: f.number(key, 0.0, minimum=-1e6, maximum=1e6) for key in _ABERRATIONS}
    semi = math.inf
    if f.has("semi_diameter_mm"):
        semi = f.number("semi_diameter_mm", positive=True, maximum=MAX_LENGTH_MM)
    stop = f.raw("stop", False)
    if not isinstance(stop, bool):
        raise f.error("stop", f"must be true or false, got {stop!r}")
    if radius != math.inf and semi != math.inf and semi > abs(radius):
        raise f.error("semi_diameter_mm", f"({semi:g}) must not exceed |radius_mm| ({abs(radius):g})")
    return Surface(
        thickness_mm=thickness, index_after=index, kind=kind, radius_mm=radius, focal_length_mm=focal,
        semi_diameter_mm=semi, is_stop=stop, glass=f.string("glass", ""), **terms,
    )


def prescription_from_json(f: Fields) -> Prescription:
    """Parse a ``plenocal-lens`` document (already format-checked)."""
    name = f.string("name")
    raw = f.raw("surfaces")
    if not isinstance(raw, list) or len(raw) == 0:
        raise f.error("surfaces", "must be a non-empty list of surface objects")
    surfaces = tuple(_surface(Fields(f.path, s, f"surfaces[{i}]"), i) for i, s in enumerate(raw))
    try:
        return Prescription(name, surfaces, f.string("description", ""))
    except ModelError as exc:
        raise InputFileError(f.path, str(exc)) from None


def read_prescription(path: str | Path) -> Prescription:
    """Read a lens prescription file.

    Raises
    ------
    InputFileError
        One line naming the file and the bad key.
    """
    return prescription_from_json(read_document(path, LENS_FORMAT))


def prescription_to_json(p: Prescription) -> dict[str, Any]:
    """The ``plenocal-lens`` document of a prescription (plain numbers, ``null`` for infinities)."""
    surfaces = []
    for s in p.surfaces:
        d: dict[str, Any] = {}
        if s.kind is SurfaceKind.IDEAL:
            d["kind"] = "ideal"
            d["focal_length_mm"] = s.focal_length_mm
            for key in _ABERRATIONS:
                if getattr(s, key) != 0.0:
                    d[key] = getattr(s, key)
        else:
            d["radius_mm"] = None if math.isinf(s.radius_mm) else s.radius_mm
        d["thickness_mm"] = s.thickness_mm
        if s.index_after != 1.0:
            d["index"] = s.index_after
        if s.glass:
            d["glass"] = s.glass
        if s.is_stop:
            d["stop"] = True
        d["semi_diameter_mm"] = None if math.isinf(s.semi_diameter_mm) else s.semi_diameter_mm
        surfaces.append(d)
    return {"format": LENS_FORMAT, "version": 1, "name": p.name, "description": p.description, "surfaces": surfaces}


def write_prescription(path: str | Path, p: Prescription) -> Path:
    """Write a prescription file atomically."""
    return write_document(path, prescription_to_json(p))
