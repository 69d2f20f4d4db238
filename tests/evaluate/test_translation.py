"""ε_z (paper §7.3): all pairs grouped by ground-truth displacement."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.errors import DataError
from plenocal.evaluate.translation import translation_errors
from plenocal.model.geometry import Pose


def test_scale_error_gives_constant_epsilon():
    """Poses scaled by 1.03 along z: every pair has ε = 3 %."""
    gt = {f: 10.0 * f for f in range(5)}
    poses = {f: Pose(np.eye(3), [0.0, 0.0, 300.0 + 1.03 * gt[f]]) for f in gt}
    out = translation_errors(poses, gt)
    assert out.n_pairs == 10
    assert out.mean_percent == pytest.approx(3.0, abs=1e-9)
    assert out.std_percent == pytest.approx(0.0, abs=1e-9)
    assert sorted(out.groups) == [10.0, 20.0, 30.0, 40.0]
    assert out.groups[10.0][2] == 4 and out.groups[40.0][2] == 1
    assert len(out.steps) == 4


def test_groups_mean_and_sequences():
    gt = {0: 0.0, 1: 10.0, 2: 20.0, 10: 0.0, 11: 10.0}
    z = {0: 300.0, 1: 311.0, 2: 320.0, 10: 250.0, 11: 259.0}
    seq = {0: 0, 1: 0, 2: 0, 10: 1, 11: 1}
    out = translation_errors({f: Pose(np.eye(3), [0, 0, z[f]]) for f in z}, gt, seq)
    # δ = 10: pairs (0,1) 10 %, (1,2) 10 %, (10,11) 10 %; δ = 20: (0,2) 0 %. No cross-sequence pair.
    assert out.groups[10.0] == pytest.approx((10.0, 0.0, 3))
    assert out.groups[20.0] == pytest.approx((0.0, 0.0, 1))
    assert out.n_pairs == 4


def test_no_pairs_is_an_error():
    with pytest.raises(DataError):
        translation_errors({0: Pose.identity()}, {0: 0.0})
