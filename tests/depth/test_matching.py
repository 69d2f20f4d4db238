"""Per micro-image virtual depth by blur-aware matching, and metric depth through the model.

Renders: the small R12-A preset (1000 × 800 px, 1760 micro-images) looking at a fronto-parallel
checkerboard of 2.5 mm squares that fills the view, 32 rays per pixel, the devignetting white at
the same f-number. The truth is exact: the plate's z, and υ from the model's virtual image.
Measured (seed 0): median |z − z_true|/z 1.12 % at 250 mm (υ 16.5), 0.41 % at 300 mm (υ 8.9) per
micro-image, 0.53 % and 0.11 % after the robust aggregation; without the pupil-vignetting shift
(first version, two rings) 11.6 % and 6.2 % (υ 25–30 % short).
"""

from __future__ import annotations

import numba
import numpy as np
import pytest

from plenocal.depth._kernels import (
    _level,
    _lookup,
    _match_diff,
    _offset_limit2,
    _pair_disparity,
    _relative_blur,
    _tables_at,
    _work,
)
from plenocal.depth.matching import (
    MIN_GREY_SPREAD,
    STATUS_FLAT,
    STATUS_OUTSIDE,
    aggregate_virtual_depths,
    blur_law,
    coarse_grid,
    default_distance_range_mm,
    estimate_virtual_depths,
    inverse_depth_range,
)
from plenocal.depth.metric import points_from_virtual_depth, virtual_depth_of_points
from plenocal.detect.corners import devignette
from plenocal.model.camera import RhoForm
from plenocal.model.geometry import Pose
from plenocal.model.projection import blur_radius_px, micro_lens_centres, virtual_points
from plenocal.model.target import Checkerboard
from plenocal.sim.presets import preset
from plenocal.sim.scene import CheckerboardPlate, Scene, WhiteDiffuser
from plenocal.sim.tracer import build_optics, render

RAYS = 32
KAPPA = 0.63
"""κ of the small R12-A renders (tests/blur: 0.55–0.72 from ray-traced frames)."""
BOARD = Checkerboard(10, 8, 2.5, 1.25)
DISTANCES_MM = (250.0, 300.0)
MEDIAN_TOLERANCE = 0.02
"""Median |z − z_true|/z over the plate per micro-image: measured 1.12 % and 0.41 % (the 250 mm
plate is at υ 16.5, where a 0.1 px disparity error of the nearest neighbour is 1.2 % of υ)."""
AGGREGATED_TOLERANCE = 0.01
"""The same after the robust aggregation: measured 0.53 % and 0.11 % (0.11–0.81 % over the
neighbour and radius settings tried)."""


@pytest.fixture(scope="module")
def r12a():
    return preset("r12-a", small=True).camera


@pytest.fixture(scope="module")
def renders(r12a):
    optics = build_optics(r12a)
    white = render(r12a, WhiteDiffuser(), rays=2 * RAYS, seed=0, image_id=999, optics=optics)
    out = {}
    for z in DISTANCES_MM:
        pose = Pose(np.eye(3), np.array([-12.5, -10.0, z]))
        img = render(r12a, Scene((CheckerboardPlate(BOARD, pose),), background=0.3), rays=RAYS, seed=0,
                     image_id=int(z), optics=optics)
        out[z] = devignette(img, white)
    return out


def test_blur_law_is_the_models_blur_radius(r12a):
    """ρ_t(1/υ) = P_t + Q/υ agrees with the model's ρ of virtual points at υ through each type."""
    law = blur_law(r12a, kappa=0.5)
    k = np.array([20, 21, 22])
    l = np.array([20, 20, 20])
    C = micro_lens_centres(r12a, k, l)
    types = r12a.mla.types.type_of(k, l)
    assert sorted(types.tolist()) == [0, 1, 2]
    for z in (200.0, 300.0, 600.0):
        P = np.tile([[0.1, -0.2, z]], (3, 1))
        ups = virtual_depth_of_points(r12a, P, k, l)
        rho = blur_radius_px(r12a, virtual_points(r12a, P), C, types)
        pred = np.asarray(law.intercept_px)[types] + law.slope_px / ups
        np.testing.assert_allclose(pred, rho, atol=2e-3)  # the tilted MLA's d(k, l) vs d: < 0.002 px


