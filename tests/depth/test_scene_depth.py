"""Depth of a scene with two planes and a sphere (issue 26), against the exact truth of the render.

The small R12-A preset (1000 × 800 px, 1760 micro-images, 32 rays per pixel) sees a fronto-parallel
checkerboard plate at 345 mm (υ 4.3), a plate tilted 20° about the vertical at ~300 mm (υ 7–11) and,
in front of both, a sphere of radius 8 mm centred at 318 mm (υ 6.8 at its limb, 7.7 at its front)
wrapped in 2.2 mm blocks of random grey. The truth of each depth point is where the line of sight
through it first meets the scene (:func:`plenocal.sim.scene.first_hit`). A micro-image sees a patch
of ~4 mm of the scene at these depths, so along a silhouette it sees two surfaces and its depth is
a mixture: "silhouette" points are those whose truth changes by more than 2 % within 0.5 mm of
their line of sight. Each point is placed where its micro-image's texture is
(:func:`plenocal.depth.matching.texture_offsets`) and micro-images whose support spreads over two
surfaces get no depth (``at_edge``). Measured (render seeds 0, 1; aggregated depths, 1 422–1 424
of 1 760 micro-images, 81 %, 116–117 at an edge): RMS |z − z_true|/z 0.38–0.39 % over every point
(1.13–1.14 % before both), 0.24 % off the silhouettes; on the sphere off its silhouette
0.49–0.52 % (126–129 points); median 0.05–0.06 %.
"""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.depth.matching import aggregate_virtual_depths, estimate_virtual_depths
from plenocal.depth.metric import points_from_virtual_depth
from plenocal.detect.corners import devignette
from plenocal.model.geometry import Pose
from plenocal.model.target import Checkerboard
from plenocal.sim.presets import preset
from plenocal.sim.scene import CheckerboardPlate, Scene, TexturedSphere, WhiteDiffuser, depth_truth, first_hit
from plenocal.sim.tracer import build_optics, render

RAYS = 32
KAPPA = 0.63
"""κ of the small R12-A renders (tests/depth/test_matching.py)."""
SPHERE_CENTRE_MM = (-1.0, 1.0, 318.0)
SPHERE_RADIUS_MM = 8.0
MIN_COVERAGE = 0.8
"""Fraction of the micro-images with a depth (issue: ≥ 80 % of the textured ones; everything in
view is textured here but the background's 0.3 grey): measured 0.808–0.809 (0.87 before the
micro-images at an edge were left without a depth; the scene is mostly silhouettes at this scale)."""
RMS_ALL = 0.008
"""RMS relative depth error over every point: measured 0.38–0.39 % (the issue's 1 %)."""
RMS_OFF_SILHOUETTES = 0.004
"""Off the silhouettes, over the three surfaces: measured 0.24 %."""
RMS_SPHERE = 0.008
"""On the sphere off its silhouette: measured 0.49–0.52 %."""
MEDIAN = 0.0015
"""Median |z − z_true|/z: measured 0.05–0.06 %."""


def _scene() -> tuple[Scene, TexturedSphere]:
    rng = np.random.default_rng(1)
    texture = rng.uniform(0.05, 0.95, (10, 20)).repeat(8, 0).repeat(8, 1)
    board = Checkerboard(12, 10, 2.5, 1.25)
    c, s = np.cos(np.radians(20.0)), np.sin(np.radians(20.0))
    tilted = np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])
    sphere = TexturedSphere(texture, Pose(np.eye(3), np.array(SPHERE_CENTRE_MM)), SPHERE_RADIUS_MM)
    plates = (CheckerboardPlate(board, Pose(np.eye(3), np.array([-19.0, -14.0, 345.0]))),
              CheckerboardPlate(board, Pose(tilted, np.array([2.0, -14.0, 300.0]))), sphere)
    return Scene(plates, background=0.3), sphere


def measure(seed: int = 0):
    """Aggregated depth points of a render of the scene, their truth, and which lie on a silhouette
    or on the sphere."""
    camera = preset("r12-a", small=True).camera
    scene, sphere = _scene()
    optics = build_optics(camera)
    white = render(camera, WhiteDiffuser(), rays=2 * RAYS, seed=0, image_id=999, optics=optics)
    image = render(camera, scene, rays=RAYS, seed=seed, image_id=1, optics=optics)
    dv, weight = devignette(image, white)
    vd = aggregate_virtual_depths(estimate_virtual_depths(dv, weight, camera, kappa=KAPPA), camera)
    X = points_from_virtual_depth(camera, vd.k[vd.ok], vd.l[vd.ok], vd.virtual_depth[vd.ok], offset_px=vd.texture_offset_px[vd.ok])
    z_true, silhouette = depth_truth(scene, X)  # silhouettes: the truth jumps 2 % within 0.5 mm
    sight = X / np.linalg.norm(X, axis=1, keepdims=True)
    on_sphere = first_hit(Scene((sphere,)), np.zeros_like(X), sight) * sight[:, 2] == z_true
    return vd, X, z_true, silhouette, on_sphere


@pytest.fixture(scope="module")
def scene_depth():
    return measure()


def test_first_hit_is_exact():
    sphere = TexturedSphere(np.ones((2, 2)), Pose(np.eye(3), np.array([0.0, 0.0, 100.0])), 10.0)
    plate = CheckerboardPlate(Checkerboard(4, 3, 5.0, 2.0), Pose(np.eye(3), np.array([-5.0, -5.0, 150.0])))
    scene = Scene((plate, sphere))
    d = np.array([[0.0, 0.0, 1.0], [0.06, 0.0, 1.0], [0.0, 0.0, -1.0], [0.11, 0.0, 1.0]])
    t = first_hit(scene, np.zeros((4, 3)), d)
    assert t[0] == pytest.approx(90.0)  # the sphere's front, before the plate behind it
    x = 0.06  # the sphere at an angle: |t·d − c|² = R²
    a, b, c = 1 + x * x, -100.0, 100.0**2 - 10.0**2
    assert t[1] == pytest.approx((-b - np.sqrt(b * b - a * c)) / a)
    assert np.isinf(t[2])  # behind the camera
    assert t[3] == pytest.approx(150.0)  # passes 10.9 mm from the sphere's centre: the plate


def test_two_planes_and_a_sphere(scene_depth):
    vd, X, z_true, silhouette, on_sphere = scene_depth
    assert vd.ok.mean() >= MIN_COVERAGE
    assert np.all(np.isfinite(z_true))  # every point is on a surface of the scene
    rel = (X[:, 2] - z_true) / z_true
    assert np.sqrt(np.mean(rel**2)) < RMS_ALL
    assert np.median(np.abs(rel)) < MEDIAN
    off = ~silhouette
    assert off.mean() > 0.8 and np.sqrt(np.mean(rel[off] ** 2)) < RMS_OFF_SILHOUETTES
    sphere = on_sphere & off
    assert sphere.sum() > 100  # the sphere is measured, not only the planes
    assert np.sqrt(np.mean(rel[sphere] ** 2)) < RMS_SPHERE
    # the sphere's depth follows its shape: the front nearer than the limb
    radial = np.hypot(X[sphere, 0] / X[sphere, 2] * SPHERE_CENTRE_MM[2] - SPHERE_CENTRE_MM[0],
                      X[sphere, 1] / X[sphere, 2] * SPHERE_CENTRE_MM[2] - SPHERE_CENTRE_MM[1])
    inner, outer = radial < 0.4 * SPHERE_RADIUS_MM, radial > 0.7 * SPHERE_RADIUS_MM
    assert np.median(X[sphere][inner, 2]) < np.median(X[sphere][outer, 2]) - 3.0
