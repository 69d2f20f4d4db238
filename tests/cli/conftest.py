"""A libpleno source folder: the R12-A configs (written from tests/data) plus generated observation files."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from plenocal.evaluate.metrics import predict_bap
from plenocal.model import micro_image_centres
from plenocal.model.observations import BapFeatures, MicroImageCentres, Observations


def synthetic_observations(camera, poses, board, *, per_node: int = 3, seed: int = 0) -> Observations:
    """Noise-free features of every node of every frame through micro-lenses near its image."""
    rng = np.random.default_rng(seed)
    frames = np.array(sorted(poses))
    frame = np.repeat(frames, board.n_nodes * per_node)
    node = np.tile(np.repeat(np.arange(board.n_nodes), per_node), frames.size)
    rough = predict_bap(camera, poses, board, frame, node, np.full(frame.size, 88), np.full(frame.size, 76))
    k0, l0 = camera.grid.nearest(rough[:, 0], rough[:, 1])
    # per_node distinct micro-lenses around the nearest one (a node is seen once per micro-image)
    offsets = np.array([(dk, dl) for dk in (-1, 0, 1) for dl in (-1, 0, 1)])
    pick = np.argsort(rng.random((frame.size // per_node, offsets.shape[0])), axis=1)[:, :per_node].reshape(-1)
    k = np.clip(k0 + offsets[pick, 0], 0, 175)
    l = np.clip(l0 + offsets[pick, 1], 0, 151)
    uvr = predict_bap(camera, poses, board, frame, node, k, l)
    mk, ml = np.meshgrid(np.arange(0, 176, 9), np.arange(0, 152, 6))
    c = micro_image_centres(camera, mk.ravel(), ml.ravel())
    return Observations(
        BapFeatures(frame, k, l, uvr[:, 0], uvr[:, 1], uvr[:, 2], node),
        MicroImageCentres(mk.ravel(), ml.ravel(), c[:, 0], c[:, 1]),
    )


@pytest.fixture(scope="session")
def r12a_observations(r12a_camera, r12a_poses, r12a_board) -> Observations:
    return synthetic_observations(r12a_camera, r12a_poses, r12a_board)


@pytest.fixture
def libpleno_src(tmp_path: Path, r12a_libpleno_dir: Path, r12a_observations) -> Path:
    """A copy of the R12-A libpleno folder plus ``linked-observations-R12-A.bin.gz``."""
    from plenocal.io.libpleno import write_observations_bin

    src = tmp_path / "src"
    shutil.copytree(r12a_libpleno_dir, src)
    write_observations_bin(src / "linked-observations-R12-A.bin.gz", r12a_observations)
    return src
