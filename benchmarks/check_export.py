"""plenocal export-libpleno against the reference's own files. Prints JSON.

Usage::

    python benchmarks/check_export.py [--shared DIR] [--out FILE]

Four checks (``--shared`` is the folder with ``fixtures/`` and ``validation/``, default ``../shared``):

- ``r12a_legacy_round_trip``: libpleno's R12-A ``intrinsics.js``, ``params.js``, ``poses.js``
  (legacy generation, ``fixtures/libpleno-r12a-configs``) through ``plenocal import-libpleno`` and
  ``plenocal export-libpleno --generation legacy``: every number of the originals against the
  export (largest relative difference), keys only in one of them, and the values that differ for a
  stated reason;
- ``prism_r12b_head``: ``plenocal export-libpleno --generation head`` of the PRISM r12-b truth camera
  (``validation/prism-r12b/camera/camera-true.json``) against the file PRISM rendered with
  (``scene/camera-prism-r12b-N4.js``), field by field; ``distortions_inverse`` also refitted over
  the rectangle ``prism-build/invdist.py`` used, and both inverses compared as maps;
- ``rho``: max |Δρ| between each plenocal ρ form and libpleno HEAD's per-lens ρ
  (:func:`plenocal.io.libpleno.head.blur_radius_px` on the exported files) over points at 400–900 mm
  across the field and every micro-image that sees them, for the r12-b preset at the paper's full
  MLA tilt and at the preset's default (1 %) tilt; and a ``--rho-form head`` camera's ρ through
  export → files → import;
- ``r12b_default_preset``: the default ``r12-b`` preset (176 × 153 lattice) exports; every lens and
  micro-image centre of plenocal's camera against libpleno's reading of the written file, and where
  the added row's micro-images lie.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from plenocal.cli.main import main as plenocal_main  # noqa: E402
from plenocal.io import read_camera_file, write_camera  # noqa: E402
from plenocal.io.libpleno import camera_from_intrinsics, read_camera_config, read_params  # noqa: E402
from plenocal.io.libpleno.head import blur_radius_px, lens_centres, mesh_nodes  # noqa: E402
from plenocal.io.libpleno.inverse_distortion import fit_inverse_distortion, image_space_footprint  # noqa: E402
from plenocal.model.camera import Distortion, PlenopticCamera, RhoForm  # noqa: E402
from plenocal.model.projection import micro_image_centres, micro_lens_centres, project_bap, virtual_points  # noqa: E402
from plenocal.sim import preset  # noqa: E402

PRISM_FIT_BOX = ((-12.6, 11.6), (-7.9, 10.9))
"""The rectangle ``prism-build/invdist.py`` fitted the PRISM r12-b ``distortions_inverse`` over (prism-build.md)."""


def run_cli(*args: str) -> tuple[int, str]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        rc = plenocal_main(list(args))
    return rc, buf.getvalue().strip()


# --- JSON tree comparison ------------------------------------------------------------------
def _number(x: Any) -> float | None:
    if isinstance(x, bool):
        return None
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def compare_trees(ours: Any, theirs: Any, where: str = "") -> dict[str, Any]:
    """Leaves of two libpleno JSON trees: numbers compared as numbers.

    ``rel`` is |ours − theirs| / |theirs|, except for rotation-matrix entries, whose difference is
    relative to 1 (the norm of a column): an off-diagonal entry of 3e-5 rebuilt from Euler angles
    differs from the file's in its last digits relative to itself, not relative to the rotation.
    """
    out: dict[str, Any] = {"only_ours": [], "only_theirs": [], "different": [], "numbers": 0, "max_rel": 0.0}

    def walk(a: Any, b: Any, path: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b)):
                p = f"{path}.{k}" if path else k
                if k not in b:
                    out["only_ours"].append(p)
                elif k not in a:
                    out["only_theirs"].append(p)
                else:
                    walk(a[k], b[k], p)
            return
        if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                walk(x, y, f"{path}[{i}]")
            return
        x, y = _number(a), _number(b)
        if x is None or y is None:
            if a != b:
                out["different"].append({"key": path, "ours": a, "theirs": b})
            return
        out["numbers"] += 1
        scale = 1.0 if "rotation" in path else abs(y)
        rel = abs(x - y) / max(scale, 1e-300) if x != y else 0.0
        out["max_rel"] = max(out["max_rel"], rel)
        if rel > 1e-15:
            out["different"].append({"key": path, "ours": a, "theirs": b, "rel": rel})

    walk(ours, theirs, where)
    return out


def pose_differences(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    """Poses read (inverted to cam_from_world) and written back (inverted again): the rotation
    entries' largest difference, and the translations' relative to their norm (a component much
    smaller than the vector keeps the rounding of the whole vector)."""
    if sorted(ours) != sorted(theirs):
        return {"frames_only_in_export": sorted(set(ours) - set(theirs)), "frames_only_in_original": sorted(set(theirs) - set(ours))}
    rot = trans = 0.0
    for f in ours:
        ra, rb = (np.array(p["rotation"], dtype=float) for p in (ours[f], theirs[f]))
        ta, tb = (np.array(p["translation"], dtype=float).ravel() for p in (ours[f], theirs[f]))
        rot = max(rot, float(np.abs(ra - rb).max()))
        trans = max(trans, float(np.abs(ta - tb).max() / np.linalg.norm(tb)))
    return {"frames": len(ours), "max_rotation_entry_difference": rot, "max_translation_difference_rel_to_norm": trans}


# --- 1. R12-A legacy round trip ---------------------------------------------------------------
R12A_EXPLAINED = {
    "intrinsics.js.mode": "the file's '1' comes from code older than Dec 2020 (F < D read as Keplerian); the Dec-2020 "
    "and HEAD code write Galilean (2) for f_0 > d, as plenocal does; libpleno ignores it on load (reference §10.2)",
    "params.js.lambda": "the file's '0.9931' is stale (reference §5.1): plenocal writes λ = dC/dc, the value "
    "libpleno's init() sets and its dC field already holds",
}


def r12a_legacy_round_trip(configs: Path, work: Path) -> dict[str, Any]:
    ds, out = work / "r12a-ds", work / "r12a-out"
    rc, log = run_cli("import-libpleno", str(configs), "-o", str(ds))
    if rc != 0:
        return {"error": log}
    rc, log = run_cli(
        "export-libpleno", str(ds / "camera.json"), "-o", str(out), "--generation", "legacy", "--poses", str(ds / "poses.json")
    )
    if rc != 0:
        return {"error": log}
    result: dict[str, Any] = {"export_log": log.splitlines()}
    worst = 0.0
    for name in ("intrinsics.js", "params.js", "poses.js"):
        ours, theirs = json.loads((out / name).read_text()), json.loads((configs / name).read_text())
        if name == "poses.js":  # libpleno lists frames in its own order, plenocal sorted: compare by frame
            ours, theirs = ({str(int(e["frame"])): e["pose"] for e in d["poses"]} for d in (ours, theirs))
            result["poses.js frames"] = pose_differences(ours, theirs)
        cmp = compare_trees(ours, theirs)
        explained, unexplained = [], []
        for d in cmp["different"]:
            key = f"{name}.{d['key']}"
            (explained if key in R12A_EXPLAINED else unexplained).append({**d, "why": R12A_EXPLAINED.get(key)})
        worst = max(worst, max((d.get("rel", 0.0) for d in unexplained), default=0.0))
        result[name] = {
            "numbers_compared": cmp["numbers"],
            "max_rel_difference_unexplained": max((d.get("rel", 0.0) for d in unexplained), default=0.0),
            "explained_differences": explained,
            "unexplained_differences": unexplained,
            "keys_only_in_export": cmp["only_ours"],
            "keys_only_in_original": cmp["only_theirs"],
        }
    result["max_rel_difference_unexplained"] = worst
    return result


# --- 2. PRISM r12-b HEAD export ---------------------------------------------------------------
HEAD_ONLY_OURS = {"D", "d", "pp", "Rxyz", "focal_planes", "scaling", "plenocal_rho_form"}


def _as_distortion(block: dict[str, Any]) -> Distortion:
    (q1, q2, q3), (p1, p2) = (float(x) for x in block["radial"][0]), (float(x) for x in block["tangential"][0])
    return Distortion(q1, q2, q3, p1, p2)


def _map_difference_um(a: Distortion, b: Distortion, x_range: tuple[float, float], y_range: tuple[float, float]) -> float:
    xs, ys = np.meshgrid(np.linspace(*x_range, 200), np.linspace(*y_range, 200))
    ax, ay = a.apply(xs, ys)
    bx, by = b.apply(xs, ys)
    return float(np.hypot(ax - bx, ay - by).max() * 1e3)


def _inverse_error_um(forward: Distortion, inverse: Distortion, x_range: tuple[float, float], y_range: tuple[float, float]) -> dict[str, float]:
    xs, ys = np.meshgrid(np.linspace(*x_range, 400), np.linspace(*y_range, 400))
    qx, qy = forward.apply(xs, ys)
    ex, ey = inverse.apply(qx, qy)
    err = np.hypot(ex - xs, ey - ys)
    return {"max_um": float(err.max() * 1e3), "rms_um": float(np.sqrt(np.mean(err**2)) * 1e3)}


def prism_r12b_head(truth_camera: Path, prism_file: Path, work: Path) -> dict[str, Any]:
    out = work / "prism-head"
    rc, log = run_cli("export-libpleno", str(truth_camera), "-o", str(out), "--generation", "head")
    if rc != 0:
        return {"error": log}
    ours = json.loads((out / "intrinsics.js").read_text())
    theirs = json.loads(prism_file.read_text())
    cmp = compare_trees(ours, theirs)
    inv_keys = [d for d in cmp["different"] if d["key"].startswith("distortions_inverse")]
    other = [d for d in cmp["different"] if not d["key"].startswith("distortions_inverse")]
    camera = read_camera_file(truth_camera).camera
    forward = camera.distortion
    ours_inv, theirs_inv = _as_distortion(ours["distortions_inverse"]), _as_distortion(theirs["distortions_inverse"])
    footprint = image_space_footprint(camera)
    refit = fit_inverse_distortion(forward, x_range_mm=PRISM_FIT_BOX[0], y_range_mm=PRISM_FIT_BOX[1])
    refit_rel = max(
        abs(a - b) / abs(b)
        for a, b in zip(
            (refit.inverse.q1, refit.inverse.q2, refit.inverse.q3, refit.inverse.p1, refit.inverse.p2),
            (theirs_inv.q1, theirs_inv.q2, theirs_inv.q3, theirs_inv.p1, theirs_inv.p2),
            strict=True,
        )
    )
    return {
        "export_log": log.splitlines(),
        "numbers_compared": cmp["numbers"],
        "max_rel_difference_outside_distortions_inverse": max((d.get("rel", 0.0) for d in other), default=0.0),
        "different_outside_distortions_inverse": other,
        "keys_only_in_export": cmp["only_ours"],
        "keys_only_in_export_unexpected": [k for k in cmp["only_ours"] if k not in HEAD_ONLY_OURS],
        "keys_only_in_prism_file": cmp["only_theirs"],
        "why_keys_only_in_export": "HEAD's save() writes D, d, pp, Rxyz, focal_planes and scaling (reference §10.2), "
        "which libpleno ignores on load; the PRISM file was plenocal's legacy export plus distortions_inverse and the "
        "depth-distortion fields. plenocal_rho_form is plenocal's (also ignored by libpleno).",
        "distortions_inverse": {
            "coefficients_ours": [ours_inv.q1, ours_inv.q2, ours_inv.q3, ours_inv.p1, ours_inv.p2],
            "coefficients_prism": [theirs_inv.q1, theirs_inv.q2, theirs_inv.q3, theirs_inv.p1, theirs_inv.p2],
            "max_rel_coefficient_difference": max((d.get("rel", 0.0) for d in inv_keys), default=0.0),
            "why": "different fit rectangles: plenocal fits over the sensor's image-space footprint at the micro-lens "
            "types' focus planes, where PRISM applies the inverse (x, y below); prism-build/invdist.py over a hand-set "
            "rectangle about 0.6 mm larger on every side",
            "plenocal_footprint_mm": {"x": footprint[0], "y": footprint[1]},
            "prism_rectangle_mm": {"x": PRISM_FIT_BOX[0], "y": PRISM_FIT_BOX[1]},
            "max_map_difference_over_footprint_um": _map_difference_um(ours_inv, theirs_inv, *footprint),
            "inverse_of_forward_over_footprint": {"ours": _inverse_error_um(forward, ours_inv, *footprint),
                                                   "prism": _inverse_error_um(forward, theirs_inv, *footprint)},
            "inverse_of_forward_over_prism_rectangle": {"ours": _inverse_error_um(forward, ours_inv, *PRISM_FIT_BOX),
                                                         "prism": _inverse_error_um(forward, theirs_inv, *PRISM_FIT_BOX)},
            "refit_over_prism_rectangle_max_rel_coefficient_difference": refit_rel,
        },
    }


# --- 3. rho -------------------------------------------------------------------------------
def scene_points(camera: PlenopticCamera, depths_mm: tuple[float, ...], n: int = 9) -> np.ndarray:
    """Points at the given distances whose central projection spans the sensor (10 % margin), (N, 3)."""
    s, (u0, v0) = camera.sensor.pixel_size_mm, camera.sensor.principal_point_px
    W, H = camera.sensor.width_px, camera.sensor.height_px
    u, v = np.meshgrid(np.linspace(0.1 * W, 0.9 * W, n), np.linspace(0.1 * H, 0.9 * H, n))
    # pixel (u, v) <- sensor X = (u0 − u)s at z = −(D + d); the object on that ray through O
    X, Y = (u0 - u.ravel()) * s, (v0 - v.ravel()) * s
    zs = camera.sensor.distance_mm
    pts = [np.stack([-X * z / zs, -Y * z / zs, np.full(X.shape, z)], axis=1) for z in depths_mm]
    return np.concatenate(pts)


def seen_by(camera: PlenopticCamera, points: np.ndarray, *, reach: int = 8, border_px: float = 1.5) -> tuple[np.ndarray, ...]:
    """(point index, k, l) of every micro-image that sees each point: projection within the
    micro-image radius less ``border_px`` (reference §4 validity) and on the sensor."""
    pu = virtual_points(camera, points)
    zs = camera.sensor.distance_mm
    s, (u0, v0) = camera.sensor.pixel_size_mm, camera.sensor.principal_point_px
    # centre of the micro-images that see p_u: its central projection from O onto the sensor
    u = u0 - pu[:, 0] * (-zs / pu[:, 2]) / s
    v = v0 - pu[:, 1] * (-zs / pu[:, 2]) / s
    k0, l0 = camera.grid.nearest(u, v)
    dk, dl = np.meshgrid(np.arange(-reach, reach + 1), np.arange(-reach, reach + 1))
    idx = np.repeat(np.arange(len(points)), dk.size)
    k = (k0[:, None] + dk.ravel()[None]).ravel()
    l = (l0[:, None] + dl.ravel()[None]).ravel()
    ok = camera.mla.lattice.contains(k, l)
    idx, k, l = idx[ok], k[ok], l[ok]
    uvr = project_bap(camera, points[idx], k, l)
    c = micro_image_centres(camera, k, l)
    radius = camera.grid.diameter_px / 2.0
    W, H = camera.sensor.width_px, camera.sensor.height_px
    inside = np.hypot(uvr[:, 0] - c[:, 0], uvr[:, 1] - c[:, 1]) <= radius - border_px
    inside &= (uvr[:, 0] >= 0) & (uvr[:, 1] >= 0) & (uvr[:, 0] < W) & (uvr[:, 1] < H)
    return idx[inside], k[inside], l[inside]


def rho_differences(camera: PlenopticCamera, work: Path, label: str) -> dict[str, Any]:
    """plenocal's ρ in each form against libpleno HEAD's on the exported files."""
    cam_path = write_camera(work / f"{label}.json", camera)
    out = work / f"{label}-head"
    rc, log = run_cli("export-libpleno", str(cam_path), "-o", str(out))
    if rc != 0:
        return {"error": log}
    doc = read_camera_config(out / "intrinsics.js")
    dc = read_params(out / "params.js").micro_image_pitch_mm
    points = scene_points(camera, (400.0, 500.0, 650.0, 775.0, 900.0))
    idx, k, l = seen_by(camera, points)
    lib = blur_radius_px(doc, dc, points[idx], k, l)
    result: dict[str, Any] = {
        "mla_tilt_xy_rad": list(camera.mla.rotation_xyz_rad[:2]),
        "points": len(points),
        "observations": len(idx),
        "libpleno_head_abs_rho_px": [float(np.abs(lib).min()), float(np.abs(lib).max())],
        "forms": {},
    }
    for form in RhoForm:
        ours = project_bap(camera.replace(rho_form=form), points[idx], k, l)[:, 2]
        diff = ours - lib
        result["forms"][form.value] = {
            "max_abs_delta_rho_px": float(np.abs(diff).max()),
            "rms_delta_rho_px": float(np.sqrt(np.mean(diff**2))),
            "mean_delta_rho_px": float(diff.mean()),
        }
    return result


def rho_head_round_trip(camera: PlenopticCamera, work: Path) -> dict[str, Any]:
    """A ``--rho-form head`` camera's ρ through export → libpleno files → import."""
    cam = camera.replace(rho_form=RhoForm.HEAD)
    out = work / "head-form"
    cam_path = write_camera(work / "head-form.json", cam)
    rc, log = run_cli("export-libpleno", str(cam_path), "-o", str(out))
    if rc != 0:
        return {"error": log}
    back = camera_from_intrinsics(out / "intrinsics.js")
    points = scene_points(cam, (400.0, 650.0, 900.0))
    idx, k, l = seen_by(cam, points)
    a = project_bap(cam, points[idx], k, l)
    b = project_bap(back, points[idx], k, l)
    return {
        "imported_rho_form": back.rho_form.value,
        "observations": len(idx),
        "max_abs_delta_rho_px": float(np.abs(a[:, 2] - b[:, 2]).max()),
        "max_abs_delta_uv_px": float(np.abs(a[:, :2] - b[:, :2]).max()),
    }


