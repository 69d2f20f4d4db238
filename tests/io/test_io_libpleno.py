"""The libpleno adapter: lossless typed documents, conversions, observation CSVs and .bin.gz."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import struct
from pathlib import Path

import numpy as np
import pytest

from plenocal.errors import DataError, InputFileError
from plenocal.io import libpleno as lp
from plenocal.io import read_camera_file, read_manifest, read_poses
from plenocal.io.libpleno.importer import import_libpleno_folder
from plenocal.model import Pose, project_bap
from plenocal.model.camera import Configuration, MicroLensArray, consistent_mia
from plenocal.model.lattice import Lattice, LatticeKind, TypeLayout
from plenocal.model.observations import BapFeatures, MicroImageCentres, Observations
from plenocal.model.target import Checkerboard

FILES = {
    "camera.js": (lp.read_camera_config, lp.write_camera_config),
    "intrinsics.js": (lp.read_camera_config, lp.write_camera_config),
    "params.js": (lp.read_params_doc, lp.write_params_doc),
    "poses.js": (lp.read_poses_doc, lp.write_poses_doc),
    "scene.js": (lp.read_scene_doc, lp.write_scene_doc),
    "images.js": (lp.read_images_doc, lp.write_images_doc),
}

# libpleno's own R12-A files (examples/config, legacy generation; reference §10, §12), spelt as
# libpleno spells them: numbers as strings (Boost, 17 digits) or bare, matrices and vectors column by
# column, the legacy mode "1", the stale λ "0.9931", the misspelt meta key "debayer". The numbers
# are those of tests/data/r12a (test_data_is_libpleno_r12a); poses.js holds frame 15 only (§13.1).
_I3 = [["1", "0", "0"], ["0", "1", "0"], ["0", "0", "1"]]
_DATASETS = "/home/libpleno/datasets/R12-A"
LIBPLENO = {
    "intrinsics.js": {
        "I": "3",
        "dist_focus": "450",
        "distortions": {
            "radial": [["0.00024657258089122469", "-2.9983956277223525e-06", "1.0628357104366146e-08"]],
            "tangential": [["-0.00014585251380790432", "-6.3401926060785413e-05"]],
        },
        "main_lens": {
            "aperture": "4",
            "diameter": "12.42862013506163",
            "f": "49.71448054024652",
            "pose": {"rotation": _I3, "translation": [["0", "0", "0"]]},
        },
        "mia": {
            "mesh": {
                "geometry": "1",
                "height": "152",
                "pitch": [["23.312549752933641", "23.313498208116211"]],
                "pose": {
                    "rotation": [
                        ["0.99999999999984723", "-5.5276960199817039e-07"],
                        ["5.5276960199817039e-07", "0.99999999999984723"],
                    ],
                    "translation": [["-13.208877150299378", "4.7991151107867527"]],
                },
                "width": "176",
            }
        },
        "mla": {
            "focal_lengths": ["0.57818208988513875", "0.50541641184977304", "0.5520790410441998"],
            "mesh": {
                "geometry": "1",
                "height": "152",
                "pitch": [["0.12745529429620778", "0.12745529429620778"]],
                "pose": {
                    "rotation": [
                        ["0.99999979657721227", "-3.1460822018189899e-05", "0.00063706808913170535"],
                        ["3.0923680798246481e-05", "0.99999964408095765", "0.00084313799763195609"],
                        ["-0.00063709438820152924", "-0.00084311812562824578", "0.99999944163112819"],
                    ],
                    "translation": [["-10.974348707345417", "-7.8871691280106679", "-56.700741714110258"]],
                },
                "width": "176",
            },
        },
        "mode": "1",
        "sensor": {
            "height": "3068",
            "pose": {
                "rotation": _I3,
                "translation": [["-11.044749856820317", "-8.0083786581889367", "-57.025516075246571"]],
            },
            "scale": "0.0054999999999999997",
            "width": "4080",
        },
    },
    "params.js": {
        "m": "-0.14059554040431976",
        "scale": "0.0054999999999999997",
        "q": ["-0.028975624591112137", "-0.023842610418796539", "-0.027288669720292091"],
        "q_prime": ["0.035135191355331399", "0.040268205527646997", "0.036822146226151445"],
        "dc": "0.12822163189288707",
        "dC": "0.12750456894191076",
        "lambda": "0.9931",
        "kappa": "0.680851",
        "N": "4",
        "I": "3",
    },
    "poses.js": {
        "poses": [
            {
                "frame": "15",
                "pose": {
                    "rotation": [
                        ["0.99857248468323279", "-0.031800262589597242", "-0.04291545330981434"],
                        ["0.031844300948129241", "0.99949278287120058", "0.00034276159117996362"],
                        ["0.04288278594820024", "-0.001708884904281674", "0.99907864874678609"],
                    ],
                    "translation": [["32.061683626280427", "24.845847365769764", "-239.94483248657971"]],
                },
            }
        ]
    },
    "camera.js": {
        "mia": {"mesh": {"geometry": 1, "width": 176, "height": 152}},
        "sensor": {"scale": 0.0055, "width": 4080, "height": 3068},
        "main_lens": {"aperture": 4.0, "f": 50.0},
        "dist_focus": 450.0,
        "I": 3,
        "mode": 2,
    },
    "scene.js": {
        "checkerboards": [
            {
                "lph": 10.0,
                "pose": {
                    "rotation": [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
                    "translation": [[0.0, 0.0, 0.0]],
                },
                "x_grid": 9,
                "y_grid": 5,
            }
        ]
    },
    "images.js": {
        "meta": {"debayer": True, "rgb": True, "format": 8},
        "whites": [
            {"path": f"{_DATASETS}/whites/white-n-{n}.png", "fnumber": f}
            for n, f in (("4", "4.0"), ("5.6", "5.656854249"), ("8", "8.0"))
        ],
        "checkerboards": [
            {"path": f"{_DATASETS}/checkerboards/checkerboard-{2 * i}.png", "fnumber": "4.0", "frame": i}
            for i in range(16)
        ],
        "mask": {"path": f"{_DATASETS}/whites/mask.png", "fnumber": "4.0"},
    },
}


@pytest.fixture
def libpleno_file(tmp_path: Path):
    """Write one of libpleno's files (``LIBPLENO``) into a fresh folder; returns its path."""
    folder = tmp_path / "libpleno"
    folder.mkdir()

    def write(name: str) -> Path:
        path = folder / name
        path.write_text(json.dumps(LIBPLENO[name], indent=4))
        return path

    return write


