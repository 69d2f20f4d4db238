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


__all__ = ["bounded_float", "bounded_int"]


PUPIL_SHAPES = ("disc", "white", "white-centre")
"""``--pupil-shape`` of detect and run: the main aperture's preimage in each micro-image for
detection's corner model: the paper's disc, the ellipse measured from the white
(:mod:`plenocal.precalib.pupil_shape`), or the disc at the white's measured centre."""
DEFAULT_PUPIL_SHAPE = "disc"
