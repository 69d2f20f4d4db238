"""``plenocal run`` and ``plenocal demo`` end to end on a small simulated dataset (reduced)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from plenocal.cli.main import main
from plenocal.io import read_camera, read_camera_file, read_dataset


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    import os

    old = os.environ.get("PLENOCAL_CACHE")
    os.environ["PLENOCAL_CACHE"] = str(root / "cache")
    try:
        assert main(["demo", "--quick", "--rays", "16", "-o", str(root / "out")]) == 0
    finally:
        if old is None:
            os.environ.pop("PLENOCAL_CACHE")
        else:
            os.environ["PLENOCAL_CACHE"] = old
    datasets = list((root / "cache").iterdir())
    assert len(datasets) == 1
    return datasets[0], root / "out"


def test_demo_writes_every_stage_and_the_report(demo):
    _, out = demo
    for f in ("precalibration/camera.json", "detection/observations.npz", "calibration/camera.json",
              "calibration/report.json", "evaluation/report.json", "profile/profile.json", "report.html"):
        assert (out / f).is_file(), f
    html = (out / "report.html").read_text()
    assert "<img" in html and "http://" not in html and "https://" not in html
    assert (out / "depth" / "depth.json").is_file()
    depth = html[html.index('<section id="depth">'):]
    assert "distance to board plane" in depth and "known displacements" in depth and "<img" in depth
    # the depth scaling fitted on the calibration frames, and whether depth used it (6 frames of a
    # thin-lens render: W 0.7 against 36, not applied)
    sc = json.loads((out / "depth-scaling" / "depth-scaling.json").read_text())["scaling"]
    used = json.loads((out / "depth" / "depth.json").read_text())["scaling"]
    assert sc["n_frames"] >= 4 and used["applied"] == sc["kept"] and used["c1"] == sc["c1"]
    assert "Depth scaling" in depth and ("not applied" in depth) == (not sc["kept"])
    assert "all-in-focus image" in depth


def test_demo_calibration_is_close_to_the_truth(demo):
    """The calibrated camera is near the true one (tolerances from this small, 6-frame dataset)."""
    dataset, out = demo
    ds = read_dataset(dataset)
    truth = read_camera(ds.path(ds.manifest.ground_truth.camera))
    cal = read_camera_file(out / "calibration" / "camera.json").camera
    rep = json.loads((out / "calibration" / "report.json").read_text())
    assert rep["converged"]
    assert rep["rmse"]["uv_px"] < 0.6 and rep["rmse"]["rho_px"] < 0.1
    assert cal.main_lens.focal_length_mm == pytest.approx(truth.main_lens.focal_length_mm, rel=0.05)
    assert cal.D_mm == pytest.approx(truth.D_mm, rel=0.05)
    assert cal.d_mm == pytest.approx(truth.d_mm, rel=0.10)
    np.testing.assert_allclose(cal.mla.focal_lengths_mm, truth.mla.focal_lengths_mm, rtol=0.12)


def test_run_is_resumable(demo, capsys):
    dataset, out = demo
    assert main(["run", str(dataset), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    for stage in ("precalibrate", "detect", "calibrate", "evaluate", "profile"):
        assert f"[{stage}] up to date, skipped" in text


def test_run_on_a_missing_dataset_is_one_line(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope"), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_run_plan_has_no_blur_stage_for_a_single_type_camera(demo, tmp_path):
    """κ is relative blur between types: an unfocused (one-type) camera skips the stage instead of
    failing the run (full-scale upc-s did)."""
    import dataclasses

    from plenocal.cli.run import plan
    from plenocal.io.dataset import Dataset

    dataset, _ = demo
    ds = read_dataset(dataset)
    names = [s.name for s in plan(ds, tmp_path, vignetting=True)]
    assert "blur" in names
    one = dataclasses.replace(ds.manifest, camera_spec=dataclasses.replace(ds.manifest.camera_spec, n_types=1, type_row_shift=None))
    names = [s.name for s in plan(Dataset(ds.folder, one), tmp_path, vignetting=True)]
    assert "blur" not in names and names[-1] == "report" and "evaluate" in names


def test_run_passes_calibration_options_through():
    """``plenocal run``'s calibration options reach ``plenocal calibrate`` unchanged."""
    from plenocal.cli.main import build_parser
    from plenocal.cli.run import calibration_argv

    args = build_parser().parse_args(["run", "DS", "-o", "OUT", "--one-pitch", "--weighting", "noise", "--rho-form", "head",
                                      "--loss", "linear", "--freeze", "tilt,pitch", "--prior", "F_mm=50±2",
                                      "--prior", "focus_distance_mm=1000+-50"])
    assert calibration_argv(args) == ["--one-pitch", "--rho-form", "head", "--weighting", "noise", "--loss", "linear",
                                      "--freeze", "tilt,pitch", "--prior", "F_mm=50±2", "--prior", "focus_distance_mm=1000+-50"]
    assert calibration_argv(build_parser().parse_args(["run", "DS", "-o", "OUT"])) == []
    calib = build_parser().parse_args(["calibrate", "DS", "-o", "OUT", *calibration_argv(args)])
    assert (calib.two_pitches, calib.weighting, calib.rho_form, calib.loss) == (False, "noise", "head", "linear")
    assert calib.prior == ["F_mm=50±2", "focus_distance_mm=1000+-50"]


