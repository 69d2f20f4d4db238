"""The flat parameter vector of the calibration: the only module that knows its layout.

Intrinsics (paper eq:completemodel, the 16 + I parameters; DESIGN.md §4):

==================  =========================================  ==========================
name                meaning                                    unit
==================  =========================================  ==========================
``F_mm``            main-lens focal length F                   mm
``q1 q2 q3``        radial distortion Q1, Q2, Q3 (eq:distortion) mm⁻², mm⁻⁴, mm⁻⁶
``p1 p2``           tangential distortion P1, P2               mm⁻¹
``u0_px v0_px``     principal point                            px
``d_mm``            MLA–sensor distance d (sensor at −(D + d))  mm
``theta_x_rad``     MLA tilt about x (XYZ Euler angles)        rad
``theta_y_rad``     MLA tilt about y                           rad
``theta_z_rad``     MLA rotation about the optical axis        rad
``tx_mm ty_mm``     MLA translation (lens (0,0) frame origin)  mm
``D_mm``            main lens–MLA distance D (t_z = −D)        mm
``exit_pupil_mm``   exit pupil e behind H′ (optional, see below) mm
``z1 z2``           depth distortion Z1, Z2 (optional, see below) mm⁻¹, mm⁻³
``pitch_mm``        MLA pitch Δ_C (or ``pitch0_mm pitch1_mm``)  mm
``f1_mm … fI_mm``   micro-lens focal lengths (paper i = 1..I)   mm
==================  =========================================  ==========================

``exit_pupil_mm`` (beyond the paper; ``ParameterLayout(exit_pupil=True)``) places the main lens's
exit pupil e behind its rear principal plane: the micro-image centres are projected from it
(:func:`~plenocal.model.projection.micro_image_centres`) and λ = (D − e)/(D + d − e). Without it
e is held at the template's value (0: the paper).

``z1``, ``z2`` (beyond the paper; ``ParameterLayout(depth_distortion=True)``) move every virtual
point along the axis by Z1·r′² + Z2·r′⁴ (:class:`~plenocal.model.camera.Distortion`): a real main
lens's curved field. Without them they are held at the template's values (0).

The sensor distance D + d is parametrised by d rather than by D + d: D and D + d are
correlated to 1 − 1e-6 and the (D, d) pair keeps the normal equations well conditioned; the
sensor distance is reported as a derived quantity.

Poses, one per frame (``cam_from_world``): ``pose[<frame>].r{x,y,z}`` (rotation vector, rad) and
``pose[<frame>].t{x,y,z}`` (translation, mm).

Groups (for freezing by name, the paper's ablation §7.4): ``F``, ``distortion`` (``radial``,
``tangential``), ``principal_point``, ``d``, ``sensor`` (u0, v0, d), ``tilt`` (θx, θy),
``theta_z``, ``mla_rotation`` (θx, θy, θz), ``mla_translation`` (tx, ty), ``D``, ``mla_pose``,
``pitch``, ``focal_lengths``, ``intrinsics`` and ``poses``. A single parameter name is also a
valid freeze key.

The solver works on scaled, unitless variables ``z = (x − x_ref) / scale``
(:meth:`ParameterLayout.to_solver` / :meth:`ParameterLayout.from_solver`), where ``scale`` is a
typical magnitude of a change of each parameter.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from plenocal.errors import ModelError
from plenocal.model.camera import Distortion, MainLens, MicroLensArray, PlenopticCamera, Sensor, lattice_corner
from plenocal.model.geometry import Pose, matrix_from_euler_xyz, rodrigues, rotvec_from_matrix
from plenocal.model.lattice import Lattice

FloatArray = NDArray[np.float64]

_BASE_INTRINSICS = (
    "F_mm",
    "q1",
    "q2",
    "q3",
    "p1",
    "p2",
    "u0_px",
    "v0_px",
    "d_mm",
    "theta_x_rad",
    "theta_y_rad",
    "theta_z_rad",
    "tx_mm",
    "ty_mm",
    "D_mm",
)

# Typical magnitude of a change of each parameter (solver scaling, finite-difference steps).
_SCALES: dict[str, float] = {
    "F_mm": 0.1,
    "q1": 1e-5,
    "q2": 1e-7,
    "q3": 1e-9,
    "p1": 1e-5,
    "p2": 1e-5,
    "u0_px": 1.0,
    "v0_px": 1.0,
    "d_mm": 1e-3,
    "theta_x_rad": 1e-4,
    "theta_y_rad": 1e-4,
    "theta_z_rad": 1e-5,
    "tx_mm": 1e-3,
    "ty_mm": 1e-3,
    "D_mm": 0.1,
    "exit_pupil_mm": 0.1,
    "z1": 1e-4,
    "z2": 1e-6,
    "pitch": 1e-5,
    "f": 1e-3,
    "r": 1e-3,
    "t": 0.1,
}

POSE_COMPONENTS = ("rx", "ry", "rz", "tx", "ty", "tz")

_GROUPS: dict[str, tuple[str, ...]] = {
    "F": ("F_mm",),
    "radial": ("q1", "q2", "q3"),
    "tangential": ("p1", "p2"),
    "distortion": ("q1", "q2", "q3", "p1", "p2"),
    "principal_point": ("u0_px", "v0_px"),
    "d": ("d_mm",),
    "sensor": ("u0_px", "v0_px", "d_mm"),
    "tilt": ("theta_x_rad", "theta_y_rad"),
    "theta_z": ("theta_z_rad",),
    "mla_rotation": ("theta_x_rad", "theta_y_rad", "theta_z_rad"),
    "mla_translation": ("tx_mm", "ty_mm"),
    "D": ("D_mm",),
    "mla_pose": ("theta_x_rad", "theta_y_rad", "theta_z_rad", "tx_mm", "ty_mm", "D_mm"),
}
OPTIONAL_GROUPS: dict[str, tuple[str, ...]] = {"exit_pupil": ("exit_pupil_mm",), "depth_distortion": ("z1", "z2")}
"""The layout's optional parameter groups (the real-lens terms), by their ParameterLayout flag."""

