"""Synthetic observations: the model's own projections of known poses, plus Gaussian noise.

Used by the calibration tests and benchmarks (and by anyone who needs observations with a known
answer). For each frame and board node, the micro-lenses whose micro-image contains the node's
image are those near the node's central projection whose projected (u, v) falls inside the
micro-image disk of radius ``|m/N + q_i|/s − margin`` around the micro-image centre
(paper eq:miradiusfnumber). Every micro-lens also gives one micro-image centre (MIC).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from plenocal.model.camera import PlenopticCamera
from plenocal.model.geometry import Pose
from plenocal.model.observations import (
    POSITIONS_AS_SEEN,
    POSITIONS_CHIEF_RAY,
    BapFeatures,
    MicroImageCentres,
    Observations,
)
from plenocal.model.projection import micro_image_centres, project_bap
from plenocal.model.target import Checkerboard
from plenocal.model.white import radius_law


@dataclass(frozen=True)
class NoiseLevels:
    """Standard deviations of the synthetic noise, in pixels."""

    uv_px: float = 0.3
    rho_px: float = 0.05
    mic_px: float = 0.1


def micro_image_radius_px(camera: PlenopticCamera) -> np.ndarray:
    """|m/N + q_i|/s per type (one value for I = 0), shape (max(I, 1),), px."""
    m, q = radius_law(camera)
    N = camera.main_lens.f_number
    return np.abs(m / N + np.asarray(q)) / camera.sensor.pixel_size_mm


def bap_features(
    camera: PlenopticCamera,
    poses: Mapping[int, Pose],
    board: Checkerboard,
    *,
    margin_px: float = 4.5,
    search_pitches: int = 8,
    pupil_vignetting: bool = False,
) -> BapFeatures:
    """Noise-free BAP features of every board node in every frame.

    Parameters
    ----------
    camera : PlenopticCamera
    poses : mapping frame → cam_from_world Pose
    board : Checkerboard
    margin_px : float
        Features closer than this to the micro-image border are dropped.
    search_pitches : int
        Half-size, in micro-image pitches, of the index window searched around each node's
        central projection.
    pupil_vignetting : bool
        (u, v) with the pupil-vignetting shift (``project_bap(..., pupil_vignetting=True)``).

    Returns
    -------
    BapFeatures
        Sorted by frame; ``node`` and ``cluster`` are the node id.
    """
    grid, lattice = camera.grid, camera.mla.lattice
    radius = micro_image_radius_px(camera)
    s = camera.sensor.pixel_size_mm
    u0, v0 = camera.sensor.principal_point_px
    f_pin = camera.sensor.distance_mm / s
    nodes = np.arange(board.n_nodes)
    pw = board.node_points(nodes)
    off = np.arange(-search_pitches, search_pitches + 1)
    dk, dl = (a.reshape(-1) for a in np.meshgrid(off, off))
    parts = []
    for frame in sorted(poses):
        pc = poses[frame].apply(pw)
        uc = u0 + f_pin * pc[:, 0] / pc[:, 2]
        vc = v0 + f_pin * pc[:, 1] / pc[:, 2]
        k0, l0 = grid.nearest(uc, vc)
        k = (k0[:, None] + dk[None, :]).reshape(-1)
        l = (l0[:, None] + dl[None, :]).reshape(-1)
        node = np.repeat(nodes, dk.size)
        keep = lattice.contains(k, l)
        k, l, node = k[keep], l[keep], node[keep]
        feat = project_bap(camera, pc[node], k, l, pupil_vignetting=pupil_vignetting)
        mic = micro_image_centres(camera, k, l)
        r_type = radius[camera.mla.types.type_of(k, l)] if camera.n_types else np.full(k.shape, radius[0])
        dist = np.hypot(feat[:, 0] - mic[:, 0], feat[:, 1] - mic[:, 1])
        ok = (
            (dist < r_type - margin_px)
            & (feat[:, 0] >= 0)
            & (feat[:, 0] <= camera.sensor.width_px - 1)
            & (feat[:, 1] >= 0)
            & (feat[:, 1] <= camera.sensor.height_px - 1)
        )
        n = int(ok.sum())
        parts.append(
            BapFeatures(
                frame=np.full(n, frame),
                k=k[ok],
                l=l[ok],
                u=feat[ok, 0],
                v=feat[ok, 1],
                rho=feat[ok, 2],
                node=node[ok],
                cluster=node[ok],
            )
        )
    return BapFeatures.concatenate(parts)


def synthetic_observations(
    camera: PlenopticCamera,
    poses: Mapping[int, Pose],
    board: Checkerboard,
    *,
    noise: NoiseLevels | None = None,
    seed: int = 0,
    margin_px: float = 4.5,
    pupil_vignetting: bool = False,
    rho_per_cluster: bool = False,
) -> tuple[Observations, Observations]:
    """Noisy and noise-free observations of ``board`` seen from ``poses``.

    Parameters
    ----------
    camera, poses, board
        The ground truth.
    noise : NoiseLevels
        σ of the Gaussian noise on (u, v), ρ and the MICs (px). Default 0.3, 0.05, 0.1.
    seed : int
        Seed of the noise (``numpy.random.default_rng``).
    pupil_vignetting : bool
        Features displaced by the pupil vignetting (beyond the paper's chief-ray model).
    rho_per_cluster : bool
        One ρ error per (frame, node), shared by its observations (as detection has it: every ρ
        of a cluster comes from the cluster's virtual depth, paper eq:radiusfinal).

    Returns
    -------
    noisy, truth : Observations
        Same rows in both; MICs for every micro-lens of the lattice.
    """
    noise = noise or NoiseLevels()
    rng = np.random.default_rng(seed)
    bap = bap_features(camera, poses, board, margin_px=margin_px, pupil_vignetting=pupil_vignetting)
    k, l = camera.mla.lattice.all_indices()
    c = micro_image_centres(camera, k, l)
    mic = MicroImageCentres(k=k, l=l, u=c[:, 0], v=c[:, 1])
    positions = POSITIONS_AS_SEEN if pupil_vignetting else POSITIONS_CHIEF_RAY
    truth = Observations(bap, mic, positions)
    n, m = len(bap), len(mic)
    duv = rng.normal(0.0, noise.uv_px, size=(n, 2))
    drho = rng.normal(0.0, noise.rho_px, size=n)
    if rho_per_cluster and n:
        _, point = np.unique(np.stack([bap.frame, bap.node]), axis=1, return_inverse=True)
        drho = drho[np.unique(point.reshape(-1), return_index=True)[1]][point.reshape(-1)]
    dmic = rng.normal(0.0, noise.mic_px, size=(m, 2))
    rho = bap.rho + drho if camera.n_types else bap.rho
    noisy_bap = BapFeatures(
        frame=bap.frame, k=bap.k, l=bap.l, u=bap.u + duv[:, 0], v=bap.v + duv[:, 1], rho=rho,
        node=bap.node, cluster=bap.cluster,
    )
    noisy_mic = MicroImageCentres(k=k, l=l, u=c[:, 0] + dmic[:, 0], v=c[:, 1] + dmic[:, 1])
    return Observations(noisy_bap, noisy_mic, positions), truth


def add_gross_outliers(
    observations: Observations,
    *,
    fraction: float = 0.03,
    low_px: float = 5.0,
    high_px: float = 30.0,
    seed: int = 0,
) -> tuple[Observations, np.ndarray]:
    """Replace a fraction of the BAP (u, v) by gross outliers (random direction, |δ| ∈ [low, high]).

    Returns
    -------
    observations, outlier_rows : Observations, ndarray of int
    """
    rng = np.random.default_rng(seed)
    bap = observations.bap
    n = len(bap)
    rows = np.sort(rng.choice(n, size=round(fraction * n), replace=False))
    mag = rng.uniform(low_px, high_px, size=rows.size)
    ang = rng.uniform(0.0, 2 * np.pi, size=rows.size)
    u, v = bap.u.copy(), bap.v.copy()
    u[rows] += mag * np.cos(ang)
    v[rows] += mag * np.sin(ang)
    cols = bap.columns()
    cols.update(u=u, v=v)
    return Observations(BapFeatures(**cols), observations.mic, observations.positions), rows


def perturbed_camera(
    camera: PlenopticCamera,
    *,
    relative: float = 0.03,
    principal_point_px: float = 50.0,
    seed: int = 0,
) -> PlenopticCamera:
    """The camera with F, D, d, f_i scaled by 1 ± ``relative`` and the principal point moved.

    Signs are drawn at random (seeded); magnitudes are exactly ``relative`` and
    ``principal_point_px`` (per coordinate). The MLA translation keeps tz = −D.
    """
    from plenocal.model.camera import MainLens, MicroLensArray, Sensor

    rng = np.random.default_rng(seed)
    sg = rng.choice([-1.0, 1.0], size=6 + camera.n_types)
    F = camera.main_lens.focal_length_mm * (1 + relative * sg[0])
    D = camera.D_mm * (1 + relative * sg[1])
    d = camera.d_mm * (1 + relative * sg[2])
    u0, v0 = camera.principal_point_px
    pp = (u0 + principal_point_px * sg[3], v0 + principal_point_px * sg[4])
    f = tuple(fi * (1 + relative * sg[6 + i]) for i, fi in enumerate(camera.mla.focal_lengths_mm))
    tx, ty, _ = camera.mla.translation_mm
    mla = MicroLensArray(
        lattice=camera.mla.lattice, pitch_mm=camera.mla.pitch_mm, rotation_xyz_rad=camera.mla.rotation_xyz_rad,
        translation_mm=(tx, ty, -D), focal_lengths_mm=f, types=camera.mla.types,
    )
    s = camera.sensor
    return camera.replace(
        main_lens=MainLens(F, camera.main_lens.f_number),
        mla=mla,
        sensor=Sensor(s.pixel_size_mm, s.width_px, s.height_px, pp, D + d),
    )
