"""Camera presets after the paper's setups (paper §6, Table datasets, Table intrinsics).

- ``r12-a``, ``r12-b``, ``r12-c``, ``r12-d``: Raytrix R12 (4080 × 3068 px, 5.5 µm, hexagonal
  176 × 152, I = 3, Galilean) with F = 50 mm at h = 450 mm, 1000 mm, ∞ and F = 135 mm at
  h = 1500 mm. The true camera is the paper's calibrated "BAP" column of Table intrinsics
  (R12-A: the reference's ``intrinsics.js``, the same numbers at full precision).
- ``upc-s``: the paper's simulated Lytro-Illum-like unfocused camera ("Ref." column, Table
  intrinsics): 7728 × 5368 px, 1.4 µm, hexagonal 541 × 434, I = 1, f = d.
- ``kep-3``: an invented Keplerian multi-focus camera (f_i < d) on the R12 sensor and MLA.

Every preset camera has a micro-image grid consistent with its MLA (``mia=None``).

**MLA tilt.** The model's blur radius uses one MLA–sensor distance d (the paper's "legacy" form,
reference §4 step 7), but a tilted MLA has a different distance to the sensor under every lens:
with the paper's tilts (≈ 8e-4 rad over a 22 mm array) d varies by up to 9 %, which changes the
physical blur radii by up to ~0.5 px and the white micro-image radii by several per cent — more
than the model-versus-simulator agreement required. The presets therefore keep the paper's in-plane
rotation θz and the directions of θx, θy, but scale θx, θy down 100× (``tilt_scale``), which keeps
the legacy model exact to < 0.01 px. ``tilt_scale=1`` gives the paper's tilt, the default of renders
through a real main lens (:data:`REAL_OPTICS_TILT_SCALE`).

``small=True`` gives the same optics on a central crop of the sensor (at most 1000 × 800 px) and
of the MLA (the micro-lenses whose micro-images touch the crop, with a one-lens margin); pixel
(i, j) of the crop is pixel (i + i0, j + j0) of the full sensor.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from plenocal.errors import ModelError
from plenocal.model.camera import (
    Configuration,
    Distortion,
    MainLens,
    MicroLensArray,
    PlenopticCamera,
    Sensor,
    lattice_corner,
)
from plenocal.model.lattice import Lattice, LatticeKind, TypeLayout
from plenocal.model.projection import micro_image_centres
from plenocal.model.target import Checkerboard
from plenocal.model.white import radius_law

R12_WHITE_F_NUMBERS = (4.0, 5.66, 8.0, 11.31, 16.0)
SMALL_MAX_SIZE_PX = (1000, 800)
TILT_SCALE = 0.01

REAL_OPTICS_TILT_SCALE = 1.0
"""``tilt_scale`` of a render through a real main lens (``plenocal simulate --lens``): the paper's
MLA tilt, as real R12s have it (the reference's R12-A calibration, 8.4e-4 / −6.4e-4 rad) and as the
other tracer's real-optics sets are rendered (6e-4 / −5e-4 rad). The tilt is what places a real
lens's exit pupil: it puts every lens at its own distance from the pupil, and the micro-image
lattice's scale then varies across the array. Without it the images do not determine e and so not
F. Measured on the double-Gauss R12-A render's 16 calibration poses (176–370 mm; the model's own
features, detection-like noise, e free; scratch of 2026-11-27, ``docs/model.md``, "The exit pupil"):
σ_e 38 mm and σ_F 7.1 % at :data:`TILT_SCALE`, 0.82 mm and 0.17 % at this one. The real lenslets'
chief-ray law, noise-free, moves e by +23 mm (F −7.9 %) on the untilted MLA and by −0.1 mm
(F +0.01 %) on the tilted one. The legacy blur-radius form that :data:`TILT_SCALE` protects is not
the default, whose ρ takes each lens's own distance to the sensor."""


