"""``import_libpleno_folders``: merging poses.js and observation files of several sources."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from plenocal.errors import DataError, InputFileError
from plenocal.io import read_dataset, read_observations, read_poses
from plenocal.io.dataset import ImageRole
from plenocal.io.libpleno import write_observations_bin, write_poses
from plenocal.io.libpleno.importer import LibplenoSource, import_libpleno_folders
from plenocal.model.geometry import Pose
from plenocal.model.observations import BapFeatures, MicroImageCentres, Observations

CAMERA_JS = {
    "sensor": {"scale": "0.0055", "width": "40", "height": "30"},
    "main_lens": {"aperture": "4.0", "f": "50.0"},
    "I": "3",
}
SCENE_JS = {"checkerboards": [{"lph": "20.0", "x_grid": "8", "y_grid": "5"}]}
MIC = MicroImageCentres([0, 1], [0, 0], [10.0, 33.0], [12.0, 12.5])


def _obs(frames: list[int], mic: MicroImageCentres = MIC) -> Observations:
    n = len(frames)
    f = np.asarray(frames)
    return Observations(BapFeatures(f, np.zeros(n), np.zeros(n), f + 0.5, f + 0.25, np.ones(n), np.arange(n)), mic)


def _pose(z: float) -> Pose:
    return Pose(np.eye(3), np.array([1.0, 2.0, z]))


def _source(folder: Path, frames: list[int], *, obs: Observations | None = None, poses: dict[int, Pose] | None = None
            ) -> Path:
    folder.mkdir(parents=True)
    (folder / "camera.js").write_text(json.dumps(CAMERA_JS))
    (folder / "scene.js").write_text(json.dumps(SCENE_JS))
    (folder / "images.js").write_text(json.dumps({"checkerboards": [{"path": f"{f}.png", "frame": f} for f in frames]}))
    if obs is not None:
        write_observations_bin(folder / "linked-observations.bin.gz", obs)
    if poses is not None:
        write_poses(folder / "poses.js", poses)
    return folder


def test_poses_and_observations_are_merged_by_frame(tmp_path):
    a = _source(tmp_path / "a", [0, 1], obs=_obs([0, 0, 1]), poses={0: _pose(300.0), 1: _pose(310.0)})
    b = _source(tmp_path / "b", [7, 8], obs=_obs([7, 8]), poses={7: _pose(400.0), 8: _pose(450.0)})
    result = import_libpleno_folders(
        [LibplenoSource(a), LibplenoSource(b, ImageRole.TRANSLATION, step_mm=50.0)], tmp_path / "ds"
    )
    assert [p.name for p in result.written] == ["poses.json", "observations.npz", "manifest.json"]
    assert result.frames == {"calibration": 2, "translation": 2} and result.sequences == 1
    ds = read_dataset(tmp_path / "ds")
    obs = read_observations(ds.observations_path)
    assert obs.bap.frame.tolist() == [0, 0, 1, 7, 8] and np.array_equal(obs.mic.u, MIC.u)
    poses = read_poses(ds.poses_path)
    assert sorted(poses) == [0, 1, 7, 8]
    assert poses[8].translation == pytest.approx([1.0, 2.0, 450.0])


def test_identical_files_in_two_sources_count_once(tmp_path):
    """A libpleno folder copied to split its frames into roles keeps one observation set."""
    obs, poses = _obs([0, 1, 2, 3]), {f: _pose(300.0 + f) for f in range(4)}
    a = _source(tmp_path / "a", [0, 1], obs=obs, poses=poses)
    b = _source(tmp_path / "b", [2, 3], obs=obs, poses=poses)
    import_libpleno_folders([LibplenoSource(a), LibplenoSource(b, ImageRole.EVALUATION)], tmp_path / "ds")
    ds = read_dataset(tmp_path / "ds")
    assert read_observations(ds.observations_path).bap.frame.tolist() == [0, 1, 2, 3]
    assert sorted(read_poses(ds.poses_path)) == [0, 1, 2, 3]
    assert [e.frame for e in ds.manifest.with_role("evaluation")] == [2, 3]


@pytest.mark.parametrize(
    ("second", "message"),
    [
        ({"obs": _obs([1, 5])}, "b/linked-observations.bin.gz: frame 1 also has features in "),
        ({"obs": _obs([5], MicroImageCentres([0], [0], [10.0], [12.0]))},
         "on micro-image centres (2 centres vs 1 other centres)"),
        ({"poses": {1: _pose(999.0)}}, "b/poses.js: frame 1 has a different pose in "),
    ],
)
def test_conflicting_frames_are_refused(tmp_path, second, message):
    a = _source(tmp_path / "a", [0, 1], obs=_obs([0, 1]), poses={0: _pose(300.0), 1: _pose(310.0)})
    b = _source(tmp_path / "b", [5, 6], **second)
    with pytest.raises(InputFileError) as info:
        import_libpleno_folders([LibplenoSource(a), LibplenoSource(b, ImageRole.EVALUATION)], tmp_path / "ds")
    assert message in str(info.value)
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (LibplenoSource(Path("x"), ImageRole.WHITE), "x: role must be one of calibration, evaluation, translation, got white"),
        (LibplenoSource(Path("x"), ImageRole.TRANSLATION), "x: a translation source needs the known step"),
        (LibplenoSource(Path("x"), ImageRole.TRANSLATION, step_mm=-1.0), "must be a finite number > 0 mm, got -1"),
        (LibplenoSource(Path("x"), ImageRole.EVALUATION, step_mm=5.0), "--step-mm 5 given for a source of role evaluation"),
    ],
)
def test_bad_sources_are_refused_before_reading(tmp_path, source, message):
    with pytest.raises(DataError) as info:
        import_libpleno_folders([source], tmp_path / "ds")
    assert message in str(info.value)
    with pytest.raises(DataError, match="no libpleno source folder given"):
        import_libpleno_folders([], tmp_path / "ds")
    assert not (tmp_path / "ds").exists()
