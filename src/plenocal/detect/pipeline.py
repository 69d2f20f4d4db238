"""BAP features of one raw checkerboard image (paper §4): corners → clusters → υ → ρ.

No clicks, no prompts: every micro-image of the grid is examined, rejections are counted, and
outlier clusters are dropped automatically (reference §6.2–6.5 describe the interactive original).
Cluster ids are per frame; linking clusters to checkerboard nodes needs a pose
(:func:`plenocal.calib.extrinsics.initial_extrinsics`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import cv2
import numpy as np
from numpy.typing import NDArray
from scipy.spatial import cKDTree

from plenocal.calib.robust import robust_sigma
from plenocal.detect.clusters import (
    blur_radii_px,
    cluster_observations,
    plenoptic_point_fits,
    validate_clusters,
    virtual_depths,
)
from plenocal.detect.corners import (
    CornerFit,
    NaturalVignetting,
    chief_ray_corners,
    classify,
    devignette,
    devignette_boxes,
    locate_corners,
    refine_rendered,
)
from plenocal.detect.view import SceneView, scene_view
from plenocal.model.camera import MicroImageGrid
from plenocal.model.lattice import TypeLayout
from plenocal.model.observations import BapFeatures
from plenocal.model.projection import MIN_LENS_RADIUS_PX, pupil_unshift
from plenocal.model.pupil_ellipse import PupilEllipses
from plenocal.model.white import InternalParameters

USABLE_RADIUS_FRACTION = 0.85
"""The devignetted micro-image is usable out to this fraction of its radius |R_i(N)| (the white
falls to ~10 % of its peak there; beyond, devignetting amplifies noise)."""
BORDER_MARGIN_PX = 1.0
MIN_CONTRAST = 0.1
"""A corner's black-to-white difference, in units of the white (devignetted image), is at least this."""
MIN_LINE_ANGLE_RAD = np.radians(20.0)
"""The two lines of a corner cross at this angle or more (a flatter X is an edge, its corner undefined)."""
MAX_SIGMA_PX = 8.0
"""The X-junction's fitted edge blur σ is below this (beyond, the micro-image holds no sharp structure)."""
RESIDUAL_OUTLIER_SIGMAS = 6.0
"""A corner fit's residual RMS (relative to its contrast, i.e. noise-to-contrast) is an outlier
beyond the frame's median plus this many robust standard deviations (1.4826·MAD) of it: not one
X-junction (two corners, an occlusion, a print defect). The frame sets the scale: PRISM's
30-ray renders sit at 0.23 ± 0.02, plenocal's 96-ray renders at 0.065 ± 0.006; a fixed bound
(0.5 before) passed junk on clean images (0.38) and would reject good corners on noisy ones."""
MIN_FITS_FOR_RESIDUAL_STATISTIC = 20
"""Fewer fits than this in a frame: no residual statistic, no residual rejection."""
VIRTUAL_DEPTH_ROUNDS = 4
EXACT_ROUNDS = 2
"""Exact rounds in the final estimate (rendered-corner fits, or inversions of the estimator),
each with ρ from the previous one's virtual depths. The first uses ρ from the first-order
model's positions, which are biased: on r12-b one inversion round left virtual depths +0.4 %
off at υ 3–5 and −0.2 % at υ 9–12, which calibration turned into d +0.7 %."""
REFINE_MAX_MOVE_PX = 1.0
"""A rendered-corner fit that moves the corner farther than this from its start is rejected."""
RENDERED_ITERATIONS = (5, 3)
"""Gauss–Newton iterations of the rendered-corner fit in the first exact round (from the
first-order positions) and in later ones (from the previous round's)."""
MAX_EXACT_ROUND_CHANGE = 0.02
"""A later exact round may move a cluster's υ by at most this fraction (else it is undone)."""
VIRTUAL_DEPTH_SPREAD = 1.6
"""Clusters whose |υ| differs from the frame's typical one (:data:`CREDIBLE_VIEW_COVERAGE`) by more
than this factor are dropped."""


@dataclass(frozen=True)
class FrameDetection:
    features: BapFeatures
    """(u, v, ρ, k, l, cluster) of accepted observations; node = −1 (not linked yet)."""
    virtual_depth: NDArray[np.float64]
    """(K,) per cluster."""
    counts: dict[str, int] = field(default_factory=dict)
    view: SceneView | None = None
    """The scene as the barycentre pinhole sees it (:mod:`plenocal.detect.view`), for linking."""
    rms_bound: float = float("inf")
    """The frame's residual-outlier bound on a corner fit's RMS (:func:`residual_outlier_bound`),
    for corners fitted later in the same frame (:func:`plenocal.detect.nodes.detect_board_nodes`)."""
    devignetted: NDArray[np.float64] | None = None
    """(H, W) the devignetted image (with ``keep_images``), for fitting more corners in the frame."""
    micro: MicroImages | None = None
    """Its micro-images (with ``keep_images``)."""
    lone_index: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """(L,) micro-images (into the grid's) of the corners found that ended in no cluster: near the
    MLA's conjugate plane a corner shows in one micro-image, and a frame's lone corners are then
    most of its nodes (linked as such by :func:`plenocal.cli.detect.link_lone_corners`)."""