@dataclass(frozen=True)
class DatasetPlan:
    """The acquisition plan of a dataset (paper Table datasets).

    Distances in mm along the optical axis (board centre); ``translation_*`` is the controlled
    motion along z of the evaluation sequence.
    """

    board: Checkerboard
    calibration_range_mm: tuple[float, float]
    translation_range_mm: tuple[float, float]
    translation_step_mm: float
    checkerboard_f_number: float
    white_f_numbers: tuple[float, ...]
    n_calibration: int = 16
    n_evaluation: int = 15
    max_tilt_rad: float = math.radians(30.0)

    @property
    def translation_positions_mm(self) -> tuple[float, ...]:
        lo, hi = self.translation_range_mm
        n = round((hi - lo) / self.translation_step_mm) + 1
        return tuple(lo + k * self.translation_step_mm for k in range(n))


@dataclass(frozen=True, eq=False)
class Preset:
    """A named simulated setup: the true camera and the dataset plan."""

    name: str
    camera: PlenopticCamera
    plan: DatasetPlan
    description: str
    crop_origin_px: tuple[int, int] = (0, 0)
    crop_origin_lens: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class _Table:
    """One column of Table intrinsics in the paper's units and signs."""

    F: float
    Q1e5: float
    minus_Q2e6: float
    Q3e8: float
    P1e5: float
    minus_P2e5: float
    D: float
    minus_tx: float
    minus_ty: float
    minus_theta_x_urad: float
    theta_y_urad: float
    theta_z_urad: float
    pitch_um: float
    f_um: tuple[float, ...]
    u0: float
    v0: float
    d_um: float


# Paper Table intrinsics, "BAP" columns and UPC-S "Ref.". R12-A at the full precision of the
# reference's intrinsics.js (tilt angles from its rotation matrix, pp and d from its sensor pose).
_TABLE = {
    "r12-a": _Table(49.71448054024652, 24.657258089122469, 2.9983956277223525, 1.0628357104366146,
                    -14.585251380790432, 6.3401926060785413, 56.700741714110258, 10.974348707345417,
                    7.8871691280106679, 843.1183966228492, 637.094431299832, 30.92368707897194,
                    127.45529429620778, (578.18208988513875, 505.41641184977304, 552.0790410441998),
                    2070.8636623963057, 1610.931153056557, 324.7743611363134),
    "r12-b": _Table(50.0471219361, 2.89951703, 0.299757477, 0.0635259837, 14.133984070,
                    21.538891172, 52.124834510, 12.4383563, 5.988136336, 607.2, 514.5, 46.0,
                    127.454102, (580.489071, 504.31477775233, 546.3569893828), 1958.3, 1802.9,
                    336.384159),
    "r12-c": _Table(50.013031225428279, 18.6134905, 2.64623248, 1.0376424096, 19.10910136779,
                    7.31057313775, 49.3616079947, 13.12502231402, 7.445715535802826, 490.9,
                    388.9, 41.1, 127.48422481156, (569.878578597, 491.71204034229, 535.28388772589),
                    1692.1, 1677.8, 319.527769),
    "r12-d": _Table(136.10516670930977, 35.974498894915505, 8.083212390028945, 4.820932981690617,
                    -4.3116385625392565, -3.7582001008085353, 149.10460493842936,
                    11.208316218108749, 8.3508736830892687, 371.11947118520142, 287.0474135919366,
                    35.445740626310149, 127.5093511093891,
                    (636.06349373629145, 572.51809391452524, 604.22701441088145), 2028.7, 1526.7,
                    382.30433286906873),
    "upc-s": _Table(9.98445, 0.0, 0.0, 0.0, 0.0, 0.0, 9.847916429, 5.45928, 3.7179, 0.0, 0.0, 0.0,
                    20.0, (40.087372,), 3842.8, 2719.5, 40.087372),
}

_FOCUS = {"r12-a": 450.0, "r12-b": 1000.0, "r12-c": math.inf, "r12-d": 1500.0, "upc-s": math.inf}

