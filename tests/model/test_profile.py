"""Depth of field and blur profile against the reference's R12-A numbers (reference §8.2)."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.model.profile import (
    blur_radius_px_at,
    blur_radius_px_vs_virtual_depth,
    depth_of_field,
    focus_plane_mla_mm,
    min_circle_of_confusion_mm,
    mla_to_object_mm,
    object_to_mla_mm,
    virtual_depth,
)


def test_total_depth_of_field_is_papers_14_44_mm(r12a_camera):
    dof = depth_of_field(r12a_camera)
    assert dof.r0_mm == pytest.approx(0.00275)  # s/2: the diffraction limit 2.3 µm is smaller
    assert dof.total_object_mm == pytest.approx(14.44, abs=0.005)


def test_per_type_depth_of_field_matches_reference(r12a_camera):
    dof = depth_of_field(r12a_camera)
    t0, t1, t2 = dof.types
    assert t0.focus_virtual_depth == pytest.approx(2.282, abs=1e-3)
    assert sorted(t0.limits_virtual_depth) == pytest.approx([2.077, 2.531], abs=1e-3)
    assert sorted(t0.limits_object_mm) == pytest.approx([366.24, 372.33], abs=1e-2)
    assert t1.focus_virtual_depth == pytest.approx(2.798, abs=1e-3)
    assert sorted(t1.limits_virtual_depth) == pytest.approx([2.496, 3.182], abs=1e-3)
    assert sorted(t1.limits_object_mm) == pytest.approx([357.90, 366.70], abs=1e-2)
    assert t2.focus_virtual_depth == pytest.approx(2.429, abs=1e-3)
    assert sorted(t2.limits_virtual_depth) == pytest.approx([2.198, 2.713], abs=1e-3)


def test_blur_is_r0_at_the_dof_limits_and_zero_at_focus(r12a_camera):
    dof = depth_of_field(r12a_camera)
    s = r12a_camera.sensor.pixel_size_mm
    for t in dof.types:
        assert blur_radius_px_at(r12a_camera, t.focus_mla_mm, t.type_index) == pytest.approx(0, abs=1e-9)
        for a in t.limits_mla_mm:
            assert abs(blur_radius_px_at(r12a_camera, a, t.type_index)) == pytest.approx(dof.r0_mm / s, rel=1e-9)


def test_object_mla_round_trip_and_virtual_depth(r12a_camera):
    z = np.array([200.0, 369.56, 1000.0, 5000.0])
    a = object_to_mla_mm(r12a_camera, z)
    np.testing.assert_allclose(mla_to_object_mm(r12a_camera, a), z, rtol=1e-12)
    a0 = focus_plane_mla_mm(r12a_camera, 0)
    assert mla_to_object_mm(r12a_camera, a0) == pytest.approx(369.56, abs=0.01)
    v = virtual_depth(r12a_camera, a)
    np.testing.assert_allclose(v, -a / r12a_camera.d_mm)


def test_radius_vs_virtual_depth_is_eq_radiusfinal(r12a_camera):
    """r = (A/2)/υ + A·d/(2f) − A/2 with A = Δ_C (eq:radiusfinal)."""
    v = np.linspace(1.5, 15, 7)
    A = np.mean(r12a_camera.mla.pitch_mm)
    d, f = r12a_camera.d_mm, r12a_camera.mla.focal_lengths_mm[1]
    expected = ((A / 2) / v + A * d / (2 * f) - A / 2) / r12a_camera.sensor.pixel_size_mm
    np.testing.assert_allclose(blur_radius_px_vs_virtual_depth(r12a_camera, v, 1), expected, rtol=1e-12)


def test_diffraction_limit_value(r12a_camera):
    """r* = 1.22·ν·d/A ≈ 2.3 µm at 750 nm (the paper rounds to 2.4 µm); r0 takes s/2."""
    r_star = 1.22 * 750e-6 * r12a_camera.d_mm / np.mean(r12a_camera.mla.pitch_mm)
    assert r_star * 1e3 == pytest.approx(2.33, abs=0.01)
    assert min_circle_of_confusion_mm(r12a_camera, wavelength_mm=2e-3) == pytest.approx(1.22 * 2e-3 * r12a_camera.d_mm / np.mean(r12a_camera.mla.pitch_mm))