def detect_frame(
    image: NDArray,
    white: NDArray,
    *,
    grid: MicroImageGrid,
    omega: InternalParameters,
    layout: TypeLayout,
    frame: int = 0,
    pupil_vignetting: bool = True,
    fit_rendered: bool = True,
    keep_images: bool = False,
    pupil: PupilEllipses | None = None,
    natural: NaturalVignetting | None = None,
) -> FrameDetection:
    """BAP features of one raw checkerboard image.

    Parameters
    ----------
    image, white : (H, W) grey raw checkerboard image and the white at the same f-number.
    grid : micro-image grid (pre-calibration).
    omega : Ω (m, q'_i, Δc, λ, N) from pre-calibration.
    layout : micro-lens type layout.
    pupil_vignetting : model the vignetting of the micro-lens pupil by the main aperture, which
        displaces blurred corners from their chief-ray projection (reported (u, v) are then the
        chief-ray positions the paper's model predicts); False reports the corners where they
        appear.
    fit_rendered : the exact rounds fit the rendered, pixel-integrated vignetted corner to the
        pixels (:func:`corners.refine_rendered`, from the first-order positions). False inverts
        the corner estimator instead (:func:`corners.chief_ray_corners`): an independent
        estimator, ~30 % noisier (12 full-scale r12-b frames: uv RMS 0.103 px instead of
        0.074 px) and slower where blur is large.
    keep_images : keep the devignetted image and the micro-images in the result (about 200 MB
        at full scale), so that corners predicted later in the frame are fitted without
        devignetting it again (:func:`plenocal.detect.nodes.detect_board_nodes`).
    pupil : the main aperture's preimage per micro-image of the grid, measured from the white
        (``plenocal detect`` measures them: :func:`plenocal.cli.detect.pupil_ellipses`); None: the paper's disc of radius R_a about each node.
    natural : weigh the rendered corners' lens points by natural vignetting
        (:class:`~plenocal.detect.corners.NaturalVignetting`); None: uniformly (the paper's image).
    """
    dv, micro = frame_micro_images(image, white, grid=grid, omega=omega, layout=layout, pupil_vignetting=pupil_vignetting,
                                   pupil=pupil, natural=natural)
    sel, uv, fit, rms_bound, counts = _first_corners(dv, micro)
    clusters = cluster_observations(uv, grid.diameter_px)
    counts.update({f"clusters_{k}": v for k, v in clusters.counts.items()})
    sel, labels, chief, rho, v_obs, v_cluster, more = _clusters_and_guided(dv, micro, sel, uv, fit, clusters.labels, rms_bound=rms_bound,
                                                                           pitch_px=grid.diameter_px, fit_rendered=fit_rendered)
    counts.update(more)
    keep = (labels >= 0) & np.isfinite(v_obs)
    n = int(keep.sum())
    feats = BapFeatures(
        frame=np.full(n, frame),
        k=micro.k[sel][keep],
        l=micro.l[sel][keep],
        u=chief[keep, 0],
        v=chief[keep, 1],
        rho=rho[keep],
        node=np.full(n, -1),
        cluster=labels[keep],
    )
    counts["features"] = n
    n_first = len(clusters.labels)  # the first corners lead sel and labels; the guided ones follow
    return FrameDetection(feats, v_cluster, counts, scene_view(dv, micro.weight, pitch_px=grid.diameter_px), rms_bound=rms_bound,
                          devignetted=dv if keep_images else None, micro=micro if keep_images else None,
                          lone_index=sel[:n_first][labels[:n_first] < 0])


def _clusters_and_guided(
    dv: NDArray[np.float64], micro: MicroImages, sel: NDArray[np.int64], uv: NDArray[np.float64], fit: CornerFit,
    labels: NDArray[np.int64], *, rms_bound: float, pitch_px: float, fit_rendered: bool,
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64],
           NDArray[np.float64], dict[str, int]]:
    """:func:`detect_frame`'s clusters from its first corners (micro-image ``sel``, where they appear
    ``uv``, ``fit``, DBSCAN ``labels``): validated and screened, grown by guided detection, their
    chief-ray positions, υ and ρ. Returns (sel, labels, chief (N, 2), ρ, υ per observation, υ per
    cluster, counts); the first corners lead the arrays in their order, the guided ones follow."""
    est = {"pitch_px": pitch_px, "fit_rendered": fit_rendered}
    labels, v_obs, v_cluster, rho, chief, fit_counts = estimate_clusters(dv, micro, sel, uv, fit, labels, **est)
    labels, v_obs, v_cluster, screen_counts = screen_clusters(chief, sel, labels, v_obs, v_cluster, micro=micro)
    # Guided detection: every valid cluster predicts where its corner must appear in all the
    # micro-images that see it (p_j = λ(1 − 1/υ)·c_j + K, shifted for pupil vignetting); fit
    # there from that start and keep fits that land on the prediction.
    g_sel, g_uv, g_fit, g_lab = _guided(
        dv, micro.weight, micro=micro, sel=sel, chief=chief, angles=fit.angles, labels=labels, v_cluster=v_cluster, rms_bound=rms_bound,
    )
    counts = {"guided_added": len(g_sel)}
    if len(g_sel):
        sel = np.concatenate([sel, g_sel])
        uv = np.concatenate([uv, g_uv])
        fit = CornerFit.concatenate([fit, g_fit])
        labels = np.concatenate([labels, g_lab])
    # Final: chief-ray positions by inverting the image formation, then υ and ρ from them.
    labels, v_obs, v_cluster, rho, chief, fit_counts = estimate_clusters(dv, micro, sel, uv, fit, labels, exact=True, **est)
    labels, v_obs, v_cluster, final_counts = screen_clusters(chief, sel, labels, v_obs, v_cluster, micro=micro)
    counts.update(fit_counts)
    counts["clusters_sparse"] = screen_counts["clusters_sparse"] + final_counts["clusters_sparse"]
    counts["clusters_virtual_depth_outliers"] = screen_counts["clusters_virtual_depth_outliers"] + final_counts["clusters_virtual_depth_outliers"]
    return sel, labels, chief, rho, v_obs, v_cluster, counts