# Paper Table datasets: board (columns × rows of nodes, square), calibration and evaluation ranges.
_PLANS = {
    "r12-a": ((9, 5, 10.0), (175.0, 400.0), (265.0, 385.0), 10.0),
    "r12-b": ((8, 5, 20.0), (400.0, 775.0), (450.0, 900.0), 50.0),
    "r12-c": ((6, 4, 30.0), (500.0, 2500.0), (400.0, 1250.0), 50.0),
    "r12-d": ((5, 3, 20.0), (850.0, 1300.0), (750.0, 1200.0), 50.0),
    "upc-s": ((9, 6, 26.25), (250.0, 800.0), (200.0, 500.0), 50.0),
    "kep-3": ((9, 5, 10.0), (250.0, 600.0), (300.0, 500.0), 20.0),
}

PRESET_NAMES = ("r12-a", "r12-b", "r12-c", "r12-d", "upc-s", "kep-3")

SMALL_CALIBRATION_NEAR_MM = {"r12-a": 300.0}
"""Where the ``--small`` crop's calibration frames start. Its board has half the paper's squares
(to fit the crop), and nearer than this its micro-images see two corners, which the paper's target
design avoids and the full board never does over the same range. Share of the true features in
micro-images that hold two nodes, board fronto-parallel or tilted 30°, r12-a crop: 0.80 at 175 mm,
0.52 at 250, 0.09–0.18 at 300, ≤ 0.04 at 310, 0 from 320 mm (the full board: 0 over 175–400). Before 2026-11-27 the
pose sampler's bias to the far end of the range (``docs/simulator.md``) kept the crop's frames
beyond ~286 mm anyway; with depths drawn uniformly over 175–400 mm, three of the quick demo's six
frames (196, 201 mm; and 383 mm, near the MLA's conjugate) did not link."""


def _camera_from_table(name: str, tilt_scale: float) -> PlenopticCamera:
    t = _TABLE[name]
    if name == "upc-s":
        lattice = Lattice(LatticeKind.HEX_ROWS, 541, 434)
        sensor_size, s = (7728, 5368), 0.0014
        types = TypeLayout(1)
        configuration = Configuration.UNFOCUSED
    else:
        lattice = Lattice(LatticeKind.HEX_ROWS, 176, 152)
        sensor_size, s = (4080, 3068), 0.0055
        types = TypeLayout.raytrix(3)
        configuration = Configuration.GALILEAN
    # The paper's tilt signs are opposite to the code's Euler angles (reference §2.4): the code's
    # (θx, θy, θz) = (+"−θx", −"θy", −"θz") of the table.
    theta = (
        tilt_scale * t.minus_theta_x_urad * 1e-6,
        -tilt_scale * t.theta_y_urad * 1e-6,
        -t.theta_z_urad * 1e-6,
    )
    pitch = t.pitch_um * 1e-3
    d = t.d_um * 1e-3
    mla = MicroLensArray(
        lattice=lattice,
        pitch_mm=(pitch, pitch),
        rotation_xyz_rad=theta,
        # Table t_x, t_y are libpleno's MLA origin, which is plenocal's for HEX_ROWS with an even
        # number of rows (conventions.md, libpleno table).
        translation_mm=(-t.minus_tx, -t.minus_ty, -t.D),
        focal_lengths_mm=tuple(f * 1e-3 for f in t.f_um),
        types=types,
    )
    return PlenopticCamera(
        main_lens=MainLens(t.F, 4.0),
        distortion=Distortion(
            q1=t.Q1e5 * 1e-5, q2=-t.minus_Q2e6 * 1e-6, q3=t.Q3e8 * 1e-8, p1=t.P1e5 * 1e-5,
            p2=-t.minus_P2e5 * 1e-5,
        ),
        mla=mla,
        sensor=Sensor(s, sensor_size[0], sensor_size[1], (t.u0, t.v0), t.D + d),
        mia=None,
        configuration=configuration,
        focus_distance_mm=_FOCUS[name],
    )


