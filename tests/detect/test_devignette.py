"""Devignetting the micro-images a fit reads, and the white's weight alone: the same numbers as
devignetting the whole image (the second detection pass fits tens of micro-images per frame)."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.detect.corners import devignette, devignette_boxes, white_levels, white_weight


def _white_and_raw(seed: int = 0, shape: tuple[int, int] = (61, 83)):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[: shape[0], : shape[1]]
    # discs of light on a dark grid, like micro-images, with noise; some pixels below 10 % of the level
    white = 0.2 * (1.0 + np.cos(xx / 3.1)) * (1.0 + np.cos(yy / 2.7)) + rng.uniform(0.0, 0.02, shape)
    raw16 = rng.integers(0, 65536, shape, dtype=np.uint16)
    return white, raw16


@pytest.mark.parametrize("form", ["grey", "stored", "float32"])
def test_white_weight_is_devignettes_weight(form):
    """From the grey white, from its stored 16-bit integers and their scale, or from a float32
    white: the same bytes as :func:`devignette`'s weight of the grey white, and the same levels."""
    white, raw16 = _white_and_raw()
    stored = np.rint(white / white.max() * 65535.0).astype(np.uint16)
    grey = stored / 65535.0  # plenocal.io.images' grey conversion
    if form == "float32":
        grey = grey.astype(np.float32)
    _, weight = devignette(raw16 / 65535.0, grey)
    assert np.any(weight == 0.0) and np.any(weight == 1.0) and np.any((weight > 0.0) & (weight < 1.0)), "premise"
    w, scale = (stored, 65535.0) if form == "stored" else (grey, 1.0)
    assert white_levels(w, scale=scale) == white_levels(grey)
    assert white_weight(w, scale=scale).tobytes() == weight.tobytes()


@pytest.mark.parametrize("form", ["grey", "stored", "float32"])
def test_boxes_are_devignettes_numbers_there_and_zero_elsewhere(form):
    """On boxes about (fractional) centres, some overlapping, some cut by the image border, from
    grey float images, from their stored 16-bit integers and scales, or from float32 images (the
    simulator's; devignetting divides them in float32): the same bytes as :func:`devignette` there,
    0 elsewhere."""
    white, raw16 = _white_and_raw(1)
    white16 = np.rint(white / white.max() * 65535.0).astype(np.uint16)
    white = white16 / 65535.0
    grey = raw16.astype(np.float64) / 65535.0  # plenocal.io.images' grey conversion
    if form == "float32":
        white, grey = white.astype(np.float32), grey.astype(np.float32)
    full, _ = devignette(grey, white)
    centres = np.array([[10.4, 12.6], [13.0, 14.0], [0.2, 30.0], [82.0, 60.0], [40.5, 40.5]])
    half = 4
    raw, scale, w, white_scale = (raw16, 65535.0, white16, 65535.0) if form == "stored" else (grey, 1.0, white, 1.0)
    part = devignette_boxes(raw, w, centres, half_px=half, scale=scale, white_scale=white_scale)
    inside = np.zeros(white.shape, dtype=bool)
    for u, v in np.rint(centres).astype(int):
        inside[max(v - half, 0) : v + half + 1, max(u - half, 0) : u + half + 1] = True
    assert part.tobytes() == np.where(inside, full, 0.0).tobytes()
    assert np.count_nonzero(part) > 0.5 * inside.sum(), "premise: most box pixels lit"


def test_boxes_reject_images_of_another_shape():
    white, raw16 = _white_and_raw()
    with pytest.raises(ValueError, match="differ in shape"):
        devignette_boxes(raw16[:-1], white, np.zeros((1, 2)), half_px=2)
