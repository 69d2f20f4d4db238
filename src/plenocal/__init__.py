"""plenocal: Blur Aware Plenoptic calibration of plenoptic cameras from raw images.

Layers (imports go one way): ``model`` <- ``sim`` / ``precalib`` / ``detect`` <- ``calib`` <-
``evaluate`` <- ``cli``; ``io`` and ``viz`` sit at the edges. Conventions: ``docs/conventions.md``.
"""

from plenocal.errors import PlenocalError

__version__ = "0.1.0"

__all__ = ["PlenocalError", "__version__"]