def local_radii(grid: MicroImageGrid, omega: InternalParameters, layout: TypeLayout) -> tuple[
        NDArray[np.float64], NDArray[np.int64], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Per micro-image of the grid (order of ``grid.lattice.all_indices()``): centre (M, 2), type,
    white radius R(N), R_a, R_b (px) and the physical blur − reported ρ (px)."""
    k_all, l_all = grid.lattice.all_indices()
    centres = grid.centres(k_all, l_all)
    n_types = max(layout.n_types, 1)
    types = layout.type_of(k_all, l_all) if layout.n_types else np.zeros(len(k_all), dtype=np.int64)
    # The white radius law where each micro-image is (a tilted MLA varies it by ~3 %): R_a, R_b
    # and the physical blur of the renderer are local; the reported ρ uses Ω at its reference
    # point (eq:radiusfinal), which is what the calibration model predicts.
    s_mm = omega.pixel_size_mm
    m_loc, q_loc = omega.local(centres, np.clip(types, 0, n_types - 1))
    q_ref = np.asarray(omega.q_mm if omega.q_mm else (0.0,), dtype=np.float64)[np.clip(types, 0, n_types - 1)]
    radius = np.abs(m_loc / omega.f_number + q_loc) / s_mm
    ra_all = np.abs(m_loc) / omega.f_number / s_mm
    rb_all = np.abs(q_loc) / s_mm
    return centres, types, radius, ra_all, rb_all, (q_loc - q_ref) / s_mm


def frame_micro_images(
    image: NDArray, white: NDArray, *, grid: MicroImageGrid, omega: InternalParameters, layout: TypeLayout,
    pupil_vignetting: bool = True, pupil: PupilEllipses | None = None, natural: NaturalVignetting | None = None,
) -> tuple[NDArray[np.float64], MicroImages]:
    """The devignetted image (H, W) and, per micro-image of the grid, what fitting and predicting
    corners there needs (:class:`MicroImages`). Arguments as :func:`detect_frame`'s."""
    dv, weight = devignette(image, white)
    return dv, micro_images(weight, grid=grid, omega=omega, layout=layout, pupil_vignetting=pupil_vignetting, pupil=pupil,
                            natural=natural)


def micro_images(
    weight: NDArray[np.float64], *, grid: MicroImageGrid, omega: InternalParameters, layout: TypeLayout,
    pupil_vignetting: bool = True, pupil: PupilEllipses | None = None, natural: NaturalVignetting | None = None,
) -> MicroImages:
    """Per micro-image of the grid, what fitting and predicting corners there needs, from the
    devignetting weight (H, W) (:func:`~plenocal.detect.corners.devignette`'s, or
    :func:`~plenocal.detect.corners.white_weight`: the white's alone, the same for every frame).
    Other arguments as :func:`detect_frame`'s."""
    H, W = weight.shape[:2]
    k_all, l_all = grid.lattice.all_indices()
    centres, types, radius, ra_all, rb_all, blur_offset = local_radii(grid, omega, layout)
    usable = USABLE_RADIUS_FRACTION * radius
    margin = np.ceil(radius) + 2
    on = (centres[:, 0] >= margin) & (centres[:, 0] <= W - 1 - margin) & (centres[:, 1] >= margin) & (centres[:, 1] <= H - 1 - margin)
    # Unfocused cameras (|q| → 0, R_b → 0): the aperture holds the whole lens disc for every pixel
    # but a strip R_b wide at the micro-image border, so corners are not displaced.
    vig = pupil_vignetting and layout.n_types > 0 and float(np.min(rb_all)) > MIN_LENS_RADIUS_PX
    if pupil is not None and len(pupil) != len(centres):
        raise ValueError(f"{len(pupil)} pupil ellipses for a grid of {len(centres)} micro-images")
    pupil_c, pupil_ra = (centres, ra_all) if pupil is None else pupil.first_order(centres, ra_all)
    return MicroImages(centres=centres, usable=usable, on_idx=np.flatnonzero(on), types=types, radius_aperture_px=ra_all,
                       radius_lens_px=rb_all, blur_offset=blur_offset, vignetted=vig, weight=weight, omega=omega,
                       k=k_all, l=l_all, typed=layout.n_types > 0, pupil=pupil, pupil_centres=pupil_c,
                       pupil_radius_px=pupil_ra, radius_px=radius,
                       natural=None if natural is None else natural.rows(
                           centres, lambda_=omega.lambda_, lens_radius_px=omega.micro_lens_pitch_mm / 2.0 / omega.pixel_size_mm))


BOX_MARGIN_PX = 2
""":func:`devignette_micro_images` divides each micro-image's pixels out to its radius plus this
margin (the margin of :func:`micro_images`' examined micro-images): every pixel a fit in the
micro-image reads (the usable disc, :data:`USABLE_RADIUS_FRACTION` of the radius, and the
neighbours of its bilinear samples) is inside."""


def devignette_micro_images(
    raw: NDArray, white: NDArray, micro: MicroImages, index: NDArray[np.int64], *, scale: float = 1.0,
    white_scale: float = 1.0, threshold: float | None = None,
) -> NDArray[np.float64]:
    """(H, W) the devignetted image as :func:`frame_micro_images` makes it, on the micro-images
    ``index`` (into ``micro.centres``) only: the same numbers within their radius +
    :data:`BOX_MARGIN_PX`, 0 elsewhere, which no fit there reads
    (:func:`~plenocal.detect.corners.devignette_boxes`; ``raw``, ``white``, ``scale``,
    ``white_scale``, ``threshold`` as its)."""
    idx = np.asarray(index, dtype=np.int64)
    if micro.radius_px is None:
        raise ValueError("micro-images without their radius (made by plenocal.detect.pipeline.micro_images)")
    half = int(np.ceil(float(np.max(micro.radius_px[idx])))) + BOX_MARGIN_PX if len(idx) else 0
    return devignette_boxes(raw, white, micro.centres[idx], half_px=half, scale=scale, white_scale=white_scale,
                            threshold=threshold)


def _first_corners(dv: NDArray[np.float64], micro: MicroImages) -> tuple[
        NDArray[np.int64], NDArray[np.float64], CornerFit, float, dict[str, int]]:
    """Corners found by classifying every examined micro-image and fitting the X-junction there:
    (micro-image index (N,), corner (N, 2), fit, the frame's residual-outlier bound, counts)."""
    smooth = cv2.GaussianBlur(dv.astype(np.float32), (0, 0), 1.0)
    on_idx, centres, usable = micro.on_idx, micro.centres, micro.usable
    cand = classify(smooth, centres[on_idx], usable[on_idx])
    idx = on_idx[cand.index]
    corner, fit = locate_corners(dv, micro.weight, centres[idx], usable[idx], cand.corner, cand.angles)
    dist = np.hypot(*(corner - centres[idx]).T)
    ok_conv = fit.converged
    ok_border = dist <= usable[idx] - BORDER_MARGIN_PX
    shape_ok = corner_shape_ok(fit)
    rms_bound = residual_outlier_bound(fit.rms[ok_conv & ok_border & shape_ok])
    ok_photo = shape_ok & (fit.rms <= rms_bound)
    accept = ok_conv & ok_border & ok_photo
    counts = {f"class_{k}": v for k, v in cand.counts.items()}
    counts.update(
        {
            "micro_images": len(on_idx),
            "rejected_not_converged": int((~ok_conv).sum()),
            "rejected_border": int((ok_conv & ~ok_border).sum()),
            "rejected_photometric": int((ok_conv & ok_border & ~ok_photo).sum()),
            "corners": int(accept.sum()),
        }
    )
    return idx[accept], corner[accept], fit.select(accept), rms_bound, counts


def estimate_clusters(
    dv: NDArray[np.float64], micro: MicroImages, sel: NDArray[np.int64], uv: NDArray[np.float64], fit: CornerFit,
    labels0: NDArray[np.int64], *, pitch_px: float, fit_rendered: bool, exact: bool = False,
) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], dict[str, int]]:
    """Validate clusters, υ and ρ from chief-ray positions. Observed corners are displaced by
    the vignetting of the micro-lens pupil (model.projection.pupil_shift): undo it with the
    current ρ and re-estimate, a fixed point converging in a few rounds; the first-order
    model (pupil_unshift) while clusters are being formed, then, with ``exact``, the exact
    inversion (corners.chief_ray_corners) for the final positions.

    ``dv``: the devignetted image; ``micro``: :class:`MicroImages`; per corner ``sel`` (micro-image),
    ``uv`` (where it appears), ``fit``, ``labels0`` (cluster, −1 none); ``pitch_px``: the
    micro-image pitch; ``fit_rendered``: as :func:`detect_frame`'s.
    Returns labels, v_obs, v_cluster, rho, chief, counts."""
    omega = micro.omega
    weight, centres, usable = micro.weight, micro.centres, micro.usable
    rb_all, blur_offset = micro.radius_lens_px, micro.blur_offset
    ra_all = micro.radius_aperture_px
    # The first-order (radial) shift model's disc: the pupil ellipse's stand-in where measured.
    pc_sel, pra_sel = micro.first_order_pupil(sel)
    pupil_sel = None if micro.pupil is None else micro.pupil.take(sel)
    natural_sel = None if micro.natural is None else micro.natural[sel]
    t = micro.types[sel]
    mic_sel = centres[sel]
    buffer = np.zeros_like(dv) if micro.vignetted and not fit_rendered and exact else None

    def depths(chief, labels_in):
        labels, fit_counts = validate_clusters(chief, mic_sel, labels_in, lambda_=omega.lambda_)
        v_obs, v_cluster = virtual_depths(chief, mic_sel, labels, micro_image_pitch_px=pitch_px, lambda_=omega.lambda_)
        rho = blur_radii_px(v_obs, t, omega) if micro.typed else np.full(len(sel), np.nan)
        return labels, fit_counts, v_obs, v_cluster, rho

    chief = uv
    n_chief_failed = 0
    if not micro.vignetted:
        labels, fit_counts, v_obs, v_cluster, rho = depths(chief, labels0)
    else:
        for _ in range(VIRTUAL_DEPTH_ROUNDS):
            labels, fit_counts, v_obs, v_cluster, rho = depths(chief, labels0)
            chief = pupil_unshift(uv, np.nan_to_num(rho) + blur_offset[sel], pc_sel, pra_sel, rb_all[sel])
        if exact:
            labels, fit_counts, v_obs, v_cluster, rho = depths(chief, labels0)
            ok = np.zeros(len(sel), dtype=bool)
            angles = fit.angles
            position_sigma = np.full(len(sel), np.inf)  # per corner, from the last rendered fit
            lens_points = np.zeros(len(sel))  # per corner, the lens points it was rendered with
            first_order = chief
            rho_prev = None
            for rnd in range(EXACT_ROUNDS):
                if fit_rendered:
                    # Each round continues from the previous one's corners and line angles;
                    # a corner may end at most REFINE_MAX_MOVE_PX from its first-order position.
                    rho_now = np.nan_to_num(rho) + blur_offset[sel]
                    # (corners in no cluster are not fitted: nothing uses their positions)
                    redo = (labels0 >= 0) if rho_prev is None else (labels0 >= 0) & unsettled_by_blur_change(
                        chief, rho_prev, rho_now, pc_sel, pra_sel, rb_all[sel], ok=ok, sigma_px=position_sigma)
                    r_ = np.flatnonzero(redo)
                    rendered = refine_rendered(
                        dv, weight, mic_sel[r_], usable[sel][r_], chief[r_], angles[r_], fit.render_sign[r_], rho_now[r_],
                        ra_all[sel][r_], rb_all[sel][r_], unblurred_weight=omega.unblurred_weight,
                        iterations=RENDERED_ITERATIONS[min(rnd, 1)],
                        lens_points_start=None if rnd == 0 else lens_points[r_],
                        pupil=None if pupil_sel is None else pupil_sel.take(r_),
                        natural=None if natural_sel is None else natural_sel[r_],
                    )
                    new, new_ok = chief.copy(), ok.copy()
                    angles = angles.copy()
                    new[r_], new_ok[r_], angles[r_] = rendered.corner, rendered.ok, rendered.angles
                    position_sigma[r_], lens_points[r_] = rendered.sigma_px, rendered.lens_points
                    new_ok &= np.hypot(*(new - first_order).T) <= REFINE_MAX_MOVE_PX
                    rho_prev = rho_now
                else:
                    new, new_ok = chief_ray_corners(uv, fit, np.nan_to_num(rho) + blur_offset[sel], weight, mic_sel, usable[sel],
                                                    ra_all[sel], rb_all[sel], buffer=buffer,
                                                    unblurred_weight=omega.unblurred_weight, pupil=pupil_sel,
                                                    natural=natural_sel)
                if rnd:
                    # Later rounds refine ρ; a cluster whose υ jumps is not converging: keep its
                    # previous positions.
                    v_new = depths(new, np.where(~new_ok & (labels0 >= 0), -1, labels0))[2]
                    # (observations left out of the previous round have no υ to compare with)
                    jump = np.isfinite(v_obs) & ~(np.abs(v_new / v_obs - 1.0) <= MAX_EXACT_ROUND_CHANGE)
                    new = np.where(jump[:, None], chief, new)
                    new_ok = np.where(jump, ok, new_ok)
                chief, ok = new, new_ok
                bad = ~ok & (labels0 >= 0)
                n_chief_failed = int(bad.sum())
                labels, fit_counts, v_obs, v_cluster, rho = depths(chief, np.where(bad, -1, labels0))
    if exact:
        fit_counts["rejected_chief_ray_not_converged"] = n_chief_failed
    return labels, v_obs, v_cluster, rho, chief, fit_counts


