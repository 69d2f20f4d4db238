"""The one adapter for libpleno / COMPOTE files and conventions (reference §1–2, §10).

libpleno's conventions live only here: numbers written as JSON strings, column-major matrices,
the 180° image flip, MLA-space indices (k', l') = (W_g−1−k, H_g−1−l), the MLA lattice origin,
camera-in-board poses and ``mode`` integers. Everything returned is in plenocal's conventions
(``docs/conventions.md``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from plenocal.errors import InputFileError
from plenocal.model.camera import (
    Configuration,
    Distortion,
    MainLens,
    MicroImageGrid,
    MicroLensArray,
    PlenopticCamera,
    Sensor,
)
from plenocal.model.geometry import Pose, euler_xyz_from_matrix
from plenocal.model.lattice import Lattice, LatticeKind, TypeLayout
from plenocal.model.target import Checkerboard
from plenocal.model.white import InternalParameters

GEOMETRY_TO_KIND = {0: LatticeKind.ORTHOGONAL, 1: LatticeKind.HEX_ROWS, 2: LatticeKind.HEX_COLS}
KIND_TO_GEOMETRY = {v: k for k, v in GEOMETRY_TO_KIND.items()}
MODE_TO_CONFIGURATION = {0: Configuration.UNFOCUSED, 1: Configuration.KEPLERIAN, 2: Configuration.GALILEAN}
CONFIGURATION_TO_MODE = {v: k for k, v in MODE_TO_CONFIGURATION.items()}
INFINITY_MM = 1e8  # libpleno's "infinite" focus distance


# --- low-level JSON helpers ---------------------------------------------------------------
def read_json(path: str | Path) -> dict[str, Any]:
    """Parse a libpleno JSON file; one-line :class:`InputFileError` on any problem."""
    p = Path(path)
    if not p.is_file():
        raise InputFileError(p, "file does not exist")
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise InputFileError(p, "not a text file") from None
    except json.JSONDecodeError as exc:
        raise InputFileError(p, f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    if not isinstance(doc, dict):
        raise InputFileError(p, f"expected a JSON object at top level, got {type(doc).__name__}")
    return doc


def _get(doc: dict[str, Any], key: str, path: Path, default: Any = ...) -> Any:
    node: Any = doc
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            if default is not ...:
                return default
            raise InputFileError(path, f"missing key '{key}'")
        node = node[part]
    return node


def _num(value: Any, path: Path, key: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InputFileError(path, f"key '{key}' must be a number, got {value!r}") from None
    return x


def _matrix(value: Any, path: Path, key: str, shape: tuple[int, int]) -> np.ndarray:
    """A column-major libpleno matrix ``[[col0...], [col1...], ...]`` -> (rows, cols) array."""
    try:
        cols = np.array([[float(v) for v in col] for col in value], dtype=np.float64)
    except (TypeError, ValueError):
        raise InputFileError(path, f"key '{key}' must be a matrix of numbers") from None
    M = cols.T
    if M.shape != shape:
        raise InputFileError(path, f"key '{key}' must be {shape[0]}x{shape[1]}, got {M.shape[0]}x{M.shape[1]}")
    return M


# --- MLA origin and index conversions ----------------------------------------------------
def mla_origin_offset(kind: LatticeKind, width: int, height: int, pitch: tuple[float, float]) -> np.ndarray:
    """Position of plenocal's MLA frame origin in libpleno's MLA lattice frame (mm, (3,)).

    libpleno places MLA-space node (k', l') at ``node(k', l')``; plenocal places lens (k, l) at
    ``c − g(k, l)``. With (k', l') = (W−1−k, H−1−l) the two agree up to this constant offset.
    """
    _p0, p1 = pitch
    if kind is LatticeKind.HEX_ROWS:
        # node(k',l') = (p0(W−½), p1 sin60 (H−1)) − g(k,l) when H−1 is odd; c = (p0(W−½), same).
        return np.array([0.0, 0.0, 0.0])
    if kind is LatticeKind.HEX_COLS:
        # HEAD: node = (p0 cos30 k', p1 (l' − ½[k' odd])) = (c_x − g_x, p1(H−1) − g_y) for W−1 odd;
        # plenocal's c_y = p1 (H − ½): origin offset −½ p1 in y.
        return np.array([0.0, -0.5 * p1, 0.0])
    return np.array([0.0, 0.0, 0.0])


def mla_index(k: np.ndarray, l: np.ndarray, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """MIA-space (k, l) <-> MLA-space (k', l') (its own inverse, reference §2.2)."""
    return width - 1 - np.asarray(k), height - 1 - np.asarray(l)


# --- intrinsics.js -----------------------------------------------------------------------
def camera_from_intrinsics(
    path: str | Path, *, configuration: Configuration | None = None, f_number: float | None = None
) -> PlenopticCamera:
    """Read a libpleno ``intrinsics.js`` (or a compote one) as a :class:`PlenopticCamera`.

    The configuration is not trusted from ``mode`` (its meaning changed between code
    generations, reference §10.2): it is inferred from f_0 versus d unless given.
    """
    p = Path(path)
    doc = read_json(p)
    I = int(_num(_get(doc, "I", p), p, "I"))
    s = _num(_get(doc, "sensor.scale", p), p, "sensor.scale")
    W = int(_num(_get(doc, "sensor.width", p), p, "sensor.width"))
    H = int(_num(_get(doc, "sensor.height", p), p, "sensor.height"))
    ts = _matrix(_get(doc, "sensor.pose.translation", p), p, "sensor.pose.translation", (3, 1)).ravel()
    Rs = _matrix(_get(doc, "sensor.pose.rotation", p), p, "sensor.pose.rotation", (3, 3))
    if not np.allclose(Rs, np.eye(3), atol=1e-12):
        raise InputFileError(
            p, "sensor.pose.rotation must be the identity (plenocal's sensor is parallel to the main lens)"
        )
    F = _num(_get(doc, "main_lens.f", p), p, "main_lens.f")
    N = _num(_get(doc, "main_lens.aperture", p), p, "main_lens.aperture") if f_number is None else f_number
    radial = _matrix(_get(doc, "distortions.radial", p, [[0, 0, 0]]), p, "distortions.radial", (3, 1)).ravel()
    tangential = _matrix(_get(doc, "distortions.tangential", p, [[0, 0]]), p, "distortions.tangential", (2, 1)).ravel()
    mla_mesh = _get(doc, "mla.mesh", p)
    geometry = int(_num(_get(mla_mesh, "geometry", p), p, "mla.mesh.geometry"))
    if geometry not in GEOMETRY_TO_KIND:
        raise InputFileError(p, f"mla.mesh.geometry must be 0, 1 or 2, got {geometry}")
    kind = GEOMETRY_TO_KIND[geometry]
    Wg = int(_num(_get(mla_mesh, "width", p), p, "mla.mesh.width"))
    Hg = int(_num(_get(mla_mesh, "height", p), p, "mla.mesh.height"))
    _check_parity(p, kind, Wg, Hg)
    lattice = Lattice(kind, Wg, Hg)
    pitch = _matrix(_get(mla_mesh, "pitch", p), p, "mla.mesh.pitch", (2, 1)).ravel()
    Rm = _matrix(_get(mla_mesh, "pose.rotation", p), p, "mla.mesh.pose.rotation", (3, 3))
    tm = _matrix(_get(mla_mesh, "pose.translation", p), p, "mla.mesh.pose.translation", (3, 1)).ravel()
    t_ours = tm + Rm @ mla_origin_offset(kind, Wg, Hg, (pitch[0], pitch[1]))
    focal = tuple(_num(v, p, "mla.focal_lengths") for v in _get(doc, "mla.focal_lengths", p, []))
    if len(focal) != I:
        raise InputFileError(p, f"mla.focal_lengths has {len(focal)} values but I = {I}")
    mla = MicroLensArray(
        lattice=lattice,
        pitch_mm=(float(pitch[0]), float(pitch[1])),
        rotation_xyz_rad=tuple(euler_xyz_from_matrix(Rm)),  # type: ignore[arg-type]
        translation_mm=tuple(t_ours),  # type: ignore[arg-type]
        focal_lengths_mm=focal,
        types=TypeLayout.raytrix(I),
    )
    sensor = Sensor(s, W, H, (W - 1 + ts[0] / s, H - 1 + ts[1] / s), -ts[2])
    mia = mia_from_doc(doc, p, lattice)
    h = _num(_get(doc, "dist_focus", p, INFINITY_MM), p, "dist_focus")
    cam = PlenopticCamera(
        main_lens=MainLens(F, N),
        distortion=Distortion(*radial, *tangential),
        mla=mla,
        sensor=sensor,
        mia=mia,
        configuration=Configuration.GALILEAN,
        focus_distance_mm=float("inf") if h >= INFINITY_MM else h,
    )
    if configuration is None:
        from plenocal.model.camera import infer_configuration

        configuration = infer_configuration(focal[0], cam.d_mm) if I > 0 else Configuration.GALILEAN
    return cam.replace(configuration=configuration)


def _check_parity(path: Path, kind: LatticeKind, Wg: int, Hg: int) -> None:
    if kind is LatticeKind.HEX_ROWS and (Hg - 1) % 2 == 0:
        raise InputFileError(
            path,
            f"hexagonal MLA with {Hg} rows: libpleno's MLA-space row parity is inconsistent for an "
            "odd row count (reference §2.2); such a file cannot be converted exactly",
        )
    if kind is LatticeKind.HEX_COLS and (Wg - 1) % 2 == 0:
        raise InputFileError(
            path,
            f"hexagonal MLA with {Wg} columns: libpleno's MLA-space column parity is inconsistent "
            "for an odd column count (reference §2.2); such a file cannot be converted exactly",
        )


def mia_from_doc(doc: dict[str, Any], path: Path, lattice: Lattice) -> MicroImageGrid | None:
    """The ``mia.mesh`` of an intrinsics.js / camera.js, or None when it has no pitch."""
    mesh = _get(doc, "mia.mesh", path, None)
    if mesh is None or "pitch" not in mesh:
        return None
    pitch = _matrix(mesh["pitch"], path, "mia.mesh.pitch", (2, 1)).ravel()
    Ri = _matrix(_get(mesh, "pose.rotation", path), path, "mia.mesh.pose.rotation", (2, 2))
    ti = _matrix(_get(mesh, "pose.translation", path), path, "mia.mesh.pose.translation", (2, 1)).ravel()
    theta = float(np.arctan2(Ri[1, 0], Ri[0, 0]))
    offset = ti.copy()
    if lattice.kind is LatticeKind.HEX_COLS:
        # HEAD: y = p1 (l − ½[k odd]) = p1 (l + ½[k even]) − ½ p1.
        offset = offset + Ri @ np.array([0.0, -0.5 * pitch[1]])
    return MicroImageGrid(lattice, (float(pitch[0]), float(pitch[1])), theta, (float(offset[0]), float(offset[1])))


# --- poses.js ----------------------------------------------------------------------------
def read_poses(path: str | Path) -> dict[int, Pose]:
    """``poses.js`` -> {frame: cam_from_world} (libpleno stores the camera in the board frame)."""
    p = Path(path)
    doc = read_json(p)
    entries = _get(doc, "poses", p)
    if not isinstance(entries, list):
        raise InputFileError(p, "key 'poses' must be a list")
    out: dict[int, Pose] = {}
    for i, e in enumerate(entries):
        key = f"poses[{i}]"
        frame = int(_num(_get(e, "frame", p), p, f"{key}.frame"))
        R = _matrix(_get(e, "pose.rotation", p), p, f"{key}.pose.rotation", (3, 3))
        t = _matrix(_get(e, "pose.translation", p), p, f"{key}.pose.translation", (3, 1)).ravel()
        out[frame] = Pose(R, t).inverse()
    return out


# --- params.js ---------------------------------------------------------------------------
def read_params(path: str | Path) -> InternalParameters:
    """``params.js`` -> Ω (m, q, Δc, λ, κ, N, s). λ is taken from dC/dc (the stored ``lambda``
    field is stale in the libpleno example, reference §5.1)."""
    p = Path(path)
    doc = read_json(p)
    m = _num(_get(doc, "m", p), p, "m")
    q = tuple(_num(v, p, "q") for v in _get(doc, "q", p))
    dc = _num(_get(doc, "dc", p), p, "dc")
    dC = _num(_get(doc, "dC", p, dc), p, "dC")
    return InternalParameters(
        m_mm=m,
        q_mm=q,
        micro_image_pitch_mm=dc,
        lambda_=dC / dc,
        f_number=_num(_get(doc, "N", p, 4.0), p, "N"),
        kappa=_num(_get(doc, "kappa", p, 1.0), p, "kappa"),
        pixel_size_mm=_num(_get(doc, "scale", p), p, "scale"),
    )


# --- scene.js ----------------------------------------------------------------------------
def read_scene(path: str | Path) -> Checkerboard:
    """The first checkerboard of a ``scene.js``."""
    p = Path(path)
    doc = read_json(p)
    boards = _get(doc, "checkerboards", p)
    if not isinstance(boards, list) or not boards:
        raise InputFileError(p, "key 'checkerboards' must be a non-empty list")
    b = boards[0]
    return Checkerboard(
        columns=int(_num(_get(b, "x_grid", p), p, "checkerboards[0].x_grid")),
        rows=int(_num(_get(b, "y_grid", p), p, "checkerboards[0].y_grid")),
        square_mm=_num(_get(b, "lph", p), p, "checkerboards[0].lph"),
    )


__all__ = [
    "CONFIGURATION_TO_MODE",
    "KIND_TO_GEOMETRY",
    "camera_from_intrinsics",
    "mla_index",
    "read_json",
    "read_params",
    "read_poses",
    "read_scene",
]