def _keplerian_camera(tilt_scale: float) -> PlenopticCamera:
    """An invented Keplerian multi-focus camera: R12 sensor and MLA, f_i < d.

    F = 50 mm focused at h = 300 mm (image at H ≈ 63.4 mm), D = H + 2d, d = 0.4 mm;
    f = 0.365, 0.375, 0.385 mm focus virtual points 4–10 mm in front of the MLA, i.e. objects
    from ~250 mm to ~900 mm. Micro-images do not overlap at N = 4.
    """
    lattice = Lattice(LatticeKind.HEX_ROWS, 176, 152)
    pitch = 0.1275
    d = 0.4
    D = 63.3975 + 2.0 * d
    cx, cy = lattice_corner(lattice, (pitch, pitch))
    mla = MicroLensArray(
        lattice=lattice,
        pitch_mm=(pitch, pitch),
        rotation_xyz_rad=(tilt_scale * 5e-4, -tilt_scale * 4e-4, -3e-5),
        translation_mm=(-cx / 2.0 + 0.05, -cy / 2.0 - 0.03, -D),
        focal_lengths_mm=(0.365, 0.375, 0.385),
        types=TypeLayout.raytrix(3),
    )
    return PlenopticCamera(
        main_lens=MainLens(50.0, 4.0),
        distortion=Distortion(q1=1.2e-4, q2=-1.0e-6, p1=2e-5, p2=-1e-5),
        mla=mla,
        sensor=Sensor(0.0055, 4080, 3068, (2045.3, 1528.6), D + d),
        mia=None,
        configuration=Configuration.KEPLERIAN,
        focus_distance_mm=300.0,
    )


def matching_f_number(camera: PlenopticCamera, *, standard: tuple[float, ...] | None = None) -> float:
    """Smallest f-number at which no micro-images overlap (paper's f-number matching).

    The largest micro-image radius |m/N + q_i| (eq:miradiusfnumber) equals half the micro-image
    pitch at N* = |m| / (Δc/2 − max|q_i|) (Galilean/unfocused: |R| = |m|/N + |q|; Keplerian:
    R = m/N + q). With ``standard``, the smallest listed value >= N*; else N* rounded up to 0.01.
    """
    m, q = radius_law(camera)
    half = camera.micro_image_pitch_mm / 2.0
    sign = camera.configuration.radius_sign
    # |R_i(N)| = |m|/N + sign·q_i (sign·q_i is the signed intercept of |R|).
    intercept = max(sign * qi for qi in q)
    if intercept >= half:
        raise ModelError("micro-images overlap at every aperture")
    n_star = abs(m) / (half - intercept)
    if standard:
        for n in sorted(standard):
            if n >= n_star:
                return float(n)
        return float(max(standard))
    return math.ceil(n_star * 100.0) / 100.0