def unsettled_by_blur_change(
    corner: NDArray[np.float64],
    rho_before: NDArray[np.float64],
    rho_after: NDArray[np.float64],
    mic_uv: NDArray[np.float64],
    radius_aperture_px: NDArray[np.float64],
    radius_lens_px: NDArray[np.float64],
    *,
    ok: NDArray[np.bool_],
    sigma_px: NDArray[np.float64],
) -> NDArray[np.bool_]:
    """Corners a new exact round must fit again: those not settled (``ok`` false) and those whose
    blur changed enough to move them. A fit converged at blur ρ moves, when ρ changes, by as much
    as its pupil-vignetting shift does (first-order model, :func:`~plenocal.model.projection.pupil_shift_px`);
    below the rendered fit's own stopping step (:data:`~plenocal.detect.corners.STEP_FRACTION_OF_SIGMA`
    of the corner's position σ) a new fit would not move it."""
    from plenocal.detect.corners import STEP_FRACTION_OF_SIGMA
    from plenocal.model.projection import pupil_shift_px

    before = pupil_shift_px(corner, rho_before, mic_uv, radius_aperture_px, radius_lens_px)
    after = pupil_shift_px(corner, rho_after, mic_uv, radius_aperture_px, radius_lens_px)
    moved = np.hypot(*(after - before).T)
    return ~ok | ~(moved < np.maximum(0.01, STEP_FRACTION_OF_SIGMA * sigma_px))


