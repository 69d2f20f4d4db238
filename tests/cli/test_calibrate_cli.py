"""``plenocal calibrate`` on datasets imported from libpleno folders (camera.js + params.js + scene.js
+ observations), synthetic observations with known truth (the R12-A fixture camera and poses)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from plenocal.calib.synthetic import synthetic_observations
from plenocal.cli.main import main
from plenocal.io.camera import read_camera_file, write_camera
from plenocal.io.libpleno import write_observations_bin, write_observations_csv
from plenocal.io.libpleno.importer import import_libpleno_folder
from plenocal.io.observations import read_observations, write_observations
from plenocal.io.poses import read_poses
from plenocal.model.observations import MicroImageCentres, Observations

N_FRAMES = 6
KEY = ("F_mm", "D_mm", "d_mm", "u0_px", "v0_px", "f1_mm", "f2_mm", "f3_mm", "theta_x_rad", "theta_y_rad", "pitch0_mm", "pitch1_mm")


def _truth_values(camera) -> dict[str, float]:
    from plenocal.calib.parameters import ParameterLayout

    lay = ParameterLayout(camera, (), two_pitches=True)  # the default model
    return dict(zip(lay.intrinsic_names, lay.pack_intrinsics(camera).tolist(), strict=True))


@pytest.fixture(scope="module")
def truth(r12a_truth, r12a_poses, r12a_board):
    poses = {f: r12a_poses[f] for f in sorted(r12a_poses)[:N_FRAMES]}
    noisy, _ = synthetic_observations(r12a_truth, poses, r12a_board, seed=3)
    return r12a_truth, poses, noisy


def _libpleno_src(folder: Path, r12a_libpleno_dir: Path, obs: Observations, *, csv: bool = False) -> Path:
    folder.mkdir(parents=True)
    for name in ("camera.js", "params.js", "scene.js"):  # no intrinsics.js: the camera comes from Ω
        shutil.copy(r12a_libpleno_dir / name, folder / name)
    if csv:
        write_observations_csv(folder / "bap.csv", folder / "center.csv", obs)
    else:
        write_observations_bin(folder / "linked-observations.bin.gz", obs)
    return folder


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory, r12a_libpleno_dir, truth):
    """Dataset imported from camera.js + params.js + scene.js + .bin.gz, calibrated with defaults."""
    _, _, noisy = truth
    base = tmp_path_factory.mktemp("cal")
    src = _libpleno_src(base / "src", r12a_libpleno_dir, noisy)
    import_libpleno_folder(src, base / "ds")
    out = base / "out"
    assert main(["calibrate", str(base / "ds"), "-o", str(out)]) == 0
    return base, out


def test_recovers_truth_from_omega_and_fitted_grid(calibrated, truth, capsys):
    camera, _, _ = truth
    _, out = calibrated
    cf = read_camera_file(out / "camera.json")
    rec = _truth_values(cf.camera)
    tv = _truth_values(camera)
    z = {n: (rec[n] - tv[n]) / cf.uncertainty[n] for n in KEY}
    assert all(abs(v) < 4 for v in z.values()), {n: round(v, 2) for n, v in z.items()}
    # The initial camera was 0.3 mm off in F (camera.js says 50 mm): the fit really moved it.
    assert abs(rec["F_mm"] - 50.0) > 5 * cf.uncertainty["F_mm"]
    assert cf.internal_parameters is not None
    assert cf.camera.mla.types.row_shift == camera.mla.types.row_shift


def test_report_fields(calibrated, truth):
    _, poses, noisy = truth
    _, out = calibrated
    rep = json.loads((out / "report.json").read_text())
    assert rep["format"] == "plenocal-calibration"
    assert rep["converged"] is True and rep["iterations"] >= 1 and rep["termination"]
    assert rep["rmse"]["uv_px"] == pytest.approx(0.3 * np.sqrt(2), rel=0.05)
    assert rep["rmse"]["rho_px"] == pytest.approx(0.05, rel=0.05)
    assert rep["rmse"]["mic_px"] == pytest.approx(0.1 * np.sqrt(2), rel=0.05)
    assert rep["n_bap"] + rep["rejected"]["bap"] == len(noisy.bap)
    assert rep["n_mic"] + rep["rejected"]["mic"] == len(noisy.mic)
    # Plain sum of squares of the kept u, v, ρ and MIC residuals matches the RMSEs.
    ssq = (rep["rmse"]["uv_px"] ** 2 * rep["n_bap"] + rep["rmse"]["rho_px"] ** 2 * rep["n_bap"]
           + rep["rmse"]["mic_px"] ** 2 * rep["n_mic"])
    assert rep["sum_squared_residuals"] == pytest.approx(ssq, rel=1e-9)
    assert rep["wall_time_s"] > 0 and {"extrinsics", "robust", "final", "covariance"} <= set(rep["timings_s"])
    assert set(rep["parameters"]["F_mm"]) >= {"value", "std"}
    names, m = rep["correlation"]["names"], np.array(rep["correlation"]["matrix"])
    assert m.shape == (len(names), len(names)) and np.allclose(np.diag(m), 1.0)
    assert {"bap", "mic"} <= set(rep["rejected"]) and "uv" in rep["downweighted"]
    assert "fitted" in rep["initial_camera"]
    est = read_poses(out / "poses.json")
    assert sorted(est) == sorted(poses)
    for f, p in poses.items():
        assert np.linalg.norm(est[f].translation - p.translation) < 1.0  # mm, at ~400 mm


def test_provenance_and_uncertainty(calibrated):
    _, out = calibrated
    cf = read_camera_file(out / "camera.json")
    prov = cf.provenance
    assert prov["stage"] == "calibrate" and prov["settings"]["loss"] == "huber"
    obs_file = Path(prov["inputs"]["observations"]["path"])
    assert prov["inputs"]["observations"]["sha256"] == hashlib.sha256(obs_file.read_bytes()).hexdigest()
    assert "internal_parameters" in prov["inputs"]
    assert cf.uncertainty["F_mm"] > 0 and "sensor_distance_mm" in cf.uncertainty


def test_model_field_of_a_thin_lens_is_unlimited(calibrated):
    """The synthetic thin-lens camera: every ring's residuals are the centre's (plenocal.evaluate.field),
    so camera.json's model field sets no limit and says how far the features reach."""
    _, out = calibrated
    cf = read_camera_file(out / "camera.json")
    assert cf.model_field is not None and cf.field_radius_mm is None
    assert cf.model_field["reach_mm"] > 3.0 and len(cf.model_field["rings"]) >= 3
    assert max(r["ratio"] for r in cf.model_field["rings"]) < cf.model_field["max_ratio"]
    report = json.loads((out / "report.json").read_text())
    assert report["model_field"]["radius_mm"] is None and report["model_field"]["rejected_beyond"] == 0


