"""plenocal's ``camera.json`` <-> :class:`~plenocal.model.PlenopticCamera` (``docs/formats.md``).

The file may also carry the internal parameters Ω (:class:`~plenocal.model.white.InternalParameters`),
and calibration outputs may add ``uncertainty`` and ``provenance`` objects, passed through as-is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from plenocal.errors import InputFileError, ModelError
from plenocal.io._json import Fields, floats, read_document, write_document
from plenocal.io.limits import (
    MAX_F_NUMBER,
    MAX_FOCAL_LENGTH_MM,
    MAX_LATTICE_SIDE,
    MAX_LENGTH_MM,
    MAX_PIXEL_SIZE_MM,
    MAX_SENSOR_SIDE_PX,
    MIN_F_NUMBER,
)
from plenocal.model.camera import (
    Configuration,
    Distortion,
    MainLens,
    MicroImageGrid,
    MicroLensArray,
    PlenopticCamera,
    RhoForm,
    Sensor,
)
from plenocal.model.lattice import Lattice, LatticeKind, TypeLayout
from plenocal.model.white import InternalParameters, LensletFieldTrend, RadiusLawField

CAMERA_FORMAT = "plenocal-camera"
OMEGA_FORMAT = "plenocal-internal-parameters"
_KINDS = tuple(k.value for k in LatticeKind)
_CONFIGURATIONS = tuple(c.value for c in Configuration)


@dataclass(frozen=True, eq=True)
class CameraFile:
    """Everything a ``camera.json`` holds.

    Attributes
    ----------
    camera : PlenopticCamera
    internal_parameters : InternalParameters or None
        Ω, when the file has ``internal_parameters``.
    uncertainty, provenance : dict or None
        Passed through unchanged (calibration outputs).
    model_field : dict or None
        Where the calibrated model describes the lens (:mod:`plenocal.evaluate.field`), passed
        through; its ``radius_mm`` (mm on the sensor about the principal point, None: no limit)
        is checked on reading and given as ``field_radius_mm``.
    """

    camera: PlenopticCamera
    internal_parameters: InternalParameters | None = None
    uncertainty: dict[str, Any] | None = None
    provenance: dict[str, Any] | None = None
    model_field: dict[str, Any] | None = None

    @property
    def field_radius_mm(self) -> float | None:
        r = None if self.model_field is None else self.model_field.get("radius_mm")
        return None if r is None else float(r)


# --- lattice and Ω as JSON ---------------------------------------------------------------
def lattice_to_json(lattice: Lattice) -> dict[str, Any]:
    return {"kind": lattice.kind.value, "width": lattice.width, "height": lattice.height}


def lattice_from_json(f: Fields) -> Lattice:
    return Lattice(
        LatticeKind(f.string("kind", choices=_KINDS)),
        f.integer("width", minimum=1, maximum=MAX_LATTICE_SIDE),
        f.integer("height", minimum=1, maximum=MAX_LATTICE_SIDE),
    )


def omega_to_json(omega: InternalParameters) -> dict[str, Any]:
    """Ω as a JSON object (``q_prime_mm`` is informational, ignored on read)."""
    return {
        "m_mm": float(omega.m_mm),
        "q_mm": floats(omega.q_mm),
        "q_prime_mm": floats(omega.q_prime_mm),
        "micro_image_pitch_mm": float(omega.micro_image_pitch_mm),
        "lambda": float(omega.lambda_),
        "kappa": float(omega.kappa),
        "f_number": float(omega.f_number),
        "pixel_size_mm": float(omega.pixel_size_mm),
        "unblurred_weight": float(omega.unblurred_weight),
        **({"field": {
            "reference_uv_px": floats(omega.field.reference_uv_px),
            "m_gradient_mm_per_px": floats(omega.field.m_gradient_mm_per_px),
            "q_gradient_mm_per_px": [floats(g) for g in omega.field.q_gradient_mm_per_px],
        }} if omega.field is not None else {}),
        **({"lenslet_trend": {
            "radius_mm": float(omega.lenslet_trend.radius_mm),
            "relative_change": floats(omega.lenslet_trend.relative_change),
            "std": floats(omega.lenslet_trend.std),
            "reach_mm": float(omega.lenslet_trend.reach_mm),
        }} if omega.lenslet_trend is not None else {}),
    }


def _field_from_json(f: Fields, n_types: int) -> RadiusLawField:
    ref = f.numbers("reference_uv_px", 2)
    mg = f.numbers("m_gradient_mm_per_px", 2)
    qg = f.matrix("q_gradient_mm_per_px", (n_types, 2)) if n_types else np.zeros((0, 2))
    if not np.all(np.isfinite(qg)):
        raise f.error("q_gradient_mm_per_px", "must hold finite numbers")
    return RadiusLawField((ref[0], ref[1]), (mg[0], mg[1]), tuple((float(a), float(b)) for a, b in qg))


def _trend_from_json(f: Fields, n_types: int) -> LensletFieldTrend:
    change = f.numbers("relative_change", n_types)
    std = f.numbers("std", n_types, positive=True)
    return LensletFieldTrend(f.number("radius_mm", positive=True), tuple(change), tuple(std), f.number("reach_mm", minimum=0.0))


def _fraction(f: Fields, name: str) -> float:
    w = f.number(name, 0.0)
    if not 0.0 <= w < 1.0:
        raise f.error(name, f"must be in [0, 1), got {w!r}")
    return w


def omega_from_json(f: Fields) -> InternalParameters:
    q_mm = f.numbers("q_mm")
    return InternalParameters(
        m_mm=f.number("m_mm"),
        q_mm=q_mm,
        micro_image_pitch_mm=f.number("micro_image_pitch_mm", positive=True),
        lambda_=f.number("lambda", positive=True),
        f_number=f.number("f_number", minimum=MIN_F_NUMBER, maximum=MAX_F_NUMBER),
        kappa=f.number("kappa", positive=True),
        pixel_size_mm=f.number("pixel_size_mm", positive=True),
        field=_field_from_json(f.sub("field"), len(q_mm)) if f.has("field") else None,
        unblurred_weight=_fraction(f, "unblurred_weight"),
        lenslet_trend=_trend_from_json(f.sub("lenslet_trend"), len(q_mm)) if f.has("lenslet_trend") and q_mm else None,
    )


# --- camera.json -------------------------------------------------------------------------
def camera_to_json(
    camera: PlenopticCamera,
    *,
    internal_parameters: InternalParameters | None = None,
    uncertainty: dict[str, Any] | None = None,
    provenance: dict[str, Any] | None = None,
    model_field: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``camera.json`` document of a camera (a JSON-ready dict)."""
    mla, sensor, mia, dist = camera.mla, camera.sensor, camera.grid, camera.distortion
    h = camera.focus_distance_mm
    doc: dict[str, Any] = {
        "format": CAMERA_FORMAT,
        "version": 1,
        "configuration": camera.configuration.value,
        "rho_form": camera.rho_form.value,
        "focus_distance_mm": None if math.isinf(h) else float(h),
        "main_lens": {
            "focal_length_mm": float(camera.main_lens.focal_length_mm),
            "f_number": float(camera.main_lens.f_number),
            "exit_pupil_mm": float(camera.main_lens.exit_pupil_mm),
        },
        "distortion": {"q1": dist.q1, "q2": dist.q2, "q3": dist.q3, "p1": dist.p1, "p2": dist.p2,
                       "z1": dist.z1, "z2": dist.z2},
        "mla": {
            "lattice": lattice_to_json(mla.lattice),
            "pitch_mm": floats(mla.pitch_mm),
            "rotation_xyz_rad": floats(mla.rotation_xyz_rad),
            "translation_mm": floats(mla.translation_mm),
            "focal_lengths_mm": floats(mla.focal_lengths_mm),
            "type_row_shift": [int(x) for x in mla.types.row_shift],
        },
        "sensor": {
            "pixel_size_mm": float(sensor.pixel_size_mm),
            "width_px": int(sensor.width_px),
            "height_px": int(sensor.height_px),
            "principal_point_px": floats(sensor.principal_point_px),
            "distance_mm": float(sensor.distance_mm),
        },
        "mia": {
            "pitch_px": floats(mia.pitch_px),
            "rotation_rad": float(mia.rotation_rad),
            "offset_px": floats(mia.offset_px),
        },
        "derived": {"D_mm": camera.D_mm, "d_mm": camera.d_mm, "lambda": camera.lambda_},
    }
    if internal_parameters is not None:
        doc["internal_parameters"] = omega_to_json(internal_parameters)
    if uncertainty is not None:
        doc["uncertainty"] = uncertainty
    if provenance is not None:
        doc["provenance"] = provenance
    if model_field is not None:
        doc["model_field"] = model_field
    return doc