GUIDED_TOLERANCE_PX = 1.0
"""A guided fit must land within this distance of its prediction."""

MIN_VIEW_COVERAGE = 0.25
"""A cluster must hold an accepted corner in at least this fraction of the micro-images where its
own plenoptic model (a, K, υ) predicts the corner to appear inside the acceptance disc on lit
pixels (:func:`view_coverage`), else it is not one scene corner seen through the MLA but a chance
alignment of a few false fits (noise, the L-shaped junctions where the pattern meets the white
border, the border against the background), which are found in a few of the micro-images that
see them. Measured with the frames' own clusters told apart by their truth: real-optics r12-b
(16 spp renders, 16 frames) real clusters median 0.79, 10th percentile 0.39 (lower where the
image circle vignettes and the first-order υ is biased), spurious ones median 0.01, 95th
percentile 0.19; PRISM r12-b (13 frames) real clusters ≥ 0.44 before guided detection and ≥ 0.5
after it, spurious ones ≤ 0.13. A cluster seen in one to three micro-images (near the MLA's
conjugate plane) is predicted in about as many, so it passes."""

CREDIBLE_VIEW_COVERAGE = 0.5
"""The frame's typical virtual depth (for :data:`VIRTUAL_DEPTH_SPREAD`) is the median over the
clusters with at least this coverage: nearly all real (see :data:`MIN_VIEW_COVERAGE`); with false
clusters outnumbering real ones (real-optics frames near the camera: 60–110 false clusters of
2–7 fits against 35 corners) the median over all clusters was theirs, and the frame's real
corners were dropped as outliers."""