@pytest.mark.parametrize("form", list(RhoForm))
def test_metric_depth_inverts_the_virtual_depth(r12a, form):
    """A point's υ through a lens, back-projected from that lens' micro-image centre, is at the
    point's depth (no depth distortion in the preset: z is exact), whatever the ρ form (the
    legacy one measures depths from the tilted MLA plane: equal to O(tilt²))."""
    r12a = r12a.replace(rho_form=form)
    rng = np.random.default_rng(0)
    k = rng.integers(5, 39, 50)
    l = rng.integers(5, 35, 50)
    z = rng.uniform(150.0, 900.0, 50)
    P = np.column_stack([rng.uniform(-5, 5, 50), rng.uniform(-5, 5, 50), z])
    ups = virtual_depth_of_points(r12a, P, k, l)
    X = points_from_virtual_depth(r12a, k, l, ups)
    np.testing.assert_allclose(X[:, 2], z, rtol=1e-6)  # legacy: 2e-7 (tilt² of the preset)
    assert np.all(np.isnan(points_from_virtual_depth(r12a, k[:2], l[:2], [np.nan, np.nan])))


@pytest.mark.parametrize("z", DISTANCES_MM)
def test_plane_depth_from_renders(r12a, renders, z):
    dv, weight = renders[z]
    vd = estimate_virtual_depths(dv, weight, r12a, kappa=KAPPA)
    ok = vd.ok
    assert ok.sum() > 0.8 * len(ok)  # the plate fills the view: everything textured is matched
    pts = points_from_virtual_depth(r12a, vd.k[ok], vd.l[ok], vd.virtual_depth[ok])
    rel = np.abs(pts[:, 2] - z) / z
    assert np.median(rel) < MEDIAN_TOLERANCE
    assert np.all((vd.confidence >= 0) & (vd.confidence <= 1))
    ag = aggregate_virtual_depths(vd, r12a)
    assert ag.ok.sum() >= ok.sum() * 0.95
    pts = points_from_virtual_depth(r12a, ag.k[ag.ok], ag.l[ag.ok], ag.virtual_depth[ag.ok])
    assert np.median(np.abs(pts[:, 2] - z)) / z < AGGREGATED_TOLERANCE