def camera_from_json(f: Fields) -> CameraFile:
    """Parse a ``camera.json`` document (``f`` at its top level)."""
    try:
        ml = f.sub("main_lens")
        ds = f.sub("distortion") if f.has("distortion") else None
        m = f.sub("mla")
        lattice = lattice_from_json(m.sub("lattice"))
        focal = m.numbers("focal_lengths_mm", maximum_abs=MAX_LENGTH_MM)
        row_shift = m.integers("type_row_shift", default=(0,))
        mla = MicroLensArray(
            lattice=lattice,
            pitch_mm=m.numbers("pitch_mm", 2, maximum_abs=MAX_LENGTH_MM),  # type: ignore[arg-type]
            rotation_xyz_rad=m.numbers("rotation_xyz_rad", 3, maximum_abs=2 * math.pi),  # type: ignore[arg-type]
            translation_mm=m.numbers("translation_mm", 3, maximum_abs=MAX_LENGTH_MM),  # type: ignore[arg-type]
            focal_lengths_mm=focal,
            types=TypeLayout(len(focal), row_shift),
        )
        s = f.sub("sensor")
        sensor = Sensor(
            s.number("pixel_size_mm", positive=True, maximum=MAX_PIXEL_SIZE_MM),
            s.integer("width_px", minimum=1, maximum=MAX_SENSOR_SIDE_PX),
            s.integer("height_px", minimum=1, maximum=MAX_SENSOR_SIDE_PX),
            s.numbers("principal_point_px", 2, maximum_abs=10 * MAX_SENSOR_SIDE_PX),  # type: ignore[arg-type]
            s.number("distance_mm", positive=True, maximum=MAX_LENGTH_MM),
        )
        mia = None
        if f.has("mia"):
            g = f.sub("mia")
            mia = MicroImageGrid(
                lattice,
                g.numbers("pitch_px", 2, positive=True, maximum_abs=MAX_SENSOR_SIDE_PX),  # type: ignore[arg-type]
                g.number("rotation_rad", minimum=-2 * math.pi, maximum=2 * math.pi),
                g.numbers("offset_px", 2, maximum_abs=10 * MAX_SENSOR_SIDE_PX),  # type: ignore[arg-type]
            )
        distortion = Distortion(*(ds.number(k, 0.0) if ds is not None else 0.0
                                  for k in ("q1", "q2", "q3", "p1", "p2", "z1", "z2")))
        h = None if f.raw("focus_distance_mm", None) is None else f.number(
            "focus_distance_mm", positive=True, maximum=MAX_LENGTH_MM)
        focal_length = ml.number("focal_length_mm", positive=True, maximum=MAX_FOCAL_LENGTH_MM)
        if h is not None and h <= focal_length:
            raise f.error("focus_distance_mm", f"must be beyond the focal length {focal_length:g} mm "
                                               f"(a lens cannot focus nearer), got {h:g}")
        camera = PlenopticCamera(
            main_lens=MainLens(focal_length, ml.number("f_number", minimum=MIN_F_NUMBER, maximum=MAX_F_NUMBER),
                               ml.number("exit_pupil_mm", 0.0, minimum=-MAX_LENGTH_MM, maximum=focal_length)),
            distortion=distortion,
            mla=mla,
            sensor=sensor,
            mia=mia,
            configuration=Configuration(f.string("configuration", choices=_CONFIGURATIONS)),
            focus_distance_mm=math.inf if h is None else h,
            # Files written before the ρ forms existed used the legacy form.
            rho_form=RhoForm(f.string("rho_form", RhoForm.LEGACY.value, choices=tuple(r.value for r in RhoForm))),
        )
        omega = omega_from_json(f.sub("internal_parameters")) if f.has("internal_parameters") else None
        model_field = None
        if f.has("model_field"):
            mf = f.sub("model_field")
            if mf.raw("radius_mm", None) is not None:
                mf.number("radius_mm", positive=True, maximum=MAX_LENGTH_MM)
            model_field = f.dict_or_none("model_field")
    except ModelError as exc:
        raise InputFileError(f.path, str(exc)) from None
    return CameraFile(camera, omega, f.dict_or_none("uncertainty"), f.dict_or_none("provenance"), model_field)