def test_data_is_libpleno_r12a(tmp_path: Path, libpleno_file, r12a_manifest, r12a_camera, r12a_params, r12a_poses):
    """tests/data/r12a holds exactly what plenocal reads from libpleno's R12-A files."""
    paths = {name: libpleno_file(name) for name in LIBPLENO}
    src = paths["intrinsics.js"].parent
    result = import_libpleno_folder(src, tmp_path / "ds", name=r12a_manifest.name)
    assert len(result.warnings) == 1 and "20 of 20 images do not exist" in result.warnings[0]
    cam_file = read_camera_file(tmp_path / "ds" / "camera.json")
    assert cam_file.camera == lp.camera_from_intrinsics(src / "intrinsics.js") == r12a_camera
    assert cam_file.internal_parameters == lp.read_params(src / "params.js") == r12a_params
    pose = read_poses(tmp_path / "ds" / "poses.json")[15]
    assert np.array_equal(pose.rotation, r12a_poses[15].rotation)
    assert np.array_equal(pose.translation, r12a_poses[15].translation)
    manifest = read_manifest(tmp_path / "ds" / "manifest.json")
    assert dataclasses.replace(manifest, provenance=None) == dataclasses.replace(r12a_manifest, provenance=None)


def _leaf(x):
    if isinstance(x, bool):
        return x
    if isinstance(x, str) and x in ("true", "false"):
        return x == "true"
    try:
        return float(x)
    except (TypeError, ValueError):
        return x