def test_search_interval_from_distances(r12a):
    """The reference's rule for h = 450 mm < 20F: [4F, 1.2h] = [200, 540] mm; υ is positive up to
    the MLA's conjugate (~400 mm), so the interval is the positive side, up to |υ| = 2."""
    near, far = default_distance_range_mm(r12a)
    assert (near, far) == pytest.approx((200.0, 540.0))
    lo, hi = inverse_depth_range(r12a, (near, far))
    k, l = r12a.grid.lattice.all_indices()
    ups = virtual_depth_of_points(r12a, np.array([[0.0, 0.0, 200.0], [0.0, 0.0, 300.0]]), k[:2] * 0 + k[len(k) // 2], l[:2] * 0 + l[len(l) // 2])
    assert lo == pytest.approx(1.0 / ups[0], rel=1e-6)
    assert hi == pytest.approx(0.5)
    assert lo < 1.0 / ups[1] < hi


def test_pupil_vignetting_shift_is_needed(r12a, renders):
    """Without the shift the same plate comes out > 4 % too near in υ (measured 6 %): the test above
    could fail."""
    dv, weight = renders[300.0]
    vd = estimate_virtual_depths(dv, weight, r12a, kappa=KAPPA, pupil_vignetting=False)
    pts = points_from_virtual_depth(r12a, vd.k[vd.ok], vd.l[vd.ok], vd.virtual_depth[vd.ok])
    assert np.median(np.abs(pts[:, 2] - 300.0)) / 300.0 > 0.04


def test_untextured_plate_is_screened(r12a):
    white = render(r12a, WhiteDiffuser(), rays=2 * RAYS, seed=0, image_id=999)
    grey = render(r12a, WhiteDiffuser(level=0.5), rays=RAYS, seed=0, image_id=1)
    dv, weight = devignette(grey, white)
    vd = estimate_virtual_depths(dv, weight, r12a, kappa=KAPPA)
    inside = vd.status != STATUS_OUTSIDE
    assert inside.sum() > 1000
    assert np.max(vd.spread[inside]) < 0.7 * MIN_GREY_SPREAD  # measured 0.052
    assert np.all(vd.status[inside] == STATUS_FLAT)
    assert not np.any(vd.ok)


def test_same_bytes_with_one_and_two_threads(r12a, renders):
    dv, weight = renders[300.0]
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        a = estimate_virtual_depths(dv, weight, r12a, kappa=KAPPA, chunk=300)
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        b = estimate_virtual_depths(dv, weight, r12a, kappa=KAPPA, chunk=700)
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(a.virtual_depth, b.virtual_depth)
    np.testing.assert_array_equal(a.status, b.status)
    np.testing.assert_array_equal(a.confidence, b.confidence)


def test_unconfident_micro_images_left_unrefined_change_no_aggregated_depth(r12a, renders):
    """Micro-images whose coarse confidence is below the aggregation's support threshold are not
    refined (``depth_map`` does it at :data:`MIN_SUPPORT_CONFIDENCE`; these clean renders have no
    confidence below 0.54, so the test raises both thresholds to 0.8, which leaves half of
    the micro-images at 300 mm unrefined): the aggregated depths, confidences and statuses are
    those of refining them all."""
    from plenocal.depth._kernels import STATUS_NOT_REFINED
    from plenocal.depth.matching import depth_map

    dv, weight = renders[300.0]
    threshold = 0.8
    raw = estimate_virtual_depths(dv, weight, r12a, kappa=KAPPA, refine_min_confidence=threshold)
    not_refined = raw.status == STATUS_NOT_REFINED
    assert 0.1 * len(raw.k[raw.textured]) < not_refined.sum() == raw.counts()["not_refined"]
    assert np.all(np.isnan(raw.virtual_depth[not_refined])) and np.all(raw.confidence[not_refined] < threshold)
    full = aggregate_virtual_depths(estimate_virtual_depths(dv, weight, r12a, kappa=KAPPA), r12a, min_confidence=threshold)
    fast = aggregate_virtual_depths(raw, r12a, min_confidence=threshold)
    np.testing.assert_array_equal(fast.virtual_depth, full.virtual_depth)
    np.testing.assert_array_equal(fast.confidence, full.confidence)
    np.testing.assert_array_equal(fast.status, full.status)
    # depth_map without aggregation refines every textured micro-image, as before
    np.testing.assert_array_equal(depth_map(dv, weight, r12a, aggregate=False, kappa=KAPPA).virtual_depth,
                                  estimate_virtual_depths(dv, weight, r12a, kappa=KAPPA).virtual_depth)


def test_neighbour_tables_are_kept_per_grid_and_handed_out_as_copies(r12a):
    """A sequence's frames share their grid's neighbour tables: the second call returns the same
    table without recomputing it, a caller writing into its copy changes no later one, and another
    grid (or other rings) gets its own."""
    from plenocal.depth import matching as M

    k, l = r12a.grid.lattice.all_indices()
    c = r12a.grid.centres(k, l)
    a, na = M.neighbour_table(c, r12a.grid.diameter_px)
    a[:] = -7
    b, nb = M.neighbour_table(c, r12a.grid.diameter_px)
    fresh, nf = M._neighbour_table(np.ascontiguousarray(c, dtype=np.float64), float(r12a.grid.diameter_px),
                                   rings=M.RINGS, star_rings=M.STAR_RINGS)
    np.testing.assert_array_equal(b, fresh)
    assert na == nb == nf
    shifted, _ = M.neighbour_table(c * 1.01, r12a.grid.diameter_px)
    assert shifted.shape[0] == b.shape[0] and not np.array_equal(shifted, -7 * np.ones_like(shifted))
    three, _ = M.neighbour_table(c, r12a.grid.diameter_px, rings=3.0, star_rings=0.0)
    assert three.shape[1] != b.shape[1]
    assert len(M._NEIGHBOUR_TABLES) <= M.NEIGHBOUR_TABLES_KEPT


def test_micro_images_beyond_the_model_field_get_no_depth(r12a, renders):
    """With the calibrated model's field (``camera.json``'s ``model_field``) the textured
    micro-images whose centre lies beyond it are not matched (``outside_field``), neither gives
    nor takes part in the aggregation, and those inside keep the depth they had, except where
    their aggregation neighbourhood reached across the edge."""
    from plenocal.depth.matching import STATUS_OUTSIDE_FIELD, depth_map

    dv, weight = renders[300.0]
    pp = np.asarray(r12a.principal_point_px)
    radius = 250.0
    full = depth_map(dv, weight, r12a, kappa=KAPPA)
    cut = depth_map(dv, weight, r12a, kappa=KAPPA, field_radius_px=radius)
    dist = np.hypot(*(cut.centres_px - pp).T)
    beyond = cut.status == STATUS_OUTSIDE_FIELD
    assert beyond.sum() == cut.counts()["outside_field"] > 300
    assert np.all(dist[beyond] > radius) and np.all(np.isnan(cut.virtual_depth[beyond]))
    assert np.array_equal(beyond, full.textured & (dist > radius))
    assert cut.ok.sum() > 0.9 * np.sum(full.ok & (dist <= radius))
    # away from the edge by more than the aggregation's reach, the same depths
    inner = cut.ok & (dist < radius - 5 * r12a.grid.diameter_px)
    assert inner.sum() > 100
    np.testing.assert_array_equal(cut.virtual_depth[inner], full.virtual_depth[inner])


@numba.njit
def _reference_cost(stack, levels, centres, types, neigh, i, w, lam, kappa2, radius, min_pixels, P, Q, ra, rb, g_table):
    """The matching cost of micro-image i at w (every neighbour, every pixel) from the helpers the
    per-pixel refinement calls one pixel at a time (``_lookup``, ``_pair_disparity``,
    ``_offset_limit2``, ``_match_diff``), which ``_costs`` writes out."""
    rho, inv, fwd, px, py, ex, ey = _work(radius, P.shape[0], g_table.shape[1])
    _tables_at(w, P, Q, ra, rb, g_table, rho, inv, fwd)
    n_tab = inv.shape[1]
    cix, ciy, ti = centres[i, 0], centres[i, 1], types[i]
    m = 0
    for y in range(int(np.ceil(ciy - radius)), int(np.floor(ciy + radius)) + 1):
        for x in range(int(np.ceil(cix - radius)), int(np.floor(cix + radius)) + 1):
            ox, oy = x - cix, y - ciy
            ro2 = ox * ox + oy * oy
            if ro2 > radius * radius:
                continue
            ro = np.sqrt(ro2)
            sc = _lookup(inv, ti, ro, n_tab) / ro if ro > 1e-9 else 1.0
            px[m], py[m], ex[m], ey[m] = x, y, ox * sc, oy * sc
            m += 1
    f = (1.0 - lam) + lam * w
    total, count, pairs = 0.0, 0, 0
    for jj in range(neigh.shape[1]):
        j = neigh[i, jj]
        if j < 0:
            continue
        cjx, cjy, dx, dy, overlap = _pair_disparity(centres, i, j, f, 4.0 * radius * radius)
        if not overlap:
            continue
        tj = types[j]
        s2_i, s2_j = _relative_blur(kappa2, rho[ti], rho[tj])
        ki, ti_ = _level(s2_i, levels)
        kj, tj_ = _level(s2_j, levels)
        e_lim2 = _offset_limit2(inv, tj, radius)
        sad, n = 0.0, 0
        for p in range(m):
            d = _match_diff(stack, px[p], py[p], ex[p] + dx, ey[p] + dy, e_lim2, fwd, tj, n_tab, radius * radius, cjx, cjy,
                            ki, ti_, kj, tj_)
            if d >= 0.0:
                sad += d
                n += 1
        if n >= min_pixels:
            total += sad
            count += n
            pairs += 1
    return total / count if pairs else np.nan


def test_cost_written_out_is_the_per_pixel_helpers_sum(r12a, renders):
    """``_costs`` writes the pair and pixel loops out (numba's reference counting of arrays handed
    to inlined helpers cost 35 % of the matching); its costs are the same bytes as the helpers'
    (the per-pixel refinement's) summed pixel by pixel, on the 300 mm render over the search
    interval."""
    from plenocal.depth import matching as M

    dv, weight = renders[300.0]
    _, _, centres, types = M.grid_micro_images(r12a)
    radii = M.USABLE_RADIUS_FRACTION * M.micro_image_radii_px(r12a, types, r12a.main_lens.f_number)
    index = np.flatnonzero(M.micro_images_in_view(r12a, centres, radii, weight, min_weight=0.5))[::97]
    w_grid = np.linspace(*inverse_depth_range(r12a, default_distance_range_mm(r12a)), 7)
    curves = M.cost_curves(dv, weight, r12a, index, w_grid, kappa=KAPPA, smoothed_shift=False)
    stack = M.matching_stack(dv, weight)
    neigh, _ = M.neighbour_table(centres, r12a.grid.diameter_px)
    law = blur_law(r12a, kappa=KAPPA)
    ra, rb, g_table = M.pupil_radii(r12a, r12a.main_lens.f_number, float(radii.max()))
    levels = np.asarray(M.BLUR_VARIANCES_PX2)
    ref = np.array([[_reference_cost(stack, levels, centres, types, neigh, i, w, M.matching_lambda(r12a), KAPPA**2, radii[i],
                                     M.MIN_OVERLAP_PIXELS, np.asarray(law.intercept_px), law.slope_px, ra, rb, g_table)
                     for w in w_grid] for i in index])
    assert len(index) > 10 and np.isfinite(ref).mean() > 0.8
    np.testing.assert_array_equal(curves, ref)


def test_blur_levels_read_are_the_ones_the_search_reads(r12a, renders):
    """The stack is made only up to the first level at or above the largest relative blur variance
    over the search interval (κ 0.63 on the small R12-A: 8 of the 10 levels): a dense scan of the
    interval finds none above it and one above the level before, and the costs over the interval
    from the truncated stack are the full stack's bytes."""
    from plenocal.depth import matching as M

    law = blur_law(r12a, kappa=KAPPA)
    w_lo, w_hi = inverse_depth_range(r12a, default_distance_range_mm(r12a))
    n = M.blur_levels_read(law, (w_lo, w_hi))
    levels = np.asarray(M.BLUR_VARIANCES_PX2)
    ws = np.linspace(w_lo, w_hi, 2001)
    rho2 = (np.asarray(law.intercept_px)[None, :] + law.slope_px * ws[:, None]) ** 2
    s2 = KAPPA**2 * np.max(np.abs(rho2[:, :, None] - rho2[:, None, :]))
    assert 2 <= n < len(levels) and levels[n - 2] < s2 <= levels[n - 1]
    assert M.blur_levels_read(blur_law(r12a, kappa=0.0), (w_lo, w_hi)) == 2
    assert M.blur_levels_read(blur_law(r12a, kappa=3.0), (w_lo, w_hi)) == len(levels)

    dv, weight = renders[300.0]
    _, _, centres, types = M.grid_micro_images(r12a)
    radii = M.USABLE_RADIUS_FRACTION * M.micro_image_radii_px(r12a, types, r12a.main_lens.f_number)
    index = np.flatnonzero(M.micro_images_in_view(r12a, centres, radii, weight, min_weight=0.5))[::41]
    neigh, _ = M.neighbour_table(centres, r12a.grid.diameter_px)
    ra, rb, g_table = M.pupil_radii(r12a, r12a.main_lens.f_number, float(radii.max()))
    full = M.matching_stack(dv, weight)
    costs = [M.cost_curve_kernel(stack, levels[: stack.shape[2]], centres, types, neigh, radii, index, ws[::100], r12a.lambda_,
                                 np.asarray(law.intercept_px), law.slope_px, KAPPA**2, 1, M.MIN_OVERLAP_PIXELS, ra, rb,
                                 M.pair_centroid_tables(g_table, levels[: stack.shape[2]]))
             for stack in (full, np.ascontiguousarray(full[:, :, :n]))]
    np.testing.assert_array_equal(M.matching_stack(dv, weight, n_levels=n), full[:, :, :n])
    assert np.isfinite(costs[0]).mean() > 0.8
    np.testing.assert_array_equal(costs[1], costs[0])


def test_the_distances_a_search_leaves_out_are_those_beyond_the_mla_conjugate():
    """The default range crosses the plane the MLA is conjugate to (υ → 0): the side with more of
    the distances is searched, the rest named; a range on one side leaves nothing out."""
    from plenocal.depth.matching import default_distance_range_mm, distances_left_out_mm, inverse_depth_range
    from plenocal.depth.metric import virtual_depth_of_points
    from plenocal.sim.presets import preset

    cam = preset("r12-a", small=True).camera
    rng = default_distance_range_mm(cam)
    lo, hi = inverse_depth_range(cam, rng)
    assert 0.0 < lo < hi <= 0.5  # the near side: υ > 0
    near, far = distances_left_out_mm(cam, rng)
    assert far == pytest.approx(rng[1])
    k, l = cam.grid.lattice.all_indices()
    c = len(k) // 2
    ups = virtual_depth_of_points(cam, np.array([[0.0, 0.0, near], [0.0, 0.0, near - 5.0]]), np.full(2, k[c]), np.full(2, l[c]))
    assert ups[0] <= -2.0 + 1e-6 and (ups[1] > 0 or ups[1] > -2.0)  # |υ| = 2 on the far side at its near end
    assert distances_left_out_mm(cam, (rng[0], near - 30.0)) is None


def test_neighbours_selected_by_baseline_and_lens_type(r12a):
    """The diagnostics' neighbour classes (``benchmarks/depth_bias.py``): on the hexagonal
    three-type grid the √3-pitch neighbours are the micro-image's own type and the first ring the
    other types; an interior micro-image has six of each."""
    from plenocal.depth import matching as M

    _, _, c, types = M.grid_micro_images(r12a)
    p = r12a.grid.diameter_px
    table, _ = M.neighbour_table(c, p)
    centre = int(np.argmin(np.sum((c - c.mean(axis=0)) ** 2, axis=1)))
    for band, same in (((1.6, 1.9), "same"), ((0.9, 1.1), "different")):
        sel, n_coarse = M.select_neighbours(table, c, types, p, baselines=band)
        row = sel[centre][sel[centre] >= 0]
        assert len(row) == 6 and n_coarse == sel.shape[1]
        dist = np.linalg.norm(c[row] - c[centre], axis=1) / p
        assert np.all((dist >= band[0]) & (dist <= band[1]))
        assert np.all((types[row] == types[centre]) == (same == "same"))
        typed, _ = M.select_neighbours(table, c, types, p, baselines=band, pair_types=same)
        np.testing.assert_array_equal(typed[centre][typed[centre] >= 0], row)
        other, _ = M.select_neighbours(table, c, types, p, baselines=band, pair_types="different" if same == "same" else "same")
        assert not np.any(other[centre] >= 0)
    with pytest.raises(ValueError):
        M.select_neighbours(table, c, types, p, pair_types="both")


GRID_LOCKING_SPREAD = 0.0015
"""Bound on the spread (max − min) of a plane's median relative error of w over four phases of
the coarse grid (shifted by 0, ¼, ½, ¾ of its step). The 300 mm render: measured 0.00006 with the
samples centred on the coarse curve's vertex (0.00031 re-centred on a first parabola's), 0.0054
with the vertex through the grid's own samples."""


def test_refinement_does_not_lock_to_the_coarse_grid(r12a, renders):
    """The parabola through costs at the coarse grid's points pulls the estimate towards them: a
    plane's median w then moves by ±0.3 % when the grid shifts by part of its step (a frame-global
    error, ±0.1–0.2 % of z on the PRISM boards, 1–3 % of their 50 mm steps). The re-centred
    refinement (a parabola whose samples are centred on the coarse curve's own vertex) is
    independent of the grid's phase."""
    from plenocal.depth import matching as M

    dv, weight = renders[300.0]
    lo, hi = inverse_depth_range(r12a, default_distance_range_mm(r12a))
    step = M.COARSE_STEP_PX / (M.matching_lambda(r12a) * r12a.grid.diameter_px)
    step = (hi - lo) / (max(int(np.ceil((hi - lo) / step)) + 1, 3) - 1)

    def spread(**options):
        med = []
        for frac in (0.0, 0.25, 0.5, 0.75):
            vd = estimate_virtual_depths(dv, weight, r12a, kappa=KAPPA, w_range=(lo + frac * step, hi + frac * step), **options)
            ok = vd.ok & (vd.confidence >= 0.3)
            w_true = 1.0 / virtual_depth_of_points(r12a, np.array([[0.0, 0.0, 300.0]]), vd.k[ok][:1], vd.l[ok][:1])[0]
            med.append(np.median(1.0 / vd.virtual_depth[ok]) / w_true - 1.0)
        return float(np.ptp(med))

    assert spread() < GRID_LOCKING_SPREAD
    assert spread(refine_common=M.REFINE_VARYING) > 2 * GRID_LOCKING_SPREAD


def test_pupil_shift_radii_use_the_blur_laws_lens_distances():
    """The shift's gain −ρ/R_b divides the blur law's ρ (each type's median d(k, l)) by R_b: both
    must use the same d. Under the PRISM-like full MLA tilt the camera's own q (at the MLA frame's
    corner, 3 % below that d at full scale) makes R_b 5 % larger (1.2–1.7 % on this small crop,
    whose MLA frame's corner is nearer its lenses); :func:`pupil_radii` takes each lens' own m, q
    (medians), which for an untilted MLA are the camera's."""
    from plenocal.depth import matching as M
    from plenocal.model.white import radius_law, radius_law_at

    for tilt, differs in ((0.0, False), (1.0, True)):
        cam = preset("r12-b", small=True, tilt_scale=tilt).camera
        ra, rb, _ = M.pupil_radii(cam, 4.0, 10.0)
        s = cam.sensor.pixel_size_mm
        k, l = cam.mla.lattice.all_indices()
        m_k, q_k = radius_law_at(cam, k, l)
        t_k = cam.mla.types.type_of(k, l)
        np.testing.assert_allclose(rb, [np.median(np.abs(q_k[t_k == t])) / s for t in range(cam.n_types)], rtol=1e-12)
        assert ra == pytest.approx(np.median(np.abs(m_k)) / 4.0 / s, rel=1e-12)
        _, q = radius_law(cam)
        legacy = np.abs(np.asarray(q)) / s
        assert (np.max(np.abs(rb / legacy - 1.0)) > 0.01) == differs
        if not differs:
            np.testing.assert_allclose(rb, legacy, rtol=1e-6)


def test_smoothed_centroid_tables_keep_a_linear_field():
    """Gaussian smoothing leaves a linear field unchanged: g(r) = a·r (the centroid field a·x)
    comes back as a·r at every variance, to the quadrature's precision; a constant g (the field
    x̂·c, singular at 0) is lowered near the centre and kept far from it."""
    from plenocal.depth import matching as M

    n = 80
    r = np.arange(n) * M.TABLE_STEP_PX
    g = np.vstack([0.3 * r, np.full(n, 2.0)])
    out = M.smoothed_centroid_tables(g, np.array([0.5, 2.0, 4.5]))
    assert out.shape == (2, 3, n)
    np.testing.assert_allclose(out[0], np.broadcast_to(0.3 * r, (3, n)), atol=1e-9)
    assert np.all(np.abs(out[1, :, 0]) < 1e-9) and np.all(out[1, :, 1:8] < 2.0)
    np.testing.assert_allclose(out[1, :, -20:], 2.0, rtol=0.03)


@pytest.mark.parametrize("shape", [(61, 83), (40, 7), (64, 96)])
def test_blur_stack_is_the_image_and_its_mask_blurred_apart(shape):
    """The image and its mask of lit pixels, blurred as the two channels of one image, give the
    numbers of two separate blurs (each level's ratio where the blurred mask is above its floor, 0
    elsewhere; the unblurred level the masked image on lit pixels): within a float32 rounding or
    two (OpenCV's vector code sums a row's last, partial vector otherwise; here, on rows a whole
    number of AVX2 vectors long, such as 4080 px, the same bytes)."""
    import cv2

    from plenocal.depth.matching import MIN_BLURRED_MASK, blur_stack

    rng = np.random.default_rng(4)
    image = rng.random(shape)
    weight = np.where(rng.random(shape) < 0.3, 0.0, rng.random(shape))
    variances = (0.0, 0.5, 1.25, 2.0, 4.5, 9.0, 16.0)  # more than one pass of levels
    stack = blur_stack(image, weight, variances=variances)
    img = image.astype(np.float32)
    mask = (weight > 0).astype(np.float32)
    for g, var in enumerate(variances):
        if var == 0.0:
            expected = np.where(mask > 0.5, img * mask, np.float32(0.0))
        else:
            num = cv2.GaussianBlur(img * mask, (0, 0), float(np.sqrt(var)), borderType=cv2.BORDER_REPLICATE)
            den = cv2.GaussianBlur(mask, (0, 0), float(np.sqrt(var)), borderType=cv2.BORDER_REPLICATE)
            with np.errstate(divide="ignore", invalid="ignore"):
                expected = np.where(den > np.float32(MIN_BLURRED_MASK), num / den, np.float32(0.0))
        assert stack[..., g].dtype == np.float32
        np.testing.assert_allclose(stack[..., g], expected, rtol=1e-6, atol=1e-7, err_msg=str(var))


def test_coarse_grid_reaches_a_step_beyond_the_range_within_the_limits():
    """One coarse step beyond each end (matching.SEARCH_MARGIN_STEPS), not beyond |υ| = 2 nor
    across υ = ±∞ (w = 0), the steps no wider than asked."""
    g = coarse_grid(0.10, 0.30, 0.02)
    assert g[0] == pytest.approx(0.08) and g[-1] == pytest.approx(0.32)
    assert np.diff(g).max() <= 0.02 + 1e-12
    assert coarse_grid(0.01, 0.49, 0.02)[[0, -1]] == pytest.approx([0.0, 0.5])
    assert coarse_grid(-0.49, -0.01, 0.02)[[0, -1]] == pytest.approx([-0.5, 0.0])
    assert coarse_grid(0.10, 0.30, 0.02, margin_steps=0)[[0, -1]] == pytest.approx([0.10, 0.30])


def test_a_plane_at_the_end_of_the_searched_range_keeps_its_depth(r12a, renders, monkeypatch):
    """The 250 mm plate with the search starting at 246 mm (its w within one coarse step of the
    range's end): every micro-image gets the depth it gets from a range with room to spare. Without
    the margin every coarse minimum fell on the scan's first hypothesis: no depth at all (measured:
    1 638 of 1 638 at the bound; plenocal's R12-C render lost the nearer half of each board within
    a step of the default range's 408 mm, whose medians then moved by +6 … +12 %)."""
    dv, weight = renders[250.0]
    wide = estimate_virtual_depths(dv, weight, r12a, kappa=KAPPA, distance_range_mm=(200.0, 540.0))
    edge = estimate_virtual_depths(dv, weight, r12a, kappa=KAPPA, distance_range_mm=(246.0, 540.0))
    assert edge.ok.sum() >= 0.98 * wide.ok.sum()
    both = edge.ok & wide.ok
    z_wide = points_from_virtual_depth(r12a, wide.k[both], wide.l[both], wide.virtual_depth[both])[:, 2]
    z_edge = points_from_virtual_depth(r12a, edge.k[both], edge.l[both], edge.virtual_depth[both])[:, 2]
    assert abs(np.median(z_edge) / np.median(z_wide) - 1.0) < 5e-4  # measured 0.0 %: the grids differ by their ends only
    from plenocal.depth import matching as M

    monkeypatch.setattr(M, "SEARCH_MARGIN_STEPS", 0)
    bare = estimate_virtual_depths(dv, weight, r12a, kappa=KAPPA, distance_range_mm=(246.0, 540.0))
    assert bare.ok.sum() < 0.1 * wide.ok.sum()
