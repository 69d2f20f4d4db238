"""``plenocal profile``: the paper's total depths of field (§7.6) from the R12-A fixture and presets."""

from __future__ import annotations

import json

import pytest

from plenocal.cli.main import main
from plenocal.io import write_camera
from plenocal.sim.presets import preset


def _profile(tmp_path, camera, name):
    cam = tmp_path / f"{name}.json"
    write_camera(cam, camera)
    out = tmp_path / f"out-{name}"
    assert main(["profile", str(cam), "-o", str(out)]) == 0
    assert (out / "profile.png").is_file() and (out / "profile.svg").is_file()
    return json.loads((out / "profile.json").read_text())


def test_r12a_fixture_total_dof_is_the_papers_14_44_mm(tmp_path, r12a_camera):
    doc = _profile(tmp_path, r12a_camera, "r12a")
    assert doc["format"] == "plenocal-profile"
    assert doc["total"]["dof_object_mm"] == pytest.approx(14.44, abs=0.005)
    assert doc["r0_mm"] == pytest.approx(0.00275)
    assert doc["r0_px"] == pytest.approx(0.5)
    t0 = doc["types"][0]
    assert t0["focus_plane"]["virtual_depth"] == pytest.approx(2.282, abs=1e-3)
    assert sorted(t0["limits"]["object_mm"]) == pytest.approx([366.24, 372.33], abs=1e-2)
    # R12-A's own virtual-depth span (the paper's 2.15–3.45 is R12-B's, see the next test).
    assert doc["total"]["virtual_depth"] == pytest.approx([2.077, 3.182], abs=2e-3)
    assert len(doc["profile"]["rho_px"]) == 3
    assert doc["inputs"]["camera"]["sha256"]


@pytest.mark.parametrize(
    ("name", "dof_mm"),
    [("r12-b", 120.0), ("r12-c", 223_000.0)],
)
def test_r12b_r12c_total_dof_match_the_paper(tmp_path, name, dof_mm):
    doc = _profile(tmp_path, preset(name).camera, name)
    assert doc["total"]["dof_object_mm"] == pytest.approx(dof_mm, rel=0.05)
    if name == "r12-b":
        # "In MLA space the total DoF ... spans from υ = 2.15 to 3.45" (paper §7.6) — R12-B's values.
        assert doc["total"]["virtual_depth"] == pytest.approx([2.15, 3.45], abs=0.05)


def test_profile_bad_camera_is_one_line_and_writes_nothing(tmp_path, capsys):
    bad = tmp_path / "camera.json"
    bad.write_text('{"format": "plenocal-camera", "version": 1}')
    out = tmp_path / "out"
    assert main(["profile", str(bad), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("plenocal profile: error:") and str(bad) in err and "\n" not in err
    assert not out.exists()