def _same_tree(a, b, where="") -> None:
    """Same keys, list lengths and values (string numbers compared as numbers)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), f"{where}: {sorted(a)} vs {sorted(b)}"
        for k in a:
            _same_tree(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same_tree(x, y, f"{where}[{i}]")
    else:
        assert _leaf(a) == _leaf(b), f"{where}: {a!r} vs {b!r}"


@pytest.mark.parametrize("source", ["libpleno", "plenocal"])
@pytest.mark.parametrize("name", sorted(FILES))
def test_read_write_read_is_lossless(tmp_path: Path, libpleno_file, r12a_libpleno_dir: Path, name: str, source: str):
    """Files as libpleno spells them, and as plenocal's writers spell them."""
    read, write = FILES[name]
    src = libpleno_file(name) if source == "libpleno" else r12a_libpleno_dir / name
    first = read(src)
    out = write(tmp_path / name, first)
    assert read(out) == first
    # same structure and the same numbers as the source file, every number a string
    original = json.loads(src.read_text())
    written = json.loads(out.read_text())
    _same_tree(original, written)

    def strings_only(x):
        if isinstance(x, dict):
            return all(strings_only(v) for v in x.values())
        if isinstance(x, list):
            return all(strings_only(v) for v in x)
        return isinstance(x, str) or isinstance(x, bool)

    assert strings_only(written)


def test_typed_intrinsics_values_and_column_major(libpleno_file, tmp_path: Path):
    doc = lp.read_camera_config(libpleno_file("intrinsics.js"))
    assert doc.I == 3 and doc.mode == 1 and doc.dist_focus == 450.0
    assert doc.mla is not None and doc.mla.pose is not None
    # the file stores columns: rotation[0] = (R00, R10, R20)
    assert doc.mla.pose.rotation[1][0] == -3.1460822018189899e-05
    assert doc.mla.pose.rotation[0][1] == 3.0923680798246481e-05
    assert doc.mla.pose.translation == (-10.974348707345417, -7.8871691280106679, -56.700741714110258)
    written = json.loads(lp.write_camera_config(tmp_path / "i.js", doc).read_text())
    assert written["mla"]["mesh"]["pose"]["rotation"][0][1] == "-3.14608220181899e-05"
    assert float(written["sensor"]["scale"]) == 0.0055


def test_images_doc_keeps_unknown_meta_key(libpleno_file):
    doc = lp.read_images_doc(libpleno_file("images.js"))
    assert doc.debayered is None and doc.meta_extra == {"debayer": True}
    assert doc.rgb is True and doc.bit_depth == 8
    assert len(doc.whites) == 3 and doc.whites[1].fnumber == 5.656854249
    assert [c.frame for c in doc.checkerboards] == list(range(16))
    assert doc.mask is not None and doc.mask.path.endswith("mask.png")


# --- conversions -------------------------------------------------------------------------
def _camera_close(a, b, tol=1e-12):
    assert a.configuration is b.configuration
    assert a.mla.lattice == b.mla.lattice and a.mla.types == b.mla.types
    np.testing.assert_allclose(a.mla.pitch_mm, b.mla.pitch_mm, rtol=tol)
    np.testing.assert_allclose(a.mla.rotation_xyz_rad, b.mla.rotation_xyz_rad, atol=tol)
    np.testing.assert_allclose(a.mla.translation_mm, b.mla.translation_mm, rtol=tol, atol=tol)
    np.testing.assert_allclose(a.mla.focal_lengths_mm, b.mla.focal_lengths_mm, rtol=tol)
    np.testing.assert_allclose(a.sensor.principal_point_px, b.sensor.principal_point_px, rtol=tol)
    assert a.sensor.distance_mm == pytest.approx(b.sensor.distance_mm, rel=tol)
    assert (a.sensor.width_px, a.sensor.height_px, a.sensor.pixel_size_mm) == (
        b.sensor.width_px,
        b.sensor.height_px,
        b.sensor.pixel_size_mm,
    )
    np.testing.assert_allclose(a.grid.pitch_px, b.grid.pitch_px, rtol=tol)
    np.testing.assert_allclose(a.grid.offset_px, b.grid.offset_px, rtol=tol, atol=tol)
    assert a.grid.rotation_rad == pytest.approx(b.grid.rotation_rad, abs=tol)
    assert a.main_lens == b.main_lens and a.distortion == b.distortion
    assert a.focus_distance_mm == b.focus_distance_mm


