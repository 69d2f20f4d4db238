"""``plenocal import-libpleno`` with several sources and roles (calibration, evaluation, translation).

Every libpleno source is written here: minimal camera.js / scene.js / images.js and tiny PNGs (the
images are only listed, never decoded, by the import), plus, for the end-to-end check, the model's
own noise-free observations of a small preset camera.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from plenocal.calib.synthetic import synthetic_observations
from plenocal.cli.main import main
from plenocal.io import read_dataset
from plenocal.io.dataset import ImageRole
from plenocal.io.libpleno import write_intrinsics, write_observations_bin, write_scene
from plenocal.model.observations import Observations
from plenocal.sim.poses import random_poses, translation_poses
from plenocal.sim.presets import preset

CAMERA_JS: dict[str, Any] = {
    "mia": {"mesh": {"geometry": "1", "width": "8", "height": "6"}},
    "sensor": {"scale": "0.0055", "width": "40", "height": "30"},
    "main_lens": {"aperture": "4.0", "f": "50.0"},
    "dist_focus": "1000.0",
    "I": "3",
    "mode": "2",
}
SCENE_JS: dict[str, Any] = {"checkerboards": [{"lph": "20.0", "x_grid": "8", "y_grid": "5"}]}
WHITES = (("white-N8.png", "8.0"), ("white-N4.png", "4.0"))


def _png(path: Path) -> None:
    """A tiny grey PNG whose content depends on its name (different files differ)."""
    if not path.exists():
        value = int(hashlib.sha256(path.name.encode()).hexdigest()[:2], 16)
        assert cv2.imwrite(str(path), np.full((30, 40), value, np.uint8))


def _source(
    root: Path,
    name: str,
    frames: list[tuple[int | None, str]],
    *,
    whites: tuple[tuple[str, str], ...] = WHITES,
    mask: str | None = "white-N4.png",
    camera: dict[str, Any] | None = None,
    scene: dict[str, Any] | None = None,
) -> Path:
    """A libpleno folder ``root/name`` whose images.js lists ``../<file>`` images of ``root``
    (as the published datasets do); ``frames`` are (frame id or None, file name)."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "camera.js").write_text(json.dumps(CAMERA_JS if camera is None else camera))
    (folder / "scene.js").write_text(json.dumps(SCENE_JS if scene is None else scene))
    boards = []
    for frame, file in frames:
        _png(root / file)
        entry = {"path": f"../{file}", "fnumber": "4.0"}
        if frame is not None:
            entry["frame"] = str(frame)
        boards.append(entry)
    for file, _ in whites:
        _png(root / file)
    images: dict[str, Any] = {
        "meta": {"debayered": "true", "rgb": "false", "format": "8"},
        "whites": [{"path": f"../{file}", "fnumber": n} for file, n in whites],
        "checkerboards": boards,
    }
    if mask is not None:
        _png(root / mask)
        images["mask"] = {"path": f"../{mask}", "fnumber": "4.0"}
    (folder / "images.js").write_text(json.dumps(images))
    return folder


def _calib(root: Path, name: str = "calib", frames: range = range(4)) -> Path:
    return _source(root, name, [(f, f"calib-{f:02d}.png") for f in frames])


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file()}


def _error(capsys, code: int) -> str:
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("plenocal import-libpleno: error: ")
    return lines[0]


# --- roles, sequences and displacements in the manifest -------------------------------------
def test_one_bare_source_is_calibration_as_before(tmp_path, capsys):
    src = _calib(tmp_path / "data")
    ds = tmp_path / "ds"
    assert main(["import-libpleno", str(src), "-o", str(ds)]) == 0
    out = capsys.readouterr()
    assert out.err == ""
    assert out.out.strip() == f"wrote manifest.json to {ds} (4 calibration frames)"
    m = read_dataset(ds).manifest
    assert [(e.role, e.frame) for e in m.images if e.frame is not None] == [(ImageRole.CALIBRATION, f) for f in range(4)]
    assert all(e.sequence is None and e.displacement_mm is None for e in m.images)
    assert [(e.f_number, Path(e.path).name) for e in m.with_role("white")] == [(8.0, "white-N8.png"), (4.0, "white-N4.png")]
    assert [Path(e.path).name for e in m.with_role("devignetting")] == ["white-N4.png"]
    assert m.name == "calib"
    assert m.provenance["sources"] == [
        {"folder": str(src.resolve()), "role": "calibration", "files": ["camera.js", "scene.js", "images.js"]}
    ]


