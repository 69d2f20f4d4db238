"""libpleno HEAD interop: HEAD's saved fields, ρ forms through export → files → import and against
libpleno's own ρ, the legacy layout left as it was, and ``plenocal export-libpleno``.

``distortions_inverse`` is tested in ``test_io_libpleno_inverse_distortion.py``, the lattice parity
padding (the default r12-b preset's 153 rows) in ``test_io_libpleno_parity.py``."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from plenocal.cli.main import main
from plenocal.io import libpleno as lp
from plenocal.io import write_camera
from plenocal.io.libpleno.convert import Generation
from plenocal.io.libpleno.head import (
    blur_radius_px,
    eigen_euler_xyz,
    focal_planes,
    head_fields,
    head_mode,
    lens_distances,
)
from plenocal.model import back_project_bap, project_bap
from plenocal.model.camera import Configuration, RhoForm
from plenocal.model.geometry import matrix_from_euler_xyz
from plenocal.model.lattice import TypeLayout
from plenocal.model.profile import focus_plane_mla_mm, mla_to_object_mm
from plenocal.model.projection import micro_image_centres, micro_lens_centres
from plenocal.sim import preset

HEAD_KEYS = {"D", "d", "pp", "Rxyz", "focal_planes", "scaling", "distortions_inverse"}

# COMPOTE's examples/config/intrinsics.js (HEAD generation, reference §12.3), the fields HEAD's
# computed values depend on, and the values it saved (numbers as COMPOTE spells them).
_I3 = [["1", "0", "0"], ["0", "1", "0"], ["0", "0", "1"]]
COMPOTE = {
    "I": "3",
    "dist_focus": "450",
    "main_lens": {"aperture": "4", "f": "49.885285868753407", "pose": {"rotation": _I3, "translation": [["0", "0", "0"]]}},
    "mla": {
        "focal_lengths": ["0.58266966865506242", "0.5240249316658897", "0.56057361553341034"],
        "mesh": {
            "geometry": "1",
            "height": "152",
            "width": "176",
            "pitch": [["0.12744360322648965", "0.1274552010932988"]],
            "pose": {
                "rotation": [
                    ["0.99999996274709313", "-2.9605181497945933e-05", "0.00027134729849787514"],
                    ["2.9499663366578723e-05", "0.9999999239575913", "0.00038886319501355102"],
                    ["-0.00027135879022924654", "-0.00038885517587347693", "0.99999988757802039"],
                ],
                "translation": [["-10.932145543311453", "-7.9959730514471792", "-56.859984368126192"]],
            },
        },
    },
    "sensor": {
        "height": "3068",
        "width": "4080",
        "scale": "0.0054999999999999997",
        "pose": {"rotation": _I3, "translation": [["-11.003589891607232", "-8.1179860156513062", "-57.197092795438614"]]},
    },
    "scaling": {"a": "0.00079708898900074192", "b": "0.62515220840000596", "c": "31.51235516605901"},
    "mode": "2",
    "D": "56.859967077387466",
    "d": "0.33712571805114777",
    "pp": [["2078.3472924350485", "1591.0025426088534"]],
    "Rxyz": [["0.00038885519998996276", "-0.00027135879355952275", "-2.9499664458583925e-05"]],
    "focal_planes": ["374.25376598233777", "365.64115225753659", "371.48899381538922"],
}

def _floats(x) -> list[float]:
    return [float(v) for v in np.asarray(x, dtype=object).ravel()]


@pytest.fixture(scope="module")
def r12b_full():
    """The r12-b preset at the paper's full MLA tilt (the PRISM r12-b truth camera's optics)."""
    return preset("r12-b", tilt_scale=1.0).camera


@pytest.fixture(scope="module")
def r12b_default():
    """The default r12-b preset: a 176 x 153 lattice."""
    return preset("r12-b").camera


def _features(camera, *, n: int = 40, seed: int = 3):
    """Points seen by lenses spread over the array: (points, k, l), back-projected from features
    near their micro-image centres with ρ between 1 and 4 px in magnitude."""
    rng = np.random.default_rng(seed)
    lat = camera.mla.lattice
    k = rng.integers(2, lat.width - 2, n)
    l = rng.integers(2, lat.height - 2, n)
    uv = micro_image_centres(camera, k, l) + rng.uniform(-6.0, 6.0, (n, 2))
    rho = -rng.uniform(1.0, 4.0, n)
    points = back_project_bap(camera, np.column_stack([uv, rho]), k, l)
    return points, k, l


# --- HEAD's saved fields ------------------------------------------------------------------
def test_head_fields_reproduce_compote(tmp_path: Path):
    """D, d, pp, Rxyz, mode and focal_planes (with HEAD's double depth scaling) as COMPOTE saved them, to the bit."""
    path = tmp_path / "intrinsics.js"
    path.write_text(json.dumps(COMPOTE))
    doc = lp.read_camera_config(path)
    scaling = tuple(float(COMPOTE["scaling"][k]) for k in "abc")
    fields = head_fields(doc, scaling=scaling)
    for key in ("D", "d", "pp", "Rxyz", "focal_planes"):
        assert _floats(fields[key]) == _floats(COMPOTE[key]), key
    assert head_mode(doc) == int(COMPOTE["mode"])


def test_eigen_euler_angles_range_and_round_trip():
    rng = np.random.default_rng(0)
    for angles in [(8.431e-4, -6.371e-4, -3.09e-5), (-8.431e-4, 6.371e-4, 3.09e-5), *rng.uniform(-1.5, 1.5, (20, 3))]:
        R = matrix_from_euler_xyz(angles)
        e = eigen_euler_xyz(R)
        assert 0.0 <= e[0] <= math.pi and abs(e[1]) <= math.pi and abs(e[2]) <= math.pi
        np.testing.assert_allclose(matrix_from_euler_xyz(e), R, atol=1e-14)
        if angles[0] > 0:
            np.testing.assert_allclose(e, angles, atol=1e-15)
    # θx < 0: Eigen's first angle is shifted by π (what HEAD writes as Rxyz)
    e = eigen_euler_xyz(matrix_from_euler_xyz((-1e-3, 2e-3, 3e-3)))
    np.testing.assert_allclose(e, (math.pi - 1e-3, math.pi - 2e-3, 3e-3 - math.pi), atol=1e-14)


def test_head_export_fields(tmp_path: Path, r12a_camera):
    path = lp.write_intrinsics(tmp_path / "intrinsics.js", r12a_camera, generation=Generation.HEAD)
    raw = json.loads(path.read_text())
    assert HEAD_KEYS <= set(raw) and raw["mode"] == "2" and raw["I"] == "3"
    assert raw["distortions"]["model"] == "0" and _floats(raw["distortions"]["depth"]) == [0.0, 0.0, 0.0]
    assert raw["distortions_inverse"]["model"] == "0" and raw["scaling"] == {"a": "0.0", "b": "1.0", "c": "0.0"}
    doc = lp.read_camera_config(path)
    # D, d: MLA-space lens (0, 0) = MIA-space (W−1, H−1), plenocal's C_z
    lat = r12a_camera.mla.lattice
    C = micro_lens_centres(r12a_camera, [lat.width - 1], [lat.height - 1])[0]
    assert float(raw["D"]) == pytest.approx(-C[2], abs=1e-12)
    assert float(raw["d"]) == pytest.approx(r12a_camera.sensor.distance_mm + C[2], abs=1e-12)
    assert float(raw["D"]) != r12a_camera.D_mm  # the tilt puts lens (0, 0) off the MLA origin's plane
    np.testing.assert_allclose(_floats(raw["pp"]), r12a_camera.principal_point_px, rtol=0, atol=1e-9)
    np.testing.assert_allclose(_floats(raw["Rxyz"]), r12a_camera.mla.rotation_xyz_rad, atol=1e-15)  # θx > 0
    # focus planes: eq:focusplane and eq:mla2obj at lens (0, 0)'s distances; plenocal's profile at the MLA origin
    D00, d00 = (float(x) for x in lens_distances(doc, 0, 0))
    for i, z in enumerate(_floats(raw["focal_planes"])):
        f = r12a_camera.mla.focal_lengths_mm[i]
        a0 = d00 * f / (d00 - f)
        F = r12a_camera.main_lens.focal_length_mm
        assert z == pytest.approx((D00 - a0) * F / ((D00 - a0) - F), rel=1e-12)
        assert z == pytest.approx(float(mla_to_object_mm(r12a_camera, focus_plane_mla_mm(r12a_camera, i))), rel=1e-3)
    # plenocal reads it back: same camera, ρ form kept
    back = lp.camera_from_intrinsics(path)
    assert back.rho_form is r12a_camera.rho_form and back.mla.lattice == lat
    np.testing.assert_allclose(back.mla.translation_mm, r12a_camera.mla.translation_mm, rtol=1e-15)


def test_head_mode_and_focal_planes_follow_head(r12a_camera):
    """HEAD's mode(): unfocused (0) for a Keplerian multi-focus camera (reference §15 item 11);
    I = 0: Keplerian (1) when F < D, one focal plane at virtual depth max(2, (F − D)/d)."""
    kep = preset("kep-3", small=True).camera
    assert kep.configuration is Configuration.KEPLERIAN
    assert head_mode(lp.config_from_camera(kep)) == 0
    assert head_mode(lp.config_from_camera(r12a_camera)) == 2
    pinholes = dataclasses.replace(lp.config_from_camera(r12a_camera), I=0, focal_lengths=())
    assert head_mode(pinholes) == 1  # F = 49.7 < D = 56.7
    (plane,) = focal_planes(pinholes)
    D, d = (float(x) for x in lens_distances(pinholes, 0, 0))
    z = -max(2.0, (pinholes.main_lens.f - D) / d + 1e-6) * d - D
    assert plane == pytest.approx(pinholes.main_lens.f * z / (z + pinholes.main_lens.f), rel=1e-15)


# --- ρ forms ------------------------------------------------------------------------------
@pytest.mark.parametrize("form", list(RhoForm))
@pytest.mark.parametrize("generation", list(Generation))
def test_rho_form_round_trip(tmp_path: Path, r12b_full, form, generation):
    """export → libpleno files → import gives the same ρ (and u, v) in every form."""
    cam = r12b_full.replace(rho_form=form)
    path = lp.write_intrinsics(tmp_path / "intrinsics.js", cam, generation=generation)
    back = lp.camera_from_intrinsics(path)
    assert back.rho_form is form
    points, k, l = _features(cam)
    a, b = project_bap(cam, points, k, l), project_bap(back, points, k, l)
    assert np.abs(a[:, 2] - b[:, 2]).max() < 1e-9
    assert np.abs(a[:, :2] - b[:, :2]).max() < 1e-9


def test_rho_against_libpleno_head(tmp_path: Path, r12b_full):
    """libpleno HEAD's ρ on the exported files against plenocal's forms at the paper's full tilt:
    the head form within 2e-3 px (plenocal keeps A = λ·Δc at the MLA origin, libpleno uses each
    lens' λ(k, l)); legacy and virtual-depth tenths of a pixel away (benchmarks/check_export.py
    has the figures)."""
    doc = lp.config_from_camera(r12b_full, generation=Generation.HEAD)
    points, k, l = _features(r12b_full, n=200)
    lib = blur_radius_px(doc, r12b_full.micro_image_pitch_mm, points, k, l)
    delta = {
        form: np.abs(project_bap(r12b_full.replace(rho_form=form), points, k, l)[:, 2] - lib).max() for form in RhoForm
    }
    assert delta[RhoForm.HEAD] < 2e-3
    assert delta[RhoForm.LEGACY] > 0.1 and delta[RhoForm.VIRTUAL_DEPTH] > 0.1
    # without tilt every form is libpleno's
    flat = r12b_full.replace(mla=dataclasses.replace(r12b_full.mla, rotation_xyz_rad=(0.0, 0.0, 1e-5)))
    doc = lp.config_from_camera(flat, generation=Generation.HEAD)
    lib = blur_radius_px(doc, flat.micro_image_pitch_mm, points, k, l)
    for form in RhoForm:
        assert np.abs(project_bap(flat.replace(rho_form=form), points, k, l)[:, 2] - lib).max() < 1e-9


# --- the legacy layout --------------------------------------------------------------------
def test_legacy_layout_unchanged(tmp_path: Path, r12a_camera):
    """The default (legacy) layout has exactly the keys it always had, and its numbers."""
    assert lp.config_from_camera(r12a_camera) == lp.config_from_camera(r12a_camera, generation=Generation.LEGACY)
    raw = json.loads(lp.write_intrinsics(tmp_path / "intrinsics.js", r12a_camera).read_text())
    assert set(raw) == {"I", "dist_focus", "distortions", "main_lens", "mia", "mla", "mode", "sensor", "plenocal_rho_form"}
    assert set(raw["distortions"]) == {"radial", "tangential"} and raw["mode"] == "2"
    head = json.loads(lp.write_intrinsics(tmp_path / "head.js", r12a_camera, generation=Generation.HEAD).read_text())
    for key in ("sensor", "mia", "mla", "main_lens", "I", "dist_focus", "plenocal_rho_form"):
        assert head[key] == raw[key], key
    assert head["distortions"]["radial"] == raw["distortions"]["radial"]


# --- the command ----------------------------------------------------------------------
def test_cli_exports_default_r12b_preset(tmp_path: Path, capsys, r12b_default):
    cam_path = write_camera(tmp_path / "camera.json", r12b_default)
    out = tmp_path / "export"
    assert main(["export-libpleno", str(cam_path), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "wrote intrinsics.js, params.js (head generation)" in text
    assert "176x153 written as 176x154" in text and "distortions_inverse fitted" in text
    assert "camera's is virtual-depth" in text and "Ω of the camera itself" in text
    raw = json.loads((out / "intrinsics.js").read_text())
    assert HEAD_KEYS <= set(raw) and raw["mode"] == "2"
    omega = lp.read_params(out / "params.js")
    assert omega.micro_image_pitch_mm == pytest.approx(r12b_default.micro_image_pitch_mm, rel=1e-15)
    assert main(["export-libpleno", str(cam_path), "-o", str(out / "legacy"), "--generation", "legacy"]) == 0
    assert sorted(p.name for p in (out / "legacy").iterdir()) == ["intrinsics.js"]
    assert not HEAD_KEYS & set(json.loads((out / "legacy" / "intrinsics.js").read_text()))


def test_cli_export_errors(tmp_path: Path, capsys, r12a_camera):
    cam_path = write_camera(tmp_path / "camera.json", r12a_camera)
    (tmp_path / "file").write_text("")
    assert main(["export-libpleno", str(cam_path), "-o", str(tmp_path / "file")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"plenocal export-libpleno: error: -o {tmp_path / 'file'}: is a file; expected an output folder"
    )
    other = r12a_camera.replace(mla=dataclasses.replace(r12a_camera.mla, types=TypeLayout(3, (0, 2))))
    bad = write_camera(tmp_path / "bad.json", other)
    assert main(["export-libpleno", str(bad), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"plenocal export-libpleno: error: {bad}: micro-lens type layout")
    assert not (tmp_path / "out" / "intrinsics.js").exists()