# Parameters whose change moves the micro-image centres (MIC residuals, paper §5.2).
MIC_PARAMETERS = frozenset(
    {"u0_px", "v0_px", "d_mm", "theta_x_rad", "theta_y_rad", "theta_z_rad", "tx_mm", "ty_mm", "D_mm",
     "pitch_mm", "pitch0_mm", "pitch1_mm", "exit_pupil_mm"}
)
# Parameters that move the micro-lens centres C(k, l).
MLA_PARAMETERS = frozenset(
    {"theta_x_rad", "theta_y_rad", "theta_z_rad", "tx_mm", "ty_mm", "D_mm", "pitch_mm", "pitch0_mm",
     "pitch1_mm"}
)


def pose_name(frame: int, component: str) -> str:
    """Name of one pose entry, e.g. ``pose[3].tz``."""
    return f"pose[{frame}].{component}"


@dataclass(frozen=True, eq=False)
class ParameterLayout:
    """Names, groups, scales and freeze flags of the flat vector; pack and unpack.

    Parameters
    ----------
    template : PlenopticCamera
        Supplies everything that is not optimised (lattice, type layout, sensor size, pixel
        size, MIA grid, f-number, configuration, focus distance).
    frames : sequence of int
        Frame numbers, one pose each, in vector order.
    two_pitches : bool
        Optimise (p0, p1) instead of one shared pitch (reference HEAD).
    frozen : iterable of str
        Group or parameter names held at their packed value.
    exit_pupil : bool
        Optimise the exit pupil's distance e behind H′ (``exit_pupil_mm``); otherwise it is held at
        the template's value.
    depth_distortion : bool
        Optimise the depth distortion Z1, Z2 (``z1``, ``z2``); otherwise they are held at the
        template's values.
    """

    template: PlenopticCamera
    frames: tuple[int, ...]
    two_pitches: bool = False
    frozen: frozenset[str] = frozenset()
    exit_pupil: bool = False
    depth_distortion: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "frames", tuple(int(f) for f in self.frames))
        object.__setattr__(self, "frozen", frozenset(self.frozen))
        unknown = [g for g in self.frozen if g not in self.groups and g not in self.index]
        if unknown:
            raise ModelError(
                f"unknown parameter group(s) to freeze: {sorted(unknown)}; "
                f"known groups: {sorted(self.groups)}"
            )

    # --- names -----------------------------------------------------------------------
    @property
    def n_types(self) -> int:
        return self.template.n_types

    @property
    def intrinsic_names(self) -> tuple[str, ...]:
        pitch = ("pitch0_mm", "pitch1_mm") if self.two_pitches else ("pitch_mm",)
        focal = tuple(f"f{i + 1}_mm" for i in range(self.n_types))
        pupil = ("exit_pupil_mm",) if self.exit_pupil else ()
        depth = ("z1", "z2") if self.depth_distortion else ()
        return _BASE_INTRINSICS + pupil + depth + pitch + focal

    @property
    def n_intrinsics(self) -> int:
        return len(self.intrinsic_names)

    @property
    def names(self) -> tuple[str, ...]:
        poses = tuple(pose_name(f, c) for f in self.frames for c in POSE_COMPONENTS)
        return self.intrinsic_names + poses

    @property
    def size(self) -> int:
        return self.n_intrinsics + 6 * len(self.frames)

    @property
    def index(self) -> dict[str, int]:
        """Name → position in the full vector."""
        return {n: i for i, n in enumerate(self.names)}

    @property
    def groups(self) -> dict[str, tuple[str, ...]]:
        g = dict(_GROUPS)
        for flag, group in ((self.exit_pupil, "exit_pupil"), (self.depth_distortion, "depth_distortion")):
            if flag:
                g[group] = OPTIONAL_GROUPS[group]
        if self.depth_distortion:
            g["distortion"] = (*g["distortion"], "z1", "z2")
        g["pitch"] = ("pitch0_mm", "pitch1_mm") if self.two_pitches else ("pitch_mm",)
        g["focal_lengths"] = tuple(f"f{i + 1}_mm" for i in range(self.n_types))
        g["intrinsics"] = self.intrinsic_names
        g["poses"] = self.names[self.n_intrinsics :]
        return g

    def names_of(self, key: str) -> tuple[str, ...]:
        """Parameter names of a group or a single parameter name."""
        if key in self.groups:
            return self.groups[key]
        if key in self.index:
            return (key,)
        raise ModelError(f"unknown parameter or group '{key}'")

    @property
    def free_mask(self) -> NDArray[np.bool_]:
        """True for optimised entries of the full vector, shape (size,)."""
        mask = np.ones(self.size, dtype=bool)
        idx = self.index
        for key in self.frozen:
            for n in self.names_of(key):
                mask[idx[n]] = False
        return mask

    @property
    def scale(self) -> FloatArray:
        """Typical change of each entry (solver unit), shape (size,)."""
        out = []
        for n in self.intrinsic_names:
            if n.startswith("pitch"):
                out.append(_SCALES["pitch"])
            elif n.startswith("f") and n.endswith("_mm") and n[1:-3].isdigit():
                out.append(_SCALES["f"])
            else:
                out.append(_SCALES[n])
        for _ in self.frames:
            out.extend([_SCALES["r"]] * 3 + [_SCALES["t"]] * 3)
        return np.asarray(out, dtype=np.float64)

    def with_frozen(self, frozen: Iterable[str]) -> ParameterLayout:
        return dataclasses.replace(self, frozen=frozenset(frozen))

    # --- pack / unpack ------------------------------------------------------------------
    def pack_intrinsics(self, camera: PlenopticCamera) -> FloatArray:
        """Intrinsic entries of a camera, shape (n_intrinsics,)."""
        mla, dist = camera.mla, camera.distortion
        th = np.asarray(mla.rotation_xyz_rad, dtype=np.float64)
        tx, ty, _ = mla.translation_mm
        pitch = list(mla.pitch_mm) if self.two_pitches else [0.5 * (mla.pitch_mm[0] + mla.pitch_mm[1])]
        if camera.n_types != self.n_types:
            raise ModelError(f"camera has {camera.n_types} micro-lens types, layout has {self.n_types}")
        vals = [
            camera.main_lens.focal_length_mm,
            dist.q1, dist.q2, dist.q3, dist.p1, dist.p2,
            camera.sensor.principal_point_px[0], camera.sensor.principal_point_px[1],
            camera.d_mm,
            th[0], th[1], th[2],
            tx, ty, camera.D_mm,
            *([camera.main_lens.exit_pupil_mm] if self.exit_pupil else []),
            *([dist.z1, dist.z2] if self.depth_distortion else []),
            *pitch,
            *mla.focal_lengths_mm,
        ]
        return np.asarray(vals, dtype=np.float64)

    def pack_poses(self, poses: Mapping[int, Pose]) -> FloatArray:
        """Pose entries, shape (6·n_frames,), (rotation vector, translation) per frame."""
        missing = [f for f in self.frames if f not in poses]
        if missing:
            raise ModelError(f"no pose for frame(s) {missing}")
        return np.concatenate(
            [np.concatenate([rotvec_from_matrix(poses[f].rotation), poses[f].translation]) for f in self.frames]
        ) if self.frames else np.zeros(0)

    def pack(self, camera: PlenopticCamera, poses: Mapping[int, Pose]) -> FloatArray:
        """The full vector in natural units, shape (size,)."""
        return np.concatenate([self.pack_intrinsics(camera), self.pack_poses(poses)])

    def unpack_camera(self, x: FloatArray) -> PlenopticCamera:
        """Camera from the full vector (or its intrinsic head)."""
        v = dict(zip(self.intrinsic_names, (float(a) for a in x[: self.n_intrinsics]), strict=True))
        t = self.template
        D, d = v["D_mm"], v["d_mm"]
        if self.two_pitches:
            pitch = (v["pitch0_mm"], v["pitch1_mm"])
        else:
            pitch = (v["pitch_mm"], v["pitch_mm"])
        focal = tuple(v[f"f{i + 1}_mm"] for i in range(self.n_types))
        mla = MicroLensArray(
            lattice=t.mla.lattice,
            pitch_mm=pitch,
            rotation_xyz_rad=(v["theta_x_rad"], v["theta_y_rad"], v["theta_z_rad"]),
            translation_mm=(v["tx_mm"], v["ty_mm"], -D),
            focal_lengths_mm=focal,
            types=t.mla.types,
        )
        sensor = Sensor(
            t.sensor.pixel_size_mm, t.sensor.width_px, t.sensor.height_px, (v["u0_px"], v["v0_px"]), D + d
        )
        return PlenopticCamera(
            main_lens=MainLens(v["F_mm"], t.main_lens.f_number, v.get("exit_pupil_mm", t.main_lens.exit_pupil_mm)),
            distortion=Distortion(v["q1"], v["q2"], v["q3"], v["p1"], v["p2"],
                                  v.get("z1", t.distortion.z1), v.get("z2", t.distortion.z2)),
            mla=mla,
            sensor=sensor,
            mia=t.grid,
            configuration=t.configuration,
            focus_distance_mm=t.focus_distance_mm,
            rho_form=t.rho_form,
        )

    def pose_arrays(self, x: FloatArray) -> tuple[FloatArray, FloatArray]:
        """(rotation vectors, translations), each shape (n_frames, 3), from the full vector."""
        p = np.asarray(x[self.n_intrinsics :], dtype=np.float64).reshape(-1, 6)
        return p[:, :3], p[:, 3:]

    def unpack_poses(self, x: FloatArray) -> dict[int, Pose]:
        rv, tr = self.pose_arrays(x)
        R = rodrigues(rv) if len(rv) else np.zeros((0, 3, 3))
        return {f: Pose(R[i], tr[i]) for i, f in enumerate(self.frames)}

    def unpack(self, x: FloatArray) -> tuple[PlenopticCamera, dict[int, Pose]]:
        """Inverse of :meth:`pack`."""
        return self.unpack_camera(x), self.unpack_poses(x)

    # --- solver variables ---------------------------------------------------------------
    def to_solver(self, x: FloatArray, x_ref: FloatArray) -> FloatArray:
        """Scaled free variables ``z = (x − x_ref)[free] / scale[free]``."""
        m = self.free_mask
        return (x[m] - x_ref[m]) / self.scale[m]

    def from_solver(self, z: FloatArray, x_ref: FloatArray) -> FloatArray:
        """Full vector from scaled free variables (frozen entries from ``x_ref``)."""
        x = np.array(x_ref, dtype=np.float64, copy=True)
        m = self.free_mask
        x[m] = x_ref[m] + z * self.scale[m]
        return x


