"""Noise-free synthetic observations of the R12-A fixture camera and poses."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.evaluate.metrics import predict_bap
from plenocal.model import micro_image_centres
from plenocal.model.observations import BapFeatures, MicroImageCentres, Observations


def synthetic_observations(camera, poses, board, *, per_node: int = 4, seed: int = 0) -> Observations:
    """Every node of every frame through ``per_node`` micro-lenses near its image, and a
    sub-grid of micro-image centres; exactly on the model."""
    rng = np.random.default_rng(seed)
    frames = np.array(sorted(poses))
    frame = np.repeat(frames, board.n_nodes * per_node)
    node = np.tile(np.repeat(np.arange(board.n_nodes), per_node), frames.size)
    centre = np.full(frame.size, 88), np.full(frame.size, 76)
    rough = predict_bap(camera, poses, board, frame, node, *centre)
    k0, l0 = camera.grid.nearest(rough[:, 0], rough[:, 1])
    lat = camera.mla.lattice
    # per_node distinct micro-lenses around the nearest one (a node is seen once per micro-image)
    offsets = np.array([(dk, dl) for dk in (-1, 0, 1) for dl in (-1, 0, 1)])
    pick = np.argsort(rng.random((frame.size // per_node, offsets.shape[0])), axis=1)[:, :per_node].reshape(-1)
    k = np.clip(k0 + offsets[pick, 0], 0, lat.width - 1)
    l = np.clip(l0 + offsets[pick, 1], 0, lat.height - 1)
    uvr = predict_bap(camera, poses, board, frame, node, k, l)
    bap = BapFeatures(frame, k, l, uvr[:, 0], uvr[:, 1], uvr[:, 2], node)
    mk, ml = np.meshgrid(np.arange(0, lat.width, 5), np.arange(0, lat.height, 4))
    c = micro_image_centres(camera, mk.ravel(), ml.ravel())
    return Observations(bap, MicroImageCentres(mk.ravel(), ml.ravel(), c[:, 0], c[:, 1]))


@pytest.fixture(scope="session")
def r12a_synthetic(r12a_camera, r12a_poses, r12a_board) -> Observations:
    return synthetic_observations(r12a_camera, r12a_poses, r12a_board)