def test_camera_to_intrinsics_and_back(tmp_path: Path, r12a_camera):
    path = lp.write_intrinsics(tmp_path / "intrinsics.js", r12a_camera)
    _camera_close(lp.camera_from_intrinsics(path), r12a_camera)


def test_written_intrinsics_match_libpleno_file(tmp_path: Path, libpleno_file, r12a_camera):
    """plenocal -> libpleno reproduces libpleno's own numbers (sensor, MLA and MIA poses)."""
    ours = lp.config_from_camera(r12a_camera)
    ref = lp.read_camera_config(libpleno_file("intrinsics.js"))
    assert ours.mode == 2  # Galilean (the legacy file says 1, reference §10.2)
    np.testing.assert_allclose(ours.sensor.pose.translation, ref.sensor.pose.translation, rtol=1e-13)
    np.testing.assert_allclose(ours.mla.pose.translation, ref.mla.pose.translation, rtol=1e-13)
    np.testing.assert_allclose(ours.mla.pose.rotation, ref.mla.pose.rotation, atol=1e-15)
    np.testing.assert_allclose(ours.mia.pose.rotation, ref.mia.pose.rotation, atol=1e-15)
    assert ours.mia.pose.translation == ref.mia.pose.translation
    assert ours.main_lens.diameter == pytest.approx(ref.main_lens.diameter, rel=1e-15)
    assert ours.focal_lengths == ref.focal_lengths
    assert ours.distortions.radial == ref.distortions.radial


def test_legacy_export_is_libpleno_file(tmp_path: Path, libpleno_file, r12a_camera, r12a_params):
    """libpleno's R12-A files read and written back in the legacy layout: every number to float
    precision (rotation entries relative to 1: the matrix is rebuilt from plenocal's Euler angles),
    the same keys but plenocal's own; only the legacy file's `mode` "1" (pre-Dec-2020 code, ignored
    on load) and params' stale λ differ (benchmarks/check_export.py does it on the shared files)."""
    cam = lp.camera_from_intrinsics(libpleno_file("intrinsics.js"))
    written = json.loads(lp.write_intrinsics(tmp_path / "intrinsics.js", cam).read_text())
    original = LIBPLENO["intrinsics.js"]
    assert set(written) == set(original) | {"plenocal_rho_form"} and written["plenocal_rho_form"] == "legacy"
    assert (written["mode"], original["mode"]) == ("2", "1")

    def close(a, b, where):
        if isinstance(a, dict):
            assert sorted(a) == sorted(b), where
            for k in a:
                close(a[k], b[k], f"{where}.{k}")
        elif isinstance(a, list):
            assert len(a) == len(b), where
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                close(x, y, f"{where}[{i}]")
        else:
            scale = 1.0 if "rotation" in where else abs(float(b))
            assert abs(float(a) - float(b)) <= 1e-15 * max(scale, 1e-300), where

    close({k: v for k, v in written.items() if k not in ("mode", "plenocal_rho_form")},
          {k: v for k, v in original.items() if k != "mode"}, "intrinsics")
    params = json.loads(lp.write_params(tmp_path / "params.js", lp.read_params(libpleno_file("params.js"))).read_text())
    stale = {"lambda"}
    close({k: v for k, v in params.items() if k not in stale},
          {k: v for k, v in LIBPLENO["params.js"].items() if k not in stale}, "params")