@functools.lru_cache(maxsize=8)
def _unit_centre_offset(lattice: Lattice) -> tuple[float, float]:
    """c − ḡ for unit pitches: the lattice's bounding-box corner c (the MLA frame origin) less the
    mean of its lens positions ḡ, per axis (positions are linear in each pitch component)."""
    k, l = lattice.all_indices()
    gx, gy = lattice.positions(k, l, (1.0, 1.0))
    cx, cy = lattice_corner(lattice, (1.0, 1.0))
    return float(cx - gx.mean()), float(cy - gy.mean())


TILT_STEP_RAD = 1e-6
"""Central-difference step of the lattice centre's offset in the MLA's Euler angles (it is a
smooth trigonometric function of them: the step's truncation error is ~1e-12 relative)."""


def lattice_centre_offset(layout: ParameterLayout, x: FloatArray) -> tuple[float, FloatArray]:
    """Δ = [R·(c − ḡ, 0)]_z (mm) and its gradient: how far the MLA plane at the lattice's centre
    lies in front of (+z) its frame origin, a corner of the array, where ``D_mm`` and ``d_mm`` are
    defined (``C = t + R·(c − g, 0)``, :func:`plenocal.model.projection.micro_lens_centres`): the
    centre's D is D − Δ and its d is d + Δ. A tilted MLA puts them ~3 % of d apart on an R12."""
    idx = layout.index
    t = layout.template
    ux, uy = _unit_centre_offset(t.mla.lattice)
    if layout.two_pitches:
        p0, p1 = float(x[idx["pitch0_mm"]]), float(x[idx["pitch1_mm"]])
    else:
        p0 = p1 = float(x[idx["pitch_mm"]])
    names = ("theta_x_rad", "theta_y_rad", "theta_z_rad")
    theta = np.array([float(x[idx[n]]) for n in names])

    def offset(th: FloatArray) -> float:
        R = matrix_from_euler_xyz(th)
        return float(R[2, 0] * ux * p0 + R[2, 1] * uy * p1)

    R = matrix_from_euler_xyz(theta)
    g = np.zeros(layout.size)
    for j, n in enumerate(names):
        step = np.zeros(3)
        step[j] = TILT_STEP_RAD
        g[idx[n]] = (offset(theta + step) - offset(theta - step)) / (2.0 * TILT_STEP_RAD)
    if layout.two_pitches:
        g[idx["pitch0_mm"]] = R[2, 0] * ux
        g[idx["pitch1_mm"]] = R[2, 1] * uy
    else:
        g[idx["pitch_mm"]] = R[2, 0] * ux + R[2, 1] * uy
    return offset(theta), g


