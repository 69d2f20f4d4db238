"""Depth at silhouettes: each point where its micro-image's texture is, and no depth where the
robust aggregation's support holds two surfaces (issue 26's two planes and a sphere)."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.depth import matching as M
from plenocal.sim.presets import preset


@pytest.fixture(scope="module")
def small():
    return preset("r12-a", small=True).camera


def test_texture_offset_points_at_the_textured_side():
    """A disc of radius 8 px textured (stripes) only right of its centre: the texture's centroid lies
    right of the centre, on the axis; textured all over, it is the centre."""
    H, W = 40, 40
    y, x = np.mgrid[:H, :W].astype(float)
    stripes = 0.5 + 0.4 * np.sin(x * 1.3 + y * 0.4)
    centres = np.array([[20.0, 20.0]])
    radii = np.array([8.0])
    weight = np.ones((H, W))
    half = np.where(x > 20.0, stripes, 0.5).astype(np.float32)
    off = M.texture_offsets(half, weight, centres, radii, np.array([0]))
    assert off[0, 0] == pytest.approx(4.0, abs=1.0)  # a half disc's centroid: 4r/(3π) = 3.4 px, plus the edge at x = 20
    assert abs(off[0, 1]) < 0.5
    whole = M.texture_offsets(stripes.astype(np.float32), weight, centres, radii, np.array([0]))
    assert np.hypot(*whole[0]) < 0.5
    dark = M.texture_offsets(half, np.zeros((H, W)), centres, radii, np.array([0]))  # no lit pixel: no offset
    assert np.all(dark == 0.0)


def _depth_map(camera, w: np.ndarray) -> M.VirtualDepthMap:
    """Every micro-image of ``camera``'s grid estimated at 1/υ = ``w``, confidently."""
    k, l, centres, types = M.grid_micro_images(camera)
    n = len(k)
    return M.VirtualDepthMap(k, l, centres, types, 1.0 / w, np.full(n, 0.8), np.zeros(n), np.full(n, 0.5),
                             np.full(n, 0.3), np.full(n, M.STATUS_OK, dtype=np.int8), np.full(n, 12, dtype=np.int32))


def test_a_support_over_two_surfaces_gives_no_depth(small):
    """Two surfaces 40 % apart in 1/υ. A clean step leaves each side's majority to the median: no
    micro-image is flagged. Where the micro-images along the step see both surfaces (their
    estimates anywhere between the two, as at a silhouette), those whose 4-ring support spreads
    over them get no depth (``at_edge``), within reach of the mixtures only; the others keep their
    side's value. With the PRISM boards' noise on one surface (each estimate ~2.4 % of 1/υ) none is
    flagged."""
    _, _, centres, _ = M.grid_micro_images(small)
    rng = np.random.default_rng(0)
    p = small.grid.diameter_px
    x = (centres[:, 0] - np.median(centres[:, 0])) / p
    step = np.where(x > 0.0, 0.14, 0.10)
    clean = M.aggregate_virtual_depths(_depth_map(small, step), small)
    assert clean.counts()["at_edge"] == 0 and np.allclose(1.0 / clean.virtual_depth[clean.ok], step[clean.ok])
    mixed = np.where(np.abs(x) < 2.0, rng.uniform(0.10, 0.14, len(x)), step)
    ag = M.aggregate_virtual_depths(_depth_map(small, mixed), small)
    edge = ag.status == M.STATUS_AT_EDGE
    assert edge.sum() > 40 and np.all(np.abs(x[edge]) < 2.0)  # measured 56–70 of the 160 mixtures, all within 1.25 pitches
    assert np.all(np.isnan(ag.virtual_depth[edge])) and ag.counts()["at_edge"] == int(edge.sum())
    far = np.abs(x) > 2.0 + M.AGGREGATION_RINGS
    assert np.allclose(1.0 / ag.virtual_depth[far], step[far])
    off = M.aggregate_virtual_depths(_depth_map(small, mixed), small, max_support_spread=np.inf)
    assert off.counts()["at_edge"] == 0  # the threshold off: every mixture's median kept, as before
    noisy = 0.1 * (1.0 + 0.024 * rng.standard_normal(len(x)))
    assert M.aggregate_virtual_depths(_depth_map(small, noisy), small).counts()["at_edge"] == 0