def test_sources_with_roles_steps_and_sequences(tmp_path, capsys):
    root = tmp_path / "data"
    calib = _calib(root)
    held = _source(root, "held", [(10, "held-10.png"), (11, "held-11.png")])
    # listed out of order: displacements follow the frame ids, not the images.js order
    trans_a = _source(root, "trans-a", [(22, "ta-22.png"), (20, "ta-20.png"), (21, "ta-21.png")])
    trans_b = _source(root, "trans-b", [(31, "tb-31.png"), (30, "tb-30.png")], whites=(), mask=None)
    before = _digest(root)
    ds = tmp_path / "ds"
    argv = ["import-libpleno", str(calib), "--role", "evaluation", str(held),
            "--role", "translation", str(trans_a), "--step-mm", "50",
            "--role", "translation", str(trans_b), "--step-mm", "12.5", "-o", str(ds), "--name", "mixed"]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert out.err == ""
    assert out.out.strip().endswith("(4 calibration, 2 evaluation, 5 translation frames in 2 sequences)")
    assert _digest(root) == before  # sources only read

    m = read_dataset(ds).manifest
    assert m.name == "mixed"
    frames = {e.frame: e for e in m.images if e.frame is not None}
    assert sorted(frames) == [0, 1, 2, 3, 10, 11, 20, 21, 22, 30, 31]
    assert {f for f, e in frames.items() if e.role is ImageRole.CALIBRATION} == {0, 1, 2, 3}
    assert {f for f, e in frames.items() if e.role is ImageRole.EVALUATION} == {10, 11}
    trans = [(f, e.sequence, e.displacement_mm, Path(e.path).name) for f, e in sorted(frames.items())
             if e.role is ImageRole.TRANSLATION]
    assert trans == [(20, 0, 0.0, "ta-20.png"), (21, 0, 50.0, "ta-21.png"), (22, 0, 100.0, "ta-22.png"),
                     (30, 1, 0.0, "tb-30.png"), (31, 1, 12.5, "tb-31.png")]
    assert all(e.sequence is None and e.displacement_mm is None for e in m.images if e.role is not ImageRole.TRANSLATION)
    # whites and mask once (from the first source; the others list the same files)
    assert len(m.with_role("white")) == 2 and len(m.with_role("devignetting")) == 1
    assert all(Path(e.path).is_absolute() and Path(e.path).is_file() for e in m.images)
    assert [(s["role"], s.get("step_mm")) for s in m.provenance["sources"]] == [
        ("calibration", None), ("evaluation", None), ("translation", 50.0), ("translation", 12.5)]


def test_one_role_group_of_several_folders_gives_one_sequence_each(tmp_path, capsys):
    root = tmp_path / "data"
    a = _source(root, "a", [(0, "a0.png"), (1, "a1.png")])
    b = _source(root, "b", [(5, "b5.png"), (6, "b6.png"), (7, "b7.png")])
    ds = tmp_path / "ds"
    assert main(["import-libpleno", "--role", "translation", str(a), str(b), "--step-mm", "10", "-o", str(ds)]) == 0
    m = read_dataset(ds).manifest
    assert [(e.frame, e.sequence, e.displacement_mm) for e in m.with_role("translation")] == [
        (0, 0, 0.0), (1, 0, 10.0), (5, 1, 0.0), (6, 1, 10.0), (7, 1, 20.0)]
    assert m.with_role("calibration") == ()


