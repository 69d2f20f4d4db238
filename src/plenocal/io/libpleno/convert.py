"""Conversions between libpleno documents and plenocal objects (``docs/conventions.md``, last table).

This is the only place that knows libpleno's conventions: the 180° image flip (sensor
translation ↔ principal point), MLA-space indices and the MLA lattice origin at the opposite
corner, camera-in-board poses, ``mode`` integers, the lattice row (column) parity and the two
code generations' ``intrinsics.js`` layouts (:class:`Generation`).
"""

from __future__ import annotations

import dataclasses
import math
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from plenocal.errors import DataError, InputFileError, ModelError
from plenocal.io.libpleno._json import as_matrix, num, vector_json
from plenocal.io.libpleno.documents import (
    CameraConfigDoc,
    CheckerboardDoc,
    DistortionsDoc,
    FramePoseDoc,
    MainLensDoc,
    MeshDoc,
    ParamsDoc,
    PoseDoc,
    SceneDoc,
    SensorDoc,
    read_camera_config,
    read_params_doc,
    read_poses_doc,
    read_scene_doc,
    write_camera_config,
    write_params_doc,
    write_poses_doc,
    write_scene_doc,
)
from plenocal.io.libpleno.head import head_fields, head_mode
from plenocal.io.libpleno.inverse_distortion import fit_camera_inverse_distortion
from plenocal.io.limits import MAX_F_NUMBER, MIN_F_NUMBER
from plenocal.model.camera import (
    Configuration,
    Distortion,
    MainLens,
    MicroImageGrid,
    MicroLensArray,
    PlenopticCamera,
    RhoForm,
    Sensor,
    infer_configuration,
    lattice_corner,
)
from plenocal.model.geometry import Pose, euler_xyz_from_matrix
from plenocal.model.lattice import Lattice, LatticeKind, TypeLayout
from plenocal.model.target import Checkerboard
from plenocal.model.white import InternalParameters

GEOMETRY_TO_KIND = {0: LatticeKind.ORTHOGONAL, 1: LatticeKind.HEX_ROWS, 2: LatticeKind.HEX_COLS}
KIND_TO_GEOMETRY = {v: k for k, v in GEOMETRY_TO_KIND.items()}
MODE_TO_CONFIGURATION = {0: Configuration.UNFOCUSED, 1: Configuration.KEPLERIAN, 2: Configuration.GALILEAN}
CONFIGURATION_TO_MODE = {v: k for k, v in MODE_TO_CONFIGURATION.items()}
INFINITY_MM = 1e8
"""libpleno's "infinite" focus distance (``dist_focus``)."""

_IDENTITY3 = PoseDoc(as_matrix(np.eye(3)), (0.0, 0.0, 0.0))

RHO_FORM_KEY = "plenocal_rho_form"
"""Top-level key of an exported ``intrinsics.js``: the camera's ρ form (libpleno ignores it)."""
LATTICE_KEY = "plenocal_lattice"
"""Top-level key of an exported ``intrinsics.js`` whose lattice was padded for libpleno's parity
(:func:`libpleno_lattice`): plenocal's own lattice size, restored on import."""


class Generation(Enum):
    """The two layouts of libpleno's ``intrinsics.js`` (reference, "Two code generations", §10.2)."""

    LEGACY = "legacy"
    """Dec-2020 code (libpleno ``examples/``, the paper's numbers): the camera only."""
    HEAD = "head"
    """2021 HEAD code (COMPOTE ``examples/``, PRISM): also ``distortions_inverse``, the depth
    distortion fields, ``scaling`` and the computed ``D``, ``d``, ``pp``, ``Rxyz``,
    ``focal_planes``, and ``mode`` as HEAD's ``mode()`` computes it."""


