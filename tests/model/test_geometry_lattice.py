"""Rotations, poses, lattices and type layouts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plenocal.errors import ModelError
from plenocal.model.geometry import (
    Pose,
    euler_xyz_from_matrix,
    matrix_from_euler_xyz,
    rodrigues,
    rotvec_from_matrix,
)
from plenocal.model.lattice import Lattice, LatticeKind, TypeLayout

angles = st.floats(-1.4, 1.4, allow_nan=False)


@given(st.tuples(angles, angles, angles))
@settings(max_examples=50, deadline=None)
def test_rotvec_round_trip(w):
    w = np.array(w) * 0.7
    R = rodrigues(w)
    np.testing.assert_allclose(R @ R.T, np.eye(3), atol=1e-12)
    assert np.linalg.det(R) == pytest.approx(1.0)
    np.testing.assert_allclose(rotvec_from_matrix(R), w, atol=1e-9)


@given(st.tuples(angles, angles, angles))
@settings(max_examples=50, deadline=None)
def test_euler_round_trip(a):
    R = matrix_from_euler_xyz(a)
    np.testing.assert_allclose(euler_xyz_from_matrix(R), a, atol=1e-9)


def test_euler_xyz_is_rx_ry_rz():
    ax, ay, az = 0.1, -0.2, 0.3
    Rx = rodrigues([ax, 0, 0])
    Ry = rodrigues([0, ay, 0])
    Rz = rodrigues([0, 0, az])
    np.testing.assert_allclose(matrix_from_euler_xyz([ax, ay, az]), Rx @ Ry @ Rz, atol=1e-15)


def test_rodrigues_small_angles_are_smooth():
    w = np.array([[1e-14, -2e-14, 3e-14], [1e-6, 0, 0]])
    R = rodrigues(w)
    np.testing.assert_allclose(R[0], np.eye(3) + np.array([[0, -3e-14, -2e-14], [3e-14, 0, -1e-14], [2e-14, 1e-14, 0]]), atol=1e-20)
    np.testing.assert_allclose(R[1][1, 2], -1e-6, rtol=1e-9)


def test_pose_inverse_and_compose():
    pose = Pose.from_rotvec([0.1, -0.3, 0.2], [10.0, -5.0, 300.0])
    p = np.array([[1.0, 2.0, 3.0], [-4.0, 5.0, 60.0]])
    np.testing.assert_allclose(pose.inverse().apply(pose.apply(p)), p, atol=1e-12)
    assert pose.compose(pose.inverse()).allclose(Pose.identity())


@pytest.mark.parametrize("kind", list(LatticeKind))
def test_lattice_nearest_index_recovers_every_node(kind):
    lat = Lattice(kind, 13, 11)
    k, l = lat.all_indices()
    gx, gy = lat.positions(k, l, (2.0, 2.1))
    rng = np.random.default_rng(0)
    jitter = rng.uniform(-0.4, 0.4, size=(2, k.size))
    kk, ll = lat.nearest_index(gx + jitter[0], gy + jitter[1], (2.0, 2.1))
    np.testing.assert_array_equal(kk, k)
    np.testing.assert_array_equal(ll, l)


def test_hexagonal_rows_layout():
    lat = Lattice(LatticeKind.HEX_ROWS, 4, 3)
    x, y = lat.positions([0, 1, 0, 0], [0, 0, 1, 2], (2.0, 2.0))
    np.testing.assert_allclose(x, [1.0, 3.0, 0.0, 1.0])
    np.testing.assert_allclose(y, [0.0, 0.0, np.sqrt(3), 2 * np.sqrt(3)])
    # Nearest neighbours are all one pitch apart.
    assert np.hypot(x[2] - x[0], y[2] - y[0]) == pytest.approx(2.0)


def test_raytrix_type_layout():
    """Reference §2.3: even rows 0,1,2,0,...; odd rows 1,2,0,..."""
    layout = TypeLayout.raytrix(3)
    np.testing.assert_array_equal(layout.type_of(np.arange(6), 0), [0, 1, 2, 0, 1, 2])
    np.testing.assert_array_equal(layout.type_of(np.arange(6), 1), [1, 2, 0, 1, 2, 0])
    assert layout.type_of(156, 69) == 1  # the worked example of reference §13.1
    np.testing.assert_array_equal(TypeLayout(0).type_of([0, 5], [3, 2]), [-1, -1])
    np.testing.assert_array_equal(TypeLayout(1).type_of([0, 5], [3, 2]), [0, 0])


def test_bad_lattice_and_layout():
    with pytest.raises(ModelError, match="lattice size must be >= 1x1, got 0x5"):
        Lattice(LatticeKind.ORTHOGONAL, 0, 5)
    with pytest.raises(ModelError, match="must be >= 0"):
        TypeLayout(-1)
