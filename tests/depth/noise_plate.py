"""Constants of the textured plate of tests/depth/conftest.py (imported by its tests)."""

RAYS = 32
KAPPA = 0.63
"""κ of the small R12-A renders (as tests/depth/test_matching.py)."""
Z_MM = 345.0
TEXEL_MM = 0.1
PLATE_MM = (48.0, 40.0)
TEXTURE_SIGMA_TEXELS = 1.5
