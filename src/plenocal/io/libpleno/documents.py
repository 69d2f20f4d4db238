"""Typed libpleno JSON documents, in libpleno's own conventions (reference §10.2).

Each ``*Doc`` dataclass is one file exactly as libpleno means it (MLA-space lattice origin,
camera-in-board poses, ``mode`` integers...); no convention is converted here (that is
:mod:`plenocal.io.libpleno.convert`). Matrices are row-major nested tuples; the column-major
file layout exists only in the reader and the writer. Keys this module does not know are kept
in ``extra`` (raw JSON values) and written back, so read → write → read is lossless.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from plenocal.errors import InputFileError
from plenocal.io.libpleno._json import (
    LpFields,
    Matrix,
    flat_json,
    matrix_json,
    num,
    read_json,
    vector_json,
    write_json,
)


def _extra(f: LpFields, known: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in f.doc.items() if k not in known}


# --- meshes, poses, parts ----------------------------------------------------------------
@dataclass(frozen=True)
class PoseDoc:
    """A libpleno pose (child frame in parent frame: p_parent = R·p_child + t)."""

    rotation: Matrix
    translation: tuple[float, ...]


def _pose(f: LpFields, dim: int) -> PoseDoc:
    return PoseDoc(f.matrix("rotation", (dim, dim)), f.vector("translation", dim))


def _pose_json(p: PoseDoc) -> dict[str, Any]:
    return {"rotation": matrix_json(p.rotation), "translation": vector_json(p.translation)}


@dataclass(frozen=True)
class MeshDoc:
    """A grid mesh: geometry (0 orthogonal, 1 hex rows, 2 hex columns), size, pitch, pose."""

    geometry: int
    width: int
    height: int
    pitch: tuple[float, float] | None = None
    pose: PoseDoc | None = None


def _mesh(f: LpFields, dim: int) -> MeshDoc:
    return MeshDoc(
        geometry=f.integer("geometry", -1),
        width=f.integer("width"),
        height=f.integer("height"),
        pitch=f.vector("pitch", 2) if f.has("pitch") else None,  # type: ignore[arg-type]
        pose=_pose(f.sub("pose"), dim) if f.has("pose") else None,
    )


def _mesh_json(m: MeshDoc) -> dict[str, Any]:
    out: dict[str, Any] = {"geometry": num(m.geometry), "width": num(m.width), "height": num(m.height)}
    if m.pitch is not None:
        out["pitch"] = vector_json(m.pitch)
    if m.pose is not None:
        out["pose"] = _pose_json(m.pose)
    return out


@dataclass(frozen=True)
class SensorDoc:
    scale: float
    width: int
    height: int
    pose: PoseDoc | None = None


@dataclass(frozen=True)
class MainLensDoc:
    f: float
    aperture: float | None = None
    diameter: float | None = None
    pose: PoseDoc | None = None


@dataclass(frozen=True)
class DistortionsDoc:
    radial: tuple[float, float, float] = (0.0, 0.0, 0.0)
    tangential: tuple[float, float] = (0.0, 0.0)
    extra: dict[str, Any] = field(default_factory=dict)


# --- camera.js / intrinsics.js -----------------------------------------------------------
_CONFIG_KEYS = ("I", "dist_focus", "mode", "sensor", "main_lens", "mia", "mla", "distortions")


@dataclass(frozen=True)
class CameraConfigDoc:
    """``camera.js`` or ``intrinsics.js`` (a ``PlenopticCameraConfig``).

    ``mla`` and ``focal_lengths`` are absent (None) in a ``camera.js``; ``mia.pitch`` too before
    pre-calibration. ``mla_extra`` keeps unknown keys of ``mla``; ``extra`` those at top level
    (compote's ``D``, ``d``, ``pp``, ``Rxyz``, ``scaling``, ``distortions_inverse``...).
    """

    I: int
    sensor: SensorDoc
    main_lens: MainLensDoc
    dist_focus: float | None = None
    mode: int | None = None
    mia: MeshDoc | None = None
    mla: MeshDoc | None = None
    focal_lengths: tuple[float, ...] | None = None
    distortions: DistortionsDoc | None = None
    mla_extra: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


def config_from_json(f: LpFields) -> CameraConfigDoc:
    s = f.sub("sensor")
    ml = f.sub("main_lens")
    mla = mla_extra = focal = None
    if f.has("mla"):
        m = f.sub("mla")
        mla = _mesh(m.sub("mesh"), 3)
        focal = m.flat("focal_lengths", default=())
        mla_extra = _extra(m, ("mesh", "focal_lengths"))
    mia = None
    if f.has("mia"):
        mia = _mesh(f.sub("mia").sub("mesh"), 2)
    dist = None
    if f.has("distortions"):
        d = f.sub("distortions")
        dist = DistortionsDoc(
            radial=d.vector("radial", 3, (0.0, 0.0, 0.0)),  # type: ignore[arg-type]
            tangential=d.vector("tangential", 2, (0.0, 0.0)),  # type: ignore[arg-type]
            extra=_extra(d, ("radial", "tangential")),
        )
    return CameraConfigDoc(
        I=f.integer("I"),
        sensor=SensorDoc(
            scale=s.number("scale"),
            width=s.integer("width"),
            height=s.integer("height"),
            pose=_pose(s.sub("pose"), 3) if s.has("pose") else None,
        ),
        main_lens=MainLensDoc(
            f=ml.number("f"),
            aperture=ml.optional_number("aperture"),
            diameter=ml.optional_number("diameter"),
            pose=_pose(ml.sub("pose"), 3) if ml.has("pose") else None,
        ),
        dist_focus=f.optional_number("dist_focus"),
        mode=f.optional_integer("mode"),
        mia=mia,
        mla=mla,
        focal_lengths=focal,
        distortions=dist,
        mla_extra=mla_extra or {},
        extra=_extra(f, _CONFIG_KEYS),
    )


def config_to_json(doc: CameraConfigDoc) -> dict[str, Any]:
    out: dict[str, Any] = {"I": num(doc.I)}
    if doc.dist_focus is not None:
        out["dist_focus"] = num(doc.dist_focus)
    if doc.distortions is not None:
        d = doc.distortions
        out["distortions"] = {"radial": vector_json(d.radial), "tangential": vector_json(d.tangential), **d.extra}
    ml: dict[str, Any] = {"f": num(doc.main_lens.f)}
    if doc.main_lens.aperture is not None:
        ml["aperture"] = num(doc.main_lens.aperture)
    if doc.main_lens.diameter is not None:
        ml["diameter"] = num(doc.main_lens.diameter)
    if doc.main_lens.pose is not None:
        ml["pose"] = _pose_json(doc.main_lens.pose)
    out["main_lens"] = ml
    if doc.mia is not None:
        out["mia"] = {"mesh": _mesh_json(doc.mia)}
    if doc.mla is not None:
        out["mla"] = {"focal_lengths": flat_json(doc.focal_lengths or ()), "mesh": _mesh_json(doc.mla), **doc.mla_extra}
    if doc.mode is not None:
        out["mode"] = num(doc.mode)
    s: dict[str, Any] = {
        "scale": num(doc.sensor.scale),
        "width": num(doc.sensor.width),
        "height": num(doc.sensor.height),
    }
    if doc.sensor.pose is not None:
        s["pose"] = _pose_json(doc.sensor.pose)
    out["sensor"] = s
    out.update(doc.extra)
    return out


def read_camera_config(path: str | Path) -> CameraConfigDoc:
    """Read a libpleno ``camera.js`` or ``intrinsics.js`` as a typed document."""
    p = Path(path)
    return config_from_json(LpFields(p, read_json(p)))


def write_camera_config(path: str | Path, doc: CameraConfigDoc) -> Path:
    """Write a ``camera.js`` / ``intrinsics.js`` (numbers as strings, column-major), atomically."""
    return write_json(path, config_to_json(doc))


# --- params.js ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ParamsDoc:
    """``params.js`` (reference §5.1); optional fields are None when absent."""

    m: float
    q: tuple[float, ...]
    dc: float
    scale: float | None = None
    q_prime: tuple[float, ...] | None = None
    dC: float | None = None
    lambda_: float | None = None
    kappa: float | None = None
    N: float | None = None
    I: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def read_params_doc(path: str | Path) -> ParamsDoc:
    """Read a libpleno ``params.js`` as a typed document."""
    p = Path(path)
    f = LpFields(p, read_json(p))
    return ParamsDoc(
        m=f.number("m"),
        q=f.flat("q"),
        dc=f.number("dc"),
        scale=f.optional_number("scale"),
        q_prime=f.flat("q_prime") if f.has("q_prime") else None,
        dC=f.optional_number("dC"),
        lambda_=f.optional_number("lambda"),
        kappa=f.optional_number("kappa"),
        N=f.optional_number("N"),
        I=f.optional_integer("I"),
        extra=_extra(f, ("m", "q", "dc", "scale", "q_prime", "dC", "lambda", "kappa", "N", "I")),
    )


def write_params_doc(path: str | Path, doc: ParamsDoc) -> Path:
    """Write a ``params.js`` (numbers as strings), atomically."""
    out: dict[str, Any] = {"m": num(doc.m)}
    if doc.scale is not None:
        out["scale"] = num(doc.scale)
    out["q"] = flat_json(doc.q)
    if doc.q_prime is not None:
        out["q_prime"] = flat_json(doc.q_prime)
    out["dc"] = num(doc.dc)
    for key, value in (("dC", doc.dC), ("lambda", doc.lambda_), ("kappa", doc.kappa), ("N", doc.N), ("I", doc.I)):
        if value is not None:
            out[key] = num(value)
    out.update(doc.extra)
    return write_json(path, out)


# --- poses.js ----------------------------------------------------------------------------
@dataclass(frozen=True)
class FramePoseDoc:
    """One ``poses.js`` entry: the camera frame in the checkerboard frame (reference §1.4)."""

    frame: int
    pose: PoseDoc


def read_poses_doc(path: str | Path) -> tuple[FramePoseDoc, ...]:
    """Read a libpleno ``poses.js`` (entries in file order)."""
    p = Path(path)
    f = LpFields(p, read_json(p))
    entries = f.raw("poses")
    if not isinstance(entries, list):
        raise InputFileError(p, f"key 'poses' must be a list, got {type(entries).__name__}")
    out = []
    seen: set[int] = set()
    for i, e in enumerate(entries):
        ef = LpFields(p, e, f"poses[{i}]")
        frame = ef.integer("frame")
        if frame in seen:
            raise InputFileError(p, f"frame {frame} appears twice (key 'poses[{i}].frame')")
        seen.add(frame)
        out.append(FramePoseDoc(frame, _pose(ef.sub("pose"), 3)))
    return tuple(out)


def write_poses_doc(path: str | Path, poses: tuple[FramePoseDoc, ...] | list[FramePoseDoc]) -> Path:
    """Write a ``poses.js``, atomically."""
    return write_json(path, {"poses": [{"frame": num(e.frame), "pose": _pose_json(e.pose)} for e in poses]})


# --- scene.js ----------------------------------------------------------------------------
@dataclass(frozen=True)
class CheckerboardDoc:
    lph: float
    x_grid: int
    y_grid: int
    pose: PoseDoc | None = None


@dataclass(frozen=True)
class SceneDoc:
    """``scene.js``: checkerboards typed; ``plates``, ``constellations`` and others kept raw."""

    checkerboards: tuple[CheckerboardDoc, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


def read_scene_doc(path: str | Path) -> SceneDoc:
    """Read a libpleno ``scene.js``."""
    p = Path(path)
    f = LpFields(p, read_json(p))
    boards = f.raw("checkerboards", [])
    if not isinstance(boards, list):
        raise InputFileError(p, f"key 'checkerboards' must be a list, got {type(boards).__name__}")
    out = []
    for i, b in enumerate(boards):
        bf = LpFields(p, b, f"checkerboards[{i}]")
        out.append(
            CheckerboardDoc(
                lph=bf.number("lph"),
                x_grid=bf.integer("x_grid"),
                y_grid=bf.integer("y_grid"),
                pose=_pose(bf.sub("pose"), 3) if bf.has("pose") else None,
            )
        )
    return SceneDoc(tuple(out), _extra(f, ("checkerboards",)))


def write_scene_doc(path: str | Path, doc: SceneDoc) -> Path:
    """Write a ``scene.js``, atomically."""
    boards = []
    for b in doc.checkerboards:
        e: dict[str, Any] = {"lph": num(b.lph), "x_grid": num(b.x_grid), "y_grid": num(b.y_grid)}
        if b.pose is not None:
            e["pose"] = _pose_json(b.pose)
        boards.append(e)
    return write_json(path, {"checkerboards": boards, **doc.extra})


# --- images.js ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ImageDoc:
    path: str
    fnumber: float | None = None
    frame: int | None = None


@dataclass(frozen=True)
class ImagesDoc:
    """``images.js``: ``meta`` (debayered, rgb, format), whites, checkerboards, mask."""

    whites: tuple[ImageDoc, ...] = ()
    checkerboards: tuple[ImageDoc, ...] = ()
    mask: ImageDoc | None = None
    debayered: bool | None = None
    rgb: bool | None = None
    bit_depth: int | None = None
    meta_extra: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


def _image(f: LpFields) -> ImageDoc:
    return ImageDoc(f.string("path"), f.optional_number("fnumber"), f.optional_integer("frame"))


def _image_json(e: ImageDoc) -> dict[str, Any]:
    out: dict[str, Any] = {"path": e.path}
    if e.fnumber is not None:
        out["fnumber"] = num(e.fnumber)
    if e.frame is not None:
        out["frame"] = num(e.frame)
    return out


def read_images_doc(path: str | Path) -> ImagesDoc:
    """Read a libpleno ``images.js``. Unknown ``meta`` keys (e.g. the libpleno example's
    misspelt ``debayer``) are kept in ``meta_extra`` and ignored, as libpleno does."""
    p = Path(path)
    f = LpFields(p, read_json(p))
    lists = {}
    for key in ("whites", "checkerboards"):
        items = f.raw(key, [])
        if not isinstance(items, list):
            raise InputFileError(p, f"key '{key}' must be a list, got {type(items).__name__}")
        lists[key] = tuple(_image(LpFields(p, e, f"{key}[{i}]")) for i, e in enumerate(items))
    meta = f.sub("meta") if f.has("meta") else None
    return ImagesDoc(
        whites=lists["whites"],
        checkerboards=lists["checkerboards"],
        mask=_image(f.sub("mask")) if f.has("mask") else None,
        debayered=meta.boolean("debayered") if meta else None,
        rgb=meta.boolean("rgb") if meta else None,
        bit_depth=meta.optional_integer("format") if meta else None,
        meta_extra=_extra(meta, ("debayered", "rgb", "format")) if meta else {},
        extra=_extra(f, ("meta", "whites", "checkerboards", "mask")),
    )


def write_images_doc(path: str | Path, doc: ImagesDoc) -> Path:
    """Write an ``images.js``, atomically (booleans as ``"true"``/``"false"`` strings)."""
    meta: dict[str, Any] = {}
    if doc.debayered is not None:
        meta["debayered"] = "true" if doc.debayered else "false"
    if doc.rgb is not None:
        meta["rgb"] = "true" if doc.rgb else "false"
    if doc.bit_depth is not None:
        meta["format"] = num(doc.bit_depth)
    meta.update(doc.meta_extra)
    out: dict[str, Any] = {}
    if meta:
        out["meta"] = meta
    out["whites"] = [_image_json(e) for e in doc.whites]
    out["checkerboards"] = [_image_json(e) for e in doc.checkerboards]
    if doc.mask is not None:
        out["mask"] = _image_json(doc.mask)
    out.update(doc.extra)
    return write_json(path, out)