def test_hex_columns_and_infinite_focus_round_trip(tmp_path: Path, r12a_camera):
    mla = r12a_camera.mla
    lattice = Lattice(LatticeKind.HEX_COLS, 150, 175)
    cam = r12a_camera.replace(
        mla=MicroLensArray(
            lattice, mla.pitch_mm, (1e-3, -2e-3, 0.01), mla.translation_mm, mla.focal_lengths_mm, mla.types
        ),
        mia=None,
        focus_distance_mm=math.inf,
    )
    cam = cam.replace(mia=consistent_mia(cam))
    path = lp.write_intrinsics(tmp_path / "intrinsics.js", cam)
    assert json.loads(path.read_text())["dist_focus"] == "100000000.0"
    back = lp.camera_from_intrinsics(path)
    _camera_close(back, cam)
    # the MIA node (0, 0) is where libpleno's geometry-2 mesh puts it
    doc = lp.read_camera_config(path)
    k, l = np.array([0, 1, 5]), np.array([0, 3, 7])
    ours = cam.grid.centres(k, l)
    p0, p1 = doc.mia.pitch
    R = np.asarray(doc.mia.pose.rotation)
    node = np.stack([p0 * k * math.sqrt(3) / 2, p1 * (l - 0.5 * (k % 2 == 1))], axis=1)
    np.testing.assert_allclose(node @ R.T + np.asarray(doc.mia.pose.translation), ours, atol=1e-9)


def test_parity_padded_and_layout_refused(r12a_camera):
    """A lattice whose row parity libpleno cannot describe is padded by one row (tests/io/
    test_io_libpleno_head.py has the geometry); a type layout other than libpleno's is refused."""
    mla = r12a_camera.mla
    odd = r12a_camera.replace(
        mla=MicroLensArray(
            Lattice(LatticeKind.HEX_ROWS, 176, 151),
            mla.pitch_mm,
            mla.rotation_xyz_rad,
            mla.translation_mm,
            mla.focal_lengths_mm,
            mla.types,
        ),
        mia=None,
    )
    doc = lp.config_from_camera(odd)
    assert (doc.mla.width, doc.mla.height) == (176, 152) and doc.extra["plenocal_lattice"]["height"] == "151"
    other = r12a_camera.replace(mla=dataclasses.replace(mla, types=TypeLayout(3, (0, 2))))
    with pytest.raises(DataError, match="type layout"):
        lp.config_from_camera(other)


def test_params_round_trip(tmp_path: Path, libpleno_file, r12a_params):
    path = lp.write_params(tmp_path / "params.js", r12a_params)
    back = lp.read_params(path)
    assert back.m_mm == r12a_params.m_mm and back.q_mm == r12a_params.q_mm
    assert back.lambda_ == pytest.approx(r12a_params.lambda_, rel=1e-15)
    assert (back.kappa, back.f_number, back.pixel_size_mm) == (0.680851, 4.0, 0.0055)
    doc = lp.read_params_doc(path)
    ref = lp.read_params_doc(libpleno_file("params.js"))
    assert doc.dC == pytest.approx(ref.dC, rel=1e-15) and doc.dc == ref.dc and doc.I == 3
    np.testing.assert_allclose(doc.q_prime, ref.q_prime, rtol=1e-14)
    assert doc.lambda_ == pytest.approx(0.994408, abs=1e-6)  # consistent λ, not the stale 0.9931


def test_poses_round_trip(tmp_path: Path, libpleno_file, r12a_poses):
    path = lp.write_poses(tmp_path / "poses.js", r12a_poses)
    back = lp.read_poses(path)
    assert sorted(back) == sorted(r12a_poses)
    for f in r12a_poses:
        assert back[f].allclose(r12a_poses[f], atol=1e-12)
    (ref,) = lp.read_poses_doc(libpleno_file("poses.js"))  # frame 15 of libpleno's poses.js
    (e,) = [e for e in lp.read_poses_doc(path) if e.frame == ref.frame]
    # camera-in-board, as libpleno stores it
    np.testing.assert_allclose(e.pose.translation, ref.pose.translation, rtol=1e-13)
    np.testing.assert_allclose(e.pose.rotation, ref.pose.rotation, atol=1e-15)