def _stage_done(tmp_path, content: bytes):
    """A stage "x" of one input file with ``content``, done: its output and its stage record written."""
    from plenocal.cli.run import Stage, _fingerprint

    inp, folder = tmp_path / "input.bin", tmp_path / "stage"
    folder.mkdir()
    inp.write_bytes(content)
    stage = Stage("x", ["x"], [inp], [folder / "out.json"])
    (folder / "out.json").write_text("{}")
    (folder / "stage.json").write_text(json.dumps({"fingerprint": _fingerprint(stage)}))
    return stage, inp, folder


def test_stage_reuse_sees_content_not_size_and_mtime(tmp_path):
    """An input replaced by a same-size file with the same modification time (``cp -p``,
    ``rsync -a``, an archive restore) makes its stage out of date."""
    import os

    from plenocal.cli.run import _up_to_date

    stage, inp, folder = _stage_done(tmp_path, b"a" * 1000)
    assert _up_to_date(stage, folder)
    st = inp.stat()
    inp.write_bytes(b"a" * 999 + b"b")
    os.utime(inp, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert inp.stat().st_size == st.st_size and inp.stat().st_mtime_ns == st.st_mtime_ns
    assert not _up_to_date(stage, folder)


def test_a_stage_done_by_other_code_is_redone(tmp_path, monkeypatch):
    """plenocal's version number stays 0.1.0 from commit to commit: a stage done before an upgrade
    (a fixed bug) or an edit of the code, same inputs and arguments, is not up to date."""
    import shutil

    import plenocal
    from plenocal.cli import run
    from plenocal.cli.run import _up_to_date

    stage, _, folder = _stage_done(tmp_path, b"a" * 10)
    assert _up_to_date(stage, folder)

    package = tmp_path / "site" / "plenocal"  # the same package, one byte of one module changed
    shutil.copytree(Path(plenocal.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(plenocal, "__file__", str(package / "__init__.py"))
    run.code_digest.cache_clear()
    try:
        assert _up_to_date(stage, folder)  # a copy of the same code: nothing to redo
        run.code_digest.cache_clear()
        module = package / "calib" / "solver.py"
        module.write_bytes(module.read_bytes() + b"#")
        assert not _up_to_date(stage, folder)
    finally:
        run.code_digest.cache_clear()


def test_a_second_run_on_the_same_folder_is_refused(demo, tmp_path, capsys):
    """While one run holds the output folder, another is refused with the holder's process id in
    one line, exit 2, nothing written; a folder the lock made and nothing filled is removed."""
    import os

    from plenocal.errors import UsageError
    from plenocal.io.outputs import folder_lock

    dataset, _ = demo
    out = tmp_path / "out"
    with folder_lock(out):
        capsys.readouterr()
        assert main(["run", str(dataset), "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"in use by process {os.getpid()}" in err, err
        assert [p.name for p in out.iterdir()] == [".plenocal-run.lock"]
        with pytest.raises(UsageError, match="another plenocal run"):
            with folder_lock(out):
                pass
    assert not out.exists()


def test_run_records_chief_ray_positions_and_calibrates_them_so(demo):
    """``detect`` (chief-ray positions by default) records them; ``calibrate`` reads the record and
    keeps the chief-ray model, and says why."""
    from plenocal.io import read_observations

    _, out = demo
    assert read_observations(out / "detection" / "observations.npz").positions == "chief-ray"
    assert json.loads((out / "detection" / "detection.json").read_text())["positions"] == "chief-ray"
    pupil = json.loads((out / "calibration" / "report.json").read_text())["pupil"]
    assert pupil["model"] == "chief-ray" and "chief-ray positions" in pupil["chosen_by"]


def test_run_measures_the_depth_of_the_evaluation_and_translation_frames(demo):
    """The depth stage of ``plenocal run``: one PLY per evaluation and translation frame, and each
    frame's median depth within 1.5 % of the true board centre's, beyond the calibrated camera's
    own scale error (|F/F_true − 1|: this 6-frame camera's F is ±2.8 %). Measured: 0.02–0.28 % with
    the poses drawn before 2026-11-27 (F +0.5 %); −1.25 … −1.63 % with today's (F −1.29 %). The
    helper's plane renders give 0.1–0.5 % aggregated."""
    from plyfile import PlyData

    from plenocal.io import read_poses

    dataset, out = demo
    ds = read_dataset(dataset)
    poses = read_poses(ds.path(ds.manifest.ground_truth.poses))
    board = ds.manifest.target
    doc = json.loads((out / "depth" / "depth.json").read_text())
    expected = {e.frame for e in ds.manifest.images if e.role.value in ("evaluation", "translation")}
    assert {int(f) for f in doc["frames"]} == expected and expected
    centre = np.array([(board.columns - 1) * board.square_mm / 2, (board.rows - 1) * board.square_mm / 2, 0.0])
    scale = abs(read_camera(out / "calibration" / "camera.json").main_lens.focal_length_mm
                / read_camera(ds.path(ds.manifest.ground_truth.camera)).main_lens.focal_length_mm - 1.0)
    for f, frame in doc["frames"].items():
        pose = poses[int(f)]
        z_true = float((pose.rotation @ centre + pose.translation)[2])
        assert frame["z_percentiles_mm"]["50"] == pytest.approx(z_true, rel=0.015 + scale), f
        ply = PlyData.read(str(out / "depth" / "depth" / f"frame-{f}.ply"))
        z = np.asarray(ply["vertex"]["z"])
        assert len(z) == frame["counts"]["estimated"] - frame.get("no_metric_point", 0)
        assert np.median(z) == pytest.approx(frame["z_percentiles_mm"]["50"], rel=1e-6)


def test_evaluate_puts_the_point_clouds_against_the_board_planes_and_the_displacements(demo):
    """``plenocal run``'s evaluation has a depth section: every depth frame's on-board points within
    2 % of their depth from the board plane in median (measured 0.09–0.80 %), and a displacement
    error for every pair of translation frames."""
    dataset, out = demo
    ds = read_dataset(dataset)
    ev = json.loads((out / "evaluation" / "report.json").read_text())["depth"]
    for f, frame in ev["frames"].items():
        assert frame["n_points"] > 100 and frame["median_abs_percent"] < 2.0, (f, frame)
    n_trans = sum(1 for e in ds.manifest.images if e.role.value == "translation")
    assert ev["displacements"]["n_pairs"] == n_trans * (n_trans - 1) // 2


def test_a_depth_frame_posed_without_blur_is_not_judged(demo, tmp_path):
    """A translation frame whose features have no ρ (single views, near the MLA's conjugate) is
    posed by its corners' perspective alone: its points are not put against that plane, nor its
    board depth in the displacements; the others are as before."""
    from plenocal.cli.evaluate import POSE_WITHOUT_DEPTH
    from plenocal.io.observations import read_observations, write_observations
    from plenocal.model.observations import BapFeatures, Observations

    dataset, out = demo
    ds = read_dataset(dataset)
    trans = sorted(int(e.frame) for e in ds.manifest.images if e.role.value == "translation")
    obs = read_observations(out / "detection" / "observations.npz")
    cols = obs.bap.columns()
    cols["rho"] = np.where(obs.bap.frame == trans[0], np.nan, obs.bap.rho)
    flat = write_observations(tmp_path / "obs.npz", Observations(BapFeatures(**cols), obs.mic, obs.positions))
    assert main(["evaluate", str(dataset), "--camera", str(out / "calibration" / "camera.json"), "--poses",
                 str(out / "calibration" / "poses.json"), "--observations", str(flat), "--depth", str(out / "depth"),
                 "-o", str(tmp_path / "ev")]) == 0
    ev = json.loads((tmp_path / "ev" / "report.json").read_text())["depth"]
    assert ev["frames"][str(trans[0])] == {"n_points": ev["frames"][str(trans[0])]["n_points"], "pose": POSE_WITHOUT_DEPTH}
    n = len(trans) - 1
    assert ev["displacements"]["n_pairs"] == n * (n - 1) // 2
    assert all(trans[0] not in p["frames"] for p in ev["displacements"]["pairs"])


def test_evaluate_depth_refuses_a_missing_or_broken_depth_folder(demo, tmp_path, capsys):
    """``evaluate --depth`` on a folder without depth.json, or with a broken PLY: exit 2, one line
    naming the file, nothing written."""
    import shutil

    dataset, out = demo
    base = ["evaluate", str(dataset), "--camera", str(out / "calibration" / "camera.json"), "--poses",
            str(out / "calibration" / "poses.json"), "--observations", str(out / "detection" / "observations.npz")]
    assert main([*base, "--depth", str(tmp_path / "none"), "-o", str(tmp_path / "ev")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "none/depth.json" in err and "plenocal depth" in err
    broken = tmp_path / "broken"
    shutil.copytree(out / "depth", broken)
    ply = next((broken / "depth").glob("frame-*.ply"))
    ply.write_bytes(b"junk")
    assert main([*base, "--depth", str(broken), "-o", str(tmp_path / "ev")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ply.name in err and "cannot read the point cloud" in err
    assert not (tmp_path / "ev").exists()


def test_run_makes_a_second_detection_pass(demo):
    """After the first calibration, a second detection pass with the calibrated camera reports per
    frame what it did; frames the first pass linked fully are kept, and when nothing is added the
    final calibration is the first one's (not computed again)."""
    _dataset, out = demo
    first = json.loads((out / "detection" / "detection.json").read_text())
    second = json.loads((out / "detection-pass2" / "detection.json").read_text())
    sp = second["second_pass"]
    assert sp["added_features"] >= 0 and second["n_bap"] == first["n_bap"] + sp["added_features"]
    for rec in second["frames"]:
        assert rec["second_pass"]["action"]
        if rec["linking"]["ok"] and rec["predicted_nodes"]["action"] == "complete":
            assert rec["second_pass"]["action"].startswith("kept")
    assert 0 <= sp["added_calibration_features"] <= sp["added_features"]
    same = (out / "calibration" / "camera.json").read_bytes() == (out / "calibration-pass1" / "camera.json").read_bytes()
    assert same == (sp["added_calibration_features"] == 0)


def test_the_demo_table_judges_an_error_by_the_larger_sigma():
    """The table divides each error by the larger of the Jacobian and frame-resampling σ
    (``viz.verdict.ParameterSigma.sigma``, as the calibration's warnings say to trust); a missing
    or zero one is not used."""
    from plenocal.viz.verdict import parameter_sigmas

    def larger_sigma(p):
        return parameter_sigmas({"parameters": {"x": {"value": 1.0, **p}}})["x"].sigma

    assert larger_sigma({"std": 8.8, "std_frames": 16.2}) == 16.2
    assert larger_sigma({"std": 0.43, "std_frames": 0.2}) == 0.43
    assert larger_sigma({"std": 0.5, "std_frames": None}) == 0.5
    assert larger_sigma({"std": 0.0}) is None
