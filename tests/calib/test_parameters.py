"""Parameter packing: round trip, names, freezing by group."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.calib.parameters import ParameterLayout
from plenocal.errors import ModelError


def test_pack_unpack_round_trip(r12a_camera, r12a_poses):
    lay = ParameterLayout(r12a_camera, tuple(sorted(r12a_poses)))
    x = lay.pack(r12a_camera, r12a_poses)
    assert x.shape == (lay.size,) == (19 + 6 * 16,)
    cam, poses = lay.unpack(x)
    np.testing.assert_allclose(lay.pack(cam, poses), x, rtol=0, atol=1e-12)
    assert cam.D_mm == pytest.approx(r12a_camera.D_mm, abs=1e-12)
    assert cam.d_mm == pytest.approx(r12a_camera.d_mm, abs=1e-12)
    assert poses[15].allclose(r12a_poses[15], atol=1e-12)


def test_paper_count_of_intrinsics(r12a_camera):
    """16 + I intrinsics (paper eq:completemodel), 17 + I with two pitches."""
    assert ParameterLayout(r12a_camera, ()).n_intrinsics == 16 + 3
    assert ParameterLayout(r12a_camera, (), two_pitches=True).n_intrinsics == 17 + 3


def test_solver_variables_round_trip(r12a_camera, r12a_poses):
    lay = ParameterLayout(r12a_camera, tuple(sorted(r12a_poses)), frozen={"tilt", "distortion"})
    x = lay.pack(r12a_camera, r12a_poses)
    rng = np.random.default_rng(0)
    z = rng.normal(size=int(lay.free_mask.sum()))
    x2 = lay.from_solver(z, x)
    np.testing.assert_allclose(lay.to_solver(x2, x), z, atol=1e-9)
    idx = lay.index
    for n in ("theta_x_rad", "theta_y_rad", "q1", "p2"):
        assert x2[idx[n]] == x[idx[n]]


def test_freeze_by_group_and_name(r12a_camera):
    lay = ParameterLayout(r12a_camera, (0, 1), frozen={"pitch", "tilt", "F_mm"})
    frozen = {n for n, f in zip(lay.names, lay.free_mask, strict=True) if not f}
    assert frozen == {"pitch_mm", "theta_x_rad", "theta_y_rad", "F_mm"}
    with pytest.raises(ModelError, match="unknown parameter group"):
        ParameterLayout(r12a_camera, (0,), frozen={"tilts"})


@pytest.mark.parametrize("two_pitches", [False, True])
def test_d_and_D_at_the_lattice_centre_and_their_gradient(r12a_camera, two_pitches):
    """``d_centre_mm``, ``D_centre_mm``: the MLA plane at the mean micro-lens centre (D_mm and d_mm
    are at the frame origin, a corner: the R12-A file's tilt puts them ~2 % of d apart), and their
    gradient against central differences of the whole vector."""
    from plenocal.calib.parameters import derived_values
    from plenocal.model.projection import micro_lens_centres

    cam = r12a_camera
    lay = ParameterLayout(cam, (), two_pitches=two_pitches)
    x = lay.pack(cam, {})
    der = derived_values(lay, x)
    k, l = cam.mla.lattice.all_indices()
    z = float(micro_lens_centres(lay.unpack_camera(x), k, l)[:, 2].mean())
    assert der["D_centre_mm"][0] == pytest.approx(-z, abs=1e-9)
    assert der["d_centre_mm"][0] == pytest.approx(cam.sensor.distance_mm + z, abs=1e-9)
    assert abs(der["d_centre_mm"][0] / cam.d_mm - 1.0) > 0.005  # the premise: a tilt that matters
    for name in ("D_centre_mm", "d_centre_mm"):
        g = der[name][1]
        for n in ("d_mm", "D_mm", "theta_x_rad", "theta_y_rad", "theta_z_rad", *(("pitch0_mm", "pitch1_mm") if two_pitches else ("pitch_mm",))):
            i = lay.index[n]
            h = 1e-6 if n.startswith("theta") else 1e-7
            xp, xm = x.copy(), x.copy()
            xp[i] += h
            xm[i] -= h
            num = (derived_values(lay, xp)[name][0] - derived_values(lay, xm)[name][0]) / (2 * h)
            assert g[i] == pytest.approx(num, rel=1e-5, abs=1e-9), (name, n)