def read_camera_file(path: str | Path) -> CameraFile:
    """Read a plenocal ``camera.json`` with its optional Ω, uncertainty and provenance.

    Raises
    ------
    InputFileError
        One line naming the file and the bad key (missing, wrong type, non-physical value).
    """
    return camera_from_json(read_document(path, CAMERA_FORMAT))


def read_camera(path: str | Path) -> PlenopticCamera:
    """Read the camera of a plenocal ``camera.json``."""
    return read_camera_file(path).camera


def write_camera(
    path: str | Path,
    camera: PlenopticCamera,
    *,
    internal_parameters: InternalParameters | None = None,
    uncertainty: dict[str, Any] | None = None,
    provenance: dict[str, Any] | None = None,
    model_field: dict[str, Any] | None = None,
) -> Path:
    """Write a camera (and optional Ω, uncertainty, provenance, model field) as ``camera.json``, atomically.

    Floats are written with ``repr`` precision: reading the file back gives an equal camera.
    """
    return write_document(
        path,
        camera_to_json(camera, internal_parameters=internal_parameters, uncertainty=uncertainty, provenance=provenance,
                       model_field=model_field),
    )


def read_internal_parameters(path: str | Path) -> InternalParameters:
    """Read Ω from an ``internal_parameters.json`` (format ``plenocal-internal-parameters``)."""
    f = read_document(path, OMEGA_FORMAT)
    return omega_from_json(f.sub("internal_parameters"))


def write_internal_parameters(path: str | Path, omega: InternalParameters) -> Path:
    """Write Ω alone as ``internal_parameters.json``, atomically."""
    return write_document(path, {"format": OMEGA_FORMAT, "version": 1, "internal_parameters": omega_to_json(omega)})


__all__ = [
    "CameraFile",
    "camera_from_json",
    "camera_to_json",
    "read_camera",
    "read_camera_file",
    "read_internal_parameters",
    "write_camera",
    "write_internal_parameters",
]