@dataclass(frozen=True)
class MicroImages:
    """Per micro-image of the grid, what predicting a corner's views needs (arrays of shape (M,))."""

    centres: NDArray[np.float64]
    """(M, 2) micro-image centres, px."""
    usable: NDArray[np.float64]
    """Usable radius, px."""
    on_idx: NDArray[np.int64]
    """Micro-images far enough inside the image to be examined."""
    types: NDArray[np.int64]
    radius_aperture_px: NDArray[np.float64]
    radius_lens_px: NDArray[np.float64]
    blur_offset: NDArray[np.float64]
    vignetted: bool
    """Corners appear displaced by the vignetting of the micro-lens pupil."""
    weight: NDArray[np.float64]
    """(H, W) devignetting weight, 0 where the white is dark."""
    omega: InternalParameters
    k: NDArray[np.int64] | None = None
    """(M,) micro-lens indices of the micro-images (None: not known)."""
    l: NDArray[np.int64] | None = None
    typed: bool = True
    """The camera has micro-lens types (a blur radius ρ per corner); False: unfocused, ρ is NaN."""
    pupil: PupilEllipses | None = None
    """(M,) the main aperture's preimage per micro-image, measured from the white (None: the disc)."""
    pupil_centres: NDArray[np.float64] | None = None
    """(M, 2) the first-order shift model's pupil centres (``centres`` where no ellipse)."""
    pupil_radius_px: NDArray[np.float64] | None = None
    """(M,) the first-order shift model's pupil radii (``radius_aperture_px`` where no ellipse)."""
    radius_px: NDArray[np.float64] | None = None
    """(M,) the white's micro-image radius |R_i(N)|, px (None: not known)."""
    natural: NDArray[np.float64] | None = None
    """(M, 4) the natural vignetting's rows of the rendered corners
    (:meth:`~plenocal.detect.corners.NaturalVignetting.rows`; None: none)."""

    def first_order_pupil(self, idx: NDArray) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Centres (n, 2) and radii (n,) of the discs that the first-order pupil-shift model
        (:func:`plenocal.model.projection.pupil_shift_px`) takes for micro-images ``idx``."""
        c = self.centres if self.pupil_centres is None else self.pupil_centres
        r = self.radius_aperture_px if self.pupil_radius_px is None else self.pupil_radius_px
        return c[idx], r[idx]

    @cached_property
    def tree(self) -> cKDTree:
        return cKDTree(self.centres[self.on_idx])

    @cached_property
    def max_usable_px(self) -> float:
        return float(np.max(self.usable[self.on_idx])) if len(self.on_idx) else 0.0


def predicted_views(
    a: NDArray[np.float64], K: NDArray[np.float64], v: NDArray[np.float64], *, micro: MicroImages, slack_px: float = 0.0
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64]]:
    """Micro-images in which virtual points ``p_j = a·c_j + K`` (a = λ(1 − 1/υ)) appear.

    A point's chief-ray image is inside the micro-image's acceptance disc (usable radius −
    :data:`BORDER_MARGIN_PX`) and, with pupil vignetting, its appearing (pupil-shifted) position
    within that disc + ``slack_px``. ``p_j − c_j = (a − 1)·(c_j − K/(1 − a))``: the micro-images
    lie within (largest usable radius)/|1 − a| of the fixed point K/(1 − a).

    Parameters
    ----------
    a : (C,); K : (C, 2); v : (C,) virtual depths — one virtual point each.

    Returns
    -------
    owner : (n,) the point (index into ``a``) of each view, ascending;
    index : (n,) its micro-image (into ``micro.centres``), ascending within a point;
    appear : (n, 2) where the corner appears, px.
    """
    from plenocal.model.projection import pupil_shift_px

    centres, usable = micro.centres, micro.usable
    a = np.asarray(a, dtype=np.float64).reshape(-1)
    K = np.asarray(K, dtype=np.float64).reshape(-1, 2)
    v = np.asarray(v, dtype=np.float64).reshape(-1)
    one = 1.0 - a
    ok = np.isfinite(one) & (np.abs(one) > 1e-12) & np.all(np.isfinite(K), axis=1) & np.isfinite(v)
    z = np.zeros(0, dtype=np.int64)
    if not np.any(ok) or not len(micro.on_idx):
        return z, z, np.zeros((0, 2))
    pts = np.flatnonzero(ok)
    fixed = K[pts] / one[pts, None]
    diag = float(np.hypot(*micro.weight.shape))
    reach = np.minimum(micro.max_usable_px / np.abs(one[pts]), 2.0 * diag)
    lists = micro.tree.query_ball_point(fixed, reach)
    n = np.fromiter((len(x) for x in lists), dtype=np.int64, count=len(lists))
    if not n.sum():
        return z, z, np.zeros((0, 2))
    owner = np.repeat(pts, n)
    near = micro.on_idx[np.concatenate([np.asarray(x, dtype=np.int64) for x in lists if len(x)])]
    order = np.lexsort((near, owner))
    owner, near = owner[order], near[order]
    pred = a[owner, None] * centres[near] + K[owner]
    inside = np.hypot(*(pred - centres[near]).T) <= usable[near] - BORDER_MARGIN_PX
    owner, near, pred = owner[inside], near[inside], pred[inside]
    if micro.vignetted and len(near):
        rho = blur_radii_px(v[owner], micro.types[near], micro.omega) + micro.blur_offset[near]
        pc, pra = micro.first_order_pupil(near)
        pred = pupil_shift_px(pred, rho, pc, pra, micro.radius_lens_px[near])
        reach_ok = np.hypot(*(pred - centres[near]).T) <= usable[near] - BORDER_MARGIN_PX + slack_px
        owner, near, pred = owner[reach_ok], near[reach_ok], pred[reach_ok]
    return owner, near, pred


def view_coverage(
    chief: NDArray[np.float64], sel: NDArray[np.int64], labels: NDArray[np.int64], v_cluster: NDArray[np.float64], *,
    micro: MicroImages,
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Per cluster, the micro-images predicted to show its corner on lit pixels inside the
    acceptance disc (:func:`predicted_views`, the white's weight > 0 where it appears) and how
    many of them hold one of its observations.

    Parameters
    ----------
    chief : (N, 2) chief-ray positions; sel : (N,) their micro-images; labels : (N,) cluster ids
    (−1 none); v_cluster : (K,) virtual depths (NaN: dropped).

    Returns
    -------
    predicted, found : (K,) counts (0, 0 for clusters without a finite υ or two observations).
    """
    K = len(v_cluster)
    predicted = np.zeros(K, dtype=np.int64)
    found = np.zeros(K, dtype=np.int64)
    on = labels >= 0
    if not K or not np.any(on):
        return predicted, found
    a_fit, K_fit, _ = plenoptic_point_fits(chief, micro.centres[sel], labels)
    a, Kc = np.full(K, np.nan), np.full((K, 2), np.nan)
    a[: len(a_fit)], Kc[: len(a_fit)] = a_fit, K_fit
    n_obs = np.bincount(labels[on], minlength=K)[:K]
    a = np.where((n_obs >= 2) & np.isfinite(v_cluster), a, np.nan)
    owner, near, appear = predicted_views(a, Kc, v_cluster, micro=micro)
    H, W = micro.weight.shape
    iu = np.clip(np.rint(appear[:, 0]).astype(np.int64), 0, W - 1)
    iv = np.clip(np.rint(appear[:, 1]).astype(np.int64), 0, H - 1)
    lit = micro.weight[iv, iu] > 0.0
    owner, near = owner[lit], near[lit]
    M = len(micro.centres)
    held = np.isin(owner * M + near, labels[on].astype(np.int64) * M + sel[on])
    predicted += np.bincount(owner, minlength=K)
    found += np.bincount(owner[held], minlength=K)
    return predicted, found


