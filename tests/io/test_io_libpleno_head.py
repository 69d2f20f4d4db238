"""libpleno HEAD interop: what HEAD computes from an ``intrinsics.js`` (its saved fields, reference §10.2)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from plenocal.io import libpleno as lp
from plenocal.io.libpleno.head import eigen_euler_xyz, head_fields, head_mode
from plenocal.model.geometry import matrix_from_euler_xyz

# COMPOTE's examples/config/intrinsics.js (HEAD generation, reference §12.3), the fields HEAD's
# computed values depend on, and the values it saved (numbers as COMPOTE spells them).
_I3 = [["1", "0", "0"], ["0", "1", "0"], ["0", "0", "1"]]
COMPOTE = {
    "I": "3",
    "dist_focus": "450",
    "main_lens": {"aperture": "4", "f": "49.885285868753407", "pose": {"rotation": _I3, "translation": [["0", "0", "0"]]}},
    "mla": {
        "focal_lengths": ["0.58266966865506242", "0.5240249316658897", "0.56057361553341034"],
        "mesh": {
            "geometry": "1",
            "height": "152",
            "width": "176",
            "pitch": [["0.12744360322648965", "0.1274552010932988"]],
            "pose": {
                "rotation": [
                    ["0.99999996274709313", "-2.9605181497945933e-05", "0.00027134729849787514"],
                    ["2.9499663366578723e-05", "0.9999999239575913", "0.00038886319501355102"],
                    ["-0.00027135879022924654", "-0.00038885517587347693", "0.99999988757802039"],
                ],
                "translation": [["-10.932145543311453", "-7.9959730514471792", "-56.859984368126192"]],
            },
        },
    },
    "sensor": {
        "height": "3068",
        "width": "4080",
        "scale": "0.0054999999999999997",
        "pose": {"rotation": _I3, "translation": [["-11.003589891607232", "-8.1179860156513062", "-57.197092795438614"]]},
    },
    "scaling": {"a": "0.00079708898900074192", "b": "0.62515220840000596", "c": "31.51235516605901"},
    "mode": "2",
    "D": "56.859967077387466",
    "d": "0.33712571805114777",
    "pp": [["2078.3472924350485", "1591.0025426088534"]],
    "Rxyz": [["0.00038885519998996276", "-0.00027135879355952275", "-2.9499664458583925e-05"]],
    "focal_planes": ["374.25376598233777", "365.64115225753659", "371.48899381538922"],
}

def _floats(x) -> list[float]:
    return [float(v) for v in np.asarray(x, dtype=object).ravel()]


# --- HEAD's saved fields ------------------------------------------------------------------
def test_head_fields_reproduce_compote(tmp_path: Path):
    """D, d, pp, Rxyz, mode and focal_planes (with HEAD's double depth scaling) as COMPOTE saved them, to the bit."""
    path = tmp_path / "intrinsics.js"
    path.write_text(json.dumps(COMPOTE))
    doc = lp.read_camera_config(path)
    scaling = tuple(float(COMPOTE["scaling"][k]) for k in "abc")
    fields = head_fields(doc, scaling=scaling)
    for key in ("D", "d", "pp", "Rxyz", "focal_planes"):
        assert _floats(fields[key]) == _floats(COMPOTE[key]), key
    assert head_mode(doc) == int(COMPOTE["mode"])


def test_eigen_euler_angles_range_and_round_trip():
    rng = np.random.default_rng(0)
    for angles in [(8.431e-4, -6.371e-4, -3.09e-5), (-8.431e-4, 6.371e-4, 3.09e-5), *rng.uniform(-1.5, 1.5, (20, 3))]:
        R = matrix_from_euler_xyz(angles)
        e = eigen_euler_xyz(R)
        assert 0.0 <= e[0] <= math.pi and abs(e[1]) <= math.pi and abs(e[2]) <= math.pi
        np.testing.assert_allclose(matrix_from_euler_xyz(e), R, atol=1e-14)
        if angles[0] > 0:
            np.testing.assert_allclose(e, angles, atol=1e-15)
    # θx < 0: Eigen's first angle is shifted by π (what HEAD writes as Rxyz)
    e = eigen_euler_xyz(matrix_from_euler_xyz((-1e-3, 2e-3, 3e-3)))
    np.testing.assert_allclose(e, (math.pi - 1e-3, math.pi - 2e-3, 3e-3 - math.pi), atol=1e-14)