def test_stdout_table(calibrated, truth, tmp_path, capsys):
    base, _ = calibrated
    assert main(["calibrate", str(base / "ds"), "-o", str(tmp_path / "o"), "--loss", "linear",
                 "--freeze", "distortion,tilt"]) == 0
    text = capsys.readouterr().out
    assert "F_mm" in text and "frozen" in text and "converged" in text
    rep = json.loads((tmp_path / "o" / "report.json").read_text())
    assert rep["rejected"]["bap"] == 0 and rep["options"]["loss"] == "linear"
    assert rep["parameters"]["q1"]["frozen"] and rep["parameters"]["q1"]["value"] == 0.0
    assert rep["parameters"]["theta_x_rad"]["value"] == 0.0


def test_csv_import_and_precalibration_initial(tmp_path, r12a_libpleno_dir, truth):
    """BAP from CSVs without centres; MICs and the initial camera from a precalibration folder."""
    camera, _, noisy = truth
    src = _libpleno_src(tmp_path / "src", r12a_libpleno_dir, Observations(noisy.bap, MicroImageCentres.empty()), csv=True)
    (src / "center.csv").unlink()
    import_libpleno_folder(src, tmp_path / "ds")
    assert len(read_observations(tmp_path / "ds" / "observations.npz").mic) == 0
    pre = tmp_path / "pre"
    from plenocal.calib.synthetic import perturbed_camera

    write_camera(pre / "camera.json", perturbed_camera(camera, seed=4, relative=0.01, principal_point_px=20))
    write_observations(pre / "observations.npz", Observations(noisy.bap.select(np.zeros(len(noisy.bap), bool)), noisy.mic))
    assert main(["calibrate", str(tmp_path / "ds"), "-o", str(tmp_path / "out"), "--initial", str(pre)]) == 0
    cf = read_camera_file(tmp_path / "out" / "camera.json")
    rec, tv = _truth_values(cf.camera), _truth_values(camera)
    z = {n: (rec[n] - tv[n]) / cf.uncertainty[n] for n in KEY}
    assert all(abs(v) < 4 for v in z.values()), z
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    assert rep["n_mic"] > 26000 and "initial_observations" in rep["inputs"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--freeze", "nonsense"], "unknown parameter group"),
        (["--observations", "missing.npz"], "missing.npz"),
        (["--prior", "G_mm=50±2"], "unknown quantity 'G_mm'"),
        (["--prior", "F_mm=50"], "expected NAME=MEAN±STD"),
        (["--prior", "F_mm=50±0"], "σ > 0"),
        (["--prior", "F_mm=50±2", "--prior", "F=51±2"], "given twice"),
        (["--prior", "F_mm=50±2", "--freeze", "F_mm"], "frozen"),
        (["--prior", "F_mm=49.7±1e-200"], "use --freeze"),
        (["--prior", "F_mm=49.7±1e-150"], "use --freeze"),
        (["--prior", "F_mm=49.7±1e-160"], "use --freeze"),
        (["--prior", "F_mm=1e300±1e300"], "says nothing"),
        (["--prior", "F_mm=1e12±1"], "check its unit"),
        (["--freeze", "intrinsics,poses"], "leaves nothing to calibrate"),
    ],
)
def test_errors_one_line_exit_2_nothing_written(calibrated, tmp_path, capsys, args, needle):
    base, _ = calibrated
    out = tmp_path / "o"
    assert main(["calibrate", str(base / "ds"), "-o", str(out), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err and err.startswith("plenocal calibrate: error:")
    assert not out.exists()


def test_error_no_centres_names_the_file(tmp_path, r12a_libpleno_dir, truth, capsys):
    _, _, noisy = truth
    src = _libpleno_src(tmp_path / "src", r12a_libpleno_dir, Observations(noisy.bap, MicroImageCentres.empty()))
    import_libpleno_folder(src, tmp_path / "ds")
    assert main(["calibrate", str(tmp_path / "ds"), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "observations.npz" in err and "micro-image centres" in err
    assert not (tmp_path / "o").exists()


def test_error_no_initial_camera(tmp_path, r12a_libpleno_dir, truth, capsys):
    _, _, noisy = truth
    src = _libpleno_src(tmp_path / "src", r12a_libpleno_dir, noisy)
    (src / "params.js").unlink()
    import_libpleno_folder(src, tmp_path / "ds")
    assert main(["calibrate", str(tmp_path / "ds"), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "no initial camera" in err and str(tmp_path / "ds") in err


def test_ablation_table(calibrated, tmp_path, capsys):
    """Paper Table ablation from the Ω-initialised camera (no tilt, no distortion, pitch λ·Δc)."""
    base, _ = calibrated
    out = tmp_path / "abl"
    # The ablation's expectations were measured with noise weights (the MIC term then dominates the MLA).
    assert main(["calibrate", str(base / "ds"), "-o", str(out), "--ablation-table", "--weighting", "noise"]) == 0
    doc = json.loads((out / "ablation.json").read_text())
    rows = {r["configuration"]: r for r in doc["configurations"]}
    assert list(rows) == ["1", "2", "3", "4", "5", "6", "7", "8", "NOUR"]
    assert all(r["converged"] for r in rows.values())
    assert [rows[c]["tilt"] for c in "15"] == ["kept", "removed"] and rows["8"]["pitch"] == "removed"
    mic1, uv1 = rows["1"]["rmse"]["mic_px"], rows["1"]["rmse"]["uv_px"]
    # The truth has a ~1e-3 rad MLA tilt: without it the centres cannot be fitted (0.14 → 0.2 px).
    for c in "5678":
        assert rows[c]["rmse"]["mic_px"] > 1.25 * mic1
    for c in "1234":
        assert rows[c]["rmse"]["mic_px"] < 1.05 * mic1
    # Frozen distortion (truth has some) or pitch (0.04 % off) cost (u, v) accuracy.
    for c in "2345678":
        assert rows[c]["rmse"]["uv_px"] >= uv1 * 0.999
    assert rows["8"]["rmse"]["uv_px"] > 1.08 * uv1
    assert rows["NOUR"]["rmse"]["rho_px"] is None
    md = (out / "ablation.md").read_text()
    assert md.count("\n") == 11 and "| 7 | ✗ | ✗ | ✓ | yes |" in md
    assert "| NOUR |" in capsys.readouterr().out


def test_prior_is_used_and_reported(calibrated, truth, tmp_path, capsys):
    """A tight prior on F holds F; the table, report.json and camera.json's provenance say so. One
    the data alone reject (F + 0.5 mm: the data-only re-solve puts F ~5 combined σ away) is not
    written, unless --allow-failed-checks, and then marked."""
    base, _ = calibrated
    camera, _, _ = truth
    F = camera.main_lens.focal_length_mm
    out = tmp_path / "o"
    # The paper's thin lens: with the exit pupil free, e would absorb a prior that fights the data.
    thin = ["--no-exit-pupil", "--no-depth-distortion"]
    assert main(["calibrate", str(base / "ds"), "-o", str(out), "--prior", f"F_mm={F + 0.1}+-0.01", *thin]) == 0
    stdout = capsys.readouterr().out
    assert f"prior F_mm={F + 0.1:g}±0.01: calibrated" in stdout
    rep = json.loads((out / "report.json").read_text())
    (q,) = rep["priors"]
    assert q["name"] == "F_mm" and abs(q["value"] - (F + 0.1)) < 0.03 and q["value_std"] < 0.011
    assert q["conflicts_with_data"] is False and q["conflict_sigma"] < 3 and rep["checks"]["passed"]
    assert rep["options"]["priors"] == [{"name": "F_mm", "mean": F + 0.1, "std": 0.01, "origin": "option"}]
    cf = read_camera_file(out / "camera.json")
    assert cf.camera.main_lens.focal_length_mm == pytest.approx(q["value"])
    assert cf.provenance["priors"][0]["name"] == "F_mm"
    far = ["calibrate", str(base / "ds"), "--prior", f"F_mm={F + 0.5}+-0.01", *thin]
    assert main([*far, "-o", str(tmp_path / "far")]) == 2 and not (tmp_path / "far").exists()
    assert "conflicts with the data: without it they give F_mm = 49." in capsys.readouterr().err
    assert main([*far, "-o", str(tmp_path / "far"), "--allow-failed-checks"]) == 3  # written, not trustworthy
    (q,) = json.loads((tmp_path / "far" / "report.json").read_text())["priors"]
    assert q["conflicts_with_data"] is True and q["conflict_sigma"] > 3
    assert read_camera_file(tmp_path / "far" / "camera.json").provenance["checks_failed"][0].startswith("prior F_mm=")


def test_poses_name_the_frames_linked_with_relative_ids(calibrated, r12a_board, tmp_path):
    """Observations whose frame 2 was linked with relative node ids: the calibration's poses.json
    gives that frame's linked nodes' extent (what depth scaling takes for its board), no other's."""
    from plenocal.io.poses import read_node_extents

    base, _ = calibrated
    obs = read_observations(base / "ds" / "observations.npz")
    rel = write_observations(tmp_path / "obs.npz", Observations(obs.bap, obs.mic, obs.positions, relative_frames=(2,)))
    out = tmp_path / "o"
    assert main(["calibrate", str(base / "ds"), "-o", str(out), "--observations", str(rel),
                 "--no-exit-pupil", "--no-depth-distortion"]) == 0
    extent = obs.node_extent(2, columns=r12a_board.columns)
    assert extent is not None and read_node_extents(out / "poses.json") == {2: extent}
