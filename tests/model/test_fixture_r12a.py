"""The model against the reference's R12-A numbers (reference §5.5, §13.1)."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.model import micro_image_centres, project_bap
from plenocal.model.camera import Configuration
from plenocal.model.white import initial_camera, internal_parameters


def test_worked_example_bap_projection(r12a_camera, r12a_poses, r12a_board):
    """Node 26 of frame 15 through micro-image (156, 69): reference §13.1."""
    p_cam = r12a_poses[15].apply(r12a_board.node_points([26]))
    np.testing.assert_allclose(p_cam[0], [37.72664, -3.23458, 241.78777], atol=1e-4)
    u, v, rho = project_bap(r12a_camera, p_cam, [156], [69])[0]
    assert u == pytest.approx(3628.385, abs=1e-3)
    assert v == pytest.approx(1402.678, abs=1e-3)
    assert rho == pytest.approx(-3.5033, abs=5e-4)


def test_worked_example_mic(r12a_camera):
    u, v = micro_image_centres(r12a_camera, [156], [69])[0]
    assert u == pytest.approx(3623.355, abs=1e-3)
    assert v == pytest.approx(1398.072, abs=1e-3)


def test_fixture_distances_and_principal_point(r12a_camera):
    """Legacy D, d and pp of the libpleno intrinsics (reference §3, §12.1)."""
    assert r12a_camera.D_mm == pytest.approx(56.700742, abs=1e-6)
    assert r12a_camera.d_mm == pytest.approx(0.324774, abs=1e-6)
    assert r12a_camera.principal_point_px == pytest.approx((2070.864, 1610.931), abs=1e-3)
    assert r12a_camera.configuration is Configuration.GALILEAN


def test_initial_camera_reproduces_paper_init_column(r12a_params, r12a_camera):
    """Paper Table intrinsics "Init." for R12-A (reference §5.5)."""
    cam, omega = initial_camera(
        r12a_params,
        focal_length_mm=50.0,
        focus_distance_mm=450.0,
        configuration=Configuration.GALILEAN,
        sensor_size_px=(4080, 3068),
        mia=r12a_camera.grid,
    )
    assert cam.d_mm * 1e3 == pytest.approx(318.632, abs=1e-3)
    assert cam.D_mm == pytest.approx(56.6576, abs=1e-4)
    assert omega.lambda_ == pytest.approx(0.994408, abs=1e-6)
    assert omega.micro_lens_pitch_mm * 1e3 == pytest.approx(127.505, abs=1e-3)
    np.testing.assert_allclose(
        np.array(cam.mla.focal_lengths_mm) * 1e3, [578.154, 504.456, 551.667], atol=1e-3
    )
    # The initial MLA projects exactly onto the micro-image grid (exact form of paper §3.3).
    k, l = cam.mla.lattice.all_indices()
    err = micro_image_centres(cam, k, l) - cam.grid.centres(k, l)
    assert np.abs(err).max() < 1e-9


def test_radius_law_inverts_initial_camera(r12a_params, r12a_camera):
    """Ω from the initial camera (eq:miradiusfnumbermc) equals the Ω it was built from."""
    cam, _ = initial_camera(
        r12a_params,
        focal_length_mm=50.0,
        focus_distance_mm=450.0,
        configuration=Configuration.GALILEAN,
        sensor_size_px=(4080, 3068),
        mia=r12a_camera.grid,
    )
    omega = internal_parameters(cam)
    assert omega.m_mm == pytest.approx(r12a_params.m_mm, rel=1e-12)
    np.testing.assert_allclose(omega.q_prime_mm, r12a_params.q_prime_mm, rtol=1e-12)
