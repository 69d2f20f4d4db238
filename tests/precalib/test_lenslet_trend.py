"""The white images tell refractive micro-lenses from thin ones: traced whites (plenocal's real-optics
tracer, R12-B's central crop, thin main lens), through fused-silica caps on 0.1 mm and through thin
lenslets, pre-calibrated as a user would."""

from __future__ import annotations

import json

import pytest

from plenocal.cli.main import main

FULL_SCALE_CAPS = -0.0193
"""R_b's change at 5 mm measured on the full-scale whites of the same caps (16 rays; ±0.01 %):
the value the crop's estimate, extrapolated from its 3.3 mm, must agree with."""


@pytest.fixture(scope="module")
def trends(tmp_path_factory):
    out = {}
    for kind in ("real", "thin"):
        root = tmp_path_factory.mktemp(f"whites-{kind}")
        assert main(["simulate", "r12-b", "--small", "--lens", "thin", "--lenslets", kind, "--tilt-scale", "1",
                     "--frames", "white,devignetting", "--rays", "16", "--quiet", "-o", str(root / "ds")]) == 0
        assert main(["precalibrate", str(root / "ds"), "-o", str(root / "pre")]) == 0
        doc = json.loads((root / "pre" / "precalibration.json").read_text())
        cam = json.loads((root / "pre" / "camera.json").read_text())
        assert cam["internal_parameters"]["lenslet_trend"]["relative_change"] == doc["lenslet_trend"]["relative_change"]
        out[kind] = doc["lenslet_trend"]
    return out


def test_caps_shrink_the_blur_disc_off_axis_and_thin_lenslets_do_not(trends):
    real, thin = trends["real"], trends["thin"]
    assert 3.0 < real["reach_mm"] < 3.6 and real["radius_mm"] == 5.0
    assert abs(real["mean"] - FULL_SCALE_CAPS) < 3 * real["mean_std"]
    assert real["mean"] < -0.005 and 0.002 < real["mean_std"] < 0.006
    assert abs(thin["mean"]) < 3 * thin["mean_std"]