# --- MLA origin and index conversions ----------------------------------------------------
def mla_origin_offset(kind: LatticeKind, width: int, height: int, pitch: tuple[float, float]) -> np.ndarray:
    """Position of plenocal's MLA frame origin in libpleno's MLA lattice frame (mm, (3,)).

    libpleno places MLA-space node (k', l') at ``node(k', l')``; plenocal places lens (k, l) at
    ``c − g(k, l)``. With (k', l') = (W−1−k, H−1−l) the two agree up to this constant offset.
    """
    _p0, p1 = pitch
    if kind is LatticeKind.HEX_COLS:
        # HEAD: node = (p0 cos30 k', p1 (l' − ½[k' odd])) = (c_x − g_x, p1(H−1) − g_y) for W−1 odd;
        # plenocal's c_y = p1 (H − ½): origin offset −½ p1 in y.
        return np.array([0.0, -0.5 * p1, 0.0])
    # HEX_ROWS: node(k',l') = (p0(W−½), p1 sin60 (H−1)) − g(k,l) when H−1 is odd = c − g.
    # ORTHOGONAL: node(k',l') = (p0(W−1), p1(H−1)) − g(k,l) = c − g.
    return np.array([0.0, 0.0, 0.0])


def mla_index(k: np.ndarray, l: np.ndarray, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """MIA-space (k, l) <-> MLA-space (k', l') (its own inverse, reference §2.2)."""
    return width - 1 - np.asarray(k), height - 1 - np.asarray(l)


def parity_problem(kind: LatticeKind, width: int, height: int) -> str | None:
    """Why a lattice cannot be converted exactly to/from libpleno's MLA space, or None."""
    if kind is LatticeKind.HEX_ROWS and (height - 1) % 2 == 0:
        return (
            f"hexagonal MLA with {height} rows: libpleno's MLA-space row parity is inconsistent for an "
            "odd row count (reference §2.2): its MLA would not be the lattice of its micro-images"
        )
    if kind is LatticeKind.HEX_COLS and (width - 1) % 2 == 0:
        return (
            f"hexagonal MLA with {width} columns: libpleno's MLA-space column parity is inconsistent "
            "for an odd column count (reference §2.2): its MLA would not be the lattice of its micro-images"
        )
    return None


def libpleno_lattice(lattice: Lattice) -> Lattice:
    """The smallest lattice holding ``lattice`` that libpleno's MLA space describes exactly.

    libpleno's MLA-space index (k', l') = (W−1−k, H−1−l) keeps "even rows shifted +½" meaning the
    same physical hexagonal lattice only when H − 1 is odd (W − 1 for columns-aligned lattices;
    reference §2.2, §15 item 6). Otherwise one row (column) is added at the end: index H (W) is
    the next row (column) of the same lattice, beyond the last, so every existing micro-lens keeps
    its index, position and type (reference §2.3's layout is indexed in MIA space). The added lenses
    lie beyond the last row of micro-images; libpleno and PRISM find nothing to see through them.
    """
    if lattice.kind is LatticeKind.HEX_ROWS and (lattice.height - 1) % 2 == 0:
        return Lattice(lattice.kind, lattice.width, lattice.height + 1)
    if lattice.kind is LatticeKind.HEX_COLS and (lattice.width - 1) % 2 == 0:
        return Lattice(lattice.kind, lattice.width + 1, lattice.height)
    return lattice


def with_lattice(camera: PlenopticCamera, lattice: Lattice) -> PlenopticCamera:
    """The same micro-lenses and micro-images indexed in a larger or smaller lattice of the same kind.

    Lens (k, l) sits at t + R·(c − g(k, l)) with c the lattice's bounding-box corner: the MLA
    translation moves by R·(c_old − c_new) so that every lens common to both stays where it is. The
    micro-image grid does not depend on the lattice size.
    """
    mla, grid = camera.mla, camera.grid
    if lattice == mla.lattice:
        return camera
    if lattice.kind is not mla.lattice.kind:
        raise DataError(f"cannot re-index a {mla.lattice.kind.value} lattice as {lattice.kind.value}")
    old = np.array([*lattice_corner(mla.lattice, mla.pitch_mm), 0.0])
    new = np.array([*lattice_corner(lattice, mla.pitch_mm), 0.0])
    t = np.asarray(mla.translation_mm) + mla.rotation @ (old - new)
    return camera.replace(
        mla=dataclasses.replace(mla, lattice=lattice, translation_mm=(float(t[0]), float(t[1]), float(t[2]))),
        mia=dataclasses.replace(grid, lattice=lattice),
    )


def _kind(path: Path, geometry: int, key: str) -> LatticeKind:
    if geometry not in GEOMETRY_TO_KIND:
        raise InputFileError(path, f"{key} must be 0, 1 or 2, got {geometry}")
    return GEOMETRY_TO_KIND[geometry]


# --- camera ------------------------------------------------------------------------------
def mia_from_mesh(mesh: MeshDoc | None, path: Path, lattice: Lattice) -> MicroImageGrid | None:
    """The ``mia.mesh`` of a config as a :class:`MicroImageGrid`, or None when it has no pitch."""
    if mesh is None or mesh.pitch is None:
        return None
    if mesh.pose is None:
        raise InputFileError(path, "missing key 'mia.mesh.pose'")
    Ri = np.asarray(mesh.pose.rotation)
    ti = np.asarray(mesh.pose.translation)
    theta = float(np.arctan2(Ri[1, 0], Ri[0, 0]))
    offset = ti.copy()
    if lattice.kind is LatticeKind.HEX_COLS:
        # HEAD: y = p1 (l − ½[k odd]) = p1 (l + ½[k even]) − ½ p1.
        offset = offset + Ri @ np.array([0.0, -0.5 * mesh.pitch[1]])
    return MicroImageGrid(lattice, mesh.pitch, theta, (float(offset[0]), float(offset[1])))


def rho_form_of(doc: CameraConfigDoc) -> RhoForm:
    """The ρ form of the code generation that wrote an ``intrinsics.js`` (reference §4.7, §10.2).

    HEAD writes the (0, 0) lens' ``D`` and ``d`` (and ``pp``, ``Rxyz``...) and two MLA pitches;
    the Dec-2020 (legacy) code wrote neither, with one pitch repeated.
    """
    if isinstance(doc.extra.get(RHO_FORM_KEY), str) and doc.extra[RHO_FORM_KEY] in {r.value for r in RhoForm}:
        return RhoForm(doc.extra[RHO_FORM_KEY])  # written by plenocal's exporter
    head = "D" in doc.extra or "d" in doc.extra
    two_pitches = doc.mla is not None and doc.mla.pitch is not None and doc.mla.pitch[0] != doc.mla.pitch[1]
    return RhoForm.HEAD if head or two_pitches else RhoForm.LEGACY


def camera_from_config(
    doc: CameraConfigDoc,
    path: str | Path = "intrinsics.js",
    *,
    configuration: Configuration | None = None,
    f_number: float | None = None,
) -> PlenopticCamera:
    """A :class:`PlenopticCamera` from an ``intrinsics.js`` document.

    The configuration is not trusted from ``mode`` (its meaning changed between code
    generations, reference §10.2): with I > 0 it is inferred from f_0 versus d unless given;
    with I = 0 ``mode`` is used (Galilean when absent).
    """
    p = Path(path)
    if doc.mla is None or doc.mla.pitch is None or doc.mla.pose is None:
        raise InputFileError(p, "missing key 'mla.mesh' with pitch and pose (a camera.js is not a calibrated camera)")
    if doc.sensor.pose is None:
        raise InputFileError(p, "missing key 'sensor.pose'")
    s, W, H = doc.sensor.scale, doc.sensor.width, doc.sensor.height
    Rs = np.asarray(doc.sensor.pose.rotation)
    ts = np.asarray(doc.sensor.pose.translation)
    if not np.allclose(Rs, np.eye(3), atol=1e-12):
        raise InputFileError(
            p, "sensor.pose.rotation must be the identity (plenocal's sensor is parallel to the main lens)"
        )
    N = doc.main_lens.aperture if f_number is None else f_number
    if N is None:
        raise InputFileError(p, "missing key 'main_lens.aperture'")
    kind = _kind(p, doc.mla.geometry, "mla.mesh.geometry")
    Wg, Hg = doc.mla.width, doc.mla.height
    problem = parity_problem(kind, Wg, Hg)
    if problem:
        raise InputFileError(p, problem)
    focal = tuple(doc.focal_lengths or ())
    if len(focal) != doc.I:
        raise InputFileError(p, f"mla.focal_lengths has {len(focal)} values but I = {doc.I}")
    dist = doc.distortions or DistortionsDoc()
    Rm = np.asarray(doc.mla.pose.rotation)
    tm = np.asarray(doc.mla.pose.translation)
    pitch = doc.mla.pitch
    t_ours = tm + Rm @ mla_origin_offset(kind, Wg, Hg, pitch)
    h = INFINITY_MM if doc.dist_focus is None else doc.dist_focus
    try:
        lattice = Lattice(kind, Wg, Hg)
        mla = MicroLensArray(
            lattice=lattice,
            pitch_mm=pitch,
            rotation_xyz_rad=tuple(euler_xyz_from_matrix(Rm)),
            translation_mm=tuple(t_ours),
            focal_lengths_mm=focal,
            types=TypeLayout.raytrix(doc.I),
        )
        cam = PlenopticCamera(
            main_lens=MainLens(doc.main_lens.f, N),
            distortion=Distortion(*dist.radial, *dist.tangential),
            mla=mla,
            sensor=Sensor(s, W, H, (W - 1 + ts[0] / s, H - 1 + ts[1] / s), -ts[2]),
            mia=mia_from_mesh(doc.mia, p, lattice),
            configuration=Configuration.GALILEAN,
            focus_distance_mm=math.inf if h >= INFINITY_MM else h,
            rho_form=rho_form_of(doc),
        )
    except ModelError as exc:
        raise InputFileError(p, str(exc)) from None
    own = plenocal_lattice_of(doc, p)
    if own is not None:
        cam = with_lattice(cam, own)
    if configuration is None:
        if doc.I > 0:
            configuration = infer_configuration(focal[0], cam.d_mm)
        else:
            configuration = MODE_TO_CONFIGURATION.get(doc.mode if doc.mode is not None else 2, Configuration.GALILEAN)
    return cam.replace(configuration=configuration)


def plenocal_lattice_of(doc: CameraConfigDoc, path: str | Path = "intrinsics.js") -> Lattice | None:
    """plenocal's lattice of an exported ``intrinsics.js`` whose lattice was padded (``plenocal_lattice``), or None.

    Raises
    ------
    InputFileError
        The key is malformed, or the file's lattice is not that lattice padded by :func:`libpleno_lattice`.
    """
    raw = doc.extra.get(LATTICE_KEY)
    if raw is None or doc.mla is None:
        return None
    p = Path(path)
    try:
        width, height = int(raw["width"]), int(raw["height"])
        own = Lattice(GEOMETRY_TO_KIND[doc.mla.geometry], width, height)
    except (TypeError, KeyError, ValueError, ModelError):
        raise InputFileError(p, f"{LATTICE_KEY} must be {{\"width\": W, \"height\": H}}, got {raw!r}") from None
    if libpleno_lattice(own) != Lattice(own.kind, doc.mla.width, doc.mla.height):
        raise InputFileError(
            p, f"{LATTICE_KEY} {width}x{height} is not the {doc.mla.width}x{doc.mla.height} MLA lattice less its padding"
        )
    return own


def config_from_camera(
    camera: PlenopticCamera,
    *,
    generation: Generation = Generation.LEGACY,
    inverse_distortion: Distortion | None = None,
) -> CameraConfigDoc:
    """The ``intrinsics.js`` document of a camera, in either generation's layout (reference §10.2).

    Sensor translation t_s = (s·(u0 − (W−1)), s·(v0 − (H−1)), −(D+d)); MLA pose
    (R_m, t_m − R_m·origin offset); main-lens ``diameter`` = F/N; ``dist_focus`` = 1e8 for
    infinity. A lattice whose row (column) parity libpleno cannot describe is padded by one row
    (column) at the end (:func:`libpleno_lattice`), its own size kept under ``plenocal_lattice``;
    the ρ form is kept under ``plenocal_rho_form`` (libpleno ignores both, plenocal reads them back).

    - legacy: ``mode`` 2 / 1 / 0 for Galilean / Keplerian / unfocused, the camera only;
    - HEAD: as HEAD's ``save()`` (:func:`head_config`).

    Parameters
    ----------
    camera : PlenopticCamera
    generation : Generation
        Layout (default legacy, the layout of the paper's files).
    inverse_distortion : Distortion, optional
        HEAD's ``distortions_inverse`` (default: fitted over the sensor's image-space footprint,
        :func:`~plenocal.io.libpleno.inverse_distortion.fit_camera_inverse_distortion`).

    Raises
    ------
    DataError
        The camera cannot be expressed in libpleno's conventions (a type layout other than libpleno's).
    """
    own = camera.mla.lattice
    padded = with_lattice(camera, libpleno_lattice(own))
    doc = _legacy_config(padded)
    extra: dict[str, Any] = {RHO_FORM_KEY: camera.rho_form.value}
    if padded.mla.lattice != own:
        extra[LATTICE_KEY] = {"width": num(own.width), "height": num(own.height)}
    doc = dataclasses.replace(doc, extra=extra)
    if generation is Generation.HEAD:
        inverse = inverse_distortion if inverse_distortion is not None else fit_camera_inverse_distortion(camera).inverse
        doc = head_config(doc, inverse)
    return doc


def _distortions_json(d: Distortion) -> dict[str, Any]:
    """A ``distortions`` block as HEAD writes it: radial, tangential, no depth distortion (model 0)."""
    return {
        "radial": vector_json((d.q1, d.q2, d.q3)),
        "tangential": vector_json((d.p1, d.p2)),
        "depth": vector_json((0.0, 0.0, 0.0)),
        "model": num(0),
    }


def head_config(doc: CameraConfigDoc, inverse_distortion: Distortion) -> CameraConfigDoc:
    """A legacy-layout document completed as libpleno HEAD's ``save()`` writes it (reference §10.2).

    Adds ``distortions.depth`` / ``model`` (none), ``distortions_inverse``, ``scaling`` (identity)
    and the fields HEAD computes (``D``, ``d``, ``pp``, ``Rxyz``, ``focal_planes``:
    :func:`~plenocal.io.libpleno.head.head_fields`), and sets ``mode`` as HEAD's ``mode()``
    (:func:`~plenocal.io.libpleno.head.head_mode`). ``I`` stays the number of types (HEAD's
    ``save()`` leaves it at its default 3, and its ``load()`` ignores it).
    """
    dist = doc.distortions or DistortionsDoc()
    forward = dataclasses.replace(dist, extra={**dist.extra, "depth": vector_json((0.0, 0.0, 0.0)), "model": num(0)})
    extra = {**doc.extra, **head_fields(doc), "distortions_inverse": _distortions_json(inverse_distortion)}
    return dataclasses.replace(doc, mode=head_mode(doc), distortions=forward, extra=extra)


def _legacy_config(camera: PlenopticCamera) -> CameraConfigDoc:
    """The Dec-2020 (legacy) ``intrinsics.js`` layout of a camera whose lattice libpleno describes exactly."""
    mla, sensor, grid = camera.mla, camera.sensor, camera.grid
    lat = mla.lattice
    problem = parity_problem(lat.kind, lat.width, lat.height)
    if problem:
        raise DataError(problem)
    expected = TypeLayout.raytrix(mla.n_types)
    if mla.n_types > 1 and mla.types != expected:
        raise DataError(
            f"micro-lens type layout row_shift={mla.types.row_shift} is not libpleno's "
            f"((l mod (I−1)) + k) mod I layout (row_shift={expected.row_shift})"
        )
    s, W, H = sensor.pixel_size_mm, sensor.width_px, sensor.height_px
    u0, v0 = sensor.principal_point_px
    Rm = mla.rotation
    tm = np.asarray(mla.translation_mm) - Rm @ mla_origin_offset(lat.kind, lat.width, lat.height, mla.pitch_mm)
    th = grid.rotation_rad
    Ri = np.array([[np.cos(th), -np.sin(th)], [np.sin(th), np.cos(th)]])
    ti = np.asarray(grid.offset_px, dtype=np.float64)
    if lat.kind is LatticeKind.HEX_COLS:
        ti = ti - Ri @ np.array([0.0, -0.5 * grid.pitch_px[1]])
    geometry = KIND_TO_GEOMETRY[lat.kind]
    F, N = camera.main_lens.focal_length_mm, camera.main_lens.f_number
    d = camera.distortion
    h = camera.focus_distance_mm
    return CameraConfigDoc(
        I=mla.n_types,
        sensor=SensorDoc(
            s, W, H, PoseDoc(as_matrix(np.eye(3)), (s * (u0 - (W - 1)), s * (v0 - (H - 1)), -sensor.distance_mm))
        ),
        main_lens=MainLensDoc(F, N, F / N, _IDENTITY3),
        dist_focus=INFINITY_MM if math.isinf(h) else h,
        mode=CONFIGURATION_TO_MODE[camera.configuration],
        mia=MeshDoc(
            geometry, lat.width, lat.height, grid.pitch_px, PoseDoc(as_matrix(Ri), (float(ti[0]), float(ti[1])))
        ),
        mla=MeshDoc(geometry, lat.width, lat.height, mla.pitch_mm, PoseDoc(as_matrix(Rm), tuple(float(x) for x in tm))),
        focal_lengths=mla.focal_lengths_mm,
        distortions=DistortionsDoc((d.q1, d.q2, d.q3), (d.p1, d.p2)),
    )


def camera_from_intrinsics(
    path: str | Path, *, configuration: Configuration | None = None, f_number: float | None = None
) -> PlenopticCamera:
    """Read a libpleno ``intrinsics.js`` (or a compote one) as a :class:`PlenopticCamera`."""
    return camera_from_config(read_camera_config(path), path, configuration=configuration, f_number=f_number)


def write_intrinsics(
    path: str | Path,
    camera: PlenopticCamera,
    *,
    generation: Generation = Generation.LEGACY,
    inverse_distortion: Distortion | None = None,
) -> Path:
    """Write a camera as a libpleno ``intrinsics.js`` (numbers as strings, column-major;
    :func:`config_from_camera` for the options)."""
    return write_camera_config(
        path, config_from_camera(camera, generation=generation, inverse_distortion=inverse_distortion)
    )


# --- params.js ---------------------------------------------------------------------------
def omega_from_params(doc: ParamsDoc, path: str | Path = "params.js") -> InternalParameters:
    """Ω from ``params.js``. λ is taken from dC/dc (the stored ``lambda`` field is stale in the
    libpleno example, reference §5.1)."""
    p = Path(path)
    if doc.scale is None:
        raise InputFileError(p, "missing key 'scale'")
    if doc.N is not None and not (math.isfinite(doc.N) and MIN_F_NUMBER <= doc.N <= MAX_F_NUMBER):
        raise InputFileError(p, f"key 'N' (f-number of the checkerboard images) must be in {MIN_F_NUMBER:g}..{MAX_F_NUMBER:g}, "
                                f"got {doc.N:g}")
    dC = doc.dc if doc.dC is None else doc.dC
    try:
        return InternalParameters(
            m_mm=doc.m,
            q_mm=doc.q,
            micro_image_pitch_mm=doc.dc,
            lambda_=dC / doc.dc,
            f_number=4.0 if doc.N is None else doc.N,
            kappa=1.0 if doc.kappa is None else doc.kappa,
            pixel_size_mm=doc.scale,
        )
    except (ModelError, ZeroDivisionError) as exc:
        raise InputFileError(p, str(exc) or "dc must not be 0") from None


def params_from_omega(omega: InternalParameters) -> ParamsDoc:
    """The ``params.js`` of Ω (dC = λ·dc, lambda = λ, I = number of intercepts)."""
    return ParamsDoc(
        m=omega.m_mm,
        q=tuple(omega.q_mm),
        dc=omega.micro_image_pitch_mm,
        scale=omega.pixel_size_mm,
        q_prime=tuple(omega.q_prime_mm),
        dC=omega.micro_lens_pitch_mm,
        lambda_=omega.lambda_,
        kappa=omega.kappa,
        N=omega.f_number,
        I=omega.n_types,
    )


def read_params(path: str | Path) -> InternalParameters:
    """``params.js`` -> Ω (m, q, Δc, λ = dC/dc, κ, N, s)."""
    return omega_from_params(read_params_doc(path), path)


def write_params(path: str | Path, omega: InternalParameters) -> Path:
    """Write Ω as a libpleno ``params.js``."""
    return write_params_doc(path, params_from_omega(omega))


# --- poses.js ----------------------------------------------------------------------------
def poses_from_doc(entries: tuple[FramePoseDoc, ...] | list[FramePoseDoc]) -> dict[int, Pose]:
    """``poses.js`` entries (camera in board) -> {frame: cam_from_world}."""
    return {e.frame: Pose(np.asarray(e.pose.rotation), np.asarray(e.pose.translation)).inverse() for e in entries}


def doc_from_poses(poses: dict[int, Pose]) -> tuple[FramePoseDoc, ...]:
    """{frame: cam_from_world} -> ``poses.js`` entries (world_from_cam), sorted by frame."""
    out = []
    for frame in sorted(poses):
        w = poses[frame].inverse()
        out.append(FramePoseDoc(int(frame), PoseDoc(as_matrix(w.rotation), tuple(float(x) for x in w.translation))))
    return tuple(out)


def read_poses(path: str | Path) -> dict[int, Pose]:
    """``poses.js`` -> {frame: cam_from_world} (libpleno stores the camera in the board frame)."""
    return poses_from_doc(read_poses_doc(path))


def write_poses(path: str | Path, poses: dict[int, Pose]) -> Path:
    """Write {frame: cam_from_world} as a libpleno ``poses.js``."""
    return write_poses_doc(path, doc_from_poses(poses))


# --- scene.js ----------------------------------------------------------------------------
def board_from_scene(doc: SceneDoc, path: str | Path = "scene.js") -> Checkerboard:
    """The first checkerboard of a ``scene.js``."""
    p = Path(path)
    if not doc.checkerboards:
        raise InputFileError(p, "key 'checkerboards' must be a non-empty list")
    b = doc.checkerboards[0]
    try:
        return Checkerboard(columns=b.x_grid, rows=b.y_grid, square_mm=b.lph)
    except ModelError as exc:
        raise InputFileError(p, f"checkerboards[0]: {exc}") from None


def scene_from_board(board: Checkerboard) -> SceneDoc:
    return SceneDoc((CheckerboardDoc(board.square_mm, board.columns, board.rows, _IDENTITY3),))


def read_scene(path: str | Path) -> Checkerboard:
    """The first checkerboard of a ``scene.js``."""
    return board_from_scene(read_scene_doc(path), path)


def write_scene(path: str | Path, board: Checkerboard) -> Path:
    """Write a checkerboard as a libpleno ``scene.js`` (identity pose)."""
    return write_scene_doc(path, scene_from_board(board))