def crop_camera(
    camera: PlenopticCamera, *, max_size_px: tuple[int, int] = SMALL_MAX_SIZE_PX
) -> tuple[PlenopticCamera, tuple[int, int], tuple[int, int]]:
    """A central crop of the sensor and MLA with the same optics.

    Returns
    -------
    camera : PlenopticCamera
        Sensor of at most ``max_size_px`` (W, H) pixels around the image centre; the micro-lenses
        whose micro-images (plus one pitch) touch it; micro-lens (k, l) of the crop is (k + k0,
        l + l0) of the full array and has the same type (k0 a multiple of I, l0 of the
        row-shift period and even for hexagonal rows).
    crop_origin_px : (i0, j0)
    crop_origin_lens : (k0, l0)
    """
    sensor, mla = camera.sensor, camera.mla
    W = min(max_size_px[0], sensor.width_px)
    H = min(max_size_px[1], sensor.height_px)
    i0 = (sensor.width_px - W) // 2
    j0 = (sensor.height_px - H) // 2
    lattice = mla.lattice
    k, l = lattice.all_indices()
    c = micro_image_centres(camera, k, l)
    margin = camera.grid.diameter_px * 1.5
    keep = (
        (c[:, 0] > i0 - margin) & (c[:, 0] < i0 + W - 1 + margin)
        & (c[:, 1] > j0 - margin) & (c[:, 1] < j0 + H - 1 + margin)
    )
    if not np.any(keep):
        raise ModelError("the crop contains no micro-image")
    period_k = max(mla.n_types, 1)
    period_l = len(mla.types.row_shift)
    if lattice.kind is LatticeKind.HEX_ROWS:
        period_l = math.lcm(period_l, 2)
    if lattice.kind is LatticeKind.HEX_COLS:
        period_k = math.lcm(period_k, 2)
    k0 = int(k[keep].min()) // period_k * period_k
    l0 = int(l[keep].min()) // period_l * period_l
    k1 = int(k[keep].max()) + 1
    l1 = int(l[keep].max()) + 1
    # Even row count for hexagonal rows (libpleno parity, conventions.md).
    w, h = k1 - k0, l1 - l0
    if lattice.kind is LatticeKind.HEX_ROWS and h % 2 == 1:
        h = min(h + 1, lattice.height - l0)
    if lattice.kind is LatticeKind.HEX_COLS and w % 2 == 1:
        w = min(w + 1, lattice.width - k0)
    sub = Lattice(lattice.kind, w, h)
    pitch = mla.pitch_mm
    cx, cy = mla.corner
    sx, sy = lattice_corner(sub, pitch)
    gx, gy = lattice.positions(np.array([k0]), np.array([l0]), pitch)
    gx0, gy0 = sub.positions(np.array([0]), np.array([0]), pitch)
    # Lens (k, l) of the crop must sit where lens (k + k0, l + l0) of the full array is:
    # t' + R (c' − g'(k, l)) = t + R (c − g(k + k0, l + l0)), g(k + k0, ...) = g'(k, l) + g(k0, l0) − g'(0, 0).
    shift = np.array([cx - sx - (gx[0] - gx0[0]), cy - sy - (gy[0] - gy0[0]), 0.0])
    t_new = np.asarray(mla.translation_mm) + mla.rotation @ shift
    sub_mla = dataclasses.replace(mla, lattice=sub, translation_mm=tuple(float(x) for x in t_new))
    u0, v0 = sensor.principal_point_px
    sub_sensor = dataclasses.replace(sensor, width_px=W, height_px=H, principal_point_px=(u0 - i0, v0 - j0))
    small = camera.replace(mla=sub_mla, sensor=sub_sensor, mia=None)
    return small, (i0, j0), (k0, l0)