def test_scene_round_trip(tmp_path: Path, r12a_board):
    assert r12a_board == Checkerboard(9, 5, 10.0)
    assert lp.read_scene(lp.write_scene(tmp_path / "scene.js", r12a_board)) == r12a_board


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("intrinsics.js", '{"I": "3",', "malformed JSON at line 1 column 11"),
        (
            "intrinsics.js",
            '{"I": "3", "main_lens": {"f": "50"}, "sensor": {"width": "4", "height": "3"}}',
            "missing key 'sensor.scale'",
        ),
        ("intrinsics.js", '{"I": "x", "main_lens": {"f": "50"}, "sensor": {}}', "key 'I' must be a number, got 'x'"),
        ("params.js", '{"m": "-0.1", "q": "oops", "dc": "0.1"}', "key 'q' must be a list of numbers, got 'oops'"),
        (
            "poses.js",
            '{"poses": [{"frame": "1", "pose": {"rotation": [["1","0","0"],["0","1","0"]], "translation": [["0","0","0"]]}}]}',
            "key 'poses[0].pose.rotation' must be a 3x3 column-major matrix, got 3x2",
        ),
        ("scene.js", '{"checkerboards": [{"lph": "10", "x_grid": "9"}]}', "missing key 'checkerboards[0].y_grid'"),
        ("images.js", '{"whites": [{"fnumber": "4"}]}', "missing key 'whites[0].path'"),
    ],
)
def test_bad_json_inputs(tmp_path: Path, name: str, text: str, message: str):
    read = FILES[name][0]
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(InputFileError) as exc:
        read(p)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(f"{p}: ") and message in msg, msg


@pytest.mark.parametrize("source", ["libpleno", "plenocal"])
def test_camera_js_is_not_a_camera(libpleno_file, r12a_libpleno_dir: Path, source: str):
    path = libpleno_file("camera.js") if source == "libpleno" else r12a_libpleno_dir / "camera.js"
    with pytest.raises(InputFileError, match=r"a camera\.js is not a calibrated camera"):
        lp.camera_from_intrinsics(path)


def test_missing_file(tmp_path: Path):
    with pytest.raises(InputFileError, match="file does not exist"):
        lp.read_params(tmp_path / "params.js")
    with pytest.raises(InputFileError, match="file does not exist"):
        lp.read_linked_observations(tmp_path / "x.bin.gz")


# --- observations ------------------------------------------------------------------------
def synthetic(camera, poses: dict[int, Pose], board: Checkerboard, per_node: int = 3, seed: int = 0) -> Observations:
    """Noise-free BAP features of every node of every frame through a few nearby micro-lenses."""
    rng = np.random.default_rng(seed)
    parts = []
    for frame, pose in sorted(poses.items()):
        nodes = np.repeat(np.arange(board.n_nodes), per_node)
        p_cam = pose.apply(board.node_points(nodes))
        k0, l0 = camera.grid.nearest(
            *project_bap(camera, p_cam, np.full(nodes.size, 88), np.full(nodes.size, 76))[:, :2].T
        )
        k = np.clip(k0 + rng.integers(-1, 2, nodes.size), 0, 175)
        l = np.clip(l0 + rng.integers(-1, 2, nodes.size), 0, 151)
        uvr = project_bap(camera, p_cam, k, l)
        parts.append(BapFeatures(np.full(nodes.size, frame), k, l, uvr[:, 0], uvr[:, 1], uvr[:, 2], nodes))
    k, l = np.meshgrid(np.arange(0, 176, 7), np.arange(0, 152, 5))
    c = camera.grid.centres(k.ravel(), l.ravel())
    mic = MicroImageCentres(k.ravel(), l.ravel(), c[:, 0], c[:, 1])
    return Observations(BapFeatures.concatenate(parts), mic)