def test_identical_whites_in_another_folder_agree(tmp_path, capsys):
    """Two sources with their own copies of the same white images are one set of whites."""
    calib = _calib(tmp_path / "d1")
    trans = _source(tmp_path / "d2", "trans", [(20, "t0.png"), (21, "t1.png")])
    ds = tmp_path / "ds"
    assert main(["import-libpleno", str(calib), "--role", "translation", str(trans), "--step-mm", "5",
                 "-o", str(ds)]) == 0
    whites = read_dataset(ds).manifest.with_role("white")
    assert [Path(e.path).parent for e in whites] == [(tmp_path / "d1").resolve()] * 2


# --- every error: one line, exit 2, nothing written, sources untouched -----------------------
def _mode(root: Path) -> list[str]:
    return [str(_source(root, "c", [(0, "c0.png")], camera=CAMERA_JS | {"mode": "7"}))]


def _scale(value: str):
    def setup(root: Path) -> list[str]:
        cam = json.loads(json.dumps(CAMERA_JS))
        cam["sensor"]["scale"] = value
        return [str(_source(root, "c", [(0, "c0.png")], camera=cam))]

    return setup


def _two(second: dict[str, Any], role: list[str] | None = None):
    """calib (frames 0-3) plus a second source built with ``second`` keyword arguments."""

    def setup(root: Path) -> list[str]:
        calib = _calib(root)
        kw = {"frames": [(20, "t0.png"), (21, "t1.png")]} | second
        other = _source(root, "other", **kw)
        return [str(calib), *(role or ["--role", "translation"]), str(other), *([] if role else ["--step-mm", "5"])]

    return setup


OTHER_CAMERA = json.loads(json.dumps(CAMERA_JS))
OTHER_CAMERA["main_lens"]["f"] = "35.0"

