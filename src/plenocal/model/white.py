"""White-image relations and the initial camera (paper §3).

- micro-image radius law R_i(1/N) = m/N + q_i (eq:miradiusfnumber, eq:miradiusfnumbermc,
  eq:qprime) computed from a camera;
- the internal parameters Ω = {m, q'_1..q'_I} (with Δc, λ, κ, N) as a dataclass;
- the initial camera from Ω, F, h, the sensor and the micro-image grid (eq:focusdist, eq:initdd,
  eq:mldiameterapprox2 and the focal-length initialisation after it; reference §5.5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from plenocal.errors import ModelError
from plenocal.model.camera import (
    Configuration,
    Distortion,
    MainLens,
    MicroImageGrid,
    MicroLensArray,
    PlenopticCamera,
    Sensor,
    lattice_corner,
)
from plenocal.model.lattice import TypeLayout


@dataclass(frozen=True)
class RadiusLawField:
    """How the white radius law varies across the sensor (beyond the paper).

    A tilted MLA puts every micro-lens at its own distance d(k, l) from the sensor, so the
    micro-image radius law varies across the array: R_a = |m(k, l)|/N with m ∝ d(k, l)/D(k, l),
    and |q_i(k, l)| with it (d varies by ~3 % across an R12 at the paper's tilt). d is linear in
    the lens position, so m and q_i are linear in the micro-image position to 1e-4: this holds
    their gradients. :class:`InternalParameters`' m and q_i are the values at
    ``reference_uv_px``.

    Attributes
    ----------
    reference_uv_px : (u, v) where Ω's m, q_i apply (the image of the MLA frame origin).
    m_gradient_mm_per_px : ∂m/∂(u, v), mm/px (signed like m).
    q_gradient_mm_per_px : per type, ∂q_i/∂(u, v), mm/px (signed like q_i).
    """

    reference_uv_px: tuple[float, float]
    m_gradient_mm_per_px: tuple[float, float] = (0.0, 0.0)
    q_gradient_mm_per_px: tuple[tuple[float, float], ...] = ()

    def local(self, m_mm: float, q_mm: tuple[float, ...], uv_px: np.ndarray, types: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(m, q) at micro-image positions ``uv_px`` (N, 2) of types ``types`` (N,), each (N,)."""
        duv = np.asarray(uv_px, dtype=np.float64) - np.asarray(self.reference_uv_px)
        m = m_mm + duv @ np.asarray(self.m_gradient_mm_per_px)
        t = np.clip(np.asarray(types, dtype=np.int64), 0, None)
        if not q_mm:
            return m, np.zeros(len(t))
        q0 = np.asarray(q_mm, dtype=np.float64)[t]
        g = np.asarray(self.q_gradient_mm_per_px or [(0.0, 0.0)] * len(q_mm), dtype=np.float64)[t]
        return m, q0 + np.sum(duv * g, axis=1)


@dataclass(frozen=True)
class LensletFieldTrend:
    """How the micro-lens blur disc R_b of the white images changes away from the centre of the
    sensor, beyond the linear trend of a tilted MLA: per type, R_b(r)/R_b(0) − 1 at
    ``radius_mm`` with its σ. Thin lenslets (the paper's) give 0; refractive caps on a substrate
    see off-axis bundles obliquely, and their blur disc shrinks (docs/model.md "Real
    micro-lenses")."""

    radius_mm: float
    relative_change: tuple[float, ...]
    std: tuple[float, ...]
    reach_mm: float
    """The largest distance from the centre of a micro-image that entered."""

    @property
    def mean(self) -> float:
        """The types' changes, weighted by their inverse variances."""
        w = 1.0 / np.square(np.asarray(self.std))
        return float(np.sum(w * np.asarray(self.relative_change)) / np.sum(w))

    @property
    def mean_std(self) -> float:
        return float(1.0 / np.sqrt(np.sum(1.0 / np.square(np.asarray(self.std)))))

    def to_dict(self) -> dict[str, object]:
        return {"radius_mm": self.radius_mm, "relative_change": list(self.relative_change), "std": list(self.std),
                "mean": self.mean, "mean_std": self.mean_std, "reach_mm": self.reach_mm}


@dataclass(frozen=True)
class InternalParameters:
    """Ω and its companions (libpleno ``params.js``, reference §5.1). Lengths in mm.

    Attributes
    ----------
    m_mm : common slope of R_i(1/N) (signed: < 0 Galilean / unfocused, > 0 Keplerian).
    q_mm : intercepts q_i per type.
    micro_image_pitch_mm : Δc = s · MIA diameter.
    lambda_ : λ = D/(D + d) (eq:mldiameterapprox2 once initialised).
    f_number : N at which the checkerboard images were taken.
    kappa : blur proportionality σ = κ·ρ (eq:sigma2rho).
    pixel_size_mm : s.
    """

    m_mm: float
    q_mm: tuple[float, ...]
    micro_image_pitch_mm: float
    lambda_: float = 1.0
    f_number: float = 4.0
    kappa: float = 1.0
    pixel_size_mm: float = 0.0055
    field: RadiusLawField | None = None
    """Variation of the law across the sensor (MLA tilt); None: uniform."""
    unblurred_weight: float = 0.0
    """Fraction of the light that reaches a pixel along its chief ray without the micro-lens blur,
    measured on the white images (0 for a real lens; PRISM adds its chief ray to 30 lens samples: 1/31)."""
    lenslet_trend: LensletFieldTrend | None = None
    """How the micro-lens blur disc changes across the field on the white images (None: not
    measured): what tells refractive micro-lenses from the paper's thin ones."""

    @property
    def n_types(self) -> int:
        return len(self.q_mm)

    @property
    def q_prime_mm(self) -> tuple[float, ...]:
        """q'_i = q_i + Δc/2 (eq:qprime)."""
        return tuple(q + self.micro_image_pitch_mm / 2.0 for q in self.q_mm)

    @property
    def micro_lens_pitch_mm(self) -> float:
        """Δ_C ≈ λ·Δc (libpleno ``dC``)."""
        return self.lambda_ * self.micro_image_pitch_mm

    def radius_mm(self, f_number: float, type_index: int) -> float:
        """Signed micro-image radius R_i at aperture N (eq:miradiusfnumber)."""
        return self.m_mm / f_number + self.q_mm[type_index]

    def local(self, uv_px: np.ndarray, types: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(m, q_i) of the radius law at micro-image positions ``uv_px`` (N, 2), types (N,).

        Uniform (the reference values) without a :class:`RadiusLawField`.
        """
        uv = np.asarray(uv_px, dtype=np.float64).reshape(-1, 2)
        if self.field is None:
            t = np.clip(np.asarray(types, dtype=np.int64), 0, None)
            q = np.asarray(self.q_mm or (0.0,), dtype=np.float64)[np.minimum(t, max(len(self.q_mm), 1) - 1)]
            return np.full(len(uv), self.m_mm), q
        return self.field.local(self.m_mm, self.q_mm, uv, types)

    @classmethod
    def from_q_prime(cls, m_mm: float, q_prime_mm: tuple[float, ...], micro_image_pitch_mm: float, **kw: Any) -> InternalParameters:
        return cls(m_mm, tuple(q - micro_image_pitch_mm / 2.0 for q in q_prime_mm), micro_image_pitch_mm, **kw)


def radius_law(camera: PlenopticCamera) -> tuple[float, tuple[float, ...]]:
    """(m, q_i) of the micro-image radius law of a camera (eq:miradiusfnumbermc).

    m = ∓ d·(F − e)/(2(D − e)) (negative for Galilean and unfocused, eq:miradiussgn): the exit
    pupil, of radius (F − e)/(2N), imaged through the micro-lens centre from D − e (the paper's
    ∓dF/(2D) when the pupil is in the lens plane, e = 0), and q_i = Δ_C·d/(2 f_i) − Δc/2 with
    Δ_C = λ·Δc. For I = 0 the single intercept is that of a pinhole (f → ∞): −Δc/2.
    """
    D, d = camera.D_mm, camera.d_mm
    F = camera.main_lens.focal_length_mm
    e = camera.main_lens.exit_pupil_mm
    dc = camera.micro_image_pitch_mm
    dC = camera.lambda_ * dc
    m = camera.configuration.radius_sign * d * (F - e) / (2.0 * (D - e))
    fs = camera.mla.focal_lengths_mm or (np.inf,)
    q = tuple(dC * d / (2.0 * f) - dc / 2.0 for f in fs)
    return m, q


def radius_law_at(camera: PlenopticCamera, k: np.ndarray, l: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(m, q) of the white radius law of each micro-lens (k, l), with its own D(k, l), d(k, l).

    A tilted MLA puts every lens at its own distances (reference §3, libpleno HEAD): the exit
    pupil images through lens (k, l) with m = ∓d(k, l)·(F − e)/(2(D(k, l) − e)), and its blur disc
    is q_i = Δ_C·d(k, l)/(2f_i) − Δ_C/(2λ(k, l)) with λ(k, l) = (D − e)/(D + d − e) at the lens and
    Δ_C = λ·Δc the lens pitch of :func:`radius_law` (which this equals at the MLA frame origin).

    Returns
    -------
    m, q : ndarray, shape (N,), signed (eq:miradiussgn)
    """
    from plenocal.model.projection import micro_lens_centres  # projection imports camera only

    C = micro_lens_centres(camera, k, l)
    Dk = -C[:, 2]
    dk = camera.sensor.distance_mm - Dk
    F = camera.main_lens.focal_length_mm
    e = camera.main_lens.exit_pupil_mm
    sign = camera.configuration.radius_sign
    m = sign * dk * (F - e) / (2.0 * (Dk - e))
    dC = camera.lambda_ * camera.micro_image_pitch_mm
    if camera.n_types == 0:
        f = np.full(len(dk), np.inf)
    else:
        f = np.asarray(camera.mla.focal_lengths_mm, dtype=np.float64)[camera.mla.types.type_of(k, l)]
    q = dC * dk / (2.0 * f) - dC * (Dk - e + dk) / (2.0 * (Dk - e))
    return m, q


def internal_parameters(camera: PlenopticCamera, *, kappa: float = 1.0) -> InternalParameters:
    """Ω of a camera (eq:miradiusfnumbermc, eq:qprime) at the camera's f-number, at the MLA frame
    origin, with the :class:`RadiusLawField` of its per-lens law (:func:`radius_law_at`) when the
    MLA is tilted (m and q_i fitted linear in the micro-image position)."""
    m, q = radius_law(camera)
    field = None
    if any(camera.mla.rotation_xyz_rad[:2]):
        from plenocal.model.projection import micro_image_centres  # projection imports camera only

        lattice = camera.mla.lattice
        k, l = lattice.all_indices()
        mk, qk = radius_law_at(camera, k, l)
        uv = micro_image_centres(camera, k, l)
        cx, cy = lattice_corner(lattice, camera.grid.pitch_px)
        g = camera.grid
        c, sn = np.cos(g.rotation_rad), np.sin(g.rotation_rad)
        ref = np.array([g.offset_px[0] + c * cx - sn * cy, g.offset_px[1] + sn * cx + c * cy])
        A = np.stack([np.ones(len(k)), uv[:, 0] - ref[0], uv[:, 1] - ref[1]], axis=1)
        gm = np.linalg.lstsq(A, mk, rcond=None)[0]
        types = camera.mla.types.type_of(k, l) if camera.n_types else np.zeros(len(k), dtype=np.int64)
        gq = [np.linalg.lstsq(A[types == i], qk[types == i], rcond=None)[0] for i in range(camera.n_types)]
        field = RadiusLawField((float(ref[0]), float(ref[1])), (float(gm[1]), float(gm[2])),
                               tuple((float(x[1]), float(x[2])) for x in gq))
    return InternalParameters(
        m_mm=m,
        q_mm=q,
        micro_image_pitch_mm=camera.micro_image_pitch_mm,
        lambda_=camera.lambda_,
        f_number=camera.main_lens.f_number,
        kappa=kappa,
        pixel_size_mm=camera.sensor.pixel_size_mm,
        field=field,
    )


def focus_conjugate_mm(focal_length_mm: float, focus_distance_mm: float) -> float:
    """H = |h/2 · (1 − √(1 − 4F/h))| (eq:focusdist; Perwass 2010 eq. 17). H → F as h → ∞."""
    F, h = focal_length_mm, focus_distance_mm
    if not np.isfinite(h):
        return F
    if h < 4.0 * F:
        raise ModelError(f"focus distance h = {h} mm must be >= 4F = {4 * F} mm")
    return abs(h / 2.0 * (1.0 - np.sqrt(1.0 - 4.0 * F / h)))


def initial_distances(
    omega: InternalParameters, focal_length_mm: float, focus_distance_mm: float, configuration: Configuration
) -> tuple[float, float]:
    """Initial (D, d) from Ω (eq:initdd): d = 2|m|H/(F + 4ξ|m|), D = H − 2ξd; unfocused d = 2|m|, D = F."""
    m = abs(omega.m_mm)
    F = focal_length_mm
    if configuration is Configuration.UNFOCUSED:
        return F, 2.0 * m
    H = focus_conjugate_mm(F, focus_distance_mm)
    xi = 1.0 if configuration is Configuration.GALILEAN else -1.0
    d = 2.0 * m * H / (F + xi * 4.0 * m)
    D = H - xi * 2.0 * d
    if d <= 0 or D <= 0:
        raise ModelError(f"initial distances are not physical (D = {D}, d = {d}); check m and F")
    return D, d


def initial_tilt(
    omega: InternalParameters, *, focal_length_mm: float, focus_distance_mm: float, configuration: Configuration
) -> tuple[float, float]:
    """MLA tilt (θx, θy) (rad, XYZ Euler) from the gradient of the radius law across the sensor.

    R_a = |m|/N with m ∝ d(k, l)/D(k, l): a lens at MLA-frame offset (l_x, l_y) from the origin has
    D = D0 + θy·l_x − θx·l_y and d = d0 − (the same), so δm/m = (θx·l_y − θy·l_x)·(1/d + 1/D). The MLA
    offset maps to the image by l = −(Δu, Δv)·s·λ (the image is the MLA seen through O, rotated by
    180°), hence θy = (∂m/∂u)/m / (sλ(1/d + 1/D)) and θx = −(∂m/∂v)/m / (sλ(1/d + 1/D)). Zero without
    a :class:`RadiusLawField`.
    """
    if omega.field is None or omega.m_mm == 0.0:
        return 0.0, 0.0
    D, d = initial_distances(omega, focal_length_mm, focus_distance_mm, configuration)
    lam = D / (D + d)
    k = omega.pixel_size_mm * lam * (1.0 / d + 1.0 / D)
    gu, gv = (g / omega.m_mm for g in omega.field.m_gradient_mm_per_px)
    return float(-gv / k), float(gu / k)


def initial_camera(
    omega: InternalParameters,
    *,
    tilt_xy_rad: tuple[float, float] = (0.0, 0.0),
    focal_length_mm: float,
    focus_distance_mm: float,
    configuration: Configuration,
    sensor_size_px: tuple[int, int],
    mia: MicroImageGrid,
    type_layout: TypeLayout | None = None,
    f_number: float | None = None,
) -> tuple[PlenopticCamera, InternalParameters]:
    """The initial camera of paper §3.3 and the re-initialised Ω (reference §5.5).

    - D, d from eq:initdd; λ = F/(F + 2|m|) (eq:mldiameterapprox2; = D/(D+d) exactly for the
      focused configurations);
    - principal point at the image centre ((W−1)/2, (H−1)/2); no distortion;
    - MLA tilt (θx, θy) = ``tilt_xy_rad`` (:func:`initial_tilt`), θz = the MIA rotation; pitch Δ_C = λ·s·(p0, p1); translation such that
      every micro-lens projects from O exactly onto its micro-image grid node (exact form of
      "the MLA translation takes the MIA offset into account");
    - f_i = Δ_C·d/(2 q'_i) (the focal-length initialisation after eq:mldiameterapprox2).

    Returns
    -------
    camera, omega
        ``omega`` with λ and N updated.
    """
    s = omega.pixel_size_mm
    W, H = sensor_size_px
    F = focal_length_mm
    D, d = initial_distances(omega, F, focus_distance_mm, configuration)
    lam = D / (D + d) if configuration is Configuration.UNFOCUSED else F / (F + 2.0 * abs(omega.m_mm))
    dc = omega.micro_image_pitch_mm
    dC = lam * dc
    u0, v0 = (W - 1) / 2.0, (H - 1) / 2.0
    pitch_mm = (lam * s * mia.pitch_px[0], lam * s * mia.pitch_px[1])
    cx, cy = lattice_corner(mia.lattice, pitch_mm)
    # Lens (k, l) at t + Rz(θ)(c − g): its projection onto the sensor must be the MIA node
    # offset + Rz(θ) g (pixels), i.e. sensor point ((u0 − u) s, (v0 − v) s) scaled by λ.
    th = mia.rotation_rad
    ct, st = np.cos(th), np.sin(th)
    rc = np.array([ct * cx - st * cy, st * cx + ct * cy])
    t_xy = lam * s * (np.array([u0, v0]) - np.asarray(mia.offset_px)) - rc
    if type_layout is None:
        type_layout = TypeLayout.raytrix(omega.n_types)
    n_types = type_layout.n_types
    if n_types == 0:
        focal_lengths: tuple[float, ...] = ()
    else:
        qp = omega.q_prime_mm
        if len(qp) != n_types:
            raise ModelError(f"Ω has {len(qp)} intercepts but the layout has {n_types} types")
        if configuration is Configuration.UNFOCUSED:
            focal_lengths = tuple(d for _ in qp)
        else:
            focal_lengths = tuple(dC * d / (2.0 * q) for q in qp)
    mla = MicroLensArray(
        lattice=mia.lattice,
        pitch_mm=pitch_mm,
        rotation_xyz_rad=(float(tilt_xy_rad[0]), float(tilt_xy_rad[1]), th),
        translation_mm=(float(t_xy[0]), float(t_xy[1]), -D),
        focal_lengths_mm=focal_lengths,
        types=type_layout,
    )
    N = omega.f_number if f_number is None else f_number
    camera = PlenopticCamera(
        main_lens=MainLens(F, N),
        distortion=Distortion(),
        mla=mla,
        sensor=Sensor(s, W, H, (u0, v0), D + d),
        mia=mia,
        configuration=configuration,
        focus_distance_mm=focus_distance_mm,
    )
    new_omega = InternalParameters(
        m_mm=omega.m_mm,
        q_mm=omega.q_mm,
        micro_image_pitch_mm=dc,
        lambda_=lam,
        f_number=N,
        kappa=omega.kappa,
        pixel_size_mm=s,
        field=omega.field,
        unblurred_weight=omega.unblurred_weight,
        lenslet_trend=omega.lenslet_trend,
    )
    return camera, new_omega
