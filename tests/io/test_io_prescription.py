"""Lens prescription files (format plenocal-lens): round trip and one-line errors."""

from __future__ import annotations

import json
import math

import pytest

from plenocal.errors import InputFileError
from plenocal.io.prescription import read_prescription, write_prescription
from plenocal.sim.optics.library import DESIGN_NAMES, design_path, load_lens


@pytest.mark.parametrize("name", DESIGN_NAMES)
def test_bundled_designs_round_trip(tmp_path, name):
    p = load_lens(name)
    write_prescription(tmp_path / "lens.json", p)
    assert read_prescription(tmp_path / "lens.json") == p
    assert load_lens(tmp_path / "lens.json") == p


def _write(tmp_path, surfaces, **top):
    doc = {"format": "plenocal-lens", "version": 1, "name": "x", "surfaces": surfaces} | top
    path = tmp_path / "lens.json"
    path.write_text(json.dumps(doc))
    return path


GOOD = [{"radius_mm": 20.0, "thickness_mm": 3.0, "index": 1.5, "semi_diameter_mm": 8.0},
        {"radius_mm": None, "thickness_mm": 40.0, "stop": True}]


@pytest.mark.parametrize(
    ("surfaces", "message"),
    [
        ([], "key 'surfaces' must be a non-empty list"),
        ([GOOD[0]], "exactly one stop surface, got 0"),
        ([GOOD[1] | {"stop": True}, GOOD[1]], "exactly one stop surface, got 2"),
        ([GOOD[0] | {"thickness_mm": -1.0}, GOOD[1]], "key 'surfaces[0].thickness_mm' must be >= 0"),
        ([GOOD[0] | {"radius_mm": 0}, GOOD[1]], "key 'surfaces[0].radius_mm' must be non-zero"),
        ([GOOD[0] | {"semi_diameter_mm": 30.0}, GOOD[1]], "must not exceed |radius_mm|"),
        ([GOOD[0] | {"index": 0.5}, GOOD[1]], "key 'surfaces[0].index' must be >= 1"),
        ([GOOD[0] | {"index": "1.5"}, GOOD[1]], "key 'surfaces[0].index' must be a number"),
        ([GOOD[0] | {"curvature": 0.05}, GOOD[1]], "key 'surfaces[0].curvature' is not a surface key"),
        ([{"kind": "ideal", "focal_length_mm": 50.0, "radius_mm": 10.0, "thickness_mm": 1.0, "stop": True}],
         "key 'surfaces[0].radius_mm' must be absent"),
        ([GOOD[0], GOOD[1] | {"index": 1.5}], "medium after the last surface must be air"),
        ([{"kind": "ideal", "focal_length_mm": 50.0, "thickness_mm": 2.0, "index": 1.5, "stop": True},
          {"thickness_mm": 40.0}], "ideal surface 1 must have air on both sides"),
        ([GOOD[0] | {"kind": "asphere"}, GOOD[1]], "key 'surfaces[0].kind' must be one of sphere, ideal"),
        ([GOOD[0], GOOD[1] | {"stop": "yes"}], "key 'surfaces[1].stop' must be true or false"),
    ],
)
def test_bad_prescriptions_fail_with_one_line_naming_the_file(tmp_path, surfaces, message):
    path = _write(tmp_path, surfaces)
    with pytest.raises(InputFileError) as err:
        read_prescription(path)
    text = str(err.value)
    assert message in text and str(path) in text and "\n" not in text


def test_wrong_format_and_missing_file(tmp_path):
    path = tmp_path / "cam.json"
    path.write_text(json.dumps({"format": "plenocal-camera", "version": 1}))
    with pytest.raises(InputFileError, match="key 'format' must be 'plenocal-lens'"):
        read_prescription(path)
    with pytest.raises(InputFileError, match="does not exist"):
        load_lens(tmp_path / "nope.json")


def test_aberration_terms_round_trip_and_belong_to_ideal_surfaces(tmp_path):
    surfaces = [{"kind": "ideal", "focal_length_mm": 50.0, "thickness_mm": 50.0, "stop": True,
                 "spherical": 2e-5, "field_curvature": 0.01, "distortion": -0.2}]
    p = read_prescription(_write(tmp_path, surfaces))
    assert (p.surfaces[0].spherical, p.surfaces[0].field_curvature, p.surfaces[0].distortion) == (2e-5, 0.01, -0.2)
    write_prescription(tmp_path / "again.json", p)
    assert read_prescription(tmp_path / "again.json") == p
    with pytest.raises(InputFileError, match=r"key 'surfaces\[0\].distortion' is for ideal surfaces only"):
        read_prescription(_write(tmp_path, [GOOD[0] | {"distortion": 0.1}, GOOD[1]]))


def test_plane_and_unlimited_semi_diameter_are_null(tmp_path):
    p = read_prescription(_write(tmp_path, GOOD))
    assert math.isinf(p.surfaces[1].radius_mm) and math.isinf(p.surfaces[1].semi_diameter_mm)
    assert design_path("thin").exists()