def conventional_labelling(camera: PlenopticCamera) -> tuple[PlenopticCamera, tuple[int, int]]:
    """The same physical camera with micro-lenses labelled by plenocal's observable convention.

    Pre-calibration indexes micro-images from the image alone (``precalib.grid``): row 0 is the
    topmost lattice row whose centres lie at v ≥ −(row spacing)/2 and (0, 0) is that row's leftmost
    node with u ≥ −p/2 (row 0 even on hexagonal lattices). The ground truth must use the same
    labels, so the preset's lattice is re-indexed (and extended or trimmed) to exactly the nodes
    whose micro-image centre lies within the image grown by half a pitch — an MLA that covers the
    sensor, as in the real camera. A camera already labelled by the convention is returned as is. Lens positions are unchanged; the MLA translation, the type
    layout's row shift and the order of the focal lengths are adapted so that every physical
    lens keeps its position and focal length (type 0 stays the lens at k ≡ 0 on row 0).

    Returns
    -------
    camera, (dk, dl) : the relabelled camera and the shift of lens (0, 0) in the old labels.
    """
    mla, grid = camera.mla, camera.grid
    lattice = mla.lattice
    kind = lattice.kind
    W, H = camera.sensor.width_px, camera.sensor.height_px
    pitch = grid.diameter_px
    # Candidate old indices beyond the array too (the affine grid extends the lattice).
    pad = 8
    kk, ll = np.meshgrid(np.arange(-pad, lattice.width + pad), np.arange(-pad, lattice.height + pad))
    kk, ll = kk.ravel(), ll.ravel()
    cols = kind is LatticeKind.HEX_COLS
    c = grid.centres(kk, ll)
    along, across = (c[:, 1], c[:, 0]) if cols else (c[:, 0], c[:, 1])
    n_along, n_across = (H, W) if cols else (W, H)
    row_of, pos_of = (kk, ll) if cols else (ll, kk)
    rows = np.unique(row_of)
    row_across = np.array([np.median(across[row_of == r]) for r in rows])
    row_spacing = float(np.median(np.diff(row_across)))
    r0 = int(rows[np.argmax(row_across >= -row_spacing / 2.0)])
    in_r0 = row_of == r0
    first = np.flatnonzero(in_r0 & (along >= -pitch / 2.0))
    p0 = int(pos_of[first[np.argmin(along[first])]])
    hexa = kind is not LatticeKind.ORTHOGONAL
    new_row = row_of - r0
    new_pos = pos_of - p0
    if hexa and r0 % 2 == 1:
        new_pos = new_pos + (row_of % 2 == 0)
    visible = (along >= -pitch / 2.0) & (along <= n_along - 1 + pitch / 2.0)
    visible &= (across >= -row_spacing / 2.0) & (across <= n_across - 1 + row_spacing / 2.0)
    if np.any(new_row[visible] < 0) or np.any(new_pos[visible] < 0):
        raise ModelError("conventional labelling produced negative indices")
    n_rows = int(new_row[visible].max()) + 1
    n_pos = int(new_pos[visible].max()) + 1
    k_new, l_new = (new_row, new_pos) if cols else (new_pos, new_row)
    k_old, l_old = kk, ll
    if r0 == 0 and p0 == 0 and (not hexa or r0 % 2 == 0):
        return camera, (0, 0)  # already labelled by the convention: keep the array as it is
    new_lattice = Lattice(kind, n_rows, n_pos) if cols else Lattice(kind, n_pos, n_rows)
    # Reference lens: new (0, 0) = old (k_ref, l_ref).
    ref = np.flatnonzero((k_new == 0) & (l_new == 0))[0]
    k_ref, l_ref = int(k_old[ref]), int(l_old[ref])
    g_old = np.array(lattice.positions(np.array([k_ref]), np.array([l_ref]), mla.pitch_mm))[:, 0]
    g_new = np.array(new_lattice.positions(np.array([0]), np.array([0]), mla.pitch_mm))[:, 0]
    const = np.array([g_old[0] - g_new[0], g_old[1] - g_new[1], 0.0])
    c_old = np.array([*lattice_corner(lattice, mla.pitch_mm), 0.0])
    c_new = np.array([*lattice_corner(new_lattice, mla.pitch_mm), 0.0])
    t_new = np.asarray(mla.translation_mm) + mla.rotation @ (c_old - c_new - const)
    types, focal = mla.types, mla.focal_lengths_mm
    if mla.n_types > 1:
        period = len(types.row_shift)
        period = math.lcm(period, 2) if hexa else period
        shift = []
        for j in range(period):
            sel = np.flatnonzero((l_new if not cols else k_new) == j)[:1]
            if kind is LatticeKind.HEX_COLS:
                sel = np.flatnonzero(l_new == j)[:1]
            i = int(sel[0])
            old_t = int(types.type_of(k_old[i], l_old[i]))
            shift.append((old_t - int(k_new[i])) % mla.n_types)
        s0 = shift[0]
        new_shift = tuple((x - s0) % mla.n_types for x in shift)
        order = [0] * mla.n_types
        for t_old in range(mla.n_types):
            order[(t_old - s0) % mla.n_types] = t_old
        types = TypeLayout(mla.n_types, new_shift)
        focal = tuple(focal[order[t]] for t in range(mla.n_types))
    new_mla = dataclasses.replace(
        mla, lattice=new_lattice, translation_mm=tuple(float(x) for x in t_new), types=types, focal_lengths_mm=focal
    )
    relabelled = camera.replace(mla=new_mla, mia=None)
    return relabelled, (k_ref, l_ref)