def test_observations_bin_and_csv_round_trip(tmp_path: Path, r12a_camera, r12a_poses, r12a_board):
    obs = synthetic(r12a_camera, r12a_poses, r12a_board)
    assert len(obs.bap) == 16 * 45 * 3
    for back in (
        lp.read_observations_bin(lp.write_observations_bin(tmp_path / "linked-observations.bin.gz", obs)),
        lp.read_observations_csv(*lp.write_observations_csv(tmp_path / "bap.csv", tmp_path / "center.csv", obs)),
    ):
        for c in ("frame", "k", "l", "u", "v", "rho", "node"):
            assert np.array_equal(getattr(back.bap, c), getattr(obs.bap, c)), c
        assert np.all(back.bap.cluster == -1)
        for c in ("k", "l", "u", "v"):
            assert np.array_equal(getattr(back.mic, c), getattr(obs.mic, c)), c
    assert (tmp_path / "bap.csv").read_text().splitlines()[0] == "k,l,u,v,rho,cluster,frame"
    assert (tmp_path / "center.csv").read_text().splitlines()[0] == "k,l,u,v"


def test_libpleno_exports_leave_single_views_out(tmp_path: Path, r12a_camera, r12a_poses, r12a_board):
    """libpleno's BAP features always carry an observed ρ: single views (ρ NaN, one micro-image)
    are left out of its files, every other feature written as it is; plenocal's own file keeps them."""
    from plenocal.io.observations import read_observations, write_observations

    obs = synthetic(r12a_camera, r12a_poses, r12a_board)
    cols = obs.bap.columns()
    single = np.zeros(len(obs.bap), dtype=bool)
    single[::10] = True
    cols["rho"] = np.where(single, np.nan, obs.bap.rho)
    mixed = Observations(BapFeatures(**cols), obs.mic)
    for back in (
        lp.read_observations_bin(lp.write_observations_bin(tmp_path / "linked-observations.bin.gz", mixed)),
        lp.read_observations_csv(*lp.write_observations_csv(tmp_path / "bap.csv", tmp_path / "center.csv", mixed)),
    ):
        assert len(back.bap) == int((~single).sum())
        for c in ("frame", "k", "l", "u", "v", "rho", "node"):
            assert np.array_equal(getattr(back.bap, c), getattr(obs.bap, c)[~single]), c
    keys = np.stack([mixed.bap.frame, mixed.bap.k, mixed.bap.l, mixed.bap.node], axis=1)
    first = np.sort(np.unique(keys, axis=0, return_index=True)[1])  # (the synthetic set repeats some views)
    unique = Observations(mixed.bap.select(first), mixed.mic)
    own = read_observations(write_observations(tmp_path / "observations.npz", unique))
    assert np.array_equal(np.isnan(own.bap.rho), single[first]) and single[first].any()
    assert np.array_equal(own.bap.rho[~single[first]], unique.bap.rho[~single[first]])


def _handmade_stream() -> bytes:
    centers = [(156, 69, 3623.55, 1397.913), (0, 151, -1.5, 3050.25)]
    corners = [(3, 4, 10.5, 20.25, 7, 2)]
    features = [(156, 69, 3628.126070, 1403.006881, -3.554117, 26, 15), (1, 2, 3.0, 4.0, 5.5, -1, 0)]
    b = struct.pack("<Q", len(centers)) + b"".join(struct.pack("<iidd", *c) for c in centers)
    b += struct.pack("<Q", len(corners)) + b"".join(struct.pack("<iiddii", *c) for c in corners)
    b += struct.pack("<Q", len(features)) + b"".join(struct.pack("<iidddii", *f) for f in features)
    return b