ERRORS = {
    "unknown role": (
        lambda r: [str(_calib(r)), "--role", "held-out", str(_calib(r, "h"))],
        "--role: unknown role 'held-out'; expected one of calibration, evaluation, translation",
    ),
    "white is not a frame role": (
        lambda r: ["--role", "white", str(_calib(r))], "--role: unknown role 'white'",
    ),
    "role without folder": (lambda r: [str(_calib(r)), "--role", "evaluation"], "--role evaluation: no source folder follows"),
    "step missing": (
        _two({}, role=["--role", "translation"]), "a translation source needs the known step between consecutive frames",
    ),
    "step zero": (lambda r: ["--role", "translation", str(_calib(r)), "--step-mm", "0"],
                  "must be a finite number > 0 mm, got 0"),
    "step negative": (lambda r: ["--role", "translation", str(_calib(r)), "--step-mm", "-50"],
                      "must be a finite number > 0 mm, got -50"),
    "step nan": (lambda r: ["--role", "translation", str(_calib(r)), "--step-mm", "nan"],
                 "must be a finite number > 0 mm, got nan"),
    "step inf": (lambda r: ["--role", "translation", str(_calib(r)), "--step-mm", "inf"],
                 "must be a finite number > 0 mm, got inf"),
    "step not a number": (lambda r: ["--role", "translation", str(_calib(r)), "--step-mm", "5cm"],
                          "--step-mm: expected a number of millimetres, got '5cm'"),
    "step for calibration": (lambda r: [str(_calib(r)), "--step-mm", "50"],
                             "--step-mm 50 given for a source of role calibration; it applies only to translation sources"),
    "step for evaluation": (lambda r: ["--role", "evaluation", str(_calib(r)), "--step-mm", "50"],
                            "--step-mm 50 given for a source of role evaluation"),
    "step before any source": (lambda r: ["--step-mm", "50", str(_calib(r))],
                               "--step-mm 50: must follow the translation sources it applies to"),
    "step twice": (lambda r: ["--role", "translation", str(_calib(r)), "--step-mm", "50", "--step-mm", "10"],
                   "already has --step-mm 50; give it once"),
    "bare source after a role group": (
        lambda r: ["--role", "evaluation", str(_calib(r, "h")), "--step-mm", "1", str(_calib(r))],
        "a bare SRC after a --role group is ambiguous",
    ),
    "translation with one frame": (
        _two({"frames": [(20, "t0.png")]}),
        "a translation source needs >= 2 checkerboard frames to measure displacements, got 1",
    ),
    "evaluation without images": (
        _two({"frames": []}, role=["--role", "evaluation"]), "an evaluation source needs >= 1 checkerboard image",
    ),
    "same image in two sources": (
        _two({"frames": [(20, "calib-01.png"), (21, "t1.png")]}),
        "checkerboards[0] ../calib-01.png is also ",
    ),
    "same image twice in one images.js": (
        lambda r: [str(_source(r, "c", [(0, "c0.png"), (1, "c0.png")]))],
        "checkerboards[1] ../c0.png is also ",
    ),
    "checkerboard that is a white": (
        lambda r: [str(_source(r, "c", [(0, "c0.png"), (1, "white-N8.png")]))],
        "checkerboards[1] ../white-N8.png is also listed as a white image",
    ),
    "same frame id in two sources": (
        _two({"frames": [(3, "t0.png"), (21, "t1.png")]}), "checkerboards[0] has frame 3, already used by ",
    ),
    "default frame ids clash": (
        _two({"frames": [(None, "t0.png"), (None, "t1.png")]}),
        "has frame 0 (its position: the entry has no 'frame'), already used by ",
    ),
    "source listed twice": (lambda r: [str(_calib(r)), "--role", "evaluation", str(r / "calib")], "listed twice as a source"),
    "missing source": (lambda r: [str(_calib(r)), "--role", "evaluation", str(r / "nowhere")], "source folder does not exist"),
    "invalid mode": (_mode, "camera.js: key 'mode' must be one of 0 (unfocused), 1 (keplerian), 2 (galilean), got 7"),
    "zero pixel size": (_scale("0"), "camera.js: key 'sensor.scale' (pixel size, mm) must be > 0, got 0"),
    "negative pixel size": (_scale("-0.0055"), "camera.js: key 'sensor.scale' (pixel size, mm) must be > 0, got -0.0055"),
    "camera.js values differ": (
        _two({"camera": OTHER_CAMERA}), "other/camera.js: disagrees with {root}/calib/camera.js on main_lens.f (50.0 vs 35.0)",
    ),
    "whites differ": (
        _two({"whites": (("white-N8.png", "8.0"), ("white-N5.6.png", "5.6"))}),
        "other/images.js: disagrees with {root}/calib/images.js on whites (N=4 white-N4.png, N=8 white-N8.png vs "
        "N=5.6 white-N5.6.png, N=8 white-N8.png)",
    ),
    "mask differs": (_two({"mask": "white-N8.png"}), "other/images.js: disagrees with {root}/calib/images.js on mask"),
    "board differs": (
        _two({"scene": {"checkerboards": [{"lph": "10", "x_grid": "9", "y_grid": "5"}]}}),
        "other/scene.js: disagrees with {root}/calib/scene.js on checkerboards[0] (8x5 nodes of 20 mm vs 9x5 nodes of 10 mm)",
    ),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_errors_are_one_line_and_nothing_is_written(tmp_path, capsys, case):
    root = tmp_path / "data"
    root.mkdir()
    setup, message = ERRORS[case]
    args = setup(root)
    before = _digest(root)
    ds = tmp_path / "ds"
    line = _error(capsys, main(["import-libpleno", *args, "-o", str(ds)]))
    assert message.format(root=root) in line, line
    assert not ds.exists()
    assert _digest(root) == before


@pytest.mark.parametrize("inside", [False, True])
def test_output_in_a_source_is_refused(tmp_path, capsys, inside):
    root = tmp_path / "data"
    calib = _calib(root)
    trans = _source(root, "trans", [(20, "t0.png"), (21, "t1.png")])
    ds = trans / "dataset" if inside else trans
    before = _digest(root)
    line = _error(capsys, main(["import-libpleno", str(calib), "--role", "translation", str(trans), "--step-mm", "5",
                                "-o", str(ds)]))
    where = "inside the" if inside else "the"
    assert f"{ds}: the dataset folder must not be {where} libpleno source folder {trans}" in line
    assert _digest(root) == before
    assert not (trans / "manifest.json").exists() and not (trans / "dataset").exists()


# --- end to end: the imported roles feed held-out RMSE and ε_z --------------------------------
STEP_MM = 10.0


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Path:
    """Three libpleno sources (calibration 0-3, held-out 10-11, translation 20-23 in 10 mm steps)
    with intrinsics.js and noise-free observations of a small R12-A-like camera, imported."""
    p = preset("r12-a", small=True)
    camera, board = p.camera, p.plan.board
    free = random_poses(camera, board, 6, distance_range_mm=p.plan.calibration_range_mm, rng=np.random.default_rng(0))
    moved = translation_poses(board, tuple(265.0 + STEP_MM * i for i in range(4)), camera=camera)
    poses = {i: free[i] for i in range(4)} | {10: free[4], 11: free[5]} | {20 + i: q for i, q in enumerate(moved)}
    _, truth = synthetic_observations(camera, poses, board)
    root = tmp_path_factory.mktemp("e2e")
    groups = {"calib": range(4), "held": (10, 11), "trans": range(20, 24)}
    for name, frames in groups.items():
        folder = root / name
        folder.mkdir()
        write_intrinsics(folder / "intrinsics.js", camera)
        write_scene(folder / "scene.js", board)
        keep = np.isin(truth.bap.frame, list(frames))
        write_observations_bin(folder / f"linked-observations-{name}.bin.gz", Observations(truth.bap.select(keep), truth.mic))
        # trans lists its frames backwards: displacements follow the frame ids
        order = sorted(frames, reverse=name == "trans")
        (folder / "images.js").write_text(json.dumps({"checkerboards": [{"path": f"{name}-{f}.png", "frame": f} for f in order]}))
    ds = root / "ds"
    argv = ["import-libpleno", str(root / "calib"), "--role", "evaluation", str(root / "held"),
            "--role", "translation", str(root / "trans"), "--step-mm", str(STEP_MM), "-o", str(ds)]
    assert main(argv) == 0
    return ds


def test_evaluate_on_imported_roles(imported, tmp_path, capsys):
    """With the true camera (the imported intrinsics.js), held-out RMSE and ε_z vanish."""
    assert main(["evaluate", str(imported), "-o", str(tmp_path / "ev")]) == 0
    rep = json.loads((tmp_path / "ev" / "report.json").read_text())
    assert rep["holdout"]["frames_evaluated"] == [10, 11]
    assert rep["holdout"]["rmse"]["uv_px"] < 1e-6
    tr = rep["translation"]
    assert tr["frames_evaluated"] == [20, 21, 22, 23]
    assert [g["displacement_mm"] for g in tr["by_displacement"]] == [10.0, 20.0, 30.0]
    assert tr["epsilon_z_percent"]["n_pairs"] == 6 and tr["epsilon_z_percent"]["mean"] < 1e-4


def test_run_on_imported_roles_reports_held_out_and_epsilon_z(imported, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", str(imported), "-o", str(out)]) == 0
    rep = json.loads((out / "evaluation" / "report.json").read_text())
    assert rep["holdout"]["frames_evaluated"] == [10, 11]
    assert rep["translation"]["frames_evaluated"] == [20, 21, 22, 23]
    assert rep["translation"]["epsilon_z_percent"]["n_pairs"] == 6
    cal = json.loads((out / "calibration" / "report.json").read_text())
    assert cal["n_frames"] == 4  # only the calibration frames are calibrated on
    stdout = capsys.readouterr().out
    assert "held-out RMSE" in stdout and "ε_z [%]" in stdout