# --- 4. default r12-b preset ------------------------------------------------------------------
def r12b_default_preset(work: Path) -> dict[str, Any]:
    camera = preset("r12-b").camera
    cam_path = write_camera(work / "r12b-default.json", camera)
    out = work / "r12b-default-head"
    rc, log = run_cli("export-libpleno", str(cam_path), "-o", str(out))
    if rc != 0:
        return {"error": log}
    doc = read_camera_config(out / "intrinsics.js")
    assert doc.mla is not None and doc.mia is not None and doc.mia.pose is not None
    k, l = camera.mla.lattice.all_indices()
    W, H = doc.mla.width, doc.mla.height
    lens = np.abs(micro_lens_centres(camera, k, l) - lens_centres(doc, W - 1 - k, H - 1 - l)).max()
    x, y = mesh_nodes(doc.mia, k, l)
    R, t = np.asarray(doc.mia.pose.rotation), np.asarray(doc.mia.pose.translation)
    mia = np.abs(np.stack([x, y], axis=1) @ R.T + t - camera.grid.centres(k, l)).max()
    added = np.arange(doc.mla.width)
    gx, gy = mesh_nodes(doc.mia, added, np.full(added.shape, H - 1))
    added_v = (np.stack([gx, gy], axis=1) @ R.T + t)[:, 1]
    radius = camera.grid.diameter_px / 2.0
    back = camera_from_intrinsics(out / "intrinsics.js")
    return {
        "plenocal_lattice": [camera.mla.lattice.width, camera.mla.lattice.height],
        "libpleno_lattice": [W, H],
        "export_log": log.splitlines(),
        "max_lens_centre_difference_mm": float(lens),
        "max_micro_image_centre_difference_px": float(mia),
        "last_plenocal_row_centre_v_px": float(camera.grid.centres(k[l == l.max()], l[l == l.max()])[:, 1].max()),
        "added_row_nearest_micro_image_edge_v_px": float(added_v.min() - radius),
        "sensor_last_pixel_edge_v_px": camera.sensor.height_px - 0.5,
        "imported_lattice": [back.mla.lattice.width, back.mla.lattice.height],
        "imported_equals_exported_camera": bool(
            back.mla.lattice == camera.mla.lattice
            and np.allclose(back.mla.translation_mm, camera.mla.translation_mm, rtol=0, atol=1e-12)
        ),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = ap.parse_args()
    shared: Path = args.shared
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        full = preset("r12-b", tilt_scale=1.0).camera
        result = {
            "r12a_legacy_round_trip": r12a_legacy_round_trip(shared / "fixtures" / "libpleno-r12a-configs", work),
            "prism_r12b_head": prism_r12b_head(
                shared / "validation" / "prism-r12b" / "camera" / "camera-true.json",
                shared / "validation" / "prism-r12b" / "scene" / "camera-prism-r12b-N4.js",
                work,
            ),
            "rho": {
                "r12b_full_tilt": rho_differences(full, work, "r12b-full"),
                "r12b_default_tilt": rho_differences(preset("r12-b").camera, work, "r12b-default-rho"),
                "head_form_round_trip": rho_head_round_trip(full, work),
            },
            "r12b_default_preset": r12b_default_preset(work),
        }
    text = json.dumps(result, indent=2, default=float)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