def preset(name: str, *, small: bool = False, tilt_scale: float = TILT_SCALE) -> Preset:
    """A named preset (see the module docstring).

    Parameters
    ----------
    name : str
        One of :data:`PRESET_NAMES`.
    small : bool
        Central crop of at most 1000 × 800 px (tests). The board's square is scaled by the crop
        factor so that whole boards fit at the paper's distances.
    tilt_scale : float
        Factor on the paper's out-of-plane MLA tilt θx, θy (default 0.01, see module docstring).
    """
    key = name.lower()
    if key not in PRESET_NAMES:
        raise ModelError(f"unknown preset '{name}', expected one of {', '.join(PRESET_NAMES)}")
    camera = _keplerian_camera(tilt_scale) if key == "kep-3" else _camera_from_table(key, tilt_scale)
    (cols, rows, square), cal, trans, step = _PLANS[key]
    if key.startswith("r12") or key == "kep-3":
        whites = R12_WHITE_F_NUMBERS
        n_board = matching_f_number(camera, standard=R12_WHITE_F_NUMBERS)
    else:
        whites = (2.0, 4.0, 5.6)
        n_board = matching_f_number(camera)
    camera = camera.replace(main_lens=MainLens(camera.main_lens.focal_length_mm, n_board))
    origin_px, origin_lens = (0, 0), (0, 0)
    border = square / 2.0
    if small:
        cal = (max(cal[0], SMALL_CALIBRATION_NEAR_MM.get(key, cal[0])), cal[1])
        full = camera
        camera, origin_px, origin_lens = crop_camera(camera)
        factor = min(
            camera.sensor.width_px / full.sensor.width_px, camera.sensor.height_px / full.sensor.height_px
        )
        # A smaller board with squares half the paper's: it fits the crop, and each micro-image
        # still sees at most one corner (squares scaled by the crop factor would put several
        # corners in one micro-image at close range, which the paper's target design avoids).
        cols, rows = max(2, round(cols * factor * 2)), max(2, round(rows * factor * 2))
        square *= 0.5
        border *= 0.5
    camera, relabel = conventional_labelling(camera)
    origin_lens = (origin_lens[0] + relabel[0], origin_lens[1] + relabel[1])
    plan = DatasetPlan(
        board=Checkerboard(cols, rows, square, border),
        calibration_range_mm=cal,
        translation_range_mm=trans,
        translation_step_mm=step,
        checkerboard_f_number=n_board,
        white_f_numbers=whites,
    )
    label = f"{key}{' (small)' if small else ''}"
    return Preset(label, camera, plan, _DESCRIPTIONS[key], origin_px, origin_lens)


_DESCRIPTIONS = {
    "r12-a": "Raytrix R12, F = 50 mm, h = 450 mm (paper R12-A, BAP column)",
    "r12-b": "Raytrix R12, F = 50 mm, h = 1000 mm (paper R12-B, BAP column)",
    "r12-c": "Raytrix R12, F = 50 mm, h = ∞ (paper R12-C, BAP column)",
    "r12-d": "Raytrix R12, F = 135 mm, h = 1500 mm (paper R12-D, BAP column)",
    "upc-s": "Lytro-Illum-like unfocused camera (paper UPC-S, Ref. column)",
    "kep-3": "invented Keplerian multi-focus camera on the R12 sensor (f_i < d)",
}