def test_binary_layout_against_struct(tmp_path: Path):
    raw = _handmade_stream()
    assert len(raw) == 3 * 8 + 2 * 24 + 32 + 2 * 40
    p = tmp_path / "linked-observations-x.bin.gz"
    p.write_bytes(gzip.compress(raw))
    doc = lp.read_linked_observations(p)
    assert doc.centers.tolist() == [(156, 69, 3623.55, 1397.913), (0, 151, -1.5, 3050.25)]
    assert doc.corners.tolist() == [(3, 4, 10.5, 20.25, 7, 2)]
    assert doc.features["rho"][0] == -3.554117 and doc.features["cluster"][0] == 26
    assert doc.features["frame"].tolist() == [15, 0]
    out = lp.write_linked_observations(tmp_path / "again.bin.gz", doc)
    assert gzip.decompress(out.read_bytes()) == raw
    assert lp.read_linked_observations(out) == doc
    obs = lp.read_observations_bin(p)
    assert obs.bap.node.tolist() == [26, -1] and obs.bap.k.tolist() == [156, 1]
    assert obs.mic.u.tolist() == [3623.55, -1.5]


def test_binary_bad_inputs(tmp_path: Path):
    raw = _handmade_stream()
    p = tmp_path / "linked-observations.bin.gz"
    p.write_bytes(gzip.compress(raw)[:-12])
    with pytest.raises(InputFileError, match=r"truncated gzip stream \(the file ends early\)"):
        lp.read_linked_observations(p)
    p.write_bytes(gzip.compress(raw[:-40]))
    with pytest.raises(InputFileError) as exc:
        lp.read_linked_observations(p)
    assert str(exc.value) == f"{p}: truncated: list 'features' declares 2 records (80 bytes), only 40 bytes left"
    p.write_bytes(gzip.compress(raw[:30]))
    with pytest.raises(InputFileError, match="truncated: list 'centers' declares 2 records"):
        lp.read_linked_observations(p)
    p.write_bytes(gzip.compress(raw + b"\0\0"))
    with pytest.raises(InputFileError, match="2 unexpected bytes after the 'features' list"):
        lp.read_linked_observations(p)
    p.write_bytes(raw)
    with pytest.raises(InputFileError, match="not a gzip file"):
        lp.read_linked_observations(p)


def test_csv_bad_inputs(tmp_path: Path):
    p = tmp_path / "bap.csv"
    p.write_text("k,l,u,v,rho,frame,cluster\n1,2,3,4,5,6,7\n")
    with pytest.raises(InputFileError) as exc:
        lp.read_bap_csv(p)
    assert (
        str(exc.value)
        == f"{p}: wrong CSV header: expected 'k,l,u,v,rho,cluster,frame', got 'k,l,u,v,rho,frame,cluster'"
    )
    p.write_text("k,l,u,v,rho,cluster,frame\n1,2,3,4,5,6,7\n1.5,2,3,4,5,6,7\n")
    with pytest.raises(InputFileError, match=r"column 'k' must hold integers, got 1\.5 on data row 2"):
        lp.read_bap_csv(p)
    p.write_text("k,l,u,v,rho,cluster,frame\n1,2,3,abc,5,6,7\n")
    with pytest.raises(InputFileError, match="malformed CSV"):
        lp.read_bap_csv(p)
    c = tmp_path / "center.csv"
    c.write_text("k,l,u,v\n1,2,3\n")
    with pytest.raises(InputFileError, match="expected 4 columns, got 3"):
        lp.read_center_csv(c)
    c.write_text("k,l,u,v\n1,2,3,4\n1,2,3\n")
    with pytest.raises(InputFileError, match="malformed CSV"):
        lp.read_center_csv(c)
    c.write_text("k,l,u,v\n")
    assert lp.read_center_csv(c).size == 0


def test_configuration_from_mode_without_types(tmp_path: Path, libpleno_file):
    doc = lp.read_camera_config(libpleno_file("intrinsics.js"))
    from dataclasses import replace

    pinhole = replace(doc, I=0, focal_lengths=(), mode=0)
    cam = lp.camera_from_config(pinhole)
    assert cam.n_types == 0 and cam.configuration is Configuration.UNFOCUSED
