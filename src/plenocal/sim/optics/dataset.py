"""Real-optics datasets: the renderer that :func:`plenocal.sim.dataset.simulate_dataset` plugs in
(``docs/simulator.md``, ``plenocal simulate PRESET --lens DESIGN``).

The dataset folder is the thin tracer's (manifest, images, whites at the preset's f-numbers, the
devignetting white, calibration/evaluation/translation frames, ``ground_truth/camera.json`` and
``poses.json``), with

- ``ground_truth/camera.json``: the **thin-lens equivalent** (F = EFL, D from H′, d from the
  lenslets' mean H′, f_i, MLA pose, pitch, principal point, no distortion, exit pupil at H′ as in
  the paper); poses are generated on it and given from H;
- ``ground_truth/optics.json``: the real-optics truth (:meth:`RealOpticsCamera.truth`: the
  prescription as traced, paraxial data per f-number, placement, lenslets, per-type D_i and d_i,
  pupils, the relative illumination) — format ``plenocal-optics-truth``;
- **no** ``ground_truth/observations.npz``: the thin-lens equivalent's BAP features are not exact
  through real optics (distortion, field curvature, pupil aberration move them by up to pixels;
  blur radii are not the model's), and approximations are not written as truth. ``optics.json``
  says so.

Boards are kept within the lens's lit image circle (relative illumination >= 50 % at the board
f-number, :func:`plenocal.sim.optics.chief.lit_image_radius_px`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from plenocal.io._json import write_document
from plenocal.model.camera import PlenopticCamera
from plenocal.sim.optics.camera import RealOpticsCamera
from plenocal.sim.optics.chief import lit_image_radius_px, relative_illumination
from plenocal.sim.optics.render import RealTracerOptics, build_real_optics, render_real
from plenocal.sim.scene import Scene, WhiteDiffuser

OPTICS_TRUTH_FORMAT = "plenocal-optics-truth"
LIT_FRACTION = 0.5
"""Boards stay where the lens passes at least this fraction of its exit pupil (at the board's
f-number): beyond it micro-images are cat's eyes and, further out, black."""
OBSERVATIONS_NOTE = (
    "ground_truth/observations.npz is not written for real optics: the thin-lens equivalent's BAP "
    "features (u, v, rho) are not exact through a real lens (distortion, field curvature, pupil "
    "aberration move them by up to pixels, and blur radii are not the model's), and approximations are "
    "not written as truth"
)


@dataclass
class RealOpticsRenderer:
    """The :class:`~plenocal.sim.dataset.Renderer` of a :class:`RealOpticsCamera`.

    Attributes
    ----------
    optics_camera : RealOpticsCamera
    lens_label : str
        The design's name or file, for the manifest.
    natural_vignetting : bool
        cos·cos/r² weights (physical, default) or ray fractions.
    board_f_number : float
        The f-number that sets the lit image circle of the poses.
    """

    optics_camera: RealOpticsCamera
    lens_label: str
    board_f_number: float
    natural_vignetting: bool = True
    writes_observations: bool = False
    _optics: dict[float, RealTracerOptics] = field(default_factory=dict, repr=False)
    _radius: float | None = field(default=None, repr=False)
    _radius_done: bool = field(default=False, repr=False)

    @property
    def camera(self) -> PlenopticCamera:
        return self.optics_camera.thin

    @property
    def pose_image_radius_px(self) -> float | None:
        if not self._radius_done:
            r = lit_image_radius_px(self.optics_camera, f_number=self.board_f_number, fraction=LIT_FRACTION)
            self._radius = None if math.isinf(r) else r
            self._radius_done = True
        return self._radius

    def render(self, scene: Scene | WhiteDiffuser, *, f_number: float, rays: int, seed: int, image_id: int) -> NDArray[np.float32]:
        if f_number not in self._optics:
            self._optics[f_number] = build_real_optics(self.optics_camera, f_number, natural_vignetting=self.natural_vignetting)
        return render_real(self.optics_camera, scene, rays=rays, seed=seed, image_id=image_id, optics=self._optics[f_number])

    def write_ground_truth(self, folder: Path, *, f_numbers: tuple[float, ...]) -> dict[str, Any]:
        cam = self.optics_camera
        truth = cam.truth(f_numbers)
        radii = np.arange(0.0, 15.0, 1.0)
        truth["relative_illumination"] = {
            "radius_on_mla_mm": radii.tolist(),
            "by_f_number": {f"{n:g}": relative_illumination(cam, radii, f_number=n).tolist()
                            for n in sorted({cam.f_number, *f_numbers})},
            "meaning": "fraction of the paraxial exit-pupil disc through which real rays from a point of the "
                       "lenslets' plane pass every clear aperture and the stop",
        }
        truth["pose_image_radius_px"] = self.pose_image_radius_px
        truth["natural_vignetting"] = self.natural_vignetting
        truth["observations"] = OBSERVATIONS_NOTE
        par = cam.paraxial()
        truth["exit_pupil_model"] = {
            "exit_pupil_mm": par.exit_pupil_z - par.h_prime_z,
            "meaning": "MainLens.exit_pupil_mm (e, the exit pupil behind H') of plenocal's exit-pupil model; "
                       "camera.json holds the paper's thin lens (e = 0)",
        }
        write_document(folder / "optics.json", {"format": OPTICS_TRUTH_FORMAT, "version": 1} | truth)
        return {
            "real_optics": {
                "lens": self.lens_label,
                "lenslets": cam.lenslets.kind.value,
                "substrate_mm": cam.lenslets.substrate_mm,
                "clear_radius_mm": cam.types[0].clear_radius_mm,
                "natural_vignetting": self.natural_vignetting,
                "truth": "ground_truth/optics.json",
                "observations": "not written (see ground_truth/optics.json)",
            }
        }
