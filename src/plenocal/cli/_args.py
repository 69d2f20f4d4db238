"""argparse ``type=`` converters that refuse out-of-range values with one line naming the range
(argparse reports them as ``argument --rays: ...``; see :class:`plenocal.cli.main.OneLineParser`)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An integer in [low, high]."""

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer in {low}..{high}, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected an integer in {low}..{high}, got {value}")
        return value

    convert.__name__ = "integer"
    return convert


def bounded_float(low: float, high: float, *, low_open: bool = False) -> Callable[[str], float]:
    """A finite number in [low, high] (``low_open``: in (low, high])."""

    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        below = value <= low if low_open else value < low
        if not math.isfinite(value) or below or value > high:
            interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
            raise argparse.ArgumentTypeError(f"expected a finite number in {interval}, got {text}")
        return value

    convert.__name__ = "number"
    return convert


PUPIL_SHAPES = ("disc", "white", "white-centre")
"""``--pupil-shape`` of detect and run: the main aperture's preimage in each micro-image for
detection's corner model: the paper's disc, the ellipse measured from the white
(:mod:`plenocal.precalib.pupil_shape`), or the disc at the white's measured centre."""
DEFAULT_PUPIL_SHAPE = "white-centre"
"""Where the white shows the pupil's image displaced from the grid node (a real lens's pupil
aberration; nowhere on PRISM's or plenocal's thin-lens and double-Gauss renders, whose detections
are the same bytes either way), detection centres the disc there. The real-optics R12-B set
(docs/model.md, "Detection's corner model with the white's measured, displaced, elliptical pupil"): F +0.60 → −0.40 %
(2.0 → 0.9σ), D +0.88 → −0.12 % (2.9 → 0.3σ), the exit pupil 0.47 → 9.65 mm (truth 9.35), u0
−11.7 → −3.9 px; d +0.27 → −0.45 %, f_i −3.5…−4.1 → −4.3…−4.9 % (the lenslets' bias, in the
central data too), v0 −8.8 → −11.8 px, ε_z 0.17 → 0.23 % (± 0.19), held-out RMSE 0.257 → 0.266 px.
The ellipse's shape (``white``) adds rejections where it acts and is not taken."""


__all__ = ["DEFAULT_PUPIL_SHAPE", "PUPIL_SHAPES", "bounded_float", "bounded_int"]
