"""``plenocal run``'s plan: the depth-scaling stage sits between blur and depth, feeds depth its
file, and ``--no-depth-scaling`` / ``--no-depth`` leave it out."""

from __future__ import annotations

from pathlib import Path

import pytest

from plenocal.cli.run import plan
from plenocal.io.dataset import ImageEntry, ImageFormat, ImageRole, Manifest, read_dataset, write_manifest
from plenocal.model.target import Checkerboard
from plenocal.sim.dataset import camera_spec
from plenocal.sim.presets import preset


@pytest.fixture
def dataset(tmp_path: Path):
    p = preset("r12-a", small=True)
    N = p.camera.main_lens.f_number
    entries = [ImageEntry("white.png", ImageRole.WHITE, f_number=N), ImageEntry("dev.png", ImageRole.DEVIGNETTING, f_number=N),
               *(ImageEntry(f"c{i}.png", ImageRole.CALIBRATION, f_number=N, frame=i) for i in range(4)),
               ImageEntry("t.png", ImageRole.TRANSLATION, f_number=N, frame=100, sequence=0, displacement_mm=0.0)]
    for e in entries:
        (tmp_path / e.path).write_bytes(b"")
    write_manifest(tmp_path, Manifest(camera_spec(p), Checkerboard(10, 8, 2.5, 1.25), tuple(entries), ImageFormat(bit_depth=16)))
    return read_dataset(tmp_path)


def test_depth_scaling_stage_feeds_depth(dataset, tmp_path):
    stages = {s.name: s for s in plan(dataset, tmp_path / "out", vignetting=True)}
    names = list(stages)
    assert names.index("blur") < names.index("depth-scaling") < names.index("depth")
    scaling = tmp_path / "out" / "depth-scaling" / "depth-scaling.json"
    assert stages["depth-scaling"].outputs == [scaling]
    cal = tmp_path / "out" / "calibration"
    assert cal / "poses.json" in stages["depth-scaling"].inputs and "--poses" in stages["depth-scaling"].argv
    assert all(dataset.path(f"c{i}.png") in stages["depth-scaling"].inputs for i in range(4))
    depth = stages["depth"]
    assert depth.argv[depth.argv.index("--scaling") + 1] == str(scaling) and scaling in depth.inputs


def test_no_depth_scaling_and_no_depth(dataset, tmp_path):
    stages = {s.name: s for s in plan(dataset, tmp_path / "out", vignetting=True, depth_scaling=False)}
    assert "depth-scaling" not in stages and "--scaling" not in stages["depth"].argv
    stages = {s.name: s for s in plan(dataset, tmp_path / "out", vignetting=True, depth=False)}
    assert "depth-scaling" not in stages and "depth" not in stages


def test_a_lens_prescription_file_is_an_input_of_the_calibration_stages(dataset, tmp_path):
    """Editing the file given to --lens runs the calibrations again (its bytes are in their
    fingerprint); a bundled design's name is no file."""
    from plenocal.cli.run import _fingerprint

    lens = tmp_path / "lens.json"
    lens.write_text("{}")
    stages = {s.name: s for s in plan(dataset, tmp_path / "out", vignetting=True, calibrate_options=["--lens", str(lens)])}
    assert lens in stages["calibrate"].inputs and lens in stages["calibrate-pass1"].inputs
    before = _fingerprint(stages["calibrate"])
    lens.write_text('{"edited": 1}')
    assert _fingerprint(stages["calibrate"]) != before
    named = {s.name: s for s in plan(dataset, tmp_path / "out", vignetting=True, calibrate_options=["--lens", "tessar"])}
    assert not any(p.name == "tessar" for p in named["calibrate"].inputs)


def test_the_run_summary_states_the_model_field(tmp_path):
    """The run's closing table says how far the calibrated model describes the lens."""
    import json

    from plenocal.cli.run import summary_rows

    (tmp_path / "calibration").mkdir()
    report = {"rmse": {"uv_px": 0.24, "rho_px": 0.026, "mic_px": 0.058}, "n_bap": 3388, "n_mic": 7080, "n_frames": 8,
              "converged": True, "iterations": 11, "wall_time_s": 3.5,
              "model_field": {"radius_mm": 6.35, "reach_mm": 11.44}}
    (tmp_path / "calibration" / "report.json").write_text(json.dumps(report))
    rows = dict(summary_rows(tmp_path))
    assert rows["model's field (residuals as the centre's)"].startswith("to 6.3 mm from the principal point (features reach 11.4")
    report["model_field"]["radius_mm"] = None
    (tmp_path / "calibration" / "report.json").write_text(json.dumps(report))
    assert dict(summary_rows(tmp_path))["model's field (residuals as the centre's)"] == "everywhere the features reach (11.4 mm)"


def test_natural_vignetting_goes_to_precalibration_and_the_first_detection_pass(dataset, tmp_path):
    """``run --natural-vignetting``: pre-calibration and the first pass get the option (the second
    pass follows what the first recorded in detection.json); off, no stage does."""
    on = {s.name: s for s in plan(dataset, tmp_path / "out", vignetting=True, natural_vignetting=True)}
    off = {s.name: s for s in plan(dataset, tmp_path / "out", vignetting=True)}
    assert "--natural-vignetting" in on["precalibrate"].argv and "--natural-vignetting" in on["detect"].argv
    assert "--natural-vignetting" not in on["detect-pass2"].argv
    assert not any("--natural-vignetting" in s.argv for s in off.values())
