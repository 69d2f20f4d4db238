"""The camera's nominal specification: what a user knows before calibrating."""

from __future__ import annotations

import math
from dataclasses import dataclass

from plenocal.model.camera import Configuration
from plenocal.model.lattice import Lattice, TypeLayout


@dataclass(frozen=True)
class CameraSpec:
    """What a user knows before calibrating (the manufacturer's numbers).

    ``lattice`` and ``n_types`` may be unknown (None) before pre-calibration;
    ``focus_distance_mm = inf`` means infinity; ``configuration = None`` means "infer it".
    """

    pixel_size_mm: float
    width_px: int
    height_px: int
    lattice: Lattice | None = None
    n_types: int | None = None
    type_row_shift: tuple[int, ...] | None = None
    main_lens_focal_length_mm: float | None = None
    focus_distance_mm: float = math.inf
    configuration: Configuration | None = None

    @property
    def type_layout(self) -> TypeLayout | None:
        """The micro-lens type layout (Raytrix default when ``type_row_shift`` is unset)."""
        if self.n_types is None:
            return None
        if self.type_row_shift is None:
            return TypeLayout.raytrix(self.n_types)
        return TypeLayout(self.n_types, self.type_row_shift)