def screen_clusters(
    chief: NDArray[np.float64], sel: NDArray[np.int64], labels: NDArray[np.int64], v_obs: NDArray[np.float64],
    v_cluster: NDArray[np.float64], *, micro: MicroImages, min_coverage: float = MIN_VIEW_COVERAGE,
    credible_coverage: float = CREDIBLE_VIEW_COVERAGE, spread: float = VIRTUAL_DEPTH_SPREAD,
) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64], dict[str, int]]:
    """Drop clusters that are not target corners: seen in too few of the micro-images their own
    model predicts (:data:`MIN_VIEW_COVERAGE`), or whose υ is far from the frame's typical one
    (the median over the credible clusters, :data:`CREDIBLE_VIEW_COVERAGE`; a planar target at
    the paper's tilts spans a limited range of virtual depths, :data:`VIRTUAL_DEPTH_SPREAD`).

    Returns the new labels, v_obs, v_cluster (NaN for dropped clusters) and the counts
    ``clusters_sparse`` and ``clusters_virtual_depth_outliers``.
    """
    predicted, found = view_coverage(chief, sel, labels, v_cluster, micro=micro)
    finite = np.isfinite(v_cluster)
    with np.errstate(invalid="ignore", divide="ignore"):
        coverage = np.where(predicted > 0, found / np.maximum(predicted, 1), 0.0)
    sparse = finite & ~(coverage >= min_coverage)
    kept = finite & ~sparse
    credible = kept & (coverage >= credible_coverage)
    basis = credible if credible.sum() >= 3 else kept
    off = np.zeros_like(finite)
    if basis.sum() >= 3:
        med = float(np.median(np.abs(v_cluster[basis])))
        with np.errstate(divide="ignore"):
            off = kept & (np.abs(np.log(np.abs(v_cluster) / med)) > np.log(spread))
    drop = sparse | off
    labels = np.where((labels >= 0) & drop[np.clip(labels, 0, None)], -1, labels) if len(v_cluster) else labels
    v_obs = np.where(labels >= 0, v_obs, np.nan)
    v_cluster = np.where(drop, np.nan, v_cluster)
    return labels, v_obs, v_cluster, {"clusters_sparse": int(sparse.sum()), "clusters_virtual_depth_outliers": int(off.sum())}


