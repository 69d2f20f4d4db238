"""plenocal.sim: a physically based, deterministic ray tracer of raw plenoptic images.

- :func:`render` traces rays backwards from each pixel's area through the physical parts (thin
  micro-lens with a disc aperture, thin main lens with aperture F/N and distortion) to the scene;
  it never uses the model's projection code (``plenocal.model.projection``), so the two check
  each other.
- Scenes: :class:`CheckerboardPlate`, :class:`TexturePlate`, :class:`DiscLight` in a
  :class:`Scene`, and the :class:`WhiteDiffuser` of white images.
- :class:`SensorResponse`: photon and read noise, gain, 8/16 bits, grey/RGB/Bayer RGGB.
- :func:`preset`: the paper's setups (r12-a/b/c/d, upc-s) and a Keplerian one (kep-3).
- :func:`simulate_dataset`: a dataset folder like the paper's with ground truth, rendered by the
  thin tracer or by a pluggable renderer;
- :mod:`plenocal.sim.optics`: real optics — main-lens prescriptions (exact spheres, ideal
  surfaces), paraxial data, refractive lenslets, a real-optics camera placed from a preset with
  its thin-lens-equivalent truth, and its renderer (``plenocal simulate --lens``).

See ``docs/simulator.md``.
"""

from plenocal.sim.dataset import FrameSelection, simulate_dataset
from plenocal.sim.groundtruth import FeatureOracle, true_mics
from plenocal.sim.presets import PRESET_NAMES, Preset, crop_camera, matching_f_number, preset
from plenocal.sim.scene import (
    CheckerboardPlate,
    DiscLight,
    Scene,
    TexturedSphere,
    TexturePlate,
    WhiteDiffuser,
    first_hit,
)
from plenocal.sim.sensor import SensorResponse
from plenocal.sim.tracer import build_optics, render

__all__ = [
    "PRESET_NAMES",
    "CheckerboardPlate",
    "DiscLight",
    "FeatureOracle",
    "FrameSelection",
    "Preset",
    "Scene",
    "SensorResponse",
    "TexturePlate",
    "TexturedSphere",
    "WhiteDiffuser",
    "build_optics",
    "crop_camera",
    "first_hit",
    "matching_f_number",
    "preset",
    "render",
    "simulate_dataset",
    "true_mics",
]