def derived_values(layout: ParameterLayout, x: FloatArray) -> dict[str, tuple[float, FloatArray]]:
    """Derived quantities with their gradient w.r.t. the full vector (for σ propagation).

    Returns
    -------
    dict
        name → (value, gradient of shape (size,)): ``sensor_distance_mm`` = D + d,
        ``lambda`` = (D − e)/(D + d − e) (paper eq:mlinterdist, e = 0 there), and D and d at the
        lattice's centre, ``D_centre_mm`` = D − Δ and ``d_centre_mm`` = d + Δ
        (:func:`lattice_centre_offset`; ``D_mm``, ``d_mm`` are at the MLA frame origin, a corner).
    """
    idx = layout.index
    D, d = float(x[idx["D_mm"]]), float(x[idx["d_mm"]])
    e = float(x[idx["exit_pupil_mm"]]) if "exit_pupil_mm" in idx else layout.template.main_lens.exit_pupil_mm
    g_dist = np.zeros(layout.size)
    g_dist[idx["D_mm"]] = 1.0
    g_dist[idx["d_mm"]] = 1.0
    De, Se = D - e, D + d - e
    g_lam = np.zeros(layout.size)
    g_lam[idx["D_mm"]] = d / Se**2
    g_lam[idx["d_mm"]] = -De / Se**2
    if "exit_pupil_mm" in idx:
        g_lam[idx["exit_pupil_mm"]] = -d / Se**2
    delta, g_delta = lattice_centre_offset(layout, x)
    g_Dc, g_dc = -g_delta, g_delta.copy()
    g_Dc[idx["D_mm"]] += 1.0
    g_dc[idx["d_mm"]] += 1.0
    return {"sensor_distance_mm": (D + d, g_dist), "lambda": (De / Se, g_lam),
            "D_centre_mm": (D - delta, g_Dc), "d_centre_mm": (d + delta, g_dc)}


def frames_of(poses: Mapping[int, Pose] | Sequence[int]) -> tuple[int, ...]:
    return tuple(sorted(int(f) for f in poses))