def corner_shape_ok(fit: CornerFit) -> NDArray[np.bool_]:
    """Fits that look like a corner: contrast, line angle and blur within
    :data:`MIN_CONTRAST`, :data:`MIN_LINE_ANGLE_RAD`, :data:`MAX_SIGMA_PX`."""
    return (fit.contrast > MIN_CONTRAST) & (fit.angle_between_rad > MIN_LINE_ANGLE_RAD) & (fit.sigma_px < MAX_SIGMA_PX)


def residual_outlier_bound(rms: NDArray[np.float64], *, sigmas: float = RESIDUAL_OUTLIER_SIGMAS) -> float:
    """The largest residual RMS of a fit that is not an outlier among ``rms`` (one frame's fits):
    median + ``sigmas``·1.4826·MAD; inf with fewer than :data:`MIN_FITS_FOR_RESIDUAL_STATISTIC`."""
    r = np.asarray(rms, dtype=np.float64)
    r = r[np.isfinite(r)]
    if len(r) < MIN_FITS_FOR_RESIDUAL_STATISTIC:
        return float("inf")
    return float(np.median(r)) + sigmas * robust_sigma(r)


def _guided(dv, weight, *, micro, sel, chief, angles, labels, v_cluster, rms_bound):
    """Candidate corners predicted from each cluster's plenoptic model, fitted and checked.

    ``dv``, ``weight``: the devignetted image and its weights; ``micro``: the micro-images
    (:class:`MicroImages`); per detected corner: ``sel`` (micro-image), ``chief``, ``angles``,
    ``labels``; per cluster ``v_cluster``; ``rms_bound`` the frame's residual-outlier bound."""
    centres = micro.centres
    K = len(v_cluster)
    on = labels >= 0
    z = np.zeros(0, dtype=np.int64)
    if not K or not np.any(on):
        return z, np.zeros((0, 2)), CornerFit.empty(), z
    a, Kc, _ = plenoptic_point_fits(chief, centres[sel], labels)
    n_obs = np.bincount(labels[on], minlength=K)[:K]
    usable_cluster = (n_obs >= 2) & np.isfinite(v_cluster[:K])
    a = np.where(usable_cluster[: len(a)], a, np.nan)
    # Where the corner appears: a fit is kept only within GUIDED_TOLERANCE_PX of this and
    # BORDER_MARGIN_PX inside the usable disc, so a prediction farther out cannot pass
    # (on PRISM frames, half the candidates: vignetting pushes corners outwards).
    owner, near, pred = predicted_views(a, Kc, v_cluster[: len(a)], micro=micro, slack_px=GUIDED_TOLERANCE_PX)
    # Micro-images without a corner yet; one predicted by several clusters goes to the first.
    fresh = ~np.isin(near, sel)
    owner, near, pred = owner[fresh], near[fresh], pred[fresh]
    by_image = np.lexsort((owner, near))
    first = np.ones(len(near), dtype=bool)
    first[by_image[1:]] = near[by_image[1:]] != near[by_image[:-1]]
    owner, near, pred = owner[first], near[first], pred[first]
    cand_idx, cand_pred, cand_ang, cand_lab = [], [], [], []
    if len(owner):
        # Line angles of each cluster's most central member (least vignetted): the angles are
        # defined modulo π, so they are not averaged.
        member = np.flatnonzero(on)
        dist = np.hypot(*(chief[member] - centres[sel[member]]).T)
        order = np.lexsort((dist, labels[member]))
        lab_sorted = labels[member][order]
        first_of = np.r_[True, lab_sorted[1:] != lab_sorted[:-1]]
        ref = np.full(K, -1, dtype=np.int64)
        ref[lab_sorted[first_of]] = member[order][first_of]
        cand_idx, cand_pred = [near], [pred]
        cand_ang, cand_lab = [angles[ref[owner]]], [owner]
    if not cand_idx:
        z = np.zeros(0, dtype=np.int64)
        return z, np.zeros((0, 2)), CornerFit.empty(), z
    idx = np.concatenate(cand_idx)
    pred = np.concatenate(cand_pred)
    ang = np.concatenate(cand_ang)
    lab = np.concatenate(cand_lab)
    usable = micro.usable
    corner, fit = locate_corners(dv, weight, centres[idx], usable[idx], pred, ang)
    ok = fit.converged & (np.hypot(*(corner - pred).T) <= GUIDED_TOLERANCE_PX)
    ok &= np.hypot(*(corner - centres[idx]).T) <= usable[idx] - BORDER_MARGIN_PX
    ok &= corner_shape_ok(fit) & (fit.rms <= rms_bound)
    return idx[ok], corner[ok], fit.select(ok), lab[ok]
