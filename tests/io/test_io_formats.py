"""plenocal's own file formats (docs/formats.md): exact round trips and one-line errors."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from plenocal.errors import InputFileError
from plenocal.io import (
    CameraSpec,
    GroundTruth,
    ImageEntry,
    ImageFormat,
    ImageRole,
    Manifest,
    atomic_output,
    atomic_write_text,
    export_observations_csv,
    read_camera,
    read_camera_file,
    read_dataset,
    read_internal_parameters,
    read_observations,
    read_poses,
    write_camera,
    write_internal_parameters,
    write_manifest,
    write_observations,
    write_poses,
)
from plenocal.io._csv import read_numeric_csv
from plenocal.model import Pose
from plenocal.model.camera import Configuration
from plenocal.model.lattice import Lattice, LatticeKind
from plenocal.model.observations import BapFeatures, MicroImageCentres, Observations
from plenocal.model.target import Checkerboard


def _one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


# --- atomic writes ----------------------------------------------------------------------
def test_atomic_write_replaces_and_leaves_no_temporary(tmp_path: Path):
    target = tmp_path / "sub" / "a.txt"
    atomic_write_text(target, "first")
    atomic_write_text(target, "second")
    assert target.read_text() == "second"
    assert sorted(p.name for p in target.parent.iterdir()) == ["a.txt"]


def test_atomic_write_failure_keeps_previous_content(tmp_path: Path):
    target = tmp_path / "poses.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_output(target) as tmp:
        tmp.write_text("half a fi")
        raise RuntimeError("interrupted")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["poses.json"]


def test_atomic_write_into_folder_path_is_an_error(tmp_path: Path):
    with pytest.raises(InputFileError, match="output path is a folder"):
        atomic_write_text(tmp_path, "x")


# --- camera.json ------------------------------------------------------------------------
def test_camera_round_trip_is_exact(tmp_path: Path, r12a_camera, r12a_params):
    path = tmp_path / "camera.json"
    unc = {"focal_length_mm": 0.01}
    prov = {"generator": "test", "seed": 3}
    write_camera(path, r12a_camera, internal_parameters=r12a_params, uncertainty=unc, provenance=prov)
    back = read_camera_file(path)
    assert back.camera == r12a_camera
    assert back.internal_parameters == r12a_params
    assert back.uncertainty == unc and back.provenance == prov
    doc = json.loads(path.read_text())
    assert doc["format"] == "plenocal-camera" and doc["version"] == 1
    assert doc["focus_distance_mm"] == 450.0
    assert doc["derived"]["d_mm"] == pytest.approx(0.324774, abs=1e-6)
    assert isinstance(doc["sensor"]["pixel_size_mm"], float)


def test_camera_exit_pupil_round_trip_and_default(tmp_path: Path, r12a_camera):
    """``main_lens.exit_pupil_mm`` round-trips; a file without it (older files, the paper's lens)
    reads as 0."""
    import dataclasses

    from plenocal.model.camera import MainLens

    cam = r12a_camera.replace(main_lens=MainLens(50.0, 4.0, -7.3),
                              distortion=dataclasses.replace(r12a_camera.distortion, z1=0.0034, z2=-1e-6))
    path = write_camera(tmp_path / "c.json", cam)
    assert read_camera_file(path).camera == cam
    doc = json.loads(path.read_text())
    assert doc["main_lens"]["exit_pupil_mm"] == -7.3
    del doc["main_lens"]["exit_pupil_mm"]
    (tmp_path / "old.json").write_text(json.dumps(doc))
    assert read_camera_file(tmp_path / "old.json").camera.main_lens.exit_pupil_mm == 0.0


def test_omega_lenslet_trend_round_trip_and_check(tmp_path: Path, r12a_camera, r12a_params):
    """Ω's ``lenslet_trend`` (the whites' blur-disc change across the field) round-trips; Ω
    without it reads as None; a σ that is not positive is one line."""
    import dataclasses

    from plenocal.model.white import LensletFieldTrend

    n = r12a_params.n_types
    omega = dataclasses.replace(r12a_params, lenslet_trend=LensletFieldTrend(5.0, (-0.016, -0.028, -0.023)[:n],
                                                                             (4.7e-4, 5.4e-4, 4.9e-4)[:n], 5.88))
    path = write_camera(tmp_path / "c.json", r12a_camera, internal_parameters=omega)
    assert read_camera_file(path).internal_parameters == omega
    doc = json.loads(path.read_text())
    doc["internal_parameters"]["lenslet_trend"]["std"][0] = 0.0
    path.write_text(json.dumps(doc))
    with pytest.raises(InputFileError) as exc:
        read_camera(path)
    assert "internal_parameters.lenslet_trend.std[0]" in _one_line(exc)
    plain = write_camera(tmp_path / "p.json", r12a_camera, internal_parameters=r12a_params)
    assert read_camera_file(plain).internal_parameters.lenslet_trend is None


def test_camera_infinite_focus_and_defaults(tmp_path: Path, r12a_camera):
    cam = r12a_camera.replace(focus_distance_mm=math.inf, configuration=Configuration.KEPLERIAN)
    path = write_camera(tmp_path / "c.json", cam)
    doc = json.loads(path.read_text())
    assert doc["focus_distance_mm"] is None
    assert "internal_parameters" not in doc
    assert read_camera(path) == cam
    # mia and distortion may be omitted: consistent MIA, zero distortion
    del doc["mia"], doc["distortion"]
    path.write_text(json.dumps(doc))
    cam2 = read_camera(path)
    assert cam2.distortion.is_zero
    assert cam2.grid.pitch_px[0] == pytest.approx(23.31, abs=0.05)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["sensor"].pop("pixel_size_mm"), "missing key 'sensor.pixel_size_mm'"),
        (
            lambda d: d["sensor"].__setitem__("pixel_size_mm", -0.0055),
            "key 'sensor.pixel_size_mm' must be > 0, got -0.0055",
        ),
        (lambda d: d["mla"].__setitem__("pitch_mm", [0.1]), "key 'mla.pitch_mm' must have 2 numbers, got 1"),
        (
            lambda d: d["main_lens"].__setitem__("focal_length_mm", "50"),
            "key 'main_lens.focal_length_mm' must be a number, got '50'",
        ),
        (
            lambda d: d.__setitem__("configuration", "weird"),
            "key 'configuration' must be one of galilean, keplerian, unfocused, got 'weird'",
        ),
        (lambda d: d["mla"]["lattice"].__setitem__("kind", "square"), "key 'mla.lattice.kind' must be one of"),
        (
            lambda d: d.__setitem__("format", "plenocal-poses"),
            "key 'format' must be 'plenocal-camera', got 'plenocal-poses'",
        ),
        (lambda d: d.__setitem__("version", 7), "unsupported version 7"),
        (lambda d: d["mla"]["translation_mm"].__setitem__(2, 1.0), "MLA must lie behind the main lens"),
        (lambda d: d["mla"]["focal_lengths_mm"].__setitem__(0, 0.0), "mla.focal_lengths_mm[0] must be > 0"),
    ],
)
def test_camera_bad_input_is_one_line(tmp_path: Path, r12a_camera, edit, message):
    path = write_camera(tmp_path / "camera.json", r12a_camera)
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(InputFileError) as exc:
        read_camera(path)
    msg = _one_line(exc)
    assert msg.startswith(f"{path}: ")
    assert message in msg


def test_malformed_and_missing_json(tmp_path: Path):
    bad = tmp_path / "camera.json"
    bad.write_text('{"format": "plenocal-camera",\n "version": 1,,}')
    with pytest.raises(InputFileError) as exc:
        read_camera(bad)
    assert (
        _one_line(exc)
        == f"{bad}: malformed JSON at line 2 column 15: Expecting property name enclosed in double quotes"
    )
    with pytest.raises(InputFileError, match="file does not exist"):
        read_camera(tmp_path / "nope.json")
    bad.write_text("[1, 2]")
    with pytest.raises(InputFileError, match="top level must be a JSON object, got list"):
        read_camera(bad)


def test_internal_parameters_file_round_trip(tmp_path: Path, r12a_params):
    path = write_internal_parameters(tmp_path / "internal_parameters.json", r12a_params)
    assert read_internal_parameters(path) == r12a_params


# --- poses.json -------------------------------------------------------------------------
def test_poses_round_trip_is_bit_exact(tmp_path: Path, r12a_poses):
    path = write_poses(tmp_path / "poses.json", r12a_poses)
    back = read_poses(path)
    assert sorted(back) == sorted(r12a_poses) == list(range(16))
    for f, pose in r12a_poses.items():
        assert np.array_equal(back[f].rotation, pose.rotation)
        assert np.array_equal(back[f].translation, pose.translation)
    doc = json.loads(path.read_text())
    assert doc["convention"] == "cam_from_world"
    assert [e["frame"] for e in doc["poses"]] == list(range(16))
    # row-major rotation
    assert doc["poses"][15]["rotation"][0][1] == r12a_poses[15].rotation[0, 1]


def test_poses_carry_the_node_extent_of_relative_frames(tmp_path: Path, r12a_poses):
    """A frame linked with relative node ids keeps its pose and says which part of the board it
    places (``node_extent``); the other frames say nothing; a bad extent is one line."""
    from plenocal.io.poses import read_node_extents

    path = write_poses(tmp_path / "poses.json", r12a_poses, node_extents={3: (1, 8, 0, 3)})
    assert read_node_extents(path) == {3: (1, 8, 0, 3)}
    assert np.array_equal(read_poses(path)[3].translation, r12a_poses[3].translation)
    doc = json.loads(path.read_text())
    assert doc["poses"][3]["relative_ids"] is True and "node_extent" not in doc["poses"][2]
    assert read_node_extents(write_poses(tmp_path / "p2.json", r12a_poses)) == {}
    doc["poses"][3]["node_extent"] = [8, 1, 0, 3]
    path.write_text(json.dumps(doc))
    with pytest.raises(InputFileError, match=r"key 'poses\[3\].node_extent' must be \[first column"):
        read_node_extents(path)


def test_poses_bad_input(tmp_path: Path):
    path = write_poses(tmp_path / "poses.json", {0: Pose.identity(), 1: Pose.identity()})
    doc = json.loads(path.read_text())
    doc["poses"][1]["frame"] = 0
    path.write_text(json.dumps(doc))
    with pytest.raises(InputFileError, match=r"frame 0 appears twice \(key 'poses\[1\].frame'\)"):
        read_poses(path)
    doc["poses"][1]["frame"] = 1
    doc["poses"][1]["rotation"] = [[2, 0, 0], [0, 1, 0], [0, 0, 1]]
    path.write_text(json.dumps(doc))
    with pytest.raises(InputFileError, match=r"key 'poses\[1\].rotation' must be a rotation matrix"):
        read_poses(path)
    doc["poses"][1]["rotation"] = [[1, 0, 0], [0, 1, 0]]
    path.write_text(json.dumps(doc))
    with pytest.raises(InputFileError, match=r"key 'poses\[1\].rotation' must be a 3x3 nested list"):
        read_poses(path)


# --- observations.npz -------------------------------------------------------------------
def _observations(n: int = 50, m: int = 20, seed: int = 0) -> Observations:
    rng = np.random.default_rng(seed)
    bap = BapFeatures(
        frame=rng.integers(0, 5, n),
        k=rng.integers(0, 176, n),
        l=rng.integers(0, 152, n),
        u=rng.uniform(0, 4080, n),
        v=rng.uniform(0, 3068, n),
        rho=rng.normal(0, 3, n),
        node=rng.integers(-1, 45, n),
        cluster=rng.integers(-1, 100, n),
    )
    mic = MicroImageCentres(
        k=rng.integers(0, 176, m), l=rng.integers(0, 152, m), u=rng.uniform(0, 4080, m), v=rng.uniform(0, 3068, m)
    )
    return Observations(bap, mic)


def _assert_same_observations(a: Observations, b: Observations) -> None:
    for name, col in a.bap.columns().items():
        other = getattr(b.bap, name)
        assert other.dtype == col.dtype and np.array_equal(other, col), name
    for name, col in a.mic.columns().items():
        other = getattr(b.mic, name)
        assert other.dtype == col.dtype and np.array_equal(other, col), name


def test_observations_npz_round_trip(tmp_path: Path):
    obs = _observations()
    path = write_observations(tmp_path / "observations.npz", obs)
    _assert_same_observations(read_observations(path), obs)
    with np.load(path) as data:
        assert sorted(data.files) == sorted(
            [f"bap_{c}" for c in ("frame", "k", "l", "u", "v", "rho", "node", "cluster")]
            + [f"mic_{c}" for c in ("k", "l", "u", "v")] + ["positions"]
        )
        assert data["bap_k"].dtype == np.int32 and data["bap_u"].dtype == np.float64
        assert str(data["positions"]) == "chief-ray"


def test_observations_keep_their_relative_frames(tmp_path: Path):
    """The frames linked with relative node ids survive the file (none in older files), and a
    frame's linked nodes' extent is read from its node ids."""
    obs = _observations()
    rel = Observations(obs.bap, obs.mic, relative_frames=(1, 3))
    back = read_observations(write_observations(tmp_path / "o.npz", rel))
    assert back.relative_frames == (1, 3)
    assert read_observations(write_observations(tmp_path / "p.npz", obs)).relative_frames == ()
    nodes = back.bap.node[(back.bap.frame == 1) & (back.bap.node >= 0)]
    c0, c1, r0, r1 = back.node_extent(1, columns=9)
    assert (c0, c1, r0, r1) == ((nodes % 9).min(), (nodes % 9).max(), (nodes // 9).min(), (nodes // 9).max())


def test_observations_empty_round_trip(tmp_path: Path):
    obs = Observations(BapFeatures.empty(), MicroImageCentres.empty())
    back = read_observations(write_observations(tmp_path / "o.npz", obs))
    assert len(back.bap) == 0 and len(back.mic) == 0


def test_observations_bad_npz(tmp_path: Path):
    obs = _observations()
    arrays = {f"bap_{c}": v for c, v in obs.bap.columns().items()} | {
        f"mic_{c}": v for c, v in obs.mic.columns().items()
    }
    p = tmp_path / "o.npz"
    np.savez(p, **{k: v for k, v in arrays.items() if k != "bap_rho"})
    with pytest.raises(InputFileError, match=f"{p}: missing array 'bap_rho'"):
        read_observations(p)
    np.savez(p, **(arrays | {"bap_rho": arrays["bap_rho"][:-1]}))
    with pytest.raises(InputFileError, match="array 'bap_rho' has 49 rows, expected 50"):
        read_observations(p)
    np.savez(p, **(arrays | {"bap_k": arrays["bap_k"].astype(float)}))
    with pytest.raises(InputFileError, match="array 'bap_k' must be integers, got dtype float64"):
        read_observations(p)
    p.write_bytes(b"PK\x03\x04garbage")
    with pytest.raises(InputFileError, match=r"not a readable \.npz archive"):
        read_observations(p)


def test_observations_csv_export_has_full_precision(tmp_path: Path):
    obs = _observations()
    bap_path, mic_path = export_observations_csv(tmp_path, obs)
    assert bap_path.read_text().splitlines()[0] == "frame,k,l,u,v,rho,node,cluster"
    assert mic_path.read_text().splitlines()[0] == "k,l,u,v"
    bap = read_numeric_csv(bap_path, "frame,k,l,u,v,rho,node,cluster".split(","))
    assert np.array_equal(bap[:, 3], obs.bap.u) and np.array_equal(bap[:, 5], obs.bap.rho)
    assert np.array_equal(bap[:, 6].astype(np.int32), obs.bap.node)
    mic = read_numeric_csv(mic_path, ["k", "l", "u", "v"])
    assert np.array_equal(mic[:, 2], obs.mic.u)


# --- manifest ---------------------------------------------------------------------------
def _manifest() -> Manifest:
    return Manifest(
        name="r12-a",
        camera_spec=CameraSpec(
            pixel_size_mm=0.0055,
            width_px=4080,
            height_px=3068,
            lattice=Lattice(LatticeKind.HEX_ROWS, 176, 152),
            n_types=3,
            type_row_shift=(0, 1),
            main_lens_focal_length_mm=50.0,
            focus_distance_mm=450.0,
            configuration=Configuration.GALILEAN,
        ),
        target=Checkerboard(9, 5, 10.0),
        image_format=ImageFormat(16, "bayer-rggb"),
        images=(
            ImageEntry("images/white-f4.png", ImageRole.WHITE, f_number=4.0),
            ImageEntry("images/devignetting.png", ImageRole.DEVIGNETTING, f_number=4.0),
            ImageEntry("images/calib-000.png", ImageRole.CALIBRATION, f_number=4.0, frame=0),
            ImageEntry("images/eval-000.png", ImageRole.EVALUATION, frame=100),
            ImageEntry("images/trans-000.png", ImageRole.TRANSLATION, frame=200, sequence=0, displacement_mm=0.0),
            ImageEntry("images/trans-001.png", ImageRole.TRANSLATION, frame=201, sequence=0, displacement_mm=10.0),
        ),
        observations="observations.npz",
        ground_truth=GroundTruth("ground_truth/camera.json", "ground_truth/poses.json", None),
        provenance={"generator": "plenocal simulate", "seed": 0},
    )


def test_manifest_round_trip(tmp_path: Path):
    m = _manifest()
    write_manifest(tmp_path, m)
    ds = read_dataset(tmp_path)
    assert ds.manifest == m
    assert ds.folder == tmp_path
    assert [e.frame for e in m.with_role("translation")] == [200, 201]
    assert ds.observations_path == tmp_path / "observations.npz"
    assert ds.camera_path is None
    assert len(ds.missing_images()) == 6
    # defaults: infinite focus and unknown configuration are written as null
    m2 = Manifest(CameraSpec(0.0055, 100, 80), Checkerboard(3, 2, 5.0))
    write_manifest(tmp_path, m2)
    doc = json.loads((tmp_path / "manifest.json").read_text())
    assert doc["camera_spec"]["focus_distance_mm"] is None and doc["camera_spec"]["configuration"] is None
    assert read_dataset(tmp_path).manifest == m2


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["images"][5].__setitem__("frame", 200), "frame 200 is used by images[4] and images[5]"),
        (lambda d: d["images"][0].pop("f_number"), "key 'images[0].f_number' is required for a white image"),
        (lambda d: d["images"][2].pop("frame"), "missing key 'images[2].frame' (required for a calibration image)"),
        (lambda d: d["images"][4].pop("sequence"), "key 'images[4]' is a translation image"),
        (
            lambda d: d["images"][1].__setitem__("role", "flat"),
            "key 'images[1].role' must be one of white, devignetting",
        ),
        (lambda d: d["target"].__setitem__("columns", 1), "target: checkerboard needs >= 2x2 nodes, got 1x5"),
        (
            lambda d: d["image_format"].__setitem__("bit_depth", 12),
            "key 'image_format.bit_depth' must be 8 or 16, got 12",
        ),
        (lambda d: d["camera_spec"].pop("width_px"), "missing key 'camera_spec.width_px'"),
        (
            lambda d: d["image_format"].__setitem__("color", "cmyk"),
            "key 'image_format.color' must be one of grey, rgb, bayer-rggb",
        ),
    ],
)
def test_manifest_bad_input(tmp_path: Path, edit, message):
    path = write_manifest(tmp_path, _manifest())
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(InputFileError) as exc:
        read_dataset(tmp_path)
    msg = _one_line(exc)
    assert msg.startswith(f"{path}: ") and message in msg


def test_read_dataset_missing(tmp_path: Path):
    with pytest.raises(InputFileError, match="dataset folder does not exist"):
        read_dataset(tmp_path / "nothing")
    with pytest.raises(InputFileError, match=r"manifest.json: file does not exist"):
        read_dataset(tmp_path)


def test_writers_never_touch_other_files(tmp_path: Path, r12a_camera):
    src = tmp_path / "input.json"
    src.write_text("keep")
    before = os.stat(src).st_mtime_ns
    write_camera(tmp_path / "camera.json", r12a_camera)
    assert src.read_text() == "keep" and os.stat(src).st_mtime_ns == before


def test_camera_model_field_round_trip_and_check(tmp_path):
    """``model_field`` is passed through, its radius checked on reading."""
    import json

    from plenocal.errors import InputFileError
    from plenocal.io.camera import read_camera_file, write_camera
    from plenocal.sim.presets import preset

    cam = preset("r12-a", small=True).camera
    path = write_camera(tmp_path / "camera.json", cam, model_field={"radius_mm": 6.35, "reach_mm": 11.4, "rings": []})
    f = read_camera_file(path)
    assert f.field_radius_mm == 6.35 and f.model_field["reach_mm"] == 11.4 and f.camera == cam
    path = write_camera(tmp_path / "camera.json", cam, model_field={"radius_mm": None})
    assert read_camera_file(path).field_radius_mm is None
    assert read_camera_file(write_camera(tmp_path / "plain.json", cam)).field_radius_mm is None
    doc = json.loads(path.read_text())
    doc["model_field"]["radius_mm"] = -1.0
    path.write_text(json.dumps(doc))
    with pytest.raises(InputFileError, match="model_field"):
        read_camera_file(path)
