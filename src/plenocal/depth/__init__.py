"""Depth from raw images with the calibrated camera (DESIGN §5b).

- :mod:`plenocal.depth.matching`: per micro-image virtual depth by blur-aware matching;
- :mod:`plenocal.depth.metric`: virtual depth → camera-frame points through the model;
- :mod:`plenocal.depth.render`: the all-in-focus (central-view) image from the depths;
- :mod:`plenocal.depth.pixel`: per-pixel refinement of the micro-images' depths.

Uses model/ (and detect/'s devignetting); nothing below imports it.
"""

from plenocal.depth.matching import VirtualDepthMap, estimate_virtual_depths
from plenocal.depth.metric import points_from_virtual_depth

__all__ = ["VirtualDepthMap", "estimate_virtual_depths", "points_from_virtual_depth"]
