"""plenocal.sim.optics: a real-optics simulator (its own room; model/ never imports it).

- :mod:`~plenocal.sim.optics.prescription`: main lenses as sequential surfaces (exact spheres
  and ideal thin-lens surfaces), scaling;
- :mod:`~plenocal.sim.optics.paraxial`: y–nu first-order data (EFL, H, H′, pupils);
- :mod:`~plenocal.sim.optics.library`: the bundled designs.

See ``docs/simulator.md``.
"""

from plenocal.sim.optics.library import DESIGN_NAMES, load_lens
from plenocal.sim.optics.paraxial import ParaxialData, paraxial_data
from plenocal.sim.optics.prescription import Prescription, Surface, SurfaceKind

__all__ = ["DESIGN_NAMES", "ParaxialData", "Prescription", "Surface", "SurfaceKind", "load_lens", "paraxial_data"]
