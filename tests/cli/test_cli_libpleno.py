"""CLI: import-libpleno, export-libpleno and evaluate, run in-process on real files."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from plenocal.cli.main import main
from plenocal.io import libpleno as lp
from plenocal.io import read_camera_file, read_dataset, read_observations, read_poses, write_observations
from plenocal.model.camera import Configuration
from plenocal.model.lattice import Lattice, LatticeKind
from plenocal.model.observations import BapFeatures, Observations


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _error(capsys, code: int) -> str:
    err = capsys.readouterr().err
    assert code == 2
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_import_fixture_folder(
    tmp_path, capsys, libpleno_src, r12a_camera, r12a_params, r12a_poses, r12a_observations
):
    before = _digest(libpleno_src)
    ds = tmp_path / "dataset"
    assert main(["import-libpleno", str(libpleno_src), "-o", str(ds)]) == 0
    captured = capsys.readouterr()
    warning = captured.err.strip().splitlines()
    assert len(warning) == 1
    assert warning[0].startswith("plenocal import-libpleno: warning: ")
    assert "20 of 20 images do not exist" in warning[0] and "their entries are kept" in warning[0]
    assert _digest(libpleno_src) == before  # inputs untouched

    dataset = read_dataset(ds)
    m = dataset.manifest
    spec = m.camera_spec
    assert (spec.pixel_size_mm, spec.width_px, spec.height_px) == (0.0055, 4080, 3068)
    assert spec.lattice == Lattice(LatticeKind.HEX_ROWS, 176, 152)
    assert spec.n_types == 3 and spec.type_row_shift == (0, 1)
    assert spec.main_lens_focal_length_mm == 50.0 and spec.focus_distance_mm == 450.0
    assert spec.configuration is Configuration.GALILEAN
    assert (m.target.columns, m.target.rows, m.target.square_mm) == (9, 5, 10.0)
    assert [e.f_number for e in m.with_role("white")] == [4.0, 5.656854249, 8.0]
    assert [e.path for e in m.with_role("devignetting")] == ["/home/libpleno/datasets/R12-A/whites/mask.png"]
    assert [e.frame for e in m.with_role("calibration")] == list(range(16))
    assert m.image_format.color == "rgb" and m.image_format.bit_depth == 8
    assert m.provenance["sources"][0]["files"] == [
        "camera.js",
        "intrinsics.js",
        "params.js",
        "poses.js",
        "scene.js",
        "images.js",
        "linked-observations-R12-A.bin.gz",
    ]

    # the camera, Ω and poses are exactly what plenocal's readers make of the source files...
    cam_file = read_camera_file(dataset.camera_path)
    assert cam_file.camera == lp.camera_from_intrinsics(libpleno_src / "intrinsics.js")
    assert cam_file.internal_parameters == lp.read_params(libpleno_src / "params.js")
    poses = read_poses(dataset.poses_path)
    src_poses = lp.read_poses(libpleno_src / "poses.js")
    assert sorted(poses) == sorted(src_poses) == list(range(16))
    for f in src_poses:
        assert np.array_equal(poses[f].rotation, src_poses[f].rotation)
        assert np.array_equal(poses[f].translation, src_poses[f].translation)
    # ...which are the R12-A data they were written from (to the last digits of a round trip)
    cam = cam_file.camera
    np.testing.assert_allclose(cam.mla.rotation_xyz_rad, r12a_camera.mla.rotation_xyz_rad, rtol=1e-12)
    same_tilt = dataclasses.replace(cam.mla, rotation_xyz_rad=r12a_camera.mla.rotation_xyz_rad)
    assert cam.replace(mla=same_tilt) == r12a_camera  # everything but the Euler angles exactly
    assert cam_file.internal_parameters == r12a_params
    assert all(np.array_equal(poses[f].rotation, r12a_poses[f].rotation) for f in r12a_poses)
    obs = read_observations(dataset.observations_path)
    for c in ("frame", "k", "l", "u", "v", "rho", "node"):
        assert np.array_equal(getattr(obs.bap, c), getattr(r12a_observations.bap, c))
    assert np.array_equal(obs.mic.u, r12a_observations.mic.u)


def test_import_prefers_bin_over_csv_and_reads_csv_alone(tmp_path, capsys, libpleno_src, r12a_observations):
    b = r12a_observations.bap
    shifted = Observations(BapFeatures(b.frame, b.k, b.l, b.u + 1.0, b.v, b.rho, b.node), r12a_observations.mic)
    lp.write_observations_csv(libpleno_src / "bap-R12-A.csv", libpleno_src / "center-R12-A.csv", shifted)
    assert main(["import-libpleno", str(libpleno_src), "-o", str(tmp_path / "a")]) == 0
    assert np.array_equal(read_observations(tmp_path / "a" / "observations.npz").bap.u, b.u)
    (libpleno_src / "linked-observations-R12-A.bin.gz").unlink()
    assert main(["import-libpleno", str(libpleno_src), "-o", str(tmp_path / "b")]) == 0
    obs = read_observations(tmp_path / "b" / "observations.npz")
    assert np.array_equal(obs.bap.u, b.u + 1.0) and np.array_equal(obs.mic.v, r12a_observations.mic.v)
    assert read_dataset(tmp_path / "b").manifest.provenance["sources"][0]["files"][-2:] == ["bap-R12-A.csv", "center-R12-A.csv"]


def test_import_existing_relative_images_without_warning(tmp_path, capsys, libpleno_src):
    (libpleno_src / "w.png").write_bytes(b"x")
    (libpleno_src / "c0.png").write_bytes(b"x")
    (libpleno_src / "images.js").write_text(
        json.dumps(
            {
                "meta": {"rgb": "false", "format": "16"},
                "whites": [{"path": "w.png", "fnumber": "8"}],
                "checkerboards": [{"path": "c0.png", "fnumber": "4"}],
            }
        )
    )
    ds = tmp_path / "ds"
    assert main(["import-libpleno", str(libpleno_src), "-o", str(ds), "--name", "mine"]) == 0
    assert capsys.readouterr().err == ""
    dataset = read_dataset(ds)
    assert dataset.manifest.name == "mine"
    assert dataset.missing_images() == []
    assert dataset.manifest.images[1].frame == 0  # frames default to the images.js order
    assert dataset.manifest.image_format.color == "grey" and dataset.manifest.image_format.bit_depth == 16


def test_import_params_without_intrinsics(tmp_path, capsys, libpleno_src, r12a_params):
    (libpleno_src / "intrinsics.js").unlink()
    ds = tmp_path / "ds"
    assert main(["import-libpleno", str(libpleno_src), "-o", str(ds)]) == 0
    assert not (ds / "camera.json").exists()
    from plenocal.io import read_internal_parameters

    omega = read_internal_parameters(ds / "internal_parameters.json")
    assert omega == lp.read_params(libpleno_src / "params.js") == r12a_params


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda s: (s / "scene.js").unlink(), "{src}: no scene.js: the checkerboard geometry"),
        (lambda s: [(s / n).unlink() for n in ("camera.js", "intrinsics.js")], "{src}: no camera.js or intrinsics.js"),
        (
            lambda s: (s / "poses.js").write_text('{"poses": [{"frame": "1"}]}'),
            "{src}/poses.js: missing key 'poses[0].pose'",
        ),
        (
            lambda s: (s / "linked-observations-R12-A.bin.gz").write_bytes(
                (s / "linked-observations-R12-A.bin.gz").read_bytes()[:100]
            ),
            "{src}/linked-observations-R12-A.bin.gz: truncated gzip stream",
        ),
        (lambda s: (s / "params.js").write_text('{"m": "-0.1",'), "{src}/params.js: malformed JSON"),
    ],
)
def test_import_bad_inputs(tmp_path, capsys, libpleno_src, setup, message):
    setup(libpleno_src)
    ds = tmp_path / "ds"
    code = main(["import-libpleno", str(libpleno_src), "-o", str(ds)])
    line = _error(capsys, code)
    assert line.startswith("plenocal import-libpleno: error: ")
    assert message.format(src=libpleno_src) in line
    assert not ds.exists()  # everything is validated before anything is written


def test_import_missing_source(tmp_path, capsys):
    line = _error(capsys, main(["import-libpleno", str(tmp_path / "none"), "-o", str(tmp_path / "ds")]))
    assert line == f"plenocal import-libpleno: error: {tmp_path / 'none'}: source folder does not exist"


# --- evaluate ----------------------------------------------------------------------------
@pytest.fixture
def dataset(tmp_path, capsys, libpleno_src) -> Path:
    ds = tmp_path / "dataset"
    assert main(["import-libpleno", str(libpleno_src), "-o", str(ds)]) == 0
    capsys.readouterr()
    return ds


def test_evaluate_noise_free(tmp_path, capsys, dataset, r12a_observations):
    out = tmp_path / "out"
    code = main(
        [
            "evaluate",
            str(dataset),
            "--camera",
            str(dataset / "camera.json"),
            "--poses",
            str(dataset / "poses.json"),
            "-o",
            str(out),
        ]
    )
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    assert report["format"] == "plenocal-evaluation"
    assert report["n_bap"] == len(r12a_observations.bap) and report["n_mic"] == len(r12a_observations.mic)
    for key in ("uv_px", "rho_px", "mic_px", "bap_px", "total_px"):
        assert report["rmse"][key] < 1e-9
    assert report["sum_squared_residuals"] < 1e-15
    assert sorted(report["per_frame"], key=int) == [str(f) for f in range(16)]
    assert sorted(report["per_type"]) == ["0", "1", "2"]
    assert "uv " in capsys.readouterr().out


def test_evaluate_with_known_noise(tmp_path, capsys, dataset, r12a_observations):
    rng = np.random.default_rng(7)
    b = r12a_observations.bap
    noise = rng.normal(0.0, 0.3, (len(b), 3))
    noisy = Observations(
        BapFeatures(b.frame, b.k, b.l, b.u + noise[:, 0], b.v + noise[:, 1], b.rho + noise[:, 2], b.node),
        r12a_observations.mic,
    )
    write_observations(dataset / "observations.npz", noisy)
    out = tmp_path / "out"
    # camera and poses default to the dataset's
    assert main(["evaluate", str(dataset), "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    n = len(b)
    assert report["rmse"]["uv_px"] == pytest.approx(np.sqrt(np.sum(noise[:, :2] ** 2) / n), rel=1e-9)
    assert report["rmse"]["uv_px"] == pytest.approx(0.3 * np.sqrt(2), rel=0.05)
    assert report["rmse"]["rho_px"] == pytest.approx(np.sqrt(np.mean(noise[:, 2] ** 2)), rel=1e-9)
    assert report["sum_squared_residuals"] == pytest.approx(np.sum(noise**2), rel=1e-9)
    sel = b.frame == 4
    assert report["per_frame"]["4"]["rmse"]["rho_px"] == pytest.approx(np.sqrt(np.mean(noise[sel, 2] ** 2)), rel=1e-9)


def test_evaluate_reports_frames_without_pose(tmp_path, capsys, dataset, r12a_poses):
    from plenocal.io import write_poses

    write_poses(tmp_path / "poses.json", {f: p for f, p in r12a_poses.items() if f != 5})
    out = tmp_path / "out"
    assert main(["evaluate", str(dataset), "--poses", str(tmp_path / "poses.json"), "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["skipped"]["frames_without_pose"] == {"5": 45 * 3}
    assert "5" not in report["per_frame"]
    assert "135 without pose" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (lambda d, t: ["--camera", str(t / "nope.json")], "{t}/nope.json: file does not exist"),
        (
            lambda d, t: ["--poses", str(d / "manifest.json")],
            "{d}/manifest.json: key 'format' must be 'plenocal-poses', got 'plenocal-dataset'",
        ),
        (lambda d, t: ["--observations", str(d / "camera.json")], "{d}/camera.json: not a .npz archive (expected a zip of .npy arrays)"),
    ],
)
def test_evaluate_bad_inputs(tmp_path, capsys, dataset, args, message):
    out = tmp_path / "out"
    code = main(["evaluate", str(dataset), *args(dataset, tmp_path), "-o", str(out)])
    line = _error(capsys, code)
    assert line.startswith("plenocal evaluate: error: ") and message.format(d=dataset, t=tmp_path) in line
    assert not out.exists()


def test_evaluate_without_camera_in_dataset(tmp_path, capsys, dataset):
    (dataset / "camera.json").unlink()
    line = _error(capsys, main(["evaluate", str(dataset), "-o", str(tmp_path / "o")]))
    assert line == f"plenocal evaluate: error: {dataset}: no camera.json in the dataset; pass --camera"


# --- export ------------------------------------------------------------------------------
def test_export_libpleno(tmp_path, capsys, dataset, r12a_camera, r12a_params, r12a_poses):
    out = tmp_path / "export"
    assert (
        main(["export-libpleno", str(dataset / "camera.json"), "-o", str(out), "--poses", str(dataset / "poses.json")])
        == 0
    )
    assert sorted(p.name for p in out.iterdir()) == ["intrinsics.js", "params.js", "poses.js"]
    cam = lp.camera_from_intrinsics(out / "intrinsics.js")
    np.testing.assert_allclose(cam.principal_point_px, r12a_camera.principal_point_px, rtol=1e-13)
    np.testing.assert_allclose(cam.mla.translation_mm, r12a_camera.mla.translation_mm, rtol=1e-13)
    assert cam.mla.focal_lengths_mm == r12a_camera.mla.focal_lengths_mm
    assert lp.read_params(out / "params.js").q_mm == r12a_params.q_mm
    assert lp.read_poses(out / "poses.js")[15].allclose(r12a_poses[15], atol=1e-12)
    doc = json.loads((out / "intrinsics.js").read_text())
    assert doc["mode"] == "2" and isinstance(doc["sensor"]["scale"], str)


def test_export_without_omega_and_errors(tmp_path, capsys, r12a_camera):
    from plenocal.io import write_camera

    cam_path = write_camera(tmp_path / "camera.json", r12a_camera)
    out = tmp_path / "export"
    assert main(["export-libpleno", str(cam_path), "-o", str(out), "--generation", "legacy"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["intrinsics.js"]  # legacy: Ω only from the camera file
    line = _error(capsys, main(["export-libpleno", str(tmp_path / "missing.json"), "-o", str(out)]))
    assert line == f"plenocal export-libpleno: error: {tmp_path / 'missing.json'}: file does not exist"
