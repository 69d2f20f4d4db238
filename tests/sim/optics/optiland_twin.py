"""The same prescription rebuilt in optiland (an independent optics package), for the tests."""

from __future__ import annotations

import math
import warnings

import numpy as np

from plenocal.sim.optics.prescription import Prescription, SurfaceKind

D_LINE_UM = 0.5875618


def optiland_optic(p: Prescription, *, epd_mm: float):
    """An optiland ``Optic`` with the same surfaces and indices (IdealMaterial), object at
    infinity, image surface at the last thickness, aperture given as the entrance-pupil diameter."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from optiland.materials import IdealMaterial
        from optiland.optic import Optic

    o = Optic()
    o.surfaces.add(index=0, radius=math.inf, thickness=math.inf)
    for i, s in enumerate(p.surfaces, start=1):
        material = IdealMaterial(n=s.index_after, k=0.0) if s.index_after != 1.0 else "air"
        if s.kind is SurfaceKind.IDEAL:
            o.surfaces.add(index=i, surface_type="paraxial", f=s.focal_length_mm, thickness=s.thickness_mm,
                           is_stop=s.is_stop, material=material)
        else:
            o.surfaces.add(index=i, radius=s.radius_mm, thickness=s.thickness_mm, is_stop=s.is_stop,
                           material=material)
    o.surfaces.add(index=len(p.surfaces) + 1)
    o.set_aperture(aperture_type="EPD", value=epd_mm)
    o.fields.set_type(field_type="angle")
    o.fields.add(y=0.0)
    o.wavelengths.add(value=D_LINE_UM, is_primary=True)
    return o


def scalar(x) -> float:
    return float(np.asarray(x).reshape(-1)[0])
